//! `ValueState<T>`: one value per key.

use std::borrow::Borrow;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_wire::{DecodeError, Reader, ValueOp, put_value_op, put_value_set_short};

use super::codec::{Codec, Int, Span, cbor_int, decode, decode_int, encode, int_bytes, int_of};
use super::held::{Held, Kept};
use super::{Access, Batch, Cache, StateId, decode_error, encode_error, expect_end};
use crate::backend::Backend;
use crate::{Context, Result};

#[derive(Clone, Copy, Debug, Default)]
enum Val {
    /// Not loaded and not written in this batch.
    #[default]
    Unknown,
    Absent,
    /// In the load answer.
    Stored(Span),
    /// In the arena.
    Written(Span),
    /// A CBOR integer (the commonest value: counts, sums, timestamps), loaded or set in this
    /// batch: reading and writing it neither decodes nor encodes, nor branches on the length
    /// of its encoding, which is as good as random per record. Two variants rather than one
    /// of an [`Int`], so that a slot takes 16 bytes rather than 24: the slots are read in
    /// the order of the batch's keys, as good as random, and fewer cache lines are missed.
    Unsigned(u64),
    Negative(i64),
    /// Bytes the state's write-back cache holds for this key id.
    Held(u32),
}

const _: () = assert!(std::mem::size_of::<Val>() == 16);

impl Val {
    #[inline(always)]
    fn of_int(int: Int) -> Val {
        match int {
            Int::Unsigned(n) => Val::Unsigned(n),
            Int::Negative(n) => Val::Negative(n),
        }
    }
}

impl Val {
    /// A slot's value from what the cache holds for key id `id` (known).
    fn of_kept(kept: &Kept, id: u32) -> Val {
        match kept {
            Kept::Absent => Val::Absent,
            Kept::Unsigned(n) => Val::Unsigned(*n),
            Kept::Negative(n) => Val::Negative(*n),
            Kept::Bytes(_) => Val::Held(id),
            Kept::Unknown => Val::Unknown,
        }
    }
}

#[derive(Default)]
pub(crate) struct ValueCache {
    slots: Vec<Val>,
    /// The values kept from batch to batch (see `held`), for a state without a TTL.
    pub(super) held: Option<Held>,
    /// Reused: the slots a batch asks the host for.
    misses: Vec<u32>,
}

impl ValueCache {
    /// A cache of a state whose values are kept from batch to batch up to `held_bytes`
    /// (none: loaded and stored in every batch).
    pub(super) fn new(held_bytes: Option<usize>) -> Self {
        ValueCache {
            held: held_bytes.map(Held::new),
            ..ValueCache::default()
        }
    }

    pub(super) fn reset(&mut self, n_keys: usize) {
        self.slots.clear();
        self.slots.resize(n_keys, Val::Unknown);
    }

    /// The bytes of a [`Val::Held`].
    fn held_bytes(&self, id: u32) -> &[u8] {
        match self.held.as_ref().map(|h| h.get(id)) {
            Some(Kept::Bytes(v)) => v,
            _ => unreachable!("a held slot refers to bytes the cache holds"),
        }
    }

    /// Fills the slots this batch has not written from the load answer, integers of a state
    /// in `codec` CBOR decoded.
    pub(super) fn apply_load(
        &mut self,
        buf: &[u8],
        codec: Codec,
    ) -> std::result::Result<(), DecodeError> {
        let mut r = Reader::new(buf, "value-state load");
        for slot in &mut self.slots {
            let stored = r.opt_bytes()?;
            if let Val::Unknown = slot {
                *slot = match stored {
                    Some(bytes) => match cbor_int(bytes).filter(|_| codec == Codec::Cbor) {
                        Some(int) => Val::of_int(int),
                        None => Val::Stored(Span::of(buf, bytes)),
                    },
                    None => Val::Absent,
                };
            }
        }
        expect_end(&r, buf)
    }

