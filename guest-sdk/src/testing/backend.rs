//! The in-memory host the harness runs an operator against: keyed state, timers, output, logs
//! and operator state, behind the same [`Backend`] calls the component's imports make.
//!
//! It applies the `store` buffers with the host's state semantics (a clear or an emptied list
//! or map leaves no entry, a list append adds at the end, ...): a second implementation of
//! what `host/src/state` does. `tests/conformance/state.txt` runs one script against both,
//! through the state-probe guest, so that they cannot drift apart.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use weir_wire::{
    LARGE_MAP, ListOp, MAP_LOAD_LIMIT, MapOp, OutputReader, TimeDomain, ValueOp, put_bytes,
    put_opt_bytes, put_u32, read_list_ops, read_map_ops, read_timer_ops, read_value_ops,
};

use super::Output;
use crate::backend::{Backend, StateKind};
use crate::{Level, Redistribution, Ttl};

enum Stored {
    Value(Vec<u8>),
    List(Vec<Vec<u8>>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

struct MemState {
    name: String,
    kind: StateKind,
    data: BTreeMap<Vec<u8>, Stored>,
}

/// Everything the in-memory host keeps; the harness reads it and moves its clocks through the
/// methods below.
#[derive(Default)]
pub(super) struct Store {
    states: Vec<MemState>,
    /// `(domain, time, key)`: iteration is in firing order within a domain.
    timers: BTreeSet<(TimeDomain, i64, Vec<u8>)>,
    watermark: Option<i64>,
    processing_time: i64,
    output: Vec<Output>,
    logs: Vec<(Level, String)>,
    calls: HostCalls,
    /// The keys given ids (`key_ids`), by id, and the ids by key.
    key_ids: Vec<Vec<u8>>,
    id_of: std::collections::HashMap<Vec<u8>, u32>,
    /// Operator states by name; the index of a name is its handle.
    operator_states: Vec<(String, Redistribution, Vec<Vec<u8>>)>,
}

/// How often the runtime called each host import (for tests of the boundary cost).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct HostCalls {
    pub(crate) declare: usize,
    pub(crate) load: usize,
    pub(crate) map_get: usize,
    pub(crate) map_entries: usize,
    pub(crate) store: usize,
    pub(crate) load_slots: usize,
    pub(crate) key_ids: usize,
    pub(crate) store_ids: usize,
    pub(crate) emit: usize,
    pub(crate) timers: usize,
    /// Timer changes in all `timers` calls.
    pub(crate) timer_changes: usize,
}

/// An empty map, for keys without a stored one.
const NO_ENTRIES: &BTreeMap<Vec<u8>, Vec<u8>> = &BTreeMap::new();

/// A map in the load encoding, `u32 n` and the entries.
fn put_entries(buf: &mut Vec<u8>, map: &BTreeMap<Vec<u8>, Vec<u8>>) {
    put_u32(buf, map.len() as u32);
    for (k, v) in map {
        put_bytes(buf, k);
        put_bytes(buf, v);
    }
}

impl Store {
    fn state(&self, name: &str) -> Option<&MemState> {
        self.states.iter().find(|s| s.name == name)
    }

    fn stored(&self, name: &str, key: &[u8]) -> Option<&Stored> {
        self.state(name)?.data.get(key)
    }

    /// The value of value state `name` for `key`.
    pub(super) fn value(&self, name: &str, key: &[u8]) -> Option<&[u8]> {
        match self.stored(name, key)? {
            Stored::Value(v) => Some(v),
            _ => None,
        }
    }

    /// The list of list state `name` for `key`, empty if it has none.
    pub(super) fn list(&self, name: &str, key: &[u8]) -> &[Vec<u8>] {
        match self.stored(name, key) {
            Some(Stored::List(items)) => items,
            _ => &[],
        }
    }

    /// The map of map state `name` for `key`, empty if it has none.
    pub(super) fn map(&self, name: &str, key: &[u8]) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        match self.stored(name, key) {
            Some(Stored::Map(m)) => m,
            _ => NO_ENTRIES,
        }
    }

