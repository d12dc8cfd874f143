//! The buffer encodings that cross the weir host/guest boundary.
//!
//! `wit/stream.wit` explains why batches, output, state and timers cross the component
//! boundary as one `list<u8>` each and documents the byte layout; this crate is the one
//! implementation of that layout, used by the host (`weir`) and by the guest SDK (`weir-sdk`).
//! Decoding never copies: readers hand out slices of the buffer.
//!
//! ```
//! use weir_wire::{Kind, OutputReader, OutputWriter, RecordRef};
//!
//! let mut out = OutputWriter::default();
//! out.push(None, &RecordRef { kind: Kind::Insert, key: Some(b"k"), timestamp: None, value: b"v" });
//! let buf = out.take();
//! let (side, rec) = OutputReader::new(&buf).next().unwrap().unwrap();
//! assert_eq!((side, rec.key, rec.value), (None, Some(&b"k"[..]), &b"v"[..]));
//! ```

use std::fmt;

/// A length of `NONE` means "absent".
pub const NONE: u32 = u32::MAX;

const KIND_MASK: u8 = 0b11;
const HAS_KEY: u8 = 1 << 2;
const HAS_TIMESTAMP: u8 = 1 << 3;
const TO_SIDE_OUTPUT: u8 = 1 << 4;

/// Changelog kind of a record, as Flink's RowKind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    #[default]
    Insert = 0,
    UpdateBefore = 1,
    UpdateAfter = 2,
    Delete = 3,
}

impl Kind {
    #[inline]
    fn from_bits(bits: u8) -> Kind {
        match bits & KIND_MASK {
            0 => Kind::Insert,
            1 => Kind::UpdateBefore,
            2 => Kind::UpdateAfter,
            _ => Kind::Delete,
        }
    }
}

/// A record borrowed from a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub kind: Kind,
    pub key: Option<&'a [u8]>,
    /// Event time in milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    pub value: &'a [u8],
}

/// A buffer that does not follow the layout in `wit/stream.wit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub what: &'static str,
    pub offset: usize,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed {} at byte {}", self.what, self.offset)
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over a buffer.
#[derive(Debug, Clone)]
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

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    fn error(&self) -> DecodeError {
        DecodeError {
            what: self.what,
            offset: self.pos,
        }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.error())?;
        let s = self.buf.get(self.pos..end).ok_or_else(|| self.error())?;
        self.pos = end;
        Ok(s)
    }

    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }

    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        match self.opt_bytes()? {
            Some(b) => Ok(b),
            None => Err(self.error()),
        }
    }

    #[inline]
    pub fn opt_bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        let len = self.u32()?;
        if len == NONE {
            return Ok(None);
        }
        self.take(len as usize).map(Some)
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

#[inline]
pub fn put_u8(buf: &mut Vec<u8>, v: u8) {
    buf.push(v);
}

#[inline]
pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_i64(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Writes `bytes`.
///
/// # Panics
/// When `b` is 4 GiB or longer; callers enforce far smaller limits.
#[inline]
pub fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    let len = u32::try_from(b.len())
        .ok()
        .filter(|&l| l != NONE)
        .expect("a buffer field must be shorter than 4 GiB");
    put_u32(buf, len);
    buf.extend_from_slice(b);
}

#[inline]
pub fn put_opt_bytes(buf: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => put_bytes(buf, b),
        None => put_u32(buf, NONE),
    }
}

#[inline]
fn header(kind: Kind, key: bool, timestamp: bool, side: bool) -> u8 {
    let mut h = kind as u8;
    if key {
        h |= HAS_KEY;
    }
    if timestamp {
        h |= HAS_TIMESTAMP;
    }
    if side {
        h |= TO_SIDE_OUTPUT;
    }
    h
}

// ---------------------------------------------------------------------------------------------
// Batches (host -> guest)

