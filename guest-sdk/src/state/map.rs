//! `MapState<K, V>`: a map per key; map keys are compared by their encoded bytes.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_wire::{
    DecodeError, MapLoad, MapOp, Reader, cmp_bytes, eq_bytes, put_map_op, read_map_load,
};

use super::codec::{Codec, CodecError, Span, decode, encode};
use super::{Access, Batch, Cache, Overlays, StateId, decode_error, encode_error, expect_end};
use crate::fxhash::{FxMap, hash_bytes};
use crate::{Context, Error, Result};

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The stored entries: `stored[first..first + len]`, sorted by key (valid once loaded).
    first: u32,
    len: u32,
    /// The stored entries are gone (clear in this batch).
    cleared: bool,
    /// The load did not send the entries (a map larger than the host sends whole): map keys
    /// are read one by one, all entries only when the operator asks for all of them.
    large: bool,
    /// For a large map, a lower bound of its number of entries.
    at_least: u32,
    /// Index into `overlays` of this batch's puts and removes, or `Overlays::NONE`.
    overlay: u32,
}

const EMPTY: Slot = Slot {
    first: 0,
    len: 0,
    cleared: false,
    large: false,
    at_least: 0,
    overlay: Overlays::<Change>::NONE,
};

/// A put (`value` is `Some`) or a remove of one map key in this batch; arena spans. Or, with
/// `read`, what a point read of a large map found, kept so that the key is read once per
/// batch; not written back.
#[derive(Clone, Copy, Debug)]
struct Change {
    key: Span,
    value: Option<Span>,
    read: bool,
}

#[derive(Default)]
pub(crate) struct MapCache {
    slots: Vec<Slot>,
    /// `(key, value)` spans of the load answer, slot after slot.
    stored: Vec<(Span, Span)>,
    /// This batch's puts and removes, per slot; a map key appears at most once in a list.
    overlays: Overlays<Change>,
    /// Where a map key's change is in its slot's list, by slot and hash of the key: for slots
    /// with more than [`SCANNED`] changes (all of them once there are more), so that many
    /// puts to one key's map in a batch are not quadratic. Entries are checked against the
    /// key: of two keys with one hash, the index holds the later (the other is scanned for), and
    /// a `clear` leaves entries that no longer match.
    index: FxMap<(u32, u64), u32>,
}

/// Up to this many changes of a slot are scanned rather than indexed.
const SCANNED: usize = 8;

/// Where the current value of a map key is.
enum Found {
    Arena(Option<Span>),
    Stored(Option<Span>),
    NotLoaded,
    /// In a large map the load did not send: ask the host.
    Fetch,
}

impl MapCache {
    pub(super) fn reset(&mut self, n_keys: usize) {
        self.slots.clear();
        self.slots.resize(n_keys, EMPTY);
        self.stored.clear();
        self.overlays.reset();
        self.index.clear();
    }

    pub(super) fn apply_load(&mut self, buf: &[u8]) -> std::result::Result<(), DecodeError> {
        let mut r = Reader::new(buf, "map-state load");
        self.stored.clear();
        for slot in 0..self.slots.len() {
            match read_map_load(&mut r)? {
                MapLoad::Whole(n) => self.read_entries(slot, &mut r, buf, n)?,
                MapLoad::Large(n) => {
                    let s = &mut self.slots[slot];
                    (s.large, s.at_least) = (true, n);
                }
            }
        }
        expect_end(&r, buf)
    }

    /// Takes slot `slot`'s whole map from a `map-state.entries` answer at `buf[at..]`.
    pub(super) fn apply_entries(
        &mut self,
        slot: u32,
        buf: &[u8],
        at: usize,
    ) -> std::result::Result<(), DecodeError> {
        let mut r = Reader::new(&buf[at..], "map-state entries");
        let n = r.count(8)?;
        self.read_entries(slot as usize, &mut r, buf, n)?;
        self.slots[slot as usize].large = false;
        expect_end(&r, buf)
    }

