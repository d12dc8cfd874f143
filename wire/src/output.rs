//! Output (guest to host): records leaving an operator, each with its optional side-output
//! name, until the end of the buffer.

use crate::primitives::{DecodeError, Reader, SHORT, copy_short_within, field_len, put_short_tail};
use crate::record::{HAS_KEY, HAS_TIMESTAMP, Kind, RecordRef, TO_SIDE_OUTPUT, header};

/// Accumulates records leaving an operator.
///
/// The records are the first `used` bytes of `buf`; the bytes after them are slack, left
/// from earlier records (a cleared writer keeps its buffer), into which a record is written
/// in place: growing a `Vec` by the most a short record takes and cutting it back costs a
/// guest more than the record's own bytes (zeroing the room first, and the vector's length
/// and capacity read and written through memory). The buffer is only ever lengthened, by
/// doubling, so its zeroing is paid once per byte of its largest size.
#[derive(Debug, Default)]
pub struct OutputWriter {
    buf: Vec<u8>,
    used: usize,
    records: usize,
    /// Where `push_with` has its value written.
    value: Vec<u8>,
}

impl OutputWriter {
    /// Adds `rec`, to the side output named `side_output` or (`None`) to the main output.
    #[inline]
    pub fn push(&mut self, side_output: Option<&str>, rec: &RecordRef<'_>) {
        self.push_within(side_output, rec, &[]);
    }

    /// [`push`](Self::push) of a record whose key or value may be parts of `within` (say, the
    /// batch being processed), which short ones are then copied from without branching on
    /// their length (see `copy_short_within`).
    #[inline]
    pub fn push_within(&mut self, side_output: Option<&str>, rec: &RecordRef<'_>, within: &[u8]) {
        if side_output.is_none()
            && rec.key.is_none_or(|k| k.len() <= SHORT)
            && rec.value.len() <= SHORT
        {
            return self.push_short(rec, within);
        }
        self.push_long(
            side_output.map(str::as_bytes),
            rec.kind,
            rec.key,
            rec.timestamp,
            rec.value,
        );
    }

    /// [`push`](Self::push) of any record, written in place field by field. Left out of line:
    /// most records are short. The record comes field by field, not by reference: a
    /// reference would make every caller build the record in memory, on the short path too
    /// (in a guest, seven stores to its stack per record emitted).
    #[inline(never)]
    fn push_long(
        &mut self,
        side_output: Option<&[u8]>,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        value: &[u8],
    ) {
        let field = |b: Option<&[u8]>| b.map_or(0, |b| 4 + b.len());
        let ts_len = if timestamp.is_some() { 8 } else { 0 };
        let len = 1 + field(side_output) + field(key) + ts_len + field(Some(value));
        let at = self.used;
        if self.buf.len() < at + len {
            self.grow(at + len);
        }
        let dst = &mut self.buf[at..at + len];
        dst[0] = header(
            kind,
            key.is_some(),
            timestamp.is_some(),
            side_output.is_some(),
        );
        let mut n = 1;
        for b in [side_output, key].into_iter().flatten() {
            n = put_field(dst, n, b);
        }
        if let Some(ts) = timestamp {
            dst[n..n + 8].copy_from_slice(&ts.to_le_bytes());
            n += 8;
        }
        put_field(dst, n, value);
        self.used = at + len;
        self.records += 1;
    }

