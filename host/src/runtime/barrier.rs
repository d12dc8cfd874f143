//! Checkpoint barrier alignment for a task with several input channels.
//!
//! This module owns the decision of *when* a task snapshots for checkpoint `n` and which of
//! its inputs it may read meanwhile (Chandy-Lamport, as in Flink's asynchronous barrier
//! snapshotting). It is pure logic: the task's receive loop reports each barrier and each
//! input's end, does what the returned [`Progress`] says, and rebuilds its set of readable
//! inputs from [`Aligner::is_blocked`].
//!
//! - [`Alignment::Exactly`]: an input that delivered barrier `n` is blocked until every open
//!   input has delivered `n`, so the snapshot contains no record that came after `n` on any
//!   input. One checkpoint is aligned at a time; a newer barrier aborts the pending one.
//! - [`Alignment::AtLeast`] (Flink's `CheckpointBarrierTracker`): nothing is blocked; barriers
//!   are only counted, per checkpoint, and several checkpoints may be in progress at once.
//!
//! In both modes an input that has ended counts as having delivered every barrier.
//!
//! An **unaligned** checkpoint (exactly-once only) is Chandy-Lamport's snapshot as it is: the
//! task snapshots at once, on the checkpoint's trigger or its first barrier, whichever comes
//! first, blocks nothing, and records what each input delivers from then until that input's
//! barrier ([`Aligner::is_recording`]): records sent before the upstream snapshot and not in
//! this one, which the checkpoint stores and a restore replays. Its barriers then only end the
//! recording; the last one makes the checkpoint's in-flight records complete
//! ([`Progress::recorded`]). Since the task does not wait behind queued records, neither does
//! the checkpoint. A checkpoint is aligned or not as its barrier says.

use std::fmt;
use std::time::Duration;

/// Whether a task holds back inputs that delivered a barrier until all inputs did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alignment {
    Exactly,
    AtLeast,
}

/// A checkpoint whose barriers have arrived on every open input: snapshot it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Aligned {
    pub id: u64,
    /// Time from the checkpoint's first barrier to the event that completed it.
    pub alignment: Duration,
}

/// What the task must do after an event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Progress {
    /// The checkpoint to snapshot now, if this event completed an alignment (or started an
    /// unaligned checkpoint, with an alignment of zero).
    pub aligned: Option<Aligned>,
    /// The unaligned checkpoint whose records in flight are all recorded: its snapshot can
    /// be written.
    pub recorded: Option<u64>,
    /// Checkpoints abandoned by this event, oldest first (exactly-once: a newer barrier
    /// overtook it; at-least-once: a newer checkpoint completed first and subsumes it).
    pub aborted: Vec<u64>,
}

/// A barrier that breaks the protocol between a task and its upstream tasks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AlignError {
    pub input: usize,
    pub id: u64,
    pub violation: Violation,
}

/// How a barrier broke the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// The input already delivered this checkpoint's barrier.
    Duplicate,
    /// The input had already ended.
    AfterEnd,
    /// The task has no such input.
    UnknownInput,
}

impl fmt::Display for AlignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (input, id) = (self.input, self.id);
        match self.violation {
            Violation::Duplicate => write!(f, "input {input} delivered barrier {id} twice"),
            Violation::AfterEnd => {
                write!(f, "input {input} delivered barrier {id} after it ended")
            }
            Violation::UnknownInput => {
                write!(f, "barrier {id} on input {input}, which does not exist")
            }
        }
    }
}

impl std::error::Error for AlignError {}

/// A checkpoint some, but not all, open inputs have delivered the barrier of.
#[derive(Debug)]
struct Pending {
    id: u64,
    /// When its first barrier arrived.
    start: Duration,
    /// Per input: whether it delivered this barrier.
    arrived: Vec<bool>,
    /// Snapshotted when it started; the inputs are recorded, not blocked, until they deliver
    /// the barrier.
    unaligned: bool,
}

impl Pending {
    /// Complete when every input delivered the barrier or ended. Tracking arrivals per input
    /// (rather than counting them against the open inputs) keeps an input that delivered the
    /// barrier and then ended from being counted twice.
    fn is_complete(&self, ended: &[bool]) -> bool {
        self.arrived
            .iter()
            .zip(ended)
            .all(|(&arrived, &ended)| arrived || ended)
    }
}

