//! Keyed state of one operator subtask, partitioned by key group.
//!
//! States are declared by name with a kind (value, list, map) and an optional [`Ttl`]; a state
//! is identified by `(operator uid, name)`. [`KeyedState`] is the front every operator uses:
//! it refuses keys outside the subtask's key groups, applies TTL (stamps, expiry, cleanup on
//! read and on snapshot, see [`ttl`]) and hands plain bytes to one of two backends:
//!
//! - `memory` ([`memory`]): hash tables per state and key group; every checkpoint is a full
//!   snapshot.
//! - `rocksdb` ([`rocks`]): an embedded RocksDB per subtask, for state larger than memory.
//!
//! Access is per batch: the host collects a batch's distinct keys into [`Slots`] and reads or
//! writes a state for all of them in one call, which lets each backend batch its work.
//! Values are opaque bytes (the guest SDK encodes them).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::ops::Range;
use std::path::PathBuf;

use hashbrown::HashTable;
use serde::Deserialize;
use weir_wire::{
    DecodeError, ListOp, MapOp, ValueOp, put_bytes, put_opt_bytes, put_u32, read_list_ops,
    read_map_ops, read_value_ops,
};
pub use weir_wire::{LARGE_MAP, MAP_LOAD_LIMIT};

/// Runs `$e` on the backend as `$b`; the memory backend cannot fail, RocksDB can.
macro_rules! on_backend {
    ($backend:expr, $b:ident => $e:expr) => {
        match $backend {
            Backend::Memory($b) => Ok::<_, StateError>($e),
            Backend::Rocks($b) => $e,
        }
    };
}

mod key_map;
mod keyed_timers;
mod memory;
mod packed;
pub(crate) mod rocks;
mod snapshot;
mod timers;
pub(crate) mod ttl;
mod value_table;

pub(crate) use rocks::link_or_copy;
pub use snapshot::{
    OperatorList, OperatorStates, Redistribution, redistribute, restore_operator_states,
    snapshot_operator_states,
};
pub(crate) use timers::Timers;
pub use ttl::{Ttl, TtlUpdate, TtlVisibility};

use crate::clock::Clock;
use crate::key_group::key_group;
use memory::Memory;
use packed::Packed;
use rocks::Rocks;
use ttl::{NEVER, NO_TIME, split, stamped};

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

/// The job spec's `[state]` table.
///
/// ```toml
/// [state]
/// backend = "rocksdb"       # or "memory" (the default)
/// dir = "state"             # RocksDB's working directories: <dir>/<job>/, relative to the spec
/// incremental = true        # RocksDB checkpoints share unchanged SST files (false: full copies)
/// block_cache = "64 MiB"    # RocksDB, per subtask: cache of uncompressed blocks
/// write_buffer = "16 MiB"   # RocksDB, per subtask: memtable size before a flush
/// cache_entries = 100000    # RocksDB, per subtask: values, lists and maps cached in memory
/// timer_cache = 65536       # RocksDB, per subtask and time domain: timers kept in memory
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    #[serde(default)]
    /// Where keyed state lives.
    pub backend: BackendKind,
    #[serde(default = "default_dir")]
    /// Where RocksDB keeps its working directories, relative to the spec.
    pub dir: PathBuf,
    #[serde(default = "yes")]
    /// Whether RocksDB checkpoints share unchanged files (else full snapshots).
    pub incremental: bool,
    #[serde(default = "default_block_cache")]
    /// RocksDB's block cache, per subtask.
    pub block_cache: bytesize::ByteSize,
    #[serde(default = "default_write_buffer")]
    /// RocksDB's memtable size, per subtask.
    pub write_buffer: bytesize::ByteSize,
    /// RocksDB, per subtask: values of value states and lists kept in memory in front of
    /// RocksDB.
    #[serde(default = "default_cache_entries")]
    pub cache_entries: u64,
    /// RocksDB, per subtask and time domain: how many timers (the earliest) are kept in
    /// memory; later ones are kept in RocksDB.
    #[serde(default = "default_timer_cache")]
    pub timer_cache: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
/// A keyed-state backend (`[state] backend`).
pub enum BackendKind {
    #[default]
    /// Hash tables in memory; full snapshots.
    Memory,
    #[serde(rename = "rocksdb")]
    /// An embedded RocksDB per subtask; incremental checkpoints.
    RocksDb,
}

fn default_dir() -> PathBuf {
    PathBuf::from("state")
}

fn yes() -> bool {
    true
}

fn default_block_cache() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(64)
}

fn default_cache_entries() -> u64 {
    100_000
}

fn default_timer_cache() -> u64 {
    1 << 16
}

fn default_write_buffer() -> bytesize::ByteSize {
    bytesize::ByteSize::mib(16)
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            backend: BackendKind::Memory,
            dir: default_dir(),
            incremental: true,
            block_cache: default_block_cache(),
            write_buffer: default_write_buffer(),
            cache_entries: default_cache_entries(),
            timer_cache: default_timer_cache(),
        }
    }
}

