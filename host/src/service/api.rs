//! What the service's API exchanges: requests and answers, with their OpenAPI schemas.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An uploaded component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ComponentInfo {
    /// The SHA-256 of its bytes, in hex: its identity. A spec names it `sha256:<hex>`.
    pub sha256: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The name it was uploaded under, if any (a spec may name it `name` or `name@version`).
    pub name: Option<String>,
    /// Its version, if it was uploaded with one.
    pub version: Option<String>,
    /// The WIT world it was validated against.
    pub world: String,
    /// The interfaces it imports.
    pub imports: Vec<String>,
    /// When it was uploaded, Unix milliseconds.
    pub uploaded_ms: u64,
    /// Other names it was uploaded under later (`name@version` or `name`), each as good as
    /// `name` in a spec: the same bytes uploaded again under another name or version.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The jobs that use it (ids), running or not: it cannot be deleted while any does.
    pub used_by: Vec<String>,
}

/// Where a job is in its life (Flink's job states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Accepted; its tasks are starting.
    Created,
    /// Its tasks run.
    Running,
    /// A task failed; its tasks are being stopped, to restart or to fail.
    Failing,
    /// It failed and waits to restart under its restart strategy.
    Restarting,
    /// Its input ended and everything was committed.
    Finished,
    /// It failed for good; see its exceptions.
    Failed,
    /// A cancel was asked for; its tasks are ending.
    Cancelling,
    /// It was cancelled: output after its last checkpoint is not committed.
    Cancelled,
    /// It was stopped (at a savepoint or checkpoint).
    Stopped,
}

impl JobStatus {
    /// Whether the job has ended and will not run again by itself.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Cancelled | JobStatus::Stopped
        )
    }

    /// Its name in the API (`running`, `stopped`, ...).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }
}

/// One job, in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobOverview {
    /// Its id (32 hex digits), given by the service.
    pub id: String,
    /// Its name, from its spec.
    pub name: String,
    /// Where it is in its life.
    pub status: JobStatus,
    /// When it was submitted, Unix milliseconds.
    pub submitted_ms: u64,
    /// When it ended, if it has.
    pub ended_ms: Option<u64>,
    /// Restarts after failures, over every run of the server.
    pub restarts: u32,
}

/// One vertex of a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VertexStatus {
    /// Its name in the spec.
    pub name: String,
    /// `source`, `operator` or `sink`.
    pub role: String,
    /// Its uid (operators).
    pub uid: Option<String>,
    /// Its subtasks.
    pub parallelism: u32,
    /// Records it received (in the current run of the job).
    pub records_in: u64,
    /// Records it emitted.
    pub records_out: u64,
    /// Records received per second, over the last seconds.
    pub records_in_per_second: f64,
    /// Records emitted per second, over the last seconds.
    pub records_out_per_second: f64,
    /// Its event-time watermark in milliseconds (the least of its subtasks'), once every
    /// subtask has one; absent in a job without watermarks, or while one is held back
    /// before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
    /// Of a sink that received records with timestamps: how long after their event time
    /// (processing time at the sink less the record's timestamp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time_lag: Option<crate::runtime::EventTimeLag>,
    /// Of a WebAssembly operator: calls into its instances and the linear memory they hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<crate::runtime::GuestUsage>,
}

/// The whole status of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobDetails {
    /// What the list shows.
    #[serde(flatten)]
    pub overview: JobOverview,
    /// Its vertices, in spec order.
    pub vertices: Vec<VertexStatus>,
    /// Checkpoints completed and failed in the current run, and the last one.
    pub checkpoints: CheckpointSummary,
    /// The savepoint it was submitted from, if any.
    pub restored_from_savepoint: Option<String>,
    /// Savepoints, stops, rescales, upgrades and rollbacks asked of it, newest last.
    pub operations: Vec<Operation>,
    /// Its upgrades, newest last: which code each operator ran when, and why it changed.
    pub upgrades: Vec<UpgradeInfo>,
    /// State that a WebAssembly operator's current code does not declare (left by an older
    /// version, kept for a later one), by operator uid; known once the job has run.
    pub undeclared_states: BTreeMap<String, Vec<String>>,
    /// Its spec, as the service runs it (components named by `sha256:`).
    pub spec: String,
}

