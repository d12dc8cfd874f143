//! The RocksDB backend: one embedded database per operator subtask.
//!
//! Row keys put the key group first, so that one key group is one contiguous range (a later
//! rescale can take whole ranges), and give every list element and map entry a row of its
//! own:
//!
//! ```text
//! u16 key group | u16 state id | u32 key length | key               value state
//! u16 key group | u16 state id | u32 key length | key | u64 seq     list element, in seq order
//! u16 key group | u16 state id | u32 key length | key | map key     map entry, in map-key order
//! 0xFFFF | "state" | u16 id      the declaration of a state (kind, TTL, name)
//! 0xFFFF | "seq"                 the next list sequence number
//! ```
//!
//! (all big-endian; `0xFFFF` is above every key group, as `max_parallelism` is at most 32,768.)
//!
//! Writes go into a `WriteBatch` that the front commits at the end of each call, without a
//! write-ahead log: a crash loses the memtable, but a restore starts from a checkpoint, which
//! flushes the memtable into SST files first. Reads of a batch's values are one `MultiGet`.
//! Entries of states with a TTL are dropped in compaction by a filter that reads the TTL
//! stamp (see [`super::ttl`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use rocksdb::compaction_filter::Decision;
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, DBCompressionType, Options, ReadOptions,
    WriteBatch, WriteOptions,
};

use super::ttl::{NO_TIME, split};
use super::{
    FastMap, Key, Row, Slots, StateConfig, StateError, StateKind, Ttl, TtlUpdate, TtlVisibility,
};
use crate::clock::Clock;
use crate::operator::SharedFiles;
use weir_wire::{DecodeError, Reader, TimeDomain, put_bytes, put_i64, put_u8, put_u32};

/// The first two bytes of every row that is not a key group's.
const META: [u8; 2] = [0xFF, 0xFF];

/// The TTL of each state by id, read by the compaction filter on RocksDB's threads.
type TtlTable = Arc<RwLock<Vec<Option<Ttl>>>>;

pub(crate) struct Rocks {
    db: DB,
    /// Recently used values of value states, in front of `db`.
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
    write: WriteOptions,
    /// Scratch space for row keys.
    key: Vec<u8>,
    next_seq: u64,
    seq_dirty: bool,
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
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot delete RocksDB directory {}: {e}", self.0.display());
        }
    }
}

