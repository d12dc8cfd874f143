//! The checkpoint coordinator's decisions, as pure logic: when to trigger checkpoint `n`,
//! when it is complete, when it is aborted (expired, declined, subsumed), and when too many
//! failures in a row fail the job.
//!
//! Time is passed in as the duration since the job attempt started, so every decision can
//! be tested without threads or clocks. The caller does the I/O: it sends triggers to the
//! sources, feeds acknowledgements in, writes the metadata of a completed checkpoint and
//! deletes the files of an aborted one.
//!
//! A stop (Flink's stop-with-savepoint) is one more checkpoint, triggered at once, after which
//! nothing else is triggered: tasks stop at its barrier and end when it completes.
//!
//! Tasks that finish (their input ended) take no more snapshots; a checkpoint triggered after
//! a task finished records it as finished. Every record such a task emitted precedes its end
//! marker, and downstream tasks treat an ended input as aligned, so their snapshots hold it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::CheckpointConfig;

/// A task: one subtask of one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TaskId {
    pub chain: usize,
    pub subtask: u32,
}

/// What a task contributed to a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TaskState<S> {
    /// The task snapshotted its state at the barrier.
    Snapshot(S),
    /// The task had finished before the barrier reached it: nothing to restore, nothing to
    /// run again.
    Finished,
}

/// A checkpoint every task has acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Completed<S> {
    pub id: u64,
    pub triggered: Duration,
    pub completed: Duration,
    pub tasks: BTreeMap<TaskId, TaskState<S>>,
}

/// Why a checkpoint was given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AbortReason {
    /// Not complete within the timeout.
    Expired,
    /// A task could not snapshot (for example the disk is full).
    Declined(String),
    /// A newer checkpoint completed first.
    Subsumed,
}

impl std::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AbortReason::Expired => f.write_str("it did not complete within the timeout"),
            AbortReason::Declined(why) => write!(f, "a task could not snapshot: {why}"),
            AbortReason::Subsumed => f.write_str("a newer checkpoint completed first"),
        }
    }
}

/// What the caller must do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision<S> {
    /// Send barrier `n` into the job through every running source.
    Trigger(u64),
    /// Write the checkpoint's metadata; it is the newest restore point.
    Complete(Completed<S>),
    /// Delete what was written for the checkpoint.
    Abort { id: u64, reason: AbortReason },
    /// Too many checkpoints failed in a row: fail the job with this message.
    Fail(String),
}

#[derive(Debug)]
struct Pending<S> {
    triggered: Duration,
    acks: BTreeMap<TaskId, TaskState<S>>,
}

/// Decides the checkpoints of one attempt of a job.
#[derive(Debug)]
pub(crate) struct Coordinator<S> {
    interval: Duration,
    timeout: Duration,
    min_pause: Duration,
    max_concurrent: usize,
    tolerable_failures: u32,
    tasks: BTreeSet<TaskId>,
    sources: BTreeSet<TaskId>,
    /// Finished tasks, with the last checkpoint each snapshotted before finishing.
    finished: BTreeMap<TaskId, Option<u64>>,
    next_id: u64,
    pending: BTreeMap<u64, Pending<S>>,
    last_trigger: Option<Duration>,
    last_completion: Option<Duration>,
    failures_in_row: u32,
    /// The checkpoint the job stops at, once a stop was asked for.
    stop: Option<u64>,
    /// Savepoints triggered (their ids), pending or done.
    savepoints: BTreeSet<u64>,
    /// No checkpoint is triggered on the interval while held (an upgrade's probation).
    held: bool,
    /// Why no failed checkpoint or savepoint can be tolerated, if none can.
    untolerable: Option<String>,
}

impl<S> Coordinator<S> {
    /// A coordinator for `tasks`, of which `sources` receive the triggers; the first
    /// checkpoint gets id `first_id`.
    pub(crate) fn new(
        config: &CheckpointConfig,
        tasks: impl IntoIterator<Item = TaskId>,
        sources: impl IntoIterator<Item = TaskId>,
        first_id: u64,
    ) -> Self {
        Coordinator {
            interval: config.interval,
            timeout: config.timeout,
            min_pause: config.min_pause,
            max_concurrent: config.max_concurrent.max(1) as usize,
            tolerable_failures: config.tolerable_failures,
            tasks: tasks.into_iter().collect(),
            sources: sources.into_iter().collect(),
            finished: BTreeMap::new(),
            next_id: first_id,
            pending: BTreeMap::new(),
            last_trigger: None,
            last_completion: None,
            failures_in_row: 0,
            stop: None,
            savepoints: BTreeSet::new(),
            held: false,
            untolerable: None,
        }
    }

