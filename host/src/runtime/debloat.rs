//! Buffer debloating (Flink's `buffer-debloat`): the records queued in a channel are bounded
//! by time, not only by count.
//!
//! A channel holds [`CHANNEL_CAPACITY`] batches. With full batches of 4,096 records, a slow
//! receiver (a keyed operator doing real work, an upsert sink) has seconds of records queued
//! in front of it, which an aligned checkpoint barrier waits behind and every record's latency
//! includes. So each receiving task measures, per input, how many records it takes from that
//! channel per second, and sets the largest batch its sender may send on it to what fills the
//! channel with about `target` of that work ([`budget`]). A fast receiver keeps full batches;
//! a slow one gets smaller batches, so fewer records wait, and a barrier behind them waits
//! about `target`. The sender reads the budget once per batch it partitions (an atomic load),
//! the receiver updates it every [`PERIOD`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::batch::BATCH_RECORDS;

/// Batches a channel holds before its sender blocks.
pub(crate) const CHANNEL_CAPACITY: usize = 8;
/// The smallest batch debloating asks for: below that, per-batch costs (a call into a guest,
/// a channel handoff) outweigh the records' work.
pub(crate) const MIN_BATCH: usize = 64;
/// How often a receiver recomputes its inputs' budgets.
pub(crate) const PERIOD: Duration = Duration::from_millis(200);

/// The largest batch, in records, a sender may send on one channel; shared by the channel's
/// two ends.
pub(crate) type Budget = Arc<AtomicUsize>;

/// A new channel's budget: full batches without debloating; with it, [`START_BATCH`] until
/// its receiver has measured itself.
pub(crate) fn new_budget(debloating: bool) -> Budget {
    Arc::new(AtomicUsize::new(if debloating {
        START_BATCH
    } else {
        BATCH_RECORDS
    }))
}

/// What a debloated channel's batches hold before the first measurement. Starting with full
/// batches would queue 8 × 4,096 records in front of every receiver before it measured
/// anything: behind a slow guest (a JavaScript word count splits 32,768 lines into about
/// 200,000 words) the first checkpoint's barrier waited about 50 s. Fast receivers get full
/// batches at their first measurement ([`Debloater::took`] raises a budget at once).
pub(crate) const START_BATCH: usize = 256;

/// The batch size that queues about `target` of work in a channel whose receiver takes
/// `rate` records per second from it, within [`MIN_BATCH`, `BATCH_RECORDS`].
pub(crate) fn budget(rate: f64, target: Duration) -> usize {
    let records = rate * target.as_secs_f64() / CHANNEL_CAPACITY as f64;
    (records as usize).clamp(MIN_BATCH, BATCH_RECORDS)
}

/// The receiving side: counts what each input delivered and updates its budget.
pub(crate) struct Debloater {
    target: Duration,
    budgets: Vec<Budget>,
    taken: Vec<u64>,
    since: Instant,
}

impl Debloater {
    pub(crate) fn new(target: Duration, budgets: Vec<Budget>) -> Self {
        Debloater {
            target,
            taken: vec![0; budgets.len()],
            budgets,
            since: Instant::now(),
        }
    }

    /// The task took `records` records of input `input` off its channel.
    pub(crate) fn took(&mut self, input: usize, records: usize) {
        self.taken[input] += records as u64;
        let elapsed = self.since.elapsed();
        if elapsed < PERIOD {
            return;
        }
        for (budget, taken) in self.budgets.iter().zip(&mut self.taken) {
            let rate = *taken as f64 / elapsed.as_secs_f64();
            // Up at once (a small budget caps the rate it measures, so growing halfway per
            // period would take seconds to reach full batches), down halfway: one period of
            // bursty input does not shrink it.
            let now = budget.load(Ordering::Relaxed);
            let wanted = self::budget(rate, self.target);
            let next = if wanted > now {
                wanted
            } else {
                (now + wanted).div_ceil(2)
            };
            budget.store(next.clamp(MIN_BATCH, BATCH_RECORDS), Ordering::Relaxed);
            *taken = 0;
        }
        self.since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_receiver_keeps_full_batches_and_a_slow_one_gets_smaller_ones() {
        let second = Duration::from_secs(1);
        assert_eq!(budget(5_000_000.0, second), BATCH_RECORDS);
        // 20k records/s, 1 s over 8 batches: 2,500 records a batch.
        assert_eq!(budget(20_000.0, second), 2_500);
        assert_eq!(budget(20_000.0, Duration::from_millis(100)), 250);
        assert_eq!(budget(10.0, second), MIN_BATCH, "never below the floor");
        assert_eq!(budget(0.0, second), MIN_BATCH);
    }

    #[test]
    fn the_receiver_lowers_each_inputs_budget_halfway_and_raises_it_at_once() {
        let budgets = vec![new_budget(false), new_budget(true)];
        assert_eq!(budgets[1].load(Ordering::Relaxed), START_BATCH);
        let mut d = Debloater::new(Duration::from_secs(1), budgets.clone());
        d.since = Instant::now() - PERIOD * 5; // 1 s
        d.taken[0] = 2_000;
        d.took(1, 5_000_000);
        // Input 0: 2,000 records/s, 250 a batch; halfway from 4,096.
        assert_eq!(budgets[0].load(Ordering::Relaxed), 2_173);
        // Input 1: 5M records/s, full batches at once from the start's 256.
        assert_eq!(budgets[1].load(Ordering::Relaxed), BATCH_RECORDS);
        assert_eq!(d.taken, [0, 0], "counts start over");
    }
}