/// Barrier alignment state of one task.
#[derive(Debug)]
pub(crate) struct Aligner {
    mode: Alignment,
    /// Per input: whether it has ended.
    ended: Vec<bool>,
    /// In progress, by ascending id. Exactly-once holds at most one.
    pending: Vec<Pending>,
    /// The newest checkpoint completed: barriers up to it are stale. (A checkpoint abandoned
    /// in exactly-once is older than the pending one, which makes its barriers stale too.)
    finished: Option<u64>,
}

impl Aligner {
    pub(crate) fn new(mode: Alignment, inputs: usize) -> Self {
        Self {
            mode,
            ended: vec![false; inputs],
            pending: Vec::new(),
            finished: None,
        }
    }

    /// Input `input` delivered the barrier of checkpoint `id`, unaligned or not, at `now`
    /// (time since an origin the caller keeps fixed).
    pub(crate) fn on_barrier(
        &mut self,
        input: usize,
        id: u64,
        unaligned: bool,
        now: Duration,
    ) -> Result<Progress, AlignError> {
        let error = |violation| AlignError {
            input,
            id,
            violation,
        };
        match self.ended.get(input) {
            None => return Err(error(Violation::UnknownInput)),
            Some(true) => return Err(error(Violation::AfterEnd)),
            Some(false) => {}
        }
        if self.is_stale(id) {
            return Ok(Progress::default());
        }
        let mut progress = Progress::default();
        let pos = match self.pending.binary_search_by_key(&id, |p| p.id) {
            Ok(pos) if self.pending[pos].arrived[input] => {
                return Err(error(Violation::Duplicate));
            }
            Ok(pos) => pos,
            Err(pos) => self.start(pos, id, unaligned, now, &mut progress),
        };
        self.pending[pos].arrived[input] = true;
        Ok(self.complete(now, progress))
    }

    /// The trigger of unaligned checkpoint `id` reached the task (before or after some of its
    /// barriers did): it snapshots now unless it did already.
    pub(crate) fn on_trigger(&mut self, id: u64, now: Duration) -> Progress {
        if self.mode != Alignment::Exactly || self.is_stale(id) {
            return Progress::default();
        }
        let mut progress = Progress::default();
        if let Err(pos) = self.pending.binary_search_by_key(&id, |p| p.id) {
            self.start(pos, id, true, now, &mut progress);
        }
        self.complete(now, progress)
    }

    /// Inserts checkpoint `id` at `pos` of the pending ones; returns where it is now.
    fn start(
        &mut self,
        pos: usize,
        id: u64,
        unaligned: bool,
        now: Duration,
        progress: &mut Progress,
    ) -> usize {
        let pos = if self.mode == Alignment::Exactly {
            // Older ids are stale, so this one is newer than the pending one: upstream
            // abandoned that checkpoint and its barrier will never come on every input.
            progress.aborted = self.pending.drain(..).map(|p| p.id).collect();
            0
        } else {
            pos
        };
        let unaligned = unaligned && self.mode == Alignment::Exactly;
        if unaligned {
            progress.aligned = Some(Aligned {
                id,
                alignment: Duration::ZERO,
            });
        }
        self.pending.insert(
            pos,
            Pending {
                id,
                start: now,
                arrived: vec![false; self.ended.len()],
                unaligned,
            },
        );
        pos
    }

    /// Adds what completed by now to `progress`.
    fn complete(&mut self, now: Duration, mut progress: Progress) -> Progress {
        let done = self.take_completed(now);
        progress.aligned = progress.aligned.or(done.aligned);
        progress.recorded = done.recorded;
        progress.aborted.extend(done.aborted);
        progress
    }

    /// Input `input` ended at `now`; it counts as having delivered every barrier from now on,
    /// which may complete a pending alignment. Ending an input twice, or one the task does not
    /// have, changes nothing.
    pub(crate) fn on_end(&mut self, input: usize, now: Duration) -> Progress {
        match self.ended.get_mut(input) {
            Some(ended) if !*ended => *ended = true,
            _ => return Progress::default(),
        }
        self.take_completed(now)
    }

