//! The job manager behind `weir serve`: uploaded components as content-addressed artifacts,
//! many jobs in one process (each on threads of its own, as `weir run` runs one), savepoints,
//! stops, cancels and rescales, and a data directory that outlives the process.
//!
//! ```text
//! <data>/.lock                           held by the service that uses the directory
//! <data>/components/<sha256>.wasm|.json  uploaded components and their records
//! <data>/jobs/<id>/job.json              a job's record: spec, status, history
//! <data>/jobs/<id>/checkpoints/          its checkpoints; <data>/jobs/<id>/state/ its RocksDB
//! <data>/savepoints/<id>/<request-id>/   savepoints taken through the service
//! ```
//!
//! A job that was running when the process ended (however it ended) resumes from its newest
//! checkpoint when the service starts again; ended jobs keep their final status.
//!
//! The HTTP API is the binary's (`weir serve`); this is the part a test or another front end
//! can drive directly.

pub mod api;
mod components;
pub mod error;
mod jobs;
mod store;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use components::Components;
pub use components::Upload;
pub use error::{ErrorCode, ServiceError};
use jobs::{JobRecord, ManagedJob, PendingRescale, UpgradeEntry};

use self::api::{
    Checkpoints, ComponentInfo, Exceptions, JobDetails, JobOverview, JobStatus, Operation,
    OperationKind, OperationStatus, OperatorChange, OperatorVersion, RescaleRequest,
    RollbackRequest, SavepointRequest, StopRequest, SubmitRequest, UpgradeInfo, UpgradeRequest,
    UpgradeStatus,
};
use self::store::{check_name, is_id, new_id, now_ms, read_json};
use crate::checkpoint::{CheckpointError, CheckpointHistory, RestoreFrom};
use crate::job::spec::{JobSpec, OperatorCode, ParseError, VertexKind};
use crate::native::window::WindowSpec;
use crate::runtime::{Job, JobControl, JobEnd, JobError, Probation, Upgrade};
use crate::wasm::{Limits, WasmEngine};

/// How a service is set up.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Where it keeps everything.
    pub data_dir: PathBuf,
    /// The largest component it takes (bytes); also the `wasm_size` limit of its jobs'
    /// operators unless a spec sets a smaller one.
    pub max_component_size: u64,
}

/// The job manager.
pub struct Service {
    data_dir: PathBuf,
    engine: Arc<WasmEngine>,
    components: Components,
    jobs: Mutex<BTreeMap<String, Arc<ManagedJob>>>,
    /// Components a submit or an upgrade has resolved and its job does not record yet (see
    /// [`Reservation`]); a delete must not take them in between.
    reserved: Mutex<Vec<String>>,
    /// Set while the process shuts down: jobs that end now keep their status, to resume.
    shutting_down: AtomicBool,
    _lock: File,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("data_dir", &self.data_dir)
            .finish()
    }
}

/// The prefix of a deleted job's directory while it is being removed.
const DELETED: &str = ".deleted-";

/// The checkpoint interval of a job whose spec has no `[checkpoint]` table.
const DEFAULT_INTERVAL: &str = "10s";

impl Service {
    /// Opens the data directory (creating it; refused if another service holds it), and
    /// resumes every job that was running.
    pub fn open(
        options: ServiceOptions,
        engine: Arc<WasmEngine>,
    ) -> Result<Arc<Service>, ServiceError> {
        let data = options.data_dir;
        std::fs::create_dir_all(data.join("jobs"))
            .map_err(|e| ServiceError::io("create", &data.join("jobs"), e))?;
        let lock_path = data.join(".lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| ServiceError::io("open", &lock_path, e))?;
        if lock.try_lock().is_err() {
            return Err(ServiceError::conflict(format!(
                "another weir serve uses the data directory {}; stop it or give this one \
                 another --data-dir",
                data.display()
            )));
        }
        let limits = Limits {
            wasm_size: bytesize::ByteSize::b(options.max_component_size),
            ..Limits::default()
        };
        let components = Components::open(data.join("components"), Arc::clone(&engine), limits)?;
        let service = Arc::new(Service {
            data_dir: data.clone(),
            engine,
            components,
            jobs: Mutex::new(BTreeMap::new()),
            reserved: Mutex::default(),
            shutting_down: AtomicBool::new(false),
            _lock: lock,
        });
        service.resume()?;
        Ok(service)
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<ManagedJob>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reserved(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves components `shas` until the reservation is dropped; resolve them under the
    /// same lock (`reserved`), which `delete_component` holds from its check to its delete.
    fn reserve(
        &self,
        mut reserved: std::sync::MutexGuard<'_, Vec<String>>,
        shas: &[String],
    ) -> Reservation<'_> {
        reserved.extend_from_slice(shas);
        Reservation {
            reserved: &self.reserved,
            shas: shas.to_vec(),
        }
    }

    /// Loads every job record; starts again those that were running.
    fn resume(self: &Arc<Self>) -> Result<(), ServiceError> {
        let dir = self.data_dir.join("jobs");
        for entry in std::fs::read_dir(&dir).map_err(|e| ServiceError::io("list", &dir, e))? {
            let path = entry.map_err(|e| ServiceError::io("list", &dir, e))?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with(DELETED) {
                // A job whose delete did not finish.
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::warn!("cannot remove the deleted job {}: {e}", path.display());
                }
                continue;
            }
            let Some(id) = path
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| is_id(n))
            else {
                continue;
            };
            let record: JobRecord = match read_json(&path.join("job.json")) {
                Ok(r) => r,
                Err(e) => {
                    // A submit the process did not finish leaves no record.
                    tracing::warn!("skipping job {id}: {e}");
                    continue;
                }
            };
            let job = Arc::new(ManagedJob::new(path.clone(), record));
            self.jobs().insert(id.to_string(), Arc::clone(&job));
            settle_upgrades(&job)?;
            let status = job.record().status;
            // A stop whose savepoint completed: the job ends there, or output after the
            // savepoint would be written again by a job restored from it.
            let stopped = !status.is_final()
                && job.record().operations.iter().any(|o| {
                    o.kind == OperationKind::Stop && o.status == OperationStatus::Completed
                });
            job.update(|r| {
                if stopped {
                    r.status = JobStatus::Stopped;
                    r.ended_ms = Some(now_ms());
                }
                for op in &mut r.operations {
                    if op.status == OperationStatus::InProgress {
                        op.status = OperationStatus::Failed;
                        op.error = Some(
                            "the service stopped before it completed; the job resumed from its \
                             newest checkpoint"
                                .into(),
                        );
                        op.ended_ms = Some(now_ms());
                    }
                }
                if status == JobStatus::Cancelling {
                    r.status = JobStatus::Cancelled;
                    r.ended_ms = Some(now_ms());
                }
            })?;
            if stopped || status.is_final() || status == JobStatus::Cancelling {
                continue;
            }
            tracing::info!("resuming job {id} (\"{}\")", job.record().name);
            let from = match job.record().savepoint.clone() {
                Some(savepoint) => RestoreFrom::LatestOr(savepoint),
                None => RestoreFrom::Latest,
            };
            if let Err(e) = self.launch(&job, from) {
                tracing::warn!("job {id} did not resume: {e}");
                job.update(|r| {
                    r.status = JobStatus::Failed;
                    r.ended_ms = Some(now_ms());
                    r.exceptions.push(api::ExceptionInfo {
                        time_ms: now_ms(),
                        message: format!("it did not resume after the service restarted: {e}"),
                        vertex: None,
                        uid: None,
                        subtask: None,
                        kind: None,
                        fatal: true,
                    });
                })?;
            }
        }
        Ok(())
    }

