//! The values of value states, lists and maps last read or written, kept in front of
//! RocksDB.

use std::borrow::Cow;

use rocksdb::WriteBatch;
use weir_wire::CheckedItems;

use crate::state::packed::{map_entries, put_item};
use crate::state::{FastMap, Key};

/// The values of value states, lists and maps last read or written, in front of RocksDB, so
/// that hot keys cost no RocksDB read and reach RocksDB once per eviction or checkpoint
/// rather than once per batch. Two generations approximate least-recently-used eviction: a
/// hit in the old generation moves the entry to the young one; when the young one is full,
/// the old one's changed entries go to RocksDB and it is dropped, and the young one becomes
/// old. A map is cached as one entry under its prefix, whole, with the map keys changed
/// since RocksDB last got them: those entries' rows are then written (or deleted), so that a
/// map whose few entries change batch after batch (a key's open windows) costs no RocksDB
/// write per batch either.
#[derive(Debug)]
pub(super) struct ValueCache {
    young: FastMap<Key, Cached>,
    old: FastMap<Key, Cached>,
    /// Entries per generation.
    generation: usize,
}

/// A cached value (`None`: the key has none) and what of it RocksDB does not have yet.
#[derive(Debug)]
struct Cached {
    value: Option<Vec<u8>>,
    dirty: Dirty,
}

/// What of a cached value RocksDB does not have yet.
#[derive(Debug, Default)]
enum Dirty {
    /// Nothing: RocksDB has it.
    #[default]
    No,
    /// The value of a value state or a list: one row.
    Whole,
    /// The entries of these map keys (`bytes` items, possibly repeated), each a row put with
    /// its value in the map or deleted.
    Entries(Vec<u8>),
}

/// A cached map's changed map keys are deduplicated once they take more bytes than this or
/// the map, and written if they still take half of that: so what the cache holds stays
/// within twice its maps, and a map whose few entries change often is not written.
const MIN_CHANGED_KEYS: usize = 1 << 10;

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
                    dirty: Dirty::No,
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
        if dirty {
            c.dirty = Dirty::Whole;
        }
    }

    /// Extends the list cached under `row` (which [`promote`](Self::promote) put into the
    /// young generation) in place by what `write` appends; returns its length now.
    pub(super) fn append(&mut self, row: &[u8], write: impl FnOnce(&mut Vec<u8>)) -> usize {
        let c = (self.young.get_mut(row)).expect("promoted into the young generation");
        c.dirty = Dirty::Whole;
        let list = c.value.get_or_insert_default();
        write(list);
        list.len()
    }

    /// Sets the map cached under `row` (its entries packed; `None` when it has none) after
    /// changes to the entries of `changed` map keys, which reach RocksDB when it is evicted or
    /// flushed, or once many distinct keys changed (into `batch`).
    pub(super) fn put_map<'k>(
        &mut self,
        row: &[u8],
        map: Option<&[u8]>,
        changed: impl IntoIterator<Item = &'k [u8]>,
        batch: &mut WriteBatch,
    ) {
        self.put(row, map, false);
        let c = self
            .young
            .get_mut(row)
            .expect("put into the young generation");
        if !matches!(c.dirty, Dirty::Entries(_)) {
            c.dirty = Dirty::Entries(Vec::new());
        }
        let Dirty::Entries(keys) = &mut c.dirty else {
            unreachable!("set above")
        };
        for k in changed {
            put_item(keys, k);
        }
        let bound = map.map_or(0, <[u8]>::len).max(MIN_CHANGED_KEYS);
        if keys.len() <= bound {
            return;
        }
        let mut distinct: Vec<&[u8]> = CheckedItems::new(keys).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let mut deduplicated = Vec::with_capacity(keys.len());
        for k in distinct {
            put_item(&mut deduplicated, k);
        }
        *keys = deduplicated;
        if keys.len() > bound / 2 {
            let mut rows = Vec::new();
            map_rows(row, c.value.as_deref(), keys, &mut rows);
            write_sorted(batch, &mut rows);
            c.dirty = Dirty::No;
        }
    }

    /// Drops the map cached under `row`, its changed entries written to `batch` first.
    pub(super) fn write_out(&mut self, row: &[u8], batch: &mut WriteBatch) {
        let Some(c) = self.young.remove(row).or_else(|| self.old.remove(row)) else {
            return;
        };
        if let Dirty::Entries(keys) = &c.dirty {
            let mut rows = Vec::new();
            map_rows(row, c.value.as_deref(), keys, &mut rows);
            write_sorted(batch, &mut rows);
        }
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
        write_changes(batch, self.old.iter_mut());
        self.old.clear();
        std::mem::swap(&mut self.young, &mut self.old);
    }

    /// Writes every change to `batch`; the entries stay cached.
    pub(super) fn flush(&mut self, batch: &mut WriteBatch) {
        write_changes(batch, self.young.iter_mut().chain(self.old.iter_mut()));
    }
}

/// Writes the changes of `entries` to `batch`, in row order; they are then unchanged.
fn write_changes<'a>(
    batch: &mut WriteBatch,
    entries: impl Iterator<Item = (&'a Key, &'a mut Cached)>,
) {
    let mut rows = Vec::new();
    for (row, c) in entries {
        let Cached { value, dirty } = c;
        let value: &'a Option<Vec<u8>> = value;
        match std::mem::take(dirty) {
            Dirty::No => {}
            Dirty::Whole => rows.push((Cow::Borrowed(&row[..]), value.as_deref())),
            Dirty::Entries(keys) => map_rows(row, value.as_deref(), &keys, &mut rows),
        }
    }
    write_sorted(batch, &mut rows);
}

/// A row to put (with its value) or delete (`None`).
type RowWrite<'a> = (Cow<'a, [u8]>, Option<&'a [u8]>);

/// The rows of the entries of map keys `keys` (`bytes` items) of the map under `prefix`
/// (`map`, packed): each with its value, or `None` (deleted) if the map has none.
fn map_rows<'a>(prefix: &[u8], map: Option<&'a [u8]>, keys: &[u8], rows: &mut Vec<RowWrite<'a>>) {
    let mut keys: Vec<&[u8]> = CheckedItems::new(keys).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut entries = map_entries(map.unwrap_or_default()).peekable();
    for k in keys {
        while entries.next_if(|(e, _)| *e < k).is_some() {}
        let value = entries.next_if(|(e, _)| *e == k).map(|(_, v)| v);
        rows.push((Cow::Owned([prefix, k].concat()), value));
    }
}

/// Puts `changes` into `batch` in key order: RocksDB's memtable (a skip list) inserts a
/// sorted run several times faster than the same keys in hash order.
fn write_sorted<R: AsRef<[u8]>>(batch: &mut WriteBatch, changes: &mut [(R, Option<&[u8]>)]) {
    changes.sort_unstable_by(|(a, _), (b, _)| a.as_ref().cmp(b.as_ref()));
    for (row, value) in changes.iter() {
        match value {
            Some(v) => batch.put(row, v),
            None => batch.delete(row),
        }
    }
}
