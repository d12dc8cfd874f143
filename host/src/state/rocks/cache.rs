//! The values of value states, lists and maps last read or written, kept in front of
//! RocksDB.

use rocksdb::WriteBatch;

use crate::state::{FastMap, Key};

/// The values of value states last read or written, in front of RocksDB, so that hot keys
/// cost no RocksDB read and reach RocksDB once per eviction or checkpoint rather than once
/// per batch. Two generations approximate least-recently-used eviction: a hit in the old
/// generation moves the entry to the young one; when the young one is full, the old one's
/// changed entries go to RocksDB and it is dropped, and the young one becomes old. (A map is
/// cached as one entry under its prefix; its writes reach RocksDB at once, so it is never
/// changed here.)
#[derive(Debug)]
pub(super) struct ValueCache {
    young: FastMap<Key, Cached>,
    old: FastMap<Key, Cached>,
    /// Entries per generation.
    generation: usize,
}

/// A cached value (`None`: the key has none) and whether RocksDB still has an older one.
#[derive(Debug)]
struct Cached {
    value: Option<Vec<u8>>,
    dirty: bool,
}

impl ValueCache {
    pub(super) fn new(entries: usize) -> Self {
        ValueCache {
            young: FastMap::default(),
            old: FastMap::default(),
            generation: (entries / 2).max(1),
        }
    }

    /// How many entries it holds at most.
    pub(super) fn capacity(&self) -> usize {
        2 * self.generation
    }

    /// Whether `row` is cached; moves it into the young generation.
    pub(super) fn promote(&mut self, row: &[u8]) -> bool {
        if self.young.contains_key(row) {
            return true;
        }
        match self.old.remove_entry(row) {
            Some((k, c)) => {
                self.young.insert(k, c);
                true
            }
            None => false,
        }
    }

    /// The cached value of `row`, which [`promote`](Self::promote) or
    /// [`put`](Self::put) put into the young generation.
    pub(super) fn get(&self, row: &[u8]) -> Option<&[u8]> {
        self.young.get(row).and_then(|c| c.value.as_deref())
    }

    pub(super) fn put(&mut self, row: &[u8], value: Option<&[u8]>, dirty: bool) {
        let c = match self.young.get_mut(row) {
            Some(c) => c,
            None => {
                let c = self.old.remove(row).unwrap_or(Cached {
                    value: None,
                    dirty: false,
                });
                self.young.entry(row.into()).or_insert(c)
            }
        };
        match (value, &mut c.value) {
            (Some(v), Some(old)) => {
                old.clear();
                old.extend_from_slice(v);
            }
            (v, slot) => *slot = v.map(<[u8]>::to_vec),
        }
        c.dirty |= dirty;
    }

    /// Drops `row` (a write past the cache makes it stale).
    pub(super) fn forget(&mut self, row: &[u8]) {
        self.young.remove(row);
        self.old.remove(row);
    }

    /// When the young generation is full: writes the old one's changes to `batch`, drops it.
    pub(super) fn evict(&mut self, batch: &mut WriteBatch) {
        if self.young.len() < self.generation {
            return;
        }
        let mut changed: Vec<(&[u8], Option<&[u8]>)> = self
            .old
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(row, c)| (&row[..], c.value.as_deref()))
            .collect();
        write_sorted(batch, &mut changed);
        self.old.clear();
        std::mem::swap(&mut self.young, &mut self.old);
    }

    /// Writes every change to `batch`; the entries stay cached.
    pub(super) fn flush(&mut self, batch: &mut WriteBatch) {
        let mut changed: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        for (row, c) in self.young.iter_mut().chain(self.old.iter_mut()) {
            if std::mem::take(&mut c.dirty) {
                changed.push((row, c.value.as_deref()));
            }
        }
        write_sorted(batch, &mut changed);
    }
}

/// Puts `changes` into `batch` in key order: RocksDB's memtable (a skip list) inserts a
/// sorted run several times faster than the same keys in hash order.
pub(super) fn write_sorted(batch: &mut WriteBatch, changes: &mut [(&[u8], Option<&[u8]>)]) {
    changes.sort_unstable_by_key(|(row, _)| *row);
    for (row, value) in changes.iter() {
        match value {
            Some(v) => batch.put(row, v),
            None => batch.delete(row),
        }
    }
}