    /// Starts an upload of a component (see [`Service::finish_upload`]).
    pub fn begin_upload(
        &self,
        name: Option<String>,
        version: Option<String>,
    ) -> Result<Upload, ServiceError> {
        self.components.begin(name, version)
    }

    /// Validates, compiles and keeps an uploaded component.
    pub fn finish_upload(&self, upload: Upload) -> Result<ComponentInfo, ServiceError> {
        let mut info = self.components.finish(upload)?;
        info.used_by = self.used_by().remove(&info.sha256).unwrap_or_default();
        Ok(info)
    }

    /// Which jobs use which component.
    fn used_by(&self) -> BTreeMap<String, Vec<String>> {
        let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (id, job) in self.jobs().iter() {
            let record = job.record();
            let upgrades = (record.upgrades.iter().filter(|u| u.in_progress()))
                .flat_map(|u| &u.info.operators)
                .map(|o| &o.to.component);
            let mut shas: Vec<&String> = record.components.iter().chain(upgrades).collect();
            shas.sort();
            shas.dedup();
            for sha in shas {
                used.entry(sha.clone()).or_default().push(id.clone());
            }
        }
        used
    }

    /// Every component.
    pub fn components(&self) -> Vec<ComponentInfo> {
        self.components.list(&self.used_by())
    }

    /// Component `sha256`.
    pub fn component(&self, sha256: &str) -> Result<ComponentInfo, ServiceError> {
        let used = self.used_by().remove(sha256).unwrap_or_default();
        self.components.get(sha256, used)
    }

    /// Deletes component `sha256`; refused while a job (of any status) uses it, since a
    /// restore of the job needs it, or an upgrade in progress brings it.
    pub fn delete_component(&self, sha256: &str) -> Result<(), ServiceError> {
        let reserved = self.reserved();
        if reserved.iter().any(|s| s == sha256) {
            return Err(ServiceError::conflict(format!(
                "component sha256:{sha256} is named by a job being submitted or upgraded now; \
                 a restore of that job will need it (delete it once the job is gone)"
            )));
        }
        if let Some(users) = self.used_by().remove(sha256) {
            return Err(ServiceError::conflict(format!(
                "component sha256:{sha256} is used by job(s) {}; a restore of those needs it \
                 (delete them first: DELETE /v1/jobs/<id> once they have ended)",
                users.join(", ")
            )));
        }
        self.components.delete(sha256)?;
        self.engine.forget(sha256);
        Ok(())
    }