    /// [`push`](Self::push) of a record to the main output whose key and value are short,
    /// written in place with fixed-size moves (see [`SHORT`]) into room for the most such a
    /// record takes.
    #[inline(always)]
    fn push_short(&mut self, rec: &RecordRef<'_>, within: &[u8]) {
        const MOST: usize = 1 + (4 + SHORT) + 8 + (4 + SHORT);
        let at = self.used;
        if self.buf.len() < at + MOST {
            self.grow(at + MOST);
        }
        let dst: &mut [u8; MOST] = (&mut self.buf[at..at + MOST])
            .try_into()
            .expect("MOST bytes");
        dst[0] = header(rec.kind, rec.key.is_some(), rec.timestamp.is_some(), false);
        let mut n = 1;
        // Fields in order: a copy of SHORT bytes may run past its field into the next, which
        // is written after it, or into the slack.
        if let Some(key) = rec.key {
            dst[n..n + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
            copy_short_within(&mut dst[n + 4..], key, within);
            n += 4 + key.len();
        }
        self.used = at + put_short_tail(dst, n, rec.timestamp, rec.value, within);
        self.records += 1;
    }

    /// Makes the buffer at least `len` bytes long, at least doubling it.
    #[cold]
    fn grow(&mut self, len: usize) {
        self.buf.resize(len.max(2 * self.buf.len()), 0);
    }

    /// Like [`push`](Self::push), but the value is written by `write_value` (into a buffer
    /// the writer keeps, then copied as `push` copies a value).
    #[inline]
    pub fn push_with(
        &mut self,
        side_output: Option<&str>,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) {
        let mut value = std::mem::take(&mut self.value);
        value.clear();
        write_value(&mut value);
        let rec = RecordRef {
            kind,
            key,
            timestamp,
            value: &value,
        };
        self.push(side_output, &rec);
        self.value = value;
    }

    /// Bytes buffered so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether nothing is buffered.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Records buffered so far.
    pub fn records(&self) -> usize {
        self.records
    }

    /// The encoded records; the writer starts over empty.
    #[inline]
    pub fn take(&mut self) -> Vec<u8> {
        self.buf.truncate(self.used);
        self.used = 0;
        self.records = 0;
        std::mem::take(&mut self.buf)
    }

    /// Empties the writer, keeping its allocation.
    #[inline]
    pub fn clear(&mut self) {
        self.used = 0;
        self.records = 0;
    }

    /// The encoded records, borrowed.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.used]
    }
}

/// Iterates the records of an output buffer: `(side output name, record)`.
#[derive(Debug)]
pub struct OutputReader<'a> {
    r: Reader<'a>,
}

impl<'a> OutputReader<'a> {
    /// Reads the records `buf` holds.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        OutputReader {
            r: Reader::new(buf, "output"),
        }
    }

    #[inline]
    fn read(&mut self) -> Result<(Option<&'a [u8]>, RecordRef<'a>), DecodeError> {
        // On failure the position is at the start of the field that failed.
        self.read_lean().ok_or_else(|| self.r.error())
    }

    #[inline(always)]
    fn read_lean(&mut self) -> Option<(Option<&'a [u8]>, RecordRef<'a>)> {
        let r = &mut self.r;
        let h = r.lean_u8()?;
        let side = if h & TO_SIDE_OUTPUT != 0 {
            Some(r.lean_bytes()?)
        } else {
            None
        };
        let key = if h & HAS_KEY != 0 {
            Some(r.lean_bytes()?)
        } else {
            None
        };
        let timestamp = if h & HAS_TIMESTAMP != 0 {
            Some(r.lean_i64()?)
        } else {
            None
        };
        let value = r.lean_bytes()?;
        Some((
            side,
            RecordRef {
                kind: Kind::from_bits(h),
                key,
                timestamp,
                value,
            },
        ))
    }
}

impl<'a> Iterator for OutputReader<'a> {
    type Item = Result<(Option<&'a [u8]>, RecordRef<'a>), DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.r.is_empty() {
            return None;
        }
        let item = self.read();
        if item.is_err() {
            // Stop after the first error: the rest of the buffer cannot be trusted.
            self.r.skip_rest();
        }
        Some(item)
    }
}