fn db_error(dir: &Path, action: &str, e: impl std::fmt::Display) -> StateError {
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
            write,
            key: Vec::new(),
            next_seq: 0,
            seq_dirty: false,
            ttls,
            watermark,
            dir,
        })
    }

    fn fail(&self, action: &str, e: impl std::fmt::Display) -> StateError {
        db_error(&self.dir.0, action, e)
    }

    pub(crate) fn declare(
        &mut self,
        st: usize,
        name: &str,
        kind: StateKind,
        ttl: Option<Ttl>,
    ) -> Result<(), StateError> {
        if st >= 0xFFFF {
            return Err(StateError::Backend(format!(
                "state \"{name}\": an operator can declare at most 65,535 states"
            )));
        }
        self.kinds.push(kind);
        self.ttls
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(ttl.filter(Ttl::active));
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
        self.cache.evict(&mut self.batch);
        if self.seq_dirty {
            let mut row = META.to_vec();
            row.extend_from_slice(b"seq");
            self.batch.put(row, self.next_seq.to_be_bytes());
            self.seq_dirty = false;
        }
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
    fn flush_large_batch(&mut self) -> Result<(), StateError> {
        if self.batch.size_in_bytes() > 32 << 20 {
            self.commit()?;
        }
        Ok(())
    }

    /// Calls `f` with the suffix (after the key) and value of every row of `key` in `st`.
    fn rows(&self, prefix: &[u8], mut f: impl FnMut(&[u8], &[u8])) -> Result<(), StateError> {
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
            if !k.starts_with(prefix) {
                break;
            }
            f(&k[prefix.len()..], v);
            it.next();
        }
        it.status().map_err(|e| self.fail("a scan", e))
    }

    pub(crate) fn read_list(
        &self,
        st: usize,
        group: u32,
        key: &[u8],
        mut f: impl FnMut(&[u8]),
    ) -> Result<(), StateError> {
        let mut prefix = Vec::new();
        put_prefix(&mut prefix, st, group, key);
        self.rows(&prefix, |_, v| f(v))
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

    pub(crate) fn write_list<'a>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        clear: bool,
        append: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), StateError> {
        let len = self.prefix(st, group, key);
        if clear {
            self.delete_rows(len)?;
        }
        for e in append {
            self.key.truncate(len);
            self.key.extend_from_slice(&self.next_seq.to_be_bytes());
            self.next_seq += 1;
            self.seq_dirty = true;
            self.batch.put(&self.key, e);
        }
        self.flush_large_batch()
    }

    pub(crate) fn read_map(
        &self,
        st: usize,
        group: u32,
        key: &[u8],
        f: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), StateError> {
        let mut prefix = Vec::new();
        put_prefix(&mut prefix, st, group, key);
        self.rows(&prefix, f)
    }

    pub(crate) fn write_map<'a>(
        &mut self,
        st: usize,
        group: u32,
        key: &[u8],
        clear: bool,
        changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<(), StateError> {
        let len = self.prefix(st, group, key);
        if clear {
            self.delete_rows(len)?;
        }
        for (k, v) in changes {
            self.key.truncate(len);
            self.key.extend_from_slice(k);
            match v {
                Some(v) => self.batch.put(&self.key, v),
                None => self.batch.delete(&self.key),
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
            f(
                key,
                match kind {
                    StateKind::Value => Row::Value(v),
                    StateKind::List => Row::Element(v),
                    StateKind::Map => Row::Entry(suffix, v),
                },
            );
        })?;
        match bad {
            Some(_) => Err(self.fail("a scan", "a row key is damaged")),
            None => Ok(()),
        }
    }
}

/// The values of value states last read or written, in front of RocksDB, so that hot keys
/// cost no RocksDB read and reach RocksDB once per eviction or checkpoint rather than once
/// per batch. Two generations approximate least-recently-used eviction: a hit in the old
/// generation moves the entry to the young one; when the young one is full, the old one's
/// changed entries go to RocksDB and it is dropped, and the young one becomes old.
#[derive(Debug)]
struct ValueCache {
    young: FastMap<Key, Cached>,
    old: FastMap<Key, Cached>,
    /// Entries per generation.
    generation: usize,
}

/// A cached value (`None`: the key has none) and whether RocksDB still has an older one.
#[derive(Debug)]
struct Cached {
    value: Option<Vec<u8>>,
    dirty: bool,
}

impl ValueCache {
    fn new(entries: usize) -> Self {
        ValueCache {
            young: FastMap::default(),
            old: FastMap::default(),
            generation: (entries / 2).max(1),
        }
    }

    /// Whether `row` is cached; moves it into the young generation.
    fn promote(&mut self, row: &[u8]) -> bool {
        if self.young.contains_key(row) {
            return true;
        }
        match self.old.remove_entry(row) {
            Some((k, c)) => {
                self.young.insert(k, c);
                true
            }
            None => false,
        }
    }

    /// The cached value of `row`, which [`promote`](Self::promote) or
    /// [`put`](Self::put) put into the young generation.
    fn get(&self, row: &[u8]) -> Option<&[u8]> {
        self.young.get(row).and_then(|c| c.value.as_deref())
    }

    fn put(&mut self, row: &[u8], value: Option<&[u8]>, dirty: bool) {
        let c = match self.young.get_mut(row) {
            Some(c) => c,
            None => {
                let c = self.old.remove(row).unwrap_or(Cached {
                    value: None,
                    dirty: false,
                });
                self.young.entry(row.into()).or_insert(c)
            }
        };
        match (value, &mut c.value) {
            (Some(v), Some(old)) => {
                old.clear();
                old.extend_from_slice(v);
            }
            (v, slot) => *slot = v.map(<[u8]>::to_vec),
        }
        c.dirty |= dirty;
    }