    /// Whether the loop must not read input `input` now.
    pub(crate) fn is_blocked(&self, input: usize) -> bool {
        self.mode == Alignment::Exactly
            && self.ended.get(input) == Some(&false)
            && self
                .pending
                .first()
                .is_some_and(|p| !p.unaligned && p.arrived.get(input) == Some(&true))
    }

    /// Whether what input `input` delivers now belongs to the records in flight of the
    /// unaligned checkpoint in progress.
    pub(crate) fn is_recording(&self, input: usize) -> bool {
        self.ended.get(input) == Some(&false)
            && self
                .pending
                .first()
                .is_some_and(|p| p.unaligned && p.arrived.get(input) == Some(&false))
    }

    /// Number of inputs that have not ended.
    pub(crate) fn open_inputs(&self) -> usize {
        self.ended.iter().filter(|&&ended| !ended).count()
    }

    /// A barrier for a checkpoint already completed or abandoned here. In exactly-once, a
    /// barrier older than the pending checkpoint is stale too: the pending one overtook it.
    fn is_stale(&self, id: u64) -> bool {
        self.finished.is_some_and(|finished| id <= finished)
            || (self.mode == Alignment::Exactly && self.pending.first().is_some_and(|p| id < p.id))
    }

    /// Removes the newest complete checkpoint, to be snapshotted, and every older pending one,
    /// which it subsumes. An end can complete several checkpoints at once (at-least-once), but
    /// only the newest is worth a snapshot.
    fn take_completed(&mut self, now: Duration) -> Progress {
        let Some(pos) = self
            .pending
            .iter()
            .rposition(|p| p.is_complete(&self.ended))
        else {
            return Progress::default();
        };
        let done = self.pending.remove(pos);
        let aborted = self.pending.drain(..pos).map(|p| p.id).collect();
        self.finished = Some(done.id);
        if done.unaligned {
            return Progress {
                recorded: Some(done.id),
                aborted,
                ..Progress::default()
            };
        }
        Progress {
            aligned: Some(Aligned {
                id: done.id,
                // Saturating: a caller's clock going backwards must not panic the task.
                alignment: now.saturating_sub(done.start),
            }),
            aborted,
            recorded: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [Alignment; 2] = [Alignment::Exactly, Alignment::AtLeast];

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn blocked(aligner: &Aligner, inputs: usize) -> Vec<usize> {
        (0..inputs).filter(|&i| aligner.is_blocked(i)).collect()
    }

    fn aligned(id: u64, alignment: Duration) -> Progress {
        Progress {
            aligned: Some(Aligned { id, alignment }),
            ..Progress::default()
        }
    }

    /// Every ordering of `0..n`.
    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![Vec::new()];
        }
        let mut all = Vec::new();
        for shorter in permutations(n - 1) {
            for at in 0..=shorter.len() {
                let mut p = shorter.clone();
                p.insert(at, n - 1);
                all.push(p);
            }
        }
        all
    }

    /// Every merge of `a` and `b` that keeps each one's order.
    fn interleavings<T: Copy>(a: &[T], b: &[T]) -> Vec<Vec<T>> {
        match (a.split_first(), b.split_first()) {
            (None, _) => vec![b.to_vec()],
            (_, None) => vec![a.to_vec()],
            (Some((&x, a_rest)), Some((&y, b_rest))) => {
                let mut all = Vec::new();
                for mut rest in interleavings(a_rest, b) {
                    rest.insert(0, x);
                    all.push(rest);
                }
                for mut rest in interleavings(a, b_rest) {
                    rest.insert(0, y);
                    all.push(rest);
                }
                all
            }
        }
    }

    #[test]
    fn helpers_enumerate_every_order() {
        assert_eq!(permutations(3).len(), 6);
        let mut p = permutations(3);
        p.sort();
        p.dedup();
        assert_eq!(p.len(), 6);
        assert_eq!(interleavings(&[1, 2], &[3, 4]).len(), 6);
    }

