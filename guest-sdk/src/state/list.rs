//! `ListState<T>`: a list per key; appends are sent without loading.

use std::borrow::Borrow;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_wire::{DecodeError, ListWrite, Reader, put_list_op};

use super::codec::{Span, decode, encode};
use super::{Access, Batch, Cache, Overlays, StateId, decode_error, encode_error, expect_end};
use crate::{Context, Result};

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The stored elements: `stored[first..first + len]` (valid once loaded).
    first: u32,
    len: u32,
    /// The stored elements are gone (clear or update in this batch).
    replaced: bool,
    /// Index into `overlays` of the elements added in this batch, or `Overlays::NONE`.
    overlay: u32,
}

const EMPTY: Slot = Slot {
    first: 0,
    len: 0,
    replaced: false,
    overlay: Overlays::<Span>::NONE,
};

#[derive(Default)]
pub(crate) struct ListCache {
    slots: Vec<Slot>,
    /// Element spans of the load answer, slot after slot.
    stored: Vec<Span>,
    /// Arena spans of the elements added in this batch, per slot.
    overlays: Overlays<Span>,
}

impl ListCache {
    pub(super) fn reset(&mut self, n_keys: usize) {
        self.slots.clear();
        self.slots.resize(n_keys, EMPTY);
        self.stored.clear();
        self.overlays.reset();
    }

    pub(super) fn apply_load(&mut self, buf: &[u8]) -> std::result::Result<(), DecodeError> {
        let mut r = Reader::new(buf, "list-state load");
        self.stored.clear();
        for slot in &mut self.slots {
            let n = r.count(4)?;
            slot.first = self.stored.len() as u32;
            slot.len = n as u32;
            for _ in 0..n {
                self.stored.push(Span::of(buf, r.bytes()?));
            }
        }
        expect_end(&r, buf)
    }

    fn overlay(&mut self, slot: u32) -> &mut Vec<Span> {
        self.overlays
            .get_mut(&mut self.slots[slot as usize].overlay)
    }

    fn added(&self, slot: u32) -> &[Span] {
        self.overlays.get(self.slots[slot as usize].overlay)
    }

    pub(super) fn write_changes(&self, batch: &Batch, out: &mut Vec<u8>) {
        for &slot in batch.touched() {
            let added = self.added(slot);
            let elems = added.iter().map(|s| s.get(&batch.arena));
            if self.slots[slot as usize].replaced {
                let op = if added.is_empty() {
                    ListWrite::Clear
                } else {
                    ListWrite::Replace
                };
                put_list_op(out, slot, op, elems);
            } else if !added.is_empty() {
                put_list_op(out, slot, ListWrite::Append, elems);
            }
        }
    }
}

impl Cache {
    fn list(&self) -> &ListCache {
        match self {
            Cache::List(c) => c,
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }
}

impl Access<'_> {
    fn list_cache(&mut self) -> &mut ListCache {
        match &mut *self.cache {
            Cache::List(c) => c,
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }

    /// Encodes `items` into the arena and appends them to the slot's overlay.
    fn list_push<Q, I>(&mut self, items: I) -> Result<()>
    where
        Q: Serialize + ?Sized,
        I: IntoIterator,
        I::Item: Borrow<Q>,
    {
        let (slot, codec, name) = (self.slot, self.codec, self.name);
        let Cache::List(cache) = &mut *self.cache else {
            unreachable!("state kinds are checked when a handle is made");
        };
        // The slot is touched and its overlay found once for all the items (touching it for
        // none writes nothing: its changes are empty).
        self.batch.touch(slot);
        let overlay = cache.overlay(slot);
        for item in items {
            let span = encode(codec, item.borrow(), &mut self.batch.arena)
                .map_err(|e| encode_error(name, e))?;
            overlay.push(span);
        }
        Ok(())
    }

    fn list_replace(&mut self) {
        let slot = self.slot;
        let cache = self.list_cache();
        cache.slots[slot as usize].replaced = true;
        cache.overlay(slot).clear();
        self.batch.touch(slot);
    }
}

/// A list per key, like Flink's `ListState<T>`.
///
/// Get one with [`Context::list_state`]. [`add`](Self::add) does not read the stored list:
/// the host appends, so a list that is only appended to is never loaded into the guest.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::testing::Harness;
///
/// #[derive(Default)]
/// struct History;
///
/// impl Operator for History {
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         let seen = ctx.list_state::<String>("seen");
///         seen.add(rec.value_str()?)?;
///         ctx.emit(rec.key(), seen.get()?.join(","))
///     }
/// }
///
/// let mut h = Harness::<History>::new();
/// h.process([("k", "a")]);
/// let out = h.process([("k", "b")]);
/// assert_eq!(out[0].value_str(), "a,b");
/// assert_eq!(h.list_state::<String>("seen", "k"), ["a", "b"]);
/// ```
pub struct ListState<'c, T> {
    ctx: &'c Context<'c>,
    id: StateId,
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for ListState<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListState").field("id", &self.id).finish()
    }
}