    /// Holds back (or lets go) the checkpoints due on the interval.
    pub(crate) fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// Triggers a savepoint now, whatever is in progress (no checkpoint is triggered until it
    /// has completed, so none can subsume it); `None` when no source runs to inject its
    /// barrier or the job is stopping.
    pub(crate) fn savepoint(&mut self, now: Duration) -> Option<u64> {
        if self.stop.is_some() || self.sources.iter().all(|s| self.finished.contains_key(s)) {
            return None;
        }
        let id = self.trigger(now);
        self.savepoints.insert(id);
        Some(id)
    }

    /// The checkpoint the job stops at, if a stop was triggered.
    pub(crate) fn stop_id(&self) -> Option<u64> {
        self.stop
    }

    /// Triggers the checkpoint the job stops at, now, whatever is in progress; nothing is
    /// triggered after it. Nothing happens when no source runs any more (the job is finishing
    /// by itself) or a stop was triggered already.
    /// With `savepoint`, the stop checkpoint is a savepoint.
    pub(crate) fn stop(&mut self, now: Duration, savepoint: bool) -> Vec<Decision<S>> {
        if self.stop.is_some() || self.sources.iter().all(|s| self.finished.contains_key(s)) {
            return Vec::new();
        }
        let id = self.trigger(now);
        self.stop = Some(id);
        if savepoint {
            self.savepoints.insert(id);
        }
        vec![Decision::Trigger(id)]
    }

