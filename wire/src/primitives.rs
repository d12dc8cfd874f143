//! The fields every buffer is made of (`u8`, little-endian `u32` and `s64`, length-prefixed
//! `bytes` where the length [`NONE`] means absent), the cursor that reads them and the error
//! a malformed buffer gives.

use std::fmt;

/// A length of `NONE` means "absent".
pub const NONE: u32 = u32::MAX;

/// A buffer that does not follow the layout in `wit/stream.wit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The buffer, as named to [`Reader::new`] (e.g. `"batch"`).
    pub what: &'static str,
    /// Where in the buffer decoding failed.
    pub offset: usize,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed {} at byte {}", self.what, self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// `what` names the buffer in errors.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    /// Whether the whole buffer has been read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The error for a malformed field at the current position.
    #[inline]
    pub(crate) fn error(&self) -> DecodeError {
        DecodeError {
            what: self.what,
            offset: self.pos,
        }
    }

    /// Gives up on the rest of the buffer: after an error it cannot be trusted.
    pub(crate) fn skip_rest(&mut self) {
        self.pos = self.buf.len();
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.error())?;
        let s = self.buf.get(self.pos..end).ok_or_else(|| self.error())?;
        self.pos = end;
        Ok(s)
    }

    /// Reads a `u8`.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    /// Reads a little-endian `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The little-endian `u32` at the current position, if there is one, without reading it.
    #[inline]
    pub(crate) fn peek_u32(&self) -> Option<u32> {
        let b = self.buf.get(self.pos..self.pos.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Reads a little-endian `s64`.
    #[inline]
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }

    /// Reads `bytes` that must be present (a length of [`NONE`] is an error).
    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        match self.opt_bytes()? {
            Some(b) => Ok(b),
            None => Err(self.error()),
        }
    }

    /// Reads `bytes` or their absence (a length of [`NONE`]).
    #[inline]
    pub fn opt_bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        let len = self.u32()?;
        if len == NONE {
            return Ok(None);
        }
        self.take(len as usize).map(Some)
    }

    // The `lean_*` readers are for the per-record loops (`OutputReader`, `BatchReader`):
    // they return `Option`, advance only on success and leave the error (at the start of
    // the field that failed) to the caller's one cold path, which keeps the loop to a bounds
    // test and a load per field. (The `Result` readers above, written over them, made the
    // word-count guest's per-batch loops slower under Cranelift, so both stay.)

    /// The first `N` bytes at the current position, without reading them.
    #[inline(always)]
    fn peek<const N: usize>(&self) -> Option<(&'a [u8; N], &'a [u8])> {
        self.buf.get(self.pos..)?.split_first_chunk::<N>()
    }

    /// Reads a `u8`; `None` at the end of the buffer.
    #[inline(always)]
    pub(crate) fn lean_u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// Reads a little-endian `u32`; `None` past the end of the buffer.
    #[inline(always)]
    pub(crate) fn lean_u32(&mut self) -> Option<u32> {
        let (b, _) = self.peek::<4>()?;
        self.pos += 4;
        Some(u32::from_le_bytes(*b))
    }

    /// Reads a little-endian `s64`; `None` past the end of the buffer.
    #[inline(always)]
    pub(crate) fn lean_i64(&mut self) -> Option<i64> {
        let (b, _) = self.peek::<8>()?;
        self.pos += 8;
        Some(i64::from_le_bytes(*b))
    }

    /// Reads `bytes` that must be present; `None` when they are absent or run past the end
    /// of the buffer.
    #[inline(always)]
    pub(crate) fn lean_bytes(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.peek::<4>()?;
        let len = u32::from_le_bytes(*len);
        if len == NONE {
            return None;
        }
        let bytes = rest.get(..len as usize)?;
        self.pos += 4 + len as usize;
        Some(bytes)
    }

    /// The bytes from this reader's position to `later`'s, a reader over the same buffer
    /// that has read on.
    pub(crate) fn between(&self, later: &Reader<'a>) -> &'a [u8] {
        &self.buf[self.pos..later.pos]
    }

    /// A count of following entries, each at least `min_entry` bytes long; rejects counts the
    /// rest of the buffer cannot hold, so a hostile count cannot make the reader allocate.
    #[inline]
    pub fn count(&mut self, min_entry: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_entry) > self.buf.len() - self.pos {
            return Err(self.error());
        }
        Ok(n)
    }
}

/// The `bytes` items (each a length and its bytes, none absent) of a buffer known to hold
/// whole items: one its own writer made, or one a [`Reader`] has read through. Iterating does
/// not check them again (a length past the end panics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedItems<'a>(&'a [u8]);

impl<'a> CheckedItems<'a> {
    /// The items of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        CheckedItems(bytes)
    }

    /// The bytes not iterated yet.
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }
}

impl<'a> Iterator for CheckedItems<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.0.split_first_chunk::<4>()?;
        let (item, rest) = rest.split_at(u32::from_le_bytes(*len) as usize);
        self.0 = rest;
        Some(item)
    }
}

