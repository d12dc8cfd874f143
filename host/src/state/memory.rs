//! The memory backend: per key group a hash table of the values of value states (see
//! [`ValueTable`]; one for every [`CHUNK`] of them), and per list or map state and key group
//! a hash table; full snapshots only.
//!
//! Entries are the bytes the front ([`super::KeyedState`]) hands over (with the TTL stamp in
//! front where the state has one); this module knows nothing of TTL but how to drop entries
//! a predicate rejects, which the front uses for incremental cleanup.

use std::ops::Range;

use super::key_map::KeyMap;
use super::packed::Packed;
use super::value_table::{ValuePos, ValueTable};
use super::{FastMap, Key, MAP_LOAD_LIMIT, Row, Slots, StateKind, Ttl};

/// What an entry (a value, a list element or a map entry) costs besides its bytes: the
/// table's bucket or its length prefixes and share of its key's buffer, roughly. The count is meant to bound what
/// a guest can make the host hold, not to account for every byte.
const ENTRY_OVERHEAD: usize = 64;

/// Value states share a table in chunks of this many (by their ordinal among the value
/// states): an operator's few value states share one, and finding a state's value among a
/// key's walks at most this many headers however many value states an operator declares.
const CHUNK: usize = 8;

/// The tables of one state, one per key group of the subtask; empty until the state is first
/// written, so that a state declared and never used costs next to nothing. A value state's
/// values are in [`Memory::values`], under its ordinal among the value states.
#[derive(Debug)]
enum Table {
    Value(usize),
    List(Vec<FastMap<Key, Packed>>),
    Map(Vec<FastMap<Key, KeyMap>>),
}

#[derive(Debug)]
pub(crate) struct Memory {
    groups: Range<u32>,
    /// By state id.
    tables: Vec<Table>,
    /// By chunk of value states ([`CHUNK`]), then by key group once a value is written.
    values: Vec<Vec<ValueTable>>,
    /// By state id: where the last `read_values` found each slot's value, so that the write
    /// that usually follows needs no second lookup (a checked hint: see [`ValueTable`]).
    positions: Vec<Vec<Option<ValuePos>>>,
    /// Per key slot of the batch `read_values` reads, its hash in its table (reused).
    hashes: Vec<u64>,
    /// What every entry holds, keys, values and [`ENTRY_OVERHEAD`].
    bytes: usize,
    /// Reused by map writes.
    scratch: Vec<u8>,
}

/// `tables`, with one table per key group once it is written.
fn filled<T: Default>(tables: &mut Vec<T>, groups: usize) -> &mut Vec<T> {
    if tables.is_empty() {
        tables.resize_with(groups, T::default);
    }
    tables
}

/// Changes the list or map of `key` in `t` (made, and counted in `bytes`, when it is new) with
/// `change`, which counts what it adds and removes and says whether it left it empty; an empty
/// one is dropped.
fn change_entry<T: Default>(
    t: &mut FastMap<Key, T>,
    key: &[u8],
    bytes: &mut usize,
    change: impl FnOnce(&mut T, &mut usize) -> bool,
) {
    let entry = match t.get_mut(key) {
        Some(entry) => entry,
        None => {
            *bytes += key.len() + ENTRY_OVERHEAD;
            t.entry(key.into()).or_default()
        }
    };
    if change(entry, bytes) {
        t.remove(key);
        *bytes -= key.len() + ENTRY_OVERHEAD;
    }
}