    /// Submits a job: checks its spec and components, and starts it.
    pub fn submit(self: &Arc<Self>, request: SubmitRequest) -> Result<JobOverview, ServiceError> {
        let id = new_id();
        let dir = self.data_dir.join("jobs").join(&id);
        let base_dir = match &request.base_dir {
            Some(b) if Path::new(b).is_absolute() => PathBuf::from(b),
            Some(b) => {
                return Err(ServiceError::invalid(format!(
                    "base_dir {b:?} is not an absolute path; give the directory relative paths \
                     of the spec resolve against"
                )));
            }
            None => dir.clone(),
        };
        let text = match &request.spec {
            serde_json::Value::String(text) => text.clone(),
            serde_json::Value::Object(_) => {
                let table: toml::Table =
                    serde_json::from_value(request.spec.clone()).map_err(|e| {
                        spec_error(format!("the JSON spec is not a valid job spec: {e}"))
                    })?;
                toml::to_string(&table).map_err(|e| spec_error(e.to_string()))?
            }
            _ => {
                return Err(spec_error(
                    "`spec` must be the TOML text of a job spec or a JSON object",
                ));
            }
        };
        let mut table: toml::Table = text
            .parse()
            .map_err(|e| spec_error(format!("the spec is not valid TOML: {e}")))?;
        let reserved = self.reserved();
        let components = self.canonicalize(&mut table, &dir)?;
        let _reservation = self.reserve(reserved, &components);
        let savepoint = match &request.savepoint {
            Some(path) => {
                let path = PathBuf::from(path);
                if !path.join("_metadata").is_file() {
                    return Err(ServiceError::not_found(format!(
                        "there is no savepoint at {}: a savepoint directory holds a _metadata \
                         file",
                        path.display()
                    )));
                }
                Some(path)
            }
            None => None,
        };
        let spec_text = toml::to_string(&table).expect("a table serializes");
        let spec = self.spec(&spec_text, &base_dir)?;
        std::fs::create_dir_all(&dir).map_err(|e| ServiceError::io("create", &dir, e))?;
        let record = JobRecord {
            id: id.clone(),
            name: spec.name.clone(),
            status: JobStatus::Created,
            submitted_ms: now_ms(),
            ended_ms: None,
            spec: spec_text,
            base_dir,
            components,
            savepoint: savepoint.clone(),
            allow_non_restored_state: request.allow_non_restored_state,
            restarts: 0,
            exceptions: Vec::new(),
            operations: Vec::new(),
            upgrades: Vec::new(),
        };
        let job = Arc::new(ManagedJob::new(dir.clone(), record));
        let from = savepoint.map_or(RestoreFrom::Fresh, RestoreFrom::Path);
        let saved = {
            let record = job.record();
            job.save(&record)
        };
        let started = saved.and_then(|()| self.launch(&job, from));
        if let Err(e) = started {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        self.jobs().insert(id, Arc::clone(&job));
        let overview = job.record().overview();
        Ok(overview)
    }

    /// Rewrites a submitted spec as the service runs it: components named by `sha256:`,
    /// checkpoints and RocksDB state under the job's directory. Returns the components used.
    fn canonicalize(
        &self,
        table: &mut toml::Table,
        dir: &Path,
    ) -> Result<Vec<String>, ServiceError> {
        let mut used = Vec::new();
        if let Some(toml::Value::Array(operators)) = table.get_mut("operator") {
            for op in operators.iter_mut() {
                let Some(op) = op.as_table_mut() else {
                    continue;
                };
                let name = op
                    .get("name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("?")
                    .to_string();
                if let Some(wasm) = op.get_mut("wasm") {
                    let reference = wasm.as_str().ok_or_else(|| {
                        spec_error(format!(
                            "operator \"{name}\": `wasm` must name an uploaded component \
                             (\"sha256:<hex>\", \"name@version\" or \"name\")"
                        ))
                    })?;
                    let sha = self
                        .components
                        .resolve(reference)
                        .map_err(|e| spec_error(format!("operator \"{name}\": {e}")))?;
                    *wasm = toml::Value::String(format!("sha256:{sha}"));
                    used.push(sha);
                }
            }
        }
        let checkpoint = table
            .entry("checkpoint")
            .or_insert_with(|| {
                let mut t = toml::Table::new();
                t.insert("interval".into(), DEFAULT_INTERVAL.into());
                toml::Value::Table(t)
            })
            .as_table_mut()
            .ok_or_else(|| spec_error("[checkpoint] must be a table"))?;
        checkpoint.insert(
            "dir".into(),
            ManagedJob::checkpoints_in(dir).display().to_string().into(),
        );
        let state = table
            .entry("state")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| spec_error("[state] must be a table"))?;
        let state_dir = ManagedJob::state_in(dir).display().to_string();
        state.insert("dir".into(), state_dir.into());
        used.sort();
        used.dedup();
        Ok(used)
    }

    /// The runnable spec of spec text (components named `sha256:`), relative to `base_dir`.
    fn spec(&self, text: &str, base_dir: &Path) -> Result<JobSpec, ServiceError> {
        let mut table: toml::Table = text.parse().map_err(|e| spec_error(format!("{e}")))?;
        if let Some(toml::Value::Array(operators)) = table.get_mut("operator") {
            for op in operators.iter_mut().filter_map(|o| o.as_table_mut()) {
                if let Some(sha) = op
                    .get("wasm")
                    .and_then(|w| w.as_str())
                    .and_then(|w| w.strip_prefix("sha256:"))
                {
                    let path = self.components.path(sha);
                    op.insert("wasm".into(), path.display().to_string().into());
                }
            }
        }
        let text = toml::to_string(&table).expect("a table serializes");
        JobSpec::parse(&text, base_dir, "job").map_err(|e| match e {
            ParseError::Syntax(m) | ParseError::Invalid(m) => spec_error(m),
        })
    }

    /// Starts `job` from `from`, and watches it.
    fn launch(
        self: &Arc<Self>,
        job: &Arc<ManagedJob>,
        from: RestoreFrom,
    ) -> Result<(), ServiceError> {
        let (spec_text, base_dir, allow) = {
            let r = job.record();
            (
                r.spec.clone(),
                r.base_dir.clone(),
                r.allow_non_restored_state,
            )
        };
        let spec = self.spec(&spec_text, &base_dir)?;
        let runnable = Job::new(spec, &self.engine)
            .map_err(|e| ServiceError::new(ErrorCode::InvalidSpec, e.to_string()))?
            .allow_non_restored_state(allow);
        let control = JobControl::new();
        let running = runnable
            .start_controlled(from, control.clone())
            .map_err(start_error)?;
        job.started(&running, control);
        job.update(|r| {
            r.status = JobStatus::Running;
            r.ended_ms = None;
        })?;
        let service = Arc::downgrade(self);
        job.watch(running, move |job, end| match service.upgrade() {
            Some(service) => service.ended(job, end),
            None => false,
        });
        Ok(())
    }

    /// A run of `job` ended with `end`: whether the job goes on. A job the service stops
    /// for its own shutdown stays `running`, to resume at the next start; a rescale restarts
    /// it at its new parallelism (or, if that fails, at its old one).
    fn ended(self: &Arc<Self>, job: &Arc<ManagedJob>, end: &Result<JobEnd, JobError>) -> bool {
        if self.shutting_down.load(Ordering::SeqCst) {
            return true;
        }
        let pending = job.rescale.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(rescale) = pending else {
            return false;
        };
        if job.record().status == JobStatus::Cancelling {
            // Cancelled while it stopped for the rescale: it does not start again.
            job.end_operation(
                &rescale.request_id,
                OperationStatus::Failed,
                Some("the job was cancelled before it restarted at the new parallelism".into()),
            );
            return false;
        }
        let savepoint = match (end, rescale.savepoint.wait()) {
            (Ok(JobEnd::Stopped { .. }), Ok(savepoint)) => savepoint,
            (_, answer) => {
                let why = match answer {
                    Err(e) => e.to_string(),
                    Ok(_) => "the job ended before its stop".into(),
                };
                job.end_operation(
                    &rescale.request_id,
                    OperationStatus::Failed,
                    Some(format!("the savepoint to rescale from failed: {why}")),
                );
                return self.resume_after_failed_rescale(job, end);
            }
        };
        let old = job.record().clone();
        let rescaled = rescaled_spec(&old.spec, &rescale.parallelism)
            .and_then(|text| {
                job.update(|r| {
                    r.spec = text;
                    r.savepoint = Some(savepoint.path.clone());
                })
            })
            .and_then(|()| self.launch(job, RestoreFrom::Path(savepoint.path.clone())));
        match rescaled {
            Ok(()) => {
                job.savepoint_done(&rescale.request_id, &Ok(savepoint));
                job.end_operation(&rescale.request_id, OperationStatus::Completed, None);
                true
            }
            Err(e) => {
                job.end_operation(
                    &rescale.request_id,
                    OperationStatus::Failed,
                    Some(format!("the job did not start at the new parallelism: {e}")),
                );
                let _ = job.update(|r| {
                    r.spec = old.spec.clone();
                    r.savepoint = old.savepoint.clone();
                });
                self.resume_after_failed_rescale(job, end)
            }
        }
    }

    /// After a rescale that failed, the job goes on at its old parallelism from its newest
    /// checkpoint, if it had only stopped for the rescale; whether it does.
    fn resume_after_failed_rescale(
        self: &Arc<Self>,
        job: &Arc<ManagedJob>,
        end: &Result<JobEnd, JobError>,
    ) -> bool {
        if !matches!(end, Ok(JobEnd::Stopped { .. })) {
            return false;
        }
        let from = match job.record().savepoint.clone() {
            Some(savepoint) => RestoreFrom::LatestOr(savepoint),
            None => RestoreFrom::Latest,
        };
        match self.launch(job, from) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("the job did not resume after a failed rescale: {e}");
                false
            }
        }
    }

    fn job(&self, id: &str) -> Result<Arc<ManagedJob>, ServiceError> {
        if !is_id(id) {
            return Err(ServiceError::not_found(format!(
                "no job {id:?}: job ids are 32 hex digits (list them with GET /v1/jobs)"
            )));
        }
        self.jobs().get(id).cloned().ok_or_else(|| {
            ServiceError::not_found(format!("no job {id}; list them with GET /v1/jobs"))
        })
    }

    /// Every job, newest first.
    pub fn list(&self) -> Vec<JobOverview> {
        let mut jobs: Vec<JobOverview> = self
            .jobs()
            .values()
            .map(|j| j.record().overview())
            .collect();
        jobs.sort_by(|a, b| b.submitted_ms.cmp(&a.submitted_ms).then(a.id.cmp(&b.id)));
        jobs
    }

    /// The whole status of job `id`.
    pub fn details(&self, id: &str) -> Result<JobDetails, ServiceError> {
        Ok(self.job(id)?.details())
    }

    /// Job `id`'s checkpoint history.
    pub fn checkpoints(&self, id: &str) -> Result<Checkpoints, ServiceError> {
        let job = self.job(id)?;
        let name = job.record().name.clone();
        let path = ManagedJob::checkpoints_in(&job.dir)
            .join(name)
            .join("history.json");
        let history: CheckpointHistory = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Ok(Checkpoints {
            history: history
                .checkpoints
                .iter()
                .map(jobs::checkpoint_info)
                .collect(),
        })
    }

    /// Job `id`'s failures.
    pub fn exceptions(&self, id: &str) -> Result<Exceptions, ServiceError> {
        Ok(Exceptions {
            exceptions: self.job(id)?.record().exceptions.clone(),
        })
    }

    /// The job's run, or why there is none.
    fn running(job: &ManagedJob) -> Result<Arc<jobs::Run>, ServiceError> {
        let status = job.record().status;
        job.run().ok_or_else(|| match status {
            // Between the end of one run and the start of the next (a rescale's restart).
            JobStatus::Created | JobStatus::Running => ServiceError::conflict(
                "the job is between two runs (a rescale or a restart is starting it again); \
                 ask again in a moment",
            ),
            JobStatus::Stopped => ServiceError::conflict(format!(
                "the job is not running (it is stopped); to go on, submit it again with \
                 `savepoint` naming its stop's savepoint (the stop operation's) or its newest \
                 checkpoint, the chk-<n> with the highest n in {}",
                ManagedJob::checkpoints_in(&job.dir)
                    .join(&job.record().name)
                    .display()
            )),
            _ => ServiceError::conflict(format!(
                "the job is not running (it is {}); nothing to do",
                status.name()
            )),
        })
    }

    /// Refuses what needs a savepoint (`what`) while the job restarts after a failure: the
    /// stop would end it during its restart delay without one (as Flink refuses a
    /// stop-with-savepoint of a job that is not running).
    fn refuse_while_restarting(job: &ManagedJob, what: &str) -> Result<(), ServiceError> {
        let status = job.record().status;
        if matches!(status, JobStatus::Restarting | JobStatus::Failing) {
            return Err(ServiceError::conflict(format!(
                "the job is {} after a failure (see its exceptions), and a savepoint needs it \
                 running; {what} once it runs again, or stop it without a savepoint \
                 (\"savepoint\": false, weir stop --no-savepoint), which keeps its newest \
                 checkpoint",
                status.name()
            )));
        }
        Ok(())
    }

    /// Cancels job `id`: its tasks end at once, output after its last checkpoint is not
    /// committed.
    pub fn cancel(&self, id: &str) -> Result<JobOverview, ServiceError> {
        let job = self.job(id)?;
        let run = Self::running(&job)?;
        job.update(|r| r.status = JobStatus::Cancelling)?;
        run.control.cancel();
        let overview = job.record().overview();
        Ok(overview)
    }

    /// Deletes job `id`, which has ended: its record, checkpoints and RocksDB state (its
    /// savepoints stay, under `<data>/savepoints/<id>/`), so that the components it used can
    /// be deleted. Refused while it runs or is about to run again (a rescale's restart).
    pub fn delete_job(&self, id: &str) -> Result<(), ServiceError> {
        let job = self.job(id)?;
        let _change = job.begin_change()?;
        // Lock order: the job list, then a job's record (as `used_by` takes them).
        let mut jobs = self.jobs();
        let status = job.record().status;
        if !status.is_final() || job.run().is_some() || job.rescaling() {
            return Err(ServiceError::conflict(format!(
                "job {id} has not ended (it is {}); cancel or stop it first, then delete it",
                status.name()
            )));
        }
        // Renamed at once, so that a crash while the directory is removed leaves no job
        // behind, only a directory the next start removes.
        let gone = self.data_dir.join("jobs").join(format!("{DELETED}{id}"));
        std::fs::rename(&job.dir, &gone).map_err(|e| ServiceError::io("delete", &job.dir, e))?;
        jobs.remove(id);
        drop(jobs);
        if let Err(e) = std::fs::remove_dir_all(&gone) {
            tracing::warn!(
                "cannot remove {} (the next start will): {e}",
                gone.display()
            );
        }
        Ok(())
    }

    /// Registers operation `kind` under the caller's request id (or a new one). An id seen
    /// before answers the operation it named (`Err(Ok(op))`), or a conflict if it named
    /// another kind of operation.
    fn begin_operation(
        job: &ManagedJob,
        kind: OperationKind,
        request_id: Option<String>,
    ) -> Result<Operation, Result<Operation, ServiceError>> {
        let request_id = match request_id {
            Some(id) => {
                check_name("request_id", &id).map_err(Err)?;
                id
            }
            None => new_id(),
        };
        let mut record = job.record();
        if let Some(earlier) = earlier(&record, kind, &request_id).transpose() {
            return Err(earlier);
        }
        let op = Operation {
            request_id,
            kind,
            status: OperationStatus::InProgress,
            requested_ms: now_ms(),
            ended_ms: None,
            savepoint: None,
            error: None,
        };
        record.operations.push(op.clone());
        job.save(&record).map_err(Err)?;
        Ok(op)
    }

    /// Follows `handle` in a thread of its own and records its answer in operation `op`.
    fn follow_savepoint(job: &Arc<ManagedJob>, op: &Operation, handle: crate::SavepointHandle) {
        let (job, request_id) = (Arc::clone(job), op.request_id.clone());
        let _ = std::thread::Builder::new()
            .name("savepoint-watch".into())
            .spawn(move || job.savepoint_done(&request_id, &handle.wait()));
    }

    /// Takes a savepoint of job `id`; answers at once with the operation to poll.
    pub fn savepoint(
        &self,
        id: &str,
        request: SavepointRequest,
    ) -> Result<Operation, ServiceError> {
        let job = self.job(id)?;
        if let Some(op) = Self::seen(&job, OperationKind::Savepoint, &request.request_id)? {
            return Ok(op);
        }
        let run = Self::running(&job)?;
        let op = match Self::begin_operation(&job, OperationKind::Savepoint, request.request_id) {
            Ok(op) => op,
            Err(answer) => return answer,
        };
        let dir = ManagedJob::savepoint_dir(&self.data_dir, id, &op.request_id);
        let handle = run.control.savepoint(dir);
        Self::follow_savepoint(&job, &op, handle);
        Ok(op)
    }

    /// Stops job `id`, with a savepoint unless asked otherwise; answers at once.
    pub fn stop(&self, id: &str, request: StopRequest) -> Result<Operation, ServiceError> {
        let job = self.job(id)?;
        if let Some(op) = Self::seen(&job, OperationKind::Stop, &request.request_id)? {
            return Ok(op);
        }
        let run = Self::running(&job)?;
        if request.savepoint {
            Self::refuse_while_restarting(&job, "stop it with a savepoint")?;
        }
        // Held until the stop is asked for, so that a rescale cannot come in between.
        let rescale = job.rescale.lock().unwrap_or_else(|p| p.into_inner());
        if rescale.is_some() {
            return Err(ServiceError::conflict(
                "the job is being rescaled; stop it once the rescale is done",
            ));
        }
        let op = match Self::begin_operation(&job, OperationKind::Stop, request.request_id) {
            Ok(op) => op,
            Err(answer) => return answer,
        };
        if request.savepoint {
            let dir = ManagedJob::savepoint_dir(&self.data_dir, id, &op.request_id);
            let handle = run.control.stop_with_savepoint(dir, request.drain);
            Self::follow_savepoint(&job, &op, handle);
        } else if request.drain {
            run.control.drain();
        } else {
            run.control.stop();
        }
        Ok(op)
    }

    /// Changes the parallelism of operators of job `id`: a stop with a savepoint, and a
    /// restart from it at the new parallelism (keyed state is split by key group). Answers at
    /// once.
    pub fn rescale(&self, id: &str, request: RescaleRequest) -> Result<Operation, ServiceError> {
        let job = self.job(id)?;
        if let Some(op) = Self::seen(&job, OperationKind::Rescale, &request.request_id)? {
            return Ok(op);
        }
        let run = Self::running(&job)?;
        let _changing = job.begin_change()?;
        if job.upgrading() {
            return Err(ServiceError::conflict(
                "an upgrade of the job is in progress; rescale it once the upgrade is committed \
                 or rolled back",
            ));
        }
        Self::refuse_while_restarting(&job, "rescale it")?;
        // Check the new spec before anything stops.
        let spec_text = rescaled_spec(&job.record().spec, &request.parallelism)?;
        let base_dir = job.record().base_dir.clone();
        let spec = self.spec(&spec_text, &base_dir)?;
        for name in request.parallelism.keys() {
            let vertex = spec.vertices.iter().find(|v| &v.name == name);
            if !matches!(vertex.map(|v| &v.kind), Some(VertexKind::Operator { .. })) {
                return Err(ServiceError::invalid(format!(
                    "\"{name}\" is no operator of the job; only operators rescale (a source's \
                     and a sink's positions are per subtask)"
                )));
            }
        }
        let mut pending = job.rescale.lock().unwrap_or_else(|p| p.into_inner());
        if pending.is_some() {
            return Err(ServiceError::conflict(
                "the job is being rescaled already; wait for that rescale",
            ));
        }
        // Again under the lock: the end of a run that ended since would not take the
        // rescale up, and its operation would stay in progress.
        Self::running(&job)?;
        if run.control.is_stopping() {
            // A rescale now would start the job again after its stop.
            return Err(ServiceError::conflict(
                "the job is stopping; submit it again from its savepoint with the new \
                 parallelism",
            ));
        }
        let op = match Self::begin_operation(&job, OperationKind::Rescale, request.request_id) {
            Ok(op) => op,
            Err(answer) => return answer,
        };
        let dir = ManagedJob::savepoint_dir(&self.data_dir, id, &op.request_id);
        let handle = run.control.stop_with_savepoint(dir, false);
        *pending = Some(PendingRescale {
            request_id: op.request_id.clone(),
            parallelism: request.parallelism,
            savepoint: handle,
        });
        Ok(op)
    }

    /// Upgrades operators of job `id`: their new components are loaded while the job runs
    /// on (a component that does not load is refused here, and nothing changes), then
    /// swapped in at one checkpoint barrier. Answers at once with the operation to poll.
    pub fn upgrade(&self, id: &str, request: UpgradeRequest) -> Result<Operation, ServiceError> {
        let job = self.job(id)?;
        if let Some(op) = Self::seen(&job, OperationKind::Upgrade, &request.request_id)? {
            return Ok(op);
        }
        if request.operators.is_empty() {
            return Err(ServiceError::invalid(
                "`operators` is empty; name the operators to upgrade by uid, with their new \
                 component",
            ));
        }
        let mut table: toml::Table = job
            .record()
            .spec
            .parse()
            .map_err(|e| spec_error(format!("{e}")))?;
        let reserved = self.reserved();
        let mut shas = Vec::new();
        for (i, op) in request.operators.iter().enumerate() {
            if request.operators[..i].iter().any(|o| o.uid == op.uid) {
                return Err(ServiceError::invalid(format!(
                    "operator uid \"{}\" is named twice; name each operator once",
                    op.uid
                )));
            }
            let sha = self.components.resolve(&op.component).map_err(|e| {
                ServiceError::not_found(format!("operator uid \"{}\": {e}", op.uid))
            })?;
            shas.push(sha.clone());
            let table_of = |what: &str, value: &Option<serde_json::Value>| {
                value
                    .as_ref()
                    .map(|v| match v {
                        serde_json::Value::Object(_) => toml::Value::try_from(v).map_err(|e| {
                            ServiceError::invalid(format!(
                                "operator uid \"{}\": `{what}` cannot be a job spec's {what}: {e}",
                                op.uid
                            ))
                        }),
                        _ => Err(ServiceError::invalid(format!(
                            "operator uid \"{}\": `{what}` must be a JSON object",
                            op.uid
                        ))),
                    })
                    .transpose()
            };
            let config = table_of("config", &op.config)?;
            let limits = table_of("limits", &op.limits)?;
            set_operator(&mut table, &op.uid, sha, config, limits)?;
        }
        let _reservation = self.reserve(reserved, &shas);
        let probation = Probation {
            time: request
                .probation_ms
                .map_or(Probation::default().time, std::time::Duration::from_millis),
            records: request.probation_records.unwrap_or(0),
        };
        self.start_upgrade(
            &job,
            table,
            OperationKind::Upgrade,
            request.request_id,
            None,
            probation,
        )
    }

    /// Rolls job `id` back to its previous code: the upgrade on probation is rolled back (as
    /// if its new code had failed), or else the last committed upgrade is undone by an
    /// upgrade to the operators as they were before it (code, config, limits). Answers at
    /// once.
    pub fn roll_back(&self, id: &str, request: RollbackRequest) -> Result<Operation, ServiceError> {
        let job = self.job(id)?;
        if let Some(op) = Self::seen(&job, OperationKind::Rollback, &request.request_id)? {
            return Ok(op);
        }
        let run = Self::running(&job)?;
        let last = job.record().upgrades.last().cloned();
        let Some(last) = last else {
            return Err(ServiceError::conflict(
                "the job has not been upgraded; there is nothing to roll back",
            ));
        };
        if last.in_progress() {
            let op = match Self::begin_operation(&job, OperationKind::Rollback, request.request_id)
            {
                Ok(op) => op,
                Err(answer) => return answer,
            };
            job.update(|r| {
                if let Some(u) = r.upgrades.last_mut() {
                    u.rolled_back_by = Some(op.request_id.clone());
                }
            })?;
            run.control.roll_back();
            return Ok(op);
        }
        let undo = job
            .record()
            .upgrades
            .iter()
            .rev()
            .find(|u| u.info.status == UpgradeStatus::Committed)
            .cloned()
            .ok_or_else(|| {
                ServiceError::conflict(
                    "no upgrade of the job was committed; there is nothing to roll back",
                )
            })?;
        let mut table: toml::Table = job
            .record()
            .spec
            .parse()
            .map_err(|e| spec_error(format!("{e}")))?;
        // What the upgrade changed, as it was: code, config, limits and grants; the rest
        // (a parallelism rescaled since) as it is.
        let mut previous: toml::Table = undo
            .previous
            .parse()
            .map_err(|e| spec_error(format!("{e}")))?;
        for change in &undo.info.operators {
            let before = operator_table(&mut previous, &change.uid)?.clone();
            let now = operator_table(&mut table, &change.uid)?;
            for key in ["wasm", "config", "limits", "grants"] {
                match before.get(key) {
                    Some(value) => now.insert(key.into(), value.clone()),
                    None => now.remove(key),
                };
            }
        }
        self.start_upgrade(
            &job,
            table,
            OperationKind::Rollback,
            request.request_id,
            Some(undo.info.request_id),
            Probation::default(),
        )
    }

    /// An earlier operation of `kind` under `request_id`, if the id names one (a retry).
    fn seen(
        job: &ManagedJob,
        kind: OperationKind,
        request_id: &Option<String>,
    ) -> Result<Option<Operation>, ServiceError> {
        match request_id {
            Some(request_id) => earlier(&job.record(), kind, request_id),
            None => Ok(None),
        }
    }

    /// Upgrades `job` to the spec `table` (which changes operators' code and config only).
    fn start_upgrade(
        &self,
        job: &Arc<ManagedJob>,
        table: toml::Table,
        kind: OperationKind,
        request_id: Option<String>,
        rollback_of: Option<String>,
        probation: Probation,
    ) -> Result<Operation, ServiceError> {
        let run = Self::running(job)?;
        let _changing = job.begin_change()?;
        if job.upgrading() {
            return Err(ServiceError::conflict(
                "an upgrade of the job is in progress; wait until it is committed or rolled \
                 back (or roll it back)",
            ));
        }
        if job.rescaling() {
            return Err(ServiceError::conflict(
                "the job is being rescaled; upgrade it once the rescale is done",
            ));
        }
        let (old_text, base_dir) = {
            let r = job.record();
            (r.spec.clone(), r.base_dir.clone())
        };
        let new_text = toml::to_string(&table).expect("a table serializes");
        let (old, new) = (
            self.spec(&old_text, &base_dir)?,
            self.spec(&new_text, &base_dir)?,
        );
        let upgrade = Upgrade::between(&old, &new, &self.engine, probation)
            .map_err(|e| ServiceError::new(ErrorCode::InvalidComponent, e.to_string()))?;
        if upgrade.operators.is_empty() {
            return Err(ServiceError::invalid(
                "the operators run this code and config already; nothing to upgrade",
            ));
        }
        // New code that does not open with its config is refused here, not at the swap.
        for o in &upgrade.operators {
            let v = (new.vertices.iter())
                .position(|v| matches!(&v.kind, VertexKind::Operator { uid, .. } if *uid == o.uid));
            if let Some(v) = v {
                crate::runtime::open_operator(&new, v, Some(&o.component)).map_err(|e| {
                    ServiceError::invalid(format!("the new code does not open: {e}"))
                })?;
            }
        }
        let (before, after) = (versions(&old), versions(&new));
        let operators = upgrade
            .operators
            .iter()
            .map(|o| OperatorChange {
                uid: o.uid.clone(),
                from: before[&o.uid].clone(),
                to: after[&o.uid].clone(),
            })
            .collect();
        let op = match Self::begin_operation(job, kind, request_id) {
            Ok(op) => op,
            Err(answer) => return answer,
        };
        job.update(|r| {
            r.upgrades.push(UpgradeEntry {
                info: UpgradeInfo {
                    request_id: op.request_id.clone(),
                    requested_ms: op.requested_ms,
                    operators,
                    status: UpgradeStatus::Pending,
                    cause: None,
                    swap_checkpoint: None,
                    ended_ms: None,
                    time_to_commit_ms: None,
                    pauses: Vec::new(),
                    rollback_of,
                },
                spec: new_text,
                previous: old_text,
                rolled_back_by: None,
            })
        })?;
        let handle = run.control.upgrade(upgrade);
        job.follow_upgrade(op.request_id.clone(), handle);
        Ok(op)
    }

    /// Operation `request_id` of job `id`.
    pub fn operation(&self, id: &str, request_id: &str) -> Result<Operation, ServiceError> {
        let job = self.job(id)?;
        let record = job.record();
        record
            .operations
            .iter()
            .find(|o| o.request_id == request_id)
            .cloned()
            .ok_or_else(|| {
                ServiceError::not_found(format!(
                    "job {id} has no operation {request_id:?}; GET /v1/jobs/{id} lists them"
                ))
            })
    }

    /// Stops every running job at a checkpoint and waits for them to end; their records stay
    /// `running`, so that the next start of the service resumes them.
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let jobs: Vec<Arc<ManagedJob>> = self.jobs().values().cloned().collect();
        for job in &jobs {
            if let Some(run) = job.run() {
                run.control.stop();
            }
        }
        for job in &jobs {
            while job.run().is_some() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

fn spec_error(message: impl Into<String>) -> ServiceError {
    ServiceError::new(ErrorCode::InvalidSpec, message)
}

/// The error of a job that did not start.
fn start_error(e: JobError) -> ServiceError {
    match e {
        JobError::Checkpoint(CheckpointError::Incompatible { .. }) => {
            ServiceError::new(ErrorCode::SavepointDoesNotFit, e.to_string())
        }
        JobError::Checkpoint(
            CheckpointError::Corrupt { .. } | CheckpointError::NotACheckpoint { .. },
        ) => ServiceError::invalid(e.to_string()),
        e => ServiceError::new(ErrorCode::Internal, e.to_string()),
    }
}

/// The operation of `record` under `request_id`, if any: the answer to a retry of it, or a
/// conflict if it is of another kind than `kind`.
fn earlier(
    record: &JobRecord,
    kind: OperationKind,
    request_id: &str,
) -> Result<Option<Operation>, ServiceError> {
    match record
        .operations
        .iter()
        .find(|o| o.request_id == request_id)
    {
        Some(op) if op.kind == kind => Ok(Some(op.clone())),
        Some(_) => Err(ServiceError::conflict(format!(
            "request id {request_id} names an earlier operation of another kind; use a new id"
        ))),
        None => Ok(None),
    }
}

/// The table of operator `uid` in the spec `table`.
fn operator_table<'t>(
    table: &'t mut toml::Table,
    uid: &str,
) -> Result<&'t mut toml::Table, ServiceError> {
    table
        .get_mut("operator")
        .and_then(|o| o.as_array_mut())
        .into_iter()
        .flatten()
        .filter_map(|o| o.as_table_mut())
        .find(|o| operator_uid(o) == Some(uid))
        .ok_or_else(|| {
            ServiceError::not_found(format!(
                "the job has no operator with uid \"{uid}\"; GET /v1/jobs/{{id}} lists them"
            ))
        })
}