impl StateConfig {
    /// Checks the settings; the message names the setting and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.timer_cache == 0 {
            return Err(
                "timer_cache 0 is too small; keep at least one timer in memory, e.g. \
                 timer_cache = 65536"
                    .into(),
            );
        }
        if self.write_buffer.as_u64() < 1 << 20 {
            return Err(format!(
                "write_buffer {} is too small; use at least 1 MiB, e.g. write_buffer = \"64 MiB\"",
                self.write_buffer
            ));
        }
        Ok(())
    }
}

/// Where one subtask's keyed state lives.
#[derive(Debug, Clone)]
pub struct StateSetup {
    pub config: StateConfig,
    /// `<spec dir>/<config.dir>/<job>`: the parent of the subtasks' RocksDB directories.
    pub root: PathBuf,
    /// Processing time, for TTL.
    pub clock: Clock,
}

impl StateSetup {
    /// In memory, on the system clock.
    pub fn memory() -> Self {
        StateSetup {
            config: StateConfig::default(),
            root: PathBuf::new(),
            clock: Clock::system(),
        }
    }
}

/// Index of a declared state within its [`KeyedState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateId(usize);

/// A refused or failed state access, naming the state and what to do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("{}", kind_mismatch(.name, *.existing, *.declared, *.restored))]
    KindMismatch {
        name: String,
        existing: StateKind,
        declared: StateKind,
        /// The existing declaration came from a restored checkpoint or savepoint.
        restored: bool,
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
    #[error(
        "a timer was registered for a key in key group {group}, which this subtask does not own \
         (it owns {owned:?}); timers need the operator's input to arrive over a key_by edge"
    )]
    ForeignTimer { group: u32, owned: Range<u32> },
    #[error("key slot {slot} does not exist: the current batch has {len} keys")]
    NoSuchSlot { slot: u32, len: usize },
    #[error("state \"{name}\": {cause}")]
    Decode { name: String, cause: DecodeError },
    /// A value over the caller's size limit (the host turns it into a limit error).
    #[error("state \"{name}\": a value of {len} bytes for key slot {slot} is over the limit")]
    TooLarge { name: String, slot: u32, len: usize },
    /// The backend failed (a RocksDB I/O error, a full disk).
    #[error("{0}")]
    Backend(String),
}

/// Keys up to 24 bytes live inside the hash table's bucket: a lookup then touches one cache
/// line instead of chasing a pointer to a separate allocation.
pub(crate) type Key = smallvec::SmallVec<[u8; 24]>;

/// The hash map of hot paths: foldhash is several times faster than SipHash on short keys
/// and, unlike FxHash, mixes well enough that similar short keys do not collide.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One stored row as a backend reports it: a key's value, one element of its list, or one
/// entry of its map (bytes with the TTL stamp, if the state has a TTL).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Row<'a> {
    Value(&'a [u8]),
    Element(&'a [u8]),
    Entry(&'a [u8], &'a [u8]),
}

/// The distinct keys of the batch (or timer batch) being handled: slot `i` is the `i`-th,
/// with its key group and the latest event time among its records.
#[derive(Debug, Default)]
pub struct Slots {
    bytes: Vec<u8>,
    slots: Vec<Slot>,
    /// The slots by key, kept from batch to batch (cleared, not freed): a table made per
    /// batch, sized for its records, was written into cold memory every time.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    at: u32,
    len: u32,
    group: u32,
    time: i64,
}

#[allow(clippy::len_without_is_empty)]
impl Slots {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.slots.clear();
        self.index.clear();
    }

    /// The slot of `key`, of key group `group`; a key not seen yet gets the next slot.
    pub fn push(&mut self, key: &[u8], group: u32) -> u32 {
        self.slot_of(key, || group).0
    }

    /// The slot of `key` and whether it is new; a key not seen yet gets the next slot, of
    /// key group `group()` (asked for new keys only).
    pub fn slot_of(&mut self, key: &[u8], group: impl FnOnce() -> u32) -> (u32, bool) {
        let Slots {
            bytes,
            slots,
            index,
            hasher,
        } = self;
        let key_of = |s: &Slot| &bytes[s.at as usize..(s.at + s.len) as usize];
        match index.entry(
            hasher.hash_one(key),
            |&i| key_of(&slots[i as usize]) == key,
            |&i| hasher.hash_one(key_of(&slots[i as usize])),
        ) {
            hashbrown::hash_table::Entry::Occupied(e) => (*e.get(), false),
            hashbrown::hash_table::Entry::Vacant(e) => {
                let slot = slots.len() as u32;
                slots.push(Slot {
                    at: bytes.len() as u32,
                    len: key.len() as u32,
                    group: group(),
                    time: NO_TIME,
                });
                bytes.extend_from_slice(key);
                e.insert(slot);
                (slot, true)
            }
        }
    }

    /// Adds slot `slot` of `other` (its key, key group and event time) as a slot of these;
    /// returns its slot here.
    pub fn push_slot_of(&mut self, other: &Slots, slot: usize) -> u32 {
        let s = other.slots[slot];
        let (at, _) = self.slot_of(other.key(slot), || s.group);
        self.note_time(at, s.time);
        at
    }

    /// The bytes of the keys.
    pub fn key_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Notes that a record of `slot`'s key has event time `ts`.
    pub fn note_time(&mut self, slot: u32, ts: i64) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.time = s.time.max(ts);
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn key(&self, slot: usize) -> &[u8] {
        let s = &self.slots[slot];
        &self.bytes[s.at as usize..(s.at + s.len) as usize]
    }

    pub fn group(&self, slot: usize) -> u32 {
        self.slots[slot].group
    }

    fn time(&self, slot: usize) -> i64 {
        self.slots[slot].time
    }

    fn check(&self, slot: u32) -> Result<usize, StateError> {
        if (slot as usize) < self.slots.len() {
            Ok(slot as usize)
        } else {
            Err(StateError::NoSuchSlot {
                slot,
                len: self.slots.len(),
            })
        }
    }
}

