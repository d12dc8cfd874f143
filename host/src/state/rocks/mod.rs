//! The RocksDB backend: one embedded database per operator subtask.
//!
//! Row keys put the key group first, so that one key group is one contiguous range (a later
//! rescale can take whole ranges). A value and a whole list are one row, a map entry is a row
//! of its own:
//!
//! ```text
//! u16 key group | u16 state id | u32 key length | key               value, or list
//! u16 key group | u16 state id | u32 key length | key | map key     map entry, in map-key order
//! u16 key group | 0xFFFE | u8 domain | timestamp | key                a timer (see `timers`)
//! 0xFFFF | "state" | u16 id      the declaration of a state (kind, TTL, name)
//! ```
//!
//! (all big-endian; `0xFFFF` is above every key group, as `max_parallelism` is at most 32,768.)
//! A list's value is its elements, each `u32` length (little-endian) and bytes, as Flink
//! keeps a list in one value: reading a list is one point read, through the value cache like
//! a value, rewriting one is one put, and appending to one that is not cached is one merge of
//! the new elements (a merge operator concatenates them), whatever the list's length. (A row
//! per element made every rewrite of a list a scan over the tombstones of its earlier
//! rewrites.) A map read is a scan over its rows; the map is then cached whole, and writes
//! to a cached map change it there, its changed entries reaching their rows when it is
//! evicted or at a checkpoint, so a hot key's map is neither scanned nor written batch after
//! batch.
//!
//! Writes go into a `WriteBatch` that the front commits at the end of each call, without a
//! write-ahead log: a crash loses the memtable, but a restore starts from a checkpoint, which
//! flushes the memtable into SST files first. Reads of a batch's values are one `MultiGet`.
//! Entries of states with a TTL are dropped in compaction by a filter that reads the TTL
//! stamp (see [`super::ttl`]).
//!
//! The code is in submodules: the row layout (`layout`), the value cache in front of the
//! database (`cache`), the files of incremental checkpoints and restores (`files`), and the
//! database's options and compaction filter (`options`).

mod cache;
mod files;
mod layout;
mod options;
mod timers;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use rocksdb::{ColumnFamilyDescriptor, DB, ReadOptions, WriteBatch, WriteOptions};
use smallvec::SmallVec;

use super::packed::{Change, map_entries, merge, put_item};
use super::ttl::NO_TIME;
use super::{FastMap, Key, Row, Slots, StateConfig, StateError, StateKind, Ttl};
use crate::clock::Clock;

use cache::ValueCache;
use files::SharedFile;
pub(crate) use files::{Manifest, is_manifest, link_or_copy, shared_names};
use layout::{META, prefix_end, put_prefix};
use options::{options, ttl_filter};

/// Maps up to this many bytes are cached whole; larger ones are read entry by entry (the
/// cache counts entries, not bytes, so this bounds what one map entry of it holds). The
/// bound of what a load sends whole: a map a guest reads whole is one the cache holds.
const MAX_CACHED_MAP: usize = weir_wire::MAP_LOAD_LIMIT;

/// Lists up to this many bytes are cached; larger ones are read from and written to RocksDB
/// each time, so that what the cache holds stays bounded by its number of entries.
const MAX_CACHED_LIST: usize = MAX_CACHED_MAP;

/// The TTL and kind of each state by id, read by the compaction filter on RocksDB's threads.
pub(super) type TtlTable = Arc<RwLock<Vec<Option<(Ttl, StateKind)>>>>;

