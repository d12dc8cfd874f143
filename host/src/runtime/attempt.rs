//! One attempt of a job: its task threads and the channels between them, and the loop that
//! coordinates its checkpoints until every task has ended. The supervisor starts attempts;
//! `checkpointing` carries out what the coordinator decides.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::checkpointing::Checkpointing;
use super::debloat::{self, Budget, CHANNEL_CAPACITY};
use super::output::{Message, Target};
use super::restore::Restored;
use super::task::{self, Control, TaskEnd, TaskSetup};
use super::upgrade::{Pending, SwapPlan, Upgrade, UpgradeOutcome, Upgrades};
use super::{Events, Failure, JobError, JobEvent, JobParts, Metrics, Shared};
use crate::checkpoint::CheckpointError;
use crate::checkpoint::coordinator::{Coordinator, Decision, TaskId};
use crate::checkpoint::storage::CheckpointStore;
use crate::checkpoint::writer::{TaskSnapshot, Written, write_snapshots};
use crate::job::spec::{EdgeKind, OperatorCode, VertexKind};

/// How often the supervisor looks at the job's stop and cancel flags.
pub(super) const TICK: Duration = Duration::from_millis(20);

/// A task's input: a channel's receiving end and its debloating budget.
/// A channel into a task, its debloating budget and which input of the chain's head it feeds.
type Input = (Receiver<Message>, Budget, u8);

/// What the tasks and the writer tell the supervisor.
pub(super) enum Event {
    End(TaskId, TaskEnd),
    Ack {
        id: u64,
        task: TaskId,
        acked: Written,
    },
    Decline {
        id: u64,
        reason: String,
    },
}

/// The threads and channels of one attempt.
pub(super) struct Attempt {
    threads: Vec<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    pub(super) controls: HashMap<TaskId, Sender<Control>>,
    events: Receiver<Event>,
    /// The tasks that head a chain with a source: they receive checkpoint triggers.
    pub(super) sources: Vec<TaskId>,
}

/// The final pre-commits of finished sinks, by vertex and subtask.
pub(super) type Finals = BTreeMap<(usize, u32), serde_json::Value>;

/// How an attempt ended.
pub(super) enum Outcome {
    /// Every task finished; the final pre-commits of its sinks are still to commit.
    Finished(Finals),
    /// Every task stopped at the stop checkpoint `n` (or had finished before), and `n` is
    /// complete.
    Stopped(u64),
    Failed(JobError),
    Cancelled,
}

