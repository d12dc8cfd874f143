//! The timers of a subtask, kept by its keyed state.
//!
//! With the memory backend every timer is in memory ([`Timers`]: a hash set and a heap).
//! With RocksDB, memory holds the earliest timers of each domain, those at or before a bound,
//! and RocksDB the later ones, as rows of their key groups (see `rocks::timers`), as Flink's
//! RocksDB timer service keeps the head of its queue cached. So a timer costs a hash insert
//! while the timers fit the timer cache (`[state] timer_cache` per domain), and once more are
//! pending than fit, a timer after the bound costs a RocksDB put (no read: a timer is a row
//! with an empty value, so registering it twice writes the same row). Every timer is in
//! exactly one of the two places, by its timestamp against the bound:
//!
//! - when memory holds more than the cache, the bound is lowered to the median of memory's
//!   timestamps and the timers after it move to RocksDB;
//! - when memory has no timer left of a domain whose bound is not the end of time, the
//!   earliest rows of every key group are read and the bound raised to below the first
//!   timestamp not read (the whole of a timestamp is read, so the bound always moves), and
//!   the rows at or before it move into memory.
//!
//! A checkpoint keeps memory's timers in its manifest and the rest in the database's files,
//! with the bounds in a meta row; a full snapshot has every timer under its key group.

use weir_wire::TimeDomain;

use super::{Backend, Key, KeyedState, StateError};

/// Where the timers of each domain (indexed by `TimeDomain as usize`) are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spill {
    /// Memory holds the timers at or before it, RocksDB those after.
    bound: [i64; 2],
    /// About how many timers RocksDB holds, never fewer: a timer registered twice after the
    /// bound counts twice, and a delete there counts nothing (there may have been no such
    /// timer), until the domain's rows are read to their end.
    spilled: [u64; 2],
    /// How many timers memory may hold before the later half moves to RocksDB.
    evict_at: [usize; 2],
}

impl Spill {
    /// Every timer in memory, up to `cache` per domain before they spill.
    pub(super) fn new(cache: usize) -> Self {
        Spill {
            bound: [i64::MAX; 2],
            spilled: [0; 2],
            evict_at: [cache; 2],
        }
    }

    /// Whether RocksDB holds no timer.
    pub(super) fn is_empty(&self) -> bool {
        self.spilled == [0; 2]
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        for d in 0..2 {
            out.extend_from_slice(&self.bound[d].to_le_bytes());
            out.extend_from_slice(&self.spilled[d].to_le_bytes());
        }
        out
    }

    /// Sets bounds and counts from what [`encode`](Self::encode) wrote.
    fn decode(&mut self, bytes: &[u8]) -> Option<()> {
        let mut it = bytes.chunks_exact(8).map(|c| <[u8; 8]>::try_from(c).ok());
        for d in 0..2 {
            self.bound[d] = i64::from_le_bytes(it.next()??);
            self.spilled[d] = u64::from_le_bytes(it.next()??);
        }
        Some(())
    }
}

impl KeyedState {
    /// Registers the timer of `key` at `ts`; registering it again changes nothing.
    pub fn register_timer(
        &mut self,
        domain: TimeDomain,
        ts: i64,
        key: &[u8],
    ) -> Result<(), StateError> {
        let d = domain as usize;
        if ts > self.spill.bound[d] {
            let group = self.key_group(key);
            self.rocks()?.write_timer((group, domain), ts, key, true)?;
            self.spill.spilled[d] += 1;
            return Ok(());
        }
        self.timers.register(domain, ts, key);
        if self.timers.len_of(domain) > self.spill.evict_at[d] {
            self.spill_timers(domain)?;
        }
        Ok(())
    }

    /// Deletes the timer of `key` at `ts`, if there is one.
    pub fn delete_timer(
        &mut self,
        domain: TimeDomain,
        ts: i64,
        key: &[u8],
    ) -> Result<(), StateError> {
        if ts > self.spill.bound[domain as usize] {
            let group = self.key_group(key);
            return self.rocks()?.write_timer((group, domain), ts, key, false);
        }
        self.timers.delete(domain, ts, key);
        Ok(())
    }

    /// Removes the earliest timer of `domain` if it is due at `upto` (at or before it), and
    /// returns it.
    pub fn pop_timer(
        &mut self,
        domain: TimeDomain,
        upto: i64,
    ) -> Result<Option<(i64, Key)>, StateError> {
        loop {
            if let Some(timer) = self.timers.pop_due(domain, upto) {
                return Ok(Some(timer));
            }
            if self.spill.bound[domain as usize] >= upto || self.timers.len_of(domain) > 0 {
                return Ok(None);
            }
            self.load_timers(domain)?;
        }
    }

    /// When the earliest timer of `domain` is due, or a time before it: with memory's timers
    /// of the domain all fired and more in RocksDB, the time after the bound (the next
    /// [`pop_timer`](Self::pop_timer) there reads them).
    pub fn next_timer(&mut self, domain: TimeDomain) -> Option<i64> {
        let bound = self.spill.bound[domain as usize];
        (self.timers.next(domain)).or((bound < i64::MAX).then(|| bound + 1))
    }

