//! The supervisor of a running job: starts an attempt (every task thread), coordinates its
//! checkpoints, and after a failure restarts the job from the newest checkpoint under the
//! restart strategy, until the job finishes, is cancelled or runs out of attempts.
//!
//! The decisions are pure logic elsewhere ([`Coordinator`], [`Restarts`]); this module does the
//! threads, channels and files around them. Snapshots travel from the tasks to a writer
//! thread, which writes and syncs the state files off the processing threads and then
//! acknowledges to the supervisor.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::output::{Message, Target};
use super::restore::Restored;
use super::task::{self, Control, PartState, TaskEnd, TaskSetup, TaskSnapshot};
use super::{
    CheckpointStatus, Events, JobEnd, JobError, JobEvent, JobParts, Metrics, Shared, role,
};
use crate::checkpoint::coordinator::{Completed, Coordinator, Decision, TaskId, TaskState};
use crate::checkpoint::restart::{RestartDecision, Restarts};
use crate::checkpoint::storage::{
    CheckpointStore, Completion, FORMAT_VERSION, HistoryEntry, Metadata, OperatorStats,
    SubtaskState, VertexMeta, millis, unix_ms,
};
use crate::checkpoint::{Barrier, BarrierKind, RestartStrategy};
use crate::failpoint;
use crate::job::spec::{EdgeKind, JobSpec, VertexKind};
use crate::operator::FailureKind;

/// Batches a channel holds before its sender blocks.
const CHANNEL_CAPACITY: usize = 8;
/// How often the supervisor looks at the job's stop and cancel flags.
const TICK: Duration = Duration::from_millis(20);

/// What a task contributed to a completed checkpoint.
#[derive(Debug)]
pub(crate) struct Acked {
    /// `(vertex, state, bytes written)` for each vertex of the task's chain.
    parts: Vec<(usize, SubtaskState, u64)>,
    alignment: Duration,
    sync: Duration,
    /// Bytes written for the checkpoint (state files and newly shared files).
    bytes: u64,
    /// Bytes of the state it consists of, shared files written earlier included.
    full_bytes: u64,
}

/// What the tasks and the writer tell the supervisor.
enum Event {
    End(TaskId, TaskEnd),
    Ack { id: u64, task: TaskId, acked: Acked },
    Decline { id: u64, reason: String },
}

/// The threads and channels of one attempt.
struct Attempt {
    threads: Vec<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    controls: HashMap<TaskId, Sender<Control>>,
    events: Receiver<Event>,
    sources: Vec<TaskId>,
}

/// The final pre-commits of finished sinks, by vertex and subtask.
type Finals = BTreeMap<(usize, u32), serde_json::Value>;

/// How an attempt ended.
enum Outcome {
    /// Every task finished; the final pre-commits of its sinks are still to commit.
    Finished(Finals),
    /// Every task stopped at the stop checkpoint `n` (or had finished before), and `n` is
    /// complete.
    Stopped(u64),
    Failed(JobError),
    Cancelled,
}

