//! Checkpoints: when to take them, where they live, what to restore, how to restart.
//!
//! A job with a `[checkpoint]` table in its spec is checkpointed every `interval`: the
//! `coordinator` decides when to trigger checkpoint `n` and when it is complete, sources
//! emit barrier `n` in band, tasks align and snapshot (see `runtime::barrier`), and
//! `storage` writes `<dir>/<job>/chk-<n>/` with a `_metadata` file written last. After a
//! crash, `weir run` resumes from the newest checkpoint whose files verify; inside a running
//! job a failed task restarts the job from it under the [`restart`] strategy.
//!
//! ```toml
//! [checkpoint]
//! interval = "1s"            # required: checkpointing is on when the table is present
//! dir = "checkpoints"        # default; relative to the job spec's directory
//! mode = "exactly_once"      # or "at_least_once" (no barrier alignment)
//! unaligned = false          # barriers overtake queued records, which the checkpoint stores
//! timeout = "10min"          # a checkpoint not complete by then is aborted
//! min_pause = "0s"           # between the end of one checkpoint and the next trigger
//! max_concurrent = 1
//! tolerable_failures = 0     # failed checkpoints in a row before the job restarts
//! num_retained = 1           # completed checkpoints kept
//! ```

pub(crate) mod committer;
pub(crate) mod coordinator;
pub mod restart;
pub(crate) mod storage;
pub(crate) mod writer;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::operator::SnapshotFormat;

pub use restart::{RestartStrategy, RestartsExhausted};
pub use storage::{
    CheckpointError, CheckpointHistory, CheckpointOutcome, CodeVersion, Completion, HistoryEntry,
    OperatorStats, is_inside,
};

/// The newest complete checkpoint of job `job` under `dir`: its id, and the code of each
/// WebAssembly operator that wrote it, by uid.
pub(crate) fn code_versions(
    dir: &std::path::Path,
    job: &str,
) -> Option<(u64, std::collections::BTreeMap<String, CodeVersion>)> {
    let store = storage::CheckpointStore::open(dir, job).ok()?;
    let meta = store.latest(0, None, |_| Ok(())).ok()??;
    let code = meta
        .vertices
        .into_iter()
        .filter_map(|v| Some((v.uid?, v.code?)))
        .collect();
    Some((meta.checkpoint, code))
}

/// A checkpoint barrier, as it travels in band between tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Barrier {
    pub id: u64,
    pub kind: BarrierKind,
    /// Canonical for a savepoint.
    pub format: SnapshotFormat,
    /// An unaligned checkpoint: every task snapshots at once, on its trigger or the first
    /// barrier, and stores the records its inputs deliver before their barriers (see
    /// `runtime::barrier`).
    pub unaligned: bool,
}

/// What a task does after it snapshotted a barrier's checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BarrierKind {
    /// Carries on.
    Checkpoint,
    /// Processes nothing more and ends once the checkpoint completes: the job stops there
    /// (Flink's stop-with-savepoint without drain), and a restore continues from it.
    Stop,
    /// Swaps in the new code of the operators an upgrade names (see `runtime::upgrade`), then
    /// carries on.
    Upgrade,
}

/// Flink's `execution.checkpointing.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointMode {
    /// Tasks with several inputs align barriers: state reflects every record exactly once.
    #[default]
    ExactlyOnce,
    /// No alignment: lower latency under backpressure; after a restore, some records may be
    /// counted twice, none is lost.
    AtLeastOnce,
}