/// Points WebAssembly operator `uid` of the spec `table` at component `sha`, with `config`
/// and `limits` if given.
fn set_operator(
    table: &mut toml::Table,
    uid: &str,
    sha: String,
    config: Option<toml::Value>,
    limits: Option<toml::Value>,
) -> Result<(), ServiceError> {
    let operator = operator_table(table, uid)?;
    if !operator.contains_key("wasm") {
        return Err(ServiceError::invalid(format!(
            "operator uid \"{uid}\" is a built-in; only WebAssembly operators and window \
             functions in components are upgraded"
        )));
    }
    operator.insert("wasm".into(), format!("sha256:{sha}").into());
    for (key, value) in [("config", config), ("limits", limits)] {
        if let Some(value) = value {
            operator.insert(key.into(), value);
        }
    }
    Ok(())
}

/// The uid of an operator table of a spec: its `uid`, else its name.
fn operator_uid(operator: &toml::Table) -> Option<&str> {
    let name = operator.get("name").and_then(|n| n.as_str());
    operator.get("uid").and_then(|u| u.as_str()).or(name)
}

/// The version of each operator of a service's `spec` that runs a component (a WebAssembly
/// operator or a window's function), by uid.
fn versions(spec: &JobSpec) -> BTreeMap<String, OperatorVersion> {
    spec.vertices
        .iter()
        .filter_map(|v| {
            let VertexKind::Operator { uid, code, config } = &v.kind else {
                return None;
            };
            let path = match code {
                OperatorCode::Wasm { path, .. } => path,
                OperatorCode::Window(WindowSpec {
                    code: Some(code), ..
                }) => &code.path,
                _ => return None,
            };
            let version = OperatorVersion {
                component: path.file_stem()?.to_str()?.to_string(),
                config: config.clone(),
            };
            Some((uid.clone(), version))
        })
        .collect()
}

