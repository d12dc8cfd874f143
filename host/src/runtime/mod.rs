//! The local runtime: one thread per chain subtask, bounded channels between them.
//!
//! [`Job::new`] validates a spec's operators (loading and linking every component) before
//! anything runs; [`Job::start`] spawns the tasks and returns a [`RunningJob`] whose metrics
//! can be watched while it runs and whose [`RunningJob::wait`] reports the first failure with
//! the operator that caused it.

mod attempt;
pub(crate) mod barrier;
mod checkpointing;
mod lock;
pub(crate) mod output;
pub(crate) mod restore;
mod supervisor;
mod task;
mod validate;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::storage::{CheckpointStore, Completion};
use crate::checkpoint::{CheckpointError, HistoryEntry, RestartsExhausted, RestoreFrom};
use crate::clock::Clock;
use crate::job::plan::Plan;
use crate::job::spec::{JobSpec, OperatorCode, VertexKind};
pub use crate::operator::FailureKind;
use crate::state::BackendKind;
use crate::wasm::{OperatorComponent, WasmEngine, WasmError};
use restore::Restored;

/// Why a job could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("operator \"{name}\" (uid {uid}): {cause}")]
    Component {
        name: String,
        uid: String,
        cause: WasmError,
    },
    #[error("{role} \"{name}\"{uid} (subtask {subtask} of {parallelism}) failed: {message}", uid = uid.as_ref().map(|u| format!(" (uid {u})")).unwrap_or_default())]
    Task {
        /// What kind of failure it was (a guest trap, a limit, ...).
        kind: FailureKind,
        role: &'static str,
        name: String,
        uid: Option<String>,
        subtask: u32,
        parallelism: u32,
        message: String,
        /// Whether a restart cannot heal it (the operator's `open` refused its config, a
        /// permission error): the job then fails at once instead of restarting.
        permanent: bool,
    },
    #[error("cannot start a task thread: {0}")]
    Spawn(std::io::Error),
    #[error("the job was cancelled")]
    Cancelled,
    /// Another process runs the job.
    #[error(
        "job \"{job}\" is already running{holder} (it holds the lock {path}); stop that run first \
         (Ctrl-C, or kill -INT <pid>), or give this run another [checkpoint] dir",
        holder = pid.map(|p| format!(" in process {p}")).unwrap_or_default(),
        path = path.display()
    )]
    AlreadyRunning {
        job: String,
        pid: Option<u32>,
        path: PathBuf,
    },
    #[error("cannot take the lock {path} of the job: {cause}", path = path.display())]
    Lock {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Too many checkpoints failed in a row.
    #[error("{0}")]
    CheckpointFailed(String),
    /// The job failed and its restart strategy allows no more restarts.
    #[error(transparent)]
    Restarts(Box<RestartsExhausted<JobError>>),
}

impl JobError {
    /// Whether restarting the job cannot heal this failure: it then fails at once.
    pub fn is_permanent(&self) -> bool {
        match self {
            JobError::Task { permanent, .. } => *permanent,
            JobError::Component { .. } => true,
            _ => false,
        }
    }

    /// For a failure of guest code: a description that is equal for equal failures (which
    /// operator, subtask, kind and message), to tell a deterministic failure from a transient
    /// one. `None` for any other failure.
    pub(crate) fn guest_failure(&self) -> Option<String> {
        match self {
            JobError::Task {
                kind: FailureKind::Other,
                ..
            } => None,
            JobError::Task {
                kind,
                name,
                subtask,
                message,
                ..
            } => Some(format!("{name}/{subtask}/{kind:?}: {message}")),
            _ => None,
        }
    }
}

/// How a job ended without failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Its input was exhausted, everything was processed and the sinks committed it all.
    Finished,
    /// An earlier run finished the job (see [`Completion`]); nothing ran. A fresh start
    /// ([`RestoreFrom::Fresh`]) runs it again.
    AlreadyFinished(Completion),
    /// Stopped on request ([`JobControl::stop`]). With checkpoints, at `checkpoint`, the newest
    /// complete one (`None`: none had completed), from which the next start resumes; sinks have
    /// committed everything up to it. `problem` says why that is not the stop's own checkpoint
    /// (it failed, or the job was failing). Without checkpoints, the sources ended their input
    /// early and what they had read was processed to the end (drained).
    Stopped {
        checkpoint: Option<u64>,
        problem: Option<String>,
    },
}

