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

    /// Replaces the value of `key`, found at `pos` unless the table changed since.
    pub(crate) fn set_at(&mut self, pos: ValuePos, key: &[u8], value: &[u8]) {
        match self.table.get_bucket_mut(pos.0) {
            Some((k, v)) if k[..] == *key => overwrite(v, value),
            _ => self.set(key, value),
        }
    }

    /// Inserts or replaces the value of `key`.
    pub(crate) fn set(&mut self, key: &[u8], value: &[u8]) {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(key);
        match self.table.find_mut(hash, |(k, _)| k[..] == *key) {
            Some((_, v)) => overwrite(v, value),
            None => {
                self.table
                    .insert_unique(hash, (key.into(), value.into()), |(k, _)| {
                        hasher.hash_one(&k[..])
                    });
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        if let Ok(entry) = self.table.find_entry(hash, |(k, _)| k[..] == *key) {
            entry.remove();
        }
    }

    /// Every `(key, value)`, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table.iter().map(|(k, v)| (&k[..], &v[..]))
    }

    /// Keeps the entries whose value `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        self.table.retain(|(_, v)| keep(v));
    }
}

/// Replaces `v` with `value`; a value of the same length (a counter, mostly) is copied over.
fn overwrite(v: &mut Value, value: &[u8]) {
    if v.len() == value.len() {
        v.copy_from_slice(value);
    } else {
        v.clear();
        v.extend_from_slice(value);
    }
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