impl<'c, T: Serialize + DeserializeOwned> ListState<'c, T> {
    pub(crate) fn new(ctx: &'c Context<'c>, id: StateId) -> Self {
        ListState {
            ctx,
            id,
            _type: PhantomData,
        }
    }

    /// The list of the current key, oldest first (empty if it has none).
    ///
    /// The vector has room for one more element, so that the common "read the list, push
    /// the new element, write it back with [`update`](Self::update)" does not reallocate it.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let items = ctx.list_state::<u32>("items");
    ///     items.add(&(rec.value().len() as u32))?;
    ///     let sum: u32 = items.get()?.iter().sum();
    ///     ctx.emit_display(rec.key(), sum)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # let out = h.process([("a", "xx"), ("a", "yyy")]);
    /// # assert_eq!(out[1].value_str(), "5");
    /// ```
    pub fn get(&self) -> Result<Vec<T>> {
        self.ctx.with_state(&self.id, |a| {
            let slot = a.slot;
            if !a.list_cache().slots[slot as usize].replaced {
                a.ensure_loaded()?;
            }
            let (name, codec) = (a.name, a.codec);
            let (batch, cache) = (&*a.batch, a.cache.list());
            let s = cache.slots[slot as usize];
            let stored: &[Span] = if s.replaced {
                &[]
            } else {
                &cache.stored[s.first as usize..(s.first + s.len) as usize]
            };
            let added = cache.added(slot);
            let mut out = Vec::with_capacity(stored.len() + added.len() + 1);
            let elems = stored
                .iter()
                .map(|s| s.get(&batch.buf))
                .chain(added.iter().map(|s| s.get(&batch.arena)));
            for bytes in elems {
                out.push(decode(codec, bytes).map_err(|e| decode_error(name, e))?);
            }
            Ok(out)
        })
    }

    /// Appends `value` to the list of the current key, without loading the list.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.list_state::<String>("log").add(rec.value_str()?)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("a", "x"), ("a", "y")]);
    /// # assert_eq!(h.list_state::<String>("log", "a"), ["x", "y"]);
    /// ```
    pub fn add<Q>(&self, value: &Q) -> Result<()>
    where
        T: Borrow<Q>,
        Q: Serialize + ?Sized,
    {
        self.ctx
            .with_state(&self.id, |a| a.list_push::<Q, _>(std::iter::once(value)))
    }

    /// Appends all `values` (owned or borrowed) to the list of the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let words = rec.value_str()?.split(' ').map(str::to_owned);
    ///     ctx.list_state::<String>("words").add_all(words)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("a", "x y")]);
    /// # assert_eq!(h.list_state::<String>("words", "a"), ["x", "y"]);
    /// ```
    pub fn add_all<I>(&self, values: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.ctx
            .with_state(&self.id, |a| a.list_push::<T, _>(values))
    }

    /// Replaces the list of the current key with `values`; an empty `values` clears it.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let last_two = ctx.list_state::<String>("last-two");
    ///     let mut items = last_two.get()?;
    ///     items.push(rec.value_str()?.to_owned());
    ///     let keep = items.len().saturating_sub(2);
    ///     last_two.update(&items[keep..])
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("a", "x"), ("a", "y"), ("a", "z")]);
    /// # assert_eq!(h.list_state::<String>("last-two", "a"), ["y", "z"]);
    /// ```
    pub fn update<I>(&self, values: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: Borrow<T>,
    {
        self.ctx.with_state(&self.id, |a| {
            a.list_replace();
            a.list_push::<T, _>(values)
        })
    }

    /// Removes the list of the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let buffered = ctx.list_state::<String>("buffered");
    ///     if rec.value() == b"flush" {
    ///         for item in buffered.get()? {
    ///             ctx.emit(rec.key(), item)?;
    ///         }
    ///         return buffered.clear();
    ///     }
    ///     buffered.add(rec.value_str()?)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("a", "x"), ("a", "y"), ("a", "flush")]).len(), 2);
    /// # assert!(h.list_state::<String>("buffered", "a").is_empty());
    /// ```
    pub fn clear(&self) -> Result<()> {
        self.ctx.with_state(&self.id, |a| {
            a.list_replace();
            Ok(())
        })
    }
}