/// Runs the job to its end: how it ended, or the failure that ended it.
pub(crate) fn supervise(
    parts: Arc<JobParts>,
    metrics: Arc<Metrics>,
    flags: Arc<Shared>,
    store: Option<CheckpointStore>,
    mut restore: Option<Arc<Restored>>,
    events: Events,
) -> Result<JobEnd, JobError> {
    let origin = Instant::now();
    let spec = &parts.spec;
    let mut restarts = Restarts::new(spec.restart.clone());
    loop {
        if let Some(r) = &restore {
            tracing::info!("restoring checkpoint {} from {}", r.id(), r.dir.display());
            metrics.checkpoints().restored_from = Some(r.id());
            // What the checkpoint recorded as pre-committed, its completion committed; a crash
            // may have come first.
            commit_recorded(spec, &r.meta)?;
        }
        let restored_from = restore.as_ref().map(|r| r.id());
        events.send(JobEvent::Starting {
            restored_from: restore.as_ref().map(|r| (r.id(), r.dir.clone())),
            restart: restarts.attempts(),
        });
        let started = origin.elapsed();
        let attempt = spawn(&parts, &metrics, &flags, store.as_ref(), restore.take())?;
        let outcome = run(&parts, &metrics, &flags, store.as_ref(), attempt, &events);
        let error = match outcome {
            Outcome::Finished(finals) => {
                return finish_job(&parts, store.as_ref(), &finals, origin).map(|()| {
                    // Without checkpoints a stop ends the input: the job drained.
                    if store.is_none() && flags.is_stopping() {
                        JobEnd::Stopped {
                            checkpoint: None,
                            problem: None,
                        }
                    } else {
                        JobEnd::Finished
                    }
                });
            }
            Outcome::Stopped(n) => {
                return Ok(JobEnd::Stopped {
                    checkpoint: Some(n),
                    problem: None,
                });
            }
            Outcome::Cancelled => return Err(JobError::Cancelled),
            Outcome::Failed(e) => e,
        };
        if flags.is_stopping() {
            return stopped_at_newest(spec, store.as_ref(), format!("{error}"));
        }
        if error.is_permanent() {
            tracing::warn!("not restarting the job: a restart cannot heal {error}");
            return Err(error);
        }
        if restarts.is_deterministic(error.guest_failure().as_deref(), restored_from) {
            return Err(JobError::Restarts(Box::new(restarts.exhausted(error))));
        }
        match restarts.on_failure(started, origin.elapsed(), fastrand::f64()) {
            RestartDecision::Fail => {
                if restarts.attempts() == 0 && spec.restart == RestartStrategy::None {
                    return Err(error);
                }
                return Err(JobError::Restarts(Box::new(restarts.exhausted(error))));
            }
            RestartDecision::Restart { attempt, delay } => {
                // The event carries it to the user; this is for the debug log.
                tracing::debug!(
                    "job \"{}\" failed: {error}; restart {attempt} (strategy {}) after {delay:.1?}",
                    spec.name,
                    spec.restart.name()
                );
                events.send(JobEvent::Restarting {
                    cause: error.to_string(),
                    delay,
                    restart: restarts.attempts(),
                });
                metrics.checkpoints().restarts += 1;
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    if flags.is_user_cancelled() {
                        return Err(JobError::Cancelled);
                    }
                    if flags.is_stopping() {
                        return stopped_at_newest(
                            spec,
                            store.as_ref(),
                            format!("it was waiting to restart after: {error}"),
                        );
                    }
                    std::thread::sleep(TICK.min(until.saturating_duration_since(Instant::now())));
                }
                if let Some(store) = &store {
                    restore = Restored::latest(store, spec)?.map(Arc::new);
                }
            }
        }
    }
}

/// A stop that could not take a checkpoint of its own, because the job failed (with `problem`)
/// or was waiting to restart: the job stops at its newest complete checkpoint, where the next
/// start resumes. Sinks committed everything up to it; what came after is not committed.
fn stopped_at_newest(
    spec: &JobSpec,
    store: Option<&CheckpointStore>,
    problem: String,
) -> Result<JobEnd, JobError> {
    let checkpoint = match store {
        Some(store) => Restored::latest(store, spec)?.map(|r| r.id()),
        None => None,
    };
    Ok(JobEnd::Stopped {
        checkpoint,
        problem: Some(problem),
    })
}

