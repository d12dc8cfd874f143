//! The supervisor of a running job: starts attempts, and after a failure restarts the job from
//! the newest checkpoint under the restart strategy, until the job finishes, stops, is
//! cancelled or fails for good; at the end of input it records the job's end, and when the
//! job ends for good without finishing it releases what its sinks prepared.
//!
//! The decisions are pure logic elsewhere ([`Restarts`]); an attempt's threads and checkpoint
//! loop are in `attempt`.

use std::sync::Arc;
use std::time::Instant;

use super::attempt::{Finals, Outcome, TICK, run, spawn};
use super::checkpointing::{all_tasks, commit_finals, commit_recorded, export, record, summarize};
use super::restore::Restored;
use super::task;
use super::upgrade::{Pending, UpgradeOutcome, Upgrades};
use super::{Events, Failure, JobEnd, JobError, JobEvent, JobParts, Metrics, Shared};
use crate::checkpoint::RestartStrategy;
use crate::checkpoint::coordinator::{Completed, TaskState};
use crate::checkpoint::restart::{RestartDecision, Restarts};
use crate::checkpoint::storage::{CheckpointStore, Completion, unix_ms};
use crate::failpoint;
use crate::job::spec::{JobSpec, VertexKind};

/// Runs the job to its end: how it ended, or the failure that ended it (then what its sinks
/// pre-committed for checkpoints that never completed is released).
pub(crate) fn supervise(
    parts: Arc<JobParts>,
    metrics: Arc<Metrics>,
    flags: Arc<Shared>,
    store: Option<CheckpointStore>,
    restore: Option<Arc<Restored>>,
    events: Events,
) -> Result<JobEnd, JobError> {
    let spec = Arc::clone(&parts.spec);
    let end = run_attempts(parts, metrics, flags, &store, restore, events);
    if end.is_err()
        && let Some(store) = &store
    {
        release(&spec, store);
    }
    end
}

/// The job ended for good without finishing: commits what the newest completed checkpoint
/// recorded (a crash may have come before), then has each sink subtask release what it
/// pre-committed for checkpoints that never completed. Nothing runs the job to clean up
/// after it: a service's cancelled job is never started again. Failures are logged.
fn release(spec: &JobSpec, store: &CheckpointStore) {
    if let Some(newest) = store.latest(0, None, |_| Ok(())).ok().flatten()
        && let Err(e) = commit_recorded(spec, &newest)
    {
        tracing::warn!(
            "cannot commit what checkpoint {} recorded: {e}",
            newest.checkpoint
        );
        return;
    }
    for (v, vertex) in spec.vertices.iter().enumerate() {
        let VertexKind::Sink(sink) = &vertex.kind else {
            continue;
        };
        for s in 0..vertex.parallelism {
            if let Err(e) = sink.release(&task::sink_context(spec, v, s)) {
                tracing::warn!(
                    "sink \"{}\" subtask {s}: cannot release what it pre-committed: {e}",
                    vertex.name
                );
            }
        }
    }
}

/// [`supervise`] up to the end.
fn run_attempts(
    mut parts: Arc<JobParts>,
    metrics: Arc<Metrics>,
    flags: Arc<Shared>,
    store: &Option<CheckpointStore>,
    mut restore: Option<Arc<Restored>>,
    events: Events,
) -> Result<JobEnd, JobError> {
    let origin = Instant::now();
    // Upgrades change operators' code and config only: name, sinks and restart strategy stay.
    let spec = &Arc::clone(&parts.spec);
    let mut upgrades = Upgrades::default();
    let mut restarts = Restarts::new(spec.restart.clone());
    // After a failure the job restores the newest checkpoint of this run, or else what it
    // started from: never an older checkpoint of an earlier run it did not start from.
    let first_id = match &store {
        Some(store) => store.next_id()?,
        None => 0,
    };
    let initial = restore.clone();
    let started_from = initial.as_ref().map(|r| r.id());
    let stopped =
        |problem: String| stopped_at_newest(spec, store.as_ref(), first_id, started_from, problem);
    loop {
        let mut commit = Ok(());
        if let Some(r) = &restore {
            tracing::info!("restoring checkpoint {} from {}", r.id(), r.dir.display());
            metrics.checkpoints().restored_from = Some(r.id());
            // What the checkpoint recorded as pre-committed, its completion committed; a crash
            // may have come first. A commit that fails (a database that is down) fails the
            // attempt, which the restart strategy retries.
            commit = commit_recorded(spec, &r.meta);
        }
        let restored_from = restore.as_ref().map(|r| r.id());
        let started = origin.elapsed();
        let outcome = match commit {
            Err(e) => Outcome::Failed(e),
            Ok(()) => {
                events.send(JobEvent::Starting {
                    restored_from: restore.as_ref().map(|r| (r.id(), r.dir.clone())),
                    restart: restarts.attempts(),
                });
                let attempt = spawn(&parts, &metrics, &flags, store.as_ref(), restore.take())?;
                run(
                    &parts,
                    &metrics,
                    &flags,
                    store.as_ref(),
                    attempt,
                    &events,
                    &mut upgrades,
                )
            }
        };
        if let Some(committed) = upgrades.committed.take() {
            parts = committed;
        }
        if !matches!(outcome, Outcome::Failed(_))
            && let Some(p) = upgrades.pending.take()
        {
            // The job ended without a failure of the new code.
            if matches!(outcome, Outcome::Cancelled) {
                p.request.answer(if p.swapped {
                    // Its checkpoints during the probation were held: the newest is the swap's.
                    UpgradeOutcome::RolledBack {
                        cause: "the job was cancelled while the new code was on probation".into(),
                    }
                } else {
                    UpgradeOutcome::Refused(
                        "the job was cancelled before the upgrade was committed".into(),
                    )
                });
            } else {
                if p.swapped {
                    parts = Arc::clone(&p.new);
                }
                p.commit();
            }
        }
        let error = match outcome {
            Outcome::Finished(finals) => {
                return finish_job(&parts, &flags, &metrics, store.as_ref(), &finals, origin).map(
                    |()| {
                        // Without checkpoints a stop ends the input: the job drained, unless every
                        // source had read all of its input before the stop came.
                        if store.is_none() && flags.was_input_cut_short() {
                            JobEnd::Stopped {
                                checkpoint: None,
                                problem: None,
                            }
                        } else {
                            JobEnd::Finished
                        }
                    },
                );
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
        if let Some(p) = upgrades.pending.take() {
            // The new code failed (or its swap did): back to the old code, from the swap
            // checkpoint, without counting it against the restart strategy.
            parts = Arc::clone(&p.old);
            restore = roll_back(p, &error, &parts, store.as_ref(), first_id, &initial)?;
            if flags.is_stopping() {
                return stopped(format!("{error}"));
            }
            events.send(JobEvent::Restarting {
                failure: Failure::of(&error),
                delay: std::time::Duration::ZERO,
                restart: restarts.attempts(),
            });
            metrics.checkpoints().restarts += 1;
            continue;
        }
        if flags.is_stopping() {
            return stopped(format!("{error}"));
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
                    failure: Failure::of(&error),
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
                        return stopped(format!("it was waiting to restart after: {error}"));
                    }
                    std::thread::sleep(TICK.min(until.saturating_duration_since(Instant::now())));
                }
                if let Some(store) = &store {
                    restore =
                        match Restored::latest(store, spec, first_id, parts.allow_non_restored)? {
                            Some(newer) => Some(Arc::new(newer)),
                            None => initial.clone(),
                        };
                }
            }
        }
    }
}

