//! The memory backend: per state and key group a hash table; full snapshots only.
//!
//! Entries are the bytes the front ([`super::KeyedState`]) hands over (with the TTL stamp in
//! front where the state has one); this module knows nothing of TTL but how to drop entries
//! a predicate rejects, which the front uses for incremental cleanup.

use std::collections::BTreeMap;
use std::ops::Range;

use super::value_table::{ValuePos, ValueTable};
use super::{FastMap, Key, Row, Slots, StateKind, Ttl};

/// The entries of one key's map state, in key order.
type MapEntries = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug)]
enum Table {
    Value(Vec<ValueTable>),
    List(Vec<FastMap<Key, Vec<Vec<u8>>>>),
    Map(Vec<FastMap<Key, MapEntries>>),
}

#[derive(Debug)]
pub(crate) struct Memory {
    groups: Range<u32>,
    /// By state id.
    tables: Vec<Table>,
    /// By state id: where the last `read_values` found each slot's value, so that the write
    /// that usually follows needs no second lookup (a checked hint: see [`ValueTable`]).
    positions: Vec<Vec<Option<ValuePos>>>,
}

impl Memory {
    pub(crate) fn new(groups: Range<u32>) -> Self {
        Memory {
            groups,
            tables: Vec::new(),
            positions: Vec::new(),
        }
    }

    pub(crate) fn declare(&mut self, _st: usize, _name: &str, kind: StateKind, _ttl: Option<Ttl>) {
        let n = self.groups.len();
        self.tables.push(match kind {
            StateKind::Value => Table::Value((0..n).map(|_| ValueTable::default()).collect()),
            StateKind::List => Table::List((0..n).map(|_| FastMap::default()).collect()),
            StateKind::Map => Table::Map((0..n).map(|_| FastMap::default()).collect()),
        });
        self.positions.push(Vec::new());
    }

    /// Nothing to do: every change is applied at once.
    pub(crate) fn commit(&mut self) {}

    /// Nothing to do: nothing is cached.
    pub(crate) fn flush(&mut self) {}

    fn index(&self, group: u32) -> usize {
        (group - self.groups.start) as usize
    }

    fn values(&mut self, st: usize, group: u32) -> &mut ValueTable {
        let g = self.index(group);
        match &mut self.tables[st] {
            Table::Value(t) => &mut t[g],
            _ => unreachable!("the front checks the state's kind"),
        }
    }

    pub(crate) fn read_values(
        &mut self,
        st: usize,
        slots: &Slots,
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) {
        let mut positions = std::mem::take(&mut self.positions[st]);
        positions.clear();
        for slot in 0..slots.len() {
            let t = self.values(st, slots.group(slot));
            let pos = t.find(slots.key(slot));
            f(slot, pos.and_then(|p| t.get(p)));
            positions.push(pos);
        }
        self.positions[st] = positions;
    }

    /// Sets (or with `None` removes) the value of `slot`'s key.
    pub(crate) fn write_value(&mut self, st: usize, slots: &Slots, slot: usize, v: Option<&[u8]>) {
        let pos = self.positions[st].get(slot).copied().flatten();
        let key = slots.key(slot);
        let t = self.values(st, slots.group(slot));
        match (v, pos) {
            (Some(v), Some(pos)) => t.set_at(pos, key, v),
            (Some(v), None) => t.set(key, v),
            (None, _) => {
                t.remove(key);
                if let Some(p) = self.positions[st].get_mut(slot) {
                    *p = None;
                }
            }
        }
    }

    pub(crate) fn put_value(&mut self, st: usize, group: u32, key: &[u8], v: &[u8]) {
        self.values(st, group).set(key, v);
    }

    pub(crate) fn read_list(&self, st: usize, group: u32, key: &[u8], mut f: impl FnMut(&[u8])) {
        if let Table::List(t) = &self.tables[st]
            && let Some(list) = t[self.index(group)].get(key)
        {
            list.iter().for_each(|e| f(e));
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
        let g = self.index(group);
        let Table::List(t) = &mut self.tables[st] else {
            return;
        };
        let list = match t[g].get_mut(key) {
            Some(l) => l,
            None => t[g].entry(key.into()).or_default(),
        };
        if clear {
            list.clear();
        }
        list.extend(append.into_iter().map(<[u8]>::to_vec));
        if list.is_empty() {
            t[g].remove(key);
        }
    }

    pub(crate) fn read_map(
        &self,
        st: usize,
        group: u32,
        key: &[u8],
        mut f: impl FnMut(&[u8], &[u8]),
    ) {
        if let Table::Map(t) = &self.tables[st]
            && let Some(map) = t[self.index(group)].get(key)
        {
            map.iter().for_each(|(k, v)| f(k, v));
        }
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
        let g = self.index(group);
        let Table::Map(t) = &mut self.tables[st] else {
            return;
        };
        let map = match t[g].get_mut(key) {
            Some(m) => m,
            None => t[g].entry(key.into()).or_default(),
        };
        if clear {
            map.clear();
        }
        for (k, v) in changes {
            match v {
                Some(v) => {
                    map.insert(k.to_vec(), v.to_vec());
                }
                None => {
                    map.remove(k);
                }
            }
        }
        if map.is_empty() {
            t[g].remove(key);
        }
    }

    /// Every entry of state `st` in key group `group`, the rows of one key one after another.
    pub(crate) fn scan(&self, st: usize, group: u32, f: &mut impl FnMut(&[u8], Row<'_>)) {
        let g = self.index(group);
        match &self.tables[st] {
            Table::Value(t) => t[g].iter().for_each(|(k, v)| f(k, Row::Value(v))),
            Table::List(t) => {
                for (k, list) in &t[g] {
                    list.iter().for_each(|e| f(k, Row::Element(e)));
                }
            }
            Table::Map(t) => {
                for (k, map) in &t[g] {
                    map.iter().for_each(|(mk, mv)| f(k, Row::Entry(mk, mv)));
                }
            }
        }
    }

    /// Drops every entry (value, list element, map entry) of state `st` in key group `group`
    /// that `keep` rejects.
    pub(crate) fn retain(&mut self, st: usize, group: u32, keep: impl Fn(&[u8]) -> bool) {
        let g = self.index(group);
        match &mut self.tables[st] {
            Table::Value(t) => t[g].retain(|v| keep(v)),
            Table::List(t) => t[g].retain(|_, list| {
                list.retain(|e| keep(e));
                !list.is_empty()
            }),
            Table::Map(t) => t[g].retain(|_, map| {
                map.retain(|_, v| keep(v));
                !map.is_empty()
            }),
        }
    }
}