/// The input is exhausted and every task finished: commits the sinks' final output and
/// records the job's end.
///
/// With checkpoints, first a last checkpoint records every task finished, with the sinks'
/// final pre-commits: a crash from here on restores it and commits again, rather than replaying
/// input whose output is committed. Then the commit; then a completion record, so that a later
/// run finds the job finished instead of running it again; then the checkpoints go (Flink
/// discards the checkpoints of a finished job too). A crash between any two of these steps
/// leaves a state the next run completes without writing anything twice.
fn finish_job(
    parts: &JobParts,
    store: Option<&CheckpointStore>,
    finals: &Finals,
    origin: Instant,
) -> Result<(), JobError> {
    let spec = &parts.spec;
    let Some(store) = store else {
        return commit_finals(spec, finals);
    };
    let done = Completed {
        id: store.next_id()?,
        triggered: origin.elapsed(),
        completed: origin.elapsed(),
        tasks: all_tasks(parts).map(|t| (t, TaskState::Finished)).collect(),
    };
    let (meta, _) = summarize(parts, &done, unix_ms(), finals);
    store.write_metadata(&meta)?;
    failpoint::hit("finish.after-final-checkpoint");
    commit_recorded(spec, &meta)?;
    failpoint::hit("finish.after-commit");
    store.write_completion(&Completion {
        job: spec.name.clone(),
        finished_ms: unix_ms(),
        checkpoint: done.id,
    })?;
    failpoint::hit("finish.after-completion-record");
    store.discard_all()?;
    Ok(())
}

/// Starts every task of an attempt, restored from `restore` when given.
fn spawn(
    parts: &JobParts,
    metrics: &Arc<Metrics>,
    flags: &Arc<Shared>,
    store: Option<&CheckpointStore>,
    restore: Option<Arc<Restored>>,
) -> Result<Attempt, JobError> {
    let spec = &parts.spec;
    let chains = &parts.plan.chains;
    // Channels: inputs[chain][subtask] and targets[chain][subtask].
    let mut inputs: Vec<Vec<Vec<Receiver<Message>>>> = chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
        .collect();
    let mut targets: Vec<Vec<Vec<Target>>> = chains
        .iter()
        .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
        .collect();
    for conn in &parts.plan.connections {
        let (up, down) = (
            chains[conn.from_chain].parallelism,
            chains[conn.to_chain].parallelism,
        );
        for u in 0..up {
            let mut senders = Vec::new();
            for d in 0..down {
                if conn.edge == EdgeKind::Forward && d != u {
                    continue;
                }
                let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
                senders.push(tx);
                inputs[conn.to_chain][d as usize].push(rx);
            }
            targets[conn.from_chain][u as usize].push(Target::new(
                spec.vertices[chains[conn.to_chain].head()].name.clone(),
                conn.side_output.clone(),
                conn.edge,
                senders,
                spec.max_parallelism,
            ));
        }
    }

    let shared = Arc::new(Shared::attempt(flags));
    let (event_tx, events) = crossbeam_channel::unbounded();
    let (snapshot_tx, snapshot_rx) = crossbeam_channel::unbounded::<TaskSnapshot>();
    let writer = match store {
        Some(store) => {
            let (store, spec, events) = (store.clone(), Arc::clone(spec), event_tx.clone());
            Some(
                std::thread::Builder::new()
                    .name("checkpoint-writer".into())
                    .spawn(move || write_snapshots(&store, &spec, &snapshot_rx, &events))
                    .map_err(JobError::Spawn)?,
            )
        }
        None => None,
    };
    let mut attempt = Attempt {
        threads: Vec::new(),
        writer,
        shared: Arc::clone(&shared),
        controls: HashMap::new(),
        events,
        sources: Vec::new(),
    };
    for (c, chain) in chains.iter().enumerate() {
        for s in (0..chain.parallelism).rev() {
            let task = TaskId {
                chain: c,
                subtask: s,
            };
            let (control_tx, control) = crossbeam_channel::unbounded();
            attempt.controls.insert(task, control_tx);
            if matches!(spec.vertices[chain.head()].kind, VertexKind::Source(_)) {
                attempt.sources.push(task);
            }
            let setup = TaskSetup {
                spec: Arc::clone(spec),
                task,
                chain: chain.vertices.clone(),
                inputs: inputs[c].pop().unwrap_or_default(),
                targets: targets[c].pop().unwrap_or_default(),
                components: chain
                    .vertices
                    .iter()
                    .filter_map(|v| parts.components.get(v).map(|c| (*v, c.clone())))
                    .collect(),
                metrics: Arc::clone(metrics),
                shared: Arc::clone(&shared),
                control,
                snapshots: snapshot_tx.clone(),
                restore: restore.clone(),
                clock: parts.clock.clone(),
            };
            let name = format!("{}-{s}", spec.vertices[chain.head()].name);
            let (shared, events) = (Arc::clone(&shared), event_tx.clone());
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let end = std::panic::catch_unwind(AssertUnwindSafe(|| task::run(setup)))
                        .unwrap_or_else(|panic| TaskEnd::Failed(internal_error(&*panic)));
                    if matches!(end, TaskEnd::Failed(_)) {
                        shared.cancel();
                    }
                    let _ = events.send(Event::End(task, end));
                })
                .map_err(JobError::Spawn)?;
            attempt.threads.push(handle);
        }
    }
    Ok(attempt)
}