    /// Drops `row` (a write past the cache makes it stale).
    fn forget(&mut self, row: &[u8]) {
        self.young.remove(row);
        self.old.remove(row);
    }

    /// When the young generation is full: writes the old one's changes to `batch`, drops it.
    fn evict(&mut self, batch: &mut WriteBatch) {
        if self.young.len() < self.generation {
            return;
        }
        let mut changed: Vec<(&[u8], Option<&[u8]>)> = self
            .old
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(row, c)| (&row[..], c.value.as_deref()))
            .collect();
        write_sorted(batch, &mut changed);
        self.old.clear();
        std::mem::swap(&mut self.young, &mut self.old);
    }

    /// Writes every change to `batch`; the entries stay cached.
    fn flush(&mut self, batch: &mut WriteBatch) {
        let mut changed: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        for (row, c) in self.young.iter_mut().chain(self.old.iter_mut()) {
            if std::mem::take(&mut c.dirty) {
                changed.push((row, c.value.as_deref()));
            }
        }
        write_sorted(batch, &mut changed);
    }
}

/// Puts `changes` into `batch` in key order: RocksDB's memtable (a skip list) inserts a
/// sorted run several times faster than the same keys in hash order.
fn write_sorted(batch: &mut WriteBatch, changes: &mut [(&[u8], Option<&[u8]>)]) {
    changes.sort_unstable_by_key(|(row, _)| *row);
    for (row, value) in changes.iter() {
        match value {
            Some(v) => batch.put(row, v),
            None => batch.delete(row),
        }
    }
}

/// How a database was opened.
#[derive(Debug, Clone)]
struct Setup {
    root: PathBuf,
    name: String,
    config: StateConfig,
    groups: Range<u32>,
    clock: Clock,
}

/// An SST file in the job's `shared/` checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedFile {
    pub name: String,
    pub size: u64,
}

/// Puts the immutable file `from` at `to`: a hard link where the file system allows, else a
/// synced copy renamed into place (so `to` is never half written).
pub(crate) fn link_or_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, to)
}

