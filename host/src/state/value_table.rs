//! The table of one value state in one key group: an open-addressing hash table whose
//! buckets hold the key and the value inline (for up to 24 bytes each).
//!
//! A value found once with [`ValueTable::find`] can be read and replaced through its
//! [`ValuePos`] (the bucket) without hashing and probing again. The WASM host relies on this:
//! `load` finds every key of a batch, `store` writes back by position, so a batch costs one
//! hash lookup per distinct key instead of two. A position is only a hint: `set_at` checks
//! that the bucket still holds the key and falls back to a lookup when the table changed.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::{Key, Value};

/// The bucket a value was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePos(usize);

#[derive(Debug, Default)]
pub(crate) struct ValueTable {
    table: HashTable<(Key, Value)>,
    hasher: foldhash::fast::RandomState,
}

impl ValueTable {
    pub(crate) fn find(&self, key: &[u8]) -> Option<ValuePos> {
        self.table
            .find_bucket_index(self.hasher.hash_one(key), |(k, _)| k[..] == *key)
            .map(ValuePos)
    }

    pub(crate) fn get(&self, pos: ValuePos) -> Option<&[u8]> {
        self.table.get_bucket(pos.0).map(|(_, v)| &v[..])
    }

    /// Replaces the value of `key`, found at `pos` unless the table changed since. Returns
    /// the length of the value it replaced (`None`: the key is new).
    pub(crate) fn set_at(&mut self, pos: ValuePos, key: &[u8], value: &[u8]) -> Option<usize> {
        match self.table.get_bucket_mut(pos.0) {
            Some((k, v)) if k[..] == *key => Some(overwrite(v, value)),
            _ => self.set(key, value),
        }
    }

    /// Inserts or replaces the value of `key`; returns the length of the value it replaced.
    pub(crate) fn set(&mut self, key: &[u8], value: &[u8]) -> Option<usize> {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(key);
        match self.table.find_mut(hash, |(k, _)| k[..] == *key) {
            Some((_, v)) => Some(overwrite(v, value)),
            None => {
                self.table
                    .insert_unique(hash, (key.into(), value.into()), |(k, _)| {
                        hasher.hash_one(&k[..])
                    });
                None
            }
        }
    }

    /// Removes the value of `key`; returns its length, if there was one.
    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        let entry = self.table.find_entry(hash, |(k, _)| k[..] == *key).ok()?;
        Some(entry.remove().0.1.len())
    }

    /// Every `(key, value)`, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table.iter().map(|(k, v)| (&k[..], &v[..]))
    }

    /// Keeps the entries whose value `keep` accepts; calls `removed` with each other key and
    /// value.
    pub(crate) fn retain(
        &mut self,
        mut keep: impl FnMut(&[u8]) -> bool,
        mut removed: impl FnMut(&[u8], &[u8]),
    ) {
        self.table.retain(|(k, v)| {
            let kept = keep(v);
            if !kept {
                removed(k, v);
            }
            kept
        });
    }
}

/// Replaces `v` with `value`; a value of the same length (a counter, mostly) is copied over.
/// Returns the length `v` had.
fn overwrite(v: &mut Value, value: &[u8]) -> usize {
    let old = v.len();
    if old == value.len() {
        v.copy_from_slice(value);
    } else {
        v.clear();
        v.extend_from_slice(value);
    }
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_checked_hints() {
        let mut t = ValueTable::default();
        t.set(b"a", b"1");
        let a = t.find(b"a").unwrap();
        assert_eq!(t.get(a), Some(&b"1"[..]));
        t.set_at(a, b"a", b"11");
        assert_eq!(t.get(t.find(b"a").unwrap()), Some(&b"11"[..]));
        // Grow the table: old positions may now point elsewhere, set_at still does the right thing.
        for i in 0..1000u32 {
            t.set(&i.to_le_bytes(), b"x");
        }
        t.set_at(a, b"a", b"111");
        assert_eq!(t.get(t.find(b"a").unwrap()), Some(&b"111"[..]));
        t.remove(b"a");
        assert_eq!(t.find(b"a"), None);
        t.set_at(a, b"a", b"again");
        assert_eq!(t.get(t.find(b"a").unwrap()), Some(&b"again"[..]));
        assert_eq!(t.iter().count(), 1001);
    }
}