fn internal_error(panic: &(dyn std::any::Any + Send)) -> JobError {
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    JobError::Task {
        kind: FailureKind::Other,
        role: "task",
        name: "runtime".into(),
        uid: None,
        subtask: 0,
        parallelism: 1,
        message: format!("internal error (please report): {message}"),
        permanent: false,
    }
}

/// Coordinates the attempt's checkpoints until every task has ended.
fn run(
    parts: &JobParts,
    metrics: &Metrics,
    flags: &Shared,
    store: Option<&CheckpointStore>,
    attempt: Attempt,
    events: &Events,
) -> Outcome {
    let spec = &parts.spec;
    let started = Instant::now();
    let now = || started.elapsed();
    let mut coordinator = match (store, &spec.checkpoint) {
        (Some(store), Some(config)) => match store.next_id() {
            Ok(first) => Some(Coordinator::new(
                config,
                attempt.controls.keys().copied(),
                attempt.sources.iter().copied(),
                first,
            )),
            Err(e) => return finish(attempt, Outcome::Failed(e.into()), None),
        },
        _ => None,
    };
    let mut triggered_at: HashMap<u64, u64> = HashMap::new();
    let mut finals = Finals::new();
    let (mut ended, mut finished, mut suspended) = (0, 0, 0);
    let mut failure: Option<JobError> = None;
    let mut cancelled = false;
    let mut stop_requested = false;
    // The stop checkpoint, once complete.
    let mut stopped_at = None;
    // What the coordinator decided on the last event, carried out with the next poll.
    let mut decisions = Vec::new();
    let tasks = attempt.controls.len();
    while ended < tasks {
        if !cancelled && flags.is_user_cancelled() {
            cancelled = true;
            attempt.shared.cancel();
        }
        if failure.is_some() || cancelled {
            // Wind down: no more triggers, nothing more to complete.
            decisions.clear();
        } else if let Some(c) = &mut coordinator {
            if !stop_requested && flags.is_stopping() {
                stop_requested = true;
                decisions.extend(c.stop(now()));
                events.send(JobEvent::Stopping {
                    checkpoint: c.stop_id(),
                });
            }
            decisions.extend(c.poll(now()));
        } else if !stop_requested && flags.is_stopping() {
            stop_requested = true;
            events.send(JobEvent::Stopping { checkpoint: None });
        }
        let stop_id = coordinator.as_ref().and_then(Coordinator::stop_id);
        for d in decisions.drain(..) {
            let completes = match &d {
                Decision::Complete(done) => Some(done.id),
                _ => None,
            };
            if let Some(e) = apply(
                d,
                parts,
                metrics,
                store,
                &attempt,
                &mut triggered_at,
                &finals,
                stop_id,
            ) {
                failure.get_or_insert(e);
                attempt.shared.cancel();
            } else if completes.is_some() && completes == stop_id {
                stopped_at = stop_id;
            }
        }
        let wait = coordinator
            .as_ref()
            .and_then(|c| {
                c.next_trigger_at()
                    .into_iter()
                    .chain(c.next_expiry_at())
                    .min()
            })
            .map_or(TICK, |at| at.saturating_sub(now()).min(TICK));
        let event = match attempt.events.recv_timeout(wait) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        decisions = match event {
            Event::End(task, end) => {
                ended += 1;
                match end {
                    TaskEnd::Finished(last, commits) => {
                        finished += 1;
                        for (v, commit) in commits {
                            finals.insert((v, task.subtask), commit);
                        }
                        coordinator
                            .as_mut()
                            .map(|c| c.finished(task, last, now()))
                            .unwrap_or_default()
                    }
                    TaskEnd::Suspended => {
                        suspended += 1;
                        Vec::new()
                    }
                    TaskEnd::Failed(e) => {
                        failure.get_or_insert(e);
                        Vec::new()
                    }
                    TaskEnd::Cancelled => Vec::new(),
                }
            }
            Event::Ack { id, task, acked } => coordinator
                .as_mut()
                .map(|c| c.ack(id, task, acked, now()))
                .unwrap_or_default(),
            Event::Decline { id, reason } => coordinator
                .as_mut()
                .map(|c| c.decline(id, reason))
                .unwrap_or_default(),
        };
    }
    // The last task's end may have completed a checkpoint.
    if failure.is_none() && !cancelled {
        let stop_id = coordinator.as_ref().and_then(Coordinator::stop_id);
        for d in decisions {
            if let Some(e) = apply(
                d,
                parts,
                metrics,
                store,
                &attempt,
                &mut triggered_at,
                &finals,
                stop_id,
            ) {
                failure.get_or_insert(e);
            }
        }
    }
    let outcome = match (failure, cancelled || flags.is_user_cancelled()) {
        (_, true) => Outcome::Cancelled,
        (Some(e), false) => Outcome::Failed(e),
        (None, false) if finished == tasks => Outcome::Finished(finals),
        (None, false) if stopped_at.is_some() && finished + suspended == tasks => {
            Outcome::Stopped(stopped_at.expect("checked"))
        }
        (None, false) => Outcome::Failed(JobError::Task {
            kind: FailureKind::Other,
            role: "task",
            name: "runtime".into(),
            uid: None,
            subtask: 0,
            parallelism: 1,
            message: "a task stopped without reporting why (please report)".into(),
            permanent: false,
        }),
    };
    // Checkpoints triggered in this attempt that did not complete.
    let pending: Vec<u64> = triggered_at.keys().copied().collect();
    finish(attempt, outcome, store.map(|s| (s, pending)))
}

