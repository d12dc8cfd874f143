//! Carrying out what the checkpoint coordinator decides: triggering a checkpoint through the
//! sources, completing one (its metadata, the commit of its sinks' pre-commits, retention,
//! history), aborting one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::attempt::{Attempt, Finals};
use super::savepoint::{Request, Savepoint};
use super::task::{self, Control};
use super::{JobError, JobParts, Metrics, role, vertex_failure};
use crate::checkpoint::committer::{self, PreCommit};
use crate::checkpoint::coordinator::{Completed, Decision, TaskId, TaskState};
use crate::checkpoint::storage::{
    CheckpointOutcome, CheckpointStore, CodeVersion, FORMAT_VERSION, HistoryEntry, Metadata,
    OperatorStats, SubtaskState, VertexMeta, millis, unix_ms,
};
use crate::checkpoint::writer::Written;
use crate::checkpoint::{Barrier, BarrierKind};
use crate::job::spec::{JobSpec, VertexKind};
use crate::operator::{FailureKind, SnapshotFormat};

/// Carries out the coordinator's decisions for one attempt of a job.
pub(super) struct Checkpointing<'a> {
    parts: &'a JobParts,
    metrics: &'a Metrics,
    store: Option<&'a CheckpointStore>,
    /// Unix ms of the trigger of each checkpoint of the attempt not (yet) complete.
    triggered_at: HashMap<u64, u64>,
    /// The requests of the savepoints in progress, by checkpoint id.
    savepoints: HashMap<u64, Request>,
    /// The swap checkpoint of an upgrade and the job with the new code: triggered with an
    /// upgrade barrier, and kept by retention until the upgrade is committed or rolled back.
    /// Checkpoints after it are written by the new code.
    pub(super) upgrade: Option<(u64, Arc<JobParts>)>,
    /// Whose code writes the checkpoints (but those after the swap checkpoint of `upgrade`):
    /// the job's, or that of an upgrade committed in this attempt.
    pub(super) code: Arc<JobParts>,
}

impl<'a> Checkpointing<'a> {
    pub(super) fn new(
        parts: &'a Arc<JobParts>,
        metrics: &'a Metrics,
        store: Option<&'a CheckpointStore>,
    ) -> Self {
        Checkpointing {
            parts,
            code: Arc::clone(parts),
            metrics,
            store,
            triggered_at: HashMap::new(),
            savepoints: HashMap::new(),
            upgrade: None,
        }
    }

    /// Checkpoint `id`, about to be triggered, is the savepoint `request` asked for.
    pub(super) fn savepoint(&mut self, id: u64, request: Request) {
        self.savepoints.insert(id, request);
    }

    /// Fails the savepoints still in progress: the attempt ended before they completed.
    pub(super) fn fail_savepoints(&mut self, why: &str) {
        for (_, request) in self.savepoints.drain() {
            request.fail(why);
        }
    }

    /// Carries out `decisions` for `attempt`, whose finished sinks made `finals`; `stop` is
    /// the checkpoint the job stops at, if a stop was triggered. Returns the first failure of
    /// the job they caused, and whether the stop checkpoint completed.
    pub(super) fn apply(
        &mut self,
        decisions: impl IntoIterator<Item = Decision<Written>>,
        attempt: &Attempt,
        finals: &Finals,
        stop: Option<u64>,
    ) -> (Option<JobError>, bool) {
        let (mut failure, mut stopped) = (None, false);
        for d in decisions {
            let completes = match &d {
                Decision::Complete(done) => Some(done.id),
                _ => None,
            };
            match apply(d, self, attempt, finals, stop) {
                Some(e) => {
                    failure.get_or_insert(e);
                }
                None => stopped |= completes.is_some() && completes == stop,
            }
        }
        (failure, stopped)
    }

    /// The checkpoints triggered and not completed: what they wrote is to be deleted.
    pub(super) fn unfinished(&self) -> Vec<u64> {
        self.triggered_at.keys().copied().collect()
    }
}