pub(crate) struct Rocks {
    db: DB,
    /// Recently used values of value states, lists and whole maps, in front of `db`.
    cache: ValueCache,
    /// Where and how it was opened, to open a restored database the same way.
    setup: Setup,
    /// `<operator uid>-<subtask>-<random id>`: the working directory's name, and the prefix of
    /// the shared files this instance uploads (unique, so never confused with another's).
    instance: String,
    /// The SST files of the last completed checkpoint: local name -> shared file.
    confirmed: HashMap<String, SharedFile>,
    /// The SST files of each checkpoint taken and not yet completed.
    pending: BTreeMap<u64, HashMap<String, SharedFile>>,
    kinds: Vec<StateKind>,
    batch: WriteBatch,
    /// Timer rows written since the last commit (see `timers`).
    timer_writes: timers::TimerWrites,
    write: WriteOptions,
    /// Scratch space for row keys.
    key: Vec<u8>,
    /// Scratch space for maps.
    scratch: Vec<u8>,
    /// Maps known to be larger than a load sends whole, by row prefix: a lower bound of their
    /// number of entries (less each remove; forgotten on a clear), so that a load does not
    /// scan the first 16 KiB of a large map every batch to find out again.
    large: FastMap<Key, u32>,
    ttls: TtlTable,
    watermark: Arc<AtomicI64>,
    /// Dropped after `db`: deletes the working directory.
    dir: WorkDir,
}

impl std::fmt::Debug for Rocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rocks").field("dir", &self.dir.0).finish()
    }
}

/// A working directory, deleted when dropped.
#[derive(Debug)]
pub(super) struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot delete RocksDB directory {}: {e}", self.0.display());
        }
    }
}

pub(super) fn db_error(dir: &Path, action: &str, e: impl std::fmt::Display) -> StateError {
    StateError::Backend(format!(
        "RocksDB state in {}: {action} failed: {e} (is the disk full or the directory not \
         writable? [state] dir sets where RocksDB works)",
        dir.display()
    ))
}

impl Rocks {
    /// Opens a new, empty database in a fresh directory `<root>/<name>-<random>`.
    pub(crate) fn open(
        root: &Path,
        name: &str,
        config: &StateConfig,
        groups: Range<u32>,
        clock: Clock,
    ) -> Result<Self, StateError> {
        let setup = Setup {
            root: root.to_path_buf(),
            name: name.to_string(),
            config: config.clone(),
            groups,
            clock,
        };
        Self::open_with(setup, |_| Ok(()))
    }

    /// Opens a database in a fresh directory after `fill` put files into it.
    fn open_with(
        setup: Setup,
        fill: impl FnOnce(&Path) -> Result<(), StateError>,
    ) -> Result<Self, StateError> {
        let instance = format!("{}-{:016x}", setup.name, fastrand::u64(..));
        let dir = setup.root.join(&instance);
        std::fs::create_dir_all(&dir).map_err(|e| db_error(&dir, "creating the directory", e))?;
        let dir = WorkDir(dir);
        fill(&dir.0)?;
        let (config, clock) = (&setup.config, &setup.clock);
        let ttls: TtlTable = Arc::default();
        let watermark = Arc::new(AtomicI64::new(NO_TIME));
        // The options of the database and of its one (default) column family, which holds
        // the rows and the compaction filter. Opened by name so that `read_values` has a
        // column family handle for `MultiGet`.
        let filter = || ttl_filter(Arc::clone(&ttls), clock.clone(), Arc::clone(&watermark));
        let family = ColumnFamilyDescriptor::new("default", options(config, filter()));
        let db = DB::open_cf_descriptors(&options(config, filter()), &dir.0, [family])
            .map_err(|e| db_error(&dir.0, "opening", e))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(Rocks {
            db,
            cache: ValueCache::new(setup.config.cache_entries as usize),
            setup,
            instance,
            confirmed: HashMap::new(),
            pending: BTreeMap::new(),
            kinds: Vec::new(),
            batch: WriteBatch::default(),
            timer_writes: timers::TimerWrites::default(),
            write,
            key: Vec::new(),
            scratch: Vec::new(),
            large: FastMap::default(),
            ttls,
            watermark,
            dir,
        })
    }

    fn fail(&self, action: &str, e: impl std::fmt::Display) -> StateError {
        db_error(&self.dir.0, action, e)
    }

    /// Takes state `kinds.len()` of `kind` with `ttl` into account: its kind for reads, its
    /// TTL for the compaction filter.
    pub(super) fn register(&mut self, kind: StateKind, ttl: Option<Ttl>) {
        self.kinds.push(kind);
        self.ttls
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(ttl.filter(Ttl::active).map(|t| (t, kind)));
    }