    /// Reads `n` entries of `slot`'s map from `r`, a reader over (part of) `buf`.
    fn read_entries(
        &mut self,
        slot: usize,
        r: &mut Reader<'_>,
        buf: &[u8],
        n: usize,
    ) -> std::result::Result<(), DecodeError> {
        let first = self.stored.len();
        for _ in 0..n {
            let key = Span::of(buf, r.bytes()?);
            let value = Span::of(buf, r.bytes()?);
            self.stored.push((key, value));
        }
        // Lookups are binary searches over the entries in the order the host sends them, map-key
        // byte order (`wit/stream.wit`; the host's state tests hold both backends to it).
        // Checking it here cost 1.8% of the account scorer's instructions
        // (`cargo xtask bench-operators --callgrind`), about as much as reading the entries.
        debug_assert!(
            self.stored[first..].is_sorted_by(|a, b| cmp_bytes(a.0.get(buf), b.0.get(buf)).is_lt()),
            "map entries not in key order"
        );
        let s = &mut self.slots[slot];
        (s.first, s.len) = (first as u32, n as u32);
        Ok(())
    }

    fn overlay(&mut self, slot: u32) -> &mut Vec<Change> {
        self.overlays
            .get_mut(&mut self.slots[slot as usize].overlay)
    }

    fn changes(&self, slot: u32) -> &[Change] {
        self.overlays.get(self.slots[slot as usize].overlay)
    }

    /// Where the change of map key `key` is in the list of `slot`, if it has one.
    fn position(&self, slot: u32, key: &[u8], arena: &[u8]) -> Option<usize> {
        let changes = self.changes(slot);
        if changes.len() > SCANNED {
            // Every change of the slot is indexed: a miss means the key has none (the first
            // put of a key in a batch must not scan the batch's changes), a hit on another
            // key is a collision of hashes, left to the scan.
            match self.index.get(&(slot, hash_bytes(key))) {
                None => return None,
                Some(&i)
                    if changes
                        .get(i as usize)
                        .is_some_and(|c| eq_bytes(c.key.get(arena), key)) =>
                {
                    return Some(i as usize);
                }
                Some(_) => {}
            }
        }
        changes.iter().position(|c| eq_bytes(c.key.get(arena), key))
    }

    /// Records change `change` of `slot`: in place of the one at `at`, or appended.
    fn record(&mut self, slot: u32, at: Option<usize>, change: Change, arena: &[u8]) {
        let overlay = self.overlay(slot);
        let i = match at {
            Some(i) => {
                overlay[i] = change;
                return;
            }
            None => {
                overlay.push(change);
                overlay.len() - 1
            }
        };
        if i == SCANNED {
            // The list outgrows scanning: index all of it.
            let list = self.overlays.get(self.slots[slot as usize].overlay);
            for (j, c) in list.iter().enumerate() {
                self.index
                    .insert((slot, hash_bytes(c.key.get(arena))), j as u32);
            }
        } else if i > SCANNED {
            self.index
                .insert((slot, hash_bytes(change.key.get(arena))), i as u32);
        }
    }

    fn stored(&self, slot: u32) -> &[(Span, Span)] {
        let s = self.slots[slot as usize];
        &self.stored[s.first as usize..(s.first + s.len) as usize]
    }

    fn find(&self, slot: u32, key: &[u8], batch: &Batch) -> Found {
        if let Some(i) = self.position(slot, key, &batch.arena) {
            return Found::Arena(self.changes(slot)[i].value);
        }
        if self.slots[slot as usize].cleared {
            return Found::Arena(None);
        }
        if !batch.loaded {
            return Found::NotLoaded;
        }
        if self.slots[slot as usize].large {
            return Found::Fetch;
        }
        let stored = self.stored(slot);
        let at = stored.binary_search_by(|(k, _)| cmp_bytes(k.get(&batch.buf), key));
        Found::Stored(at.ok().map(|i| stored[i].1))
    }

