//! The values of the value states of a subtask (up to eight of them: `memory::CHUNK`) in one
//! key group: an open-addressing hash table with one bucket per key, which holds the key and
//! the key's values of all those states inline (for up to 16 bytes of key and 32 of values:
//! one cache line).
//!
//! One bucket per key rather than one table per state: an operator with several value
//! states (a count, a sum, a last-seen time) reads and writes all of them for each key of a
//! batch, and with one table each every state's lookup missed the cache again (the batch's
//! buckets do not stay cached from `load` to `store`, since the guest's work comes between).
//! Here the first state's lookup brings the key's values in, and the others find them there.
//!
//! A value state is named by its ordinal among the table's states. A key's values
//! are one byte string, per ordinal a header and that many bytes: a length below [`LONG`] in
//! one byte, [`LONG`] and the length as `u32` LE, or [`ABSENT`] for no value. The states
//! after the last one the key has a value of are left out; a key without values has no
//! bucket.
//!
//! A key found once with [`ValueTable::find_hashed`] can be read and written through its
//! [`ValuePos`] (the bucket) without hashing and probing again. The WASM host relies on this:
//! `load` finds every key of a batch (after [`ValueTable::prefetch`] of them all), `store`
//! writes back by position. A position is only a
//! hint: `set_at` checks that the bucket still holds the key and falls back to a lookup when
//! the table changed.

use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;
use smallvec::SmallVec;

/// The header of a state without a value.
const ABSENT: u8 = 0xFF;
/// The header of a value of this many bytes or more: `LONG`, then the length as `u32` LE.
const LONG: u8 = 0xFE;

/// A key's values, encoded as the module says.
type Values = SmallVec<[u8; 32]>;

/// A key, inline up to 16 bytes: with the values, a bucket is one cache line (64 bytes).
type Key = SmallVec<[u8; 16]>;

/// A key and its values, aligned to a cache line so that a bucket of up to 16 bytes of key
/// and 32 of values is one line, not parts of two.
#[derive(Debug)]
#[repr(align(64))]
struct Bucket(Key, Values);

// Keys and values inline up to the sizes above fill exactly one line.
const _: () = assert!(size_of::<Bucket>() == 64);

/// The bucket a key was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePos(usize);

#[derive(Debug, Default)]
pub(crate) struct ValueTable {
    table: HashTable<Bucket>,
    hasher: foldhash::fast::RandomState,
}

impl ValueTable {
    #[cfg(test)]
    pub(crate) fn find(&self, key: &[u8]) -> Option<ValuePos> {
        self.find_hashed(self.hash(key), key)
    }

    /// The hash of `key` in this table, for [`prefetch`](Self::prefetch) and
    /// [`find_hashed`](Self::find_hashed).
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The bucket of `key`, whose [`hash`](Self::hash) is known, if it has one.
    pub(crate) fn find_hashed(&self, hash: u64, key: &[u8]) -> Option<ValuePos> {
        self.table
            .find_bucket_index(hash, |Bucket(k, _)| k[..] == *key)
            .map(ValuePos)
    }

    /// Starts loading the bucket a key of `hash` most likely is in (the first whose tag
    /// matches, found without reading any bucket), so that finding it soon after does not
    /// wait for memory.
    pub(crate) fn prefetch(&self, hash: u64) {
        if let Some(bucket) = self
            .table
            .find_bucket_index(hash, |_| true)
            .and_then(|i| self.table.get_bucket(i))
        {
            super::prefetch(bucket);
        }
    }

    /// The value of state `ord` of the key at `pos`.
    pub(crate) fn get(&self, pos: ValuePos, ord: usize) -> Option<&[u8]> {
        let Bucket(_, values) = self.table.get_bucket(pos.0)?;
        value(values, ord)
    }

    /// Sets the value of state `ord` of `key`, found at `pos` unless the table changed
    /// since. Returns the length of the value it replaced (`None`: there was none).
    pub(crate) fn set_at(
        &mut self,
        pos: ValuePos,
        key: &[u8],
        ord: usize,
        value: &[u8],
    ) -> Option<usize> {
        match self.table.get_bucket_mut(pos.0) {
            Some(Bucket(k, values)) if k[..] == *key => put(values, ord, value),
            _ => self.set(key, ord, value),
        }
    }

    /// Sets the value of state `ord` of `key`; returns the length of the value it replaced.
    pub(crate) fn set(&mut self, key: &[u8], ord: usize, value: &[u8]) -> Option<usize> {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(key);
        match self.table.find_mut(hash, |Bucket(k, _)| k[..] == *key) {
            Some(Bucket(_, values)) => put(values, ord, value),
            None => {
                let mut values = Values::new();
                put(&mut values, ord, value);
                self.table
                    .insert_unique(hash, Bucket(key.into(), values), |Bucket(k, _)| {
                        hasher.hash_one(&k[..])
                    });
                None
            }
        }
    }