/// A version of an operator: its code and its config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OperatorVersion {
    /// The component's SHA-256, hex.
    pub component: String,
    /// Its `config`, as JSON text.
    pub config: String,
}

/// One operator of an upgrade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OperatorChange {
    /// The operator's uid.
    pub uid: String,
    /// What it ran before.
    pub from: OperatorVersion,
    /// What it runs after.
    pub to: OperatorVersion,
}

/// Where an upgrade is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpgradeStatus {
    /// Asked for; the swap checkpoint has not completed.
    Pending,
    /// The new code runs; a failure rolls it back. No checkpoint is taken meanwhile.
    Probation,
    /// The new code passed its probation; the old is released.
    Committed,
    /// The new code failed (or a rollback was asked for): the job went back to the old code
    /// from the swap checkpoint. See `cause`.
    RolledBack,
    /// Refused before anything changed. See `cause`.
    Refused,
}

/// An upgrade of a job, as its history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UpgradeInfo {
    /// The request (its operation has the same id).
    pub request_id: String,
    /// When it was asked for, Unix milliseconds.
    pub requested_ms: u64,
    /// The operators it changes.
    pub operators: Vec<OperatorChange>,
    /// Where it is.
    pub status: UpgradeStatus,
    /// Why it was rolled back or refused.
    pub cause: Option<String>,
    /// The checkpoint at whose barrier the code was swapped.
    pub swap_checkpoint: Option<u64>,
    /// When it was committed, rolled back or refused.
    pub ended_ms: Option<u64>,
    /// From the request to the commit.
    pub time_to_commit_ms: Option<u64>,
    /// Per subtask of the upgraded operators, shortest pause first.
    pub pauses: Vec<SubtaskPause>,
    /// The upgrade this one undoes, for a rollback of a committed upgrade.
    pub rollback_of: Option<String>,
}

/// The pause of one subtask at a swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubtaskPause {
    /// From the alignment of its swap barrier to the first records handed to the new code,
    /// in microseconds.
    pub pause_us: u64,
    /// The synchronous part of its snapshot in that pause (what any checkpoint costs it), in
    /// microseconds; the rest is the new instance's instantiation and `open`, and the wait for
    /// the next record.
    pub snapshot_us: u64,
}

/// New code for one operator.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OperatorUpgradeRequest {
    /// The operator's uid.
    pub uid: String,
    /// Its new component, uploaded: `sha256:<hex>`, `name@version` or `name`.
    pub component: String,
    /// Its new `config` (a JSON object); the old one when absent.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub config: Option<serde_json::Value>,
    /// Its new `limits` (as in a spec, e.g. `{"memory": "512 MiB"}`); the old ones when
    /// absent.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub limits: Option<serde_json::Value>,
}

/// An upgrade: new code for operators of a running job, swapped in at one checkpoint
/// barrier, their state kept.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeRequest {
    /// The operators and their new code; all switch at the same barrier, or none does.
    pub operators: Vec<OperatorUpgradeRequest>,
    /// How long the new code runs without failure before the upgrade is committed, in
    /// milliseconds (default 10000). No checkpoint is taken meanwhile.
    #[serde(default)]
    pub probation_ms: Option<u64>,
    /// Records the new code handles (all subtasks together) before the upgrade is
    /// committed (default 0).
    #[serde(default)]
    pub probation_records: Option<u64>,
    /// An id for the operation, to make a retried request harmless.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// A rollback.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// An id for the operation, to make a retried request harmless.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Checkpoint counters of a job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CheckpointSummary {
    /// Completed in the current run.
    pub completed: u64,
    /// Failed in the current run.
    pub failed: u64,
    /// The newest completed checkpoint.
    pub last: Option<CheckpointInfo>,
}

/// One checkpoint of a job's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CheckpointInfo {
    /// Its id.
    pub id: u64,
    /// `completed` or `aborted`.
    pub status: String,
    /// Why it was aborted.
    pub reason: Option<String>,
    /// When it was triggered, Unix milliseconds.
    pub triggered_ms: u64,
    /// From trigger to completion.
    pub duration_ms: u64,
    /// Bytes it wrote.
    pub size_bytes: u64,
    /// Bytes of every file it consists of (an incremental checkpoint shares some).
    pub full_size_bytes: u64,
}