    /// Whether a slot's map has no visible entry (loaded, unless cleared): without merging
    /// its entries, so that it costs the batch's changes to it, not the map's size. `None`
    /// for a large map that only its whole entries can tell.
    fn is_empty(&self, slot: u32, batch: &Batch) -> Option<bool> {
        let changes = self.changes(slot);
        if changes.iter().any(|c| c.value.is_some()) {
            return Some(false);
        }
        let s = self.slots[slot as usize];
        if s.cleared {
            return Some(true);
        }
        if s.large {
            // A remove takes one entry at most.
            let removes = changes.iter().filter(|c| !c.read).count();
            return (removes < s.at_least as usize).then_some(false);
        }
        // Only removes, each of another map key: empty if they remove every stored entry.
        let stored = self.stored(slot);
        Some(
            stored.len() <= changes.len()
                && changes
                    .iter()
                    .filter(|c| {
                        let key = c.key.get(&batch.arena);
                        stored
                            .binary_search_by(|(k, _)| cmp_bytes(k.get(&batch.buf), key))
                            .is_ok()
                    })
                    .count()
                    == stored.len(),
        )
    }

    /// The visible entries of a slot as `(key, value)` bytes, sorted by key bytes.
    fn visible<'b>(&self, slot: u32, batch: &'b Batch) -> Vec<(&'b [u8], &'b [u8])> {
        let mut changes: Vec<(&[u8], Option<&[u8]>)> = self
            .changes(slot)
            .iter()
            .map(|c| {
                (
                    c.key.get(&batch.arena),
                    c.value.map(|v| v.get(&batch.arena)),
                )
            })
            .collect();
        changes.sort_unstable_by(|a, b| cmp_bytes(a.0, b.0));
        let stored: &[(Span, Span)] = if self.slots[slot as usize].cleared {
            &[]
        } else {
            self.stored(slot)
        };
        let mut stored = stored
            .iter()
            .map(|(k, v)| (k.get(&batch.buf), v.get(&batch.buf)))
            .peekable();
        let mut changes = changes.into_iter().peekable();
        let mut out = Vec::new();
        loop {
            let order = match (stored.peek(), changes.peek()) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(s), Some(c)) => cmp_bytes(s.0, c.0),
            };
            if order != Ordering::Greater {
                let s = stored.next();
                if order == Ordering::Less {
                    out.extend(s);
                    continue;
                }
            }
            if let Some((k, Some(v))) = changes.next() {
                out.push((k, v));
            }
        }
        out
    }

    pub(super) fn write_changes(&self, batch: &Batch, out: &mut Vec<u8>) {
        for &slot in batch.touched() {
            let cleared = self.slots[slot as usize].cleared;
            if cleared {
                put_map_op(out, slot, MapOp::Clear);
            }
            for c in self.changes(slot).iter().filter(|c| !c.read) {
                let key = c.key.get(&batch.arena);
                match c.value {
                    Some(v) => put_map_op(out, slot, MapOp::Put(key, v.get(&batch.arena))),
                    None if !cleared => put_map_op(out, slot, MapOp::Remove(key)),
                    None => {}
                }
            }
        }
    }
}

