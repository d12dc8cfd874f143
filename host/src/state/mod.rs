//! Keyed state of one operator subtask, partitioned by key group.
//!
//! States are declared by name with a kind (value, list, map) and an optional TTL; a state is
//! identified by `(operator uid, name)`. Every entry lives in the table of its key's key
//! group, so a snapshot can later be split by key-group range when a job is rescaled. This is
//! the in-memory backend; values are opaque bytes (the guest SDK encodes them).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

mod snapshot;
mod value_table;

pub use snapshot::{OperatorStates, restore_operator_states, snapshot_operator_states};

use crate::runtime::key_group::key_group;
pub use value_table::ValuePos;
use value_table::ValueTable;

/// The kind of a keyed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    Value,
    List,
    Map,
}

impl std::fmt::Display for StateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
        })
    }
}

/// Time-to-live of a state's entries, as declared by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    pub ttl_ms: u64,
    pub update: TtlUpdate,
    pub visibility: TtlVisibility,
    pub event_time: bool,
}

/// Flink's `StateTtlConfig.UpdateType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlUpdate {
    OnCreateAndWrite,
    OnReadAndWrite,
    Disabled,
}

/// Flink's `StateTtlConfig.StateVisibility`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlVisibility {
    NeverReturnExpired,
    ReturnExpiredIfNotCleanedUp,
}

/// Index of a declared state within its [`KeyedState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateId(usize);

/// A refused state access, naming the state and what to do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error(
        "state \"{name}\" is declared as {declared} state but was first declared as {existing} state; use another name"
    )]
    KindMismatch {
        name: String,
        existing: StateKind,
        declared: StateKind,
    },
    #[error(
        "state \"{name}\" is declared with TTL {declared:?} but was first declared with {existing:?}; declare it the same way everywhere"
    )]
    TtlMismatch {
        name: String,
        existing: Option<Ttl>,
        declared: Option<Ttl>,
    },
    #[error(
        "keyed state \"{name}\" was accessed for a key in key group {group}, which this subtask does not own \
         (it owns {owned:?}); keyed state needs the operator's input to arrive over a key_by edge"
    )]
    ForeignKey {
        name: String,
        group: u32,
        owned: Range<u32>,
    },
}

/// Keys and values up to 24 bytes live inside the hash table's bucket: a lookup then touches
/// one cache line instead of chasing a pointer to a separate allocation.
pub(crate) type Key = smallvec::SmallVec<[u8; 24]>;
pub(crate) type Value = smallvec::SmallVec<[u8; 24]>;
/// The entries of one key's map state, in key order.
type MapEntries = BTreeMap<Vec<u8>, Vec<u8>>;

/// The hash map of hot paths: foldhash is several times faster than SipHash on short keys
/// and, unlike FxHash, mixes well enough that similar short keys do not collide.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug)]
enum Table {
    Value(Vec<ValueTable>),
    List(Vec<FastMap<Key, Vec<Vec<u8>>>>),
    Map(Vec<FastMap<Key, MapEntries>>),
}

#[derive(Debug)]
struct Declared {
    name: String,
    kind: StateKind,
    ttl: Option<Ttl>,
    table: Table,
}

/// The keyed state of one operator subtask.
#[derive(Debug)]
pub struct KeyedState {
    max_parallelism: u32,
    groups: Range<u32>,
    states: Vec<Declared>,
    by_name: HashMap<String, StateId>,
}

/// Where a key's entries live: its key group's table. Obtained once per key per batch with
/// [`KeyedState::locate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupIndex(usize);

