//! Keyed state as an operator sees it: typed handles over per-batch caches.
//!
//! The host ships state "in" per batch and takes a diff "out" (see `wit/stream.wit`). For each
//! state used in a batch the SDK keeps a [`StateEntry`]: the first read calls `load()` once
//! and keeps the answer (`Batch::buf`) with per-key-slot spans into it (a value state's
//! integers decoded); writes are encoded once into an arena (integers held decoded) and
//! recorded per slot; at the end of the batch the changes of every touched slot go back in one
//! `store()`. Nothing is hashed or allocated per record in the
//! steady state: slot tables, arenas and overlay lists are reused from batch to batch.
//!
//! Where the host advises it (its state is not in memory), a value state without a TTL also
//! keeps its values from batch to batch (`held`, up to
//! [`Operator::STATE_CACHE_BYTES`](crate::Operator::STATE_CACHE_BYTES)): its first read in a
//! batch asks the host only for the keys it does not hold, and its changes stay in the guest
//! until the host asks for them before a checkpoint.

pub(crate) mod codec;
mod handle;
mod held;
mod list;
mod map;
mod operator;
mod value;

pub(crate) use held::KeyIds;

pub use handle::{ListStateHandle, MapStateHandle, StateHandle, ValueStateHandle};
pub use list::ListState;
pub use map::MapState;
pub use operator::{OperatorListState, OperatorState, Redistribution};
pub use value::ValueState;

use list::ListCache;
use map::MapCache;
use value::ValueCache;

pub use codec::{Codec, CodecError};

use weir_wire::eq_bytes;

use std::cell::RefCell;

use crate::backend::{Backend, StateKind};
use crate::runtime::{Core, borrow_core};
use crate::{Error, Result, Ttl};

/// A state declared by this instance, with its cache for the current batch.
pub(crate) struct StateEntry {
    pub(crate) name: String,
    pub(crate) kind: StateKind,
    pub(crate) ttl: Option<Ttl>,
    pub(crate) codec: Codec,
    handle: usize,
    /// The batch the cache belongs to; a stale cache is reset on first use.
    epoch: u64,
    batch: Batch,
    cache: Cache,
}

/// The buffers of one state in one batch, shared by all kinds.
#[derive(Default)]
pub(crate) struct Batch {
    loaded: bool,
    /// The answer of `load()`.
    buf: Vec<u8>,
    /// Values written in this batch, encoded back to back.
    arena: Vec<u8>,
    /// Slots with changes, in the order they were first changed: the first `n_touched`.
    touched: Vec<u32>,
    n_touched: usize,
    is_touched: Vec<bool>,
}

impl Batch {
    fn reset(&mut self, n_keys: usize) {
        self.loaded = false;
        self.buf = Vec::new();
        self.arena.clear();
        // One more than the slots: `touch` writes one past the last slot touched.
        self.touched.clear();
        self.touched.resize(n_keys + 1, 0);
        self.n_touched = 0;
        self.is_touched.clear();
        self.is_touched.resize(n_keys, false);
    }

    /// Slots with changes, in the order they were first changed.
    fn touched(&self) -> &[u32] {
        &self.touched[..self.n_touched]
    }

    // Without a branch on whether `slot` was touched before: per record that is as good as
    // random (a word's first occurrence in the batch or not), and a mispredicted branch
    // costs more than the stores.
    #[inline(always)]
    fn touch(&mut self, slot: u32) {
        let before = std::mem::replace(&mut self.is_touched[slot as usize], true);
        self.touched[self.n_touched] = slot;
        self.n_touched += usize::from(!before);
    }
}

/// Per-slot lists of this batch's changes, taken from a pool that is reused from batch to
/// batch, so a slot's first change in a batch allocates nothing in the steady state. A slot
/// refers to its list by index, [`Overlays::NONE`] when it has none.
pub(crate) struct Overlays<T> {
    lists: Vec<Vec<T>>,
    /// The first `used` lists belong to this batch.
    used: usize,
}

impl<T> Default for Overlays<T> {
    fn default() -> Self {
        Overlays {
            lists: Vec::new(),
            used: 0,
        }
    }
}

impl<T> Overlays<T> {
    pub(crate) const NONE: u32 = u32::MAX;

    pub(crate) fn reset(&mut self) {
        self.used = 0;
    }

    /// The list at `*index`, giving the slot an empty one first if it has none.
    pub(crate) fn get_mut(&mut self, index: &mut u32) -> &mut Vec<T> {
        if *index == Self::NONE {
            if self.used == self.lists.len() {
                self.lists.push(Vec::new());
            }
            self.lists[self.used].clear();
            *index = self.used as u32;
            self.used += 1;
        }
        &mut self.lists[*index as usize]
    }

    pub(crate) fn get(&self, index: u32) -> &[T] {
        match index {
            Self::NONE => &[],
            i => &self.lists[i as usize],
        }
    }
}

enum Cache {
    Value(ValueCache),
    List(ListCache),
    Map(MapCache),
}