/// A job's checkpoint history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Checkpoints {
    /// Checkpoints, oldest first (the last 100).
    pub history: Vec<CheckpointInfo>,
}

/// A failure of a job: each failure that restarted it, and the one that ended it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ExceptionInfo {
    /// When it happened, Unix milliseconds.
    pub time_ms: u64,
    /// What happened.
    pub message: String,
    /// The vertex that failed.
    pub vertex: Option<String>,
    /// Its uid, for an operator.
    pub uid: Option<String>,
    /// The subtask that failed.
    pub subtask: Option<u32>,
    /// What kind of failure: `trap`, `deadline`, `limit:memory`, `error`, ...
    pub kind: Option<String>,
    /// Whether it ended the job (else the job restarted).
    pub fatal: bool,
}

/// A job's exception history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Exceptions {
    /// Failures, oldest first (the last 100).
    pub exceptions: Vec<ExceptionInfo>,
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// A savepoint; the job goes on.
    Savepoint,
    /// A stop, with a savepoint or at a checkpoint.
    Stop,
    /// A change of parallelism: a stop with a savepoint and a restart from it.
    Rescale,
    /// New code (or config) for operators, swapped in while the job runs; completed when
    /// it is committed, failed when it is refused or rolled back (see the job's `upgrades`).
    Upgrade,
    /// Back to the previous code: the upgrade on probation is rolled back, or else the last
    /// committed one is undone by an upgrade to the code before it.
    Rollback,
}

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    /// Asked for; not done yet.
    InProgress,
    /// Done.
    Completed,
    /// Not done; see `error`.
    Failed,
}

/// An asynchronous operation on a job: answered at once, polled by its request id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Operation {
    /// The id the caller gave, or one the service chose. Asking again with the same id
    /// answers this operation rather than starting another.
    pub request_id: String,
    /// What it does.
    pub kind: OperationKind,
    /// Where it is.
    pub status: OperationStatus,
    /// When it was asked for, Unix milliseconds.
    pub requested_ms: u64,
    /// When it completed or failed.
    pub ended_ms: Option<u64>,
    /// The savepoint's directory, once taken.
    pub savepoint: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

/// A job to submit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The job spec: the TOML text of a `weir run` spec, or the same as a JSON object.
    /// Operators name components by `sha256:<hex>`, `name@version` or `name`; `[checkpoint]
    /// dir` and `[state] dir` are the service's (a spec without `[checkpoint]` is checkpointed
    /// every 10 s).
    #[schema(value_type = Object)]
    pub spec: serde_json::Value,
    /// The directory relative paths in the spec (input files, sink directories) resolve
    /// against; default: the job's directory under the service's data directory.
    #[serde(default)]
    pub base_dir: Option<String>,
    /// A savepoint directory to start from (`weir run --from-savepoint`).
    #[serde(default)]
    pub savepoint: Option<String>,
    /// Let the savepoint's state of operators the job no longer has go.
    #[serde(default)]
    pub allow_non_restored_state: bool,
}

/// A stop.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRequest {
    /// Take a savepoint at the stop (default); else stop at a plain checkpoint, from which
    /// nothing but the service resumes.
    #[serde(default = "yes")]
    pub savepoint: bool,
    /// End the input first, so that the job processes what it read and its operators close
    /// (end-of-input timers fire): the job finishes rather than stopping mid-stream.
    #[serde(default)]
    pub drain: bool,
    /// An id for the operation, to make a retried request harmless.
    #[serde(default)]
    pub request_id: Option<String>,
}

fn yes() -> bool {
    true
}

/// A savepoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SavepointRequest {
    /// An id for the operation, to make a retried request harmless.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// A rescale.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RescaleRequest {
    /// The new parallelism of each operator to change, by vertex name.
    pub parallelism: BTreeMap<String, u32>,
    /// An id for the operation, to make a retried request harmless.
    #[serde(default)]
    pub request_id: Option<String>,
}
