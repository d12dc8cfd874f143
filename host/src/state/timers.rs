//! The timers of one operator subtask: event-time and processing-time timers, each a
//! `(timestamp, key)` pair registered at most once, fired in timestamp order (and, between
//! timers of one timestamp, in the order of their keys' bytes, so that a run and its restore
//! fire them alike).
//!
//! Registering, replacing and deleting a timer must cost about what a value-state write
//! costs, since operators register one per record ("delete my previous timer, register a new
//! one"). So, like Flink's `HeapPriorityQueueSet`, a timer lives in a hash set, which
//! deduplicates and deletes it, and in a binary heap, which orders it; keys are interned once
//! and the heap holds `(timestamp, key id)` pairs. A deleted timer stays in the heap until it
//! reaches the top (skipped there, since the set no longer has it) or until the heap holds
//! twice the pending timers (rebuilt from the set), so deleting never searches the heap.
//!
//! The service counts its timers and the bytes it holds for them, so that an operator's
//! limits can bound what a guest registers.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use weir_wire::TimeDomain;

use super::Key;

type Set<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// What one timer costs besides its key: its set entry and its heap entry (16 bytes each,
/// with the tables' spare capacity).
const TIMER_OVERHEAD: usize = 48;

/// What an interned key costs besides its bytes beyond 24 (its entry and its index).
const KEY_OVERHEAD: usize = 48;

/// The keys that have timers, each stored once and named by an id.
#[derive(Debug, Default)]
struct Keys {
    /// Ids by key, hashed by the key's bytes.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// By id: the key and how many heap entries (of both domains, deleted timers included)
    /// name it. An id is reused only when no heap entry names it any more, so that the
    /// heaps' order of ties, which compares key bytes, never changes under them.
    entries: Vec<(Key, u32)>,
    /// Ids of entries no heap entry names, to reuse.
    free: Vec<u32>,
}

impl Keys {
    fn find(&self, key: &[u8]) -> Option<u32> {
        let entries = &self.entries;
        self.index
            .find(self.hasher.hash_one(key), |&id| {
                entries[id as usize].0[..] == *key
            })
            .copied()
    }

    /// The id of `key`, interning it if new; the bytes newly held.
    fn intern(&mut self, key: &[u8]) -> (u32, usize) {
        let hash = self.hasher.hash_one(key);
        let entries = &self.entries;
        if let Some(&id) = self
            .index
            .find(hash, |&id| entries[id as usize].0[..] == *key)
        {
            return (id, 0);
        }
        let entry = (Key::from_slice(key), 0);
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index
            .insert_unique(hash, id, |&id| hasher.hash_one(&entries[id as usize].0[..]));
        (id, key.len() + KEY_OVERHEAD)
    }

    fn key(&self, id: u32) -> &[u8] {
        &self.entries[id as usize].0
    }

    fn retain(&mut self, id: u32) {
        self.entries[id as usize].1 += 1;
    }

    /// One heap entry of `id` is gone; forgets the key when it was its last. Returns the
    /// bytes freed.
    fn release(&mut self, id: u32) -> usize {
        let entry = &mut self.entries[id as usize];
        entry.1 -= 1;
        if entry.1 > 0 {
            return 0;
        }
        let key = std::mem::take(&mut entry.0);
        let hash = self.hasher.hash_one(&key[..]);
        if let Ok(found) = self.index.find_entry(hash, |&i| i == id) {
            found.remove();
        }
        self.free.push(id);
        key.len() + KEY_OVERHEAD
    }
}

/// The timers of one domain: the set of pending `(timestamp, key id)` pairs and a min-heap
/// over them (ties by key bytes) that may still hold deleted ones.
#[derive(Debug, Default)]
struct Queue {
    pending: Set<(i64, u32)>,
    heap: Vec<(i64, u32)>,
}

impl Queue {
    fn push(&mut self, timer: (i64, u32), keys: &mut Keys) -> bool {
        if !self.pending.insert(timer) {
            return false;
        }
        keys.retain(timer.1);
        self.heap.push(timer);
        let last = self.heap.len() - 1;
        sift_up(&mut self.heap, last, keys);
        true
    }

    /// Deletes a pending timer (its heap entry stays); returns the bytes freed.
    fn remove(&mut self, timer: (i64, u32), keys: &mut Keys) -> Option<usize> {
        if !self.pending.remove(&timer) {
            return None;
        }
        if self.heap.len() > 2 * self.pending.len() + 64 || self.pending.is_empty() {
            return Some(self.rebuild(keys));
        }
        Some(0)
    }

