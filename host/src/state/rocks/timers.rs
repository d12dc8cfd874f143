//! Timers as rows of their key group (see `state::keyed_timers` for which timers live here):
//!
//! ```text
//! u16 key group | 0xFFFE | u8 domain | u64 timestamp ^ 2^63 | key      (empty value)
//! 0xFFFF | "timers" | ...                                              where memory stops
//! ```
//!
//! (big-endian, the timestamp's sign bit flipped, so that a key group's timers of a domain
//! are in firing order: by timestamp, then by the key's bytes, as memory fires them.) A timer
//! is a row of its key group like a state's, so incremental checkpoints carry the timers that
//! changed, and a restore at another parallelism takes them with their key groups.

use rocksdb::{ReadOptions, WriteBatch};
use weir_wire::TimeDomain;

use super::Rocks;
use super::layout::{META, prefix_end};
use crate::state::StateError;

/// The state id of timer rows: above every state's (states have ids up to 0xFFFC).
pub(super) const TIMERS: u16 = 0xFFFE;

fn domain_byte(domain: TimeDomain) -> u8 {
    match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

/// `group | TIMERS | domain`, appended to `buf`.
fn put_timer_prefix(buf: &mut Vec<u8>, group: u32, domain: TimeDomain) {
    buf.extend_from_slice(&(group as u16).to_be_bytes());
    buf.extend_from_slice(&TIMERS.to_be_bytes());
    buf.push(domain_byte(domain));
}

/// A timestamp in a row key: big-endian with the sign bit flipped, so that rows sort by it.
fn stamp(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

fn unstamp(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

fn meta_row() -> Vec<u8> {
    [&META[..], b"timers"].concat()
}

/// The timer rows put and deleted since the last commit. They go into the write batch at the
/// commit, sorted by row (a row's writes in the order they came): RocksDB's memtable inserts
/// a sorted run several times faster than rows in the order timers were registered.
#[derive(Debug, Default)]
pub(super) struct TimerWrites {
    rows: Vec<u8>,
    /// Per write: where its row ends in `rows`, and whether it puts (else deletes) the row.
    ends: Vec<(usize, bool)>,
}

impl TimerWrites {
    fn push(&mut self, group: u32, domain: TimeDomain, ts: i64, key: &[u8], put: bool) {
        put_timer_prefix(&mut self.rows, group, domain);
        self.rows.extend_from_slice(&stamp(ts));
        self.rows.extend_from_slice(key);
        self.ends.push((self.rows.len(), put));
    }

    /// The bytes of the rows held.
    pub(super) fn bytes(&self) -> usize {
        self.rows.len()
    }

    /// Moves the writes into `batch`, in row order.
    pub(super) fn write(&mut self, batch: &mut WriteBatch) {
        let mut start = 0;
        let mut writes: Vec<(&[u8], bool)> = (self.ends.iter())
            .map(|&(end, put)| (&self.rows[std::mem::replace(&mut start, end)..end], put))
            .collect();
        writes.sort_by_key(|&(row, _)| row);
        for (row, put) in writes {
            match put {
                true => batch.put(row, []),
                false => batch.delete(row),
            }
        }
        self.rows.clear();
        self.ends.clear();
    }
}

impl Rocks {
    /// Puts (`put`) or deletes a timer row at the next commit; a deleted row may not exist.
    pub(crate) fn write_timer(
        &mut self,
        (group, domain): (u32, TimeDomain),
        ts: i64,
        key: &[u8],
        put: bool,
    ) -> Result<(), StateError> {
        self.timer_writes.push(group, domain, ts, key, put);
        self.flush_large_batch()
    }

    /// Calls `f` with the timers of `domain` in `group` at or after `from`, in firing order,
    /// while it returns true. Rows not committed are not seen: [`commit`](Self::commit)
    /// first.
    pub(crate) fn timers_while(
        &self,
        group: u32,
        domain: TimeDomain,
        from: i64,
        mut f: impl FnMut(i64, &[u8]) -> bool,
    ) -> Result<(), StateError> {
        let mut prefix = Vec::with_capacity(13);
        put_timer_prefix(&mut prefix, group, domain);
        let mut opts = ReadOptions::default();
        if let Some(end) = prefix_end(&prefix) {
            opts.set_iterate_upper_bound(end);
        }
        // Seeking past the rows before `from` skips the tombstones of those moved to memory.
        let start = prefix.len();
        prefix.extend_from_slice(&stamp(from));
        let mut it = self.db.raw_iterator_opt(opts);
        it.seek(&prefix);
        while let Some(row) = it.key() {
            let Some((ts, key)) = row.get(start..).and_then(|r| r.split_first_chunk::<8>()) else {
                return Err(self.fail("a scan", "a timer row is damaged"));
            };
            if !f(unstamp(*ts), key) {
                break;
            }
            it.next();
        }
        it.status().map_err(|e| self.fail("a scan", e))
    }

    /// Stores `meta` (where memory stops holding timers), in the pending batch.
    pub(crate) fn put_timer_meta(&mut self, meta: &[u8]) {
        self.batch.put(meta_row(), meta);
    }

    /// What [`put_timer_meta`](Self::put_timer_meta) stored, if anything.
    pub(crate) fn timer_meta(&self) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get(meta_row()).map_err(|e| self.fail("a read", e))
    }
}