    #[test]
    fn every_order_of_one_barrier_completes_once_at_the_last_delivery() {
        for inputs in [2, 3] {
            for mode in MODES {
                for order in permutations(inputs) {
                    let mut aligner = Aligner::new(mode, inputs);
                    for (step, &input) in order.iter().enumerate() {
                        let progress = aligner
                            .on_barrier(input, 1, false, ms(step as u64))
                            .unwrap();
                        let case =
                            format!("{mode:?} {inputs} inputs, order {order:?}, step {step}");
                        assert!(progress.aborted.is_empty(), "{case}");
                        if step + 1 < inputs {
                            assert_eq!(progress.aligned, None, "{case}");
                            let mut expected = match mode {
                                Alignment::Exactly => order[..=step].to_vec(),
                                Alignment::AtLeast => Vec::new(),
                            };
                            expected.sort();
                            assert_eq!(blocked(&aligner, inputs), expected, "{case}");
                        } else {
                            assert_eq!(progress, aligned(1, ms(step as u64)), "{case}");
                            assert_eq!(blocked(&aligner, inputs), Vec::<usize>::new(), "{case}");
                        }
                    }
                    assert!(aligner.pending.is_empty());
                }
            }
        }
    }

    #[test]
    fn at_least_once_interleaved_checkpoints_complete_in_order() {
        let a = [(0, 1), (0, 2)];
        let b = [(1, 1), (1, 2)];
        for events in interleavings(&a, &b) {
            let mut aligner = Aligner::new(Alignment::AtLeast, 2);
            let mut completed = Vec::new();
            for &(input, id) in &events {
                let progress = aligner.on_barrier(input, id, false, ms(0)).unwrap();
                assert!(progress.aborted.is_empty(), "{events:?}");
                completed.extend(progress.aligned.map(|a| a.id));
                assert_eq!(blocked(&aligner, 2), Vec::<usize>::new(), "{events:?}");
            }
            assert_eq!(completed, [1, 2], "{events:?}");
        }
    }

