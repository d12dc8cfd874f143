//! The CLI client of `weir serve`: `weir upload`, `submit`, `list`, `status`, `savepoint`,
//! `stop`, `cancel`, `delete`, `rescale`, `exceptions`, `components`. The server is `--server` (or
//! `WEIR_SERVER`), the token `WEIR_TOKEN`. Errors are the server's own message and code, never
//! a stack trace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

use weir::service::ServiceError;
use weir::service::api::{
    ComponentInfo, Exceptions, JobDetails, JobOverview, Operation, OperationStatus, RescaleRequest,
    RollbackRequest, SavepointRequest, StopRequest, SubmitRequest, UpgradeRequest,
};

/// A connection to a server.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(server: &str, token: Option<String>) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(600)))
            .build()
            .new_agent();
        Client {
            agent,
            base: server.trim_end_matches('/').to_string(),
            token,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Answers a response: the body as `T`, or the server's error.
    fn answer<T: DeserializeOwned>(
        &self,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<T> {
        let mut response = result.map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the weir server at {} ({e}); start one with `weir serve`, or name \
                 it with --server or WEIR_SERVER",
                self.base
            )
        })?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .context("the server's answer was cut off")?;
        if status.is_success() {
            return serde_json::from_str(if text.is_empty() { "null" } else { &text })
                .with_context(|| format!("the server's answer is not what weir expects: {text}"));
        }
        match serde_json::from_str::<ServiceError>(&text) {
            Ok(e) => bail!("{} ({}, HTTP {})", e.message, code(&e), status.as_u16()),
            Err(_) => bail!("the server answered HTTP {status}: {text}"),
        }
    }

    /// `request` with the token, if there is one.
    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => request.header("Authorization", format!("Bearer {t}")),
            None => request,
        }
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.answer(self.authorized(self.agent.get(self.url(path))).call())
    }

    fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> anyhow::Result<T> {
        let request = self.authorized(self.agent.post(self.url(path)));
        self.answer(request.send_json(body))
    }

    /// Uploads the component at `path`.
    pub fn upload(
        &self,
        path: &Path,
        name: Option<&str>,
        version: Option<&str>,
    ) -> anyhow::Result<ComponentInfo> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut request = self
            .agent
            .post(self.url("/v1/components"))
            .header("Content-Type", "application/wasm");
        if let Some(name) = name {
            request = request.query("name", name);
        }
        if let Some(version) = version {
            request = request.query("version", version);
        }
        self.answer(self.authorized(request).send(&bytes[..]))
            .with_context(|| format!("upload of {}", path.display()))
    }

    /// Submits the spec at `spec`: operators whose `wasm` is a local file are uploaded first
    /// and named by their hash; relative paths resolve against the spec's directory.
    pub fn submit(
        &self,
        spec: &Path,
        savepoint: Option<PathBuf>,
        allow_non_restored_state: bool,
    ) -> anyhow::Result<JobOverview> {
        let text = std::fs::read_to_string(spec)
            .with_context(|| format!("cannot read {}", spec.display()))?;
        let mut table: toml::Table = text
            .parse()
            .with_context(|| format!("{} is not valid TOML", spec.display()))?;
        let dir = std::path::absolute(spec)?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        if let Some(toml::Value::Array(operators)) = table.get_mut("operator") {
            for op in operators.iter_mut().filter_map(|o| o.as_table_mut()) {
                let Some(wasm) = op.get("wasm").and_then(|w| w.as_str()) else {
                    continue;
                };
                let name = op.get("name").and_then(|n| n.as_str()).unwrap_or_default();
                if let Some(uploaded) = self
                    .uploaded(wasm, &dir)
                    .with_context(|| format!("operator {name:?}"))?
                {
                    op.insert("wasm".into(), uploaded.into());
                }
            }
        }
        let savepoint = match savepoint {
            Some(p) => Some(std::path::absolute(p)?.display().to_string()),
            None => None,
        };
        let request = SubmitRequest {
            spec: serde_json::Value::String(toml::to_string(&table)?),
            base_dir: Some(dir.display().to_string()),
            savepoint,
            allow_non_restored_state,
        };
        self.post("/v1/jobs", &request)
    }

    /// A component named `component` in a spec or an upgrade: a local `.wasm` file (relative
    /// to `dir`) is uploaded and named by its hash (`Some`); a component of the server
    /// (`sha256:<hex>`, `name@version`, `name`) stays as it is (`None`).
    pub fn uploaded(&self, component: &str, dir: &Path) -> anyhow::Result<Option<String>> {
        let local = dir.join(component);
        if component.starts_with("sha256:") {
            return Ok(None);
        }
        if local.is_file() {
            let info = self.upload(&local, None, None)?;
            return Ok(Some(format!("sha256:{}", info.sha256)));
        }
        if component.ends_with(".wasm") || component.contains('/') {
            bail!(
                "{} is no file; build it first, or name a component of the server by \
                 `sha256:<hex>`, `name@version` or `name`",
                local.display()
            );
        }
        Ok(None)
    }

    pub fn list(&self) -> anyhow::Result<Vec<JobOverview>> {
        self.get("/v1/jobs")
    }

    pub fn status(&self, job: &str) -> anyhow::Result<JobDetails> {
        self.get(&format!("/v1/jobs/{job}"))
    }

    pub fn exceptions(&self, job: &str) -> anyhow::Result<Exceptions> {
        self.get(&format!("/v1/jobs/{job}/exceptions"))
    }

    pub fn components(&self) -> anyhow::Result<Vec<ComponentInfo>> {
        self.get("/v1/components")
    }

    pub fn delete_job(&self, job: &str) -> anyhow::Result<()> {
        let request = self.agent.delete(self.url(&format!("/v1/jobs/{job}")));
        self.answer(self.authorized(request).call())
    }

    pub fn cancel(&self, job: &str) -> anyhow::Result<JobOverview> {
        self.post(&format!("/v1/jobs/{job}/cancel"), &serde_json::json!({}))
    }

    pub fn savepoint(&self, job: &str, request_id: Option<String>) -> anyhow::Result<Operation> {
        let op = self.post(
            &format!("/v1/jobs/{job}/savepoints"),
            &SavepointRequest { request_id },
        )?;
        self.wait(job, op)
    }

    pub fn stop(&self, job: &str, request: StopRequest) -> anyhow::Result<Operation> {
        let op = self.post(&format!("/v1/jobs/{job}/stop"), &request)?;
        self.wait(job, op)
    }

    pub fn rescale(&self, job: &str, request: RescaleRequest) -> anyhow::Result<Operation> {
        let op = self.post(&format!("/v1/jobs/{job}/rescale"), &request)?;
        self.wait(job, op)
    }

    pub fn upgrade(&self, job: &str, request: UpgradeRequest) -> anyhow::Result<Operation> {
        let op = self.post(&format!("/v1/jobs/{job}/upgrade"), &request)?;
        self.wait(job, op)
    }

    pub fn roll_back(&self, job: &str) -> anyhow::Result<Operation> {
        let op = self.post(
            &format!("/v1/jobs/{job}/rollback"),
            &RollbackRequest::default(),
        )?;
        self.wait(job, op)
    }

    /// Polls operation `op` until it is done.
    fn wait(&self, job: &str, mut op: Operation) -> anyhow::Result<Operation> {
        while op.status == OperationStatus::InProgress {
            std::thread::sleep(Duration::from_millis(100));
            op = self.get(&format!("/v1/jobs/{job}/operations/{}", op.request_id))?;
        }
        match op.status {
            OperationStatus::Failed => bail!(
                "{:?} {} failed: {}",
                op.kind,
                op.request_id,
                op.error.as_deref().unwrap_or("no reason given")
            ),
            _ => Ok(op),
        }
    }
}