/// Rolls back upgrade `p`, which failed with `error`: answers it and returns what the job
/// restores with the old code (`parts`). Once the swap checkpoint completed, that is the
/// swap checkpoint, and the checkpoints the new code wrote after it are deleted: the old code
/// only ever reads state the old code wrote. Before, the newest checkpoint of the run (the
/// incomplete swap checkpoint is deleted), or what the run started from.
fn roll_back(
    p: Pending,
    error: &JobError,
    parts: &JobParts,
    store: Option<&CheckpointStore>,
    first_id: u64,
    initial: &Option<Arc<Restored>>,
) -> Result<Option<Arc<Restored>>, JobError> {
    tracing::warn!("the upgrade failed: {error}; rolling back to the old code");
    let restore = match store {
        // (The swap checkpoint's metadata may have failed to be written.)
        Some(store) if p.swapped && store.is_complete(p.checkpoint) => {
            for id in store.ids()?.into_iter().filter(|&id| id > p.checkpoint) {
                store.discard(id);
            }
            let dir = store.dir_of(p.checkpoint);
            Some(Arc::new(Restored::load(
                &dir,
                &parts.spec,
                parts.allow_non_restored,
            )?))
        }
        Some(store) => {
            store.discard(p.checkpoint);
            Restored::latest(store, &parts.spec, first_id, parts.allow_non_restored)?
                .map(Arc::new)
                .or_else(|| initial.clone())
        }
        None => initial.clone(),
    };
    p.request.answer(UpgradeOutcome::RolledBack {
        cause: error.to_string(),
    });
    Ok(restore)
}

/// A stop that could not take a checkpoint of its own, because the job failed (with `problem`)
/// or was waiting to restart: the job stops at its newest complete checkpoint of this run
/// (from `since` on), or else at the one it started from (`started_from`), where the next
/// start resumes. Sinks committed everything up to it; what came after is not committed.
fn stopped_at_newest(
    spec: &JobSpec,
    store: Option<&CheckpointStore>,
    since: u64,
    started_from: Option<u64>,
    problem: String,
) -> Result<JobEnd, JobError> {
    let checkpoint = match store {
        // The checkpoints of this run are of its spec: they fit it whole.
        Some(store) => Restored::latest(store, spec, since, false)?.map(|r| r.id()),
        None => None,
    };
    let checkpoint = checkpoint.or(started_from);
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
    flags: &Shared,
    metrics: &Metrics,
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
    let (meta, entry) = summarize(parts, parts, &done, unix_ms(), finals);
    store.write_metadata(&meta)?;
    record(store, spec, metrics, entry);
    failpoint::hit("finish.after-final-checkpoint");
    commit_recorded(spec, &meta)?;
    failpoint::hit("finish.after-commit");
    // A stop with drain: the savepoint is of the job's end.
    if let Some(request) = flags.savepoints.take_stop() {
        export(store, done.id, request);
    }
    store.write_completion(&Completion {
        job: spec.name.clone(),
        finished_ms: unix_ms(),
        checkpoint: done.id,
    })?;
    failpoint::hit("finish.after-completion-record");
    store.discard_all()?;
    Ok(())
}