    /// The value of operator state `name`.
    pub(super) fn operator_state(&self, name: &str) -> &[Vec<u8>] {
        self.operator_states
            .iter()
            .find(|(n, ..)| n == name)
            .map_or(&[], |(_, _, elements)| elements)
    }

    /// The registered timers of `key` in `domain`, in time order.
    pub(super) fn timers(&self, domain: TimeDomain, key: &[u8]) -> Vec<i64> {
        self.timers
            .iter()
            .filter(|(d, _, k)| *d == domain && k == key)
            .map(|(_, ts, _)| *ts)
            .collect()
    }

    /// Removes and returns the timers of `domain` at or before `up_to`, in firing order.
    pub(super) fn take_due_timers(
        &mut self,
        domain: TimeDomain,
        up_to: i64,
    ) -> Vec<(TimeDomain, i64, Vec<u8>)> {
        let due: Vec<_> = self
            .timers
            .iter()
            .filter(|(d, ts, _)| *d == domain && *ts <= up_to)
            .cloned()
            .collect();
        for t in &due {
            self.timers.remove(t);
        }
        due
    }

    /// Moves the watermark to `timestamp` unless it is past it already.
    pub(super) fn advance_watermark(&mut self, timestamp: i64) {
        self.watermark = Some(self.watermark.map_or(timestamp, |w| w.max(timestamp)));
    }

    /// Sets the processing time the operator reads.
    pub(super) fn set_processing_time(&mut self, millis: i64) {
        self.processing_time = millis;
    }

    /// What the operator emitted since the last call.
    pub(super) fn take_output(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.output)
    }

    /// Every line the operator logged.
    pub(super) fn logs(&self) -> &[(Level, String)] {
        &self.logs
    }

    /// Starts the key ids over, as the host does after the forget batch.
    #[cfg(test)]
    pub(super) fn forget_key_ids(&mut self) {
        self.key_ids.clear();
        self.id_of.clear();
    }

    /// Host calls made since the last call.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn take_calls(&mut self) -> HostCalls {
        std::mem::take(&mut self.calls)
    }
}

/// The [`Backend`] over a [`Store`] that the harness shares, so that state and timers outlive
/// the operator instances it opens.
#[derive(Default)]
pub(super) struct MemoryBackend(Rc<RefCell<Store>>);

impl MemoryBackend {
    pub(super) fn new(store: Rc<RefCell<Store>>) -> Self {
        MemoryBackend(store)
    }
}

fn key_at<'k>(keys: &[&'k [u8]], slot: u32) -> &'k [u8] {
    match keys.get(slot as usize) {
        Some(k) => k,
        None => panic!(
            "weir-sdk bug: change for key slot {slot} of a batch with {} keys",
            keys.len()
        ),
    }
}

impl Backend for MemoryBackend {
    fn declare_state(&mut self, kind: StateKind, name: &str, _ttl: Option<&Ttl>) -> usize {
        let mut store = self.0.borrow_mut();
        store.calls.declare += 1;
        if let Some(i) = store.states.iter().position(|s| s.name == name) {
            let declared = store.states[i].kind;
            assert!(
                declared == kind,
                "state \"{name}\" was declared as a {declared} state and now as a {kind} state \
                 (the host traps here)"
            );
            return i;
        }
        store.states.push(MemState {
            name: name.to_owned(),
            kind,
            data: BTreeMap::new(),
        });
        store.states.len() - 1
    }

