//! Live counters of a running job: records in and out per vertex, and checkpoints.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use hdrhistogram::Histogram;

use super::VertexSummary;
use crate::checkpoint::HistoryEntry;
use crate::operator::InstanceUsage;
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
    /// Of a sink: how long after their timestamps its subtasks received records (ms).
    lag: Mutex<Histogram<u64>>,
    /// Of a WebAssembly operator, per subtask: calls into its instance and the linear
    /// memory it holds (`u64::MAX`: not reported yet).
    guest_calls: Vec<AtomicU64>,
    guest_memory: Vec<AtomicU64>,
    /// Instances renewed as their memory neared the limit.
    guest_renewed: AtomicU64,
}

/// What a WebAssembly operator's instances use, summed over its subtasks (in the current run
/// of the job: a restart or an upgrade starts new instances).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct GuestUsage {
    /// Calls into the instances (`process` per batch, timers, open, close...).
    pub calls: u64,
    /// Bytes of linear memory the instances hold: a guest's memory grows and never shrinks,
    /// so a leak in guest code (or its language's runtime) shows as growth here.
    pub memory_bytes: u64,
    /// Instances replaced by new ones of the same code because their memory reached 3/4
    /// of the limit (state kept); counts over the whole run.
    pub renewed: u64,
}

/// How long after their event time a sink received records: processing time at the sink
/// less the record's timestamp, over the records that had one. For results of event-time
/// windows (timestamped with their window's last millisecond) this is the time from the
/// window's end to its result; it includes the watermark's delay. A transactional sink makes
/// what it received visible at the next checkpoint's commit, up to one interval later.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct EventTimeLag {
    /// Records with a timestamp the sink received.
    pub records: u64,
    /// The median lag, in milliseconds (within 1 %).
    pub p50_ms: u64,
    /// The 99th percentile.
    pub p99_ms: u64,
    /// The largest.
    pub max_ms: u64,
}

impl VertexMetrics {
    /// Subtask `subtask` reached watermark `t`.
    pub(crate) fn set_watermark(&self, subtask: u32, t: i64) {
        if let Some(w) = self.watermarks.get(subtask as usize) {
            w.store(t, Ordering::Relaxed);
        }
    }

    /// Subtask `subtask`'s instance has used `usage`.
    pub(crate) fn set_guest_usage(&self, subtask: u32, usage: InstanceUsage) {
        let i = subtask as usize;
        if let (Some(c), Some(m)) = (self.guest_calls.get(i), self.guest_memory.get(i)) {
            c.store(usage.calls, Ordering::Relaxed);
            m.store(usage.memory_bytes, Ordering::Relaxed);
        }
    }

    /// A subtask renewed its instance (see [`GuestUsage::renewed`]).
    pub(crate) fn renewed(&self) {
        self.guest_renewed.fetch_add(1, Ordering::Relaxed);
    }

    /// What the vertex's WebAssembly instances have used; `None` for other vertices (and
    /// before any subtask has reported).
    pub fn guest_usage(&self) -> Option<GuestUsage> {
        let mut reported = false;
        let mut sum = GuestUsage {
            calls: 0,
            memory_bytes: 0,
            renewed: self.guest_renewed.load(Ordering::Relaxed),
        };
        for (calls, memory) in self.guest_calls.iter().zip(&self.guest_memory) {
            let memory = memory.load(Ordering::Relaxed);
            if memory != u64::MAX {
                reported = true;
                sum.calls += calls.load(Ordering::Relaxed);
                sum.memory_bytes += memory;
            }
        }
        reported.then_some(sum)
    }

    /// A sink's subtask received records with timestamps `stamps` at processing time `now`.
    pub(crate) fn received(&self, now: i64, stamps: impl Iterator<Item = i64>) {
        let mut stamps = stamps.peekable();
        if stamps.peek().is_none() {
            return;
        }
        let mut lag = self.lag.lock().unwrap_or_else(|p| p.into_inner());
        for t in stamps {
            // Auto-resizing: `record` grows the histogram (`saturating_record` would clamp
            // to its current range).
            let _ = lag.record(now.saturating_sub(t).max(0) as u64);
        }
    }

    /// A sink's event-time lag so far; `None` before it received a record with a timestamp.
    pub fn event_time_lag(&self) -> Option<EventTimeLag> {
        let lag = self.lag.lock().unwrap_or_else(|p| p.into_inner());
        (!lag.is_empty()).then(|| EventTimeLag {
            records: lag.len(),
            p50_ms: lag.value_at_quantile(0.5),
            p99_ms: lag.value_at_quantile(0.99),
            max_ms: lag.max(),
        })
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
                event_time_lag: v.event_time_lag(),
                guest: v.guest_usage(),
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
                    lag: Mutex::new(Histogram::new(2).expect("2 significant digits are valid")),
                    guest_calls: (0..parallelism).map(|_| AtomicU64::new(0)).collect(),
                    guest_memory: (0..parallelism).map(|_| AtomicU64::new(u64::MAX)).collect(),
                    guest_renewed: AtomicU64::new(0),
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