/// Iterates the entries of a buffer that `read_one` decodes one at a time, until the end of
/// the buffer or the first error (after which the rest cannot be trusted).
pub(crate) fn read_entries<'a, T>(
    buf: &'a [u8],
    what: &'static str,
    mut read_one: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError> + 'a,
) -> impl Iterator<Item = Result<T, DecodeError>> + 'a {
    let mut r = Reader::new(buf, what);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || r.is_empty() {
            return None;
        }
        let item = read_one(&mut r);
        failed = item.is_err();
        Some(item)
    })
}

/// Writes a `u8`.
#[inline]
pub fn put_u8(buf: &mut Vec<u8>, v: u8) {
    buf.push(v);
}

/// Writes a little-endian `u32`.
#[inline]
pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Writes a little-endian `s64`.
#[inline]
pub fn put_i64(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// The length written before `b`.
///
/// # Panics
/// When `b` is 4 GiB or longer (its length would not fit, or would read as absent).
#[inline(always)]
pub(crate) fn field_len(b: &[u8]) -> u32 {
    u32::try_from(b.len())
        .ok()
        .filter(|&l| l != NONE)
        .expect("a buffer field must be shorter than 4 GiB")
}

/// Writes `bytes`.
///
/// # Panics
/// When `b` is 4 GiB or longer; callers enforce far smaller limits.
#[inline(always)]
pub fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    let len = field_len(b);
    if b.len() > SHORT {
        put_u32(buf, len);
        return buf.extend_from_slice(b);
    }
    let at = buf.len();
    buf.extend_from_slice(&[0; 4 + SHORT]);
    let dst = &mut buf[at..at + 4 + SHORT];
    dst[..4].copy_from_slice(&len.to_le_bytes());
    copy_short(&mut dst[4..], b);
    buf.truncate(at + 4 + b.len());
}

/// Appends `head` (at most [`HEAD`] bytes) and then `b` as a `bytes` item, as
/// `extend_from_slice(head)` and [`put_bytes`] do, but with a short `b` in one growth of `buf`
/// rather than one per field: the ops a guest writes per record (a state's change, a timer's)
/// are a few fixed fields and a short key or value.
#[inline(always)]
pub(crate) fn put_head_bytes(buf: &mut Vec<u8>, head: &[u8], b: &[u8]) {
    let h = head.len();
    if b.len() > SHORT || h > HEAD {
        buf.extend_from_slice(head);
        return put_bytes(buf, b);
    }
    let at = buf.len();
    buf.extend_from_slice(&[0; HEAD + 4 + SHORT]);
    let dst = &mut buf[at..];
    dst[..h].copy_from_slice(head);
    dst[h..h + 4].copy_from_slice(&(b.len() as u32).to_le_bytes());
    copy_short(&mut dst[h + 4..], b);
    buf.truncate(at + h + 4 + b.len());
}

/// The longest head [`put_head_bytes`] writes in one growth.
pub(crate) const HEAD: usize = 12;

/// Appends `b` to `buf`, as `extend_from_slice` does, short slices without a `memory.copy`
/// (see [`SHORT`]).
#[inline(always)]
pub fn extend_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    if b.len() > SHORT {
        return buf.extend_from_slice(b);
    }
    let at = buf.len();
    buf.extend_from_slice(&[0; SHORT]);
    copy_short(&mut buf[at..at + SHORT], b);
    buf.truncate(at + b.len());
}

/// Up to this many bytes, [`put_bytes`], [`extend_bytes`] and `OutputWriter::push` (keys and
/// values) copy with fixed-size moves: in a WebAssembly guest, `extend_from_slice` of a
/// length the compiler does not know is a `memory.copy`, which wasmtime runs as a call out of the guest (about 38 instructions
/// under callgrind, more than the rest of writing a short word), and most keys, words and
/// numbers are this short.
pub(crate) const SHORT: usize = 16;

/// Copies `b` (at most [`SHORT`] bytes) to the start of `dst` with at most two fixed-size
/// moves, overlapping as `b`'s length needs.
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [u8], b: &[u8]) {
    let n = b.len();
    match n {
        0 => {}
        1..=3 => {
            dst[0] = b[0];
            dst[n / 2] = b[n / 2];
            dst[n - 1] = b[n - 1];
        }
        4..=8 => {
            dst[..4].copy_from_slice(&b[..4]);
            dst[n - 4..n].copy_from_slice(&b[n - 4..]);
        }
        _ => {
            dst[..8].copy_from_slice(&b[..8]);
            dst[n - 8..n].copy_from_slice(&b[n - 8..]);
        }
    }
}

/// Copies `b` (at most [`SHORT`] bytes) to the start of `dst`, as [`copy_short`] does; when
/// `b` lies in `within` with [`SHORT`] bytes of it from where `b` starts, by copying those
/// ([`SHORT`] bytes of room in `dst` then), one fixed-size move that does not branch on the
/// length of `b`: keys and values are mostly parts of the batch being processed, and their
/// lengths as good as random from one record to the next.
#[inline(always)]
pub(crate) fn copy_short_within(dst: &mut [u8], b: &[u8], within: &[u8]) {
    // Where `b` would start in `within`; past its end (`get` gives `None`) when `b` is
    // elsewhere. Two allocations do not overlap, so bytes of `within` at `b`'s address are
    // `b`'s own.
    let at = (b.as_ptr() as usize).wrapping_sub(within.as_ptr() as usize);
    match within.get(at..).and_then(<[u8]>::first_chunk::<SHORT>) {
        Some(chunk) => dst[..SHORT].copy_from_slice(chunk),
        None => copy_short(dst, b),
    }
}

