//! Event time in the runtime: how watermarks are made and how a task combines its inputs'.
//!
//! A watermark `w` says "no record with a timestamp at or before `w` is to come": event-time
//! timers at or before it fire. It is made where records get their timestamps, at a source
//! or at the output of an operator that parses them out of its input (a [`Generator`] with
//! the vertex's `watermark` strategy), flows in band with the records like a checkpoint
//! barrier, and each task takes the minimum over its inputs ([`Valve`], Flink's
//! `StatusWatermarkValve`):
//!
//! - a task holds back until every active input has sent a first watermark;
//! - an input that said it is idle (its source saw no records for the strategy's
//!   `idleness`) does not hold the task back until it is active again; one that comes back
//!   below the task's watermark counts again once it caught up;
//! - an input that has ended is left out of the minimum, not counted as the end of time: the
//!   task's watermark goes to the end of time only when every input has ended (otherwise a
//!   finished input next to idle ones would make every later record late);
//! - when every input left is idle, the task says it is idle itself;
//! - a task's watermark never goes back.
//!
//! A checkpoint keeps each operator's watermark with its state (Flink does not): a restored
//! operator takes a record at or before it for late, as it did before the crash, rather
//! than opening (and firing again) a window that had fired. Its sources make watermarks
//! anew from the records they replay, and those up to the restored one do not reach it;
//! timers that had fired before the checkpoint are gone from its state, those that had not
//! fire as the watermark passes them. At another parallelism an operator restores its old
//! subtasks' watermark when they all had the same (else none, as before).

use serde::{Deserialize, Serialize};
use std::time::Duration;

use smallvec::SmallVec;

use crate::batch::Batch;
use crate::connectors::SplitTime;

/// What a vertex's output says about event time, in band with its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watermark {
    /// No record at or before this timestamp (milliseconds) is to come.
    At(i64),
    /// The sender emits no records for now and must not hold its receivers back.
    Idle,
    /// The sender emits records again (its watermarks follow).
    Active,
}

/// `watermark = { ... }` of a source or operator: how its output's watermarks are made from
/// the timestamps of the records it emits.
///
/// ```toml
/// watermark = { max_out_of_orderness = "5s", idleness = "1m" }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkStrategy {
    /// How late a record may come after a record with a later timestamp (bounded
    /// out-of-orderness; `"0s"`, the default, for timestamps that never go back). The
    /// watermark trails the largest timestamp seen by this much (and one millisecond).
    #[serde(default, with = "humantime_serde")]
    pub max_out_of_orderness: Duration,
    /// After this long without a record (processing time), the subtask says it is idle, so
    /// that it does not hold back the watermark of the tasks it feeds; absent: never.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub idleness: Option<Duration>,
}

/// What a task sends on after one input's watermark: at most `Active` and a watermark.
pub(crate) type Sent = SmallVec<[Watermark; 2]>;

/// Makes the watermarks of one subtask's output from the timestamps of its records.
#[derive(Debug)]
pub(crate) struct Generator {
    delay: i64,
    idleness: Option<i64>,
    /// The largest timestamp seen.
    max: Option<i64>,
    /// The last watermark emitted.
    emitted: Option<i64>,
    /// Processing time of the last record, or of the start.
    last_record: i64,
    idle: bool,
}

impl Generator {
    pub(crate) fn new(strategy: &WatermarkStrategy, now: i64) -> Self {
        Generator {
            delay: strategy.max_out_of_orderness.as_millis() as i64,
            idleness: strategy.idleness.map(|d| d.as_millis() as i64),
            max: None,
            emitted: None,
            last_record: now,
            idle: false,
        }
    }

    /// Takes note of the timestamps of `batch`, emitted at processing time `now`, and says
    /// what to send after it: `Active` if the subtask was idle, then its watermark if that
    /// advanced.
    pub(crate) fn on_batch(&mut self, batch: &Batch, now: i64, emit: impl FnMut(Watermark)) {
        if !batch.is_empty() {
            self.on_records(batch.timestamps().max(), now, emit);
        }
    }