/// Carries out one coordinator decision; `Some` is a failure of the job.
fn apply(
    decision: Decision<Written>,
    ctx: &mut Checkpointing<'_>,
    attempt: &Attempt,
    finals: &Finals,
    stop: Option<u64>,
) -> Option<JobError> {
    let Checkpointing {
        parts,
        metrics,
        store,
        triggered_at,
        savepoints,
        upgrade,
        code,
    } = ctx;
    let (parts, metrics) = (*parts, *metrics);
    let spec = &parts.spec;
    let store = (*store)?;
    match decision {
        Decision::Trigger(id) => {
            tracing::debug!("triggering checkpoint {id}");
            triggered_at.insert(id, unix_ms());
            let kind = if stop == Some(id) {
                BarrierKind::Stop
            } else if upgrade.as_ref().is_some_and(|(swap, _)| *swap == id) {
                BarrierKind::Upgrade
            } else {
                BarrierKind::Checkpoint
            };
            let format = if savepoints.contains_key(&id) {
                SnapshotFormat::Canonical
            } else {
                SnapshotFormat::Native
            };
            // Savepoints, stops and upgrades stay aligned, as in Flink.
            let unaligned = kind == BarrierKind::Checkpoint
                && format == SnapshotFormat::Native
                && spec.checkpoint.as_ref().is_some_and(|c| c.unaligned);
            let barrier = Barrier {
                id,
                kind,
                format,
                unaligned,
            };
            // An unaligned checkpoint starts in every task at once; an aligned one in the
            // sources, and in the others when its barriers arrive. A task that has finished
            // is gone; the coordinator knows it.
            if unaligned {
                for tx in attempt.controls.values() {
                    let _ = tx.send(Control::Trigger(barrier));
                }
            } else {
                for task in &attempt.sources {
                    let _ = attempt.controls[task].send(Control::Trigger(barrier));
                }
            }
            None
        }
        Decision::Complete(done) => {
            let id = done.id;
            let triggered_ms = triggered_at.remove(&id).unwrap_or_else(unix_ms);
            let code = match upgrade {
                Some((swap, new)) if id > *swap => new,
                _ => &*code,
            };
            let (meta, entry) = summarize(parts, code, &done, triggered_ms, finals);
            if let Err(e) = store.write_metadata(&meta) {
                store.discard(id);
                if let Some(request) = savepoints.remove(&id) {
                    request.fail(format!("its checkpoint could not be written: {e}"));
                }
                return Some(JobError::Checkpoint(e));
            }
            if let Err(e) = commit_recorded(spec, &meta) {
                if let Some(request) = savepoints.remove(&id) {
                    request.fail(format!("the commit of its sinks failed: {e}"));
                }
                return Some(e);
            }
            if let Some(request) = savepoints.remove(&id) {
                export(store, id, request);
            }
            tracing::info!(
                "checkpoint {id} complete in {} ms ({} bytes)",
                entry.duration_ms,
                entry.size_bytes
            );
            let retained = spec.checkpoint.as_ref().map_or(1, |c| c.num_retained);
            if let Err(e) = store.retain(retained, upgrade.as_ref().map(|(swap, _)| *swap)) {
                tracing::warn!("checkpoint retention failed: {e}");
            }
            record(store, spec, metrics, entry);
            for tx in attempt.controls.values() {
                let _ = tx.send(Control::Complete(id));
            }
            None
        }
        Decision::Abort { id, reason } => {
            // Stays in `triggered_at`: the writer may still write a late snapshot of it,
            // which the end of the attempt deletes.
            let triggered_ms = triggered_at.get(&id).copied().unwrap_or_else(unix_ms);
            store.discard(id);
            if let Some(request) = savepoints.remove(&id) {
                request.fail(format!("its checkpoint {id} failed: {reason}"));
            }
            let entry = HistoryEntry {
                id,
                status: CheckpointOutcome::Aborted,
                reason: Some(reason.to_string()),
                triggered_ms,
                duration_ms: unix_ms().saturating_sub(triggered_ms),
                size_bytes: 0,
                full_size_bytes: 0,
                alignment_ms: 0,
                in_flight_bytes: 0,
                operators: Vec::new(),
            };
            if matches!(
                reason,
                crate::checkpoint::coordinator::AbortReason::Subsumed
            ) {
                tracing::debug!("checkpoint {id} aborted: {reason}");
            } else {
                tracing::warn!("checkpoint {id} aborted: {reason}");
                metrics.checkpoints().failed += 1;
            }
            record(store, spec, metrics, entry);
            // The tasks wait at the stop barrier for a completion that will not come.
            (stop == Some(id)).then(|| {
                JobError::CheckpointFailed(format!("the stop checkpoint {id} failed: {reason}"))
            })
        }
        Decision::Fail(message) => Some(JobError::CheckpointFailed(message)),
    }
}

