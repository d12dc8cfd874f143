//! Live counters of a running job: records in and out per vertex, and checkpoints.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::VertexSummary;
use crate::checkpoint::HistoryEntry;
use crate::role::Role;

/// Counters of one vertex, summed over its subtasks.
#[derive(Debug)]
pub struct VertexMetrics {
    /// The vertex name.
    pub name: String,
    /// Source, operator or sink.
    pub role: Role,
    /// Its subtasks.
    pub parallelism: u32,
    /// Records it received.
    pub records_in: AtomicU64,
    /// Records it emitted.
    pub records_out: AtomicU64,
    /// Keyed states its code has not declared (restored, or left by older code), by
    /// subtask, as of its last checkpoint.
    undeclared_states: Mutex<std::collections::BTreeMap<u32, Vec<String>>>,
    /// The event-time watermark of each subtask (`i64::MIN`: none yet): the one its timers
    /// fire on, or for a vertex with a `watermark` strategy the one it makes.
    watermarks: Vec<AtomicI64>,
}

impl VertexMetrics {
    /// Subtask `subtask` reached watermark `t`.
    pub(crate) fn set_watermark(&self, subtask: u32, t: i64) {
        if let Some(w) = self.watermarks.get(subtask as usize) {
            w.store(t, Ordering::Relaxed);
        }
    }

    /// The vertex's event-time watermark: the least of its subtasks', `None` until every
    /// subtask has one (a watermark held back shows here).
    pub fn watermark(&self) -> Option<i64> {
        let min = self
            .watermarks
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .min()?;
        (min != i64::MIN).then_some(min)
    }

    /// Subtask `subtask` holds `states` that its code has not declared.
    pub(crate) fn set_undeclared_states(&self, subtask: u32, states: Vec<String>) {
        let mut all = self
            .undeclared_states
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        all.insert(subtask, states);
    }

    /// Keyed states the vertex's code has not declared (restored, or left by older code),
    /// in any subtask, as of its last checkpoint.
    pub fn undeclared_states(&self) -> Vec<String> {
        let all = self
            .undeclared_states
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = all.values().flatten().cloned().collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Live counters of a running job.
#[derive(Debug)]
pub struct Metrics {
    /// Per vertex of the spec, in its order.
    pub vertices: Vec<VertexMetrics>,
    checkpoints: Mutex<CheckpointStatus>,
}

/// How checkpointing and recovery of a job are going.
#[derive(Debug, Clone, Default)]
pub struct CheckpointStatus {
    /// Checkpoints completed.
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
                watermark: v.watermark(),
            })
            .collect()
    }

    /// A copy of the checkpoint counters.
    pub fn checkpoint_status(&self) -> CheckpointStatus {
        self.checkpoints().clone()
    }
}

impl Metrics {
    /// Counters of `vertices` (name, role, parallelism), all zero.
    pub(crate) fn new(vertices: impl Iterator<Item = (String, Role, u32)>) -> Metrics {
        Metrics {
            vertices: vertices
                .map(|(name, role, parallelism)| VertexMetrics {
                    name,
                    role,
                    parallelism,
                    records_in: AtomicU64::new(0),
                    records_out: AtomicU64::new(0),
                    undeclared_states: Mutex::default(),
                    watermarks: (0..parallelism).map(|_| AtomicI64::new(i64::MIN)).collect(),
                })
                .collect(),
            checkpoints: Mutex::new(CheckpointStatus::default()),
        }
    }

    /// The checkpoint counters, for updating or reading.
    pub(crate) fn checkpoints(&self) -> std::sync::MutexGuard<'_, CheckpointStatus> {
        self.checkpoints.lock().unwrap_or_else(|p| p.into_inner())
    }
}
