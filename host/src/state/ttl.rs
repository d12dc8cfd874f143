//! Time-to-live of keyed state, with Flink's semantics and names (`StateTtlConfig`).
//!
//! Every entry of a state with a TTL (a value, a list element, a map entry) carries the time
//! it was last written (or read, with `on_read_and_write`) as an 8-byte stamp in front of its
//! bytes. It has expired once `stamp + ttl <= now`. Both backends store the stamp the same
//! way, so snapshots carry it and a restore keeps every entry's expiry time.
//!
//! - **Processing time** (Flink's only kind): `now` is the job's [`Clock`](crate::Clock).
//! - **Event time** (weir's addition): an entry is stamped with the event time of the write,
//!   the largest timestamp among the batch's records of that key, or the watermark if that
//!   is later; `now` is the task's current watermark. So an entry expires once the watermark
//!   passes `ttl` beyond the latest record that wrote it, however fast or slow the input is
//!   replayed. Before the first watermark nothing expires; an entry written with neither a
//!   record timestamp nor a watermark does not expire until it is written again with one.
//!
//! Expired entries are removed when they are read (`never_return_expired` reads them as
//! absent, `return_expired_if_not_cleaned_up` returns them that one last time), left out of
//! full snapshots, cleaned up incrementally by the memory backend (a few key groups per
//! batch) and dropped by a compaction filter in RocksDB.

/// Time-to-live of a state's entries, as the operator declared it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    pub ttl_ms: u64,
    pub update: TtlUpdate,
    pub visibility: TtlVisibility,
    pub event_time: bool,
}

/// Flink's `StateTtlConfig.UpdateType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlUpdate {
    /// The stamp is set when an entry is created and on every write (the default).
    OnCreateAndWrite,
    /// ... and also when it is read.
    OnReadAndWrite,
    /// TTL is off: entries never expire.
    Disabled,
}

/// Flink's `StateTtlConfig.StateVisibility`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlVisibility {
    NeverReturnExpired,
    ReturnExpiredIfNotCleanedUp,
}

/// Bytes of the stamp in front of an entry of a state with a TTL.
pub(crate) const STAMP: usize = 8;

/// The stamp of an entry written with no known time: it never expires.
pub(crate) const NEVER: i64 = i64::MAX;

/// No watermark yet: nothing has expired in event time.
pub(crate) const NO_TIME: i64 = i64::MIN;

impl Ttl {
    /// Whether entries carry a stamp (and can expire).
    pub(crate) fn active(&self) -> bool {
        self.update != TtlUpdate::Disabled
    }

    pub(crate) fn expired(&self, stamp: i64, now: i64) -> bool {
        stamp.saturating_add(self.ttl_ms.min(i64::MAX as u64) as i64) <= now
    }

    pub(crate) fn returns_expired(&self) -> bool {
        self.visibility == TtlVisibility::ReturnExpiredIfNotCleanedUp
    }
}

/// Splits a stored entry into its stamp and the user's bytes. An entry too short to have a
/// stamp (which a consistent store never holds) is kept whole and never expires.
pub(crate) fn split(raw: &[u8]) -> (i64, &[u8]) {
    match raw.split_first_chunk::<STAMP>() {
        Some((stamp, rest)) => (i64::from_le_bytes(*stamp), rest),
        None => (NEVER, raw),
    }
}

/// `stamp` followed by `user`, into `buf` (cleared first).
pub(crate) fn stamped<'b>(buf: &'b mut Vec<u8>, stamp: i64, user: &[u8]) -> &'b [u8] {
    buf.clear();
    buf.extend_from_slice(&stamp.to_le_bytes());
    buf.extend_from_slice(user);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_stamp_plus_ttl_and_saturates() {
        let ttl = Ttl {
            ttl_ms: 100,
            update: TtlUpdate::OnCreateAndWrite,
            visibility: TtlVisibility::NeverReturnExpired,
            event_time: false,
        };
        assert!(!ttl.expired(1_000, 1_099));
        assert!(ttl.expired(1_000, 1_100));
        assert!(!ttl.expired(NEVER, i64::MAX - 1));
        assert!(!ttl.expired(0, NO_TIME));
        let mut buf = Vec::new();
        let raw = stamped(&mut buf, 42, b"v").to_vec();
        assert_eq!(split(&raw), (42, &b"v"[..]));
        assert_eq!(split(b"short"), (NEVER, &b"short"[..]));
    }
}
