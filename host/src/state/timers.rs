//! The timers of one operator subtask: event-time and processing-time timers, each a
//! `(timestamp, key)` pair registered at most once, fired in timestamp order.
//!
//! The service counts its timers and the bytes it holds for them, so that an operator's
//! limits can bound what a guest registers.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;

use weir_wire::TimeDomain;

/// What one timer costs besides its key: the timestamp, the boxed key's pointer and length,
/// and the tree's share per entry (measured: about 45 bytes on x86-64).
const TIMER_OVERHEAD: usize = 48;

/// Timers of one domain, in firing order.
type TimerSet = BTreeSet<Timer>;

/// A timer: `(timestamp, key)`, ordered by timestamp, then key.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer(i64, Box<[u8]>);

/// A timer as a set is searched by, without building one (no allocation to delete a timer).
trait TimerRef {
    fn parts(&self) -> (i64, &[u8]);
}

impl TimerRef for Timer {
    fn parts(&self) -> (i64, &[u8]) {
        (self.0, &self.1)
    }
}

impl TimerRef for (i64, &[u8]) {
    fn parts(&self) -> (i64, &[u8]) {
        *self
    }
}

impl<'a> Borrow<dyn TimerRef + 'a> for Timer {
    fn borrow(&self) -> &(dyn TimerRef + 'a) {
        self
    }
}

// The order of `Timer`'s derive: timestamp, then key bytes.
impl PartialEq for dyn TimerRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn TimerRef + '_ {}

impl PartialOrd for dyn TimerRef + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn TimerRef + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    event: TimerSet,
    processing: TimerSet,
    /// What the timers hold, keys and overhead.
    bytes: usize,
}

impl Timers {
    fn set(&mut self, domain: TimeDomain) -> &mut TimerSet {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer for `key` at `timestamp`; registering it again changes nothing.
    pub(crate) fn register(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        if self.set(domain).insert(Timer(timestamp, key.into())) {
            self.bytes += key.len() + TIMER_OVERHEAD;
        }
    }

    /// Deletes the timer of `key` at `timestamp`, if there is one.
    pub(crate) fn delete(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        if self.set(domain).remove(&(timestamp, key) as &dyn TimerRef) {
            self.bytes -= key.len() + TIMER_OVERHEAD;
        }
    }

    /// Removes and returns the earliest event-time timer.
    pub(crate) fn pop_event(&mut self) -> Option<(i64, Box<[u8]>)> {
        let Timer(timestamp, key) = self.event.pop_first()?;
        self.bytes -= key.len() + TIMER_OVERHEAD;
        Some((timestamp, key))
    }

    pub(crate) fn event_len(&self) -> usize {
        self.event.len()
    }

    /// Timers of both domains.
    pub(crate) fn len(&self) -> usize {
        self.event.len() + self.processing.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes held for the timers.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Every timer, event time first, each domain in firing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TimeDomain, i64, &[u8])> {
        let event = self
            .event
            .iter()
            .map(|Timer(ts, k)| (TimeDomain::EventTime, *ts, &k[..]));
        let processing = self
            .processing
            .iter()
            .map(|Timer(ts, k)| (TimeDomain::ProcessingTime, *ts, &k[..]));
        event.chain(processing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_are_sets_in_firing_order_and_count_their_bytes() {
        let mut t = Timers::default();
        t.register(TimeDomain::EventTime, 5, b"b");
        t.register(TimeDomain::EventTime, 3, b"a");
        t.register(TimeDomain::EventTime, 5, b"b");
        t.register(TimeDomain::ProcessingTime, 1, b"abc");
        assert_eq!((t.len(), t.event_len()), (3, 2));
        assert_eq!(t.bytes(), 1 + 1 + 3 + 3 * TIMER_OVERHEAD);
        t.delete(TimeDomain::ProcessingTime, 1, b"abc");
        t.delete(TimeDomain::ProcessingTime, 1, b"abc");
        assert_eq!(t.pop_event(), Some((3, Box::from(&b"a"[..]))));
        assert_eq!(t.pop_event(), Some((5, Box::from(&b"b"[..]))));
        assert_eq!(t.pop_event(), None);
        assert!(t.is_empty());
        assert_eq!(t.bytes(), 0);
    }
}