    /// About how many timers of `domain` are pending: never fewer.
    pub fn timer_count(&self, domain: TimeDomain) -> u64 {
        self.timers.len_of(domain) as u64 + self.spill.spilled[domain as usize]
    }

    /// How many timers memory holds, and their bytes.
    pub fn timers_in_memory(&self) -> (usize, usize) {
        (self.timers.len(), self.timers.bytes())
    }

    /// The RocksDB database, opened if it waited for a first state: an operator with only
    /// timers opens one once its timers spill.
    fn rocks(&mut self) -> Result<&mut super::Rocks, StateError> {
        self.open_rocks()?;
        match &mut self.backend {
            Backend::Rocks(r) => Ok(r),
            Backend::Memory(_) => unreachable!("timers spill only with a RocksDB database"),
        }
    }

    /// Moves the later half of memory's timers of `domain` to RocksDB.
    fn spill_timers(&mut self, domain: TimeDomain) -> Result<(), StateError> {
        let d = domain as usize;
        let mut stamps: Vec<i64> = self.timers.timestamps(domain).collect();
        let half = stamps.len() / 2;
        let (_, &mut bound, _) = stamps.select_nth_unstable(half);
        let moved = self.timers.split_off(domain, bound);
        if moved.is_empty() {
            // Half of them share the latest timestamp: try again at twice as many.
            self.spill.evict_at[d] = 2 * stamps.len();
            return Ok(());
        }
        self.spill.spilled[d] += moved.len() as u64;
        self.spill.bound[d] = bound;
        self.spill.evict_at[d] = self.timer_cache;
        // In row order: the memtable takes sorted runs faster.
        let mut rows: Vec<(u32, i64, Key)> = (moved.into_iter())
            .map(|(ts, key)| (self.key_group(&key), ts, key))
            .collect();
        rows.sort_unstable();
        let rocks = self.rocks()?;
        for (group, ts, key) in &rows {
            rocks.write_timer((*group, domain), *ts, key, true)?;
        }
        Ok(())
    }

    /// Reads the earliest timers of `domain` from RocksDB into memory, raising the bound.
    fn load_timers(&mut self, domain: TimeDomain) -> Result<(), StateError> {
        let d = domain as usize;
        let per_group = (self.timer_cache / 2 / self.groups.len().max(1)).max(1);
        let groups = self.groups.clone();
        let from = self.spill.bound[d] + 1;
        let rocks = self.rocks()?;
        rocks.commit()?;
        let mut read: Vec<(i64, Key, u32)> = Vec::new();
        let mut bound = i64::MAX;
        for group in groups {
            let (mut n, mut last) = (0, None);
            rocks.timers_while(group, domain, from, |ts, key| {
                if n >= per_group && last != Some(ts) {
                    // The first timestamp not read: this group's timers before it are.
                    bound = bound.min(ts - 1);
                    return false;
                }
                read.push((ts, Key::from_slice(key), group));
                (n, last) = (n + 1, Some(ts));
                true
            })?;
        }
        read.retain(|t| t.0 <= bound);
        for (ts, key, group) in &read {
            rocks.write_timer((*group, domain), *ts, key, false)?;
        }
        for (ts, key, _) in &read {
            self.timers.register(domain, *ts, key);
        }
        let loaded = read.len() as u64;
        self.spill.bound[d] = bound;
        self.spill.spilled[d] = match bound {
            i64::MAX => 0,
            _ => self.spill.spilled[d].saturating_sub(loaded),
        };
        Ok(())
    }

    /// Notes where memory stops holding timers, for a checkpoint of the database.
    pub(super) fn store_timer_bounds(&mut self) {
        if let Backend::Rocks(r) = &mut self.backend {
            r.put_timer_meta(&self.spill.encode());
        }
    }

    /// Takes over where memory stopped holding timers from a restored database (every
    /// timer in memory if it does not say).
    pub(super) fn load_timer_bounds(&mut self) -> Result<(), StateError> {
        let Backend::Rocks(r) = &self.backend else {
            return Ok(());
        };
        let mut spill = Spill::new(self.timer_cache);
        if let Some(meta) = r.timer_meta()? {
            spill
                .decode(&meta)
                .ok_or_else(|| StateError::Backend("the timers' meta row is damaged".into()))?;
        }
        self.spill = spill;
        Ok(())
    }

    /// Calls `f` with every timer of `group` in RocksDB.
    pub(super) fn spilled_timers(
        &self,
        group: u32,
        mut f: impl FnMut(TimeDomain, i64, &[u8]),
    ) -> Result<(), StateError> {
        if let Backend::Rocks(r) = &self.backend {
            for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
                r.timers_while(group, domain, i64::MIN, |ts, key| {
                    f(domain, ts, key);
                    true
                })?;
            }
        }
        Ok(())
    }

    /// Every pending timer, in order.
    #[cfg(test)]
    pub(crate) fn all_timers(&mut self) -> Vec<(TimeDomain, i64, Vec<u8>)> {
        self.commit().unwrap();
        let mut all: Vec<_> = (self.timers.iter())
            .map(|(d, ts, k)| (d, ts, k.to_vec()))
            .collect();
        for group in self.groups.clone() {
            (self.spilled_timers(group, |d, ts, k| all.push((d, ts, k.to_vec())))).unwrap();
        }
        all.sort();
        all
    }
}