impl KeyedState {
    /// State for the key groups `groups` of `max_parallelism`.
    pub fn new(max_parallelism: u32, groups: Range<u32>) -> Self {
        KeyedState {
            max_parallelism,
            groups,
            states: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    /// Declares a state, or returns the existing one of that name if kind and TTL agree.
    pub fn declare(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<Ttl>,
    ) -> Result<StateId, StateError> {
        if let Some(&id) = self.by_name.get(name) {
            let existing = &self.states[id.0];
            if existing.kind != kind {
                return Err(StateError::KindMismatch {
                    name: name.into(),
                    existing: existing.kind,
                    declared: kind,
                });
            }
            if existing.ttl != ttl {
                return Err(StateError::TtlMismatch {
                    name: name.into(),
                    existing: existing.ttl,
                    declared: ttl,
                });
            }
            return Ok(id);
        }
        let n = self.groups.len();
        let table = match kind {
            StateKind::Value => Table::Value((0..n).map(|_| ValueTable::default()).collect()),
            StateKind::List => Table::List((0..n).map(|_| FastMap::default()).collect()),
            StateKind::Map => Table::Map((0..n).map(|_| FastMap::default()).collect()),
        };
        let id = StateId(self.states.len());
        self.states.push(Declared {
            name: name.into(),
            kind,
            ttl,
            table,
        });
        self.by_name.insert(name.into(), id);
        Ok(id)
    }

    /// Whether no state has been declared (or restored).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub fn name(&self, id: StateId) -> &str {
        &self.states[id.0].name
    }

    pub fn kind(&self, id: StateId) -> StateKind {
        self.states[id.0].kind
    }

    /// The table index of `key`, refusing keys outside this subtask's key groups.
    pub fn locate(&self, id: StateId, key: &[u8]) -> Result<KeyGroupIndex, StateError> {
        self.group_index(id, key_group(key, self.max_parallelism))
    }

    /// The table index of key group `group` (as computed by `key_group`), refusing groups
    /// this subtask does not own.
    pub fn group_index(&self, id: StateId, group: u32) -> Result<KeyGroupIndex, StateError> {
        if !self.groups.contains(&group) {
            return Err(StateError::ForeignKey {
                name: self.states[id.0].name.clone(),
                group,
                owned: self.groups.clone(),
            });
        }
        Ok(KeyGroupIndex((group - self.groups.start) as usize))
    }

    pub fn value(&self, id: StateId, g: KeyGroupIndex, key: &[u8]) -> Option<&[u8]> {
        let t = self.value_table(id, g);
        t.find(key).and_then(|pos| t.get(pos))
    }

    /// Where the value of `key` is, for [`value_at`](Self::value_at) and
    /// [`set_value_at`](Self::set_value_at).
    pub fn find_value(&self, id: StateId, g: KeyGroupIndex, key: &[u8]) -> Option<ValuePos> {
        self.value_table(id, g).find(key)
    }

    pub fn value_at(&self, id: StateId, g: KeyGroupIndex, pos: ValuePos) -> Option<&[u8]> {
        self.value_table(id, g).get(pos)
    }

    /// Sets the value of `key`, which [`find_value`](Self::find_value) found at `pos` (a
    /// hint: still correct if the table changed since).
    pub fn set_value_at(
        &mut self,
        id: StateId,
        g: KeyGroupIndex,
        pos: ValuePos,
        key: &[u8],
        value: &[u8],
    ) {
        if let Table::Value(t) = &mut self.states[id.0].table {
            t[g.0].set_at(pos, key, value);
        }
    }

    pub fn set_value(&mut self, id: StateId, g: KeyGroupIndex, key: &[u8], value: &[u8]) {
        if let Table::Value(t) = &mut self.states[id.0].table {
            t[g.0].set(key, value);
        }
    }

    fn value_table(&self, id: StateId, g: KeyGroupIndex) -> &ValueTable {
        match &self.states[id.0].table {
            Table::Value(t) => &t[g.0],
            _ => panic!("state \"{}\" is not a value state", self.states[id.0].name),
        }
    }

    pub fn list(&self, id: StateId, g: KeyGroupIndex, key: &[u8]) -> &[Vec<u8>] {
        match &self.states[id.0].table {
            Table::List(t) => t[g.0].get(key).map(Vec::as_slice).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Appends to a list, replacing it first when `replace`.
    pub fn extend_list<'a>(
        &mut self,
        id: StateId,
        g: KeyGroupIndex,
        key: &[u8],
        replace: bool,
        elems: impl IntoIterator<Item = &'a [u8]>,
    ) {
        if let Table::List(t) = &mut self.states[id.0].table {
            let list = match t[g.0].get_mut(key) {
                Some(l) => l,
                None => t[g.0].entry(key.into()).or_default(),
            };
            if replace {
                list.clear();
            }
            list.extend(elems.into_iter().map(<[u8]>::to_vec));
            if list.is_empty() {
                t[g.0].remove(key);
            }
        }
    }

    pub fn map(&self, id: StateId, g: KeyGroupIndex, key: &[u8]) -> Option<&MapEntries> {
        match &self.states[id.0].table {
            Table::Map(t) => t[g.0].get(key),
            _ => None,
        }
    }

    pub fn put_map(&mut self, id: StateId, g: KeyGroupIndex, key: &[u8], mk: &[u8], mv: &[u8]) {
        if let Table::Map(t) = &mut self.states[id.0].table {
            let map = match t[g.0].get_mut(key) {
                Some(m) => m,
                None => t[g.0].entry(key.into()).or_default(),
            };
            map.insert(mk.to_vec(), mv.to_vec());
        }
    }

    pub fn remove_map(&mut self, id: StateId, g: KeyGroupIndex, key: &[u8], mk: &[u8]) {
        if let Table::Map(t) = &mut self.states[id.0].table
            && let Some(m) = t[g.0].get_mut(key)
        {
            m.remove(mk);
            if m.is_empty() {
                t[g.0].remove(key);
            }
        }
    }

    /// Removes the state's entry for `key` (of any kind).
    pub fn clear(&mut self, id: StateId, g: KeyGroupIndex, key: &[u8]) {
        match &mut self.states[id.0].table {
            Table::Value(t) => t[g.0].remove(key),
            Table::List(t) => {
                t[g.0].remove(key);
            }
            Table::Map(t) => {
                t[g.0].remove(key);
            }
        }
    }

    /// Keys with an entry in state `id`, in no particular order.
    #[cfg(test)]
    pub fn keys(&self, id: StateId) -> Vec<&[u8]> {
        fn collect<V>(t: &[FastMap<Key, V>]) -> Vec<&[u8]> {
            t.iter().flat_map(|m| m.keys().map(|k| &k[..])).collect()
        }
        match &self.states[id.0].table {
            Table::Value(t) => t.iter().flat_map(|t| t.iter().map(|(k, _)| k)).collect(),
            Table::List(t) => collect(t),
            Table::Map(t) => collect(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::key_group::key_group_range;

    fn whole() -> KeyedState {
        KeyedState::new(128, 0..128)
    }

    #[test]
    fn value_list_and_map_entries() {
        let mut s = whole();
        let v = s.declare("v", StateKind::Value, None).unwrap();
        let l = s.declare("l", StateKind::List, None).unwrap();
        let m = s.declare("m", StateKind::Map, None).unwrap();
        let g = s.locate(v, b"k").unwrap();
        assert_eq!(s.value(v, g, b"k"), None);
        s.set_value(v, g, b"k", b"1");
        s.set_value(v, g, b"k", b"22");
        assert_eq!(s.value(v, g, b"k"), Some(&b"22"[..]));
        s.clear(v, g, b"k");
        assert_eq!(s.value(v, g, b"k"), None);

        s.extend_list(l, g, b"k", false, [&b"a"[..], b"b"]);
        s.extend_list(l, g, b"k", false, [&b"c"[..]]);
        assert_eq!(
            s.list(l, g, b"k"),
            &[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        s.extend_list(l, g, b"k", true, [&b"z"[..]]);
        assert_eq!(s.list(l, g, b"k"), &[b"z".to_vec()]);
        s.extend_list(l, g, b"k", true, []);
        assert!(s.keys(l).is_empty(), "an emptied list leaves no entry");

        s.put_map(m, g, b"k", b"x", b"1");
        s.put_map(m, g, b"k", b"a", b"2");
        let entries: Vec<_> = s.map(m, g, b"k").unwrap().iter().collect();
        assert_eq!(entries[0].0, b"a", "map entries iterate in key order");
        s.remove_map(m, g, b"k", b"a");
        s.remove_map(m, g, b"k", b"x");
        assert!(s.map(m, g, b"k").is_none());
    }

    #[test]
    fn redeclaring_checks_kind_and_ttl() {
        let mut s = whole();
        let a = s.declare("a", StateKind::Value, None).unwrap();
        assert_eq!(s.declare("a", StateKind::Value, None), Ok(a));
        assert!(matches!(
            s.declare("a", StateKind::List, None),
            Err(StateError::KindMismatch { .. })
        ));
        let ttl = Ttl {
            ttl_ms: 5,
            update: TtlUpdate::OnCreateAndWrite,
            visibility: TtlVisibility::NeverReturnExpired,
            event_time: false,
        };
        let err = s.declare("a", StateKind::Value, Some(ttl)).unwrap_err();
        assert!(err.to_string().contains("declared with TTL"), "{err}");
    }

    #[test]
    fn keys_of_other_subtasks_are_refused() {
        let mut s = KeyedState::new(128, key_group_range(128, 2, 0));
        let v = s.declare("count", StateKind::Value, None).unwrap();
        let foreign = (0..1000u32)
            .map(|i| i.to_string())
            .find(|k| key_group(k.as_bytes(), 128) >= 64)
            .unwrap();
        let err = s.locate(v, foreign.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("key_by edge"), "{err}");
    }
}