/// Writes `b` with its length before it at `dst[n..]`; returns where it ends.
#[inline]
fn put_field(dst: &mut [u8], n: usize, b: &[u8]) -> usize {
    dst[n..n + 4].copy_from_slice(&field_len(b).to_le_bytes());
    dst[n + 4..n + 4 + b.len()].copy_from_slice(b);
    n + 4 + b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_round_trip_with_side_outputs() {
        let mut w = OutputWriter::default();
        w.push(
            Some("late"),
            &RecordRef {
                kind: Kind::UpdateBefore,
                key: None,
                timestamp: Some(7),
                value: b"x",
            },
        );
        w.push_with(None, Kind::Insert, Some(b"k"), None, |b| {
            b.extend_from_slice(b"42")
        });
        assert_eq!(w.records(), 2);
        let buf = w.take();
        assert!(w.is_empty());
        let all: Vec<_> = OutputReader::new(&buf).map(Result::unwrap).collect();
        assert_eq!(all[0].0, Some(&b"late"[..]));
        assert_eq!(all[0].1.kind, Kind::UpdateBefore);
        assert_eq!(all[0].1.timestamp, Some(7));
        assert_eq!(all[1].1.key, Some(&b"k"[..]));
        assert_eq!(all[1].1.value, b"42");
        let mut bad = OutputReader::new(&buf[..buf.len() - 1]);
        assert!(bad.next().unwrap().is_ok());
        assert!(bad.next().unwrap().is_err());
        assert!(bad.next().is_none());
    }

    #[test]
    fn short_and_long_records_read_back_as_written() {
        // Around SHORT, with and without key and timestamp, to the main and a side output, of
        // every kind (the header byte holds the kind beside the flags).
        let bytes: Vec<u8> = (0..=40).collect();
        let kinds = [
            Kind::Insert,
            Kind::UpdateBefore,
            Kind::UpdateAfter,
            Kind::Delete,
        ];
        let mut records = Vec::new();
        for key_len in [
            None,
            Some(0),
            Some(1),
            Some(3),
            Some(8),
            Some(16),
            Some(17),
            Some(40),
        ] {
            for value_len in [0, 1, 4, 9, 15, 16, 17, 33] {
                for timestamp in [None, Some(-1), Some(i64::MAX)] {
                    let rec = RecordRef {
                        // The kinds in turn, one per pair pushed below.
                        kind: kinds[records.len() / 2 % kinds.len()],
                        key: key_len.map(|n| &bytes[1..=n]),
                        timestamp,
                        value: &bytes[2..2 + value_len],
                    };
                    records.push((None, rec));
                    records.push((Some("late"), rec));
                }
            }
        }
        let mut w = OutputWriter::default();
        // Keys and values are parts of `bytes`: pushed within it, short ones are copied from
        // it with fixed-size moves, to the same bytes.
        let mut within = OutputWriter::default();
        // And written by `push_with`, set aside first: the same bytes again.
        let mut with = OutputWriter::default();
        for (side, rec) in &records {
            w.push(*side, rec);
            within.push_within(*side, rec, &bytes);
            with.push_with(*side, rec.kind, rec.key, rec.timestamp, |b| {
                b.extend_from_slice(rec.value)
            });
        }
        assert_eq!(w.records(), records.len());
        let buf = w.take();
        assert_eq!(within.take(), buf);
        assert_eq!(with.take(), buf);
        let read: Vec<_> = OutputReader::new(&buf).map(Result::unwrap).collect();
        let written: Vec<_> = (records.iter())
            .map(|(side, rec)| (side.map(str::as_bytes), *rec))
            .collect();
        assert_eq!(read, written);
    }

    #[test]
    fn a_reused_writer_holds_only_what_was_pushed_since_it_was_cleared() {
        // Long records first, so that the slack left after `clear` holds stale bytes where
        // the shorter records after it are written; every way of pushing, mixed.
        let long = [7u8; 100];
        let rec = |key: Option<&'static [u8]>, value: &'static [u8]| RecordRef {
            kind: Kind::Insert,
            key,
            timestamp: None,
            value,
        };
        let mut w = OutputWriter::default();
        for _ in 0..50 {
            w.push(
                None,
                &RecordRef {
                    value: &long,
                    ..rec(Some(b"k"), b"")
                },
            );
        }
        w.clear();
        assert!(w.is_empty());
        w.push(None, &rec(Some(b"a"), b"1"));
        w.push_with(None, Kind::Delete, None, Some(5), |b| {
            b.extend_from_slice(b"22")
        });
        w.push(Some("side"), &rec(None, b"333"));
        w.push(None, &rec(Some(b"b"), b"4"));
        let read: Vec<_> = OutputReader::new(w.as_bytes())
            .map(Result::unwrap)
            .collect();
        let want = [
            (None, rec(Some(b"a"), b"1")),
            (
                None,
                RecordRef {
                    kind: Kind::Delete,
                    timestamp: Some(5),
                    ..rec(None, b"22")
                },
            ),
            (Some(&b"side"[..]), rec(None, b"333")),
            (None, rec(Some(b"b"), b"4")),
        ];
        assert_eq!(read, want);
        assert_eq!(w.records(), 4);
        assert_eq!(w.take(), w_bytes(&want));
        // After `take`, the writer starts over empty.
        w.push(None, &rec(None, b"5"));
        assert_eq!(w.as_bytes(), w_bytes(&[(None, rec(None, b"5"))]));
    }

    /// The bytes a fresh writer makes of `records`.
    fn w_bytes(records: &[(Option<&[u8]>, RecordRef<'_>)]) -> Vec<u8> {
        let mut w = OutputWriter::default();
        for (side, rec) in records {
            w.push(side.map(|s| std::str::from_utf8(s).unwrap()), rec);
        }
        w.take()
    }
}
