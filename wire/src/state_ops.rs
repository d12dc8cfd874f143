//! State changes (guest to host): the state-store buffer, `(u32 key-slot, u8 op, payload)`
//! until the end, one buffer per state and batch (a value state's write-back buffer is the
//! same with key ids in place of key slots).
//!
//! Each state kind numbers its ops on its own (op 1 is a value's set, a list's replace and a
//! map's put), so the op bytes are written and read only here, one type per kind: a list op
//! cannot be written where a map op was meant.

use crate::primitives::{
    CheckedItems, DecodeError, Reader, put_bytes, put_head_bytes, read_entries,
};

// The op bytes of `wit/stream.wit`, per state kind.
const CLEAR: u8 = 0;
const VALUE_SET: u8 = 1;
const LIST_REPLACE: u8 = 1;
const LIST_APPEND: u8 = 2;
const MAP_PUT: u8 = 1;
const MAP_REMOVE: u8 = 2;

/// One change to a value state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueOp<'a> {
    /// The key has no value any more.
    Clear,
    /// The key's value is now this.
    Set(&'a [u8]),
}

/// One change to a list state, as read back with its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListOp<'a> {
    /// The key's list is now empty.
    Clear,
    /// The key's list is now these elements.
    Replace(Elements<'a>),
    /// These elements go at the end of the key's list.
    Append(Elements<'a>),
}

/// The elements of a list op, read where they are in the buffer (checked when the op was
/// read, so that iterating cannot fail): no allocation per op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elements<'a> {
    items: CheckedItems<'a>,
    n: u32,
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let item = self.items.next()?;
        self.n -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.n as usize, Some(self.n as usize))
    }
}

impl ExactSizeIterator for Elements<'_> {}

/// What a list change does, for [`put_list_op`], which takes the elements of a replace or an
/// append separately so that a writer need not collect them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListWrite {
    /// The key's list is now empty.
    Clear,
    /// The key's list is now the given elements.
    Replace,
    /// The given elements go at the end of the key's list.
    Append,
}

impl ListWrite {
    fn byte(self) -> u8 {
        match self {
            ListWrite::Clear => CLEAR,
            ListWrite::Replace => LIST_REPLACE,
            ListWrite::Append => LIST_APPEND,
        }
    }
}

/// One change to a map state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapOp<'a> {
    /// The key's map is now empty.
    Clear,
    /// The key's map now maps this map key to this value.
    Put(&'a [u8], &'a [u8]),
    /// The key's map no longer has this map key.
    Remove(&'a [u8]),
}

/// `slot` and an op byte, the head of every op.
#[inline(always)]
fn head(slot: u32, op: u8) -> [u8; 5] {
    let s = slot.to_le_bytes();
    [s[0], s[1], s[2], s[3], op]
}

/// Writes a value change of the key in `slot`.
#[inline]
pub fn put_value_op(buf: &mut Vec<u8>, slot: u32, op: ValueOp<'_>) {
    match op {
        ValueOp::Clear => buf.extend_from_slice(&head(slot, CLEAR)),
        ValueOp::Set(v) => put_head_bytes(buf, &head(slot, VALUE_SET), v),
    }
}

/// [`put_value_op`] of a set to the first `len` bytes of `value` (an integer's CBOR
/// encoding is at most nine bytes), written with one fixed-size move.
///
/// # Panics
/// When `len` is more than 9.
#[inline(always)]
pub fn put_value_set_short(buf: &mut Vec<u8>, slot: u32, value: &[u8; 9], len: usize) {
    assert!(len <= 9, "a value of {len} bytes in an array of 9");
    let mut op = [0; 18];
    op[..5].copy_from_slice(&head(slot, VALUE_SET));
    op[5..9].copy_from_slice(&(len as u32).to_le_bytes());
    op[9..].copy_from_slice(value);
    let at = buf.len();
    buf.extend_from_slice(&op);
    buf.truncate(at + 9 + len);
}

/// Writes a list change of the key in `slot`; `elems` are the elements of a replace or an
/// append (a clear ignores them).
pub fn put_list_op<'b>(
    buf: &mut Vec<u8>,
    slot: u32,
    op: ListWrite,
    elems: impl ExactSizeIterator<Item = &'b [u8]>,
) {
    let head = head(slot, op.byte());
    if op == ListWrite::Clear {
        return buf.extend_from_slice(&head);
    }
    let n = (elems.len() as u32).to_le_bytes();
    buf.extend_from_slice(&[
        head[0], head[1], head[2], head[3], head[4], n[0], n[1], n[2], n[3],
    ]);
    for e in elems {
        put_bytes(buf, e);
    }
}

