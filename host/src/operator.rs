//! The contract of an operator instance, WebAssembly or native: the [`Operator`] trait, what
//! an instance knows of itself ([`OperatorContext`]), how it fails ([`OperatorError`],
//! [`FailureKind`], [`Limit`]) and what it hands to a checkpoint ([`Snapshot`]).

use std::any::Any;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::batch::Batch;
use crate::clock::Clock;
use crate::wasm::OperatorComponent;

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
    /// The timers in the operator's state backend failed (RocksDB could not be read).
    pub(crate) fn timers(e: crate::state::StateError) -> Self {
        OperatorError::Failed(format!("its timers failed: {e}"))
    }

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
    Limit(Limit),
    /// The operator broke the host contract.
    Contract,
    /// A source, a sink or the runtime failed.
    Other,
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureKind::Error => "error",
            FailureKind::Trap => "trap",
            FailureKind::StackOverflow => "stack_overflow",
            FailureKind::Deadline => "deadline",
            FailureKind::Limit(limit) => return write!(f, "limit:{}", limit.key()),
            FailureKind::Contract => "contract",
            FailureKind::Other => "other",
        })
    }
}

/// What an instance of guest code has used (see [`Operator::guest_usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InstanceUsage {
    /// Calls into it so far.
    pub calls: u64,
    /// Bytes of linear memory it holds.
    pub memory_bytes: u64,
    /// Bytes of linear memory it held once instantiated.
    pub start_bytes: u64,
}

/// An operator instance of one subtask.
pub trait Operator: Send {
    /// Called once before the first batch.
    fn open(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Handles one batch, appending what it emits to `out`.
    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError>;

    /// Handles one batch from the operator's input `input`: 0 for `input` (all of them, a
    /// union), 1 for `second_input`. Only operators that take a second input (the job spec
    /// checks) need to tell them apart.
    fn process_input(
        &mut self,
        input: u8,
        batch: &Batch,
        out: &mut Batch,
    ) -> Result<(), OperatorError> {
        debug_assert_eq!(input, 0, "an operator of one input got a second");
        self.process(batch, out)
    }

    /// The watermark advanced to `watermark`: fire the event-time timers at or before it, in
    /// timestamp order, appending what they emit to `out`. Returns whether more are due: the
    /// caller hands `out` on and calls again with the same watermark, so that a firing of
    /// many timers holds one call's output at a time, not all of it.
    fn on_watermark(&mut self, _watermark: i64, _out: &mut Batch) -> Result<bool, OperatorError> {
        Ok(false)
    }

    /// Fire the processing-time timers due at `now`, appending what they emit to `out`;
    /// returns whether more are due, as [`Operator::on_watermark`].
    fn on_processing_time(&mut self, _now: i64, _out: &mut Batch) -> Result<bool, OperatorError> {
        Ok(false)
    }

    /// When the earliest processing-time timer is due, if there is one.
    fn next_processing_time(&mut self) -> Option<i64> {
        None
    }

    /// The input has ended: fire what remains (event-time timers) and append the last output.
    /// Returns whether there is more: the caller hands `out` on and calls again, as
    /// [`Operator::on_watermark`].
    fn close(&mut self, _out: &mut Batch) -> Result<bool, OperatorError> {
        Ok(false)
    }

    /// Fills `snapshot` with the operator's keyed state and timers for checkpoint `n` (on a
    /// checkpoint barrier), leaving its bytes empty when there is none.
    fn snapshot(&mut self, _n: u64, _snapshot: &mut Snapshot) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Checkpoint `n` completed.
    fn notify_complete(&mut self, _n: u64) {}

    /// Adds the part of `snapshot` (written by [`Operator::snapshot`] of any subtask of this
    /// operator) that belongs to this subtask's key groups; the files it refers to are in
    /// `shared`. Called before `open`.
    fn restore(&mut self, _snapshot: &[u8], _shared: &Path) -> Result<(), OperatorError> {
        Ok(())
    }

    /// The watermark the operator had when the checkpoint being restored was taken: records
    /// at or before it are late, as they were then, and the watermarks its inputs make
    /// again up to it do not reach it; no timer fires. Called before `open`.
    fn restore_watermark(&mut self, _watermark: i64) {}

    /// The operator's non-keyed state, snapshotted on a checkpoint barrier (`None`: none).
    fn snapshot_operator_state(&mut self) -> Option<Vec<u8>> {
        None
    }

    /// Restores this subtask's share of what [`Operator::snapshot_operator_state`] returned in
    /// the subtasks that wrote it (its own at the same parallelism, else redistributed);
    /// called before `open`.
    fn restore_operator_state(&mut self, _snapshot: &[u8]) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Records emitted to side outputs by the last `process` or `close`, by side output name.
    fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        Vec::new()
    }