    #[test]
    fn single_input_completes_immediately() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 1);
            assert_eq!(
                aligner.on_barrier(0, 1, false, ms(5)),
                Ok(aligned(1, ms(0)))
            );
            assert!(!aligner.is_blocked(0));
        }
    }

    #[test]
    fn no_inputs_means_nothing_pending() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 0);
            assert_eq!(aligner.open_inputs(), 0);
            assert_eq!(aligner.on_end(0, ms(0)), Progress::default());
            assert!(aligner.pending.is_empty());
        }
    }

    #[test]
    fn input_ended_before_alignment_is_not_waited_for() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 3);
            assert_eq!(aligner.on_end(1, ms(0)), Progress::default());
            assert_eq!(aligner.open_inputs(), 2);
            assert_eq!(
                aligner.on_barrier(0, 1, false, ms(1)).unwrap(),
                Progress::default()
            );
            assert_eq!(
                aligner.on_barrier(2, 1, false, ms(4)),
                Ok(aligned(1, ms(3)))
            );
            assert_eq!(blocked(&aligner, 3), Vec::<usize>::new());
        }
    }

    #[test]
    fn ending_the_last_missing_input_completes_the_alignment() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 3);
            aligner.on_barrier(0, 1, false, ms(1)).unwrap();
            aligner.on_barrier(2, 1, false, ms(2)).unwrap();
            assert_eq!(aligner.on_end(1, ms(7)), aligned(1, ms(6)), "{mode:?}");
            assert_eq!(blocked(&aligner, 3), Vec::<usize>::new());
        }
    }

    #[test]
    fn input_that_delivered_then_ended_is_not_counted_twice() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 3);
            aligner.on_barrier(0, 1, false, ms(0)).unwrap();
            assert_eq!(aligner.on_end(0, ms(1)), Progress::default(), "{mode:?}");
            // Ended, so not read anyway; it must not look blocked either.
            assert_eq!(blocked(&aligner, 3), Vec::<usize>::new());
            assert_eq!(
                aligner.on_barrier(1, 1, false, ms(2)).unwrap(),
                Progress::default()
            );
            assert_eq!(
                aligner.on_barrier(2, 1, false, ms(3)),
                Ok(aligned(1, ms(3)))
            );
        }
    }

    #[test]
    fn input_ended_after_alignment_changes_nothing() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 2);
            aligner.on_barrier(0, 1, false, ms(0)).unwrap();
            aligner.on_barrier(1, 1, false, ms(1)).unwrap();
            assert_eq!(aligner.on_end(0, ms(2)), Progress::default());
            assert_eq!(aligner.on_end(0, ms(3)), Progress::default());
            assert_eq!(aligner.open_inputs(), 1);
            // The next checkpoint completes on the remaining input alone.
            assert_eq!(
                aligner.on_barrier(1, 2, false, ms(4)),
                Ok(aligned(2, ms(0)))
            );
        }
    }

    #[test]
    fn all_inputs_ended_leaves_nothing_pending() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 2);
            aligner.on_barrier(0, 1, false, ms(0)).unwrap();
            assert_eq!(aligner.on_end(0, ms(1)), Progress::default());
            assert_eq!(aligner.on_end(1, ms(2)), aligned(1, ms(2)));
            assert_eq!(aligner.open_inputs(), 0);
            assert!(aligner.pending.is_empty());
            assert_eq!(blocked(&aligner, 2), Vec::<usize>::new());
        }
    }

    #[test]
    fn end_completing_several_checkpoints_snapshots_only_the_newest() {
        let mut aligner = Aligner::new(Alignment::AtLeast, 2);
        aligner.on_barrier(0, 1, false, ms(0)).unwrap();
        aligner.on_barrier(0, 2, false, ms(1)).unwrap();
        let progress = aligner.on_end(1, ms(5));
        assert_eq!(
            progress,
            Progress {
                aligned: Some(Aligned {
                    id: 2,
                    alignment: ms(4)
                }),
                aborted: vec![1],
                recorded: None,
            }
        );
        assert!(aligner.pending.is_empty());
    }

    #[test]
    fn at_least_once_completion_subsumes_older_pending() {
        let mut aligner = Aligner::new(Alignment::AtLeast, 2);
        aligner.on_barrier(0, 1, false, ms(0)).unwrap();
        aligner.on_barrier(0, 2, false, ms(1)).unwrap();
        // Input 1 never delivers 1 (abandoned upstream), but delivers 2.
        let progress = aligner.on_barrier(1, 2, false, ms(3)).unwrap();
        assert_eq!(
            progress.aligned,
            Some(Aligned {
                id: 2,
                alignment: ms(2)
            })
        );
        assert_eq!(progress.aborted, [1]);
        // 1's barrier is now stale.
        assert_eq!(
            aligner.on_barrier(1, 1, false, ms(4)),
            Ok(Progress::default())
        );
        assert!(aligner.pending.is_empty());
    }

    #[test]
    fn at_least_once_tracks_checkpoints_started_out_of_order() {
        let mut aligner = Aligner::new(Alignment::AtLeast, 2);
        aligner.on_barrier(0, 2, false, ms(0)).unwrap();
        aligner.on_barrier(0, 3, false, ms(1)).unwrap();
        // Input 0 skipped 1, so its first barrier arrives after 2 and 3 started.
        assert_eq!(
            aligner.on_barrier(1, 1, false, ms(2)),
            Ok(Progress::default())
        );
        let progress = aligner.on_barrier(1, 2, false, ms(4)).unwrap();
        assert_eq!(
            progress.aligned,
            Some(Aligned {
                id: 2,
                alignment: ms(4)
            })
        );
        assert_eq!(progress.aborted, [1]);
        assert_eq!(
            aligner.on_barrier(1, 3, false, ms(6)),
            Ok(aligned(3, ms(5)))
        );
        assert!(aligner.pending.is_empty());
    }

    #[test]
    fn exactly_once_newer_barrier_aborts_pending_and_aligns_the_newer() {
        let mut aligner = Aligner::new(Alignment::Exactly, 3);
        aligner.on_barrier(0, 1, false, ms(0)).unwrap();
        assert_eq!(blocked(&aligner, 3), [0]);
        let progress = aligner.on_barrier(1, 2, false, ms(10)).unwrap();
        assert_eq!(
            progress,
            Progress {
                aborted: vec![1],
                ..Progress::default()
            }
        );
        assert_eq!(blocked(&aligner, 3), [1]);
        // A late barrier of the aborted checkpoint is stale: ignored and not blocking.
        assert_eq!(
            aligner.on_barrier(2, 1, false, ms(11)),
            Ok(Progress::default())
        );
        assert_eq!(blocked(&aligner, 3), [1]);
        aligner.on_barrier(0, 2, false, ms(12)).unwrap();
        assert_eq!(blocked(&aligner, 3), [0, 1]);
        // Alignment time counts from the newer checkpoint's first barrier.
        assert_eq!(
            aligner.on_barrier(2, 2, false, ms(15)),
            Ok(aligned(2, ms(5)))
        );
        assert_eq!(blocked(&aligner, 3), Vec::<usize>::new());
    }

    #[test]
    fn stale_barrier_is_ignored_and_not_blocked() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 2);
            aligner.on_barrier(0, 2, false, ms(0)).unwrap();
            aligner.on_barrier(1, 2, false, ms(1)).unwrap();
            for id in [1, 2] {
                assert_eq!(
                    aligner.on_barrier(0, id, false, ms(2)),
                    Ok(Progress::default())
                );
                assert!(!aligner.is_blocked(0), "{mode:?}");
            }
            assert!(aligner.pending.is_empty());
        }
    }

    #[test]
    fn exactly_once_barrier_older_than_pending_is_stale() {
        let mut aligner = Aligner::new(Alignment::Exactly, 2);
        // Checkpoint 1 was abandoned upstream of input 0 only; 2 overtook it.
        aligner.on_barrier(0, 2, false, ms(0)).unwrap();
        assert_eq!(
            aligner.on_barrier(1, 1, false, ms(1)),
            Ok(Progress::default())
        );
        assert_eq!(blocked(&aligner, 2), [0]);
        assert_eq!(
            aligner.on_barrier(1, 2, false, ms(3)),
            Ok(aligned(2, ms(3)))
        );
    }

    #[test]
    fn duplicate_barrier_is_an_error_naming_input_and_id() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 3);
            aligner.on_barrier(1, 7, false, ms(0)).unwrap();
            let error = aligner.on_barrier(1, 7, false, ms(1)).unwrap_err();
            assert_eq!(
                error,
                AlignError {
                    input: 1,
                    id: 7,
                    violation: Violation::Duplicate
                }
            );
            assert_eq!(error.to_string(), "input 1 delivered barrier 7 twice");
        }
    }

    #[test]
    fn barrier_on_ended_or_unknown_input_is_an_error() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 2);
            aligner.on_end(0, ms(0));
            let error = aligner.on_barrier(0, 3, false, ms(1)).unwrap_err();
            assert_eq!(error.violation, Violation::AfterEnd);
            assert_eq!(
                error.to_string(),
                "input 0 delivered barrier 3 after it ended"
            );
            let error = aligner.on_barrier(2, 3, false, ms(1)).unwrap_err();
            assert_eq!(error.violation, Violation::UnknownInput);
            assert_eq!(
                error.to_string(),
                "barrier 3 on input 2, which does not exist"
            );
            assert!(!aligner.is_blocked(2));
        }
    }

    #[test]
    fn alignment_time_is_last_barrier_minus_first() {
        for mode in MODES {
            let mut aligner = Aligner::new(mode, 3);
            aligner.on_barrier(2, 4, false, ms(100)).unwrap();
            aligner.on_barrier(0, 4, false, ms(130)).unwrap();
            let progress = aligner.on_barrier(1, 4, false, ms(175)).unwrap();
            assert_eq!(progress, aligned(4, ms(75)), "{mode:?}");
        }
    }

    fn recording(aligner: &Aligner, inputs: usize) -> Vec<usize> {
        (0..inputs).filter(|&i| aligner.is_recording(i)).collect()
    }

    fn started(id: u64) -> Progress {
        aligned(id, Duration::ZERO)
    }

    fn recorded(id: u64) -> Progress {
        Progress {
            recorded: Some(id),
            ..Progress::default()
        }
    }

    #[test]
    fn unaligned_snapshots_at_the_trigger_and_records_each_input_until_its_barrier() {
        for order in permutations(3) {
            let mut aligner = Aligner::new(Alignment::Exactly, 3);
            assert_eq!(aligner.on_trigger(4, ms(0)), started(4), "{order:?}");
            assert_eq!(recording(&aligner, 3), [0, 1, 2]);
            for (step, &input) in order.iter().enumerate() {
                let progress = aligner.on_barrier(input, 4, true, ms(1)).unwrap();
                assert_eq!(blocked(&aligner, 3), Vec::<usize>::new(), "never blocks");
                if step + 1 < order.len() {
                    assert_eq!(progress, Progress::default(), "{order:?}");
                    let mut expected: Vec<usize> =
                        (0..3).filter(|i| !order[..=step].contains(i)).collect();
                    expected.sort();
                    assert_eq!(recording(&aligner, 3), expected, "{order:?}");
                } else {
                    assert_eq!(progress, recorded(4), "{order:?}");
                }
            }
            assert_eq!(recording(&aligner, 3), Vec::<usize>::new());
            // A trigger that comes late, after the barriers, is stale.
            assert_eq!(aligner.on_trigger(4, ms(2)), Progress::default());
        }
    }

    #[test]
    fn unaligned_first_barrier_starts_it_before_the_trigger() {
        let mut aligner = Aligner::new(Alignment::Exactly, 2);
        assert_eq!(aligner.on_barrier(1, 3, true, ms(0)), Ok(started(3)));
        assert_eq!(recording(&aligner, 2), [0]);
        // The trigger comes after: the snapshot was taken already.
        assert_eq!(aligner.on_trigger(3, ms(1)), Progress::default());
        assert_eq!(aligner.on_barrier(0, 3, true, ms(2)), Ok(recorded(3)));
    }

    #[test]
    fn unaligned_on_one_input_starts_and_completes_at_its_barrier() {
        let mut aligner = Aligner::new(Alignment::Exactly, 1);
        let progress = aligner.on_barrier(0, 1, true, ms(0)).unwrap();
        assert_eq!(
            progress,
            Progress {
                aligned: Some(Aligned {
                    id: 1,
                    alignment: Duration::ZERO
                }),
                recorded: Some(1),
                aborted: Vec::new(),
            }
        );
        assert_eq!(recording(&aligner, 1), Vec::<usize>::new());
    }

    #[test]
    fn unaligned_ended_inputs_are_not_recorded_and_an_end_completes_the_recording() {
        let mut aligner = Aligner::new(Alignment::Exactly, 3);
        aligner.on_end(2, ms(0));
        assert_eq!(aligner.on_trigger(1, ms(1)), started(1));
        assert_eq!(recording(&aligner, 3), [0, 1]);
        assert_eq!(
            aligner.on_barrier(0, 1, true, ms(2)),
            Ok(Progress::default())
        );
        assert_eq!(aligner.on_end(1, ms(3)), recorded(1));
        // Every input ended: a trigger starts and completes at once.
        aligner.on_end(0, ms(4));
        let progress = aligner.on_trigger(2, ms(5));
        assert_eq!(progress.aligned.map(|a| a.id), Some(2));
        assert_eq!(progress.recorded, Some(2));
    }

    #[test]
    fn a_newer_checkpoint_abandons_the_recording_or_the_alignment_before_it() {
        let mut aligner = Aligner::new(Alignment::Exactly, 2);
        aligner.on_trigger(1, ms(0));
        aligner.on_barrier(0, 1, true, ms(1)).unwrap();
        // The coordinator gave up on 1 and triggered 2 (a stop: aligned).
        let progress = aligner.on_barrier(0, 2, false, ms(2)).unwrap();
        assert_eq!(progress.aborted, [1]);
        assert_eq!(progress.aligned, None);
        assert_eq!(recording(&aligner, 2), Vec::<usize>::new());
        assert_eq!(blocked(&aligner, 2), [0]);
        // 1's last barrier is stale now.
        assert_eq!(
            aligner.on_barrier(1, 1, true, ms(3)),
            Ok(Progress::default())
        );
        // An unaligned trigger overtakes the pending alignment and unblocks its input.
        let progress = aligner.on_trigger(3, ms(4));
        assert_eq!(progress.aborted, [2]);
        assert_eq!(progress.aligned.map(|a| a.id), Some(3));
        assert_eq!(blocked(&aligner, 2), Vec::<usize>::new());
        assert_eq!(recording(&aligner, 2), [0, 1]);
    }

    #[test]
    fn at_least_once_ignores_unaligned_triggers() {
        let mut aligner = Aligner::new(Alignment::AtLeast, 2);
        assert_eq!(aligner.on_trigger(1, ms(0)), Progress::default());
        assert_eq!(recording(&aligner, 2), Vec::<usize>::new());
    }
}