    /// [`on_batch`](Self::on_batch) for a source that reads several splits at once: the
    /// watermark follows how far all of its splits have come (`time`), not the batch.
    pub(crate) fn on_split_batch(
        &mut self,
        batch: &Batch,
        time: SplitTime,
        now: i64,
        emit: impl FnMut(Watermark),
    ) {
        if !batch.is_empty() {
            let reached = match time {
                SplitTime::Waiting => None,
                SplitTime::Reached(t) => Some(t),
            };
            self.on_records(reached, now, emit);
        }
    }

    /// Records came at `now`, the latest stamped `max`.
    fn on_records(&mut self, max: Option<i64>, now: i64, mut emit: impl FnMut(Watermark)) {
        self.last_record = now;
        if self.idle {
            self.idle = false;
            emit(Watermark::Active);
        }
        if let Some(max) = max {
            self.max = Some(self.max.map_or(max, |m| m.max(max)));
        }
        if let Some(max) = self.max {
            let watermark = max.saturating_sub(self.delay).saturating_sub(1);
            if self.emitted.is_none_or(|e| watermark > e) {
                self.emitted = Some(watermark);
                emit(Watermark::At(watermark));
            }
        }
    }

    /// `Idle` once no record came for the strategy's idleness.
    pub(crate) fn on_time(&mut self, now: i64) -> Option<Watermark> {
        let idleness = self.idleness?;
        if self.idle || now - self.last_record < idleness {
            return None;
        }
        self.idle = true;
        Some(Watermark::Idle)
    }