/// Copies savepoint `id` out of the job's checkpoints into the directory `request` names.
pub(super) fn export(store: &CheckpointStore, id: u64, request: Request) {
    match store.export(id, &request.dir) {
        Ok(size_bytes) => {
            let path = std::path::absolute(&request.dir).unwrap_or_else(|_| request.dir.clone());
            request.complete(Savepoint {
                path,
                checkpoint: id,
                size_bytes,
            })
        }
        Err(e) => request.fail(format!(
            "it could not be copied out of checkpoint {id}: {e}"
        )),
    }
}

pub(super) fn record(
    store: &CheckpointStore,
    spec: &JobSpec,
    metrics: &Metrics,
    entry: HistoryEntry,
) {
    if entry.status == CheckpointOutcome::Completed {
        let mut status = metrics.checkpoints();
        status.completed += 1;
        status.last = Some(entry.clone());
    }
    if let Err(e) = store.record(&spec.name, entry) {
        tracing::warn!("cannot write the checkpoint history: {e}");
    }
}

/// Every task of the job.
pub(super) fn all_tasks(parts: &JobParts) -> impl Iterator<Item = TaskId> + '_ {
    parts.plan.chains.iter().enumerate().flat_map(|(c, chain)| {
        (0..chain.parallelism).map(move |subtask| TaskId { chain: c, subtask })
    })
}

/// Commits every sink pre-commit that checkpoint `meta` records, of running and of finished
/// sinks (see [`committer`]).
pub(super) fn commit_recorded(spec: &JobSpec, meta: &Metadata) -> Result<(), JobError> {
    let index: HashMap<&str, usize> = spec
        .vertices
        .iter()
        .enumerate()
        .map(|(v, vertex)| (vertex.name.as_str(), v))
        .collect();
    commit(
        spec,
        meta.pre_commits()
            .filter_map(|(name, s, state)| Some((*index.get(name)?, s, state))),
    )
}

/// Commits each finished sink subtask's final pre-commit.
pub(super) fn commit_finals(spec: &JobSpec, finals: &Finals) -> Result<(), JobError> {
    commit(spec, finals.iter().map(|(&(v, s), state)| (v, s, state)))
}

/// Commits the pre-commits `(vertex, subtask, state)` of sinks of `spec`.
fn commit<'a>(
    spec: &'a JobSpec,
    pre_commits: impl Iterator<Item = (usize, u32, &'a serde_json::Value)>,
) -> Result<(), JobError> {
    committer::commit(
        pre_commits.filter_map(|(v, s, state)| match &spec.vertices[v].kind {
            VertexKind::Sink(sink) => Some(PreCommit {
                sink,
                ctx: task::sink_context(spec, v, s),
                state,
            }),
            _ => None,
        }),
    )
    .map_err(|failed| {
        let v = spec
            .vertices
            .iter()
            .position(|v| v.name == failed.sink)
            .expect("a sink of the spec");
        // A restart cannot heal a commit of output deleted outside weir, say.
        let permanent = failed.cause.is_permanent();
        vertex_failure(
            spec,
            v,
            failed.subtask as u32,
            FailureKind::Other,
            format!(
                "the commit of its pre-committed output failed: {}",
                failed.cause
            ),
            Some(failed.cause.into()),
        )
        .permanent_if(permanent)
    })
}