impl StateEntry {
    /// A state whose values, for a value state, are kept from batch to batch up to
    /// `held_bytes` (0: never; see [`declare`]).
    pub(crate) fn new(
        name: &str,
        kind: StateKind,
        ttl: Option<Ttl>,
        codec: Codec,
        handle: usize,
        held_bytes: usize,
    ) -> Self {
        let held = (held_bytes > 0).then_some(held_bytes);
        StateEntry {
            name: name.to_owned(),
            kind,
            ttl,
            codec,
            handle,
            epoch: 0,
            batch: Batch::default(),
            cache: match kind {
                StateKind::Value => Cache::Value(ValueCache::new(held)),
                StateKind::List => Cache::List(ListCache::default()),
                StateKind::Map => Cache::Map(MapCache::default()),
            },
        }
    }

    /// Whether this is the state `name` declared with `kind`, `ttl` and `codec`.
    #[inline(always)]
    pub(crate) fn is(&self, name: &str, kind: StateKind, ttl: Option<Ttl>, codec: Codec) -> bool {
        eq_bytes(self.name.as_bytes(), name.as_bytes())
            && self.kind == kind
            && self.ttl == ttl
            && self.codec == codec
    }

    pub(crate) fn handle(&self) -> usize {
        self.handle
    }

    #[inline(always)]
    fn begin(&mut self, epoch: u64, n_keys: usize) {
        if self.epoch == epoch {
            return;
        }
        self.epoch = epoch;
        self.batch.reset(n_keys);
        match &mut self.cache {
            Cache::Value(c) => c.reset(n_keys),
            Cache::List(c) => c.reset(n_keys),
            Cache::Map(c) => c.reset(n_keys),
        }
    }

    /// Whether batch `epoch` changed the state and its write-back cache keeps the changes
    /// ([`finish`](Self::finish) then needs the batch's key ids).
    pub(crate) fn keeps_changes(&self, epoch: u64) -> bool {
        self.epoch == epoch
            && self.batch.n_touched > 0
            && matches!(&self.cache, Cache::Value(c) if c.held.is_some())
    }

    /// Ends the batch of the state: writes its changes into `out` (cleared first) in the
    /// encoding of the host call that takes them, or keeps them in its write-back cache
    /// (`ids`: the key ids of the batch's slots, when it [`keeps_changes`](Self::keeps_changes)).
    pub(crate) fn finish(&mut self, epoch: u64, ids: &[u32], out: &mut Vec<u8>) -> Changes {
        out.clear();
        if self.epoch != epoch || self.batch.n_touched == 0 {
            return Changes::None;
        }
        match &mut self.cache {
            Cache::Value(c) if c.held.is_some() => {
                if !c.keep_changes(&self.batch, ids) {
                    return Changes::None;
                }
                let held = c.held.as_mut().expect("checked");
                held.write_back(out);
                held.forget();
                return Changes::ById;
            }
            Cache::Value(c) => c.write_changes(&self.batch, out),
            Cache::List(c) => c.write_changes(&self.batch, out),
            Cache::Map(c) => c.write_changes(&self.batch, out),
        }
        match out.is_empty() {
            true => Changes::None,
            false => Changes::BySlot,
        }
    }

    /// Writes the changes its write-back cache holds into `out` (cleared first), and forgets
    /// what it holds if `forget`; false when it had no changes.
    pub(crate) fn write_back(&mut self, forget: bool, out: &mut Vec<u8>) -> bool {
        out.clear();
        let Cache::Value(ValueCache {
            held: Some(held), ..
        }) = &mut self.cache
        else {
            return false;
        };
        let changed = held.has_changes();
        held.write_back(out);
        if forget {
            held.forget();
        }
        changed
    }
}

/// What a state did with a batch's changes ([`StateEntry::finish`]).
pub(crate) enum Changes {
    /// None to send (none, or kept in the write-back cache).
    None,
    /// For `store`.
    BySlot,
    /// For `store-ids`: the write-back cache was over its budget, and is empty now.
    ById,
}

/// Declares keyed state `name` of `kind` with `ttl` in `codec` (`None`: the operator's), or
/// finds it declared the same way before: its index in `Core::states`, or why it cannot be.
#[cold]
pub(crate) fn declare(
    core: &RefCell<Core>,
    name: &str,
    kind: StateKind,
    ttl: Option<Ttl>,
    codec: Option<Codec>,
) -> std::result::Result<usize, String> {
    let mut core = borrow_core(core).map_err(|e| e.to_string())?;
    let codec = codec.unwrap_or(core.codec);
    if let Some(i) = core.states.iter().position(|s| s.name == name) {
        let s = &core.states[i];
        if s.codec != codec {
            return Err(format!(
                "state \"{name}\" was declared with codec {:?} but is used here with \
                 {codec:?}; a state has one codec (move it to another under a new name)",
                s.codec
            ));
        }
        if s.kind != kind {
            return Err(format!(
                "state \"{name}\" is a {} state but is used here as a {kind} state; \
                 give the {kind} state another name",
                s.kind
            ));
        }
        if s.ttl != ttl {
            return Err(format!(
                "state \"{name}\" was declared with TTL {:?} but is used here with TTL \
                 {ttl:?}; declare it the same way everywhere",
                s.ttl
            ));
        }
        return Ok(i);
    }
    let handle = core.backend.declare_state(kind, name, ttl.as_ref());
    let held_bytes = match (kind, ttl) {
        (StateKind::Value, None) => core.held_bytes(),
        _ => 0,
    };
    core.states
        .push(StateEntry::new(name, kind, ttl, codec, handle, held_bytes));
    Ok(core.states.len() - 1)
}