/// What happens in a job's life, as it happens: for a user to read and for a service to
/// record. See [`RunningJob::events`].
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// An attempt starts, from the beginning of the input or from a checkpoint (its id and
    /// directory). `restart` counts the restarts before it.
    Starting {
        restored_from: Option<(u64, PathBuf)>,
        restart: u32,
    },
    /// A stop was asked for: the job stops at checkpoint `checkpoint` once it completes
    /// (`None`: without checkpoints, the sources end their input and the job drains).
    Stopping { checkpoint: Option<u64> },
    /// The job failed with `cause` and restarts (restart number `restart`) after `delay`.
    Restarting {
        cause: String,
        delay: Duration,
        restart: u32,
    },
}

/// The sending side of a job's events; events nobody reads are dropped beyond a bound.
#[derive(Debug, Clone)]
pub(crate) struct Events(Sender<JobEvent>);

impl Events {
    pub(crate) fn send(&self, event: JobEvent) {
        let _ = self.0.try_send(event);
    }
}

/// Counters of one vertex, summed over its subtasks.
#[derive(Debug)]
pub struct VertexMetrics {
    pub name: String,
    pub role: &'static str,
    pub parallelism: u32,
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
}

/// Live counters of a running job.
#[derive(Debug)]
pub struct Metrics {
    pub vertices: Vec<VertexMetrics>,
    checkpoints: Mutex<CheckpointStatus>,
}

/// How checkpointing and recovery of a job are going.
#[derive(Debug, Clone, Default)]
pub struct CheckpointStatus {
    pub completed: u64,
    /// Checkpoints aborted for a reason other than a newer one completing first.
    pub failed: u64,
    /// The last completed checkpoint.
    pub last: Option<HistoryEntry>,
    /// The checkpoint the job (last) restored from.
    pub restored_from: Option<u64>,
    /// Restarts after failures.
    pub restarts: u32,
}