impl Cache {
    fn map(&self) -> &MapCache {
        match self {
            Cache::Map(c) => c,
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }

    fn map_mut(&mut self) -> &mut MapCache {
        match self {
            Cache::Map(c) => c,
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }
}

impl Access<'_> {
    /// The current value bytes of `key` (loading if needed), decoded by `f`.
    fn map_lookup<Q, R>(
        &mut self,
        key: &Q,
        f: impl FnOnce(&str, Option<&[u8]>) -> Result<R>,
    ) -> Result<R>
    where
        Q: Serialize + ?Sized,
    {
        // The key is encoded into the arena for the lookup and then dropped again, unless a
        // point read keeps it.
        let name = self.name;
        let kspan =
            encode(self.codec, key, &mut self.batch.arena).map_err(|e| encode_error(name, e))?;
        let slot = self.slot;
        let find = |a: &Self| {
            a.cache
                .map()
                .find(slot, kspan.get(&a.batch.arena), &*a.batch)
        };
        let mut found = find(self);
        if let Found::NotLoaded = found {
            self.ensure_loaded()?;
            found = find(self);
        }
        let bytes = match found {
            Found::Arena(v) => v.map(|v| v.get(&self.batch.arena)),
            Found::Stored(v) => v.map(|v| v.get(&self.batch.buf)),
            Found::NotLoaded => None,
            Found::Fetch => {
                let value = self.backend.map_get(
                    self.handle,
                    self.keys,
                    slot,
                    kspan.get(&self.batch.arena),
                );
                let arena = &mut self.batch.arena;
                let value = value.map(|v| {
                    let start = arena.len();
                    arena.extend_from_slice(&v);
                    Span::of(arena, &arena[start..])
                });
                let read = Change {
                    key: kspan,
                    value,
                    read: true,
                };
                self.cache
                    .map_mut()
                    .record(slot, None, read, &self.batch.arena);
                return f(self.name, value.map(|v| v.get(&self.batch.arena)));
            }
        };
        let result = f(self.name, bytes);
        self.batch.arena.truncate(kspan.start());
        result
    }

    /// Loads the batch's maps unless loaded, and the current slot's whole map if the load
    /// sent it as large.
    fn map_whole(&mut self) -> Result<()> {
        self.ensure_loaded()?;
        let slot = self.slot;
        let s = self.cache.map().slots[slot as usize];
        if !s.large || s.cleared {
            return Ok(());
        }
        let answer = self.backend.map_entries(self.handle, self.keys, slot);
        let at = self.batch.buf.len();
        self.batch.buf.extend_from_slice(&answer);
        self.cache
            .map_mut()
            .apply_entries(slot, &self.batch.buf, at)
            .map_err(|e| {
                Error::new(e).context(format!(
                    "state \"{}\": the host's entries() answer is malformed",
                    self.name
                ))
            })
    }

    /// Records a put (`value` is `Some`) or a remove of `key`.
    fn map_change<Q, W>(&mut self, key: &Q, value: Option<&W>) -> Result<()>
    where
        Q: Serialize + ?Sized,
        W: Serialize + ?Sized,
    {
        let (slot, name) = (self.slot, self.name);
        let mut kspan =
            encode(self.codec, key, &mut self.batch.arena).map_err(|e| encode_error(name, e))?;
        let existing =
            self.cache
                .map()
                .position(slot, kspan.get(&self.batch.arena), &self.batch.arena);
        if let Some(i) = existing {
            self.batch.arena.truncate(kspan.start());
            kspan = self.cache.map().changes(slot)[i].key;
        }
        let vspan = match value {
            Some(v) => Some(
                encode(self.codec, v, &mut self.batch.arena).map_err(|e| encode_error(name, e))?,
            ),
            None => None,
        };
        let change = Change {
            key: kspan,
            value: vspan,
            read: false,
        };
        self.cache
            .map_mut()
            .record(slot, existing, change, &self.batch.arena);
        self.batch.touch(slot);
        Ok(())
    }
}

/// A map per key, like Flink's `MapState<K, V>`.
///
/// Get one with [`Context::map_state`]. Map keys are compared by their encoding (the
/// operator's [`Codec`](crate::Codec)), so `K` must encode equal keys to equal bytes (true of
/// strings, integers, and structs and tuples of them; not of floats with several NaNs or of
/// hash maps). Entries come in the order of their encoded keys: with CBOR, integers ≥ 0 in
/// numeric order, strings shorter before longer.
///
/// Cost: the first read of a map state in a batch loads the maps of all the batch's keys in
/// one host call, and the batch's writes go back in one call at its end. A map larger than
/// 16 KiB is not loaded: [`get`](Self::get) and [`contains`](Self::contains) read one entry
/// per host call (once per map key and batch), [`entries`](Self::entries),
/// [`keys`](Self::keys) and [`values`](Self::values) read it whole (as may
/// [`is_empty`](Self::is_empty) when the batch removed many of its entries). Writes never
/// read. So a large map costs what the operator reads of it, not what it holds.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::testing::Harness;
///
/// #[derive(Default)]
/// struct Visits;
///
/// impl Operator for Visits {
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         let visits = ctx.map_state::<String, u64>("visits");
///         let page = rec.value_str()?;
///         let n = visits.get(page)?.unwrap_or(0) + 1;
///         visits.put(page, &n)?;
///         ctx.emit_display(rec.key(), n)
///     }
/// }
///
/// let mut h = Harness::<Visits>::new();
/// let out = h.process([("ann", "/home"), ("ann", "/cart"), ("ann", "/home")]);
/// assert_eq!(out[2].value_str(), "2");
/// let entries = h.map_state::<String, u64>("visits", "ann");
/// assert!(entries.contains(&("/home".to_string(), 2)));
/// ```
pub struct MapState<'c, K, V> {
    ctx: &'c Context<'c>,
    id: StateId,
    _type: PhantomData<fn() -> (K, V)>,
}