/// Whether `a == b`; slices of at most [`SHORT`] bytes are compared with at most four
/// fixed-size loads. In a WebAssembly guest, `==` on slices of a length the compiler does not
/// know calls `memcmp`, a loop over bytes (about 130 instructions under callgrind for a state
/// name of nine bytes), and state names and map keys are mostly this short.
#[inline(always)]
pub fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        9..=SHORT => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

/// `a.cmp(b)`, the lexicographic order of bytes; slices of at most [`SHORT`] bytes compared
/// as two big-endian words each, zero-padded (see [`eq_bytes`] for why). Padding sorts like
/// a missing byte because the longer slice wins a tie of the words.
#[inline(always)]
pub fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if a.len() > SHORT || b.len() > SHORT {
        return a.cmp(b);
    }
    let words = |s: &[u8]| {
        let mut padded = [0; SHORT];
        copy_short(&mut padded, s);
        (word8_be(&padded, 0), word8_be(&padded, 8))
    };
    (words(a), a.len()).cmp(&(words(b), b.len()))
}

#[inline(always)]
fn word4(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
fn word8(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[inline(always)]
fn word8_be(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Writes the end of a record, its optional timestamp and its value of at most [`SHORT`]
/// bytes (length first), at `dst[n..]` with fixed-size moves (from `within` if the value lies
/// in it, see [`copy_short_within`]); returns where the record ends.
#[inline(always)]
pub(crate) fn put_short_tail(
    dst: &mut [u8],
    mut n: usize,
    timestamp: Option<i64>,
    value: &[u8],
    within: &[u8],
) -> usize {
    if let Some(ts) = timestamp {
        dst[n..n + 8].copy_from_slice(&ts.to_le_bytes());
        n += 8;
    }
    dst[n..n + 4].copy_from_slice(&(value.len() as u32).to_le_bytes());
    copy_short_within(&mut dst[n + 4..], value, within);
    n + 4 + value.len()
}

/// Writes `bytes`, or their absence as the length [`NONE`].
#[inline]
pub fn put_opt_bytes(buf: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => put_bytes(buf, b),
        None => put_u32(buf, NONE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_copies_from_within_a_buffer_copy_the_slice() {
        let within: Vec<u8> = (0..40).collect();
        let elsewhere: Vec<u8> = (100..140).collect();
        for len in 0..=SHORT {
            // Near the end of `within`, fewer than SHORT bytes follow: copied as others are.
            for start in 0..=within.len() - len {
                let part = &within[start..start + len];
                for (b, w) in [
                    (part, &within[..]),
                    (&elsewhere[start..start + len], &within[..]),
                    (part, &[][..]),
                ] {
                    let mut dst = [0xaa; 2 * SHORT];
                    copy_short_within(&mut dst, b, w);
                    assert_eq!(&dst[..len], b, "{len} bytes from {start}");
                }
            }
        }
    }

    #[test]
    fn short_and_long_bytes_compare_as_slices_do() {
        // Every pair of a set of slices around SHORT that differ in one byte, in their last
        // byte, by a trailing zero (a tie of the padded words) or in length only.
        let mut slices: Vec<Vec<u8>> = Vec::new();
        for n in 0..=SHORT + 3 {
            let base: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(29) ^ 0x41).collect();
            slices.push(base.clone());
            for at in [0, n / 2, n.saturating_sub(1)] {
                if at < n {
                    for delta in [1u8, 0x80] {
                        let mut s = base.clone();
                        s[at] = s[at].wrapping_add(delta);
                        slices.push(s);
                    }
                }
            }
            let mut zero = base.clone();
            zero.push(0);
            slices.push(zero);
            slices.push(vec![0; n]);
            slices.push(vec![0xff; n]);
        }
        for a in &slices {
            for b in &slices {
                assert_eq!(eq_bytes(a, b), a == b, "{a:?} == {b:?}");
                assert_eq!(cmp_bytes(a, b), a.cmp(b), "{a:?} cmp {b:?}");
            }
        }
    }

    #[test]
    fn short_and_long_bytes_are_written_whole() {
        let data: Vec<u8> = (1..=40).collect();
        for before in [0, 3] {
            for n in 0..=data.len() {
                let b = &data[..n];
                let mut buf = vec![0xee; before];
                extend_bytes(&mut buf, b);
                put_bytes(&mut buf, b);
                let mut expected = vec![0xee; before];
                expected.extend_from_slice(b);
                expected.extend_from_slice(&(n as u32).to_le_bytes());
                expected.extend_from_slice(b);
                assert_eq!(buf, expected, "{n} bytes after {before}");
            }
        }
    }
}