    /// When [`Generator::on_time`] may next say something.
    pub(crate) fn next_check(&self) -> Option<i64> {
        let idleness = self.idleness?;
        (!self.idle).then_some(self.last_record + idleness)
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Channel {
    /// Its last watermark; `None` before the first.
    watermark: Option<i64>,
    idle: bool,
    ended: bool,
    /// Whether its watermark counts: false after it came back from idleness below the
    /// task's watermark, until it caught up.
    aligned: bool,
}

impl Channel {
    fn counts(&self) -> bool {
        !self.idle && !self.ended
    }
}

/// The watermark of a task with several input channels.
#[derive(Debug)]
pub(crate) struct Valve {
    channels: Vec<Channel>,
    /// The task's watermark, the last one emitted.
    emitted: Option<i64>,
    /// Whether the task said it is idle.
    idle: bool,
}

impl Valve {
    pub(crate) fn new(inputs: usize) -> Self {
        Valve {
            channels: vec![
                Channel {
                    aligned: true,
                    ..Channel::default()
                };
                inputs
            ],
            emitted: None,
            idle: false,
        }
    }

    /// Input `i` sent `w`; returns what the task sends on, in order.
    pub(crate) fn on_input(&mut self, i: usize, w: Watermark) -> Sent {
        let c = &mut self.channels[i];
        match w {
            Watermark::At(t) => {
                if c.watermark.is_none_or(|old| t > old) {
                    c.watermark = Some(t);
                }
                c.idle = false;
            }
            Watermark::Idle => c.idle = true,
            Watermark::Active => c.idle = false,
        }
        if !c.idle && !c.aligned {
            c.aligned = self
                .emitted
                .is_none_or(|e| c.watermark.is_some_and(|w| w >= e));
        }
        if c.idle {
            c.aligned = false;
        }
        self.update()
    }

    /// Input `i` ended.
    pub(crate) fn on_end(&mut self, i: usize) -> Sent {
        self.channels[i].ended = true;
        self.update()
    }

    fn update(&mut self) -> Sent {
        let mut out = Sent::new();
        if self.channels.iter().all(|c| c.ended) {
            // The end of input takes the watermark to the end of time: the operators' close.
            return out;
        }
        let mut active = self.channels.iter().filter(|c| c.counts()).peekable();
        if active.peek().is_none() {
            if !self.idle {
                self.idle = true;
                out.push(Watermark::Idle);
            }
            return out;
        }
        if self.idle {
            self.idle = false;
            out.push(Watermark::Active);
        }
        // The least watermark of the inputs that count, held back until each sent one.
        let (mut least, mut held) = (None, false);
        for c in active.filter(|c| c.aligned) {
            match c.watermark {
                Some(w) => least = Some(least.map_or(w, |m: i64| m.min(w))),
                None => held = true,
            }
        }
        if !held
            && let Some(min) = least
            && self.emitted.is_none_or(|e| min > e)
        {
            self.emitted = Some(min);
            out.push(Watermark::At(min));
            // Channels that were catching up may have reached it.
            for c in &mut self.channels {
                if c.counts() && c.watermark.is_some_and(|w| w >= min) {
                    c.aligned = true;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Watermark::{Active, At, Idle};
    use weir_wire::Kind;

    #[test]
    fn the_task_holds_back_until_every_input_sent_one_then_takes_the_minimum() {
        let mut v = Valve::new(2);
        assert_eq!(v.on_input(0, At(10))[..], []);
        assert_eq!(v.on_input(1, At(5))[..], [At(5)]);
        assert_eq!(v.on_input(1, At(20))[..], [At(10)]);
        assert_eq!(
            v.on_input(0, At(8))[..],
            [],
            "an input's watermark never goes back"
        );
        assert_eq!(v.on_input(0, At(15))[..], [At(15)]);
    }

    #[test]
    fn an_ended_input_is_left_out_not_taken_as_the_end_of_time() {
        let mut v = Valve::new(3);
        v.on_input(0, At(10));
        v.on_input(1, At(10));
        assert_eq!(v.on_input(2, Idle)[..], [At(10)]);
        // Input 0 ends; input 2 is idle: input 1 alone decides, nothing jumps to the end.
        assert_eq!(v.on_end(0)[..], []);
        assert_eq!(v.on_input(1, At(12))[..], [At(12)]);
        // Input 1 ends too: only idle inputs are left, so the task is idle.
        assert_eq!(v.on_end(1)[..], [Idle]);
        // The idle input comes back (at 11, below the task's 12: it counts once it caught up).
        assert_eq!(v.on_input(2, At(11))[..], [Active]);
        assert_eq!(v.on_input(2, At(30))[..], [At(30)]);
        assert_eq!(v.on_end(2)[..], []);
    }

    #[test]
    fn idle_inputs_do_not_hold_back_and_count_again_once_caught_up() {
        let mut v = Valve::new(2);
        assert_eq!(v.on_input(1, Idle)[..], []);
        assert_eq!(v.on_input(0, At(100))[..], [At(100)]);
        assert_eq!(v.on_input(1, Active)[..], []);
        // Back below the task's watermark (without one at all here): not counted.
        assert_eq!(v.on_input(0, At(200))[..], [At(200)]);
        assert_eq!(v.on_input(1, At(50))[..], []);
        assert_eq!(v.on_input(0, At(300))[..], [At(300)]);
        assert_eq!(v.on_input(1, At(310))[..], []);
        assert_eq!(
            v.on_input(0, At(400))[..],
            [At(310)],
            "caught up: counted again"
        );
        assert_eq!(v.on_input(0, Idle)[..], []);
        assert_eq!(v.on_input(1, Idle)[..], [Idle]);
        assert_eq!(v.on_input(1, At(500))[..], [Active, At(500)]);
    }

    #[test]
    fn the_generator_trails_the_largest_timestamp_and_says_when_it_is_idle() {
        let strategy = WatermarkStrategy {
            max_out_of_orderness: Duration::from_millis(100),
            idleness: Some(Duration::from_secs(1)),
        };
        let mut g = Generator::new(&strategy, 0);
        let batch = |ts: &[i64]| {
            let mut b = Batch::default();
            for &t in ts {
                b.push_with(Kind::Insert, None, Some(t), |_| {});
            }
            b
        };
        let mut sent = Vec::new();
        g.on_batch(&batch(&[1_000, 1_500, 1_200]), 10, |w| sent.push(w));
        g.on_batch(&batch(&[1_400]), 20, |w| sent.push(w));
        assert_eq!(sent, [At(1_399)], "no watermark without progress");
        assert_eq!(g.next_check(), Some(1_020));
        assert_eq!(g.on_time(1_019), None);
        assert_eq!(g.on_time(1_020), Some(Idle));
        assert_eq!(g.on_time(5_000), None);
        g.on_batch(&batch(&[1_600]), 5_001, |w| sent.push(w));
        assert_eq!(sent, [At(1_399), Active, At(1_499)]);
    }
}
