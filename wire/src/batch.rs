//! Batches (host to guest): the key table, then records that refer to keys by slot.

use crate::key_table::read_key_table;
use crate::primitives::NONE;
use crate::primitives::{
    DecodeError, Reader, SHORT, put_bytes, put_i64, put_short_tail, put_u8, put_u32,
};
use crate::record::{HAS_KEY, HAS_TIMESTAMP, Kind, RecordRef, SECOND_INPUT, header};

/// The `process` buffer that is no batch but tells the guest to write back every state
/// change it holds (`value-state.store-ids`): a key count of [`NONE`] and nothing after it.
/// The host sends it before it snapshots the state of a guest that writes back.
pub const WRITE_BACK: [u8; 4] = NONE.to_le_bytes();
/// [`WRITE_BACK`], after which the guest forgets every key id and what it holds by them: the
/// host gives the ids to other keys next.
pub const FORGET: [u8; 4] = (NONE - 1).to_le_bytes();

/// Writes a batch: first the key table, then records that refer to keys by slot.
///
/// The caller assigns slots (deduplicating keys) and must add every key before any record.
#[derive(Debug, Default)]
pub struct BatchWriter {
    buf: Vec<u8>,
    keys: u32,
    records: u32,
    records_at: Option<usize>,
    /// Header bits every record gets: which input of the operator the batch came from.
    input_bits: u8,
}

impl BatchWriter {
    /// Starts a new batch in `buf`, reusing its allocation.
    pub fn new(mut buf: Vec<u8>) -> Self {
        buf.clear();
        put_u32(&mut buf, 0);
        BatchWriter {
            buf,
            keys: 0,
            records: 0,
            records_at: None,
            input_bits: 0,
        }
    }

    /// Marks every record of the batch as coming from the operator's input `input` (0 for
    /// `input`, 1 for `second_input`).
    pub fn from_input(&mut self, input: u8) {
        self.input_bits = if input == 1 { SECOND_INPUT } else { 0 };
    }

    /// Adds the key of the next slot and returns that slot.
    #[inline]
    pub fn key(&mut self, key: &[u8]) -> u32 {
        assert!(self.records_at.is_none(), "keys must precede records");
        put_bytes(&mut self.buf, key);
        self.keys += 1;
        self.keys - 1
    }

    /// Adds a record whose key is the one in `slot` (from [`key`](Self::key)), if any.
    #[inline]
    pub fn record(&mut self, slot: Option<u32>, kind: Kind, timestamp: Option<i64>, value: &[u8]) {
        if self.records_at.is_none() {
            self.records_at = Some(self.buf.len());
            put_u32(&mut self.buf, 0);
        }
        if value.len() <= SHORT {
            return self.record_short(slot, kind, timestamp, value);
        }
        put_u8(
            &mut self.buf,
            header(kind, slot.is_some(), timestamp.is_some(), false) | self.input_bits,
        );
        if let Some(slot) = slot {
            put_u32(&mut self.buf, slot);
        }
        if let Some(ts) = timestamp {
            put_i64(&mut self.buf, ts);
        }
        put_bytes(&mut self.buf, value);
        self.records += 1;
    }

    /// [`record`](Self::record) of a value of at most [`SHORT`] bytes: the buffer grows once,
    /// by the most such a record takes, and the record is written with fixed-size moves.
    #[inline(always)]
    fn record_short(
        &mut self,
        slot: Option<u32>,
        kind: Kind,
        timestamp: Option<i64>,
        value: &[u8],
    ) {
        const MOST: usize = 1 + 4 + 8 + (4 + SHORT);
        let b = &mut self.buf;
        let at = b.len();
        b.extend_from_slice(&[0; MOST]);
        let dst: &mut [u8; MOST] = (&mut b[at..at + MOST]).try_into().expect("MOST bytes");
        dst[0] = header(kind, slot.is_some(), timestamp.is_some(), false) | self.input_bits;
        let mut n = 1;
        if let Some(slot) = slot {
            dst[n..n + 4].copy_from_slice(&slot.to_le_bytes());
            n += 4;
        }
        let n = put_short_tail(dst, n, timestamp, value, &[]);
        b.truncate(at + n);
        self.records += 1;
    }

    /// The encoded batch, with the counts of keys and records filled in.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf[0..4].copy_from_slice(&self.keys.to_le_bytes());
        match self.records_at {
            Some(at) => self.buf[at..at + 4].copy_from_slice(&self.records.to_le_bytes()),
            None => put_u32(&mut self.buf, 0),
        }
        self.buf
    }
}

/// A record of a batch together with the slot of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRecord<'a> {
    /// The slot of the record's key in the batch's key table, `None` without key.
    pub slot: Option<u32>,
    /// The record, its key looked up in the key table.
    pub record: RecordRef<'a>,
    /// Which of the operator's inputs it came from: 0 `input`, 1 `second_input`.
    pub input: u8,
}

/// Reads a batch written by [`BatchWriter`].
#[derive(Debug)]
pub struct BatchReader<'a> {
    r: Reader<'a>,
    keys: Vec<&'a [u8]>,
    remaining: usize,
}