    /// Removes the value of state `ord` of `key`; returns its length, if there was one.
    pub(crate) fn remove(&mut self, key: &[u8], ord: usize) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        let mut entry = self
            .table
            .find_entry(hash, |Bucket(k, _)| k[..] == *key)
            .ok()?;
        let removed = take(&mut entry.get_mut().1, ord);
        if entry.get().1.is_empty() {
            entry.remove();
        }
        removed
    }

    /// Every `(key, value)` of state `ord`, in no particular order.
    pub(crate) fn iter(&self, ord: usize) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table
            .iter()
            .filter_map(move |Bucket(k, values)| Some((&k[..], value(values, ord)?)))
    }

    /// Keeps the values of state `ord` that `keep` accepts; calls `removed` with each other
    /// key and value.
    pub(crate) fn retain(
        &mut self,
        ord: usize,
        mut keep: impl FnMut(&[u8]) -> bool,
        mut removed: impl FnMut(&[u8], &[u8]),
    ) {
        self.table.retain(|Bucket(k, values)| {
            let drop = match value(values, ord) {
                Some(v) if !keep(v) => {
                    removed(k, v);
                    true
                }
                _ => false,
            };
            if drop {
                take(values, ord);
            }
            !values.is_empty()
        });
    }
}

/// The header at `at`: where the bytes after it start, and how many there are (`None`: no
/// value).
#[inline]
fn header(values: &[u8], at: usize) -> (usize, Option<usize>) {
    match values[at] {
        n if n < LONG => (at + 1, Some(n as usize)),
        ABSENT => (at + 1, None),
        _ => {
            let len: [u8; 4] = values[at + 1..at + 5].try_into().expect("4 bytes");
            (at + 5, Some(u32::from_le_bytes(len) as usize))
        }
    }
}

/// Where state `ord`'s header is in a key's values, where its bytes start and how many
/// there are (`None`: no value). `Err(n)`: the values hold `n` states, none of them `ord`.
fn locate(values: &[u8], ord: usize) -> Result<(usize, usize, Option<usize>), usize> {
    let mut at = 0;
    for i in 0..ord {
        if at == values.len() {
            return Err(i);
        }
        let (start, len) = header(values, at);
        at = start + len.unwrap_or(0);
    }
    if at == values.len() {
        return Err(ord);
    }
    let (start, len) = header(values, at);
    Ok((at, start, len))
}

fn value(values: &[u8], ord: usize) -> Option<&[u8]> {
    match locate(values, ord) {
        Ok((_, start, Some(len))) => Some(&values[start..start + len]),
        _ => None,
    }
}

/// The header of a value of `len` bytes.
fn header_of(len: usize) -> SmallVec<[u8; 5]> {
    match u8::try_from(len) {
        Ok(n) if n < LONG => SmallVec::from_slice(&[n]),
        _ => {
            let len = u32::try_from(len).expect("state values are at most 4 GiB");
            let mut h = SmallVec::from_slice(&[LONG]);
            h.extend_from_slice(&len.to_le_bytes());
            h
        }
    }
}

/// Replaces `range` of `values` with `header` and `value`.
fn splice(values: &mut Values, range: Range<usize>, header: &[u8], value: &[u8]) {
    let at = range.start;
    values.drain(range);
    values.insert_from_slice(at, header);
    values.insert_from_slice(at + header.len(), value);
}

/// Sets state `ord`'s value; returns the length of the one it replaced. A value of the same
/// length (a counter, mostly) is copied over.
fn put(values: &mut Values, ord: usize, value: &[u8]) -> Option<usize> {
    match locate(values, ord) {
        Ok((_, start, Some(old))) if old == value.len() => {
            values[start..start + old].copy_from_slice(value);
            Some(old)
        }
        Ok((at, start, old)) => {
            splice(
                values,
                at..start + old.unwrap_or(0),
                &header_of(value.len()),
                value,
            );
            old
        }
        Err(held) => {
            values.extend((held..ord).map(|_| ABSENT));
            values.extend_from_slice(&header_of(value.len()));
            values.extend_from_slice(value);
            None
        }
    }
}

