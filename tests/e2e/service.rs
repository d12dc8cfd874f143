//! `weir serve` through its HTTP API, against the real binary: a job's whole life (upload,
//! submit, savepoints, stop, restore elsewhere), rescales, a SIGKILL of the server with three
//! jobs running, a hostile job beside a healthy one, and every bad request's 4xx. Outputs are
//! compared with `weir run` of the same job without interruptions.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::exactly_once::tally;
use crate::postgres::{CONNECTION, client, table};
use crate::support::{Workspace, operator, part_files, repo, toml_path, toml_str, weir, weir_bin};

pub(crate) const TOKEN: &str = "test-token-full-access-0123456789";
const READ_TOKEN: &str = "test-token-read-only-0123456789";

/// A `weir serve` process on a port of its own.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: String,
    data: PathBuf,
    log: PathBuf,
    agent: ureq::Agent,
}

impl Server {
    /// Runs the client command `weir ARGS` against this server (with its address and token).
    pub(crate) fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(weir_bin())
            .args(args)
            .env("WEIR_SERVER", format!("http://{}", self.addr))
            .env("WEIR_TOKEN", TOKEN)
            .output()
            .expect("run the weir client")
    }

    /// Starts `weir serve` on `data` with the test's tokens and `extra` arguments.
    pub(crate) fn start(ws: &Workspace, data: &Path, extra: &[&str]) -> Server {
        let tokens = ws.write("tokens", format!("{TOKEN}\n{READ_TOKEN} read-only\n"));
        let log = ws.path(&format!("serve-{}.log", fastrand::u32(..)));
        let mut child = Command::new(weir_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .arg("--tokens")
            .arg(&tokens)
            .args(extra)
            .env("WEIR_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start weir serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| {
                panic!(
                    "weir serve did not say where it listens: {line:?}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .to_string();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent();
        Server {
            child,
            addr,
            data: data.to_path_buf(),
            log,
            agent,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `method path` with `token` and a JSON `body`: the status and the JSON answer.
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = self.url(path);
        let auth = token.map(|t| format!("Bearer {t}"));
        let result = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            "DELETE" => {
                let mut r = self.agent.delete(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = self.agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send_json(body.unwrap_or(json!({})))
            }
        };
        let mut response =
            result.unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.log()));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
        };
        (status, value)
    }

    /// `call` with the full token, asserting `expected` status.
    pub(crate) fn ok(&self, method: &str, path: &str, body: Option<Value>, expected: u16) -> Value {
        let (status, value) = self.call(method, path, Some(TOKEN), body);
        assert_eq!(status, expected, "{method} {path}: {value}\n{}", self.log());
        value
    }

    /// Uploads `bytes` as a component with `query`.
    pub(crate) fn upload(&self, bytes: &[u8], query: &str, token: Option<&str>) -> (u16, Value) {
        let mut r = self
            .agent
            .post(self.url(&format!("/v1/components{query}")))
            .header("Content-Type", "application/wasm");
        if let Some(t) = token {
            r = r.header("Authorization", format!("Bearer {t}"));
        }
        let mut response = r.send(bytes).unwrap();
        let status = response.status().as_u16();
        let value = response.body_mut().read_json().unwrap_or(Value::Null);
        (status, value)
    }

    /// Uploads the test component `name`; its sha256.
    pub(crate) fn component(&self, name: &str) -> String {
        let (status, info) = self.upload(&std::fs::read(operator(name)).unwrap(), "", Some(TOKEN));
        assert_eq!(status, 201, "{info}");
        info["sha256"].as_str().unwrap().to_string()
    }

    /// Uploads the word count's two components (again: an upload of the same bytes answers
    /// the component there); their references for a spec.
    pub(crate) fn word_count_components(&self) -> (String, String) {
        let reference = |name| format!("sha256:{}", self.component(name));
        (reference("wordcount_split"), reference("wordcount_count"))
    }

    pub(crate) fn submit(&self, request: Value) -> String {
        let job = self.ok("POST", "/v1/jobs", Some(request), 201);
        job["id"].as_str().unwrap().to_string()
    }

    pub(crate) fn job(&self, id: &str) -> Value {
        self.ok("GET", &format!("/v1/jobs/{id}"), None, 200)
    }

    /// Waits until job `id`'s status is `status`.
    pub(crate) fn wait_status(&self, id: &str, status: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let job = self.job(id);
            if job["status"] == status {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} is {} after {limit:?}, not {status}: {job}\n{}",
                job["status"],
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until job `id` has completed `n` checkpoints in its current run.
    pub(crate) fn wait_checkpoints(&self, id: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.job(id)["checkpoints"]["completed"]
            .as_u64()
            .unwrap_or(0)
            < n
        {
            assert!(Instant::now() < deadline, "no checkpoints: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls operation `request_id` of job `id` until it is done; the operation.
    pub(crate) fn wait_operation(&self, id: &str, request_id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let op = self.ok(
                "GET",
                &format!("/v1/jobs/{id}/operations/{request_id}"),
                None,
                200,
            );
            if op["status"] != "in_progress" {
                return op;
            }
            assert!(
                Instant::now() < deadline,
                "operation {request_id} hangs: {op}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Ctrl-C, and waits for the server to exit.
    pub(crate) fn interrupt(mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A word count over the generator's `count` lines (at `rate` lines/s, if any), the count at
/// parallelism `count_p`, into a file sink in `out`; components by reference (`split`, `count`).
pub(crate) fn word_count(
    name: &str,
    lines: u64,
    rate: Option<u64>,
    split: &str,
    count: &str,
    count_p: u32,
    out: &Path,
) -> String {
    let rate = rate.map(|r| format!("rate = {r}\n")).unwrap_or_default();
    format!(
        r#"[job]
name = "{name}"
parallelism = 2

[checkpoint]
interval = "100ms"

[[source]]
name = "lines"
type = "generator"
mode = "words"
vocabulary = 3000
count = {lines}
{rate}
[[operator]]
name = "split"
uid = "split"
wasm = {split}
input = "lines"
edge = "rebalance"

[[operator]]
name = "count"
uid = "count"
wasm = {count}
input = "split"
edge = "key_by"
parallelism = {count_p}

[[sink]]
name = "out"
type = "file"
input = "count"
edge = "key_by"
path = {out}
format = "key_value"
"#,
        split = toml_str(split),
        count = toml_str(count),
        out = toml_path(out),
    )
}

/// The committed lines of the file sink in `dir`, sorted.
pub(crate) fn committed(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = part_files(dir).into_values().flatten().collect();
    lines.sort_unstable();
    lines
}

/// What `weir run` of the word count without a rate limit commits: the reference output.
pub(crate) fn reference(ws: &Workspace, lines: u64) -> Vec<String> {
    let out = ws.path("reference-out");
    let spec = word_count(
        "reference",
        lines,
        None,
        operator("wordcount_split").to_str().unwrap(),
        operator("wordcount_count").to_str().unwrap(),
        2,
        &out,
    )
    .replace(
        "[checkpoint]\ninterval = \"100ms\"\n",
        &format!(
            "[checkpoint]\ninterval = \"100ms\"\ndir = {}\n",
            toml_path(&ws.path("reference-chk"))
        ),
    );
    let path = ws.write("reference.toml", spec);
    let run = weir(&["run", "--no-progress"], &path);
    assert!(run.success(), "{run}");
    let lines = committed(&out);
    assert!(!lines.is_empty());
    lines
}

#[test]
fn a_jobs_whole_life_through_the_api() {
    const LINES: u64 = 120_000;
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    assert_eq!(server.call("GET", "/health", None, None).0, 200);
    let split = server.component("wordcount_split");
    // Named, so that the spec can say `count@1`.
    let (status, count) = server.upload(
        &std::fs::read(operator("wordcount_count")).unwrap(),
        "?name=count&version=1",
        Some(TOKEN),
    );
    assert_eq!(status, 201, "{count}");
    assert_eq!(count["world"], "weir:stream/processor@0.2.0");
    assert!(
        count["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i.as_str().unwrap().starts_with("weir:stream/state"))
    );

    // Submitted as a JSON object, at 20k lines/s: six seconds of input.
    let out = ws.path("out");
    let spec: toml::Table = word_count(
        "life",
        LINES,
        Some(20_000),
        &format!("sha256:{split}"),
        "count@1",
        2,
        &out,
    )
    .parse()
    .unwrap();
    let id = server.submit(json!({ "spec": spec }));
    server.wait_status(&id, "running", Duration::from_secs(60));
    server.wait_checkpoints(&id, 2);
    // A running job is not deleted.
    let (status, refused) = server.call("DELETE", &format!("/v1/jobs/{id}"), Some(TOKEN), None);
    assert_eq!(status, 409, "{refused}");
    assert!(
        (refused["message"].as_str().unwrap()).contains("cancel or stop it first"),
        "{refused}"
    );

    // A savepoint, asked twice with one request id: one savepoint.
    let body = json!({ "request_id": "first" });
    let op = server.ok(
        "POST",
        &format!("/v1/jobs/{id}/savepoints"),
        Some(body.clone()),
        202,
    );
    assert_eq!(op["kind"], "savepoint");
    let again = server.ok(
        "POST",
        &format!("/v1/jobs/{id}/savepoints"),
        Some(body),
        202,
    );
    assert_eq!(again["request_id"], "first");
    let done = server.wait_operation(&id, "first");
    assert_eq!(done["status"], "completed", "{done}");
    let first = PathBuf::from(done["savepoint"].as_str().unwrap());
    assert!(first.join("_metadata").is_file());
    let savepoints = server.job(&id)["operations"].as_array().unwrap().len();
    assert_eq!(
        savepoints, 1,
        "a repeated request takes no second savepoint"
    );

    // Stop with a savepoint. A rescale asked while it stops is refused: it would start the
    // job again after the stop.
    let body = json!({ "request_id": "halt" });
    let op = server.ok(
        "POST",
        &format!("/v1/jobs/{id}/stop"),
        Some(body.clone()),
        202,
    );
    let (status, refused) = server.call(
        "POST",
        &format!("/v1/jobs/{id}/rescale"),
        Some(TOKEN),
        Some(json!({ "parallelism": { "count": 3 } })),
    );
    // (Or, had the stop been done already, because the job is not running.)
    let message = refused.to_string();
    assert!(
        status == 409
            && (message.contains("the job is stopping") || message.contains("not running")),
        "{status} {refused}"
    );
    let stop = server.wait_operation(&id, op["request_id"].as_str().unwrap());
    assert_eq!(stop["status"], "completed", "{stop}");
    let job = server.wait_status(&id, "stopped", Duration::from_secs(60));
    assert!(job["ended_ms"].is_u64());
    // Asked again with its request id once the job has stopped: the same operation.
    let again = server.ok("POST", &format!("/v1/jobs/{id}/stop"), Some(body), 202);
    assert_eq!(again, stop);
    // Anything else says how to go on.
    let path = format!("/v1/jobs/{id}/savepoints");
    let (status, refused) = server.call("POST", &path, Some(TOKEN), Some(json!({})));
    assert_eq!(status, 409, "{refused}");
    assert!(
        (refused["message"].as_str().unwrap()).contains("submit it again with `savepoint`"),
        "{refused}"
    );
    let history = server.ok("GET", &format!("/v1/jobs/{id}/checkpoints"), None, 200);
    assert!(
        history["history"].as_array().unwrap().len() >= 3,
        "{history}"
    );
    let exceptions = server.ok("GET", &format!("/v1/jobs/{id}/exceptions"), None, 200);
    assert_eq!(exceptions["exceptions"], json!([]));

    // Restored into another job: the count at parallelism 3, on RocksDB, no rate limit.
    let mut spec: toml::Table = word_count(
        "life-2",
        LINES,
        None,
        &format!("sha256:{split}"),
        "count",
        3,
        &out,
    )
    .parse()
    .unwrap();
    spec.insert(
        "state".into(),
        "backend = \"rocksdb\""
            .parse::<toml::Table>()
            .unwrap()
            .into(),
    );
    let second = server.submit(json!({
        "spec": toml::to_string(&spec).unwrap(),
        "savepoint": stop["savepoint"],
    }));
    let job = server.wait_status(&second, "finished", Duration::from_secs(120));
    assert_eq!(job["restored_from_savepoint"], stop["savepoint"]);
    let used = server.ok("GET", &format!("/v1/components/{split}"), None, 200);
    assert_eq!(used["used_by"].as_array().unwrap().len(), 2, "{used}");

    assert!(
        committed(&out) == reference(&ws, LINES),
        "the output of a run without stops"
    );
    let listed = server.ok("GET", "/v1/jobs", None, 200);
    assert_eq!(listed.as_array().unwrap().len(), 2);

    // The components stay while a job uses them; ended jobs are deleted, their savepoints
    // kept, and then the components go too.
    let (status, refused) = server.call(
        "DELETE",
        &format!("/v1/components/{split}"),
        Some(TOKEN),
        None,
    );
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains(&id),
        "{refused}"
    );
    let job_dir = ws.path("data/jobs").join(&id);
    assert!(job_dir.join("checkpoints").is_dir());
    server.ok("DELETE", &format!("/v1/jobs/{id}"), None, 204);
    assert!(!job_dir.exists(), "the job's checkpoints stayed");
    assert!(first.join("_metadata").is_file(), "its savepoint went");
    assert_eq!(
        server
            .call("GET", &format!("/v1/jobs/{id}"), Some(TOKEN), None)
            .0,
        404
    );
    let used = server.ok("GET", &format!("/v1/components/{split}"), None, 200);
    assert_eq!(used["used_by"], json!([second]), "{used}");
    server.ok("DELETE", &format!("/v1/jobs/{second}"), None, 204);
    server.ok("DELETE", &format!("/v1/components/{split}"), None, 204);
    assert_eq!(server.ok("GET", "/v1/jobs", None, 200), json!([]));
    // Nor does a delete come back with the next start, one cut off (a directory being
    // removed) included.
    std::fs::create_dir_all(ws.path("data/jobs/.deleted-0123/checkpoints")).unwrap();
    server.kill();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    assert_eq!(server.ok("GET", "/v1/jobs", None, 200), json!([]));
    assert!(!ws.path("data/jobs/.deleted-0123").exists());
}

#[test]
fn rescaling_a_running_job_up_and_down_keeps_its_output_exactly_once() {
    const LINES: u64 = 160_000;
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let (split, count) = server.word_count_components();
    let out = ws.path("out");
    let spec = word_count("rescaled", LINES, Some(20_000), &split, &count, 2, &out);
    let id = server.submit(json!({ "spec": spec }));
    for p in [4, 1] {
        server.wait_status(&id, "running", Duration::from_secs(60));
        server.wait_checkpoints(&id, 2);
        let request = json!({ "parallelism": { "count": p } });
        let op = server.ok(
            "POST",
            &format!("/v1/jobs/{id}/rescale"),
            Some(request),
            202,
        );
        let done = server.wait_operation(&id, op["request_id"].as_str().unwrap());
        assert_eq!(done["status"], "completed", "{done}");
        // The savepoint it restarted from.
        let savepoint = Path::new(done["savepoint"].as_str().expect("a savepoint"));
        assert!(savepoint.join("_metadata").is_file(), "{done}");
        let job = server.job(&id);
        let count = job["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "count")
            .cloned();
        // The rescale completes once the job runs again, at the new parallelism.
        assert_eq!(job["status"], "running", "{job}");
        assert_eq!(count.unwrap()["parallelism"], p, "{job}");
    }
    // A source cannot rescale: its position is per subtask.
    let (status, error) = server.call(
        "POST",
        &format!("/v1/jobs/{id}/rescale"),
        Some(TOKEN),
        Some(json!({ "parallelism": { "lines": 3 } })),
    );
    assert!(status == 400 || status == 409, "{status} {error}");
    server.wait_status(&id, "finished", Duration::from_secs(120));
    assert!(
        committed(&out) == reference(&ws, LINES),
        "the output of a run without rescales"
    );
}

#[test]
fn a_killed_server_resumes_its_three_jobs_exactly_once() {
    const LINES: u64 = 60_000;
    let ws = Workspace::new();
    let data = ws.path("data");
    let server = Server::start(&ws, &data, &[]);
    let (split, count) = server.word_count_components();
    // A job that finishes before the kill keeps its status.
    let early = server.submit(json!({ "spec": word_count("early", 1000, None, &split, &count, 2, &ws.path("out-early")) }));
    server.wait_status(&early, "finished", Duration::from_secs(60));

    let files: Vec<(String, PathBuf)> = (0..2)
        .map(|i| {
            let out = ws.path(&format!("out-{i}"));
            let spec = word_count(
                &format!("file-{i}"),
                LINES,
                Some(15_000),
                &split,
                &count,
                2,
                &out,
            );
            (server.submit(json!({ "spec": spec })), out)
        })
        .collect();
    let mut db = client();
    let table = table(&mut db, "serve", "word text primary key, count bigint");
    let pg_spec = word_count(
        "pg",
        LINES,
        Some(15_000),
        &split,
        &count,
        2,
        &ws.path("unused"),
    )
    .split("[[sink]]")
    .next()
    .unwrap()
    .to_string()
        + &format!(
            "[[sink]]\nname = \"out\"\ntype = \"postgres\"\ninput = \"count\"\nedge = \"key_by\"\nconnection = {}\ntable = \"{table}\"\nmode = \"upsert\"\nkey = [\"word\"]\nformat = \"key_value\"\ncolumns = [\"word\", \"count\"]\n",
            toml_str(CONNECTION)
        );
    let pg = server.submit(json!({ "spec": pg_spec }));
    for (id, _) in &files {
        server.wait_checkpoints(id, 3);
    }
    server.wait_checkpoints(&pg, 3);
    server.kill();

    let server = Server::start(&ws, &data, &[]);
    assert_eq!(
        server.job(&early)["status"],
        "finished",
        "an ended job keeps its status"
    );
    for id in files.iter().map(|(id, _)| id).chain([&pg]) {
        server.wait_status(id, "finished", Duration::from_secs(120));
    }
    let expected = reference(&ws, LINES);
    for (_, out) in &files {
        assert!(
            committed(out) == expected,
            "the output of a run without the kill"
        );
    }
    // The upsert table holds each word's final count.
    let mut finals = std::collections::BTreeMap::new();
    for line in &expected {
        let (word, n) = line.split_once('\t').unwrap();
        let n: i64 = n.parse().unwrap();
        let e = finals.entry(word.to_string()).or_insert(0);
        *e = (*e).max(n);
    }
    let rows: std::collections::BTreeMap<String, i64> = db
        .query(&format!("SELECT word, count FROM {table}"), &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        rows == finals,
        "the PostgreSQL table holds every word's count once"
    );
    assert_eq!(server.interrupt().code(), Some(0));
}

#[test]
fn a_job_waiting_to_restart_is_stopped_without_a_savepoint_and_refuses_one() {
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let hostile = server.component("weir_test_hostile");
    // It traps on its first record and waits an hour to restart.
    let spec = format!(
        "[job]\nname = \"restarting\"\n[checkpoint]\ninterval = \"200ms\"\n\
         [restart]\nstrategy = \"fixed_delay\"\ndelay = \"1h\"\n\
         [[source]]\nname = \"in\"\ntype = \"generator\"\nrate = 100\n\
         [[operator]]\nname = \"bad\"\nuid = \"bad\"\nwasm = \"sha256:{hostile}\"\ninput = \"in\"\n\
         config = {{ trap_after_ms = 0 }}\n\
         [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"bad\"\n"
    );
    let id = server.submit(json!({ "spec": spec }));
    server.wait_status(&id, "restarting", Duration::from_secs(60));
    // A stop with a savepoint, or a rescale, would end it without one.
    for (path, body) in [
        ("stop", json!({})),
        ("rescale", json!({ "parallelism": { "bad": 2 } })),
    ] {
        let path = format!("/v1/jobs/{id}/{path}");
        let (status, refused) = server.call("POST", &path, Some(TOKEN), Some(body));
        assert_eq!(status, 409, "{path}: {refused}");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("a savepoint needs it running") && message.contains("--no-savepoint"),
            "{path}: {refused}"
        );
    }
    let body = json!({ "savepoint": false, "request_id": "halt" });
    server.ok("POST", &format!("/v1/jobs/{id}/stop"), Some(body), 202);
    let stop = server.wait_operation(&id, "halt");
    assert_eq!(stop["status"], "completed", "{stop}");
    server.wait_status(&id, "stopped", Duration::from_secs(60));
}

#[test]
fn a_hostile_job_does_not_disturb_a_healthy_one() {
    const LINES: u64 = 40_000;
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let (split, count) = server.word_count_components();
    let hostile = server.component("weir_test_hostile");
    let out = ws.path("out");
    let healthy = server.submit(
        json!({ "spec": word_count("healthy", LINES, Some(20_000), &split, &count, 2, &out) }),
    );
    let mut hostiles = Vec::new();
    for (i, command) in ["spin", "hog"].iter().enumerate() {
        let input = ws.write(&format!("hostile-{i}.txt"), format!("ok\n{command}\n"));
        let spec = format!(
            "[job]\nname = \"hostile-{i}\"\n[limits]\ncall_deadline = \"1s\"\nmemory = \"64 MiB\"\n\
             [restart]\nstrategy = \"none\"\n\
             [[source]]\nname = \"in\"\ntype = \"file\"\npath = {}\n\
             [[operator]]\nname = \"bad\"\nuid = \"bad\"\nwasm = \"sha256:{hostile}\"\ninput = \"in\"\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"bad\"\n",
            toml_path(&input)
        );
        hostiles.push(server.submit(json!({ "spec": spec })));
    }
    for id in &hostiles {
        server.wait_status(id, "failed", Duration::from_secs(60));
        let e = server.ok("GET", &format!("/v1/jobs/{id}/exceptions"), None, 200);
        let last = e["exceptions"].as_array().unwrap().last().cloned().unwrap();
        assert_eq!(last["uid"], "bad", "{e}");
        assert!(
            last["kind"] == "deadline" || last["kind"] == "limit:memory",
            "{e}"
        );
        assert_eq!(last["fatal"], true);
    }
    server.wait_status(&healthy, "finished", Duration::from_secs(120));
    assert!(
        committed(&out) == reference(&ws, LINES),
        "the healthy job's output is exact"
    );
}

#[test]
fn bad_requests_get_their_4xx_and_lose_nothing() {
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &["--max-component-size", "4 MiB"]);
    let (split, count) = server.word_count_components();
    let out = ws.path("out");
    let id = server.submit(
        json!({ "spec": word_count("bad", 10_000_000, Some(1000), &split, &count, 2, &out) }),
    );
    server.wait_status(&id, "running", Duration::from_secs(60));
    let code =
        |(status, body): (u16, Value)| (status, body["code"].as_str().unwrap_or("").to_string());

    // Tokens.
    assert_eq!(
        code(server.call("GET", "/v1/jobs", None, None)),
        (401, "unauthorized".into())
    );
    assert_eq!(
        code(server.call("GET", "/v1/jobs", Some("not-a-token-of-this-server"), None)),
        (401, "unauthorized".into())
    );
    assert_eq!(
        server.call("GET", "/v1/jobs", Some(READ_TOKEN), None).0,
        200
    );
    // The scheme's name in any case, as HTTP allows.
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    write!(
        stream,
        "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nauthorization: bearer {READ_TOKEN}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        code(server.call(
            "POST",
            &format!("/v1/jobs/{id}/cancel"),
            Some(READ_TOKEN),
            None
        )),
        (403, "forbidden".into())
    );
    assert_eq!(
        server.job(&id)["status"],
        "running",
        "the read-only cancel changed nothing"
    );

    // Components.
    let before = server.ok("GET", "/v1/components", None, 200);
    let (status, e) = server.upload(b"\0asm not really", "", Some(TOKEN));
    assert_eq!(
        (status, e["code"].as_str().unwrap()),
        (400, "invalid_component"),
        "{e}"
    );
    let (status, e) = server.upload(&vec![0u8; 5 << 20], "", Some(TOKEN));
    assert_eq!(
        (status, e["code"].as_str().unwrap()),
        (413, "too_large"),
        "{e}"
    );
    let (status, e) = server.upload(
        &std::fs::read(operator("weir_test_other_world")).unwrap(),
        "",
        Some(TOKEN),
    );
    assert_eq!(
        (status, e["code"].as_str().unwrap()),
        (400, "invalid_component"),
        "{e}"
    );
    // Cut off halfway: the server keeps nothing of it.
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    write!(
        stream,
        "POST /v1/components HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/wasm\r\nContent-Length: 100000\r\n\r\n"
    )
    .unwrap();
    stream.write_all(&[0u8; 1000]).unwrap();
    drop(stream);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        server.ok("GET", "/v1/components", None, 200),
        before,
        "nothing of a bad upload is kept"
    );
    let files = std::fs::read_dir(server.data.join("components"))
        .unwrap()
        .count();
    assert_eq!(files, 4, "two components, each its .wasm and its record");
    assert_eq!(
        code(server.call(
            "DELETE",
            &format!("/v1/components/{}", &split["sha256:".len()..]),
            Some(TOKEN),
            None
        )),
        (409, "conflict".into())
    );
    assert_eq!(
        code(server.call(
            "GET",
            &format!("/v1/components/{}", "0".repeat(64)),
            Some(TOKEN),
            None
        )),
        (404, "not_found".into())
    );

    // Specs.
    let bad = [
        json!({ "spec": "[job]\nname = " }),
        json!({ "spec": "[job]\nname = \"x\"\n[[operator]]\nname = \"a\"\nuid = \"a\"\nwasm = \"nothing@1\"\n" }),
        json!({ "spec": { "job": { "name": "x", "parallelism": 0 } } }),
        json!({ "spec": 7 }),
        // A name that would put the job's checkpoints outside the data directory.
        json!({ "spec": {
            "job": { "name": "../../outside" },
            "source": [{ "name": "g", "type": "generator", "count": 10 }],
            "sink": [{ "name": "o", "type": "discard", "input": "g" }],
        } }),
        // Too long a name for its directories.
        json!({ "spec": {
            "job": { "name": "x".repeat(300) },
            "source": [{ "name": "g", "type": "generator", "count": 10 }],
            "sink": [{ "name": "o", "type": "discard", "input": "g" }],
        } }),
    ];
    for body in bad {
        let (status, e) = server.call("POST", "/v1/jobs", Some(TOKEN), Some(body.clone()));
        assert_eq!(
            (status, e["code"].as_str().unwrap()),
            (400, "invalid_spec"),
            "{body}: {e}"
        );
        assert!(!e["message"].as_str().unwrap().is_empty());
    }
    // A spec naming a local file, sent as it is rather than by `weir submit`.
    let local = json!({ "spec": "[job]\nname = \"x\"\n[[operator]]\nname = \"a\"\nuid = \"a\"\nwasm = \"/ops/split.wasm\"\n" });
    let (status, e) = server.call("POST", "/v1/jobs", Some(TOKEN), Some(local));
    assert_eq!(status, 400, "{e}");
    assert!(
        (e["message"].as_str().unwrap()).contains("looks like a file"),
        "{e}"
    );
    let (status, e) = server.call(
        "POST",
        "/v1/jobs",
        Some(TOKEN),
        Some(json!({ "spec": "", "colour": 1 })),
    );
    assert_eq!(
        (status, e["code"].as_str().unwrap()),
        (400, "invalid_request"),
        "{e}"
    );

    // Jobs, operations, savepoints.
    assert_eq!(
        code(server.call(
            "GET",
            &format!("/v1/jobs/{}", "f".repeat(32)),
            Some(TOKEN),
            None
        )),
        (404, "not_found".into())
    );
    assert_eq!(
        code(server.call("GET", "/v1/jobs/..%2F..%2Fetc", Some(TOKEN), None)).0,
        404
    );
    assert_eq!(
        code(server.call(
            "GET",
            &format!("/v1/jobs/{id}/operations/nope"),
            Some(TOKEN),
            None
        )),
        (404, "not_found".into())
    );
    let spec = word_count("again", 100, None, &split, &count, 2, &ws.path("out-2"));
    let (status, e) = server.call(
        "POST",
        "/v1/jobs",
        Some(TOKEN),
        Some(json!({ "spec": spec, "savepoint": ws.path("no-savepoint") })),
    );
    assert_eq!(
        (status, e["code"].as_str().unwrap()),
        (404, "not_found"),
        "{e}"
    );
    let op = server.ok(
        "POST",
        &format!("/v1/jobs/{id}/savepoints"),
        Some(json!({})),
        202,
    );
    let op = server.wait_operation(&id, op["request_id"].as_str().unwrap());
    assert_eq!(op["status"], "completed", "{op}");
    // The savepoint has the state of uid "count"; a job without it does not fit.
    let renamed = spec.replace("uid = \"count\"", "uid = \"count-2\"");
    let (status, e) = server.call(
        "POST",
        "/v1/jobs",
        Some(TOKEN),
        Some(json!({ "spec": renamed, "savepoint": op["savepoint"] })),
    );
    assert_eq!(
        (status, e["code"].as_str().unwrap()),
        (400, "savepoint_does_not_fit"),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("count"), "{e}");
    assert_eq!(
        code(server.call(
            "POST",
            &format!("/v1/jobs/{id}/savepoints"),
            Some(TOKEN),
            Some(json!({ "request_id": "../x" }))
        )),
        (400, "invalid_request".into())
    );

    // Paths and methods.
    assert_eq!(
        code(server.call("GET", "/v2/nothing", Some(TOKEN), None)),
        (404, "not_found".into())
    );
    assert_eq!(
        code(server.call("DELETE", "/v1/jobs", Some(TOKEN), None)),
        (405, "method_not_allowed".into())
    );

    // Nothing was lost: the job still runs, and only it is listed.
    assert_eq!(server.job(&id)["status"], "running");
    assert_eq!(
        server
            .ok("GET", "/v1/jobs", None, 200)
            .as_array()
            .unwrap()
            .len(),
        1
    );
    server.ok("POST", &format!("/v1/jobs/{id}/cancel"), None, 202);
    server.wait_status(&id, "cancelled", Duration::from_secs(60));
    assert_eq!(
        code(server.call("POST", &format!("/v1/jobs/{id}/cancel"), Some(TOKEN), None)),
        (409, "conflict".into())
    );
}

#[test]
fn the_cli_client_runs_a_job_on_a_server() {
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let out = ws.path("out");
    // Local paths: `weir submit` uploads them.
    let spec = ws.write(
        "job.toml",
        word_count(
            "cli",
            5000,
            None,
            operator("wordcount_split").to_str().unwrap(),
            operator("wordcount_count").to_str().unwrap(),
            2,
            &out,
        ),
    );
    let client = |args: &[&str]| {
        let output = server.cli(args);
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // A local file that is not there is said to be missing, not looked for on the server.
    let split = operator("wordcount_split");
    let missing = std::fs::read_to_string(&spec)
        .unwrap()
        .replace(split.to_str().unwrap(), "/nowhere/split.wasm");
    let missing = ws.write("missing.toml", missing);
    let (ok, _, err) = client(&["submit", missing.to_str().unwrap()]);
    assert!(
        !ok && err.contains("operator \"split\"") && err.contains("/nowhere/split.wasm is no file"),
        "{err}"
    );
    let (ok, id, err) = client(&["submit", spec.to_str().unwrap()]);
    assert!(ok, "{err}");
    let id = id.trim().to_string();
    server.wait_status(&id, "finished", Duration::from_secs(60));
    let (ok, table, err) = client(&["list"]);
    assert!(
        ok && table.contains(&id) && table.contains("finished"),
        "{table}{err}"
    );
    let (ok, json, err) = client(&["status", &id, "--json"]);
    assert!(ok, "{err}");
    let status: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status["name"], "cli");
    // A finished job shows its last run's counts.
    let source = (status["vertices"].as_array().unwrap().iter())
        .find(|v| v["name"] == "lines")
        .cloned();
    assert_eq!(source.unwrap_or_default()["records_out"], 5000, "{status}");
    let (ok, components, _) = client(&["components"]);
    assert!(ok && components.lines().count() == 3, "{components}");
    // An error is the server's message and code, not a stack trace.
    let (ok, _, err) = client(&["cancel", &id]);
    assert!(
        !ok && err.contains("not running") && err.contains("conflict"),
        "{err}"
    );
    let (ok, deleted, err) = client(&["delete", &id]);
    assert!(ok && deleted.contains("deleted"), "{err}");
    let (ok, table, err) = client(&["list"]);
    assert!(ok && !table.contains(&id), "{table}{err}");
    let output = Command::new(weir_bin())
        .args(["list", "--server", &format!("http://{}", server.addr)])
        .env_remove("WEIR_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && err.contains("WEIR_TOKEN"),
        "{err}"
    );
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let mut text = String::new();
        std::fs::File::open(entry.unwrap().path())
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        lines.extend(text.lines().map(String::from));
    }
    assert!(!lines.is_empty());
}

/// The README's quick start of `weir serve`, command by command, on
/// `examples/wordcount/serve.toml`: each command succeeds, and what the two jobs committed
/// through a savepoint, a rescale, an upgrade, a stop and a restore is exactly once (each
/// word's counts are 1, 2, ... without a gap or a repeat).
#[test]
fn the_readme_quick_start_of_weir_serve_runs_as_written() {
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let example = std::fs::read_to_string(repo().join("examples/wordcount/serve.toml")).unwrap();
    let spec = ws.write(
        "serve.toml",
        example
            .replace(
                "../../build/operators/wordcount_split.wasm",
                operator("wordcount_split").to_str().unwrap(),
            )
            .replace(
                "../../build/operators/wordcount_count.wasm",
                operator("wordcount_count").to_str().unwrap(),
            ),
    );
    let spec = spec.to_str().unwrap();
    let weir = |args: &[&str]| {
        let output = server.cli(args);
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            output.status.success(),
            "weir {args:?}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let id = weir(&["submit", spec]);
    server.wait_checkpoints(&id, 1);
    assert!(weir(&["list"]).contains(&id));
    assert!(weir(&["status", &id]).contains("count"));
    let savepoint = weir(&["savepoint", &id]);
    assert!(
        Path::new(&savepoint).join("_metadata").is_file(),
        "{savepoint}"
    );
    weir(&["rescale", &id, "count=4"]);
    let count = (server.job(&id)["vertices"].as_array().unwrap().iter())
        .find(|v| v["name"] == "count")
        .cloned()
        .unwrap();
    assert_eq!(count["parallelism"], 4, "{count}");
    // A new build of the count: the test's second version, writing counts as the first.
    let count_v2 = operator("weir_test_recount");
    weir(&[
        "upload",
        count_v2.to_str().unwrap(),
        "--name",
        "count",
        "--version",
        "2",
    ]);
    let config = r#"count={"prefix": ""}"#;
    weir(&[
        "upgrade",
        &id,
        "count=count@2",
        "--config",
        config,
        "--probation",
        "1s",
    ]);
    let stopped = weir(&["stop", &id]);
    let second = weir(&["submit", "-s", &stopped, spec]);
    server.wait_checkpoints(&second, 1);
    weir(&["cancel", &second]);
    server.wait_status(&second, "cancelled", Duration::from_secs(60));
    weir(&["exceptions", &second]);
    weir(&["delete", &second]);

    counted_once(part_files(&ws.path("served")).into_values().flatten());
}

#[test]
fn a_server_killed_or_stopped_at_random_moments_keeps_its_job_exactly_once() {
    const LINES: u64 = 100_000;
    let ws = Workspace::new();
    let data = ws.path("data");
    let seed = fastrand::u64(..);
    eprintln!("kill loop seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let server = Server::start(&ws, &data, &[]);
    let (split, count) = server.word_count_components();
    let out = ws.path("out");
    let spec = word_count("killed", LINES, Some(20_000), &split, &count, 2, &out);
    let id = server.submit(json!({ "spec": spec }));
    let mut server = server;
    for kill in 0..6 {
        std::thread::sleep(Duration::from_millis(rng.u64(50..600)));
        if kill % 2 == 1 {
            // A savepoint in flight at the kill.
            let _ = server.call(
                "POST",
                &format!("/v1/jobs/{id}/savepoints"),
                Some(TOKEN),
                Some(json!({})),
            );
        }
        if kill == 2 {
            // Ctrl-C: the server stops its jobs at a checkpoint, to resume at the next start.
            assert_eq!(server.interrupt().code(), Some(0));
        } else {
            server.kill();
        }
        server = Server::start(&ws, &data, &[]);
        let status = server.job(&id)["status"].clone();
        assert!(
            status == "running" || status == "finished",
            "after kill {kill}: {status}"
        );
    }
    server.wait_status(&id, "finished", Duration::from_secs(120));
    let committed = committed(&out);
    assert!(
        committed == reference(&ws, LINES),
        "the output of a run without kills"
    );
    tally(5, 1, committed.len());
}

#[test]
fn a_stop_with_drain_ends_the_input_and_takes_the_savepoint_of_the_finished_job() {
    for savepoint in [true, false] {
        drained(savepoint);
    }
}

fn drained(savepoint: bool) {
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let (split, count) = server.word_count_components();
    let out = ws.path("out");
    let spec = word_count("drained", 10_000_000, Some(20_000), &split, &count, 2, &out);
    let id = server.submit(json!({ "spec": spec }));
    server.wait_checkpoints(&id, 2);
    let body = json!({ "drain": true, "savepoint": savepoint, "request_id": "drain" });
    server.ok("POST", &format!("/v1/jobs/{id}/stop"), Some(body), 202);
    if savepoint {
        let op = server.wait_operation(&id, "drain");
        assert_eq!(op["status"], "completed", "{op}");
        assert!(
            PathBuf::from(op["savepoint"].as_str().unwrap())
                .join("_metadata")
                .is_file()
        );
    }
    // The input ended early and what was read was processed and committed: a job that
    // finished, each word counted 1, 2, ... once (without a savepoint too).
    server.wait_status(&id, "finished", Duration::from_secs(60));
    counted_once(committed(&out));
}

/// Asserts that `lines` of a word count (`word<TAB>count`) count each word 1, 2, ...
/// without a gap or a repeat: exactly once, whatever stopped and resumed the job.
fn counted_once(lines: impl IntoIterator<Item = String>) {
    let mut counts: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in lines {
        let (word, n) = line.split_once('\t').unwrap();
        counts
            .entry(word.into())
            .or_default()
            .push(n.parse().unwrap());
    }
    assert!(!counts.is_empty());
    for (word, mut n) in counts {
        n.sort_unstable();
        let expected: Vec<u64> = (1..=n.len() as u64).collect();
        assert_eq!(n, expected, "the counts committed for {word:?}");
    }
}

#[test]
fn a_component_named_by_a_job_being_submitted_is_not_deleted_under_it() {
    // A job of a JavaScript component starts slowly (its instantiation): a delete of the
    // component comes while the submit runs. Either the delete is refused or the submit
    // fails; never a job running on a component that is gone (its restore would need it).
    let ws = Workspace::new();
    // The tests' cache: the variants below are compiled once, not at every run.
    let cache = crate::support::release_dir().join("e2e-component-cache");
    let cache = ["--cache-dir", cache.to_str().unwrap()];
    let server = Server::start(&ws, &ws.path("data"), &cache);
    let count = format!("sha256:{}", server.component("wordcount_count"));
    let js = std::fs::read(operator("wordcount_split_js")).unwrap();
    for attempt in 0..8u8 {
        // New bytes each time (a custom section): compiled afresh, as slow as a first start.
        let mut bytes = js.clone();
        bytes.extend_from_slice(&[0, 4, 2, b'r', b'a', attempt]);
        let (status, info) = server.upload(&bytes, "", Some(TOKEN));
        assert_eq!(status, 201, "{info}");
        let sha = info["sha256"].as_str().unwrap().to_string();
        let out = ws.path(&format!("out-{attempt}"));
        let spec = word_count(
            "race",
            1_000_000,
            Some(1000),
            &format!("sha256:{sha}"),
            &count,
            1,
            &out,
        );
        let (submitted, deleted) = std::thread::scope(|s| {
            let submit = s.spawn(|| {
                server.call(
                    "POST",
                    "/v1/jobs",
                    Some(TOKEN),
                    Some(json!({ "spec": spec })),
                )
            });
            std::thread::sleep(Duration::from_millis(8 * u64::from(attempt)));
            let deleted = server.call(
                "DELETE",
                &format!("/v1/components/{sha}"),
                Some(TOKEN),
                None,
            );
            (submit.join().unwrap(), deleted)
        });
        assert!(
            submitted.0 != 201 || deleted.0 != 204,
            "attempt {attempt}: the job was submitted ({}) and its component deleted",
            submitted.1
        );
        if submitted.0 == 201 {
            let id = submitted.1["id"].as_str().unwrap();
            server.ok("POST", &format!("/v1/jobs/{id}/cancel"), None, 202);
        }
    }
}

#[test]
fn two_uploads_of_other_bytes_under_one_name_and_version_take_it_once() {
    // Both checked before their compiles (seconds each, with no cache), which run one after
    // the other: the second to finish finds the name taken.
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &["--no-cache"]);
    let js = std::fs::read(operator("wordcount_split_js")).unwrap();
    let run = fastrand::u64(..).to_le_bytes();
    let variant = |v: u8| {
        let mut bytes = js.clone();
        bytes.extend_from_slice(&[0, 11, 2, b'u', v]);
        bytes.extend_from_slice(&run);
        bytes
    };
    let (a, b) = (variant(b'a'), variant(b'b'));
    let query = "?name=split&version=1";
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(|| server.upload(&a, query, Some(TOKEN)));
        let second = s.spawn(|| server.upload(&b, query, Some(TOKEN)));
        (first.join().unwrap(), second.join().unwrap())
    });
    let mut statuses = [first.0, second.0];
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [201, 409],
        "{} {}",
        first.1["code"],
        second.1["code"]
    );
    let listed = server.ok("GET", "/v1/components", None, 200);
    let named: Vec<_> = (listed.as_array().unwrap().iter())
        .filter(|c| c["name"] == "split")
        .collect();
    assert_eq!(named.len(), 1, "{listed}");
}

#[test]
fn the_same_bytes_uploaded_under_another_name_or_version_answer_to_it() {
    // Rebuilt without changes and uploaded as the next version: the bytes are the same.
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let split = std::fs::read(operator("wordcount_split")).unwrap();
    let mut other = split.clone();
    other.extend_from_slice(&[0, 2, 1, b'x']);
    let upload = |bytes: &[u8], query: &str| {
        let (status, info) = server.upload(bytes, query, Some(TOKEN));
        assert_eq!(status, 201, "{query}: {info}");
        info["sha256"].as_str().unwrap().to_string()
    };
    let a = upload(&split, "?name=split&version=1");
    let b = upload(&other, "?name=split&version=2");
    assert_eq!(upload(&split, "?name=split&version=3"), a);
    assert_eq!(upload(&split, "?name=splitter"), a);
    assert_eq!(
        upload(&split, "?name=split&version=1"),
        a,
        "a retry adds nothing"
    );
    let info = server.ok("GET", &format!("/v1/components/{a}"), None, 200);
    assert_eq!(info["aliases"], json!(["split@3", "splitter"]), "{info}");
    let (status, answer) = server.upload(&other, "?name=splitter", Some(TOKEN));
    assert_eq!(status, 409, "another's name: {answer}");

    let count = format!("sha256:{}", server.component("wordcount_count"));
    let names = [
        ("split@1", &a),
        ("split@2", &b),
        ("split@3", &a),
        ("split", &a), // the newest upload under the name
        ("splitter", &a),
    ];
    for (i, (reference, sha)) in names.into_iter().enumerate() {
        let out = ws.path(&format!("out-{i}"));
        let id = server.submit(json!({
            "spec": word_count(&format!("j{i}"), 10, None, reference, &count, 1, &out)
        }));
        let info = server.ok("GET", &format!("/v1/components/{sha}"), None, 200);
        assert!(
            info["used_by"].as_array().unwrap().contains(&json!(id)),
            "{reference} is not {sha}: {info}"
        );
    }
}