    /// Rebuilds the heap from the pending timers, dropping the deleted ones; returns the
    /// bytes freed.
    fn rebuild(&mut self, keys: &mut Keys) -> usize {
        let old = std::mem::take(&mut self.heap);
        self.heap.extend(self.pending.iter().copied());
        for &(_, id) in &self.heap {
            keys.retain(id);
        }
        for i in (0..self.heap.len().div_ceil(ARITY)).rev() {
            sift_down(&mut self.heap, i, keys);
        }
        let dropped = (old.len() - self.heap.len()) * TIMER_OVERHEAD;
        dropped
            + old
                .into_iter()
                .map(|(_, id)| keys.release(id))
                .sum::<usize>()
    }

    /// The earliest pending timer, dropping deleted ones from the top of the heap; also
    /// the bytes freed.
    fn peek(&mut self, keys: &mut Keys) -> (Option<(i64, u32)>, usize) {
        let mut freed = 0;
        while let Some(&top) = self.heap.first() {
            if self.pending.contains(&top) {
                return (Some(top), freed);
            }
            freed += self.pop_top(keys);
        }
        (None, freed)
    }

    /// Drops the top of the heap; returns the bytes freed.
    fn pop_top(&mut self, keys: &mut Keys) -> usize {
        let last = self.heap.len() - 1;
        self.heap.swap(0, last);
        let (_, id) = self.heap.pop().expect("the heap is not empty");
        sift_down(&mut self.heap, 0, keys);
        keys.release(id) + TIMER_OVERHEAD
    }
}

/// Whether timer `a` fires before `b`.
#[inline]
fn before(a: (i64, u32), b: (i64, u32), keys: &Keys) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 != b.1 && keys.key(a.1) < keys.key(b.1))
}

/// The heap is 4-ary: a node's children are one cache line, and it is half as deep as a
/// binary heap, which halves the cache misses of taking the top off a large heap.
const ARITY: usize = 4;

fn sift_up(heap: &mut [(i64, u32)], mut i: usize, keys: &Keys) {
    while i > 0 {
        let parent = (i - 1) / ARITY;
        if !before(heap[i], heap[parent], keys) {
            break;
        }
        heap.swap(i, parent);
        i = parent;
    }
}

fn sift_down(heap: &mut [(i64, u32)], mut i: usize, keys: &Keys) {
    loop {
        let first = ARITY * i + 1;
        if first >= heap.len() {
            break;
        }
        let last = (first + ARITY).min(heap.len());
        let mut child = first;
        for c in first + 1..last {
            if before(heap[c], heap[child], keys) {
                child = c;
            }
        }
        if !before(heap[child], heap[i], keys) {
            break;
        }
        heap.swap(i, child);
        i = child;
    }
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    event: Queue,
    processing: Queue,
    keys: Keys,
    /// What the timers hold, keys and overhead.
    bytes: usize,
}