    /// Fills the slots this batch has not written from the write-back cache, and those it
    /// does not hold from the host (`load-slots`), which it then holds. `ids`: the key id
    /// of each slot.
    pub(super) fn load_held(
        &mut self,
        backend: &mut dyn Backend,
        handle: usize,
        keys: &[&[u8]],
        ids: &[u32],
        codec: Codec,
    ) -> std::result::Result<(), DecodeError> {
        let ValueCache {
            slots,
            held,
            misses,
        } = self;
        let held = held.as_mut().expect("a state with a write-back cache");
        misses.clear();
        for ((slot, val), &id) in slots.iter_mut().enumerate().zip(ids) {
            if let Val::Unknown = val {
                *val = Val::of_kept(held.get(id), id);
                if let Val::Unknown = val {
                    misses.push(slot as u32);
                }
            }
        }
        if misses.is_empty() {
            return Ok(());
        }
        let buf = backend.load_slots(handle, keys, misses);
        let mut r = Reader::new(&buf, "value-state load-slots");
        for &slot in misses.iter() {
            let kept = match r.opt_bytes()? {
                None => Kept::Absent,
                Some(bytes) => match cbor_int(bytes).filter(|_| codec == Codec::Cbor) {
                    Some(Int::Unsigned(n)) => Kept::Unsigned(n),
                    Some(Int::Negative(n)) => Kept::Negative(n),
                    None => Kept::Bytes(bytes.to_vec()),
                },
            };
            let id = ids[slot as usize];
            slots[slot as usize] = Val::of_kept(&kept, id);
            held.hold(id, kept);
        }
        expect_end(&r, &buf)
    }

    /// Keeps this batch's changes in the write-back cache; true when it is then over its
    /// budget (and must be written back and emptied). `ids`: the key id of each slot.
    pub(super) fn keep_changes(&mut self, batch: &Batch, ids: &[u32]) -> bool {
        let held = self.held.as_mut().expect("a state with a write-back cache");
        for &slot in batch.touched() {
            let id = ids[slot as usize];
            let written = match self.slots[slot as usize] {
                Val::Unsigned(n) => Kept::Unsigned(n),
                Val::Negative(n) => Kept::Negative(n),
                Val::Absent => Kept::Absent,
                Val::Written(span) => {
                    let bytes = span.get(&batch.arena);
                    held.change(id, |kept| match kept {
                        Kept::Bytes(v) => {
                            v.clear();
                            v.extend_from_slice(bytes);
                        }
                        _ => *kept = Kept::Bytes(bytes.to_vec()),
                    });
                    continue;
                }
                // A touched slot holds what was written last.
                Val::Unknown | Val::Stored(_) | Val::Held(_) => continue,
            };
            held.change(id, |kept| *kept = written);
        }
        held.over_budget()
    }

    pub(super) fn write_changes(&self, batch: &Batch, out: &mut Vec<u8>) {
        for &slot in batch.touched() {
            match self.slots[slot as usize] {
                Val::Written(span) => put_value_op(out, slot, ValueOp::Set(span.get(&batch.arena))),
                Val::Unsigned(n) => put_int_op(out, slot, Int::Unsigned(n)),
                Val::Negative(n) => put_int_op(out, slot, Int::Negative(n)),
                Val::Absent => put_value_op(out, slot, ValueOp::Clear),
                Val::Unknown | Val::Stored(_) | Val::Held(_) => {}
            }
        }
    }
}

/// Writes the change of `slot` to `int`.
#[inline(always)]
fn put_int_op(out: &mut Vec<u8>, slot: u32, int: Int) {
    let (bytes, len) = int_bytes(int);
    put_value_set_short(out, slot, &bytes, len);
}

impl Access<'_> {
    #[inline(always)]
    fn value_cache(&mut self) -> &mut ValueCache {
        match &mut *self.cache {
            Cache::Value(c) => c,
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }
}

/// A value per key, like Flink's `ValueState<T>`.
///
/// Get one with [`Context::value_state`]. Values are encoded with the operator's [`Codec`](crate::Codec) (CBOR by default); any
/// `serde` type works. Reads and writes are of the current record's key.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::testing::Harness;
///
/// #[derive(Default)]
/// struct Previous;
///
/// impl Operator for Previous {
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         let last = ctx.value_state::<String>("last");
///         let previous = last.get()?;
///         last.set(rec.value_str()?)?;
///         ctx.emit(rec.key(), previous.as_deref().unwrap_or("-"))
///     }
/// }
///
/// let mut h = Harness::<Previous>::new();
/// let out = h.process([("k", "a"), ("k", "b"), ("j", "c")]);
/// let values: Vec<_> = out.iter().map(|o| o.value_str()).collect();
/// assert_eq!(values, ["-", "a", "-"]);
/// assert_eq!(h.value_state::<String>("last", "k"), Some("b".to_string()));
/// ```
pub struct ValueState<'c, T> {
    ctx: &'c Context<'c>,
    id: StateId,
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for ValueState<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueState").field("id", &self.id).finish()
    }
}