/// Writes a map change of the key in `slot`.
pub fn put_map_op(buf: &mut Vec<u8>, slot: u32, op: MapOp<'_>) {
    match op {
        MapOp::Clear => buf.extend_from_slice(&head(slot, CLEAR)),
        MapOp::Put(k, v) => {
            put_head_bytes(buf, &head(slot, MAP_PUT), k);
            put_bytes(buf, v);
        }
        MapOp::Remove(k) => put_head_bytes(buf, &head(slot, MAP_REMOVE), k),
    }
}

/// Iterates `(slot, op)` of a value-state store buffer.
pub fn read_value_ops(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u32, ValueOp<'_>), DecodeError>> + '_ {
    read_entries(buf, "value-state changes", |r| {
        let slot = r.u32()?;
        match r.u8()? {
            CLEAR => Ok((slot, ValueOp::Clear)),
            VALUE_SET => Ok((slot, ValueOp::Set(r.bytes()?))),
            _ => Err(r.error()),
        }
    })
}

/// Iterates `(slot, op)` of a list-state store buffer.
pub fn read_list_ops(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u32, ListOp<'_>), DecodeError>> + '_ {
    read_entries(buf, "list-state changes", |r| {
        let slot = r.u32()?;
        let op = r.u8()?;
        if op == CLEAR {
            return Ok((slot, ListOp::Clear));
        }
        let elems = read_elements(r)?;
        match op {
            LIST_REPLACE => Ok((slot, ListOp::Replace(elems))),
            LIST_APPEND => Ok((slot, ListOp::Append(elems))),
            _ => Err(r.error()),
        }
    })
}

/// `u32 n, n × bytes`.
fn read_elements<'a>(r: &mut Reader<'a>) -> Result<Elements<'a>, DecodeError> {
    let n = r.count(4)?;
    let start = *r;
    for _ in 0..n {
        r.bytes()?;
    }
    Ok(Elements {
        items: CheckedItems::new(start.between(r)),
        n: n as u32,
    })
}