    pub(crate) fn declare(
        &mut self,
        st: usize,
        name: &str,
        kind: StateKind,
        ttl: Option<Ttl>,
    ) -> Result<(), StateError> {
        if st >= timers::TIMERS as usize {
            return Err(StateError::Backend(format!(
                "state \"{name}\": an operator can declare at most 65,534 states"
            )));
        }
        self.register(kind, ttl);
        let mut row = META.to_vec();
        row.extend_from_slice(b"state");
        row.extend_from_slice(&(st as u16).to_be_bytes());
        let mut value = vec![kind as u8];
        match ttl {
            None => value.push(0),
            Some(t) => {
                value.push(1);
                value.extend_from_slice(&t.ttl_ms.to_le_bytes());
                value.extend([t.update as u8, t.visibility as u8, u8::from(t.event_time)]);
            }
        }
        value.extend_from_slice(name.as_bytes());
        self.batch.put(row, value);
        self.commit()
    }

    #[allow(dead_code)] // see KeyedState::set_watermark
    pub(crate) fn set_watermark(&self, watermark: i64) {
        self.watermark.store(watermark, Ordering::Relaxed);
    }

    /// `group | state | key length | key` into the scratch key; returns its length.
    fn prefix(&mut self, st: usize, group: u32, key: &[u8]) -> usize {
        self.key.clear();
        put_prefix(&mut self.key, st, group, key);
        self.key.len()
    }

    pub(crate) fn commit(&mut self) -> Result<(), StateError> {
        self.timer_writes.write(&mut self.batch);
        self.cache.evict(&mut self.batch);
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.db
            .write_opt(batch, &self.write)
            .map_err(|e| self.fail("a write", e))
    }

    /// Calls `f` with the value of every slot, in slot order: from the cache where it has
    /// the key, the others read with one `MultiGet` (and cached).
    pub(crate) fn read_values(
        &mut self,
        st: usize,
        slots: &Slots,
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<(), StateError> {
        let mut rows = Vec::with_capacity(slots.len() * 24);
        let mut ends = Vec::with_capacity(slots.len());
        let mut missing = Vec::new();
        for slot in 0..slots.len() {
            let start = rows.len();
            put_prefix(&mut rows, st, slots.group(slot), slots.key(slot));
            ends.push(rows.len());
            if !self.cache.promote(&rows[start..]) {
                missing.push(slot);
            }
        }
        let row = |slot: usize| &rows[if slot == 0 { 0 } else { ends[slot - 1] }..ends[slot]];
        if !missing.is_empty() {
            let cf = self
                .db
                .cf_handle("default")
                .expect("the database is opened with its default column family");
            let values = self
                .db
                .batched_multi_get_cf(cf, missing.iter().map(|&s| row(s)), false);
            for (&slot, v) in missing.iter().zip(values) {
                let v = v.map_err(|e| db_error(&self.dir.0, "a read", e))?;
                self.cache.put(row(slot), v.as_deref(), false);
            }
        }
        for slot in 0..slots.len() {
            f(slot, self.cache.get(row(slot)));
        }
        Ok(())
    }

    /// Sets (or with `None` removes) the value of `slot`'s key: in the cache, from which it
    /// reaches RocksDB when evicted or at the next checkpoint.
    pub(crate) fn write_value(
        &mut self,
        st: usize,
        slots: &Slots,
        slot: usize,
        v: Option<&[u8]>,
    ) -> Result<(), StateError> {
        self.prefix(st, slots.group(slot), slots.key(slot));
        self.cache.put(&self.key, v, true);
        Ok(())
    }

    /// Writes every changed value of the cache to RocksDB.
    pub(crate) fn flush(&mut self) -> Result<(), StateError> {
        self.cache.flush(&mut self.batch);
        self.commit()
    }

    pub(crate) fn put_value(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        v: &[u8],
    ) -> Result<(), StateError> {
        self.prefix(st, group, key);
        self.cache.forget(&self.key);
        self.batch.put(&self.key, v);
        self.flush_large_batch()
    }

    /// Commits a batch that grew large (a restore writes many rows in one call).
    pub(super) fn flush_large_batch(&mut self) -> Result<(), StateError> {
        if self.batch.size_in_bytes() + self.timer_writes.bytes() > 32 << 20 {
            self.commit()?;
        }
        Ok(())
    }

    /// Calls `f` with the suffix (after the key) and value of every row of `key` in `st`.
    fn rows(&self, prefix: &[u8], mut f: impl FnMut(&[u8], &[u8])) -> Result<(), StateError> {
        self.rows_while(prefix, |k, v| {
            f(k, v);
            true
        })
    }

    /// [`rows`](Self::rows) while `f` returns true.
    fn rows_while(
        &self,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        let mut opts = ReadOptions::default();
        if let Some(end) = prefix_end(prefix) {
            opts.set_iterate_upper_bound(end);
        }
        let mut it = self.db.raw_iterator_opt(opts);
        it.seek(prefix);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !k.starts_with(prefix) || !f(&k[prefix.len()..], v) {
                break;
            }
            it.next();
        }
        it.status().map_err(|e| self.fail("a scan", e))
    }