/// The keyed-state file of an incremental RocksDB checkpoint: the SST files it consists of
/// (in `shared/`), RocksDB's small files (MANIFEST, CURRENT, OPTIONS) inline, and the timers.
///
/// ```text
/// magic "WEIRRI01", u32 first group, u32 end group
/// u32 n, n × (bytes local name, bytes shared name, i64 size)
/// u32 n, n × (bytes name, bytes content)
/// u32 n, n × (u8 domain, i64 timestamp, bytes key)
/// ```
#[derive(Debug)]
pub(crate) struct Manifest<'a> {
    pub groups: Range<u32>,
    pub sst: Vec<(&'a [u8], SharedFile)>,
    pub inline: Vec<(&'a [u8], &'a [u8])>,
    pub timers: Vec<(TimeDomain, i64, &'a [u8])>,
}

const MANIFEST_MAGIC: &[u8; 8] = b"WEIRRI01";

impl<'a> Manifest<'a> {
    /// `None` if `bytes` is not a manifest (but a full snapshot).
    pub(crate) fn parse(bytes: &'a [u8]) -> Option<Result<Manifest<'a>, DecodeError>> {
        let body = bytes.strip_prefix(MANIFEST_MAGIC)?;
        Some(Self::read(&mut Reader::new(
            body,
            "RocksDB checkpoint manifest",
        )))
    }

    fn read(r: &mut Reader<'a>) -> Result<Manifest<'a>, DecodeError> {
        let groups = r.u32()?..r.u32()?;
        let mut sst = Vec::new();
        for _ in 0..r.count(16)? {
            let local = r.bytes()?;
            let name = String::from_utf8_lossy(r.bytes()?).into_owned();
            let size = r.i64()? as u64;
            sst.push((local, SharedFile { name, size }));
        }
        let mut inline = Vec::new();
        for _ in 0..r.count(8)? {
            inline.push((r.bytes()?, r.bytes()?));
        }
        let mut timers = Vec::new();
        for _ in 0..r.count(13)? {
            let domain = match r.u8()? {
                0 => TimeDomain::EventTime,
                _ => TimeDomain::ProcessingTime,
            };
            timers.push((domain, r.i64()?, r.bytes()?));
        }
        Ok(Manifest {
            groups,
            sst,
            inline,
            timers,
        })
    }
}

/// The shared files a keyed-state file refers to (none for a full snapshot).
pub(crate) fn shared_names(bytes: &[u8]) -> Vec<String> {
    match Manifest::parse(bytes) {
        Some(Ok(m)) => m.sst.into_iter().map(|(_, f)| f.name).collect(),
        _ => Vec::new(),
    }
}

/// Whether a file that starts with `head` is a manifest.
pub(crate) fn is_manifest(head: &[u8]) -> bool {
    head.starts_with(MANIFEST_MAGIC)
}

impl Rocks {
    /// Takes checkpoint `n`: flushes the memtable, hard-links the database's files into a
    /// staging directory, and writes the manifest of checkpoint `n` to `out`. SST files that
    /// a completed checkpoint already put into `shared/` are referred to, not uploaded again.
    pub(crate) fn checkpoint<'t>(
        &mut self,
        n: u64,
        timers: impl Iterator<Item = (TimeDomain, i64, &'t [u8])>,
        out: &mut Vec<u8>,
    ) -> Result<SharedFiles, StateError> {
        self.flush()?;
        let staging = self.setup.root.join(format!("{}.chk-{n}", self.instance));
        let _ = std::fs::remove_dir_all(&staging);
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(&staging))
            .map_err(|e| self.fail("a checkpoint", e))?;
        let staging = WorkDir(staging);
        let fail = |e: std::io::Error| db_error(&staging.0, "a checkpoint", e);
        let (mut sst, mut inline, mut new_files) = (Vec::new(), Vec::new(), Vec::new());
        let mut full_bytes = 0;
        for entry in std::fs::read_dir(&staging.0).map_err(fail)? {
            let entry = entry.map_err(fail)?;
            let local = entry.file_name().to_string_lossy().into_owned();
            if local.ends_with(".sst") {
                let size = entry.metadata().map_err(fail)?.len();
                let file = match self.confirmed.get(&local) {
                    Some(f) => f.clone(),
                    None => {
                        let f = SharedFile {
                            name: format!("{}-{local}", self.instance),
                            size,
                        };
                        new_files.push((staging.0.join(&local), f.name.clone(), size));
                        f
                    }
                };
                full_bytes += file.size;
                sst.push((local, file));
            } else {
                inline.push((local, std::fs::read(entry.path()).map_err(fail)?));
            }
        }
        out.extend_from_slice(MANIFEST_MAGIC);
        put_u32(out, self.setup.groups.start);
        put_u32(out, self.setup.groups.end);
        put_u32(out, sst.len() as u32);
        for (local, file) in &sst {
            put_bytes(out, local.as_bytes());
            put_bytes(out, file.name.as_bytes());
            put_i64(out, file.size as i64);
        }
        put_u32(out, inline.len() as u32);
        for (name, bytes) in &inline {
            put_bytes(out, name.as_bytes());
            put_bytes(out, bytes);
        }
        let at = out.len();
        put_u32(out, 0);
        let mut count = 0u32;
        for (domain, ts, key) in timers {
            put_u8(out, domain as u8);
            put_i64(out, ts);
            put_bytes(out, key);
            count += 1;
        }
        out[at..at + 4].copy_from_slice(&count.to_le_bytes());
        self.pending.insert(n, sst.into_iter().collect());
        Ok(SharedFiles {
            files: new_files,
            full_bytes,
            _keep: Box::new(staging),
        })
    }

    /// Checkpoint `n` completed: its files are in `shared/` for good, and later checkpoints
    /// refer to them instead of uploading them again.
    pub(crate) fn notify_complete(&mut self, n: u64) {
        if let Some(files) = self.pending.remove(&n) {
            self.confirmed = files;
        }
        self.pending.retain(|&id, _| id > n);
    }

    /// A database with the files of `manifest` (from `shared`), opened like this one.
    pub(crate) fn restored(
        &self,
        manifest: &Manifest<'_>,
        shared: &Path,
    ) -> Result<Rocks, StateError> {
        let setup = Setup {
            groups: manifest.groups.clone(),
            ..self.setup.clone()
        };
        Self::restore_with(setup, manifest, shared)
    }

    /// A database with the files of `manifest`, in the system's temporary directory, to read
    /// from when a subtask whose state is in memory restores a RocksDB checkpoint.
    pub(crate) fn restored_apart(
        manifest: &Manifest<'_>,
        shared: &Path,
        clock: &Clock,
    ) -> Result<Rocks, StateError> {
        let setup = Setup {
            root: std::env::temp_dir().join("weir-restore"),
            name: "restore".into(),
            config: StateConfig::default(),
            groups: manifest.groups.clone(),
            clock: clock.clone(),
        };
        Self::restore_with(setup, manifest, shared)
    }

    fn restore_with(
        setup: Setup,
        manifest: &Manifest<'_>,
        shared: &Path,
    ) -> Result<Rocks, StateError> {
        let mut db = Self::open_with(setup, |dir| {
            for (local, file) in &manifest.sst {
                let (from, to) = (shared.join(&file.name), dir.join(file_name(local)?));
                let size = std::fs::metadata(&from).map(|m| m.len());
                if size.as_ref().ok() != Some(&file.size) {
                    return Err(StateError::Backend(format!(
                        "checkpoint file {} is missing or damaged ({}, expected {} bytes); \
                         restore an older checkpoint or start with --fresh",
                        from.display(),
                        match size {
                            Ok(n) => format!("{n} bytes"),
                            Err(e) => e.to_string(),
                        },
                        file.size
                    )));
                }
                link_or_copy(&from, &to).map_err(|e| db_error(dir, "a restore", e))?;
            }
            for (name, bytes) in &manifest.inline {
                std::fs::write(dir.join(file_name(name)?), bytes)
                    .map_err(|e| db_error(dir, "a restore", e))?;
            }
            Ok(())
        })?;
        for (_, kind, ttl) in db.declarations()? {
            db.kinds.push(kind);
            db.ttls
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push(ttl.filter(Ttl::active));
        }
        let mut seq = META.to_vec();
        seq.extend_from_slice(b"seq");
        if let Some(v) = db.db.get(&seq).map_err(|e| db.fail("a restore", e))? {
            db.next_seq = v.as_slice().try_into().map_or(0, u64::from_be_bytes);
        }
        db.confirmed = manifest
            .sst
            .iter()
            .map(|(local, f)| (String::from_utf8_lossy(local).into_owned(), f.clone()))
            .collect();
        Ok(db)
    }

    /// The states declared in this database, in id order.
    pub(crate) fn declarations(&self) -> Result<Vec<(String, StateKind, Option<Ttl>)>, StateError> {
        let mut prefix = META.to_vec();
        prefix.extend_from_slice(b"state");
        let mut out = Vec::new();
        let mut bad = false;
        self.rows(&prefix, |_, v| match parse_declaration(v) {
            Some(d) => out.push(d),
            None => bad = true,
        })?;
        if bad {
            return Err(self.fail("a restore", "a state declaration is damaged"));
        }
        Ok(out)
    }
}

/// A file name from a manifest, refused if it could leave the directory.
fn file_name(name: &[u8]) -> Result<&str, StateError> {
    match std::str::from_utf8(name) {
        Ok(n) if !n.is_empty() && !n.contains('/') && n != ".." => Ok(n),
        _ => Err(StateError::Backend(format!(
            "a checkpoint manifest names a file {:?}, which is not a plain file name",
            String::from_utf8_lossy(name)
        ))),
    }
}

/// What [`Rocks::declare`] stored.
fn parse_declaration(v: &[u8]) -> Option<(String, StateKind, Option<Ttl>)> {
    let (&kind, rest) = v.split_first()?;
    let kind = match kind {
        0 => StateKind::Value,
        1 => StateKind::List,
        2 => StateKind::Map,
        _ => return None,
    };
    let (&has_ttl, rest) = rest.split_first()?;
    let (ttl, name) = if has_ttl == 1 {
        let (ms, rest) = rest.split_first_chunk::<8>()?;
        let (flags, name) = rest.split_first_chunk::<3>()?;
        let ttl = Ttl {
            ttl_ms: u64::from_le_bytes(*ms),
            update: match flags[0] {
                0 => TtlUpdate::OnCreateAndWrite,
                1 => TtlUpdate::OnReadAndWrite,
                _ => TtlUpdate::Disabled,
            },
            visibility: match flags[1] {
                0 => TtlVisibility::NeverReturnExpired,
                _ => TtlVisibility::ReturnExpiredIfNotCleanedUp,
            },
            event_time: flags[2] != 0,
        };
        (Some(ttl), name)
    } else {
        (None, rest)
    };
    Some((String::from_utf8(name.to_vec()).ok()?, kind, ttl))
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

/// `u16 group | u16 state | u32 key length | key`, appended to `buf`.
fn put_prefix(buf: &mut Vec<u8>, st: usize, group: u32, key: &[u8]) {
    buf.extend_from_slice(&(group as u16).to_be_bytes());
    buf.extend_from_slice(&(st as u16).to_be_bytes());
    buf.extend_from_slice(&(key.len() as u32).to_be_bytes());
    buf.extend_from_slice(key);
}

/// The smallest key above every key that starts with `prefix` (`None`: there is none).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The compaction filter that drops expired entries of states with a TTL.
fn ttl_filter(
    ttls: TtlTable,
    clock: Clock,
    watermark: Arc<AtomicI64>,
) -> impl FnMut(u32, &[u8], &[u8]) -> Decision + Send + 'static {
    move |_level, key, value| {
        if key.len() < 4 || key[..2] == META {
            return Decision::Keep;
        }
        let st = u16::from_be_bytes([key[2], key[3]]) as usize;
        let ttl = ttls
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(st)
            .copied()
            .flatten();
        let Some(ttl) = ttl else {
            return Decision::Keep;
        };
        let now = if ttl.event_time {
            watermark.load(Ordering::Relaxed)
        } else {
            clock.now_ms()
        };
        if ttl.expired(split(value).0, now) {
            Decision::Remove
        } else {
            Decision::Keep
        }
    }
}

/// The options of a subtask's database; see the README's "State backends" for why.
fn options(
    config: &StateConfig,
    filter: impl FnMut(u32, &[u8], &[u8]) -> Decision + Send + 'static,
) -> Options {
    let mut table = BlockBasedOptions::default();
    // Point lookups (value state) skip SST files without the key.
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(true);
    match Cache::new_lru_cache(config.block_cache.as_u64() as usize) {
        Ok(cache) => table.set_block_cache(&cache),
        Err(e) => tracing::warn!("RocksDB block cache not created ({e}); using the default"),
    }
    // Index and filter blocks stay in memory with their table rather than in the block
    // cache: in the cache, data blocks evicted them, and every lookup read filter blocks of
    // megabytes again (random updates over 10M keys ran at a few thousand per second).
    table.set_cache_index_and_filter_blocks(false);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_block_based_table_factory(&table);
    opts.set_write_buffer_size(config.write_buffer.as_u64() as usize);
    // A bloom filter over the memtable's keys too: a read of a key the memtable does not
    // hold (a new key, or one flushed long ago) skips its skip-list search.
    opts.set_memtable_prefix_bloom_ratio(0.1);
    opts.set_memtable_whole_key_filtering(true);
    opts.set_max_write_buffer_number(3);
    opts.set_compression_type(DBCompressionType::Lz4);
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_max_background_jobs(2);
    opts.set_compaction_filter("weir-ttl", filter);
    opts
}