    fn load(&mut self, state: usize, keys: &[&[u8]]) -> Vec<u8> {
        self.0.borrow_mut().calls.load += 1;
        let store = self.0.borrow();
        let state = &store.states[state];
        let mut buf = Vec::new();
        for key in keys {
            let stored = state.data.get(*key);
            match state.kind {
                StateKind::Value => put_opt_bytes(
                    &mut buf,
                    match stored {
                        Some(Stored::Value(v)) => Some(v),
                        _ => None,
                    },
                ),
                StateKind::List => {
                    let items: &[Vec<u8>] = match stored {
                        Some(Stored::List(l)) => l,
                        _ => &[],
                    };
                    put_u32(&mut buf, items.len() as u32);
                    for item in items {
                        put_bytes(&mut buf, item);
                    }
                }
                StateKind::Map => {
                    let map = match stored {
                        Some(Stored::Map(m)) => m,
                        _ => NO_ENTRIES,
                    };
                    let bytes: usize = map.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
                    if bytes > MAP_LOAD_LIMIT {
                        // As the host does: the operator reads it entry by entry.
                        put_u32(&mut buf, LARGE_MAP);
                        put_u32(&mut buf, map.len() as u32);
                    } else {
                        put_entries(&mut buf, map);
                    }
                }
            }
        }
        buf
    }

    fn load_slots(&mut self, state: usize, keys: &[&[u8]], slots: &[u32]) -> Vec<u8> {
        self.0.borrow_mut().calls.load_slots += 1;
        assert!(
            slots.windows(2).all(|w| w[0] < w[1]),
            "weir-sdk bug: load-slots of {slots:?}, not in increasing order (the host traps)"
        );
        let store = self.0.borrow();
        let data = &store.states[state].data;
        let mut buf = Vec::new();
        for &slot in slots {
            let value = match data.get(key_at(keys, slot)) {
                Some(Stored::Value(v)) => Some(&v[..]),
                _ => None,
            };
            put_opt_bytes(&mut buf, value);
        }
        buf
    }

    // Always, so that an operator's tests run the write-back cache (which the host advises
    // with RocksDB state) as well as the state calls without it (which it runs for every state
    // with a TTL).
    fn write_back_advised(&mut self) -> bool {
        true
    }

    fn key_ids(&mut self, keys: &[&[u8]]) -> Vec<u32> {
        let mut store = self.0.borrow_mut();
        store.calls.key_ids += 1;
        let Store { key_ids, id_of, .. } = &mut *store;
        keys.iter()
            .map(|key| {
                *id_of.entry(key.to_vec()).or_insert_with(|| {
                    key_ids.push(key.to_vec());
                    key_ids.len() as u32 - 1
                })
            })
            .collect()
    }

    fn store_ids(&mut self, state: usize, changes: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.store_ids += 1;
        let Store {
            states, key_ids, ..
        } = &mut *store;
        let data = &mut states[state].data;
        for op in read_value_ops(changes) {
            let (id, op) = op.expect("weir-sdk bug: malformed value-state write-back");
            let key = match key_ids.get(id as usize) {
                Some(key) => key.clone(),
                None => panic!("weir-sdk bug: write-back of key id {id}, which was not given"),
            };
            match op {
                ValueOp::Set(v) => data.insert(key, Stored::Value(v.to_vec())),
                ValueOp::Clear => data.remove(&key),
            };
        }
    }

    fn map_get(
        &mut self,
        state: usize,
        keys: &[&[u8]],
        slot: u32,
        map_key: &[u8],
    ) -> Option<Vec<u8>> {
        self.0.borrow_mut().calls.map_get += 1;
        let store = self.0.borrow();
        match store.states[state].data.get(keys[slot as usize]) {
            Some(Stored::Map(m)) => m.get(map_key).cloned(),
            _ => None,
        }
    }

    fn map_entries(&mut self, state: usize, keys: &[&[u8]], slot: u32) -> Vec<u8> {
        self.0.borrow_mut().calls.map_entries += 1;
        let store = self.0.borrow();
        let mut buf = Vec::new();
        match store.states[state].data.get(keys[slot as usize]) {
            Some(Stored::Map(m)) => put_entries(&mut buf, m),
            _ => put_entries(&mut buf, NO_ENTRIES),
        }
        buf
    }