impl Metrics {
    /// The counters of every vertex now.
    pub fn summaries(&self) -> Vec<VertexSummary> {
        self.vertices
            .iter()
            .map(|v| VertexSummary {
                name: v.name.clone(),
                role: v.role,
                records_in: v.records_in.load(Ordering::Relaxed),
                records_out: v.records_out.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// A copy of the checkpoint counters.
    pub fn checkpoint_status(&self) -> CheckpointStatus {
        self.checkpoints().clone()
    }
}

/// A job whose operators are loaded and linked, ready to start (any number of times).
#[derive(Debug)]
pub struct Job {
    parts: Arc<JobParts>,
}

/// What every attempt of a job starts from.
#[derive(Debug, Clone)]
pub(crate) struct JobParts {
    spec: Arc<JobSpec>,
    plan: Plan,
    components: HashMap<usize, OperatorComponent>,
    /// Processing time for every task.
    clock: Clock,
}

/// A failure of subtask `subtask` of vertex `vertex`.
pub(crate) fn vertex_failure(
    spec: &JobSpec,
    vertex: usize,
    subtask: u32,
    kind: FailureKind,
    message: String,
) -> JobError {
    let v = &spec.vertices[vertex];
    JobError::Task {
        kind,
        role: role(&v.kind),
        name: v.name.clone(),
        uid: match &v.kind {
            VertexKind::Operator { uid, .. } => Some(uid.clone()),
            _ => None,
        },
        subtask,
        parallelism: v.parallelism,
        message,
        permanent: false,
    }
}

fn role(kind: &VertexKind) -> &'static str {
    match kind {
        VertexKind::Source(_) => "source",
        VertexKind::Operator { .. } => "operator",
        VertexKind::Sink(_) => "sink",
    }
}

impl Job {
    /// Loads and validates every WebAssembly operator of `spec`.
    pub fn new(spec: JobSpec, engine: &WasmEngine) -> Result<Job, JobError> {
        let mut components = HashMap::new();
        for (v, vertex) in spec.vertices.iter().enumerate() {
            if let VertexKind::Operator {
                uid,
                code: OperatorCode::Wasm { path, limits, .. },
                ..
            } = &vertex.kind
            {
                let component = engine
                    .load(path, limits)
                    .map_err(|cause| JobError::Component {
                        name: vertex.name.clone(),
                        uid: uid.clone(),
                        cause,
                    })?;
                components.insert(v, component);
            }
        }
        let plan = Plan::new(&spec);
        Ok(Job {
            parts: Arc::new(JobParts {
                spec: Arc::new(spec),
                plan,
                components,
                clock: Clock::system(),
            }),
        })
    }

    /// Runs the job on `clock` instead of the system clock: what state TTL and the guests'
    /// processing time read. Tests use a [`Clock::manual`] to expire state exactly.
    pub fn with_clock(mut self, clock: Clock) -> Job {
        Arc::make_mut(&mut self.parts).clock = clock;
        self
    }

    pub fn spec(&self) -> &JobSpec {
        &self.parts.spec
    }

    /// Starts the job from its newest checkpoint, if it has one (see [`Job::start_from`]).
    pub fn start(&self) -> Result<RunningJob, JobError> {
        self.start_from(RestoreFrom::Latest)
    }

    /// Starts every task of the job, restored from a checkpoint as `from` says. With
    /// checkpointing on, a failed task restarts the job from its newest checkpoint under the
    /// spec's restart strategy. A job an earlier run finished does not run again unless `from`
    /// is [`RestoreFrom::Fresh`] ([`JobEnd::AlreadyFinished`]); one another process runs does
    /// not start ([`JobError::AlreadyRunning`]).
    pub fn start_from(&self, from: RestoreFrom) -> Result<RunningJob, JobError> {
        self.start_controlled(from, JobControl::new())
    }

    /// [`Job::start_from`] under `control`, which may have been handed to a signal handler
    /// (and even used) before the job started: a stop asked for before the start stops the job
    /// at its first checkpoint.
    pub fn start_controlled(
        &self,
        from: RestoreFrom,
        control: JobControl,
    ) -> Result<RunningJob, JobError> {
        let spec = &self.parts.spec;
        let store = match &spec.checkpoint {
            Some(c) => Some(CheckpointStore::open(
                &spec.base_dir.join(&c.dir),
                &spec.name,
            )?),
            None => None,
        };
        let rocks = spec.state.backend == BackendKind::RocksDb;
        let lock = match lock::lock_path(
            store.as_ref().map(CheckpointStore::root),
            rocks.then(|| spec.state_root()).as_deref(),
        ) {
            Some(path) => Some(lock::JobLock::acquire(&path, &spec.name)?),
            None => None,
        };
        let (event_tx, events) = crossbeam_channel::bounded(1024);
        let events_out = Events(event_tx);
        let mut done = None;
        if let Some(store) = &store {
            if from == RestoreFrom::Latest {
                if let Some(completion) = store.completion()? {
                    // A crash may have come while its checkpoints were being deleted.
                    store.discard_all()?;
                    done = Some(JobEnd::AlreadyFinished(completion));
                }
            } else {
                store.remove_completion()?;
            }
        }
        if done.is_none() && rocks {
            // Working directories of an earlier process of this job that did not end cleanly
            // (killed): their state is in the checkpoints, if anywhere.
            let root = spec.state_root();
            if let Err(e) = std::fs::remove_dir_all(&root)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("cannot clear the RocksDB directory {}: {e}", root.display());
            }
        }
        let restore = match (from, &store) {
            _ if done.is_some() => None,
            (RestoreFrom::Fresh, _) | (RestoreFrom::Latest, None) => None,
            (RestoreFrom::Latest, Some(store)) => Restored::latest(store, spec)?,
            (RestoreFrom::Path(dir), _) => Some(Restored::load(&dir, spec)?),
        };
        let metrics = Arc::new(Metrics {
            vertices: spec
                .vertices
                .iter()
                .map(|v| VertexMetrics {
                    name: v.name.clone(),
                    role: role(&v.kind),
                    parallelism: v.parallelism,
                    records_in: AtomicU64::new(0),
                    records_out: AtomicU64::new(0),
                })
                .collect(),
            checkpoints: Mutex::new(CheckpointStatus::default()),
        });
        let flags = control.shared;
        let supervisor = {
            let (parts, metrics, flags) = (
                Arc::clone(&self.parts),
                Arc::clone(&metrics),
                Arc::clone(&flags),
            );
            std::thread::Builder::new()
                .name("supervisor".into())
                .spawn(move || {
                    // Held until the job has ended.
                    let _lock = lock;
                    match done {
                        Some(end) => Ok(end),
                        None => supervisor::supervise(
                            parts,
                            metrics,
                            flags,
                            store,
                            restore.map(Arc::new),
                            events_out,
                        ),
                    }
                })
                .map_err(JobError::Spawn)?
        };
        Ok(RunningJob {
            metrics,
            supervisor,
            shared: flags,
            events,
            started: Instant::now(),
            checkpointing: spec.checkpoint.is_some(),
        })
    }
}

/// Flags the tasks of one attempt look at: the attempt's own cancellation, and the job's
/// (set by the user through [`JobControl`]).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    cancelled: Arc<AtomicBool>,
    /// The job's flags; `None` in the job's own instance.
    job: Option<Arc<Shared>>,
    /// Sources end their input at the next poll, and the job drains and finishes.
    stopping: AtomicBool,
}