/// The job spec's `[checkpoint]` table, with Flink's names and defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Time between checkpoint triggers.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Where checkpoints go: `<dir>/<job name>/chk-<n>/`. Relative to the spec's directory.
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    #[serde(default)]
    /// Exactly-once (barriers aligned) or at-least-once.
    pub mode: CheckpointMode,
    /// Unaligned checkpoints (Flink's `execution.checkpointing.unaligned`): instead of waiting
    /// for its barrier behind the records queued in channels, every task snapshots at once and
    /// stores the records that were in flight with the checkpoint, to be replayed on restore.
    /// Checkpoints then take about as long under backpressure as without. Savepoints, the stop
    /// checkpoint and upgrades stay aligned. Needs `mode = "exactly_once"` and
    /// `max_concurrent = 1`.
    #[serde(default)]
    pub unaligned: bool,
    /// A checkpoint that is not complete this long after its trigger is aborted.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The least time between the completion of one checkpoint and the next trigger.
    #[serde(default, with = "humantime_serde")]
    pub min_pause: Duration,
    /// Checkpoints in progress at once.
    #[serde(default = "one")]
    pub max_concurrent: u32,
    /// Checkpoints that may fail in a row before the job fails (and restarts).
    #[serde(default)]
    pub tolerable_failures: u32,
    /// Completed checkpoints kept on disk; older ones are deleted once a newer one completes.
    #[serde(default = "one")]
    pub num_retained: u32,
}

fn default_dir() -> PathBuf {
    PathBuf::from("checkpoints")
}

fn default_timeout() -> Duration {
    Duration::from_secs(600)
}

fn one() -> u32 {
    1
}

impl CheckpointConfig {
    /// Checks the settings; the message names the setting and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval < Duration::from_millis(10) {
            return Err(format!(
                "interval {:?} is too short; use at least 10ms (Flink's minimum), e.g. interval = \"1s\"",
                self.interval
            ));
        }
        if self.timeout.is_zero() {
            return Err("timeout must be more than 0, e.g. timeout = \"10min\"".into());
        }
        if self.max_concurrent == 0 {
            return Err("max_concurrent must be at least 1".into());
        }
        if self.unaligned && self.mode != CheckpointMode::ExactlyOnce {
            return Err(
                "unaligned = true needs mode = \"exactly_once\": at-least-once checkpoints do not \
                 align barriers in the first place; remove one of the two"
                    .into(),
            );
        }
        if self.unaligned && self.max_concurrent != 1 {
            return Err(format!(
                "unaligned = true needs max_concurrent = 1 (it is {}): the records in flight \
                 belong to one checkpoint at a time",
                self.max_concurrent
            ));
        }
        if self.num_retained == 0 {
            return Err(
                "num_retained must be at least 1: a job needs a checkpoint to restore from".into(),
            );
        }
        Ok(())
    }
}

/// Where a job starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest checkpoint of the job that verifies, if any (`weir run`).
    #[default]
    Latest,
    /// Nothing: ignore existing checkpoints (`weir run --fresh`).
    Fresh,
    /// This checkpoint or savepoint directory (`weir run --from-checkpoint PATH`,
    /// `--from-savepoint PATH`); it must verify and fit the job.
    Path(PathBuf),
    /// The newest checkpoint of the job if it has one, else this checkpoint or savepoint: how
    /// a job submitted from a savepoint resumes after a crash of its process.
    LatestOr(PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_flinks() {
        let c: CheckpointConfig = toml::from_str("interval = \"200ms\"").unwrap();
        assert_eq!(c.interval, Duration::from_millis(200));
        assert_eq!(c.dir, PathBuf::from("checkpoints"));
        assert_eq!(c.mode, CheckpointMode::ExactlyOnce);
        assert_eq!(c.timeout, Duration::from_secs(600));
        assert_eq!(c.min_pause, Duration::ZERO);
        assert_eq!(
            (c.max_concurrent, c.tolerable_failures, c.num_retained),
            (1, 0, 1)
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_settings_are_named() {
        let err = toml::from_str::<CheckpointConfig>("interval = \"1s\"\nintervall = 3")
            .unwrap_err()
            .to_string();
        assert!(err.contains("intervall"), "{err}");
        let err = toml::from_str::<CheckpointConfig>("interval = \"soon\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("interval"), "{err}");
        let c: CheckpointConfig =
            toml::from_str("interval = \"1s\"\nmode = \"at_least_once\"\nnum_retained = 0")
                .unwrap();
        assert_eq!(c.mode, CheckpointMode::AtLeastOnce);
        assert!(c.validate().unwrap_err().contains("num_retained"));
    }
}