/// Writes a batch: first the key table, then records that refer to keys by slot.
///
/// The caller assigns slots (deduplicating keys) and must add every key before any record.
#[derive(Debug, Default)]
pub struct BatchWriter {
    buf: Vec<u8>,
    keys: u32,
    records: u32,
    records_at: Option<usize>,
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
        }
    }

    /// Adds the key of the next slot and returns that slot.
    #[inline]
    pub fn key(&mut self, key: &[u8]) -> u32 {
        assert!(self.records_at.is_none(), "keys must precede records");
        put_bytes(&mut self.buf, key);
        self.keys += 1;
        self.keys - 1
    }

    #[inline]
    pub fn record(&mut self, slot: Option<u32>, kind: Kind, timestamp: Option<i64>, value: &[u8]) {
        if self.records_at.is_none() {
            self.records_at = Some(self.buf.len());
            put_u32(&mut self.buf, 0);
        }
        put_u8(
            &mut self.buf,
            header(kind, slot.is_some(), timestamp.is_some(), false),
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

    pub fn finish(mut self) -> Vec<u8> {
        self.buf[0..4].copy_from_slice(&self.keys.to_le_bytes());
        match self.records_at {
            Some(at) => self.buf[at..at + 4].copy_from_slice(&self.records.to_le_bytes()),
            None => put_u32(&mut self.buf, 0),
        }
        self.buf
    }
}

/// Reads a key table: `u32 n, n × bytes`.
pub fn read_key_table<'a>(r: &mut Reader<'a>, keys: &mut Vec<&'a [u8]>) -> Result<(), DecodeError> {
    keys.clear();
    let n = r.count(4)?;
    keys.reserve(n);
    for _ in 0..n {
        keys.push(r.bytes()?);
    }
    Ok(())
}