    pub(crate) fn read_list(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        mut f: impl FnMut(&[u8]),
    ) -> Result<(), StateError> {
        self.prefix(st, group, key);
        let damaged = match self.list()? {
            Some(list) => list_elements(&list, &mut f).is_none(),
            None => false,
        };
        if damaged {
            return Err(self.fail("a read", "a list value is damaged"));
        }
        Ok(())
    }

    /// Deletes every row of `key` in `st` (in the pending batch).
    fn delete_rows(&mut self, len: usize) -> Result<(), StateError> {
        let prefix = self.key[..len].to_vec();
        let mut doomed = Vec::new();
        self.rows(&prefix, |suffix, _| {
            doomed.push([&prefix[..], suffix].concat())
        })?;
        for row in doomed {
            self.batch.delete(row);
        }
        Ok(())
    }

    /// Replaces (`clear`) or extends `key`'s list in `st` by `append`. A list in the cache
    /// changes there, and reaches RocksDB when evicted or at the next checkpoint; another is
    /// extended with a merge (see `options::append_lists`), without reading it, so that
    /// appending to a list costs what is appended, however long the list.
    pub(crate) fn write_list<'a>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        clear: bool,
        append: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), StateError> {
        let mut append = append.into_iter().peekable();
        if !clear && append.peek().is_none() {
            return Ok(());
        }
        let write = |list: &mut Vec<u8>| {
            for e in append {
                list.extend_from_slice(&(e.len() as u32).to_le_bytes());
                list.extend_from_slice(e);
            }
        };
        self.prefix(st, group, key);
        if !clear && self.cache.promote(&self.key) {
            // Extended where it is cached, not copied per append.
            if self.cache.append(&self.key, write) > MAX_CACHED_LIST {
                let list = self.cache.get(&self.key).unwrap_or_default().to_vec();
                self.cache.forget(&self.key);
                self.batch.put(&self.key, &list);
            }
            return self.flush_large_batch();
        }
        let mut list = Vec::new();
        write(&mut list);
        if !clear {
            self.batch.merge(&self.key, &list);
        } else if list.len() <= MAX_CACHED_LIST {
            self.cache
                .put(&self.key, (!list.is_empty()).then_some(&list[..]), true);
        } else {
            self.cache.forget(&self.key);
            self.batch.put(&self.key, &list);
        }
        self.flush_large_batch()
    }

    /// The list in the row of the scratch key: from the cache, or read from RocksDB and
    /// cached if it is at most [`MAX_CACHED_LIST`] bytes.
    fn list(&mut self) -> Result<Option<Cow<'_, [u8]>>, StateError> {
        if self.cache.promote(&self.key) {
            return Ok(self.cache.get(&self.key).map(Cow::Borrowed));
        }
        let v = self
            .db
            .get_pinned(&self.key)
            .map_err(|e| self.fail("a read", e))?;
        match v {
            Some(v) if v.len() > MAX_CACHED_LIST => Ok(Some(Cow::Owned(v.to_vec()))),
            v => {
                self.cache.put(&self.key, v.as_deref(), false);
                Ok(self.cache.get(&self.key).map(Cow::Borrowed))
            }
        }
    }

    /// Calls `f` with the entries of `key`'s map in key order while it returns true: from
    /// the cache, which keeps a small map whole (packed as the memory backend keeps it) under
    /// the row key of its prefix, or read with one scan and then cached if it was read to
    /// its end. Writes go to RocksDB at once and into the cached map.
    pub(crate) fn read_map(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        self.prefix(st, group, key);
        if self.cache.promote(&self.key) {
            for (k, v) in map_entries(self.cache.get(&self.key).unwrap_or_default()) {
                if !f(k, v) {
                    break;
                }
            }
            return Ok(());
        }
        let mut map = std::mem::take(&mut self.scratch);
        map.clear();
        let (mut whole, mut cacheable) = (true, true);
        self.rows_while(&self.key, |k, v| {
            whole = f(k, v);
            if cacheable {
                put_item(&mut map, k);
                put_item(&mut map, v);
                cacheable = map.len() <= MAX_CACHED_MAP;
            }
            whole
        })?;
        if whole && cacheable {
            self.cache
                .put(&self.key, (!map.is_empty()).then_some(&map), false);
        }
        self.scratch = map;
        Ok(())
    }

    /// A lower bound of the entries of `key`'s map if it is known to be larger than
    /// [`MAX_CACHED_MAP`] (see [`note_large_map`](Self::note_large_map)).
    pub(crate) fn large_map(&mut self, st: usize, group: u32, key: &[u8]) -> Option<u32> {
        self.prefix(st, group, key);
        self.large.get(&self.key[..]).copied()
    }

    /// Notes that `key`'s map is larger than [`MAX_CACHED_MAP`], with at least `entries`.
    pub(crate) fn note_large_map(&mut self, st: usize, group: u32, key: &[u8], entries: u32) {
        self.prefix(st, group, key);
        if self.large.len() >= self.cache.capacity() {
            self.large.clear();
        }
        self.large.insert(Key::from_slice(&self.key), entries);
    }

    /// Calls `f` with the value of map key `map_key` in `key`'s map.
    pub(crate) fn map_get<R>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        map_key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, StateError> {
        let len = self.prefix(st, group, key);
        if self.cache.promote(&self.key) {
            let map = self.cache.get(&self.key).unwrap_or_default();
            return Ok(f(map_entries(map)
                .find(|(k, _)| *k == map_key)
                .map(|(_, v)| v)));
        }
        self.key.extend_from_slice(map_key);
        let v = self.db.get_pinned(&self.key);
        self.key.truncate(len);
        let v = v.map_err(|e| self.fail("a read", e))?;
        Ok(f(v.as_deref()))
    }

    /// Applies `changes` to `key`'s map in `st` (after removing every entry if `clear`). A
    /// cached map changes in the cache, from which the changed entries reach RocksDB when it
    /// is evicted, at the next checkpoint, or when it outgrows the cache; other writes go to
    /// RocksDB's rows at once.
    pub(crate) fn write_map<'a>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        clear: bool,
        changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<(), StateError> {
        let len = self.prefix(st, group, key);
        let changes: SmallVec<[Change<'_>; 8]> = changes.into_iter().collect();
        if !clear && self.cache.promote(&self.key) {
            let old = self.cache.get(&self.key).unwrap_or_default();
            merge(
                old,
                changes.iter().copied(),
                &mut self.scratch,
                |_, _, _| {},
            );
            let map = &self.scratch;
            if map.len() <= MAX_CACHED_MAP {
                // It fits the cache, so it is not large (any more): a note that it is would
                // answer its loads with a lower bound of entries it may no longer have.
                self.large.remove(&self.key[..len]);
                let map = (!map.is_empty()).then_some(&map[..]);
                let keys = changes.iter().map(|c| c.0);
                self.cache.put_map(&self.key, map, keys, &mut self.batch);
                return self.flush_large_batch();
            }
        }
        // Not cached, or too large now: what the cache has not written yet goes first (a
        // clear supersedes it).
        match clear {
            true => self.cache.forget(&self.key),
            false => self.cache.write_out(&self.key, &mut self.batch),
        }
        if clear {
            self.delete_rows(len)?;
        }
        if let Some(n) = self.large.get_mut(&self.key[..len]) {
            let removes = changes.iter().filter(|c| c.1.is_none()).count() as u32;
            match clear || *n <= removes {
                true => drop(self.large.remove(&self.key[..len])),
                false => *n -= removes,
            }
        }
        for &(k, v) in &changes {
            self.key.truncate(len);
            self.key.extend_from_slice(k);
            match v {
                Some(v) => self.batch.put(&self.key, v),
                None => self.batch.delete(&self.key),
            }
        }
        self.key.truncate(len);
        if clear {
            // A cleared map is known whole: cached (unchanged, as written above).
            merge(&[], changes, &mut self.scratch, |_, _, _| {});
            let map = &self.scratch;
            if map.len() <= MAX_CACHED_MAP {
                self.cache
                    .put(&self.key, (!map.is_empty()).then_some(map), false);
            }
        }
        self.flush_large_batch()
    }

    /// Every row of state `st` in key group `group`, in key order (so the rows of one key
    /// come one after another).
    pub(crate) fn scan(
        &self,
        st: usize,
        group: u32,
        f: &mut impl FnMut(&[u8], Row<'_>),
    ) -> Result<(), StateError> {
        let mut prefix = Vec::with_capacity(4);
        prefix.extend_from_slice(&(group as u16).to_be_bytes());
        prefix.extend_from_slice(&(st as u16).to_be_bytes());
        let kind = self.kinds[st];
        let mut bad = None;
        self.rows(&prefix, |rest, v| {
            let Some((len, rest)) = rest.split_first_chunk::<4>() else {
                bad = Some(rest.len());
                return;
            };
            let len = u32::from_be_bytes(*len) as usize;
            if rest.len() < len {
                bad = Some(rest.len());
                return;
            }
            let (key, suffix) = rest.split_at(len);
            match kind {
                StateKind::Value => f(key, Row::Value(v)),
                StateKind::List => {
                    if list_elements(v, |e| f(key, Row::Element(e))).is_none() {
                        bad = Some(v.len());
                    }
                }
                StateKind::Map => f(key, Row::Entry(suffix, v)),
            }
        })?;
        match bad {
            Some(_) => Err(self.fail("a scan", "a row key is damaged")),
            None => Ok(()),
        }
    }
}

/// Calls `f` with each element of an encoded list, in order; `None` if it is damaged.
pub(super) fn list_elements(mut list: &[u8], mut f: impl FnMut(&[u8])) -> Option<()> {
    while !list.is_empty() {
        let (len, rest) = list.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return None;
        }
        let (e, rest) = rest.split_at(len);
        f(e);
        list = rest;
    }
    Some(())
}