#[derive(Debug)]
struct Declared {
    name: String,
    kind: StateKind,
    ttl: Option<Ttl>,
    /// Declared by a restore, not (yet) by the operator's code.
    restored: bool,
}

fn kind_mismatch(name: &str, existing: StateKind, declared: StateKind, restored: bool) -> String {
    if restored {
        format!(
            "state \"{name}\" is declared as {declared} state, but the state the operator \
             holds (restored from a checkpoint or savepoint, or written by its code before an \
             upgrade) is {existing} state; declare it as {existing} state, or give the new state \
             another name"
        )
    } else {
        format!(
            "state \"{name}\" is declared as {declared} state but was first declared as \
             {existing} state; use another name"
        )
    }
}

#[derive(Debug)]
enum Backend {
    Memory(Memory),
    Rocks(Box<Rocks>),
}

/// The ops of one `store` call for one slot, one after another: whether they empty the list
/// or map first, then what they add (`start..end` of the call's elements or entries).
struct Run {
    slot: usize,
    clear: bool,
    start: usize,
    end: usize,
}

impl Run {
    /// The last run of `runs` if it is of `slot`, else a new one starting at `at`.
    fn of(runs: &mut Vec<Run>, slot: usize, at: usize) -> &mut Run {
        if runs.last().is_none_or(|r| r.slot != slot) {
            runs.push(Run {
                slot,
                clear: false,
                start: at,
                end: at,
            });
        }
        runs.last_mut().expect("pushed if there was none")
    }
}

/// The keyed state of one operator subtask.
#[derive(Debug)]
pub struct KeyedState {
    max_parallelism: u32,
    groups: Range<u32>,
    states: Vec<Declared>,
    by_name: HashMap<String, StateId>,
    backend: Backend,
    clock: Clock,
    /// The task's event-time watermark, `NO_TIME` before the first.
    watermark: i64,
    /// The next key group the memory backend's incremental TTL cleanup visits.
    cleanup_cursor: u32,
    /// Whether RocksDB checkpoints are incremental.
    incremental: bool,
    /// The RocksDB database to open at the first declaration, and its name.
    unopened: Option<(StateSetup, String)>,
    scratch: Vec<u8>,
    /// The timers in memory: all of them, or with RocksDB the earliest (see `keyed_timers`).
    timers: Timers,
    spill: keyed_timers::Spill,
    /// How many timers of a domain memory holds before later ones spill to RocksDB
    /// (`usize::MAX` with the memory backend).
    timer_cache: usize,
}

impl KeyedState {
    /// In-memory state for the key groups `groups` of `max_parallelism`.
    #[cfg(test)]
    pub fn new(max_parallelism: u32, groups: Range<u32>) -> Self {
        Self::with_backend(
            max_parallelism,
            groups.clone(),
            Backend::Memory(Memory::new(groups)),
            Clock::system(),
            false,
        )
    }

    /// State as `setup` says, for subtask `subtask` of operator `uid`.
    pub(crate) fn open(
        setup: &StateSetup,
        uid: &str,
        subtask: u32,
        max_parallelism: u32,
        groups: Range<u32>,
    ) -> Result<Self, StateError> {
        let mut state = Self::with_backend(
            max_parallelism,
            groups.clone(),
            Backend::Memory(Memory::new(groups)),
            setup.clock.clone(),
            setup.config.incremental,
        );
        if setup.config.backend == BackendKind::RocksDb {
            state.unopened = Some((setup.clone(), format!("{uid}-{subtask}")));
            state.timer_cache = setup.config.timer_cache.max(1) as usize;
            state.spill = keyed_timers::Spill::new(state.timer_cache);
        }
        Ok(state)
    }