/// The version of WebAssembly operator `v` in `code`.
pub(super) fn code_version(code: &JobParts, v: usize) -> Option<CodeVersion> {
    let component = code.components.get(&v)?;
    let VertexKind::Operator { config, .. } = &code.spec.vertices[v].kind else {
        return None;
    };
    Some(CodeVersion {
        component: component.sha256().to_string(),
        config: config.clone(),
    })
}

/// The metadata and the history entry of a completed checkpoint of `parts`, whose operators
/// ran the code of `code`.
pub(super) fn summarize(
    parts: &JobParts,
    code: &JobParts,
    done: &Completed<Written>,
    triggered_ms: u64,
    finals: &Finals,
) -> (Metadata, HistoryEntry) {
    let spec = &parts.spec;
    let mut vertices: Vec<VertexMeta> = spec
        .vertices
        .iter()
        .enumerate()
        .map(|(i, v)| VertexMeta {
            name: v.name.clone(),
            role: role(&v.kind),
            uid: match &v.kind {
                VertexKind::Operator { uid, .. } => Some(uid.clone()),
                _ => None,
            },
            parallelism: v.parallelism,
            subtasks: vec![SubtaskState::Finished; v.parallelism as usize],
            code: code_version(code, i),
            in_flight: Vec::new(),
        })
        .collect();
    let mut stats: Vec<OperatorStats> = spec
        .vertices
        .iter()
        .map(|v| OperatorStats {
            vertex: v.name.clone(),
            size_bytes: 0,
            sync_ms: 0,
            alignment_ms: 0,
        })
        .collect();
    let (mut size, mut full_size, mut alignment) = (0, 0, Duration::ZERO);
    let mut in_flight_bytes = 0;
    for (task, state) in &done.tasks {
        let TaskState::Snapshot(acked) = state else {
            // Every vertex of a finished task stays `Finished`, but a sink keeps its final
            // pre-commit.
            for &v in &parts.plan.chains[task.chain].vertices {
                if let Some(commit) = finals.get(&(v, task.subtask)) {
                    vertices[v].subtasks[task.subtask as usize] = SubtaskState::FinishedSink {
                        commit: commit.clone(),
                    };
                }
            }
            continue;
        };
        size += acked.bytes;
        full_size += acked.full_bytes;
        if let Some((v, file)) = &acked.in_flight {
            in_flight_bytes += file.file.size;
            vertices[*v].in_flight.push(file.clone());
        }
        alignment = alignment.max(acked.alignment);
        for (v, sub, written) in &acked.parts {
            stats[*v].size_bytes += written;
            stats[*v].sync_ms = stats[*v].sync_ms.max(millis(acked.sync));
            stats[*v].alignment_ms = stats[*v].alignment_ms.max(millis(acked.alignment));
            vertices[*v].subtasks[task.subtask as usize] = sub.clone();
        }
    }
    let meta = Metadata {
        format: FORMAT_VERSION,
        weir_version: env!("CARGO_PKG_VERSION").into(),
        job: spec.name.clone(),
        checkpoint: done.id,
        timestamp_ms: unix_ms(),
        max_parallelism: spec.max_parallelism,
        vertices,
        savepoint: false,
    };
    let entry = HistoryEntry {
        id: done.id,
        status: CheckpointOutcome::Completed,
        reason: None,
        triggered_ms,
        duration_ms: millis(done.completed.saturating_sub(done.triggered)),
        size_bytes: size,
        full_size_bytes: full_size,
        alignment_ms: millis(alignment),
        in_flight_bytes,
        operators: stats,
    };
    (meta, entry)
}
