//! The operator trait every operator instance implements, WebAssembly or native.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::batch::Batch;
use crate::state::Uploads;

/// What an operator subtask knows about itself.
#[derive(Debug, Clone)]
pub struct OperatorContext {
    pub job: String,
    pub uid: String,
    pub subtask: u32,
    pub parallelism: u32,
    pub max_parallelism: u32,
    /// The key groups this subtask owns.
    pub key_groups: Range<u32>,
    /// The operator's `config` table as JSON.
    pub config: String,
    /// Where its keyed state lives, and the job's clock.
    pub state: crate::state::StateSetup,
    /// Set when the job (attempt) is being cancelled: a guest call in progress then ends.
    pub cancelled: Arc<AtomicBool>,
}

/// Why an operator failed. The runtime adds the operator's name and uid.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The operator returned an error for a batch or hook.
    #[error("{0}")]
    Failed(String),
    /// A guest call trapped, ran past its deadline or went over a limit.
    #[error("guest trapped: {message}")]
    Guest { kind: FailureKind, message: String },
    /// The operator broke the host contract (bad buffer, foreign key, wrong state kind).
    #[error("{0}")]
    Contract(String),
    /// A call was stopped because the job is being cancelled.
    #[error("the job is being cancelled")]
    Cancelled,
}

impl OperatorError {
    pub fn kind(&self) -> FailureKind {
        match self {
            OperatorError::Failed(_) => FailureKind::Error,
            OperatorError::Guest { kind, .. } => *kind,
            OperatorError::Contract(_) => FailureKind::Contract,
            OperatorError::Cancelled => FailureKind::Other,
        }
    }
}

/// What kind of failure stopped a task, for callers that act on it (and tests that assert
/// it) rather than read the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The operator returned an error.
    Error,
    /// The guest trapped: a panic, `unreachable`, an out-of-bounds access, a denied import.
    Trap,
    /// The guest's call stack overflowed.
    StackOverflow,
    /// A guest call ran past `limits.call_deadline`.
    Deadline,
    /// A guest call went over one of its limits.
    Limit(crate::wasm::Limit),
    /// The operator broke the host contract.
    Contract,
    /// A source, a sink or the runtime failed.
    Other,
}

/// An operator instance of one subtask.
pub trait Operator: Send {
    /// Called once before the first batch.
    fn open(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Handles one batch, appending what it emits to `out`.
    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError>;

    /// The input has ended: fire what remains (event-time timers) and append the last output.
    fn close(&mut self, _out: &mut Batch) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Writes the snapshot of the operator's keyed state and timers for checkpoint `n` to
    /// `out` (on a checkpoint barrier), leaving it empty when there is none. Returns the files
    /// it refers to that are still to be put into the checkpoint's shared directory (RocksDB's
    /// incremental checkpoints).
    fn snapshot(&mut self, _n: u64, _out: &mut Vec<u8>) -> Result<Option<Uploads>, OperatorError> {
        Ok(None)
    }

    /// Checkpoint `n` completed.
    fn notify_complete(&mut self, _n: u64) {}

    /// Adds the part of `snapshot` (written by [`Operator::snapshot`] of any subtask of this
    /// operator) that belongs to this subtask's key groups; the files it refers to are in
    /// `shared`. Called before `open`.
    fn restore(&mut self, _snapshot: &[u8], _shared: &Path) -> Result<(), OperatorError> {
        Ok(())
    }

    /// The operator's non-keyed state, snapshotted on a checkpoint barrier (`None`: none).
    fn snapshot_operator_state(&mut self) -> Option<Vec<u8>> {
        None
    }

    /// Restores what [`Operator::snapshot_operator_state`] returned in the subtask of the
    /// same index; called before `open`.
    fn restore_operator_state(&mut self, _snapshot: &[u8]) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Records emitted to side outputs by the last `process` or `close`, by side output name.
    fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        Vec::new()
    }
}