/// Starts every task of an attempt, restored from `restore` when given.
pub(super) fn spawn(
    parts: &JobParts,
    metrics: &Arc<Metrics>,
    flags: &Arc<Shared>,
    store: Option<&CheckpointStore>,
    restore: Option<Arc<Restored>>,
) -> Result<Attempt, JobError> {
    let spec = &parts.spec;
    let chains = &parts.plan.chains;
    // Channels: inputs[chain][subtask] and targets[chain][subtask].
    let mut inputs: Vec<Vec<Vec<Input>>> = chains
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
                let budget = debloat::new_budget(spec.buffer_debloat_target.is_some());
                senders.push((tx, Arc::clone(&budget)));
                inputs[conn.to_chain][d as usize].push((rx, budget, conn.input));
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
            let (store, events) = (store.clone(), event_tx.clone());
            let vertices: Vec<String> = spec.vertices.iter().map(|v| v.name.clone()).collect();
            let done = move |id, task, written: Result<Written, CheckpointError>| {
                let event = match written {
                    Ok(acked) => Event::Ack { id, task, acked },
                    Err(e) => Event::Decline {
                        id,
                        reason: e.to_string(),
                    },
                };
                events.send(event).is_ok()
            };
            Some(
                std::thread::Builder::new()
                    .name("checkpoint-writer".into())
                    .spawn(move || write_snapshots(&store, &vertices, &snapshot_rx, done))
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
            let mut receivers = Vec::new();
            let mut budgets = Vec::new();
            let mut input_of = Vec::new();
            for (rx, budget, input) in inputs[c].pop().unwrap_or_default() {
                receivers.push(rx);
                budgets.push(budget);
                input_of.push(input);
            }
            let setup = TaskSetup {
                spec: Arc::clone(spec),
                task,
                chain: chain.vertices.clone(),
                inputs: receivers,
                budgets,
                input_of,
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

/// A task thread's panic, as the job's failure.
fn internal_error(panic: &(dyn std::any::Any + Send)) -> JobError {
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    JobError::Internal(format!("a task panicked: {message}"))
}

/// Coordinates the attempt's checkpoints until every task has ended.
pub(super) fn run(
    parts: &Arc<JobParts>,
    metrics: &Metrics,
    flags: &Shared,
    store: Option<&CheckpointStore>,
    attempt: Attempt,
    events: &Events,
    upgrades: &mut Upgrades,
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
    let waits = (spec.vertices.iter()).find(|v| match &v.kind {
        VertexKind::Sink(sink) => sink.waits_on_its_pre_commits(),
        _ => false,
    });
    if let (Some(c), Some(sink)) = (&mut coordinator, waits) {
        c.tolerate_no_failure(format!(
            "sink \"{}\" upserts into PostgreSQL in transactions that keep their rows locked \
             until a checkpoint commits them, so the job restarts from its last completed \
             checkpoint rather than wait on them",
            sink.name
        ));
    }
    let mut checkpointing = Checkpointing::new(parts, metrics, store);
    checkpointing.upgrade = upgrades
        .pending
        .as_ref()
        .map(|p| (p.checkpoint, Arc::clone(&p.new)));
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
    let mut failing = false;
    while ended < tasks {
        if let (Some(e), false) = (&failure, failing) {
            failing = true;
            events.send(JobEvent::Failing {
                failure: Failure::of(e),
            });
        }
        if !cancelled && flags.is_user_cancelled() {
            cancelled = true;
            attempt.shared.cancel();
        }
        // The decisions of the last event the upgrade in progress has followed.
        let mut followed = 0;
        if failure.is_some() || cancelled {
            // Wind down: no more triggers, nothing more to complete.
            decisions.clear();
        } else if let Some(c) = &mut coordinator {
            // The swap checkpoint completing on the last event starts the probation before
            // anything is triggered: else one interval after the swap checkpoint began (it
            // may have taken that long) the next would start at once and end the probation.
            if follow_upgrade(&decisions, upgrades, metrics, &mut failure) {
                attempt.shared.cancel();
            }
            followed = decisions.len();
            let probation = upgrades.pending.as_ref().is_some_and(|p| p.swapped);
            c.hold(
                upgrades
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.holds_checkpoints(metrics)),
            );
            for request in flags.savepoints.take() {
                if probation {
                    request.fail(
                        "an upgrade of the job is on probation, and a savepoint would commit \
                         the new code's output; take it once the upgrade is committed",
                    );
                    continue;
                }
                match c.savepoint(now()) {
                    Some(id) => {
                        checkpointing.savepoint(id, request);
                        decisions.push(Decision::Trigger(id));
                    }
                    None => request.fail(
                        "the job is stopping or finishing: no source runs to take it; \
                         stop the job with a savepoint instead",
                    ),
                }
            }
            // An upgrade committed in this attempt is what the next one changes.
            let current = Arc::clone(upgrades.committed.as_ref().unwrap_or(parts));
            for request in flags.upgrades.take() {
                match plan_upgrade(&current, &request.upgrade) {
                    _ if upgrades.pending.is_some() => request.answer(UpgradeOutcome::Refused(
                        "another upgrade of the job is in progress; wait for it to be committed \
                         or rolled back"
                            .into(),
                    )),
                    Err(why) => request.answer(UpgradeOutcome::Refused(why)),
                    Ok((plan, new)) => match c.savepoint(now()) {
                        None => request.answer(UpgradeOutcome::Refused(
                            "the job is stopping or finishing: no source runs to carry the swap \
                             barrier"
                                .into(),
                        )),
                        Some(id) => {
                            tracing::info!("upgrade: swapping code at checkpoint {id}");
                            let plan = Arc::new(plan);
                            attempt.shared.plans.insert(id, Arc::clone(&plan));
                            checkpointing.upgrade = Some((id, Arc::clone(&new)));
                            decisions.push(Decision::Trigger(id));
                            upgrades.pending = Some(Pending {
                                request,
                                checkpoint: id,
                                swapped: false,
                                passed: false,
                                since: Instant::now(),
                                plan,
                                records_before: 0,
                                old: Arc::clone(&current),
                                new,
                            });
                        }
                    },
                }
            }
            if !stop_requested && flags.is_stopping() {
                stop_requested = true;
                if flags.is_draining() {
                    // The sources end their input; the savepoint, if any, is of the end.
                    events.send(JobEvent::Stopping { checkpoint: None });
                } else {
                    let request = flags.savepoints.take_stop();
                    decisions.extend(c.stop(now(), request.is_some()));
                    if let (Some(id), Some(request)) = (c.stop_id(), request) {
                        checkpointing.savepoint(id, request);
                    }
                    events.send(JobEvent::Stopping {
                        checkpoint: c.stop_id(),
                    });
                }
            }
            decisions.extend(c.poll(now()));
        } else {
            flags.savepoints.fail_all(
                "the job takes no checkpoints; add a [checkpoint] table to its spec to take \
                 savepoints",
            );
            for request in flags.upgrades.take() {
                request.answer(UpgradeOutcome::Refused(
                    "the job takes no checkpoints; an upgrade swaps code at a checkpoint and \
                     rolls back to it: add a [checkpoint] table to its spec"
                        .into(),
                ));
            }
            if !stop_requested && flags.is_stopping() {
                stop_requested = true;
                events.send(JobEvent::Stopping { checkpoint: None });
            }
        }
        if flags.take_roll_back() && upgrades.pending.is_some() && failure.is_none() {
            failure = Some(JobError::RollbackRequested);
            attempt.shared.cancel();
        }
        let stop_id = coordinator.as_ref().and_then(Coordinator::stop_id);
        if follow_upgrade(&decisions[followed..], upgrades, metrics, &mut failure) {
            attempt.shared.cancel();
        }
        let (failed, stopped) =
            checkpointing.apply(decisions.drain(..), &attempt, &finals, stop_id);
        if let Some(committed) = commit_upgrade(upgrades) {
            checkpointing.upgrade = None;
            checkpointing.code = Arc::clone(&committed);
            upgrades.committed = Some(committed);
        }
        if let Some(e) = failed {
            failure.get_or_insert(e);
            attempt.shared.cancel();
        }
        if stopped {
            stopped_at = stop_id;
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
        follow_upgrade(&decisions, upgrades, metrics, &mut failure);
        let (failed, stopped) = checkpointing.apply(decisions, &attempt, &finals, stop_id);
        failure = failure.or(failed);
        if stopped {
            stopped_at = stop_id;
        }
    }
    if let (Some(e), false) = (&failure, failing) {
        events.send(JobEvent::Failing {
            failure: Failure::of(e),
        });
    }
    let outcome = match (failure, cancelled || flags.is_user_cancelled()) {
        (_, true) => Outcome::Cancelled,
        (Some(e), false) => Outcome::Failed(e),
        (None, false) if finished == tasks => Outcome::Finished(finals),
        (None, false) if stopped_at.is_some() && finished + suspended == tasks => {
            Outcome::Stopped(stopped_at.expect("checked"))
        }
        (None, false) => Outcome::Failed(JobError::Internal(
            "a task stopped without reporting why".into(),
        )),
    };
    checkpointing.fail_savepoints(match &outcome {
        Outcome::Cancelled => "the job was cancelled before it completed",
        Outcome::Failed(_) => "the job failed before it completed",
        _ => "the job ended before it completed",
    });
    // Checkpoints triggered in this attempt that did not complete.
    let pending = checkpointing.unfinished();
    finish(attempt, outcome, store.map(|s| (s, pending)))
}

/// Follows the upgrade in progress through the coordinator's `decisions`: its swap checkpoint
/// completing starts its probation, the first one after it ends it; the swap checkpoint
/// failing fails the attempt (tasks may have swapped already), which rolls the upgrade back.
/// Returns whether it failed the attempt.
fn follow_upgrade(
    decisions: &[Decision<Written>],
    upgrades: &mut Upgrades,
    metrics: &Metrics,
    failure: &mut Option<JobError>,
) -> bool {
    let Some(p) = &mut upgrades.pending else {
        return false;
    };
    let mut failed = false;
    for d in decisions {
        match d {
            Decision::Complete(done) if done.id == p.checkpoint => {
                p.swapped = true;
                p.since = Instant::now();
                p.records_before = p.records(metrics);
                p.request.swapped(done.id);
            }
            Decision::Complete(done) if p.swapped && done.id > p.checkpoint => {
                p.passed = true;
            }
            Decision::Abort { id, reason } if *id == p.checkpoint => {
                failure.get_or_insert(JobError::CheckpointFailed(format!(
                    "the swap checkpoint {id} of an upgrade failed: {reason}"
                )));
                failed = true;
            }
            _ => {}
        }
    }
    failed
}

/// Commits the upgrade in progress if its probation is over: answers it and returns the job
/// with the new code, for every later restart.
fn commit_upgrade(upgrades: &mut Upgrades) -> Option<Arc<JobParts>> {
    if !upgrades.pending.as_ref().is_some_and(|p| p.passed) {
        return None;
    }
    let p = upgrades.pending.take().expect("checked");
    let new = Arc::clone(&p.new);
    p.commit();
    Some(new)
}

/// Checks an upgrade against the job and returns what the tasks swap and the job with the
/// new code and config.
fn plan_upgrade(parts: &JobParts, upgrade: &Upgrade) -> Result<(SwapPlan, Arc<JobParts>), String> {
    if upgrade.operators.is_empty() {
        return Err("the upgrade names no operator".into());
    }
    let mut plan = SwapPlan::default();
    let mut new = parts.clone();
    let mut spec = (*parts.spec).clone();
    for op in &upgrade.operators {
        let v = spec
            .vertices
            .iter()
            .position(|v| matches!(&v.kind, VertexKind::Operator { uid, .. } if *uid == op.uid))
            .ok_or_else(|| format!("the job has no operator with uid \"{}\"", op.uid))?;
        let VertexKind::Operator { code, config, .. } = &mut spec.vertices[v].kind else {
            unreachable!("found as an operator");
        };
        let guest = match code {
            OperatorCode::Wasm { .. } => true,
            OperatorCode::Window(w) => w.code.is_some(),
            _ => false,
        };
        if !guest {
            return Err(format!(
                "operator uid \"{}\" is a built-in; only WebAssembly operators and window \
                 functions in components are upgraded",
                op.uid
            ));
        }
        if plan.code.contains_key(&v) {
            return Err(format!("operator uid \"{}\" is named twice", op.uid));
        }
        if let Some(c) = &op.config {
            *config = c.clone();
        }
        new.components.insert(v, op.component.clone());
        plan.code
            .insert(v, (op.component.clone(), op.config.clone()));
    }
    new.spec = Arc::new(spec);
    Ok((plan, Arc::new(new)))
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