/// What a typed handle resolved its name to: an index into the instance's states, or the
/// reason it cannot be used (reported by every operation on it).
#[derive(Debug)]
pub(crate) struct StateId(pub(crate) std::result::Result<usize, String>);

/// One state of the current batch, at the current key slot.
pub(crate) struct Access<'x> {
    pub(crate) name: &'x str,
    pub(crate) slot: u32,
    pub(crate) codec: Codec,
    batch: &'x mut Batch,
    cache: &'x mut Cache,
    handle: usize,
    backend: &'x mut dyn Backend,
    keys: &'x [&'x [u8]],
    key_ids: &'x mut KeyIds,
    epoch: u64,
}

impl<'x> Access<'x> {
    /// Binds the entry to the current batch and slot.
    #[inline(always)]
    pub(crate) fn new(
        entry: &'x mut StateEntry,
        epoch: u64,
        slot: Option<u32>,
        backend: &'x mut dyn Backend,
        keys: &'x [&'x [u8]],
        key_ids: &'x mut KeyIds,
    ) -> Result<Self> {
        let Some(slot) = slot.filter(|&s| (s as usize) < keys.len()) else {
            return Err(Error::msg(format!(
                "state \"{}\" is keyed state, but the current record has no key; key the \
                 stream (key_by) before this operator, or do not use keyed state for records \
                 without a key",
                entry.name
            )));
        };
        entry.begin(epoch, keys.len());
        Ok(Access {
            name: &entry.name,
            slot,
            codec: entry.codec,
            batch: &mut entry.batch,
            cache: &mut entry.cache,
            handle: entry.handle,
            backend,
            keys,
            key_ids,
            epoch,
        })
    }

    /// Calls `load()` unless this batch already did.
    // Inline, with the load itself in a function of the parts it needs: an `Access` whose
    // address reaches a function left out of line lives in the guest's shadow stack rather
    // than in registers, and every state call then writes its fields to memory and reads
    // them back (the word count's counter: 613 instructions per record before, 551 after).
    #[inline(always)]
    fn ensure_loaded(&mut self) -> Result<()> {
        if self.batch.loaded {
            return Ok(());
        }
        load(
            self.batch,
            self.cache,
            self.backend,
            self.handle,
            self.keys,
            (self.key_ids, self.epoch),
            self.name,
            self.codec,
        )
    }
}

/// Calls `load()` for the batch's keys and keeps the answer in `batch` (for a state with a
/// write-back cache, `load-slots()` of what the cache does not hold, by the batch's
/// `key_ids`).
#[allow(clippy::too_many_arguments)]
fn load(
    batch: &mut Batch,
    cache: &mut Cache,
    backend: &mut dyn Backend,
    handle: usize,
    keys: &[&[u8]],
    (key_ids, epoch): (&mut KeyIds, u64),
    name: &str,
    codec: Codec,
) -> Result<()> {
    let buf = match cache {
        Cache::Value(c) if c.held.is_some() => {
            let ids = key_ids.of_batch(epoch, backend, keys).map_err(Error::msg)?;
            c.load_held(backend, handle, keys, ids, codec)
                .map_err(|e| load_error(e, name, keys.len()))?;
            batch.loaded = true;
            return Ok(());
        }
        _ => backend.load(handle, keys),
    };
    let parsed = match cache {
        Cache::Value(c) => c.apply_load(&buf, codec),
        Cache::List(c) => c.apply_load(&buf),
        Cache::Map(c) => c.apply_load(&buf),
    };
    parsed.map_err(|e| load_error(e, name, keys.len()))?;
    batch.buf = buf;
    batch.loaded = true;
    Ok(())
}

fn load_error(e: weir_wire::DecodeError, name: &str, n_keys: usize) -> Error {
    Error::new(e).context(format!(
        "state \"{name}\": the host's load() answer does not match the batch's {n_keys} keys"
    ))
}

fn encode_error(name: &str, e: CodecError) -> Error {
    Error::new(e).context(format!("state \"{name}\": cannot encode the value"))
}

fn decode_error(name: &str, e: CodecError) -> Error {
    Error::new(e).context(format!(
        "state \"{name}\": the stored bytes do not decode as the type this operator reads them \
         as (was the state written by a version of the operator with another type, or with \
         another codec? see weir_sdk::Codec)"
    ))
}

/// Rejects buffers with bytes after the last key slot's entry.
fn expect_end(
    r: &weir_wire::Reader<'_>,
    buf: &[u8],
) -> std::result::Result<(), weir_wire::DecodeError> {
    if r.is_empty() {
        Ok(())
    } else {
        Err(weir_wire::DecodeError {
            what: "state load (bytes after the last key slot)",
            offset: buf.len(),
        })
    }
}