impl<'c, T: Serialize + DeserializeOwned> ValueState<'c, T> {
    pub(crate) fn new(ctx: &'c Context<'c>, id: StateId) -> Self {
        ValueState {
            ctx,
            id,
            _type: PhantomData,
        }
    }

    /// The value of the current key, `None` if it has none.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let seen = ctx.value_state::<bool>("seen");
    ///     if seen.get()?.is_none() {
    ///         seen.set(&true)?;
    ///         ctx.emit(rec.key(), rec.value())?; // first record of each key only
    ///     }
    ///     Ok(())
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("a", "1"), ("a", "2"), ("b", "3")]).len(), 2);
    /// ```
    pub fn get(&self) -> Result<Option<T>> {
        self.ctx.with_state(&self.id, |a| {
            let slot = a.slot as usize;
            let mut val = a.value_cache().slots[slot];
            if let Val::Unknown = val {
                a.ensure_loaded()?;
                val = a.value_cache().slots[slot];
            }
            let name = a.name;
            let bytes = match val {
                Val::Unsigned(n) => {
                    return decode_int(Int::Unsigned(n))
                        .map(Some)
                        .map_err(|e| decode_error(name, e));
                }
                Val::Negative(n) => {
                    return decode_int(Int::Negative(n))
                        .map(Some)
                        .map_err(|e| decode_error(name, e));
                }
                Val::Stored(span) => span.get(&a.batch.buf),
                Val::Written(span) => span.get(&a.batch.arena),
                Val::Held(id) => match &*a.cache {
                    Cache::Value(c) => c.held_bytes(id),
                    _ => unreachable!("state kinds are checked when a handle is made"),
                },
                Val::Absent | Val::Unknown => return Ok(None),
            };
            decode(a.codec, bytes)
                .map(Some)
                .map_err(|e| decode_error(name, e))
        })
    }

    /// Sets the value of the current key. `value` may be a borrowed form of `T` that
    /// serializes the same way (`&str` for `String`).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.value_state::<String>("latest").set(rec.value_str()?)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("a", "1"), ("a", "2")]);
    /// # assert_eq!(h.value_state::<String>("latest", "a").as_deref(), Some("2"));
    /// ```
    pub fn set<Q>(&self, value: &Q) -> Result<()>
    where
        T: Borrow<Q>,
        Q: Serialize + ?Sized,
    {
        self.ctx.with_state(&self.id, |a| {
            let name = a.name;
            let val = match int_of(value).filter(|_| a.codec == Codec::Cbor) {
                Some(int) => Val::of_int(int),
                None => Val::Written(
                    encode(a.codec, value, &mut a.batch.arena)
                        .map_err(|e| encode_error(name, e))?,
                ),
            };
            let slot = a.slot;
            a.value_cache().slots[slot as usize] = val;
            a.batch.touch(slot);
            Ok(())
        })
    }

    /// The same as [`set`](Self::set) (Flink's name).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.value_state::<u32>("len").update(&(rec.value().len() as u32))
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("a", "xyz")]);
    /// # assert_eq!(h.value_state::<u32>("len", "a"), Some(3));
    /// ```
    pub fn update<Q>(&self, value: &Q) -> Result<()>
    where
        T: Borrow<Q>,
        Q: Serialize + ?Sized,
    {
        self.set(value)
    }

    /// Removes the value of the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let total = ctx.value_state::<u64>("total");
    ///     if rec.kind() == Kind::Delete {
    ///         return total.clear();
    ///     }
    ///     total.set(&(total.get()?.unwrap_or(0) + 1))
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("a", "1")]);
    /// # h.process([weir_sdk::testing::Input::keyed("a", "").with_kind(Kind::Delete)]);
    /// # assert_eq!(h.value_state::<u64>("total", "a"), None);
    /// ```
    pub fn clear(&self) -> Result<()> {
        self.ctx.with_state(&self.id, |a| {
            let slot = a.slot;
            a.value_cache().slots[slot as usize] = Val::Absent;
            a.batch.touch(slot);
            Ok(())
        })
    }
}