    fn trigger(&mut self, now: Duration) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.last_trigger = Some(now);
        self.pending.insert(
            id,
            Pending {
                triggered: now,
                acks: BTreeMap::new(),
            },
        );
        id
    }

    /// When the next trigger is due, if one can be triggered at all: fewer than
    /// `max_concurrent` in progress and a source still running to inject the barrier.
    pub(crate) fn next_trigger_at(&self) -> Option<Duration> {
        if self.pending.len() >= self.max_concurrent
            || self.held
            || self.stop.is_some()
            || self.pending.keys().any(|id| self.savepoints.contains(id))
            || self.sources.iter().all(|s| self.finished.contains_key(s))
        {
            return None;
        }
        let by_interval = self.last_trigger.unwrap_or(Duration::ZERO) + self.interval;
        let by_pause = self
            .last_completion
            .map_or(Duration::ZERO, |c| c + self.min_pause);
        Some(by_interval.max(by_pause))
    }

    /// When the oldest checkpoint in progress expires.
    pub(crate) fn next_expiry_at(&self) -> Option<Duration> {
        self.pending
            .values()
            .map(|p| p.triggered + self.timeout)
            .min()
    }

    /// Expires overdue checkpoints and triggers the next one when it is due.
    pub(crate) fn poll(&mut self, now: Duration) -> Vec<Decision<S>> {
        let mut out = Vec::new();
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now >= p.triggered + self.timeout)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            self.pending.remove(&id);
            self.failed(id, AbortReason::Expired, &mut out);
        }
        if self.next_trigger_at().is_some_and(|at| now >= at) {
            let id = self.trigger(now);
            out.push(Decision::Trigger(id));
        }
        out
    }

    /// Task `task` snapshotted checkpoint `id`.
    pub(crate) fn ack(
        &mut self,
        id: u64,
        task: TaskId,
        state: S,
        now: Duration,
    ) -> Vec<Decision<S>> {
        let mut out = Vec::new();
        if let Some(p) = self.pending.get_mut(&id)
            && self.tasks.contains(&task)
        {
            p.acks.insert(task, TaskState::Snapshot(state));
            self.complete_ready(now, &mut out);
        }
        out
    }

    /// Task `task` could not snapshot checkpoint `id`.
    pub(crate) fn decline(&mut self, id: u64, why: String) -> Vec<Decision<S>> {
        let mut out = Vec::new();
        if self.pending.remove(&id).is_some() {
            self.failed(id, AbortReason::Declined(why), &mut out);
        }
        out
    }

    /// Task `task` finished; `last_snapshot` is the newest checkpoint it snapshotted.
    pub(crate) fn finished(
        &mut self,
        task: TaskId,
        last_snapshot: Option<u64>,
        now: Duration,
    ) -> Vec<Decision<S>> {
        self.finished.insert(task, last_snapshot);
        let mut out = Vec::new();
        self.complete_ready(now, &mut out);
        out
    }

    /// Completes the newest checkpoint every task has answered, subsuming older ones.
    fn complete_ready(&mut self, now: Duration, out: &mut Vec<Decision<S>>) {
        let ready = self.pending.iter().rev().find_map(|(&id, p)| {
            let answered = self.tasks.iter().all(|t| {
                p.acks.contains_key(t)
                    || self
                        .finished
                        .get(t)
                        .is_some_and(|last| last.is_none_or(|l| l < id))
            });
            answered.then_some(id)
        });
        let Some(id) = ready else { return };
        let older: Vec<u64> = self.pending.range(..id).map(|(&i, _)| i).collect();
        for old in older {
            self.pending.remove(&old);
            out.push(Decision::Abort {
                id: old,
                reason: AbortReason::Subsumed,
            });
        }
        let p = self.pending.remove(&id).expect("found above");
        let mut tasks = p.acks;
        for t in &self.tasks {
            tasks.entry(*t).or_insert(TaskState::Finished);
        }
        self.last_completion = Some(now);
        self.failures_in_row = 0;
        out.push(Decision::Complete(Completed {
            id,
            triggered: p.triggered,
            completed: now,
            tasks,
        }));
    }

    /// No failed checkpoint or savepoint is tolerated, for reason `why`: the job fails.
    pub(crate) fn tolerate_no_failure(&mut self, why: String) {
        self.untolerable = Some(why);
    }

    fn failed(&mut self, id: u64, reason: AbortReason, out: &mut Vec<Decision<S>>) {
        if let Some(why) = &self.untolerable {
            let message = format!("checkpoint {id} failed: {reason}; {why}");
            out.push(Decision::Abort { id, reason });
            out.push(Decision::Fail(message));
            return;
        }
        if self.savepoints.contains(&id) && self.stop != Some(id) {
            // A failed savepoint fails its request, not the job (as in Flink).
            out.push(Decision::Abort { id, reason });
            return;
        }
        self.failures_in_row += 1;
        let message = format!("checkpoint {id} failed: {reason}");
        out.push(Decision::Abort { id, reason });
        if self.failures_in_row > self.tolerable_failures {
            out.push(Decision::Fail(format!(
                "{message}; {} checkpoint(s) failed in a row and tolerable_failures is {} \
                 (raise [checkpoint] tolerable_failures to keep the job running through failed checkpoints)",
                self.failures_in_row, self.tolerable_failures
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn config(interval: u64) -> CheckpointConfig {
        toml::from_str(&format!("interval = \"{interval}ms\"")).unwrap()
    }

    fn task(chain: usize, subtask: u32) -> TaskId {
        TaskId { chain, subtask }
    }

    /// Two source tasks (chain 0) and one downstream task (chain 1).
    fn coordinator(config: &CheckpointConfig) -> Coordinator<&'static str> {
        Coordinator::new(
            config,
            [task(0, 0), task(0, 1), task(1, 0)],
            [task(0, 0), task(0, 1)],
            1,
        )
    }

    fn ack_all(
        c: &mut Coordinator<&'static str>,
        id: u64,
        now: Duration,
    ) -> Vec<Decision<&'static str>> {
        let mut out = c.ack(id, task(0, 0), "a", now);
        out.extend(c.ack(id, task(0, 1), "b", now));
        out.extend(c.ack(id, task(1, 0), "c", now));
        out
    }

    #[test]
    fn triggers_on_the_interval_and_completes_when_every_task_acked() {
        let mut c = coordinator(&config(100));
        assert_eq!(c.poll(ms(99)), vec![]);
        assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
        assert_eq!(
            c.poll(ms(250)),
            vec![],
            "max_concurrent 1: no second trigger"
        );
        assert_eq!(c.ack(1, task(0, 0), "a", ms(260)), vec![]);
        assert_eq!(c.ack(1, task(0, 1), "b", ms(270)), vec![]);
        let done = c.ack(1, task(1, 0), "c", ms(280));
        let [Decision::Complete(done)] = &done[..] else {
            panic!("{done:?}")
        };
        assert_eq!(
            (done.id, done.triggered, done.completed),
            (1, ms(100), ms(280))
        );
        assert_eq!(done.tasks[&task(1, 0)], TaskState::Snapshot("c"));
        assert_eq!(
            c.poll(ms(280)),
            vec![Decision::Trigger(2)],
            "the interval counts from the last trigger, which is long past"
        );
    }

    #[test]
    fn a_savepoint_triggers_at_once_holds_back_checkpoints_and_fails_alone() {
        let mut c = coordinator(&config(100));
        assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
        assert_eq!(
            c.savepoint(ms(110)),
            Some(2),
            "beside a checkpoint in progress"
        );
        assert!(matches!(
            ack_all(&mut c, 2, ms(120))[..],
            [
                Decision::Abort { id: 1, .. },
                Decision::Complete(Completed { id: 2, .. })
            ]
        ));
        assert_eq!(c.poll(ms(220)), vec![Decision::Trigger(3)]);
        ack_all(&mut c, 3, ms(230));
        assert_eq!(c.savepoint(ms(240)), Some(4));
        assert_eq!(
            c.poll(ms(400)),
            vec![],
            "no checkpoint while a savepoint is pending"
        );
        let out = c.decline(4, "disk full".into());
        assert!(
            matches!(out[..], [Decision::Abort { id: 4, .. }]),
            "a failed savepoint does not fail the job: {out:?}"
        );
        assert_eq!(c.poll(ms(400)), vec![Decision::Trigger(5)]);
    }

    #[test]
    fn held_checkpoints_wait_until_let_go() {
        let mut c = coordinator(&config(100));
        c.hold(true);
        assert_eq!(c.poll(ms(500)), vec![], "held");
        assert_eq!(
            c.savepoint(ms(500)),
            Some(1),
            "what is asked for at once still runs"
        );
        ack_all(&mut c, 1, ms(510));
        c.hold(false);
        assert_eq!(c.poll(ms(610)), vec![Decision::Trigger(2)]);
    }

    #[test]
    fn min_pause_counts_from_the_last_completion() {
        let mut cfg = config(100);
        cfg.min_pause = ms(500);
        let mut c = coordinator(&cfg);
        assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
        assert!(matches!(
            ack_all(&mut c, 1, ms(150))[..],
            [Decision::Complete(_)]
        ));
        assert_eq!(c.next_trigger_at(), Some(ms(650)));
        assert_eq!(c.poll(ms(649)), vec![]);
        assert_eq!(c.poll(ms(650)), vec![Decision::Trigger(2)]);
    }

    #[test]
    fn concurrent_checkpoints_and_subsumption() {
        let mut cfg = config(100);
        cfg.max_concurrent = 2;
        let mut c = coordinator(&cfg);
        assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
        assert_eq!(c.poll(ms(200)), vec![Decision::Trigger(2)]);
        assert_eq!(c.poll(ms(300)), vec![], "two in progress");
        c.ack(1, task(0, 0), "a", ms(310));
        let out = ack_all(&mut c, 2, ms(320));
        assert_eq!(
            out[0],
            Decision::Abort {
                id: 1,
                reason: AbortReason::Subsumed
            }
        );
        assert!(matches!(&out[1], Decision::Complete(d) if d.id == 2));
        assert_eq!(
            c.ack(1, task(1, 0), "late", ms(330)),
            vec![],
            "late ack ignored"
        );
    }

    #[test]
    fn a_checkpoint_that_times_out_is_aborted_and_fails_the_job_beyond_tolerance() {
        let mut cfg = config(100);
        cfg.timeout = ms(1000);
        cfg.tolerable_failures = 1;
        let mut c = coordinator(&cfg);
        assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
        assert_eq!(c.next_expiry_at(), Some(ms(1100)));
        assert_eq!(c.poll(ms(1099)), vec![]);
        assert_eq!(
            c.poll(ms(1100)),
            vec![
                Decision::Abort {
                    id: 1,
                    reason: AbortReason::Expired
                },
                Decision::Trigger(2)
            ],
            "one failure is tolerated"
        );
        let out = c.poll(ms(2100));
        assert_eq!(
            out[0],
            Decision::Abort {
                id: 2,
                reason: AbortReason::Expired
            }
        );
        let Decision::Fail(message) = &out[1] else {
            panic!("{out:?}")
        };
        assert!(message.contains("tolerable_failures is 1"), "{message}");
    }

    #[test]
    fn a_job_that_tolerates_no_failure_fails_at_the_first_of_a_checkpoint_or_savepoint() {
        let mut cfg = config(100);
        cfg.tolerable_failures = 5;
        for savepoint in [false, true] {
            let mut c = coordinator(&cfg);
            c.tolerate_no_failure("its sink waits".into());
            let id = if savepoint {
                c.savepoint(ms(10)).unwrap()
            } else {
                assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
                1
            };
            let out = c.decline(id, "disk full".into());
            assert!(matches!(&out[0], Decision::Abort { id: 1, .. }), "{out:?}");
            let Some(Decision::Fail(message)) = out.get(1) else {
                panic!("{out:?}")
            };
            assert!(
                message.contains("disk full") && message.contains("its sink waits"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_completed_checkpoint_resets_the_failure_count() {
        let mut c = coordinator(&config(100));
        c.poll(ms(100));
        assert!(matches!(
            ack_all(&mut c, 1, ms(110))[..],
            [Decision::Complete(_)]
        ));
        c.poll(ms(200));
        let out = c.decline(2, "disk full".into());
        assert!(
            matches!(&out[0], Decision::Abort { id: 2, reason: AbortReason::Declined(w) } if w == "disk full")
        );
        assert!(matches!(&out[1], Decision::Fail(m) if m.contains("disk full")));
    }

    #[test]
    fn finished_tasks_count_as_answered_unless_they_owe_a_snapshot() {
        let mut c = coordinator(&config(100));
        c.poll(ms(100));
        // Source 0 finished before barrier 1 reached it.
        assert_eq!(c.finished(task(0, 0), None, ms(110)), vec![]);
        c.ack(1, task(0, 1), "b", ms(120));
        // The downstream task snapshotted 1, then finished before its ack arrived: wait for it.
        assert_eq!(c.finished(task(1, 0), Some(1), ms(130)), vec![]);
        let out = c.ack(1, task(1, 0), "c", ms(140));
        let [Decision::Complete(done)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(done.tasks[&task(0, 0)], TaskState::Finished);
        assert_eq!(done.tasks[&task(1, 0)], TaskState::Snapshot("c"));
    }

    #[test]
    fn no_trigger_without_a_running_source() {
        let mut c = coordinator(&config(100));
        c.finished(task(0, 0), None, ms(10));
        assert_eq!(c.next_trigger_at(), Some(ms(100)));
        c.finished(task(0, 1), None, ms(20));
        assert_eq!(c.next_trigger_at(), None);
        assert_eq!(c.poll(ms(500)), vec![]);
    }

    #[test]
    fn a_pending_checkpoint_completes_when_the_last_task_finishes() {
        let mut c = coordinator(&config(100));
        c.poll(ms(100));
        c.ack(1, task(0, 0), "a", ms(110));
        c.ack(1, task(0, 1), "b", ms(110));
        let out = c.finished(task(1, 0), None, ms(120));
        assert!(
            matches!(&out[..], [Decision::Complete(d)] if d.tasks[&task(1, 0)] == TaskState::Finished)
        );
    }

    #[test]
    fn a_stop_triggers_at_once_and_then_nothing_more() {
        let mut cfg = config(100);
        cfg.max_concurrent = 2;
        let mut c = coordinator(&cfg);
        assert_eq!(c.poll(ms(100)), vec![Decision::Trigger(1)]);
        assert_eq!(
            c.stop(ms(120), false),
            vec![Decision::Trigger(2)],
            "not on the interval"
        );
        assert_eq!(c.stop_id(), Some(2));
        assert_eq!(c.stop(ms(130), false), vec![], "one stop");
        assert_eq!(c.next_trigger_at(), None);
        assert_eq!(c.poll(ms(1000)), vec![]);
        let out = ack_all(&mut c, 2, ms(140));
        assert!(
            matches!(&out[..], [Decision::Abort { id: 1, .. }, Decision::Complete(d)] if d.id == 2)
        );
        assert_eq!(c.poll(ms(2000)), vec![], "stopped");
    }

    #[test]
    fn no_stop_checkpoint_when_every_source_finished() {
        let mut c = coordinator(&config(100));
        c.finished(task(0, 0), None, ms(10));
        c.finished(task(0, 1), None, ms(20));
        assert_eq!(c.stop(ms(30), false), vec![]);
        assert_eq!(c.stop_id(), None);
    }

    #[test]
    fn ids_continue_from_the_first_id() {
        let mut c: Coordinator<()> = Coordinator::new(&config(10), [task(0, 0)], [task(0, 0)], 42);
        assert_eq!(c.poll(ms(10)), vec![Decision::Trigger(42)]);
    }
}