/// Settles the upgrades of `job` that were in progress when the service stopped, by the
/// code that wrote its newest checkpoint (where the job resumes): an upgrade whose new code
/// wrote it was committed (its commit checkpoint completed), any other was rolled back (the
/// newest checkpoint is its swap checkpoint or older, written by the old code).
fn settle_upgrades(job: &ManagedJob) -> Result<(), ServiceError> {
    if !job.upgrading() {
        return Ok(());
    }
    let name = job.record().name.clone();
    let latest = crate::checkpoint::code_versions(&ManagedJob::checkpoints_in(&job.dir), &name);
    job.update(|r| {
        let pending: Vec<UpgradeEntry> = r
            .upgrades
            .iter()
            .filter(|u| u.in_progress())
            .cloned()
            .collect();
        for u in pending {
            let applied = latest.as_ref().is_some_and(|(_, code)| {
                u.info.operators.iter().all(|c| {
                    code.get(&c.uid)
                        .is_some_and(|v| v.component == c.to.component && v.config == c.to.config)
                })
            });
            let id = &u.info.request_id;
            if applied {
                r.end_upgrade(id, UpgradeStatus::Committed, None);
            } else {
                let at = latest
                    .as_ref()
                    .map(|(n, _)| format!(" from checkpoint {n}"))
                    .unwrap_or_default();
                r.end_upgrade(
                    id,
                    UpgradeStatus::RolledBack,
                    Some(format!(
                        "the service stopped before the upgrade was committed; the job \
                         resumed with the old code{at}"
                    )),
                );
            }
        }
    })
}

