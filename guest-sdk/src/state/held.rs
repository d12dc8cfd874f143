//! A value state's values kept from batch to batch: a write-back cache in the guest, kept
//! only where the host advises it (`state.write-back-advised`: its state is not in memory).
//!
//! Without it, every batch loads the value of each of its keys from the host and stores the
//! changes back, so a key that comes in every batch (the common word of a word count) crosses
//! the boundary twice per batch. With it, a batch asks the host only for the keys the cache
//! does not hold (`value-state.load-slots`) and keeps its changes; they go back to the host
//! (`value-state.store-ids`) when the cache is over its budget (which then starts empty),
//! when the instance closes, and when the host sends the write-back batch, before every
//! snapshot of the operator's state. The host is the only other writer of a state without
//! a TTL and writes none of its values, so what the cache holds is what the host would
//! answer.
//!
//! Values are kept by the host's id of their key (`state.key-ids`, [`KeyIds`]), in a vector:
//! the guest neither hashes nor stores keys. The host starts its ids over after the forget
//! batch, when the cache forgets everything it holds.

use weir_wire::{ValueOp, put_value_op, put_value_set_short};

use super::codec::{Int, int_bytes};
use crate::backend::Backend;

/// What one kept value costs beyond its bytes, for the budget.
const VALUE_COST: usize = 40;

/// The host's ids of the current batch's keys, asked for once per batch that uses a state
/// with a cache.
#[derive(Default)]
pub(crate) struct KeyIds {
    /// The batch the ids are of (`Core::epoch`; 0: none yet).
    epoch: u64,
    ids: Vec<u32>,
}

impl KeyIds {
    /// The id of each key slot of batch `epoch`, whose keys are `keys`.
    pub(crate) fn of_batch(
        &mut self,
        epoch: u64,
        backend: &mut dyn Backend,
        keys: &[&[u8]],
    ) -> Result<&[u32], String> {
        if self.epoch != epoch {
            self.ids = backend.key_ids(keys);
            self.epoch = epoch;
        }
        if self.ids.len() != keys.len() {
            return Err(format!(
                "weir-sdk: the host sent {} key ids for a batch of {} keys",
                self.ids.len(),
                keys.len()
            ));
        }
        Ok(&self.ids)
    }
}

/// A value as the cache keeps it.
#[derive(Debug, Default)]
pub(crate) enum Kept {
    /// Not held: the host has it.
    #[default]
    Unknown,
    Absent,
    Unsigned(u64),
    Negative(i64),
    Bytes(Vec<u8>),
}

#[derive(Default)]
pub(crate) struct Held {
    /// By key id.
    vals: Vec<Kept>,
    /// Ids changed since they were last written back, and whether each id is among them.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// What the values cost, against `budget`.
    cost: usize,
    budget: usize,
}

impl Held {
    pub(crate) fn new(budget: usize) -> Self {
        Held {
            budget,
            ..Held::default()
        }
    }

    /// The value of key id `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> &Kept {
        static UNKNOWN: Kept = Kept::Unknown;
        self.vals.get(id as usize).unwrap_or(&UNKNOWN)
    }

    fn grow(&mut self, id: u32) {
        let len = id as usize + 1;
        if self.vals.len() < len {
            self.cost += (len - self.vals.len()) * VALUE_COST;
            self.vals.resize_with(len, Kept::default);
            self.is_dirty.resize(len, false);
        }
    }

    /// Holds `kept`, as the host has it, for key id `id`.
    pub(crate) fn hold(&mut self, id: u32, kept: Kept) {
        self.grow(id);
        let val = &mut self.vals[id as usize];
        self.cost = self.cost + kept_len(&kept) - kept_len(val);
        *val = kept;
    }

    /// Changes the value of key id `id` to what `write` makes of it, to be written back.
    pub(crate) fn change(&mut self, id: u32, write: impl FnOnce(&mut Kept)) {
        self.grow(id);
        let i = id as usize;
        let before = kept_len(&self.vals[i]);
        write(&mut self.vals[i]);
        self.cost = self.cost + kept_len(&self.vals[i]) - before;
        if !std::mem::replace(&mut self.is_dirty[i], true) {
            self.dirty.push(id);
        }
    }

    pub(crate) fn over_budget(&self) -> bool {
        self.cost > self.budget
    }

    pub(crate) fn has_changes(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Writes every change held into `out` in the store encoding with key ids for slots;
    /// they are then clean.
    pub(crate) fn write_back(&mut self, out: &mut Vec<u8>) {
        for id in self.dirty.drain(..) {
            self.is_dirty[id as usize] = false;
            match &self.vals[id as usize] {
                Kept::Absent => put_value_op(out, id, ValueOp::Clear),
                Kept::Bytes(v) => put_value_op(out, id, ValueOp::Set(v)),
                Kept::Unsigned(n) => put_int(out, id, Int::Unsigned(*n)),
                Kept::Negative(n) => put_int(out, id, Int::Negative(*n)),
                Kept::Unknown => unreachable!("a changed value is known"),
            }
        }
    }

    /// Forgets every value (written back before).
    pub(crate) fn forget(&mut self) {
        debug_assert!(self.dirty.is_empty(), "changes are written back first");
        self.vals.clear();
        self.is_dirty.clear();
        self.cost = 0;
    }
}

fn put_int(out: &mut Vec<u8>, id: u32, int: Int) {
    let (bytes, len) = int_bytes(int);
    put_value_set_short(out, id, &bytes, len);
}

fn kept_len(k: &Kept) -> usize {
    match k {
        Kept::Bytes(v) => v.len(),
        _ => 0,
    }
}
