//! The table of one value state in one key group: a hash index into a slab of values.
//!
//! A value found once with [`ValueTable::find`] can be read and replaced through its
//! [`ValuePos`] without hashing and comparing the key again. The WASM host relies on this:
//! `load` finds every key of a batch, `store` writes back by position, so a batch costs one
//! hash lookup per distinct key instead of two.

use super::{FastMap, Key, Value};

/// Where a value sits in its table; valid until its key is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePos(u32);

#[derive(Debug, Default)]
pub(crate) struct ValueTable {
    index: FastMap<Key, u32>,
    values: Vec<Value>,
    /// Positions of removed values, reused by the next insert.
    free: Vec<u32>,
}

impl ValueTable {
    pub(crate) fn find(&self, key: &[u8]) -> Option<ValuePos> {
        self.index.get(key).map(|&i| ValuePos(i))
    }

    pub(crate) fn get(&self, pos: ValuePos) -> &[u8] {
        &self.values[pos.0 as usize]
    }

    pub(crate) fn set_at(&mut self, pos: ValuePos, value: &[u8]) {
        let v = &mut self.values[pos.0 as usize];
        v.clear();
        v.extend_from_slice(value);
    }

    /// Inserts or replaces the value of `key`.
    pub(crate) fn set(&mut self, key: &[u8], value: &[u8]) -> ValuePos {
        if let Some(pos) = self.find(key) {
            self.set_at(pos, value);
            return pos;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.values[i as usize] = value.into();
                i
            }
            None => {
                self.values.push(value.into());
                (self.values.len() - 1) as u32
            }
        };
        self.index.insert(key.into(), i);
        ValuePos(i)
    }

    pub(crate) fn remove(&mut self, key: &[u8]) {
        if let Some(i) = self.index.remove(key) {
            self.values[i as usize] = Value::new();
            self.free.push(i);
        }
    }

    #[cfg(test)]
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.index.keys().map(|k| &k[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_survive_other_changes_and_slots_are_reused() {
        let mut t = ValueTable::default();
        let a = t.set(b"a", b"1");
        let b = t.set(b"b", b"2");
        assert_eq!(t.find(b"a"), Some(a));
        t.set_at(a, b"11");
        assert_eq!(t.get(a), b"11");
        t.remove(b"a");
        assert_eq!(t.find(b"a"), None);
        let c = t.set(b"c", b"3");
        assert_eq!(c, a, "the freed position is reused");
        assert_eq!((t.get(b), t.get(c)), (&b"2"[..], &b"3"[..]));
        assert_eq!(t.set(b"b", b"22"), b);
        assert_eq!(t.keys().count(), 2);
    }
}