/// `spec` with operators at the parallelism `parallelism` gives them.
fn rescaled_spec(spec: &str, parallelism: &BTreeMap<String, u32>) -> Result<String, ServiceError> {
    if parallelism.is_empty() {
        return Err(ServiceError::invalid(
            "`parallelism` names no vertex; give {\"<operator>\": <parallelism>}",
        ));
    }
    let mut table: toml::Table = spec.parse().map_err(|e| spec_error(format!("{e}")))?;
    for (name, p) in parallelism {
        let vertex = table
            .iter_mut()
            .filter(|(kind, _)| matches!(kind.as_str(), "source" | "operator" | "sink"))
            .filter_map(|(_, v)| v.as_array_mut())
            .flat_map(|a| a.iter_mut())
            .filter_map(|v| v.as_table_mut())
            .find(|v| v.get("name").and_then(|n| n.as_str()) == Some(name));
        match vertex {
            Some(v) => {
                v.insert("parallelism".into(), toml::Value::Integer(i64::from(*p)));
            }
            None => {
                return Err(ServiceError::invalid(format!(
                    "the job has no vertex \"{name}\""
                )));
            }
        }
    }
    Ok(toml::to_string(&table).expect("a table serializes"))
}

/// Components held back from deletion while a submit or an upgrade that named them gets its
/// job to record them ([`Service::reserve`]); given back when dropped.
struct Reservation<'a> {
    reserved: &'a Mutex<Vec<String>>,
    shas: Vec<String>,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        for sha in &self.shas {
            if let Some(at) = reserved.iter().position(|s| s == sha) {
                reserved.swap_remove(at);
            }
        }
    }
}