/// Removes state `ord`'s value, and the absent states then at the end; returns the length
/// of the value it removed.
fn take(values: &mut Values, ord: usize) -> Option<usize> {
    let Ok((at, start, Some(old))) = locate(values, ord) else {
        return None;
    };
    splice(values, at..start + old, &[ABSENT], &[]);
    // Cut after the last state with a value.
    let (mut at, mut end) = (0, 0);
    while at < values.len() {
        let (start, len) = header(values, at);
        at = start + len.unwrap_or(0);
        if len.is_some() {
            end = at;
        }
    }
    values.truncate(end);
    Some(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_checked_hints() {
        let mut t = ValueTable::default();
        t.set(b"a", 0, b"1");
        let a = t.find(b"a").unwrap();
        assert_eq!(t.get(a, 0), Some(&b"1"[..]));
        t.set_at(a, b"a", 0, b"11");
        assert_eq!(t.get(t.find(b"a").unwrap(), 0), Some(&b"11"[..]));
        // Grow the table: old positions may now point elsewhere, set_at still does the right thing.
        for i in 0..1000u32 {
            t.set(&i.to_le_bytes(), 0, b"x");
        }
        t.set_at(a, b"a", 0, b"111");
        assert_eq!(t.get(t.find(b"a").unwrap(), 0), Some(&b"111"[..]));
        t.remove(b"a", 0);
        assert_eq!(t.find(b"a"), None);
        t.set_at(a, b"a", 0, b"again");
        assert_eq!(t.get(t.find(b"a").unwrap(), 0), Some(&b"again"[..]));
        assert_eq!(t.iter(0).count(), 1001);
    }

    #[test]
    fn the_states_of_one_key_are_set_and_removed_apart() {
        let mut t = ValueTable::default();
        let long = vec![7u8; 300];
        assert_eq!(t.set(b"k", 2, b"two"), None);
        let k = t.find(b"k").unwrap();
        assert_eq!((t.get(k, 0), t.get(k, 1)), (None, None));
        assert_eq!(t.set(b"k", 0, b""), None, "an empty value is a value");
        assert_eq!(t.set(b"k", 1, &long), None);
        assert_eq!(t.set(b"k", 0, b"zero"), Some(0));
        assert_eq!(t.set(b"k", 2, b"2"), Some(3));
        let k = t.find(b"k").unwrap();
        assert_eq!(t.get(k, 0), Some(&b"zero"[..]));
        assert_eq!(t.get(k, 1), Some(&long[..]));
        assert_eq!(t.get(k, 2), Some(&b"2"[..]));
        assert_eq!(t.get(k, 3), None);
        assert_eq!(t.iter(1).collect::<Vec<_>>(), [(&b"k"[..], &long[..])]);
        assert_eq!(t.remove(b"k", 1), Some(300));
        assert_eq!(t.remove(b"k", 1), None);
        assert_eq!(t.remove(b"k", 2), Some(1));
        assert_eq!(t.get(t.find(b"k").unwrap(), 0), Some(&b"zero"[..]));
        // Dropping the values of state 0 that are not "zero" keeps it; then the key goes.
        t.retain(0, |v| v == b"zero", |_, _| panic!("kept"));
        assert_eq!(t.iter(0).count(), 1);
        let mut dropped = Vec::new();
        t.retain(0, |_| false, |k, v| dropped.push((k.to_vec(), v.to_vec())));
        assert_eq!(dropped, [(b"k".to_vec(), b"zero".to_vec())]);
        assert_eq!(t.find(b"k"), None, "a key without values has no bucket");
    }

    /// Random sets, removals and cleanups of a few states of a few keys, with values short
    /// and long (over [`LONG`]), against a map of `(key, state)` to value.
    #[test]
    fn random_changes_read_back_as_a_map_has_them() {
        use std::collections::BTreeMap;
        let mut t = ValueTable::default();
        let mut model = BTreeMap::<(u8, usize), Vec<u8>>::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for step in 0..20_000 {
            let (key, ord) = (next(6) as u8, next(4) as usize);
            let len = [0, 1, 8, 253, 254, 300][next(6) as usize];
            let v = vec![step as u8; len];
            match next(10) {
                0..=5 => assert_eq!(
                    t.set(&[key], ord, &v),
                    model.insert((key, ord), v).map(|o| o.len())
                ),
                6..=8 => assert_eq!(
                    t.remove(&[key], ord),
                    model.remove(&(key, ord)).map(|o| o.len())
                ),
                _ => {
                    let cut = step as u8;
                    t.retain(ord, |v| v.first() != Some(&cut), |_, _| {});
                    model.retain(|&(_, o), v| o != ord || v.first() != Some(&cut));
                }
            }
            for key in 0..6u8 {
                for ord in 0..4 {
                    let got = t.find(&[key]).and_then(|p| t.get(p, ord));
                    assert_eq!(
                        got,
                        model.get(&(key, ord)).map(Vec::as_slice),
                        "step {step}"
                    );
                }
                let held = (0..4).any(|ord| model.contains_key(&(key, ord)));
                assert_eq!(
                    t.find(&[key]).is_some(),
                    held,
                    "step {step}: a bucket iff values"
                );
            }
        }
    }
}
