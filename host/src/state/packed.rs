//! One key's list or map in the memory backend, kept as a single buffer in the encoding of a
//! `load` answer (`wit/stream.wit`): list elements as `bytes`, map entries as `bytes key,
//! bytes value` in key order. A load copies the buffer in one piece instead of walking
//! separately allocated elements or tree nodes, and a write rewrites the key's buffer (a
//! merge of the sorted changes into the sorted entries for a map). The RocksDB backend
//! caches maps in the same encoding ([`map_entries`], [`merge`]).

use std::cmp::Ordering;

use smallvec::SmallVec;
use weir_wire::CheckedItems;

/// A put (`Some` value) or a removal of a map key.
pub(crate) type Change<'c> = (&'c [u8], Option<&'c [u8]>);

/// The least a key's buffer allocates. Grown by Vec's doubling from its first few bytes
/// (8, 16, 32, 64), a small list or map was reallocated on most of its first writes.
const MIN_CAPACITY: usize = 64;

#[derive(Debug, Default)]
pub(crate) struct Packed {
    /// Elements, or entries for a map.
    n: u32,
    buf: Vec<u8>,
}

/// The map entry at byte `at` of `buf` and where the next one starts.
fn entry_at(buf: &[u8], at: usize) -> Option<(&[u8], &[u8], usize)> {
    let mut items = CheckedItems::new(buf.get(at..)?);
    let (k, v) = (items.next()?, items.next()?);
    Some((k, v, buf.len() - items.rest().len()))
}

impl Packed {
    /// Elements (list) or entries (map).
    pub(crate) fn len(&self) -> u32 {
        self.n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The items, as a `load` answer lists them after their count.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub(crate) fn clear(&mut self) {
        self.n = 0;
        self.buf.clear();
    }

    /// A list's elements.
    pub(crate) fn elements(&self) -> CheckedItems<'_> {
        CheckedItems::new(&self.buf)
    }

    /// A map's entries, in key order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        map_entries(&self.buf)
    }

    /// Makes room for `additional` more bytes: [`MIN_CAPACITY`] at first, then doubling.
    fn reserve(&mut self, additional: usize) {
        if self.buf.capacity() - self.buf.len() < additional {
            self.buf.reserve(additional.max(MIN_CAPACITY));
        }
    }

    /// Appends a list element.
    pub(crate) fn push(&mut self, element: &[u8]) {
        self.reserve(4 + element.len());
        put_item(&mut self.buf, element);
        self.n += 1;
    }

    /// Appends a map entry; the caller keeps the entries in key order.
    pub(crate) fn push_entry(&mut self, key: &[u8], value: &[u8]) {
        self.reserve(8 + key.len() + value.len());
        put_item(&mut self.buf, key);
        put_item(&mut self.buf, value);
        self.n += 1;
    }

    /// Keeps the list elements `keep` accepts.
    pub(crate) fn retain_elements(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        let mut kept = Packed::default();
        for e in self.elements().filter(|e| keep(e)) {
            kept.push(e);
        }
        *self = kept;
    }

    /// Keeps the map entries `keep` accepts.
    pub(crate) fn retain_entries(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) {
        let mut kept = Packed::default();
        for (k, v) in self.entries().filter(|(k, v)| keep(k, v)) {
            kept.push_entry(k, v);
        }
        *self = kept;
    }

    /// Applies puts (`Some`) and removals (`None`) of map keys, later ones winning over
    /// earlier ones of the same key. `changed(key, old, new)` is called with each entry's
    /// value before and after (`None`: absent), for byte counts. `scratch` is a buffer to
    /// reuse for every key's map.
    pub(crate) fn apply<'c>(
        &mut self,
        changes: impl IntoIterator<Item = Change<'c>>,
        scratch: &mut Vec<u8>,
        changed: impl FnMut(&[u8], Option<&[u8]>, Option<&[u8]>),
    ) {
        let (added, removed) = merge(&self.buf, changes, scratch, changed);
        // Copied back rather than swapped: each buffer keeps the capacity it grew to (the
        // key's map's, the largest map's for `scratch`), so that steady writes reallocate
        // neither. A swap handed each key the previous key's buffer, often too small.
        self.buf.clear();
        if self.buf.capacity() < scratch.len() {
            // A new buffer rather than a grown one, whose `realloc` would copy the old
            // entries, all of them replaced.
            let capacity = scratch.len().max(2 * self.buf.capacity()).max(MIN_CAPACITY);
            self.buf = Vec::with_capacity(capacity);
        }
        self.buf.extend_from_slice(scratch);
        self.n = self.n + added - removed;
    }
}

/// Appends one `bytes` item.
pub(crate) fn put_item(buf: &mut Vec<u8>, item: &[u8]) {
    buf.extend_from_slice(&(item.len() as u32).to_le_bytes());
    buf.extend_from_slice(item);
}