/// Joins the attempt's threads and deletes what its unfinished checkpoints wrote.
fn finish(
    attempt: Attempt,
    outcome: Outcome,
    pending: Option<(&CheckpointStore, Vec<u64>)>,
) -> Outcome {
    attempt.shared.cancel();
    drop(attempt.controls);
    for t in attempt.threads {
        let _ = t.join();
    }
    if let Some(w) = attempt.writer {
        let _ = w.join();
    }
    if let Some((store, ids)) = pending {
        for id in ids {
            store.discard(id);
        }
    }
    outcome
}

/// Carries out one coordinator decision; `Some` is a failure of the job. `stop` is the
/// checkpoint the job stops at, if a stop was triggered.
#[allow(clippy::too_many_arguments)]
fn apply(
    decision: Decision<Acked>,
    parts: &JobParts,
    metrics: &Metrics,
    store: Option<&CheckpointStore>,
    attempt: &Attempt,
    // Unix ms of the trigger of each checkpoint of the attempt not (yet) complete.
    triggered_at: &mut HashMap<u64, u64>,
    finals: &Finals,
    stop: Option<u64>,
) -> Option<JobError> {
    let spec = &parts.spec;
    let store = store?;
    match decision {
        Decision::Trigger(id) => {
            tracing::debug!("triggering checkpoint {id}");
            triggered_at.insert(id, unix_ms());
            let kind = if stop == Some(id) {
                BarrierKind::Stop
            } else {
                BarrierKind::Checkpoint
            };
            for task in &attempt.sources {
                // A source that has finished is gone; the coordinator knows it.
                let _ = attempt.controls[task].send(Control::Trigger(Barrier { id, kind }));
            }
            None
        }
        Decision::Complete(done) => {
            let id = done.id;
            let triggered_ms = triggered_at.remove(&id).unwrap_or_else(unix_ms);
            let (meta, entry) = summarize(parts, &done, triggered_ms, finals);
            if let Err(e) = store.write_metadata(&meta) {
                store.discard(id);
                return Some(JobError::Checkpoint(e));
            }
            if let Err(e) = commit_recorded(spec, &meta) {
                return Some(e);
            }
            tracing::info!(
                "checkpoint {id} complete in {} ms ({} bytes)",
                entry.duration_ms,
                entry.size_bytes
            );
            if let Err(e) = store.retain(spec.checkpoint.as_ref().map_or(1, |c| c.num_retained)) {
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
            let entry = HistoryEntry {
                id,
                status: "aborted".into(),
                reason: Some(reason.to_string()),
                triggered_ms,
                duration_ms: unix_ms().saturating_sub(triggered_ms),
                size_bytes: 0,
                full_size_bytes: 0,
                alignment_ms: 0,
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

fn record(store: &CheckpointStore, spec: &JobSpec, metrics: &Metrics, entry: HistoryEntry) {
    if entry.status == "completed" {
        let mut status = metrics.checkpoints();
        status.completed += 1;
        status.last = Some(entry.clone());
    }
    if let Err(e) = store.record(&spec.name, entry) {
        tracing::warn!("cannot write the checkpoint history: {e}");
    }
}

/// Every task of the job.
fn all_tasks(parts: &JobParts) -> impl Iterator<Item = TaskId> + '_ {
    parts.plan.chains.iter().enumerate().flat_map(|(c, chain)| {
        (0..chain.parallelism).map(move |subtask| TaskId { chain: c, subtask })
    })
}

/// Commits every sink pre-commit that checkpoint `meta` records, of running and of finished
/// sinks. The supervisor is the committer, not the sink's task: a task may be waiting on what
/// its own last pre-commit holds (a database's row locks). A commit that fails fails the job,
/// whose restore commits again: pre-committed output is never dropped.
fn commit_recorded(spec: &JobSpec, meta: &Metadata) -> Result<(), JobError> {
    let mut recorded = Finals::new();
    for (v, vertex) in spec.vertices.iter().enumerate() {
        let Some(meta) = meta.vertex(&vertex.name) else {
            continue;
        };
        for (s, sub) in meta.subtasks.iter().enumerate() {
            if let SubtaskState::Sink { state: commit } | SubtaskState::FinishedSink { commit } =
                sub
            {
                recorded.insert((v, s as u32), commit.clone());
            }
        }
    }
    commit_finals(spec, &recorded)
}

/// Commits each sink subtask's pre-commit.
fn commit_finals(spec: &JobSpec, finals: &Finals) -> Result<(), JobError> {
    for (&(v, s), commit) in finals {
        let vertex = &spec.vertices[v];
        let VertexKind::Sink(config) = &vertex.kind else {
            continue;
        };
        config
            .commit(&task::sink_context(spec, v, s), commit)
            .map_err(|e| JobError::Task {
                kind: FailureKind::Other,
                role: "sink",
                name: vertex.name.clone(),
                uid: None,
                subtask: s,
                parallelism: vertex.parallelism,
                message: format!("the commit of its pre-committed output failed: {e}"),
                permanent: false,
            })?;
    }
    Ok(())
}

/// The metadata and the history entry of a completed checkpoint.
fn summarize(
    parts: &JobParts,
    done: &Completed<Acked>,
    triggered_ms: u64,
    finals: &Finals,
) -> (Metadata, HistoryEntry) {
    let spec = &parts.spec;
    let mut vertices: Vec<VertexMeta> = spec
        .vertices
        .iter()
        .map(|v| VertexMeta {
            name: v.name.clone(),
            role: role(&v.kind).into(),
            uid: match &v.kind {
                VertexKind::Operator { uid, .. } => Some(uid.clone()),
                _ => None,
            },
            parallelism: v.parallelism,
            subtasks: vec![SubtaskState::Finished; v.parallelism as usize],
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
    };
    let entry = HistoryEntry {
        id: done.id,
        status: "completed".into(),
        reason: None,
        triggered_ms,
        duration_ms: millis(done.completed.saturating_sub(done.triggered)),
        size_bytes: size,
        full_size_bytes: full_size,
        alignment_ms: millis(alignment),
        operators: stats,
    };
    (meta, entry)
}

/// The writer thread: writes each task snapshot's state files, then acknowledges.
fn write_snapshots(
    store: &CheckpointStore,
    spec: &JobSpec,
    snapshots: &Receiver<TaskSnapshot>,
    events: &Sender<Event>,
) {
    for snap in snapshots {
        let (id, task) = (snap.id, snap.task);
        let event = match write_one(store, spec, snap) {
            Ok(acked) => Event::Ack { id, task, acked },
            Err(e) => Event::Decline {
                id,
                reason: e.to_string(),
            },
        };
        if events.send(event).is_err() {
            return;
        }
    }
}

fn write_one(
    store: &CheckpointStore,
    spec: &JobSpec,
    snap: TaskSnapshot,
) -> Result<Acked, crate::checkpoint::CheckpointError> {
    let mut acked = Acked {
        parts: Vec::with_capacity(snap.parts.len()),
        alignment: snap.alignment,
        sync: snap.sync,
        bytes: 0,
        full_bytes: 0,
    };
    for part in snap.parts {
        let mut written = 0;
        let state = match part.state {
            PartState::Source(position) => SubtaskState::Source { position },
            PartState::Sink(state) => SubtaskState::Sink { state },
            PartState::Operator { keyed, operator } => {
                let name = state_file_name(
                    part.vertex,
                    &spec.vertices[part.vertex].name,
                    snap.task.subtask,
                );
                let mut shared = (0, 0);
                let state = match keyed {
                    Some(snapshot) => {
                        let (file, uploaded) =
                            store.write_keyed_state(snap.id, &name, &snapshot)?;
                        shared = uploaded;
                        Some(file)
                    }
                    None => None,
                };
                let operator_state = match operator {
                    Some(bytes) => {
                        Some(store.write_state(snap.id, &format!("{name}.op"), &bytes, (0, 0))?)
                    }
                    None => None,
                };
                let files = state
                    .iter()
                    .chain(&operator_state)
                    .map(|f| f.size)
                    .sum::<u64>();
                written = files + shared.0;
                acked.full_bytes += files + shared.1;
                SubtaskState::Operator {
                    state,
                    operator_state,
                }
            }
        };
        acked.bytes += written;
        acked.parts.push((part.vertex, state, written));
    }
    Ok(acked)
}

/// `<index>-<vertex name>-<subtask>`, with anything but letters, digits, `-` and `_` in the
/// name replaced (the index keeps replaced names apart).
fn state_file_name(index: usize, name: &str, subtask: u32) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{index}-{safe}-{subtask}")
}

impl Metrics {
    /// The checkpoint counters, for updating or reading.
    pub(crate) fn checkpoints(&self) -> std::sync::MutexGuard<'_, CheckpointStatus> {
        self.checkpoints.lock().unwrap_or_else(|p| p.into_inner())
    }
}
