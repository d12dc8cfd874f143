//! How a job fails: [`JobError`].

use std::path::PathBuf;

use crate::checkpoint::{CheckpointError, RestartsExhausted};
use crate::operator::FailureKind;
use crate::role::Role;
use crate::wasm::WasmError;

/// The typed error behind a task's failure.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a job could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A component did not load.
    #[error("operator \"{name}\" (uid {uid}): {cause}")]
    Component {
        /// The operator's name in the job spec.
        name: String,
        /// The operator's uid.
        uid: String,
        /// Why it did not load.
        cause: WasmError,
    },
    /// A task failed: a subtask of a source, an operator or a sink.
    #[error("{role} \"{name}\"{uid} (subtask {subtask} of {parallelism}) failed: {message}", uid = uid.as_ref().map(|u| format!(" (uid {u})")).unwrap_or_default())]
    Task {
        /// What kind of failure it was (a guest trap, a limit, ...).
        kind: FailureKind,
        /// The role of the vertex that failed.
        role: Role,
        /// The vertex's name in the job spec.
        name: String,
        /// The operator's uid (operators only).
        uid: Option<String>,
        /// Which subtask failed.
        subtask: u32,
        /// The vertex's parallelism.
        parallelism: u32,
        /// What happened, with the cause's own words.
        message: String,
        /// The error that caused it, typed (its text is in `message` already).
        #[source]
        cause: Option<Cause>,
        /// Whether a restart cannot heal it (the operator's `open` refused its config, a
        /// permission error): the job then fails at once instead of restarting.
        permanent: bool,
    },
    /// A bug in weir: something that must not happen happened.
    #[error("internal error (please report): {0}")]
    Internal(String),
    /// A thread could not be started.
    #[error("cannot start a task thread: {0}")]
    Spawn(std::io::Error),
    /// The job was cancelled ([`JobControl::cancel`](super::JobControl::cancel)).
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
        /// The job's name.
        job: String,
        /// The process that holds the lock, if it said.
        pid: Option<u32>,
        /// The lock file.
        path: PathBuf,
    },
    /// The job's lock file could not be taken.
    #[error("cannot take the lock {path} of the job: {cause}", path = path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// A checkpoint could not be written or restored.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Too many checkpoints failed in a row.
    #[error("{0}")]
    CheckpointFailed(String),
    /// The upgrade on probation was rolled back by request
    /// ([`JobControl::roll_back`](super::JobControl::roll_back)).
    #[error("the upgrade was rolled back by request")]
    RollbackRequested,
    /// The job failed and its restart strategy allows no more restarts.
    #[error(transparent)]
    Restarts(Box<RestartsExhausted<JobError>>),
}

impl JobError {
    /// This failure, marked as one that a restart cannot heal (the job then fails at once)
    /// when `is` holds: the same code, configuration and checkpoint would fail the same way.
    pub(crate) fn permanent_if(mut self, is: bool) -> JobError {
        if let JobError::Task { permanent, .. } = &mut self {
            *permanent |= is;
        }
        self
    }

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