    fn store(&mut self, state: usize, keys: &[&[u8]], changes: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.store += 1;
        let state = &mut store.states[state];
        let data = &mut state.data;
        match state.kind {
            StateKind::Value => {
                for op in read_value_ops(changes) {
                    let (slot, op) = op.expect("weir-sdk bug: malformed value-state changes");
                    let key = key_at(keys, slot).to_vec();
                    match op {
                        ValueOp::Set(v) => data.insert(key, Stored::Value(v.to_vec())),
                        ValueOp::Clear => data.remove(&key),
                    };
                }
            }
            StateKind::List => {
                for op in read_list_ops(changes) {
                    let (slot, op) = op.expect("weir-sdk bug: malformed list-state changes");
                    let key = key_at(keys, slot).to_vec();
                    let mut list = match data.remove(&key) {
                        Some(Stored::List(l)) => l,
                        _ => Vec::new(),
                    };
                    match op {
                        ListOp::Clear => list.clear(),
                        ListOp::Replace(items) => {
                            list = items.into_iter().map(<[u8]>::to_vec).collect()
                        }
                        ListOp::Append(items) => list.extend(items.into_iter().map(<[u8]>::to_vec)),
                    }
                    if !list.is_empty() {
                        data.insert(key, Stored::List(list));
                    }
                }
            }
            StateKind::Map => {
                for op in read_map_ops(changes) {
                    let (slot, op) = op.expect("weir-sdk bug: malformed map-state changes");
                    let key = key_at(keys, slot).to_vec();
                    let mut map = match data.remove(&key) {
                        Some(Stored::Map(m)) => m,
                        _ => BTreeMap::new(),
                    };
                    match op {
                        MapOp::Clear => map.clear(),
                        MapOp::Put(k, v) => {
                            map.insert(k.to_vec(), v.to_vec());
                        }
                        MapOp::Remove(k) => {
                            map.remove(k);
                        }
                    }
                    if !map.is_empty() {
                        data.insert(key, Stored::Map(map));
                    }
                }
            }
        }
    }

    fn emit(&mut self, records: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.emit += 1;
        for item in OutputReader::new(records) {
            let (side, rec) = item.expect("weir-sdk bug: malformed output buffer");
            store.output.push(Output {
                key: rec.key.map(<[u8]>::to_vec),
                value: rec.value.to_vec(),
                kind: rec.kind,
                timestamp: rec.timestamp,
                side_output: side.map(|s| String::from_utf8_lossy(s).into_owned()),
            });
        }
    }

    fn update_timers(&mut self, keys: &[&[u8]], changes: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.timers += 1;
        for op in read_timer_ops(changes) {
            let op = op.expect("weir-sdk bug: malformed timer changes");
            store.calls.timer_changes += 1;
            let timer = (op.domain, op.timestamp, key_at(keys, op.slot).to_vec());
            if op.register {
                store.timers.insert(timer);
            } else {
                store.timers.remove(&timer);
            }
        }
    }

    fn current_watermark(&mut self) -> Option<i64> {
        self.0.borrow().watermark
    }

    fn current_processing_time(&mut self) -> i64 {
        self.0.borrow().processing_time
    }

    fn log(&mut self, level: Level, message: &str) {
        eprintln!("[operator {level}] {message}");
        self.0.borrow_mut().logs.push((level, message.to_owned()));
    }

    fn declare_operator_state(&mut self, name: &str, mode: Redistribution) -> usize {
        let states = &mut self.0.borrow_mut().operator_states;
        match states.iter().position(|(n, ..)| n == name) {
            Some(i) => {
                // As the host does: one mode per name.
                assert_eq!(
                    states[i].1, mode,
                    "operator state \"{name}\" is declared with two redistribution modes"
                );
                i
            }
            None => {
                states.push((name.to_owned(), mode, Vec::new()));
                states.len() - 1
            }
        }
    }

    fn get_operator_state(&mut self, state: usize) -> Vec<Vec<u8>> {
        self.0.borrow().operator_states[state].2.clone()
    }

    fn set_operator_state(&mut self, state: usize, elements: &[Vec<u8>]) {
        self.0.borrow_mut().operator_states[state].2 = elements.to_vec();
    }
}