    /// The keyed states the host holds for the operator that its code has not declared
    /// (restored, or left by the code before an upgrade), by name.
    fn undeclared_states(&self) -> Vec<String> {
        Vec::new()
    }

    /// Of an operator that runs guest code: what its instance has used.
    fn guest_usage(&self) -> Option<InstanceUsage> {
        None
    }

    /// Carries on with the code of `component` (new code: an upgrade; the same: a renewal),
    /// with `ctx.config`, keeping what the host holds for the operator (keyed state, timers,
    /// operator state); the instance returned is not opened yet. An operator that runs no
    /// guest code has none to replace.
    fn with_code(
        self: Box<Self>,
        _component: &OperatorComponent,
        _ctx: OperatorContext,
        _clock: Clock,
    ) -> Result<Box<dyn Operator>, OperatorError> {
        Err(OperatorError::Contract(
            "this operator runs no code of a component; only WebAssembly operators and window \
             functions in components are upgraded"
                .into(),
        ))
    }
}

/// A limit a guest call can exceed (see `wasm::Limits` for their settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `memory`: linear memory.
    Memory,
    /// `table_elements`: elements of one table.
    TableElements,
    /// `instances`: core instances, memories and tables of one component.
    Instances,
    /// `output_records`: records emitted by one call.
    OutputRecords,
    /// `output_bytes`: bytes emitted by one call.
    OutputBytes,
    /// `state_value`: one state value, list element or map entry.
    StateValue,
    /// `host_call_bytes`: what one import call passes to the host.
    HostCallBytes,
    /// `side_outputs`: side outputs one instance emits to.
    SideOutputs,
    /// `states`: states one instance declares.
    States,
    /// `timers`: timers pending in one instance.
    Timers,
    /// `host_memory`: what the host holds for one instance.
    HostMemory,
}

impl Limit {
    /// The key of the limit in a `limits` table.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Memory => "memory",
            Limit::TableElements => "table_elements",
            Limit::Instances => "instances",
            Limit::OutputRecords => "output_records",
            Limit::OutputBytes => "output_bytes",
            Limit::StateValue => "state_value",
            Limit::HostCallBytes => "host_call_bytes",
            Limit::SideOutputs => "side_outputs",
            Limit::States => "states",
            Limit::Timers => "timers",
            Limit::HostMemory => "host_memory",
        }
    }
}

/// What an operator subtask hands to a checkpoint: its keyed state and timers as the bytes of
/// one state file, which its state backend writes in its own format, and the files those bytes
/// refer to, which the checkpoint must keep beside it. The checkpoint writer knows nothing of
/// the backend: it puts the shared files in place, then writes the bytes.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The format the checkpoint asks for.
    pub format: SnapshotFormat,
    /// The state file (empty: the operator has no keyed state or timers).
    pub bytes: Vec<u8>,
    /// The key groups the state covers.
    pub key_groups: Range<u32>,
    /// Files to put into the checkpoint's shared directory (the SST files of an incremental
    /// RocksDB checkpoint).
    pub shared: Option<SharedFiles>,
}

/// The format of a snapshot's state file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SnapshotFormat {
    /// The state backend's own, cheapest to take: RocksDB's incremental checkpoints refer to
    /// SST files shared between checkpoints (a checkpoint).
    #[default]
    Native,
    /// A full snapshot in weir's backend-neutral format that refers to no other file, so that
    /// it can be copied elsewhere and restored into either backend (a savepoint).
    Canonical,
}

/// Files a snapshot refers to, ready to be put into a checkpoint's shared directory.
pub struct SharedFiles {
    /// `(where the file is now, its name in the shared directory, its size)`.
    pub files: Vec<(PathBuf, String, u64)>,
    /// The bytes of every shared file the snapshot refers to, new or not (Flink's "full
    /// checkpoint size" counts them).
    pub full_bytes: u64,
    /// Keeps the files where they are until the checkpoint has them (a staging directory
    /// deleted when this is dropped).
    pub _keep: Box<dyn Any + Send>,
}

impl std::fmt::Debug for SharedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFiles")
            .field("files", &self.files)
            .field("full_bytes", &self.full_bytes)
            .finish()
    }
}