/// How a database was opened.
#[derive(Debug, Clone)]
pub(super) struct Setup {
    root: PathBuf,
    name: String,
    config: StateConfig,
    groups: Range<u32>,
    clock: Clock,
}

#[cfg(test)]
impl Rocks {
    /// Flushes the memtable and compacts every file down to the last level, so that the
    /// compaction filter sees every row.
    pub(crate) fn compact(&mut self) -> Result<(), StateError> {
        self.flush()?;
        self.db.flush().map_err(|e| self.fail("a flush", e))?;
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        self.db
            .compact_range_opt(None::<&[u8]>, None::<&[u8]>, &opts);
        Ok(())
    }

    /// Writes the meta row `name`, as an earlier weir may have.
    pub(crate) fn put_meta(&mut self, name: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.batch.put([&META[..], name].concat(), value);
        self.commit()
    }

    /// The rows of key groups in the database, and the bytes of its SST files.
    pub(crate) fn disk_usage(&self) -> Result<(u64, u64), StateError> {
        let mut rows = 0;
        self.rows(&[], |k, _| rows += u64::from(!k.starts_with(&META)))?;
        let files = self
            .db
            .live_files()
            .map_err(|e| self.fail("listing files", e))?;
        Ok((rows, files.iter().map(|f| f.size as u64).sum()))
    }
}