impl<'a> BatchReader<'a> {
    /// Decodes the key table; `keys` is a reusable allocation.
    pub fn new(buf: &'a [u8], mut keys: Vec<&'a [u8]>) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf, "batch");
        read_key_table(&mut r, &mut keys)?;
        let remaining = r.count(5)?;
        Ok(BatchReader { r, keys, remaining })
    }

    /// The key table: slot `i` is `keys()[i]`.
    pub fn keys(&self) -> &[&'a [u8]] {
        &self.keys
    }

    /// Records not read yet.
    pub fn len(&self) -> usize {
        self.remaining
    }

    /// Whether every record has been read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// The next record, or `None` at the end of the batch.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Option<Result<BatchRecord<'a>, DecodeError>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        Some(self.read_record())
    }

    #[inline]
    fn read_record(&mut self) -> Result<BatchRecord<'a>, DecodeError> {
        // On failure the position is at the start of the field that failed.
        self.read_lean().ok_or_else(|| self.r.error())
    }

    #[inline(always)]
    fn read_lean(&mut self) -> Option<BatchRecord<'a>> {
        let r = &mut self.r;
        let h = r.lean_u8()?;
        let (slot, key) = if h & HAS_KEY != 0 {
            let slot = r.lean_u32()?;
            (Some(slot), Some(*self.keys.get(slot as usize)?))
        } else {
            (None, None)
        };
        let timestamp = if h & HAS_TIMESTAMP != 0 {
            Some(r.lean_i64()?)
        } else {
            None
        };
        let value = r.lean_bytes()?;
        Some(BatchRecord {
            slot,
            input: u8::from(h & SECOND_INPUT != 0),
            record: RecordRef {
                kind: Kind::from_bits(h),
                key,
                timestamp,
                value,
            },
        })
    }

    /// Gives back the key table's allocation for reuse.
    pub fn into_keys(self) -> Vec<&'a [u8]> {
        self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trip() {
        let mut w = BatchWriter::new(Vec::new());
        let a = w.key(b"alpha");
        let b = w.key(b"");
        w.record(Some(a), Kind::Insert, Some(-5), b"one");
        w.record(None, Kind::Delete, None, b"");
        w.record(Some(b), Kind::UpdateAfter, None, b"three");
        let buf = w.finish();
        let mut r = BatchReader::new(&buf, Vec::new()).unwrap();
        assert_eq!(r.keys(), &[&b"alpha"[..], &b""[..]]);
        assert_eq!(r.len(), 3);
        let first = r.next().unwrap().unwrap();
        assert_eq!(first.slot, Some(0));
        assert_eq!(
            first.record,
            RecordRef {
                kind: Kind::Insert,
                key: Some(b"alpha"),
                timestamp: Some(-5),
                value: b"one"
            }
        );
        let second = r.next().unwrap().unwrap();
        assert_eq!((second.slot, second.record.kind), (None, Kind::Delete));
        let third = r.next().unwrap().unwrap();
        assert_eq!(third.record.key, Some(&b""[..]));
        assert_eq!(third.input, 0);
        assert!(r.next().is_none());
    }

    #[test]
    fn records_of_a_batch_from_the_second_input_say_so() {
        let mut w = BatchWriter::new(Vec::new());
        w.from_input(1);
        let k = w.key(b"k");
        w.record(Some(k), Kind::Delete, Some(7), b"v");
        let buf = w.finish();
        let rec = BatchReader::new(&buf, Vec::new())
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(rec.input, 1);
        assert_eq!(
            (rec.record.kind, rec.record.timestamp, rec.record.value),
            (Kind::Delete, Some(7), &b"v"[..])
        );
    }

    #[test]
    fn short_and_long_values_read_back_as_written() {
        // Values around SHORT, with and without slot and timestamp, from both inputs.
        for input in [0, 1] {
            let mut w = BatchWriter::new(Vec::new());
            w.from_input(input);
            let keys = [w.key(b"k0"), w.key(b"k1")];
            let mut written = Vec::new();
            for len in 0..=2 * SHORT + 8 {
                let value: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
                let slot = [None, Some(keys[0]), Some(keys[1])][len % 3];
                let timestamp = [None, Some(-1), Some(i64::MAX), Some(len as i64)][len % 4];
                let kind = [Kind::Insert, Kind::Delete, Kind::UpdateAfter][len % 3];
                w.record(slot, kind, timestamp, &value);
                written.push((slot, kind, timestamp, value));
            }
            let buf = w.finish();
            let mut r = BatchReader::new(&buf, Vec::new()).unwrap();
            assert_eq!(r.len(), written.len());
            for (slot, kind, timestamp, value) in &written {
                let rec = r.next().unwrap().unwrap();
                let key = slot.map(|s| [&b"k0"[..], &b"k1"[..]][s as usize]);
                assert_eq!((rec.slot, rec.input), (*slot, input));
                assert_eq!(
                    rec.record,
                    RecordRef {
                        kind: *kind,
                        key,
                        timestamp: *timestamp,
                        value,
                    }
                );
            }
            assert!(r.next().is_none());
        }
    }

    #[test]
    fn empty_batch() {
        let buf = BatchWriter::new(vec![1, 2, 3]).finish();
        assert_eq!(buf, vec![0; 8]);
        assert!(BatchReader::new(&buf, Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn truncated_and_hostile_buffers_are_errors() {
        let mut w = BatchWriter::new(Vec::new());
        let s = w.key(b"k");
        w.record(Some(s), Kind::Insert, None, b"value");
        let buf = w.finish();
        for cut in 0..buf.len() {
            let ok = BatchReader::new(&buf[..cut], Vec::new())
                .and_then(|mut r| r.next().transpose())
                .is_ok();
            assert!(!ok, "prefix of {cut} bytes decoded");
        }
        // A count of 4 billion keys is rejected without allocating.
        let hostile = [0xff, 0xff, 0xff, 0xfe];
        assert!(BatchReader::new(&hostile, Vec::new()).is_err());
        // A slot outside the key table.
        let mut w = BatchWriter::new(Vec::new());
        w.record(Some(7), Kind::Insert, None, b"");
        assert!(
            BatchReader::new(&w.finish(), Vec::new())
                .unwrap()
                .next()
                .unwrap()
                .is_err()
        );
    }
}