/// A record of a batch together with the slot of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRecord<'a> {
    pub slot: Option<u32>,
    pub record: RecordRef<'a>,
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

    pub fn len(&self) -> usize {
        self.remaining
    }

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
        let h = self.r.u8()?;
        let slot = if h & HAS_KEY != 0 {
            let slot = self.r.u32()?;
            if slot as usize >= self.keys.len() {
                return Err(self.r.error());
            }
            Some(slot)
        } else {
            None
        };
        let timestamp = if h & HAS_TIMESTAMP != 0 {
            Some(self.r.i64()?)
        } else {
            None
        };
        let value = self.r.bytes()?;
        Ok(BatchRecord {
            slot,
            record: RecordRef {
                kind: Kind::from_bits(h),
                key: slot.map(|s| self.keys[s as usize]),
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

// ---------------------------------------------------------------------------------------------
// Output (guest -> host)

/// Accumulates records leaving an operator.
#[derive(Debug, Default)]
pub struct OutputWriter {
    buf: Vec<u8>,
    records: usize,
}

impl OutputWriter {
    #[inline]
    pub fn push(&mut self, side_output: Option<&str>, rec: &RecordRef<'_>) {
        let b = &mut self.buf;
        put_u8(
            b,
            header(
                rec.kind,
                rec.key.is_some(),
                rec.timestamp.is_some(),
                side_output.is_some(),
            ),
        );
        if let Some(side) = side_output {
            put_bytes(b, side.as_bytes());
        }
        if let Some(key) = rec.key {
            put_bytes(b, key);
        }
        if let Some(ts) = rec.timestamp {
            put_i64(b, ts);
        }
        put_bytes(b, rec.value);
        self.records += 1;
    }

    /// Like [`push`](Self::push), but the value is written by `write_value` straight into the
    /// buffer (no intermediate allocation).
    #[inline]
    pub fn push_with(
        &mut self,
        side_output: Option<&str>,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) {
        let b = &mut self.buf;
        put_u8(
            b,
            header(
                kind,
                key.is_some(),
                timestamp.is_some(),
                side_output.is_some(),
            ),
        );
        if let Some(side) = side_output {
            put_bytes(b, side.as_bytes());
        }
        if let Some(key) = key {
            put_bytes(b, key);
        }
        if let Some(ts) = timestamp {
            put_i64(b, ts);
        }
        let len_at = b.len();
        put_u32(b, 0);
        write_value(b);
        let len = u32::try_from(b.len() - len_at - 4)
            .ok()
            .filter(|&l| l != NONE)
            .expect("a value must be shorter than 4 GiB");
        b[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
        self.records += 1;
    }

    /// Bytes buffered so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Records buffered so far.
    pub fn records(&self) -> usize {
        self.records
    }

    /// The encoded records; the writer starts over empty.
    #[inline]
    pub fn take(&mut self) -> Vec<u8> {
        self.records = 0;
        std::mem::take(&mut self.buf)
    }

    /// Empties the writer, keeping its allocation.
    pub fn clear(&mut self) {
        self.records = 0;
        self.buf.clear();
    }

    /// The encoded records, borrowed.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// Iterates the records of an output buffer: `(side output name, record)`.
#[derive(Debug)]
pub struct OutputReader<'a> {
    r: Reader<'a>,
}

impl<'a> OutputReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        OutputReader {
            r: Reader::new(buf, "output"),
        }
    }

    #[inline]
    fn read(&mut self) -> Result<(Option<&'a [u8]>, RecordRef<'a>), DecodeError> {
        let h = self.r.u8()?;
        let side = if h & TO_SIDE_OUTPUT != 0 {
            Some(self.r.bytes()?)
        } else {
            None
        };
        let key = if h & HAS_KEY != 0 {
            Some(self.r.bytes()?)
        } else {
            None
        };
        let timestamp = if h & HAS_TIMESTAMP != 0 {
            Some(self.r.i64()?)
        } else {
            None
        };
        let value = self.r.bytes()?;
        Ok((
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

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.is_empty() {
            return None;
        }
        let item = self.read();
        if item.is_err() {
            // Stop after the first error: the rest of the buffer cannot be trusted.
            self.r.pos = self.r.buf.len();
        }
        Some(item)
    }
}

// ---------------------------------------------------------------------------------------------
// State changes (guest -> host)

/// One change to a value state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueOp<'a> {
    Clear,
    Set(&'a [u8]),
}

/// One change to a list state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListOp<'a> {
    Clear,
    Replace(Vec<&'a [u8]>),
    Append(Vec<&'a [u8]>),
}

/// One change to a map state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapOp<'a> {
    Clear,
    Put(&'a [u8], &'a [u8]),
    Remove(&'a [u8]),
}

pub const OP_CLEAR: u8 = 0;
pub const OP_SET: u8 = 1;
pub const OP_REPLACE: u8 = 1;
pub const OP_APPEND: u8 = 2;
pub const OP_PUT: u8 = 1;
pub const OP_REMOVE: u8 = 2;

#[inline]
pub fn put_value_op(buf: &mut Vec<u8>, slot: u32, op: ValueOp<'_>) {
    put_u32(buf, slot);
    match op {
        ValueOp::Clear => put_u8(buf, OP_CLEAR),
        ValueOp::Set(v) => {
            put_u8(buf, OP_SET);
            put_bytes(buf, v);
        }
    }
}

/// Writes a list change; `elems` are the elements of a replace or an append.
pub fn put_list_op<'b>(
    buf: &mut Vec<u8>,
    slot: u32,
    op: u8,
    elems: impl ExactSizeIterator<Item = &'b [u8]>,
) {
    put_u32(buf, slot);
    put_u8(buf, op);
    if op != OP_CLEAR {
        put_u32(buf, elems.len() as u32);
        for e in elems {
            put_bytes(buf, e);
        }
    }
}

pub fn put_map_op(buf: &mut Vec<u8>, slot: u32, op: MapOp<'_>) {
    put_u32(buf, slot);
    match op {
        MapOp::Clear => put_u8(buf, OP_CLEAR),
        MapOp::Put(k, v) => {
            put_u8(buf, OP_PUT);
            put_bytes(buf, k);
            put_bytes(buf, v);
        }
        MapOp::Remove(k) => {
            put_u8(buf, OP_REMOVE);
            put_bytes(buf, k);
        }
    }
}

/// Iterates the entries of a buffer that `read_one` decodes one at a time, until the end of
/// the buffer or the first error (after which the rest cannot be trusted).
fn read_entries<'a, T>(
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

/// Iterates `(slot, op)` of a value-state store buffer.
pub fn read_value_ops(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u32, ValueOp<'_>), DecodeError>> + '_ {
    read_entries(buf, "value-state changes", |r| {
        let slot = r.u32()?;
        match r.u8()? {
            OP_CLEAR => Ok((slot, ValueOp::Clear)),
            OP_SET => Ok((slot, ValueOp::Set(r.bytes()?))),
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
        if op == OP_CLEAR {
            return Ok((slot, ListOp::Clear));
        }
        let n = r.count(4)?;
        let mut elems = Vec::with_capacity(n);
        for _ in 0..n {
            elems.push(r.bytes()?);
        }
        match op {
            OP_REPLACE => Ok((slot, ListOp::Replace(elems))),
            OP_APPEND => Ok((slot, ListOp::Append(elems))),
            _ => Err(r.error()),
        }
    })
}

/// Iterates `(slot, op)` of a map-state store buffer.
pub fn read_map_ops(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u32, MapOp<'_>), DecodeError>> + '_ {
    read_entries(buf, "map-state changes", |r| {
        let slot = r.u32()?;
        match r.u8()? {
            OP_CLEAR => Ok((slot, MapOp::Clear)),
            OP_PUT => Ok((slot, MapOp::Put(r.bytes()?, r.bytes()?))),
            OP_REMOVE => Ok((slot, MapOp::Remove(r.bytes()?))),
            _ => Err(r.error()),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Timers

/// Time domain of a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    EventTime = 0,
    ProcessingTime = 1,
}

/// One timer change sent by the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerOp {
    pub register: bool,
    pub domain: TimeDomain,
    pub slot: u32,
    pub timestamp: i64,
}

pub fn put_timer_op(buf: &mut Vec<u8>, op: TimerOp) {
    let code = match (op.domain, op.register) {
        (TimeDomain::EventTime, true) => 0,
        (TimeDomain::EventTime, false) => 1,
        (TimeDomain::ProcessingTime, true) => 2,
        (TimeDomain::ProcessingTime, false) => 3,
    };
    put_u8(buf, code);
    put_u32(buf, op.slot);
    put_i64(buf, op.timestamp);
}

pub fn read_timer_ops(buf: &[u8]) -> impl Iterator<Item = Result<TimerOp, DecodeError>> + '_ {
    read_entries(buf, "timer changes", |r| {
        let (domain, register) = match r.u8()? {
            0 => (TimeDomain::EventTime, true),
            1 => (TimeDomain::EventTime, false),
            2 => (TimeDomain::ProcessingTime, true),
            3 => (TimeDomain::ProcessingTime, false),
            _ => return Err(r.error()),
        };
        Ok(TimerOp {
            register,
            domain,
            slot: r.u32()?,
            timestamp: r.i64()?,
        })
    })
}

/// A fired timer as the guest sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiredTimer<'a> {
    pub domain: TimeDomain,
    pub slot: u32,
    pub key: &'a [u8],
    pub timestamp: i64,
}

/// Writes the fired-timers buffer: the key table then the timers.
pub fn write_fired_timers(
    buf: &mut Vec<u8>,
    keys: &[&[u8]],
    timers: impl ExactSizeIterator<Item = (TimeDomain, u32, i64)>,
) {
    buf.clear();
    put_u32(buf, keys.len() as u32);
    for k in keys {
        put_bytes(buf, k);
    }
    put_u32(buf, timers.len() as u32);
    for (domain, slot, ts) in timers {
        put_u8(buf, domain as u8);
        put_u32(buf, slot);
        put_i64(buf, ts);
    }
}

/// Reads a fired-timers buffer; `keys` receives the key table.
pub fn read_fired_timers<'a>(
    buf: &'a [u8],
    keys: &mut Vec<&'a [u8]>,
    out: &mut Vec<FiredTimer<'a>>,
) -> Result<(), DecodeError> {
    let mut r = Reader::new(buf, "timers");
    read_key_table(&mut r, keys)?;
    let n = r.count(13)?;
    out.clear();
    for _ in 0..n {
        let domain = match r.u8()? {
            0 => TimeDomain::EventTime,
            1 => TimeDomain::ProcessingTime,
            _ => return Err(r.error()),
        };
        let slot = r.u32()?;
        let key = *keys.get(slot as usize).ok_or_else(|| r.error())?;
        out.push(FiredTimer {
            domain,
            slot,
            key,
            timestamp: r.i64()?,
        });
    }
    Ok(())
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
        assert!(r.next().is_none());
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
    fn state_ops_round_trip() {
        let mut b = Vec::new();
        put_value_op(&mut b, 3, ValueOp::Set(b"v"));
        put_value_op(&mut b, 4, ValueOp::Clear);
        let ops: Vec<_> = read_value_ops(&b).map(Result::unwrap).collect();
        assert_eq!(ops, vec![(3, ValueOp::Set(b"v")), (4, ValueOp::Clear)]);

        let mut b = Vec::new();
        put_list_op(&mut b, 1, OP_APPEND, [&b"a"[..], b"b"].into_iter());
        put_list_op(&mut b, 1, OP_CLEAR, std::iter::empty());
        put_list_op(&mut b, 2, OP_REPLACE, [&b"c"[..]].into_iter());
        let ops: Vec<_> = read_list_ops(&b).map(Result::unwrap).collect();
        assert_eq!(
            ops,
            vec![
                (1, ListOp::Append(vec![b"a", b"b"])),
                (1, ListOp::Clear),
                (2, ListOp::Replace(vec![b"c"]))
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

    #[test]
    fn timers_round_trip() {
        let mut b = Vec::new();
        let op = TimerOp {
            register: false,
            domain: TimeDomain::ProcessingTime,
            slot: 2,
            timestamp: 99,
        };
        put_timer_op(&mut b, op);
        assert_eq!(read_timer_ops(&b).next().unwrap().unwrap(), op);

        let mut buf = Vec::new();
        write_fired_timers(
            &mut buf,
            &[b"a", b"b"],
            [(TimeDomain::EventTime, 1, 10)].into_iter(),
        );
        let (mut keys, mut fired) = (Vec::new(), Vec::new());
        read_fired_timers(&buf, &mut keys, &mut fired).unwrap();
        assert_eq!(
            fired,
            vec![FiredTimer {
                domain: TimeDomain::EventTime,
                slot: 1,
                key: b"b",
                timestamp: 10
            }]
        );
    }
}