impl Shared {
    /// The flags of a new attempt of the job whose flags are `job`.
    pub(crate) fn attempt(job: &Arc<Shared>) -> Shared {
        Shared {
            job: Some(Arc::clone(job)),
            ..Shared::default()
        }
    }

    /// Makes every task of the attempt (or of the job) stop.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// The attempt's own cancellation flag, for guest calls to watch (the supervisor sets it
    /// when the user cancels the job).
    pub(crate) fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancelled)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
            || self.job.as_ref().is_some_and(|j| j.is_cancelled())
    }

    /// Whether the user cancelled the job.
    pub(crate) fn is_user_cancelled(&self) -> bool {
        match &self.job {
            Some(j) => j.is_cancelled(),
            None => self.cancelled.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed) || self.job.as_ref().is_some_and(|j| j.is_stopping())
    }
}

/// A started job.
#[derive(Debug)]
pub struct RunningJob {
    metrics: Arc<Metrics>,
    supervisor: JoinHandle<Result<JobEnd, JobError>>,
    shared: Arc<Shared>,
    events: Receiver<JobEvent>,
    started: Instant,
    checkpointing: bool,
}

/// Stops or cancels a running job from anywhere; see [`RunningJob::control`].
#[derive(Debug, Clone, Default)]
pub struct JobControl {
    shared: Arc<Shared>,
}

impl JobControl {
    /// A control for a job not started yet: see [`Job::start_controlled`].
    pub fn new() -> JobControl {
        JobControl::default()
    }

    /// See [`RunningJob::stop`].
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
    }

    /// See [`RunningJob::cancel`].
    pub fn cancel(&self) {
        self.shared.cancel();
    }

    pub fn is_stopping(&self) -> bool {
        self.shared.is_stopping()
    }
}

/// Records in and out of one vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexSummary {
    pub name: String,
    pub role: &'static str,
    pub records_in: u64,
    pub records_out: u64,
}

/// How a job that did not fail went.
#[derive(Debug, Clone)]
pub struct JobSummary {
    /// How it ended.
    pub end: JobEnd,
    pub duration: Duration,
    pub vertices: Vec<VertexSummary>,
    pub checkpoints: CheckpointStatus,
}

impl RunningJob {
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether the job takes checkpoints.
    pub fn checkpointing(&self) -> bool {
        self.checkpointing
    }

    /// Whether the job has ended (successfully or not).
    pub fn is_finished(&self) -> bool {
        self.supervisor.is_finished()
    }

    /// Asks every task to end now, without a checkpoint; [`RunningJob::wait`] then returns
    /// [`JobError::Cancelled`]. Output after the last checkpoint stays uncommitted.
    pub fn cancel(&self) {
        self.control().cancel();
    }

    /// Stops the job (Flink's stop-with-savepoint, without drain), the way to end a job over
    /// unbounded input. With checkpoints: sources stop reading where they are, one more
    /// checkpoint is taken, and once it completes (sinks commit everything up to it) every task
    /// ends without closing its operators, so end-of-input timers do not fire; the next start
    /// resumes from that checkpoint. Without checkpoints the sources end their input early and
    /// the job drains: what was read is processed, operators are closed and sinks flushed.
    /// [`RunningJob::wait`] returns a summary whose end is [`JobEnd::Stopped`].
    pub fn stop(&self) {
        self.control().stop();
    }

    /// The job's events so far and to come (a bounded number are kept for a reader that comes
    /// late). The channel disconnects once the job has ended.
    pub fn events(&self) -> Receiver<JobEvent> {
        self.events.clone()
    }

    /// A handle that can call [`RunningJob::stop`] or [`RunningJob::cancel`] from another
    /// thread (a signal handler, say).
    pub fn control(&self) -> JobControl {
        JobControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Waits for the job to end; the error is the failure that ended it, naming its operator.
    pub fn wait(self) -> Result<JobSummary, JobError> {
        let end = match self.supervisor.join() {
            Ok(result) => result?,
            Err(_) => {
                return Err(JobError::Task {
                    kind: FailureKind::Other,
                    role: "task",
                    name: "supervisor".into(),
                    uid: None,
                    subtask: 0,
                    parallelism: 1,
                    message: "internal error (please report): the supervisor panicked".into(),
                    permanent: false,
                });
            }
        };
        Ok(JobSummary {
            end,
            duration: self.started.elapsed(),
            vertices: self.metrics.summaries(),
            checkpoints: self.metrics.checkpoint_status(),
        })
    }
}