fn code(e: &ServiceError) -> String {
    serde_json::to_value(e.code)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// `--json`: the value as JSON; else `table`.
pub fn print<T: Serialize>(json: bool, value: &T, table: impl FnOnce(&T) -> String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).expect("answers serialize")
        );
    } else {
        print!("{}", table(value));
    }
}

/// A job list as a table.
pub fn jobs_table(jobs: &Vec<JobOverview>) -> String {
    let mut s = format!(
        "{:<32}  {:<20} {:<11} {:>8}\n",
        "id", "name", "status", "restarts"
    );
    for j in jobs {
        s += &format!(
            "{:<32}  {:<20} {:<11} {:>8}\n",
            j.id,
            j.name,
            status_name(&j.status),
            j.restarts
        );
    }
    s
}

fn status_name<T: Serialize>(status: &T) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// A job's status as a table.
pub fn details_table(d: &JobDetails) -> String {
    let o = &d.overview;
    let mut s = format!(
        "job {} \"{}\": {} ({} restarts)\n",
        o.id,
        o.name,
        status_name(&o.status),
        o.restarts
    );
    if !d.vertices.is_empty() {
        s += &format!(
            "  {:<16} {:>8} {:>4} {:>12} {:>12} {:>10} {:>10} {:>14}\n",
            "vertex", "role", "p", "records in", "records out", "in/s", "out/s", "watermark"
        );
        for v in &d.vertices {
            let watermark = v.watermark.map_or("-".to_string(), |w| w.to_string());
            s += &format!(
                "  {:<16} {:>8} {:>4} {:>12} {:>12} {:>10.0} {:>10.0} {:>14}\n",
                v.name,
                v.role,
                v.parallelism,
                v.records_in,
                v.records_out,
                v.records_in_per_second,
                v.records_out_per_second,
                watermark
            );
        }
    }
    let c = &d.checkpoints;
    s += &format!(
        "  checkpoints: {} completed, {} failed",
        c.completed, c.failed
    );
    if let Some(last) = &c.last {
        s += &format!(
            "; last {} in {} ms, {} bytes",
            last.id, last.duration_ms, last.size_bytes
        );
    }
    s.push('\n');
    for op in &d.operations {
        s += &format!(
            "  {} {}: {}{}\n",
            status_name(&op.kind),
            op.request_id,
            status_name(&op.status),
            op.savepoint
                .as_ref()
                .map(|p| format!(" ({p})"))
                .or_else(|| op.error.as_ref().map(|e| format!(": {e}")))
                .unwrap_or_default()
        );
    }
    s
}

/// The exception history as lines.
pub fn exceptions_table(e: &Exceptions) -> String {
    let mut s = String::new();
    for x in &e.exceptions {
        let time = humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + Duration::from_millis(x.time_ms),
        );
        s += &format!(
            "{time} {}{}: {}\n",
            if x.fatal { "failed" } else { "restarted" },
            x.kind
                .as_ref()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default(),
            x.message
        );
    }
    if s.is_empty() {
        s = "no failures\n".into();
    }
    s
}

/// Components as a table.
pub fn components_table(components: &Vec<ComponentInfo>) -> String {
    let mut s = format!(
        "{:<64}  {:>10}  {:<24} used by\n",
        "sha256", "bytes", "name"
    );
    for c in components {
        let name = match (&c.name, &c.version) {
            (Some(n), Some(v)) => format!("{n}@{v}"),
            (Some(n), None) => n.clone(),
            _ => "-".into(),
        };
        s += &format!(
            "{:<64}  {:>10}  {:<24} {}\n",
            c.sha256,
            c.size_bytes,
            name,
            c.used_by.join(", ")
        );
    }
    s
}