/// Iterates `(slot, op)` of a map-state store buffer.
pub fn read_map_ops(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u32, MapOp<'_>), DecodeError>> + '_ {
    read_entries(buf, "map-state changes", |r| {
        let slot = r.u32()?;
        match r.u8()? {
            CLEAR => Ok((slot, MapOp::Clear)),
            MAP_PUT => Ok((slot, MapOp::Put(r.bytes()?, r.bytes()?))),
            MAP_REMOVE => Ok((slot, MapOp::Remove(r.bytes()?))),
            _ => Err(r.error()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_ops_round_trip() {
        let mut b = Vec::new();
        put_value_op(&mut b, 3, ValueOp::Set(b"v"));
        put_value_op(&mut b, 4, ValueOp::Clear);
        let ops: Vec<_> = read_value_ops(&b).map(Result::unwrap).collect();
        assert_eq!(ops, vec![(3, ValueOp::Set(b"v")), (4, ValueOp::Clear)]);

        let mut b = Vec::new();
        put_list_op(&mut b, 1, ListWrite::Append, [&b"a"[..], b"b"].into_iter());
        put_list_op(&mut b, 1, ListWrite::Clear, std::iter::empty());
        put_list_op(&mut b, 2, ListWrite::Replace, [&b"c"[..]].into_iter());
        let ops: Vec<_> = read_list_ops(&b)
            .map(|op| match op.unwrap() {
                (slot, ListOp::Clear) => (slot, "clear", vec![]),
                (slot, ListOp::Replace(e)) => (slot, "replace", e.collect()),
                (slot, ListOp::Append(e)) => (slot, "append", e.collect::<Vec<_>>()),
            })
            .collect();
        assert_eq!(
            ops,
            [
                (1, "append", vec![&b"a"[..], b"b"]),
                (1, "clear", vec![]),
                (2, "replace", vec![b"c"])
            ]
        );

        let mut b = Vec::new();
        put_map_op(&mut b, 0, MapOp::Put(b"k", b"v"));
        put_map_op(&mut b, 0, MapOp::Remove(b"k"));
        put_map_op(&mut b, 0, MapOp::Clear);
        let ops: Vec<_> = read_map_ops(&b).map(Result::unwrap).collect();
        assert_eq!(
            ops,
            vec![
                (0, MapOp::Put(b"k", b"v")),
                (0, MapOp::Remove(b"k")),
                (0, MapOp::Clear)
            ]
        );
        assert!(read_map_ops(&[0, 0, 0, 0, 9]).next().unwrap().is_err());
    }

    /// Keys and values up to 16 bytes are written with the op's head in one growth of the
    /// buffer, longer ones field by field: both read back the same.
    #[test]
    fn ops_of_every_length_round_trip() {
        let bytes: Vec<u8> = (1..=40).collect();
        for n in 0..=bytes.len() {
            let (a, b) = bytes.split_at(n);
            let mut buf = Vec::new();
            put_value_op(&mut buf, 0x0102_0304, ValueOp::Set(a));
            put_value_op(&mut buf, 9, ValueOp::Set(b));
            let ops: Vec<_> = read_value_ops(&buf).map(Result::unwrap).collect();
            assert_eq!(ops, [(0x0102_0304, ValueOp::Set(a)), (9, ValueOp::Set(b))]);

            let mut buf = Vec::new();
            put_map_op(&mut buf, 0x0102_0304, MapOp::Put(a, b));
            put_map_op(&mut buf, 7, MapOp::Remove(b));
            let ops: Vec<_> = read_map_ops(&buf).map(Result::unwrap).collect();
            assert_eq!(
                ops,
                [(0x0102_0304, MapOp::Put(a, b)), (7, MapOp::Remove(b))]
            );
        }
    }

    #[test]
    fn a_short_set_is_the_set_of_its_first_bytes() {
        let value: [u8; 9] = *b"123456789";
        let mut buf = vec![0xee];
        for len in 0..=9 {
            put_value_set_short(&mut buf, len as u32, &value, len);
        }
        let mut want = vec![0xee];
        for len in 0..=9 {
            put_value_op(&mut want, len as u32, ValueOp::Set(&value[..len]));
        }
        assert_eq!(buf, want);
    }

    /// A list op's elements are checked when the op is read, since iterating them cannot
    /// fail: a buffer cut anywhere in them, or counting more than it holds, is an error.
    #[test]
    fn list_ops_with_cut_or_overcounted_elements_are_errors() {
        let mut b = Vec::new();
        put_list_op(
            &mut b,
            1,
            ListWrite::Append,
            [&b"ab"[..], b"cde"].into_iter(),
        );
        for cut in 6..b.len() {
            let first = read_list_ops(&b[..cut]).next().unwrap();
            assert!(first.is_err(), "cut at {cut} of {}", b.len());
        }
        let mut over = b.clone();
        over[5] = 3;
        assert!(read_list_ops(&over).next().unwrap().is_err());
        let (_, op) = read_list_ops(&b).next().unwrap().unwrap();
        let ListOp::Append(elems) = op else {
            panic!("{op:?}")
        };
        assert_eq!(elems.len(), 2);
        assert_eq!(elems.collect::<Vec<_>>(), [&b"ab"[..], b"cde"]);
    }

    /// The op bytes of `wit/stream.wit`: the host and guests of other versions rely on them.
    #[test]
    fn op_bytes_are_as_documented() {
        let op_byte = |write: &dyn Fn(&mut Vec<u8>)| {
            let mut b = Vec::new();
            write(&mut b);
            b[4]
        };
        let none = || std::iter::empty();
        assert_eq!(op_byte(&|b| put_value_op(b, 0, ValueOp::Clear)), 0);
        assert_eq!(op_byte(&|b| put_value_op(b, 0, ValueOp::Set(b""))), 1);
        assert_eq!(op_byte(&|b| put_list_op(b, 0, ListWrite::Clear, none())), 0);
        assert_eq!(
            op_byte(&|b| put_list_op(b, 0, ListWrite::Replace, none())),
            1
        );
        assert_eq!(
            op_byte(&|b| put_list_op(b, 0, ListWrite::Append, none())),
            2
        );
        assert_eq!(op_byte(&|b| put_map_op(b, 0, MapOp::Clear)), 0);
        assert_eq!(op_byte(&|b| put_map_op(b, 0, MapOp::Put(b"", b""))), 1);
        assert_eq!(op_byte(&|b| put_map_op(b, 0, MapOp::Remove(b""))), 2);
        // A clear carries no payload; a replace or an append carries its element count.
        let mut b = Vec::new();
        put_list_op(&mut b, 7, ListWrite::Clear, [&b"ignored"[..]].into_iter());
        assert_eq!(b, [7, 0, 0, 0, 0]);
        let mut b = Vec::new();
        put_list_op(&mut b, 7, ListWrite::Append, [&b"x"[..]].into_iter());
        assert_eq!(b, [7, 0, 0, 0, 2, 1, 0, 0, 0, 1, 0, 0, 0, b'x']);
    }
}