impl Timers {
    fn queue(&mut self, domain: TimeDomain) -> (&mut Queue, &mut Keys) {
        let queue = match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        };
        (queue, &mut self.keys)
    }

    /// Registers a timer for `key` at `timestamp`; registering it again changes nothing.
    pub(crate) fn register(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        let (queue, keys) = self.queue(domain);
        let (id, interned) = keys.intern(key);
        if queue.push((timestamp, id), keys) {
            self.bytes += interned + TIMER_OVERHEAD;
        }
    }

    /// Deletes the timer of `key` at `timestamp`, if there is one.
    pub(crate) fn delete(&mut self, domain: TimeDomain, timestamp: i64, key: &[u8]) {
        let (queue, keys) = self.queue(domain);
        let Some(id) = keys.find(key) else {
            return;
        };
        if let Some(freed) = queue.remove((timestamp, id), keys) {
            self.bytes -= freed;
        }
    }

    /// Removes the earliest timer of `domain` if it is due at `upto` (at or before it), and
    /// returns it.
    pub(crate) fn pop_due(&mut self, domain: TimeDomain, upto: i64) -> Option<(i64, Key)> {
        let (queue, keys) = self.queue(domain);
        let (top, mut freed) = queue.peek(keys);
        let popped = top.filter(|&(ts, _)| ts <= upto).map(|(timestamp, id)| {
            queue.pending.remove(&(timestamp, id));
            let key = Key::from_slice(keys.key(id));
            freed += queue.pop_top(keys);
            (timestamp, key)
        });
        self.bytes -= freed;
        popped
    }

    /// When the earliest timer of `domain` is due.
    pub(crate) fn next(&mut self, domain: TimeDomain) -> Option<i64> {
        let (queue, keys) = self.queue(domain);
        let (top, freed) = queue.peek(keys);
        self.bytes -= freed;
        top.map(|(ts, _)| ts)
    }

    /// Removes the timers of `domain` after `bound` and returns them; the rest stay.
    pub(crate) fn split_off(&mut self, domain: TimeDomain, bound: i64) -> Vec<(i64, Key)> {
        let (queue, keys) = self.queue(domain);
        let moved: Vec<(i64, u32)> = queue
            .pending
            .iter()
            .copied()
            .filter(|&(ts, _)| ts > bound)
            .collect();
        if moved.is_empty() {
            return Vec::new();
        }
        for t in &moved {
            queue.pending.remove(t);
        }
        let out = moved
            .iter()
            .map(|&(ts, id)| (ts, Key::from_slice(keys.key(id))))
            .collect();
        self.bytes -= queue.rebuild(keys);
        out
    }

    /// The timestamps of the timers of `domain`, in no particular order.
    pub(crate) fn timestamps(&self, domain: TimeDomain) -> impl Iterator<Item = i64> + '_ {
        let queue = match domain {
            TimeDomain::EventTime => &self.event,
            TimeDomain::ProcessingTime => &self.processing,
        };
        queue.pending.iter().map(|&(ts, _)| ts)
    }

    /// Timers of `domain`.
    pub(crate) fn len_of(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.pending.len(),
            TimeDomain::ProcessingTime => self.processing.pending.len(),
        }
    }

    /// Removes and returns the earliest event-time timer.
    #[cfg(test)]
    pub(crate) fn pop_event(&mut self) -> Option<(i64, Key)> {
        self.pop_due(TimeDomain::EventTime, i64::MAX)
    }

    /// Timers of both domains.
    pub(crate) fn len(&self) -> usize {
        self.event.pending.len() + self.processing.pending.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes held for the timers.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Every timer, event time first, in no particular order within a domain.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TimeDomain, i64, &[u8])> {
        let keys = &self.keys;
        let event = self
            .event
            .pending
            .iter()
            .map(|&t| (TimeDomain::EventTime, t));
        let processing = (self.processing.pending.iter()).map(|&t| (TimeDomain::ProcessingTime, t));
        event
            .chain(processing)
            .map(move |(domain, (ts, id))| (domain, ts, keys.key(id)))
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
        assert_eq!((t.len(), t.len_of(TimeDomain::EventTime)), (3, 2));
        assert_eq!(t.bytes(), 1 + 1 + 3 + 3 * (KEY_OVERHEAD + TIMER_OVERHEAD));
        t.delete(TimeDomain::ProcessingTime, 1, b"abc");
        t.delete(TimeDomain::ProcessingTime, 1, b"abc");
        assert_eq!(t.pop_due(TimeDomain::EventTime, 2), None);
        assert_eq!(t.pop_event(), Some((3, Key::from_slice(b"a"))));
        assert_eq!(t.pop_event(), Some((5, Key::from_slice(b"b"))));
        assert_eq!(t.pop_event(), None);
        assert!(t.is_empty());
        assert_eq!(t.bytes(), 0);
    }

    /// Against a sorted set, under the pattern operators use (replace the key's timer) and
    /// random deletes and registrations, with ties on timestamps between keys.
    #[test]
    fn timers_fire_like_a_sorted_set_whatever_was_deleted_and_registered_again() {
        use std::collections::BTreeSet;
        let mut t = Timers::default();
        let mut model: BTreeSet<(i64, Vec<u8>)> = BTreeSet::new();
        let mut rng = fastrand::Rng::with_seed(7);
        for round in 0..20_000 {
            let key = format!("k{}", rng.u32(0..300)).into_bytes();
            let ts = rng.i64(0..2_000);
            match rng.u8(0..4) {
                0 | 1 => {
                    t.register(TimeDomain::EventTime, ts, &key);
                    model.insert((ts, key));
                }
                2 => {
                    t.delete(TimeDomain::EventTime, ts, &key);
                    model.remove(&(ts, key));
                }
                _ => {
                    // Delete one that exists, register it again later.
                    if let Some((ts, key)) = model.iter().nth(rng.usize(0..model.len().max(1))) {
                        let (ts, key) = (*ts, key.clone());
                        t.delete(TimeDomain::EventTime, ts, &key);
                        t.register(TimeDomain::EventTime, ts + 1, &key);
                        model.remove(&(ts, key.clone()));
                        model.insert((ts + 1, key));
                    }
                }
            }
            if round % 1_000 == 999 {
                let upto = rng.i64(0..2_000);
                while let Some((ts, key)) = t.pop_due(TimeDomain::EventTime, upto) {
                    assert_eq!(model.pop_first(), Some((ts, key.to_vec())));
                }
                assert!(model.first().is_none_or(|(ts, _)| *ts > upto));
            }
            assert_eq!(t.len_of(TimeDomain::EventTime), model.len());
        }
        let mut all: Vec<_> = t.iter().map(|(_, ts, k)| (ts, k.to_vec())).collect();
        all.sort();
        assert_eq!(all, model.iter().cloned().collect::<Vec<_>>());
        while let Some((ts, key)) = t.pop_event() {
            assert_eq!(model.pop_first(), Some((ts, key.to_vec())));
        }
        assert!(model.is_empty());
        assert_eq!(t.bytes(), 0);
    }
}
