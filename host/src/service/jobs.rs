//! One job the service manages: its record on disk, its run (if it runs), and the thread that
//! watches the run and writes what happens into the record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::api::{
    CheckpointInfo, CheckpointSummary, ExceptionInfo, JobDetails, JobOverview, JobStatus,
    Operation, OperationKind, OperationStatus, SubtaskPause, UpgradeInfo, UpgradeStatus,
    VertexStatus,
};
use super::error::ServiceError;
use super::store::{now_ms, write_json};
use crate::runtime::{Failure, JobControl, JobEnd, JobError, JobEvent, Metrics, RunningJob};
use crate::{SavepointFailed, SavepointHandle, UpgradeHandle, UpgradeOutcome};

/// Entries kept in a job's exception history.
const EXCEPTIONS: usize = 100;

/// What the service keeps of a job (`<data>/jobs/<id>/job.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    pub id: String,
    pub name: String,
    pub status: JobStatus,
    pub submitted_ms: u64,
    pub ended_ms: Option<u64>,
    /// The spec as the service runs it: TOML, components named `sha256:<hex>`.
    pub spec: String,
    /// What relative paths of the spec resolve against.
    pub base_dir: PathBuf,
    /// The components the spec uses (sha256).
    pub components: Vec<String>,
    /// The savepoint it starts from when it has no checkpoint yet.
    pub savepoint: Option<PathBuf>,
    pub allow_non_restored_state: bool,
    pub restarts: u32,
    pub exceptions: Vec<ExceptionInfo>,
    pub operations: Vec<Operation>,
    /// Its upgrades, oldest first.
    #[serde(default)]
    pub upgrades: Vec<UpgradeEntry>,
}

/// An upgrade as a job's record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UpgradeEntry {
    #[serde(flatten)]
    pub info: UpgradeInfo,
    /// The spec with the new code: the job's spec once the upgrade is committed.
    pub spec: String,
    /// The job's spec before it, which a rollback of it goes back to.
    #[serde(default)]
    pub previous: String,
    /// The rollback operation asked of it while it was on probation.
    #[serde(default)]
    pub rolled_back_by: Option<String>,
}

impl UpgradeEntry {
    /// Whether it is neither committed nor rolled back nor refused yet.
    pub(crate) fn in_progress(&self) -> bool {
        matches!(
            self.info.status,
            UpgradeStatus::Pending | UpgradeStatus::Probation
        )
    }
}

impl JobRecord {
    pub(crate) fn overview(&self) -> JobOverview {
        JobOverview {
            id: self.id.clone(),
            name: self.name.clone(),
            status: self.status,
            submitted_ms: self.submitted_ms,
            ended_ms: self.ended_ms,
            restarts: self.restarts,
        }
    }

    fn upgrade(&mut self, request_id: &str) -> Option<&mut UpgradeEntry> {
        self.upgrades
            .iter_mut()
            .find(|u| u.info.request_id == request_id)
    }

    /// Ends upgrade `request_id` as `status` (its operation, and a rollback asked of it,
    /// with it); a committed upgrade's spec becomes the job's.
    pub(crate) fn end_upgrade(
        &mut self,
        request_id: &str,
        status: UpgradeStatus,
        cause: Option<String>,
    ) {
        let Some(entry) = self.upgrade(request_id) else {
            return;
        };
        entry.info.status = status;
        entry.info.cause.clone_from(&cause);
        entry.info.ended_ms = Some(now_ms());
        let (spec, rollback) = (entry.spec.clone(), entry.rolled_back_by.clone());
        let components: Vec<String> = entry
            .info
            .operators
            .iter()
            .map(|c| c.to.component.clone())
            .collect();
        let committed = status == UpgradeStatus::Committed;
        if committed {
            self.spec = spec;
            self.components.extend(components);
            self.components.sort();
            self.components.dedup();
        }
        let end = |op: &mut Operation, status: OperationStatus, error: Option<String>| {
            op.status = status;
            op.error = error;
            op.ended_ms = Some(now_ms());
        };
        if let Some(op) = self.operation(request_id) {
            match committed {
                true => end(op, OperationStatus::Completed, None),
                false => end(op, OperationStatus::Failed, cause),
            }
        }
        if let Some(op) = rollback.and_then(|id| self.operation(&id)) {
            if committed {
                let why = "the upgrade was committed before the rollback reached it; roll back \
                           again to undo it";
                end(op, OperationStatus::Failed, Some(why.into()));
            } else {
                end(op, OperationStatus::Completed, None);
            }
        }
    }