impl Memory {
    pub(crate) fn new(groups: Range<u32>) -> Self {
        Memory {
            groups,
            tables: Vec::new(),
            values: Vec::new(),
            positions: Vec::new(),
            hashes: Vec::new(),
            bytes: 0,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn declare(&mut self, _st: usize, _name: &str, kind: StateKind, _ttl: Option<Ttl>) {
        self.tables.push(match kind {
            StateKind::Value => {
                let ord = (self.tables.iter())
                    .filter(|t| matches!(t, Table::Value(_)))
                    .count();
                if ord.is_multiple_of(CHUNK) {
                    self.values.push(Vec::new());
                }
                Table::Value(ord)
            }
            StateKind::List => Table::List(Vec::new()),
            StateKind::Map => Table::Map(Vec::new()),
        });
        self.positions.push(Vec::new());
    }

    /// The bytes the state holds, roughly (see [`ENTRY_OVERHEAD`]).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Nothing to do: every change is applied at once.
    pub(crate) fn commit(&mut self) {}

    /// Nothing to do: nothing is cached.
    pub(crate) fn flush(&mut self) {}

    fn index(&self, group: u32) -> usize {
        (group - self.groups.start) as usize
    }

    /// The chunk of value state `st` and its ordinal in the chunk.
    fn ordinal(&self, st: usize) -> (usize, usize) {
        match self.tables[st] {
            Table::Value(ord) => (ord / CHUNK, ord % CHUNK),
            _ => unreachable!("the front checks the state's kind"),
        }
    }

    /// The value table of chunk `chunk` and key group `group`, made if need be.
    fn values(&mut self, chunk: usize, group: u32) -> &mut ValueTable {
        let (g, n) = (self.index(group), self.groups.len());
        &mut filled(&mut self.values[chunk], n)[g]
    }

    pub(crate) fn read_values(
        &mut self,
        st: usize,
        slots: &Slots,
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) {
        let (chunk, ord) = self.ordinal(st);
        let mut positions = std::mem::take(&mut self.positions[st]);
        positions.clear();
        let mut hashes = std::mem::take(&mut self.hashes);
        hashes.clear();
        // First every key's bucket is asked for, then read: the reads of a batch's keys wait
        // for memory together rather than one after another.
        let table = |slot| self.values[chunk].get(self.index(slots.group(slot)));
        hashes.extend((0..slots.len()).map(|slot| match table(slot) {
            Some(t) => {
                let hash = t.hash(slots.key(slot));
                t.prefetch(hash);
                hash
            }
            None => 0,
        }));
        for (slot, &hash) in hashes.iter().enumerate() {
            let pos = match table(slot) {
                Some(t) => {
                    let pos = t.find_hashed(hash, slots.key(slot));
                    f(slot, pos.and_then(|p| t.get(p, ord)));
                    pos
                }
                None => {
                    f(slot, None);
                    None
                }
            };
            positions.push(pos);
        }
        self.positions[st] = positions;
        self.hashes = hashes;
    }

    /// Sets (or with `None` removes) the value of `slot`'s key.
    pub(crate) fn write_value(&mut self, st: usize, slots: &Slots, slot: usize, v: Option<&[u8]>) {
        let ((chunk, ord), pos) = (
            self.ordinal(st),
            self.positions[st].get(slot).copied().flatten(),
        );
        let key = slots.key(slot);
        let t = self.values(chunk, slots.group(slot));
        let (added, removed) = match (v, pos) {
            (Some(v), Some(pos)) => (v.len(), t.set_at(pos, key, ord, v)),
            (Some(v), None) => (v.len(), t.set(key, ord, v)),
            (None, _) => {
                let removed = t.remove(key, ord);
                if let Some(p) = self.positions[st].get_mut(slot) {
                    *p = None;
                }
                self.bytes -= removed.map_or(0, |len| key.len() + len + ENTRY_OVERHEAD);
                return;
            }
        };
        match removed {
            Some(old) => self.bytes = self.bytes + added - old,
            None => self.bytes += key.len() + added + ENTRY_OVERHEAD,
        }
    }

    pub(crate) fn put_value(&mut self, st: usize, group: u32, key: &[u8], v: &[u8]) {
        let (chunk, ord) = self.ordinal(st);
        match self.values(chunk, group).set(key, ord, v) {
            Some(old) => self.bytes = self.bytes + v.len() - old,
            None => self.bytes += key.len() + v.len() + ENTRY_OVERHEAD,
        }
    }

    /// The list of `key` in list state `st` as a `load` answer has it, if it has one.
    pub(crate) fn list(&self, st: usize, group: u32, key: &[u8]) -> Option<&Packed> {
        let Table::List(t) = &self.tables[st] else {
            return None;
        };
        t.get(self.index(group)).and_then(|t| t.get(key))
    }

    /// The map of `key` in map state `st`, if it has one.
    pub(crate) fn map(&self, st: usize, group: u32, key: &[u8]) -> Option<&KeyMap> {
        let Table::Map(t) = &self.tables[st] else {
            return None;
        };
        t.get(self.index(group)).and_then(|t| t.get(key))
    }

    pub(crate) fn read_list(&self, st: usize, group: u32, key: &[u8], f: impl FnMut(&[u8])) {
        if let Some(list) = self.list(st, group, key) {
            list.elements().for_each(f);
        }
    }

    /// Appends `append` to the list of `key`, emptying it first when `clear`.
    pub(crate) fn write_list<'a>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        clear: bool,
        append: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let (g, n) = (self.index(group), self.groups.len());
        let Table::List(t) = &mut self.tables[st] else {
            return;
        };
        change_entry(&mut filled(t, n)[g], key, &mut self.bytes, |list, bytes| {
            if clear {
                *bytes -= list
                    .elements()
                    .map(|e| e.len() + ENTRY_OVERHEAD)
                    .sum::<usize>();
                list.clear();
            }
            for e in append {
                *bytes += e.len() + ENTRY_OVERHEAD;
                list.push(e);
            }
            list.is_empty()
        });
    }

    /// Calls `f` with the map's entries in key order while it returns true.
    pub(crate) fn read_map(
        &self,
        st: usize,
        group: u32,
        key: &[u8],
        f: impl FnMut(&[u8], &[u8]) -> bool,
    ) {
        if let Some(map) = self.map(st, group, key) {
            map.each(f);
        }
    }

    /// The number of entries of `key`'s map if it is larger than a load sends whole.
    pub(crate) fn large_map(&self, st: usize, group: u32, key: &[u8]) -> Option<u32> {
        let map = self.map(st, group, key)?;
        (map.bytes() > MAP_LOAD_LIMIT).then(|| map.len())
    }

    /// Calls `f` with the value of map key `map_key` in the map of `key`.
    pub(crate) fn map_get<R>(
        &self,
        st: usize,
        group: u32,
        key: &[u8],
        map_key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> R {
        f(self.map(st, group, key).and_then(|m| m.get(map_key)))
    }

    /// Applies `changes` (a put, or with `None` a removal) to the map of `key`, emptying it
    /// first when `clear`.
    pub(crate) fn write_map<'a>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        clear: bool,
        changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) {
        let (g, n) = (self.index(group), self.groups.len());
        let Table::Map(t) = &mut self.tables[st] else {
            return;
        };
        let cost = |k: &[u8], v: &[u8]| k.len() + v.len() + ENTRY_OVERHEAD;
        let scratch = &mut self.scratch;
        change_entry(&mut filled(t, n)[g], key, &mut self.bytes, |map, bytes| {
            if clear {
                map.each(|k, v| {
                    *bytes -= cost(k, v);
                    true
                });
                map.clear();
            }
            map.apply(changes, scratch, |k, old, new| {
                *bytes += new.map_or(0, |v| cost(k, v));
                *bytes -= old.map_or(0, |v| cost(k, v));
            });
            map.is_empty()
        });
    }

    /// Every entry of state `st` in key group `group`, the rows of one key one after another.
    pub(crate) fn scan(&self, st: usize, group: u32, f: &mut impl FnMut(&[u8], Row<'_>)) {
        let g = self.index(group);
        match &self.tables[st] {
            Table::Value(_) => {
                let (chunk, ord) = self.ordinal(st);
                for (k, v) in self.values[chunk]
                    .get(g)
                    .into_iter()
                    .flat_map(|t| t.iter(ord))
                {
                    f(k, Row::Value(v));
                }
            }
            Table::List(t) => {
                for (k, list) in t.get(g).into_iter().flatten() {
                    list.elements().for_each(|e| f(k, Row::Element(e)));
                }
            }
            Table::Map(t) => {
                for (k, map) in t.get(g).into_iter().flatten() {
                    map.each(|mk, mv| {
                        f(k, Row::Entry(mk, mv));
                        true
                    });
                }
            }
        }
    }

    /// Drops every entry (value, list element, map entry) of state `st` in key group `group`
    /// that `keep` rejects.
    pub(crate) fn retain(&mut self, st: usize, group: u32, keep: impl Fn(&[u8]) -> bool) {
        let g = self.index(group);
        let mut freed = 0;
        match &mut self.tables[st] {
            Table::Value(_) => {
                let (chunk, ord) = self.ordinal(st);
                if let Some(t) = self.values[chunk].get_mut(g) {
                    t.retain(ord, &keep, |k, v| {
                        freed += k.len() + v.len() + ENTRY_OVERHEAD
                    });
                }
            }
            Table::List(t) => {
                if let Some(t) = t.get_mut(g) {
                    t.retain(|k, list| {
                        list.retain_elements(|e| {
                            let kept = keep(e);
                            if !kept {
                                freed += e.len() + ENTRY_OVERHEAD;
                            }
                            kept
                        });
                        if list.is_empty() {
                            freed += k.len() + ENTRY_OVERHEAD;
                        }
                        !list.is_empty()
                    });
                }
            }
            Table::Map(t) => {
                if let Some(t) = t.get_mut(g) {
                    t.retain(|k, map| {
                        map.retain_entries(|mk, v| {
                            let kept = keep(v);
                            if !kept {
                                freed += mk.len() + v.len() + ENTRY_OVERHEAD;
                            }
                            kept
                        });
                        if map.is_empty() {
                            freed += k.len() + ENTRY_OVERHEAD;
                        }
                        !map.is_empty()
                    });
                }
            }
        }
        self.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_count_follows_every_change_and_ends_at_zero() {
        let mut m = Memory::new(0..4);
        m.declare(0, "v", StateKind::Value, None);
        m.declare(1, "l", StateKind::List, None);
        m.declare(2, "m", StateKind::Map, None);
        assert_eq!(m.bytes(), 0, "declared, never written");
        m.put_value(0, 1, b"k", b"12345");
        m.put_value(0, 1, b"k", b"1");
        assert_eq!(m.bytes(), 1 + 1 + ENTRY_OVERHEAD);
        m.write_list(1, 2, b"k", false, [&b"ab"[..], b"c"]);
        m.write_list(1, 2, b"k", true, [&b"abcd"[..]]);
        m.write_map(
            2,
            3,
            b"k",
            false,
            [(&b"x"[..], Some(&b"1"[..])), (b"y", Some(b"22"))],
        );
        m.write_map(
            2,
            3,
            b"k",
            false,
            [(&b"x"[..], Some(&b"333"[..])), (b"y", None)],
        );
        let list = 1 + ENTRY_OVERHEAD + 4 + ENTRY_OVERHEAD;
        let map = 1 + ENTRY_OVERHEAD + 1 + 3 + ENTRY_OVERHEAD;
        assert_eq!(m.bytes(), 2 + ENTRY_OVERHEAD + list + map);
        m.retain(0, 1, |_| false);
        m.write_list(1, 2, b"k", true, []);
        m.retain(2, 3, |_| false);
        assert_eq!(m.bytes(), 0);
    }

    #[test]
    fn value_states_over_several_chunks_keep_their_own_values() {
        let n = 2 * CHUNK + 3;
        let mut m = Memory::new(0..2);
        for st in 0..n {
            m.declare(st, "v", StateKind::Value, None);
        }
        let value = |st: usize| (!st.is_multiple_of(3)).then(|| format!("v{st}").into_bytes());
        for st in 0..n {
            if let Some(v) = value(st) {
                m.put_value(st, 1, b"k", &v);
            }
        }
        for st in 0..n {
            let mut rows = Vec::new();
            m.scan(st, 1, &mut |k, row| {
                if let Row::Value(v) = row {
                    rows.push((k.to_vec(), v.to_vec()));
                }
            });
            let expected: Vec<_> = value(st).map(|v| (b"k".to_vec(), v)).into_iter().collect();
            assert_eq!(rows, expected, "state {st}");
        }
        for st in 0..n {
            m.retain(st, 1, |_| false);
        }
        assert_eq!(m.bytes(), 0);
    }
}
