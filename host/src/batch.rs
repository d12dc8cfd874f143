//! Owned batches of records: what travels on channels between tasks.
//!
//! A batch keeps all keys and values in one byte buffer and a small fixed-size entry per
//! record, so building, sending and reading a batch allocates per batch, never per record.

use weir_wire::{DecodeError, Kind, OutputReader, RecordRef};

/// Records a batch aims to hold before it is sent on.
pub const BATCH_RECORDS: usize = 4096;
/// Bytes of keys and values a batch aims to hold before it is sent on.
pub const BATCH_BYTES: usize = 256 * 1024;

const NO_KEY: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key_at: u32,
    key_len: u32,
    value_at: u32,
    value_len: u32,
    timestamp: i64,
    has_timestamp: bool,
    kind: Kind,
}

/// A batch of records.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    data: Vec<u8>,
    entries: Vec<Entry>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Whether the batch reached [`BATCH_RECORDS`] or [`BATCH_BYTES`] and should be sent.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= BATCH_RECORDS || self.data.len() >= BATCH_BYTES
    }

    /// Takes the batch, leaving an empty one with room for as many records and bytes: a
    /// channel's next batch is usually about as large, and so fills without reallocating.
    pub fn take_keeping_room(&mut self) -> Batch {
        let room = Batch {
            data: Vec::with_capacity(self.data.len()),
            entries: Vec::with_capacity(self.entries.len()),
        };
        std::mem::replace(self, room)
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
    }

    /// Appends a copy of `rec`.
    pub fn push(&mut self, rec: &RecordRef<'_>) {
        self.push_with(rec.kind, rec.key, rec.timestamp, |buf| {
            buf.extend_from_slice(rec.value)
        });
    }

    /// Appends a record whose value `write_value` writes straight into the batch's buffer.
    pub fn push_with(
        &mut self,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) {
        let (key_at, key_len) = match key {
            Some(k) => {
                let at = self.data.len();
                self.data.extend_from_slice(k);
                (at as u32, k.len() as u32)
            }
            None => (0, NO_KEY),
        };
        let value_at = self.data.len();
        write_value(&mut self.data);
        self.entries.push(Entry {
            key_at,
            key_len,
            value_at: value_at as u32,
            value_len: (self.data.len() - value_at) as u32,
            timestamp: timestamp.unwrap_or(0),
            has_timestamp: timestamp.is_some(),
            kind,
        });
    }

    /// The value of the last record appended.
    pub(crate) fn last_value(&self) -> Option<&[u8]> {
        let e = self.entries.last()?;
        let at = e.value_at as usize;
        Some(&self.data[at..at + e.value_len as usize])
    }

    /// Sets the timestamp of the last record appended.
    pub(crate) fn set_last_timestamp(&mut self, timestamp: i64) {
        if let Some(e) = self.entries.last_mut() {
            e.timestamp = timestamp;
            e.has_timestamp = true;
        }
    }

    /// Appends the records of an operator's output buffer (layout in `wit/stream.wit`) with
    /// one copy of the whole buffer. Records addressed to side outputs are skipped; their
    /// number is returned. On a malformed buffer nothing is appended.
    pub fn extend_from_output(&mut self, buf: &[u8]) -> Result<u64, DecodeError> {
        let (data_len, entries_len) = (self.data.len(), self.entries.len());
        let base = data_len;
        let offset = |s: &[u8]| (base + (s.as_ptr() as usize - buf.as_ptr() as usize)) as u32;
        let mut side = 0;
        for item in OutputReader::new(buf) {
            let (to_side, rec) = match item {
                Ok(x) => x,
                Err(e) => {
                    self.entries.truncate(entries_len);
                    return Err(e);
                }
            };
            if to_side.is_some() {
                side += 1;
                continue;
            }
            let (key_at, key_len) = match rec.key {
                Some(k) => (offset(k), k.len() as u32),
                None => (0, NO_KEY),
            };
            self.entries.push(Entry {
                key_at,
                key_len,
                value_at: offset(rec.value),
                value_len: rec.value.len() as u32,
                timestamp: rec.timestamp.unwrap_or(0),
                has_timestamp: rec.timestamp.is_some(),
                kind: rec.kind,
            });
        }
        self.data.extend_from_slice(buf);
        Ok(side)
    }

    /// Appends the records of `other`, with one copy of its bytes.
    pub fn append(&mut self, other: &Batch) {
        let base = self.data.len() as u32;
        self.data.extend_from_slice(&other.data);
        self.entries.extend(other.entries.iter().map(|e| Entry {
            key_at: e.key_at + base,
            value_at: e.value_at + base,
            ..*e
        }));
    }

    fn view(&self, e: &Entry) -> RecordRef<'_> {
        RecordRef {
            kind: e.kind,
            key: (e.key_len != NO_KEY)
                .then(|| &self.data[e.key_at as usize..(e.key_at + e.key_len) as usize]),
            timestamp: e.has_timestamp.then_some(e.timestamp),
            value: &self.data[e.value_at as usize..(e.value_at + e.value_len) as usize],
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> + '_ {
        self.entries.iter().map(|e| self.view(e))
    }

    /// The records' timestamps, in order, skipping records without one.
    pub fn timestamps(&self) -> impl Iterator<Item = i64> + '_ {
        (self.entries.iter()).filter_map(|e| e.has_timestamp.then_some(e.timestamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_read_back() {
        let mut b = Batch::default();
        b.push(&RecordRef {
            kind: Kind::Delete,
            key: Some(b"k"),
            timestamp: Some(3),
            value: b"v",
        });
        b.push_with(Kind::Insert, None, None, |buf| {
            buf.extend_from_slice(b"line")
        });
        assert_eq!(b.len(), 2);
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got[0].key, Some(&b"k"[..]));
        assert_eq!(got[0].timestamp, Some(3));
        assert_eq!(got[0].kind, Kind::Delete);
        assert_eq!(got[1].key, None);
        assert_eq!(got[1].value, b"line");
        let mut both = b.clone();
        both.append(&b);
        let again: Vec<_> = both.iter().collect();
        assert_eq!(again, [&got[..], &got[..]].concat());
        b.clear();
        assert!(b.is_empty());
    }

    #[test]
    fn output_buffers_are_adopted_whole() {
        let mut w = weir_wire::OutputWriter::default();
        let rec = |key, value| RecordRef {
            kind: Kind::UpdateAfter,
            key,
            timestamp: Some(9),
            value,
        };
        w.push(None, &rec(Some(b"k"), b"v1"));
        w.push(Some("side"), &rec(None, b"dropped"));
        w.push(None, &rec(None, b"v2"));
        let buf = w.take();
        let mut b = Batch::default();
        b.push(&rec(Some(b"first"), b"x"));
        assert_eq!(b.extend_from_output(&buf), Ok(1));
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1], rec(Some(b"k"), b"v1"));
        assert_eq!(got[2], rec(None, b"v2"));
        // A truncated buffer appends nothing.
        assert!(b.extend_from_output(&buf[..buf.len() - 1]).is_err());
        assert_eq!(b.len(), 3);
    }
}