    fn operation(&mut self, request_id: &str) -> Option<&mut Operation> {
        self.operations
            .iter_mut()
            .find(|o| o.request_id == request_id)
    }

    fn exception(&mut self, failure: &Failure, fatal: bool) {
        self.exceptions.push(ExceptionInfo {
            time_ms: now_ms(),
            message: failure.message.clone(),
            vertex: failure.vertex.clone(),
            uid: failure.uid.clone(),
            subtask: failure.subtask,
            kind: failure.kind.clone(),
            fatal,
        });
        let excess = self.exceptions.len().saturating_sub(EXCEPTIONS);
        self.exceptions.drain(..excess);
    }
}

/// A run of a job in this process.
pub(crate) struct Run {
    pub control: JobControl,
    metrics: Arc<Metrics>,
    /// The last sample of the counters and the rates computed from the one before.
    rates: Mutex<Rates>,
}

struct Rates {
    at: Instant,
    counts: Vec<(u64, u64)>,
    rates: Vec<(f64, f64)>,
}

/// A rescale waiting for the job's stop: the new parallelism by vertex, and the savepoint.
pub(crate) struct PendingRescale {
    pub request_id: String,
    pub parallelism: BTreeMap<String, u32>,
    pub savepoint: SavepointHandle,
}

/// A job of the service.
pub(crate) struct ManagedJob {
    /// `<data>/jobs/<id>/`.
    pub dir: PathBuf,
    // Lock order: `record`, then `run`.
    record: Mutex<JobRecord>,
    run: Mutex<Option<Arc<Run>>>,
    /// The run that ended last, whose final counts the job's status shows until it runs
    /// again (not kept across a restart of the service).
    ended: Mutex<Option<Arc<Run>>>,
    pub rescale: Mutex<Option<PendingRescale>>,
    /// Held while an upgrade or a rescale is checked and asked for (see
    /// [`ManagedJob::begin_change`]).
    changing: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ManagedJob {
    pub(crate) fn new(dir: PathBuf, record: JobRecord) -> ManagedJob {
        ManagedJob {
            dir,
            record: Mutex::new(record),
            run: Mutex::new(None),
            ended: Mutex::new(None),
            rescale: Mutex::new(None),
            changing: Mutex::new(()),
        }
    }

    /// Begins an upgrade or a rescale, to hold until it is asked of the job: one that comes
    /// meanwhile is refused, rather than passing the same checks (its new code may take
    /// seconds to open) and being asked for as well.
    pub(crate) fn begin_change(&self) -> Result<MutexGuard<'_, ()>, ServiceError> {
        match self.changing.try_lock() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(ServiceError::conflict(
                "another upgrade or rescale of the job is being asked for; try again once it \
                 has been answered",
            )),
        }
    }

    pub(crate) fn record(&self) -> MutexGuard<'_, JobRecord> {
        lock(&self.record)
    }

    pub(crate) fn run(&self) -> Option<Arc<Run>> {
        lock(&self.run).clone()
    }

    /// Whether a rescale waits for the job's stop.
    pub(crate) fn rescaling(&self) -> bool {
        lock(&self.rescale).is_some()
    }

    /// Whether an upgrade of the job is pending or on probation.
    pub(crate) fn upgrading(&self) -> bool {
        self.record().upgrades.iter().any(UpgradeEntry::in_progress)
    }

    /// Changes the record with `change` and writes it.
    pub(crate) fn update(&self, change: impl FnOnce(&mut JobRecord)) -> Result<(), ServiceError> {
        let mut record = self.record();
        change(&mut record);
        self.save(&record)
    }

    pub(crate) fn save(&self, record: &JobRecord) -> Result<(), ServiceError> {
        write_json(&self.dir.join("job.json"), record)
    }

    /// Records a write failure of the record rather than losing it silently.
    fn update_logged(&self, change: impl FnOnce(&mut JobRecord)) {
        if let Err(e) = self.update(change) {
            tracing::error!("cannot record the state of job {}: {e}", self.dir.display());
        }
    }

    /// Where the checkpoints of the job in `job_dir` are.
    pub(crate) fn checkpoints_in(job_dir: &Path) -> PathBuf {
        job_dir.join("checkpoints")
    }

    /// Where the RocksDB state of the job in `job_dir` is.
    pub(crate) fn state_in(job_dir: &Path) -> PathBuf {
        job_dir.join("state")
    }

    /// Where the service puts the savepoint of request `request_id`.
    pub(crate) fn savepoint_dir(data_dir: &Path, job: &str, request_id: &str) -> PathBuf {
        data_dir.join("savepoints").join(job).join(request_id)
    }

    /// The job now runs as `running`.
    pub(crate) fn started(&self, running: &RunningJob, control: JobControl) -> Arc<Run> {
        let metrics = running.shared_metrics();
        let counts = counts(&metrics);
        let run = Arc::new(Run {
            control,
            rates: Mutex::new(Rates {
                at: Instant::now(),
                rates: vec![(0.0, 0.0); counts.len()],
                counts,
            }),
            metrics,
        });
        *lock(&self.run) = Some(Arc::clone(&run));
        *lock(&self.ended) = None;
        run
    }

    /// Follows `running` until it ends, recording its status, restarts and failures; then
    /// hands its end to `ended`, which says whether the job goes on (a rescale, a shutdown of
    /// the service): else the end is recorded. Nothing is recorded as ended before that is
    /// known, so a crash in between leaves a job that resumes.
    pub(crate) fn watch(
        self: &Arc<Self>,
        running: RunningJob,
        ended: impl FnOnce(&Arc<ManagedJob>, &Result<JobEnd, JobError>) -> bool + Send + 'static,
    ) {
        let job = Arc::clone(self);
        let events = running.events();
        let spawned = std::thread::Builder::new()
            .name("job-watch".into())
            .spawn(move || {
                let follow = {
                    let job = Arc::clone(&job);
                    std::thread::spawn(move || {
                        for event in events {
                            job.on_event(event);
                        }
                    })
                };
                let result = running.wait().map(|summary| summary.end);
                let _ = follow.join();
                let last = lock(&job.run).take();
                *lock(&job.ended) = last;
                if !ended(&job, &result) {
                    job.on_end(&result);
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread to watch a job: {e}");
        }
    }

    fn on_event(&self, event: JobEvent) {
        match event {
            JobEvent::Starting { .. } => self.update_logged(|r| {
                if !matches!(r.status, JobStatus::Cancelling) {
                    r.status = JobStatus::Running;
                }
            }),
            JobEvent::Restarting { failure, .. } => self.update_logged(|r| {
                r.restarts += 1;
                r.exception(&failure, false);
                if !matches!(r.status, JobStatus::Cancelling) {
                    r.status = JobStatus::Restarting;
                }
            }),
            JobEvent::Failing { .. } => self.update_logged(|r| {
                if !matches!(r.status, JobStatus::Cancelling) {
                    r.status = JobStatus::Failing;
                }
            }),
            JobEvent::Stopping { .. } => {}
        }
    }

    /// Records how the job ended.
    fn on_end(&self, result: &Result<JobEnd, JobError>) {
        self.update_logged(|r| {
            let status = match result {
                Ok(JobEnd::Finished | JobEnd::AlreadyFinished(_)) => JobStatus::Finished,
                Ok(JobEnd::Stopped { .. }) => JobStatus::Stopped,
                Err(JobError::Cancelled) => JobStatus::Cancelled,
                Err(e) => {
                    r.exception(&Failure::of(e), true);
                    JobStatus::Failed
                }
            };
            r.status = status;
            r.ended_ms = Some(now_ms());
            for op in &mut r.operations {
                if op.status != OperationStatus::InProgress {
                    continue;
                }
                match op.kind {
                    // A stop without a savepoint is done when the job is.
                    OperationKind::Stop if op.savepoint.is_none() => {
                        op.status = if status == JobStatus::Stopped || status == JobStatus::Finished
                        {
                            OperationStatus::Completed
                        } else {
                            OperationStatus::Failed
                        };
                        if op.status == OperationStatus::Failed {
                            op.error = Some(format!("the job ended as {status:?}"));
                        }
                        op.ended_ms = Some(now_ms());
                    }
                    _ => {}
                }
            }
        });
    }

    /// Records the answer of the savepoint of operation `request_id`.
    pub(crate) fn savepoint_done(
        &self,
        request_id: &str,
        answer: &Result<crate::Savepoint, SavepointFailed>,
    ) {
        self.update_logged(|r| {
            if let Some(op) = r.operation(request_id) {
                match answer {
                    Ok(savepoint) => {
                        op.savepoint = Some(savepoint.path.display().to_string());
                        if op.kind != OperationKind::Rescale {
                            op.status = OperationStatus::Completed;
                            op.ended_ms = Some(now_ms());
                        }
                    }
                    Err(e) => {
                        op.status = OperationStatus::Failed;
                        op.error = Some(e.to_string());
                        op.ended_ms = Some(now_ms());
                    }
                }
            }
        });
    }

    /// Ends operation `request_id` as `status`, with `error`.
    pub(crate) fn end_operation(
        &self,
        request_id: &str,
        status: OperationStatus,
        error: Option<String>,
    ) {
        self.update_logged(|r| {
            if let Some(op) = r.operation(request_id) {
                op.status = status;
                op.error = error;
                op.ended_ms = Some(now_ms());
            }
        });
    }

    /// Follows upgrade `request_id` through `handle` in a thread of its own, recording its
    /// probation and its end.
    pub(crate) fn follow_upgrade(self: &Arc<Self>, request_id: String, handle: UpgradeHandle) {
        let job = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("upgrade-watch".into())
            .spawn(move || {
                let mut on_probation = false;
                let outcome = loop {
                    if !on_probation && let Some(id) = handle.swapped() {
                        on_probation = true;
                        job.update_logged(|r| {
                            if let Some(u) = r.upgrade(&request_id) {
                                u.info.status = UpgradeStatus::Probation;
                                u.info.swap_checkpoint = Some(id);
                            }
                        });
                    }
                    if let Some(outcome) = handle.poll() {
                        break outcome;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                };
                job.update_logged(|r| match outcome {
                    UpgradeOutcome::Committed { checkpoint, report } => {
                        if let Some(u) = r.upgrade(&request_id) {
                            u.info.swap_checkpoint = Some(checkpoint);
                            u.info.time_to_commit_ms =
                                Some(report.committed_after.as_millis() as u64);
                            let mut pauses: Vec<SubtaskPause> = report
                                .pauses
                                .iter()
                                .map(|p| SubtaskPause {
                                    pause_us: p.total.as_micros() as u64,
                                    snapshot_us: p.snapshot.as_micros() as u64,
                                })
                                .collect();
                            pauses.sort_unstable_by_key(|p| p.pause_us);
                            u.info.pauses = pauses;
                        }
                        r.end_upgrade(&request_id, UpgradeStatus::Committed, None);
                    }
                    UpgradeOutcome::RolledBack { cause } => {
                        r.end_upgrade(&request_id, UpgradeStatus::RolledBack, Some(cause))
                    }
                    UpgradeOutcome::Refused(why) => {
                        r.end_upgrade(&request_id, UpgradeStatus::Refused, Some(why))
                    }
                });
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread to follow an upgrade: {e}");
        }
    }

    /// The job's whole status.
    pub(crate) fn details(&self) -> JobDetails {
        let record = self.record().clone();
        let live = self.run();
        let run = live.clone().or_else(|| lock(&self.ended).clone());
        let (vertices, checkpoints, undeclared_states) = match run {
            Some(run) => (
                run.vertices(&record.spec, live.is_some()),
                run.checkpoints(),
                run.undeclared_states(&record.spec),
            ),
            None => (Vec::new(), CheckpointSummary::default(), BTreeMap::new()),
        };
        JobDetails {
            overview: record.overview(),
            vertices,
            checkpoints,
            restored_from_savepoint: record.savepoint.map(|p| p.display().to_string()),
            operations: record.operations,
            upgrades: record.upgrades.into_iter().map(|u| u.info).collect(),
            undeclared_states,
            spec: record.spec,
        }
    }
}

fn counts(metrics: &Metrics) -> Vec<(u64, u64)> {
    metrics
        .summaries()
        .iter()
        .map(|v| (v.records_in, v.records_out))
        .collect()
}

impl Run {
    /// The vertices with their counters and rates (over at least the last second; zero once
    /// the run is no longer `live`).
    fn vertices(&self, spec: &str, live: bool) -> Vec<VertexStatus> {
        let now = counts(&self.metrics);
        let rates = if !live {
            vec![(0.0, 0.0); now.len()]
        } else {
            let mut r = lock(&self.rates);
            let elapsed = r.at.elapsed().as_secs_f64();
            if elapsed >= 1.0 {
                r.rates = now
                    .iter()
                    .zip(&r.counts)
                    .map(|(n, o)| {
                        (
                            n.0.saturating_sub(o.0) as f64 / elapsed,
                            n.1.saturating_sub(o.1) as f64 / elapsed,
                        )
                    })
                    .collect();
                r.counts = now.clone();
                r.at = Instant::now();
            }
            r.rates.clone()
        };
        let uids = uids(spec);
        self.metrics
            .vertices
            .iter()
            .zip(now.iter().zip(rates))
            .map(|(v, (count, rate))| VertexStatus {
                name: v.name.clone(),
                role: v.role.to_string(),
                uid: uids.get(&v.name).cloned(),
                parallelism: v.parallelism,
                records_in: count.0,
                records_out: count.1,
                records_in_per_second: rate.0,
                records_out_per_second: rate.1,
                watermark: v.watermark(),
                event_time_lag: v.event_time_lag(),
                guest: v.guest_usage(),
            })
            .collect()
    }

    /// The keyed states operators hold that their code does not declare, by uid.
    fn undeclared_states(&self, spec: &str) -> BTreeMap<String, Vec<String>> {
        let uids = uids(spec);
        self.metrics
            .vertices
            .iter()
            .filter_map(|v| {
                let states = v.undeclared_states();
                let uid = uids.get(&v.name)?;
                (!states.is_empty()).then(|| (uid.clone(), states))
            })
            .collect()
    }

    fn checkpoints(&self) -> CheckpointSummary {
        let status = self.metrics.checkpoint_status();
        CheckpointSummary {
            completed: status.completed,
            failed: status.failed,
            last: status.last.as_ref().map(checkpoint_info),
        }
    }
}

/// The uid of each operator of a spec, by vertex name.
fn uids(spec: &str) -> BTreeMap<String, String> {
    let Ok(table) = spec.parse::<toml::Table>() else {
        return BTreeMap::new();
    };
    let operators = table.get("operator").and_then(|o| o.as_array());
    operators
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let name = o.get("name")?.as_str()?;
            let uid = o.get("uid").and_then(|u| u.as_str()).unwrap_or(name);
            Some((name.to_string(), uid.to_string()))
        })
        .collect()
}

pub(crate) fn checkpoint_info(e: &crate::checkpoint::HistoryEntry) -> CheckpointInfo {
    CheckpointInfo {
        id: e.id,
        status: match e.status {
            crate::checkpoint::CheckpointOutcome::Completed => "completed",
            crate::checkpoint::CheckpointOutcome::Aborted => "aborted",
        }
        .into(),
        reason: e.reason.clone(),
        triggered_ms: e.triggered_ms,
        duration_ms: e.duration_ms,
        size_bytes: e.size_bytes,
        full_size_bytes: e.full_size_bytes,
    }
}