/// The entries of a packed map, in key order.
pub(crate) fn map_entries(buf: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut items = CheckedItems::new(buf);
    std::iter::from_fn(move || Some((items.next()?, items.next()?)))
}

/// Writes the packed map `old` with `changes` applied into `out` (see [`Packed::apply`]);
/// returns how many entries it added and removed.
pub(crate) fn merge<'c>(
    old: &[u8],
    changes: impl IntoIterator<Item = Change<'c>>,
    out: &mut Vec<u8>,
    mut changed: impl FnMut(&[u8], Option<&[u8]>, Option<&[u8]>),
) -> (u32, u32) {
    let mut sorted: SmallVec<[Change<'c>; 8]> = changes.into_iter().collect();
    // Stable: of several changes of one key, the last stays last.
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let changes = sorted.iter().enumerate().filter_map(|(i, c)| {
        let superseded = sorted.get(i + 1).is_some_and(|next| next.0 == c.0);
        (!superseded).then_some(*c)
    });
    // The entries between changes are copied in one piece each.
    out.clear();
    let (mut added, mut removed) = (0, 0);
    let (mut at, mut run) = (0, 0);
    for (key, new) in changes {
        let mut before = None;
        while let Some((k, v, next)) = entry_at(old, at) {
            match k.cmp(key) {
                Ordering::Less => at = next,
                Ordering::Equal => {
                    before = Some((v, next));
                    break;
                }
                Ordering::Greater => break,
            }
        }
        out.extend_from_slice(&old[run..at]);
        if let Some((_, next)) = before {
            (at, removed) = (next, removed + 1);
        }
        run = at;
        changed(key, before.map(|(v, _)| v), new);
        if let Some(v) = new {
            put_item(out, key);
            put_item(out, v);
            added += 1;
        }
    }
    out.extend_from_slice(&old[run..]);
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(p: &Packed) -> Vec<(String, String)> {
        p.entries()
            .map(|(k, v)| {
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn map_changes_merge_in_key_order_and_the_last_change_of_a_key_wins() {
        let mut p = Packed::default();
        let mut scratch = Vec::new();
        let mut log = Vec::new();
        let mut note = |k: &[u8], old: Option<&[u8]>, new: Option<&[u8]>| {
            log.push((k.to_vec(), old.map(<[u8]>::to_vec), new.map(<[u8]>::to_vec)))
        };
        p.apply(
            [
                (&b"m"[..], Some(&b"1"[..])),
                (b"c", Some(b"2")),
                (b"x", None),
            ],
            &mut scratch,
            &mut note,
        );
        p.apply(
            [
                (&b"c"[..], Some(&b"3"[..])),
                (b"a", Some(b"4")),
                (b"m", None),
                (b"z", Some(b"5")),
                (b"a", Some(b"6")),
            ],
            &mut scratch,
            &mut note,
        );
        let s = |x: &str| x.to_owned();
        assert_eq!(
            entries(&p),
            [(s("a"), s("6")), (s("c"), s("3")), (s("z"), s("5"))]
        );
        assert_eq!(p.len(), 3);
        assert_eq!(
            log.iter()
                .filter(|(k, _, _)| k == b"m")
                .map(|(_, o, n)| (o.clone(), n.clone()))
                .collect::<Vec<_>>(),
            [(None, Some(b"1".to_vec())), (Some(b"1".to_vec()), None)]
        );
        p.retain_entries(|k, _| k != b"c");
        assert_eq!(entries(&p), [(s("a"), s("6")), (s("z"), s("5"))]);
    }

    /// A map that outgrows its buffer over many writes gets a new one each time and keeps
    /// every entry.
    #[test]
    fn a_map_growing_past_its_buffer_keeps_its_entries() {
        let (mut p, mut scratch) = (Packed::default(), Vec::new());
        let mut want = Vec::new();
        for i in 0..50 {
            let (k, v) = (format!("key-{i:02}"), format!("value-{i}"));
            p.apply(
                [(k.as_bytes(), Some(v.as_bytes()))],
                &mut scratch,
                |_, _, _| {},
            );
            want.push((k, v));
            assert_eq!(entries(&p), want);
            assert_eq!(p.len() as usize, want.len());
        }
        // Grown from its first buffer through several doublings.
        assert!(p.as_bytes().len() > 16 * MIN_CAPACITY);
    }

    #[test]
    fn list_elements_keep_their_order() {
        let mut p = Packed::default();
        for e in [&b"x"[..], b"", b"yz"] {
            p.push(e);
        }
        assert_eq!(p.elements().collect::<Vec<_>>(), [&b"x"[..], b"", b"yz"]);
        p.retain_elements(|e| !e.is_empty());
        assert_eq!(p.elements().collect::<Vec<_>>(), [&b"x"[..], b"yz"]);
        assert_eq!(p.len(), 2);
    }
}