impl<K, V> std::fmt::Debug for MapState<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapState").field("id", &self.id).finish()
    }
}

impl<'c, K, V> MapState<'c, K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    pub(crate) fn new(ctx: &'c Context<'c>, id: StateId) -> Self {
        MapState {
            ctx,
            id,
            _type: PhantomData,
        }
    }

    /// The value of map key `key` for the current key. `key` may be a borrowed form of `K`
    /// that serializes the same way (`&str` for `String`).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let prices = ctx.map_state::<String, u32>("prices");
    ///     match prices.get(rec.value_str()?)? {
    ///         Some(p) => ctx.emit_display(rec.key(), p),
    ///         None => ctx.emit(rec.key(), "unknown"),
    ///     }
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("shop", "tea")])[0].value_str(), "unknown");
    /// ```
    pub fn get<Q>(&self, key: &Q) -> Result<Option<V>>
    where
        K: Borrow<Q>,
        Q: Serialize + ?Sized,
    {
        self.ctx.with_state(&self.id, |a| {
            let codec = a.codec;
            a.map_lookup(key, |name, bytes| {
                bytes
                    .map(|b| decode(codec, b))
                    .transpose()
                    .map_err(|e| decode_error(name, e))
            })
        })
    }

    /// Sets map key `key` to `value` for the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let (field, value) = rec.value_str()?.split_once('=').ok_or("expected field=value")?;
    ///     ctx.map_state::<String, String>("fields").put(field, value)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("u1", "name=ann")]);
    /// # assert_eq!(h.map_state::<String, String>("fields", "u1"), [("name".into(), "ann".into())]);
    /// ```
    pub fn put<Q, W>(&self, key: &Q, value: &W) -> Result<()>
    where
        K: Borrow<Q>,
        V: Borrow<W>,
        Q: Serialize + ?Sized,
        W: Serialize + ?Sized,
    {
        self.ctx
            .with_state(&self.id, |a| a.map_change(key, Some(value)))
    }

    /// Removes map key `key` for the current key (nothing happens if it is absent).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let open = ctx.map_state::<String, bool>("open-orders");
    ///     match rec.kind() {
    ///         Kind::Delete => open.remove(rec.value_str()?),
    ///         _ => open.put(rec.value_str()?, &true),
    ///     }
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # use weir_sdk::testing::Input;
    /// # h.process([Input::keyed("c", "o1"), Input::keyed("c", "o1").with_kind(Kind::Delete)]);
    /// # assert!(h.map_state::<String, bool>("open-orders", "c").is_empty());
    /// ```
    pub fn remove<Q>(&self, key: &Q) -> Result<()>
    where
        K: Borrow<Q>,
        Q: Serialize + ?Sized,
    {
        self.ctx
            .with_state(&self.id, |a| a.map_change::<Q, V>(key, None))
    }

    /// Whether map key `key` is present for the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let seen = ctx.map_state::<String, ()>("seen");
    ///     if !seen.contains(rec.value_str()?)? {
    ///         seen.put(rec.value_str()?, &())?;
    ///         ctx.emit(rec.key(), rec.value())?;
    ///     }
    ///     Ok(())
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("k", "a"), ("k", "a"), ("k", "b")]).len(), 2);
    /// ```
    pub fn contains<Q>(&self, key: &Q) -> Result<bool>
    where
        K: Borrow<Q>,
        Q: Serialize + ?Sized,
    {
        self.ctx.with_state(&self.id, |a| {
            a.map_lookup(key, |_, bytes| Ok(bytes.is_some()))
        })
    }

    /// All entries for the current key, ordered by their encoded map keys (for strings of
    /// up to 127 bytes: shorter first, then byte order; sort them if you need another order).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let counts = ctx.map_state::<String, u32>("counts");
    ///     let word = rec.value_str()?;
    ///     counts.put(word, &(counts.get(word)?.unwrap_or(0) + 1))?;
    ///     let total: u32 = counts.entries()?.iter().map(|(_, n)| n).sum();
    ///     ctx.emit_display(rec.key(), total)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("k", "a"), ("k", "b"), ("k", "a")])[2].value_str(), "3");
    /// ```
    pub fn entries(&self) -> Result<Vec<(K, V)>> {
        self.with_visible(|name, codec, entries| {
            entries
                .iter()
                .map(|(k, v)| Ok((decode(codec, k)?, decode(codec, v)?)))
                .collect::<Result<Vec<_>, CodecError>>()
                .map_err(|e| decode_error(name, e))
        })
    }

    /// All map keys for the current key, in the order of [`entries`](Self::entries).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let tags = ctx.map_state::<String, ()>("tags");
    ///     tags.put(rec.value_str()?, &())?;
    ///     ctx.emit(rec.key(), tags.keys()?.join(","))
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("k", "b"), ("k", "a")])[1].value_str(), "a,b");
    /// ```
    pub fn keys(&self) -> Result<Vec<K>> {
        self.with_visible(|name, codec, entries| {
            entries
                .iter()
                .map(|(k, _)| decode(codec, k))
                .collect::<Result<Vec<_>, CodecError>>()
                .map_err(|e| decode_error(name, e))
        })
    }

    /// All values for the current key, in the order of [`entries`](Self::entries).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let scores = ctx.map_state::<String, u32>("scores");
    ///     let (game, score) = rec.value_str()?.split_once(':').ok_or("expected game:score")?;
    ///     scores.put(game, &score.parse()?)?;
    ///     let best = scores.values()?.into_iter().max().unwrap_or(0);
    ///     ctx.emit_display(rec.key(), best)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("k", "chess:7"), ("k", "go:3")])[1].value_str(), "7");
    /// ```
    pub fn values(&self) -> Result<Vec<V>> {
        self.with_visible(|name, codec, entries| {
            entries
                .iter()
                .map(|(_, v)| decode(codec, v))
                .collect::<Result<Vec<_>, CodecError>>()
                .map_err(|e| decode_error(name, e))
        })
    }

    /// Whether the map of the current key has no entries.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let m = ctx.map_state::<String, u8>("m");
    ///     let was_empty = m.is_empty()?;
    ///     m.put(rec.value_str()?, &1)?;
    ///     ctx.emit_display(rec.key(), was_empty)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # let out = h.process([("k", "a"), ("k", "b")]);
    /// # assert_eq!((out[0].value_str(), out[1].value_str()), ("true", "false"));
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.ctx.with_state(&self.id, |a| {
            let slot = a.slot;
            if !a.cache.map().slots[slot as usize].cleared {
                a.ensure_loaded()?;
            }
            if let Some(empty) = a.cache.map().is_empty(slot, &*a.batch) {
                return Ok(empty);
            }
            a.map_whole()?;
            Ok(a.cache.map().is_empty(slot, &*a.batch) == Some(true))
        })
    }

    /// Removes all entries of the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let cart = ctx.map_state::<String, u32>("cart");
    ///     match rec.value_str()? {
    ///         "checkout" => cart.clear(),
    ///         item => cart.put(item, &(cart.get(item)?.unwrap_or(0) + 1)),
    ///     }
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("u", "tea"), ("u", "checkout")]);
    /// # assert!(h.map_state::<String, u32>("cart", "u").is_empty());
    /// ```
    pub fn clear(&self) -> Result<()> {
        self.ctx.with_state(&self.id, |a| {
            let slot = a.slot;
            let cache = a.cache.map_mut();
            cache.slots[slot as usize].cleared = true;
            cache.overlay(slot).clear();
            a.batch.touch(slot);
            Ok(())
        })
    }

    fn with_visible<R>(
        &self,
        f: impl FnOnce(&str, Codec, &[(&[u8], &[u8])]) -> Result<R>,
    ) -> Result<R> {
        self.ctx.with_state(&self.id, |a| {
            let slot = a.slot;
            if !a.cache.map().slots[slot as usize].cleared {
                a.map_whole()?;
            }
            let entries = a.cache.map().visible(slot, &*a.batch);
            f(a.name, a.codec, &entries)
        })
    }
}
