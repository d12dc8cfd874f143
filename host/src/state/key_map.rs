//! One key's map in the memory backend: packed while a load sends it whole, a B-tree once
//! it is larger (a guest then reads it entry by entry, `wit/stream.wit`), so that reading or
//! writing one entry of a large map costs a lookup, not a copy of the map.

use std::collections::BTreeMap;

use weir_wire::MAP_LOAD_LIMIT;

use super::packed::{Change, Packed};

#[derive(Debug)]
pub(crate) enum KeyMap {
    Packed(Packed),
    Tree {
        entries: BTreeMap<Box<[u8]>, Box<[u8]>>,
        /// What the entries take in the load encoding, as [`Packed::as_bytes`] counts.
        bytes: usize,
    },
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap::Packed(Packed::default())
    }
}

/// What entry `(k, v)` takes in the load encoding.
fn encoded(k: &[u8], v: &[u8]) -> usize {
    8 + k.len() + v.len()
}

impl KeyMap {
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            KeyMap::Packed(p) => p.is_empty(),
            KeyMap::Tree { entries, .. } => entries.is_empty(),
        }
    }

    /// Its number of entries.
    pub(crate) fn len(&self) -> u32 {
        match self {
            KeyMap::Packed(p) => p.len(),
            KeyMap::Tree { entries, .. } => entries.len() as u32,
        }
    }

    /// What its entries take in the load encoding.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            KeyMap::Packed(p) => p.as_bytes().len(),
            KeyMap::Tree { bytes, .. } => *bytes,
        }
    }

    /// The map as a load answer sends it whole: `None` when it is a tree, too large to send.
    pub(crate) fn packed(&self) -> Option<&Packed> {
        match self {
            KeyMap::Packed(p) => Some(p),
            KeyMap::Tree { .. } => None,
        }
    }

    /// Calls `f` with the entries in key order while it returns true.
    pub(crate) fn each(&self, mut f: impl FnMut(&[u8], &[u8]) -> bool) {
        match self {
            KeyMap::Packed(p) => {
                for (k, v) in p.entries() {
                    if !f(k, v) {
                        return;
                    }
                }
            }
            KeyMap::Tree { entries, .. } => {
                for (k, v) in entries {
                    if !f(k, v) {
                        return;
                    }
                }
            }
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<&[u8]> {
        match self {
            KeyMap::Packed(p) => p.entries().find(|(k, _)| *k == key).map(|(_, v)| v),
            KeyMap::Tree { entries, .. } => entries.get(key).map(|v| &v[..]),
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = KeyMap::default();
    }

    /// Applies puts and removals as [`Packed::apply`] does, then changes the representation
    /// if the map crossed [`MAP_LOAD_LIMIT`] (back to packed only below half of it, so that
    /// a map at the limit does not switch on every write).
    pub(crate) fn apply<'c>(
        &mut self,
        changes: impl IntoIterator<Item = Change<'c>>,
        scratch: &mut Vec<u8>,
        mut changed: impl FnMut(&[u8], Option<&[u8]>, Option<&[u8]>),
    ) {
        match self {
            KeyMap::Packed(p) => {
                p.apply(changes, scratch, changed);
                if p.as_bytes().len() > MAP_LOAD_LIMIT {
                    let bytes = p.as_bytes().len();
                    let entries = p.entries().map(|(k, v)| (k.into(), v.into())).collect();
                    *self = KeyMap::Tree { entries, bytes };
                }
            }
            KeyMap::Tree { entries, bytes } => {
                for (k, v) in changes {
                    let old = match v {
                        Some(v) => entries.insert(k.into(), v.into()),
                        None => entries.remove(k),
                    };
                    changed(k, old.as_deref(), v);
                    *bytes += v.map_or(0, |v| encoded(k, v));
                    *bytes -= old.as_deref().map_or(0, |v| encoded(k, v));
                }
                if *bytes <= MAP_LOAD_LIMIT / 2 {
                    self.pack();
                }
            }
        }
    }

    /// Keeps the entries `keep` accepts.
    pub(crate) fn retain_entries(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        match self {
            KeyMap::Packed(p) => p.retain_entries(keep),
            KeyMap::Tree { entries, bytes } => {
                entries.retain(|k, v| {
                    let kept = keep(k, v);
                    if !kept {
                        *bytes -= encoded(k, v);
                    }
                    kept
                });
                if *bytes <= MAP_LOAD_LIMIT / 2 {
                    self.pack();
                }
            }
        }
    }

    /// Turns a tree back into a packed map.
    fn pack(&mut self) {
        if let KeyMap::Tree { entries, .. } = self {
            let mut p = Packed::default();
            for (k, v) in entries.iter() {
                p.push_entry(k, v);
            }
            *self = KeyMap::Packed(p);
        }
    }
}