    /// Opens the RocksDB database this state waits to open, if any: at the first declaration
    /// (or restore), so that operators without keyed state run no database.
    fn open_rocks(&mut self) -> Result<(), StateError> {
        if let Some((setup, name)) = self.unopened.take() {
            let rocks = Rocks::open(
                &setup.root,
                &name,
                &setup.config,
                self.groups.clone(),
                setup.clock,
            )?;
            self.backend = Backend::Rocks(Box::new(rocks));
        }
        Ok(())
    }

    fn with_backend(
        max_parallelism: u32,
        groups: Range<u32>,
        backend: Backend,
        clock: Clock,
        incremental: bool,
    ) -> Self {
        KeyedState {
            incremental,
            unopened: None,
            max_parallelism,
            cleanup_cursor: groups.start,
            groups,
            states: Vec::new(),
            by_name: HashMap::new(),
            backend,
            clock,
            watermark: NO_TIME,
            scratch: Vec::new(),
            timers: Timers::default(),
            spill: keyed_timers::Spill::new(usize::MAX),
            timer_cache: usize::MAX,
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
                    restored: existing.restored,
                });
            }
            if existing.ttl != ttl {
                return Err(StateError::TtlMismatch {
                    name: name.into(),
                    existing: existing.ttl,
                    declared: ttl,
                });
            }
            self.states[id.0].restored = false;
            return Ok(id);
        }
        self.open_rocks()?;
        let id = StateId(self.states.len());
        on_backend!(&mut self.backend, b => b.declare(id.0, name, kind, ttl))?;
        self.states.push(Declared {
            name: name.into(),
            kind,
            ttl,
            restored: false,
        });
        self.by_name.insert(name.into(), id);
        Ok(id)
    }

    /// The bytes the state holds in memory, roughly; state in RocksDB holds its cache only,
    /// which its settings bound, and counts nothing here.
    pub fn memory_bytes(&self) -> usize {
        match &self.backend {
            Backend::Memory(m) => m.bytes(),
            Backend::Rocks(_) => 0,
        }
    }

    /// Marks every state as not declared by the code: an instance of new code declares what
    /// it uses again.
    pub(crate) fn forget_declarations(&mut self) {
        for s in &mut self.states {
            s.restored = true;
        }
    }

    /// The states held that the code has not declared (restored, or left by older code).
    pub(crate) fn undeclared(&self) -> impl Iterator<Item = &str> {
        self.states
            .iter()
            .filter(|s| s.restored)
            .map(|s| s.name.as_str())
    }

    /// Whether no state has been declared (or restored) and no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty() && self.timers.is_empty() && self.spill.is_empty()
    }

    pub fn name(&self, id: StateId) -> &str {
        &self.states[id.0].name
    }

    pub fn kind(&self, id: StateId) -> StateKind {
        self.states[id.0].kind
    }

    /// The key group of `key`.
    pub fn key_group(&self, key: &[u8]) -> u32 {
        key_group(key, self.max_parallelism)
    }

    /// Sets the task's event-time watermark, against which event-time TTLs expire.
    // The runtime calls it once watermarks flow between tasks (the event-time work); until
    // then event-time TTLs never expire in a running job, and only tests set it.
    #[allow(dead_code)]
    pub fn set_watermark(&mut self, watermark: i64) {
        self.watermark = watermark;
        if let Backend::Rocks(r) = &self.backend {
            r.set_watermark(watermark);
        }
    }

    /// Whether the state is held in memory: the memory backend, not RocksDB (opened only
    /// when the first state is declared, and counted as such before).
    pub fn in_memory(&self) -> bool {
        matches!(self.backend, Backend::Memory(_)) && self.unopened.is_none()
    }

    /// Whether state `id` has a TTL that is on.
    pub fn has_ttl(&self, id: StateId) -> bool {
        self.ttl(id).is_some()
    }

    /// The TTL of `id`, if it has one that is on.
    fn ttl(&self, id: StateId) -> Option<Ttl> {
        self.states[id.0].ttl.filter(Ttl::active)
    }

    /// The time TTL `ttl` expires against.
    fn now(&self, ttl: &Ttl) -> i64 {
        if ttl.event_time {
            self.watermark
        } else {
            self.clock.now_ms()
        }
    }

    /// The stamp of an entry of `slot`'s key written now.
    fn stamp(&self, ttl: &Ttl, slots: &Slots, slot: usize) -> i64 {
        if !ttl.event_time {
            return self.clock.now_ms();
        }
        match slots.time(slot).max(self.watermark) {
            NO_TIME => NEVER,
            t => t,
        }
    }

    /// Refuses a timer of a key in key group `group` unless this subtask owns the group: a
    /// snapshot keeps only the timers of its own groups.
    pub(crate) fn check_timer_group(&self, group: u32) -> Result<(), StateError> {
        match self.groups.contains(&group) {
            true => Ok(()),
            false => Err(StateError::ForeignTimer {
                group,
                owned: self.groups.clone(),
            }),
        }
    }

    /// Refuses the batch if any of its keys belongs to another subtask.
    fn check_slots(&self, id: StateId, slots: &Slots) -> Result<(), StateError> {
        (0..slots.len() as u32).try_for_each(|slot| self.check_slot(id, slots, slot).map(drop))
    }

    /// The key slot `slot` of `slots` for a read of state `id`, checked to be in the batch
    /// and of this subtask's key groups.
    fn check_slot(&self, id: StateId, slots: &Slots, slot: u32) -> Result<usize, StateError> {
        let slot = slots.check(slot)?;
        let group = slots.group(slot);
        if !self.groups.contains(&group) {
            return Err(StateError::ForeignKey {
                name: self.states[id.0].name.clone(),
                group,
                owned: self.groups.clone(),
            });
        }
        Ok(slot)
    }

    fn commit(&mut self) -> Result<(), StateError> {
        on_backend!(&mut self.backend, b => b.commit())
    }

    /// Calls `f` with every slot's value of value state `id` (`None`: absent or expired).
    pub fn read_values(
        &mut self,
        id: StateId,
        slots: &Slots,
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<(), StateError> {
        self.check_slots(id, slots)?;
        let st = id.0;
        let Some(ttl) = self.ttl(id) else {
            return on_backend!(&mut self.backend, b => b.read_values(st, slots, f));
        };
        self.clean_up_step(id);
        let now = self.now(&ttl);
        let on_read = ttl.update == TtlUpdate::OnReadAndWrite;
        let (mut expired, mut touched) = (Vec::new(), Vec::new());
        on_backend!(&mut self.backend, b => b.read_values(st, slots, |slot, raw| {
            let Some(raw) = raw else {
                return f(slot, None);
            };
            let (stamp, user) = split(raw);
            if ttl.expired(stamp, now) {
                expired.push(slot);
                f(slot, ttl.returns_expired().then_some(user));
            } else {
                if on_read {
                    touched.push((slot, user.to_vec()));
                }
                f(slot, Some(user));
            }
        }))?;
        for slot in expired {
            on_backend!(&mut self.backend, b => b.write_value(st, slots, slot, None))?;
        }
        for (slot, user) in touched {
            let stamp = self.stamp(&ttl, slots, slot);
            let raw = stamped(&mut self.scratch, stamp, &user);
            on_backend!(&mut self.backend, b => b.write_value(st, slots, slot, Some(raw)))?;
        }
        self.commit()
    }

    /// Sets (`Some`) or clears (`None`) the value of each given slot's key.
    pub fn write_values<'v>(
        &mut self,
        id: StateId,
        slots: &Slots,
        changes: impl IntoIterator<Item = (usize, Option<&'v [u8]>)>,
    ) -> Result<(), StateError> {
        self.check_slots(id, slots)?;
        let (st, ttl) = (id.0, self.ttl(id));
        for (slot, v) in changes {
            let v = match (v, &ttl) {
                (Some(v), Some(ttl)) => {
                    let stamp = self.stamp(ttl, slots, slot);
                    Some(stamped(&mut self.scratch, stamp, v) as &[u8])
                }
                (v, _) => v,
            };
            on_backend!(&mut self.backend, b => b.write_value(st, slots, slot, v))?;
        }
        self.commit()
    }

    /// For a read of `slot`'s entries of state `id` with an active TTL: the TTL, the time it
    /// expires against, the stamp a rewrite gets, and whether reads restart it.
    fn read_ttl(&self, id: StateId, slots: &Slots, slot: usize) -> Option<(Ttl, i64, i64, bool)> {
        let ttl = self.ttl(id)?;
        let on_read = ttl.update == TtlUpdate::OnReadAndWrite;
        Some((ttl, self.now(&ttl), self.stamp(&ttl, slots, slot), on_read))
    }

    /// The elements of `slot`'s list in state `id`, expired ones removed (or, with
    /// `return_expired_if_not_cleaned_up`, returned once), in order.
    fn read_list(
        &mut self,
        id: StateId,
        slots: &Slots,
        slot: usize,
        mut f: impl FnMut(&[u8]),
    ) -> Result<(), StateError> {
        let (st, group, key) = (id.0, slots.group(slot), slots.key(slot));
        let Some((ttl, now, stamp, on_read)) = self.read_ttl(id, slots, slot) else {
            return on_backend!(&mut self.backend, b => b.read_list(st, group, key, f));
        };
        let (mut kept, mut changed) = (Vec::new(), on_read);
        on_backend!(&mut self.backend, b => b.read_list(st, group, key, |raw| {
            let (old, user) = split(raw);
            if ttl.expired(old, now) {
                changed = true;
                if ttl.returns_expired() {
                    f(user);
                }
            } else {
                f(user);
                kept.push(if on_read { [&stamp.to_le_bytes()[..], user].concat() } else { raw.to_vec() });
            }
        }))?;
        if changed {
            on_backend!(&mut self.backend, b => b.write_list(st, group, key, true, kept.iter().map(Vec::as_slice)))?;
        }
        Ok(())
    }

    /// Calls `f` with the entries of `slot`'s map in state `id` in key order while it returns
    /// true, with TTL applied as in [`read_list`](Self::read_list) (a read that stops early
    /// restarts no TTL: what it read was not used).
    fn read_map(
        &mut self,
        id: StateId,
        slots: &Slots,
        slot: usize,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        let (st, group, key) = (id.0, slots.group(slot), slots.key(slot));
        let Some((ttl, now, stamp, on_read)) = self.read_ttl(id, slots, slot) else {
            return on_backend!(&mut self.backend, b => b.read_map(st, group, key, f));
        };
        let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let mut whole = true;
        on_backend!(&mut self.backend, b => b.read_map(st, group, key, |mk, raw| {
            let (old, user) = split(raw);
            if ttl.expired(old, now) {
                changes.push((mk.to_vec(), None));
                if ttl.returns_expired() {
                    whole = f(mk, user);
                }
            } else {
                whole = f(mk, user);
                if on_read {
                    changes.push((mk.to_vec(), Some([&stamp.to_le_bytes()[..], user].concat())));
                }
            }
            whole
        }))?;
        if !whole {
            changes.retain(|(_, v)| v.is_none());
        }
        if !changes.is_empty() {
            let changes = changes.iter().map(|(k, v)| (&k[..], v.as_deref()));
            on_backend!(&mut self.backend, b => b.write_map(st, group, key, false, changes))?;
        }
        Ok(())
    }

    /// Writes `slot`'s map of state `id` in the load encoding, `u32 n` and the entries, or
    /// [`LARGE_MAP`] and the number of entries read so far if they take more than `max_map`
    /// bytes.
    fn put_map(
        &mut self,
        id: StateId,
        slots: &Slots,
        slot: usize,
        max_map: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(), StateError> {
        let (st, group, key) = (id.0, slots.group(slot), slots.key(slot));
        if max_map == MAP_LOAD_LIMIT && self.ttl(id).is_none() {
            let known = match &mut self.backend {
                Backend::Memory(m) => m.large_map(st, group, key),
                Backend::Rocks(r) => r.large_map(st, group, key),
            };
            if let Some(n) = known {
                put_u32(buf, LARGE_MAP);
                put_u32(buf, n);
                return Ok(());
            }
        }
        let at = buf.len();
        put_u32(buf, 0);
        let (mut n, mut fits) = (0u32, true);
        self.read_map(id, slots, slot, |k, v| {
            put_bytes(buf, k);
            put_bytes(buf, v);
            n += 1;
            fits = buf.len() - at - 4 <= max_map;
            fits
        })?;
        if fits {
            buf[at..at + 4].copy_from_slice(&n.to_le_bytes());
        } else {
            buf.truncate(at);
            put_u32(buf, LARGE_MAP);
            put_u32(buf, n);
            let remember = max_map == MAP_LOAD_LIMIT && self.ttl(id).is_none();
            if let (Backend::Rocks(r), true) = (&mut self.backend, remember) {
                r.note_large_map(st, group, key, n);
            }
        }
        Ok(())
    }

    /// The value of map key `map_key` in `slot`'s map of state `id` (`map-state.get`), with
    /// TTL applied as a load applies it.
    pub fn map_get(
        &mut self,
        id: StateId,
        slots: &Slots,
        slot: u32,
        map_key: &[u8],
    ) -> Result<Option<Vec<u8>>, StateError> {
        let slot = self.check_slot(id, slots, slot)?;
        let (st, group, key) = (id.0, slots.group(slot), slots.key(slot));
        let raw = on_backend!(&mut self.backend, b => b.map_get(st, group, key, map_key, |v| v.map(<[u8]>::to_vec)))?;
        let Some((ttl, now, stamp, on_read)) = self.read_ttl(id, slots, slot) else {
            return Ok(raw);
        };
        let Some(raw) = raw else {
            return Ok(None);
        };
        let (old, user) = split(&raw);
        let (answer, change) = if ttl.expired(old, now) {
            (ttl.returns_expired().then(|| user.to_vec()), Some(None))
        } else if on_read {
            let refreshed = [&stamp.to_le_bytes()[..], user].concat();
            (Some(user.to_vec()), Some(Some(refreshed)))
        } else {
            (Some(user.to_vec()), None)
        };
        if let Some(v) = change {
            let change = [(map_key, v.as_deref())];
            on_backend!(&mut self.backend, b => b.write_map(st, group, key, false, change))?;
            self.commit()?;
        }
        Ok(answer)
    }

    /// `slot`'s whole map of state `id` in the load encoding (`map-state.entries`).
    pub fn map_entries(
        &mut self,
        id: StateId,
        slots: &Slots,
        slot: u32,
        buf: &mut Vec<u8>,
    ) -> Result<(), StateError> {
        let slot = self.check_slot(id, slots, slot)?;
        self.clean_up_step(id);
        self.put_map(id, slots, slot, usize::MAX, buf)?;
        self.commit()
    }

    /// The `load` buffer of the WIT contract for state `id`: every slot's value, list or map,
    /// maps of more than `max_map` bytes as [`LARGE_MAP`] (guests get [`MAP_LOAD_LIMIT`]; the
    /// host's own operators, which read maps whole, `usize::MAX`).
    pub fn load(
        &mut self,
        id: StateId,
        slots: &Slots,
        max_map: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(), StateError> {
        let kind = self.kind(id);
        if kind == StateKind::Value {
            return self.read_values(id, slots, |_, v| put_opt_bytes(buf, v));
        }
        self.check_slots(id, slots)?;
        self.clean_up_step(id);
        let ttl = self.ttl(id);
        for slot in 0..slots.len() {
            if let (Backend::Memory(m), None) = (&self.backend, ttl) {
                // Kept as the answer encodes it: one copy per key.
                let (group, key) = (slots.group(slot), slots.key(slot));
                let packed = match kind {
                    StateKind::List => Some(m.list(id.0, group, key)),
                    _ => m.map(id.0, group, key).map_or(Some(None), |map| {
                        map.packed()
                            .filter(|p| p.as_bytes().len() <= max_map)
                            .map(Some)
                    }),
                };
                if let Some(packed) = packed {
                    put_u32(buf, packed.map_or(0, Packed::len));
                    buf.extend_from_slice(packed.map_or(&[], Packed::as_bytes));
                    continue;
                }
            }
            if kind == StateKind::Map {
                self.put_map(id, slots, slot, max_map, buf)?;
                continue;
            }
            // `u32 n`, then the n elements.
            let at = buf.len();
            put_u32(buf, 0);
            let mut n = 0u32;
            self.read_list(id, slots, slot, |e| {
                put_bytes(buf, e);
                n += 1;
            })?;
            buf[at..at + 4].copy_from_slice(&n.to_le_bytes());
        }
        self.commit()
    }

    /// Applies a `store` buffer of the WIT contract to state `id`, refusing any value (list
    /// element, map key plus value) longer than `max_value` bytes.
    pub fn store(
        &mut self,
        id: StateId,
        slots: &Slots,
        changes: &[u8],
        max_value: u64,
    ) -> Result<(), StateError> {
        self.check_slots(id, slots)?;
        let name = &self.states[id.0].name;
        let bad = |cause| StateError::Decode {
            name: name.clone(),
            cause,
        };
        let too_large = |slot, len: usize| {
            (len as u64 > max_value).then(|| StateError::TooLarge {
                name: name.clone(),
                slot,
                len,
            })
        };
        match self.kind(id) {
            StateKind::Value => {
                let mut ops = Vec::with_capacity(slots.len());
                for op in read_value_ops(changes) {
                    let (slot, op) = op.map_err(bad)?;
                    let v = match op {
                        ValueOp::Set(v) => Some(v),
                        ValueOp::Clear => None,
                    };
                    if let Some(e) = too_large(slot, v.map_or(0, <[u8]>::len)) {
                        return Err(e);
                    }
                    ops.push((slots.check(slot)?, v));
                }
                self.write_values(id, slots, ops)
            }
            // A slot's ops come one after another (the SDK sends them so): each run of ops of
            // one slot is one backend write. Ops of a slot spread over several runs are
            // written run after run, which applies them in order all the same.
            StateKind::List => {
                // A run and an element per slot, usually: sized so, they need not grow.
                let (mut runs, mut elems) = (
                    Vec::<Run>::with_capacity(slots.len()),
                    Vec::<&[u8]>::with_capacity(slots.len()),
                );
                for op in read_list_ops(changes) {
                    let (slot, op) = op.map_err(bad)?;
                    let run = Run::of(&mut runs, slots.check(slot)?, elems.len());
                    let added = match op {
                        ListOp::Clear => None,
                        ListOp::Replace(new) => Some(new),
                        ListOp::Append(new) => {
                            elems.extend(new);
                            run.end = elems.len();
                            continue;
                        }
                    };
                    // Clear or replace: what the run added before is gone.
                    elems.truncate(run.start);
                    run.clear = true;
                    elems.extend(added.into_iter().flatten());
                    run.end = elems.len();
                }
                if let Some(e) = runs.iter().find_map(|r| {
                    elems[r.start..r.end]
                        .iter()
                        .find_map(|e| too_large(r.slot as u32, e.len()))
                }) {
                    return Err(e);
                }
                let ttl = self.ttl(id);
                for r in runs {
                    let (group, key) = (slots.group(r.slot), slots.key(r.slot));
                    let elems = &elems[r.start..r.end];
                    match &ttl {
                        Some(ttl) => {
                            let stamp = self.stamp(ttl, slots, r.slot).to_le_bytes();
                            let elems: Vec<Vec<u8>> =
                                elems.iter().map(|e| [&stamp[..], e].concat()).collect();
                            let elems = elems.iter().map(Vec::as_slice);
                            on_backend!(&mut self.backend, b => b.write_list(id.0, group, key, r.clear, elems))?;
                        }
                        None => {
                            let elems = elems.iter().copied();
                            on_backend!(&mut self.backend, b => b.write_list(id.0, group, key, r.clear, elems))?;
                        }
                    }
                }
                self.commit()
            }
            StateKind::Map => {
                let (mut runs, mut entries) = (
                    Vec::<Run>::with_capacity(slots.len()),
                    Vec::with_capacity(slots.len()),
                );
                for op in read_map_ops(changes) {
                    let (slot, op) = op.map_err(bad)?;
                    let run = Run::of(&mut runs, slots.check(slot)?, entries.len());
                    match op {
                        MapOp::Clear => {
                            entries.truncate(run.start);
                            run.clear = true;
                        }
                        MapOp::Put(k, v) => {
                            if let Some(e) = too_large(slot, k.len() + v.len()) {
                                return Err(e);
                            }
                            entries.push((k, Some(v)));
                        }
                        MapOp::Remove(k) => entries.push((k, None)),
                    }
                    run.end = entries.len();
                }
                let ttl = self.ttl(id);
                let mut written = vec![false; slots.len()];
                for r in runs {
                    // A clear finds the entries to drop in the backend: the slot's earlier
                    // run must be there (RocksDB keeps puts in a write batch until a commit).
                    if std::mem::replace(&mut written[r.slot], true) && r.clear {
                        self.commit()?;
                    }
                    let (group, key) = (slots.group(r.slot), slots.key(r.slot));
                    let entries = &entries[r.start..r.end];
                    match &ttl {
                        Some(ttl) => {
                            let stamp = self.stamp(ttl, slots, r.slot).to_le_bytes();
                            let entries: Vec<(&[u8], Option<Vec<u8>>)> = entries
                                .iter()
                                .map(|(k, v)| (*k, v.map(|v| [&stamp[..], v].concat())))
                                .collect();
                            let entries = entries.iter().map(|(k, v)| (*k, v.as_deref()));
                            on_backend!(&mut self.backend, b => b.write_map(id.0, group, key, r.clear, entries))?;
                        }
                        None => {
                            let entries = entries.iter().copied();
                            on_backend!(&mut self.backend, b => b.write_map(id.0, group, key, r.clear, entries))?;
                        }
                    }
                }
                self.commit()
            }
        }
    }

    /// Incremental TTL cleanup of the memory backend: each read of a state with a TTL also
    /// drops the expired entries of the next key group of that state. (RocksDB drops them in
    /// compaction instead.)
    fn clean_up_step(&mut self, id: StateId) {
        let Some(ttl) = self.ttl(id) else {
            return;
        };
        let now = self.now(&ttl);
        let Backend::Memory(m) = &mut self.backend else {
            return;
        };
        let group = self.cleanup_cursor;
        self.cleanup_cursor = if group + 1 >= self.groups.end {
            self.groups.start
        } else {
            group + 1
        };
        m.retain(id.0, group, |raw| !ttl.expired(split(raw).0, now));
    }

    /// Every live entry of every state, as `(state, key, rendered value)`, sorted: for tests
    /// that compare two stores.
    #[cfg(test)]
    pub(crate) fn dump(&mut self) -> Vec<(String, Vec<u8>, String)> {
        on_backend!(&mut self.backend, b => b.flush()).unwrap();
        let mut out = Vec::new();
        for (i, d) in self.states.iter().enumerate() {
            for group in self.groups.clone() {
                let mut rows: std::collections::BTreeMap<Vec<u8>, Vec<String>> = Default::default();
                on_backend!(&self.backend, b => b.scan(i, group, &mut |key: &[u8], row: Row<'_>| {
                    let r = match row {
                        Row::Value(v) | Row::Element(v) => format!("{v:?}"),
                        Row::Entry(k, v) => format!("{k:?}={v:?}"),
                    };
                    rows.entry(key.to_vec()).or_default().push(r);
                }))
                .unwrap();
                out.extend(
                    rows.into_iter()
                        .map(|(k, r)| (d.name.clone(), k, r.join(","))),
                );
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests;

/// Asks the CPU to start loading the cache line of `value`, without waiting for it.
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees, cannot fault and
    // changes no memory; the pointer comes from a live reference besides.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
