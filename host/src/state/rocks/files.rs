//! The files of incremental checkpoints: what a checkpoint of a subtask's database consists
//! of (its manifest; the SST files it shares with earlier checkpoints), and restoring a
//! database from them.

use std::ops::Range;
use std::path::Path;

use crate::clock::Clock;
use crate::operator::SharedFiles;
use crate::state::{StateConfig, StateError, StateKind, Ttl};
use weir_wire::{DecodeError, Reader, TimeDomain, put_bytes, put_i64, put_u8, put_u32};

use super::layout::{META, parse_declaration};
use super::{Rocks, Setup, WorkDir, db_error};

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

pub(super) const MANIFEST_MAGIC: &[u8; 8] = b"WEIRRI01";

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

    /// Forgets which files earlier checkpoints put into `shared/`: the next incremental
    /// checkpoint uploads all of its files.
    pub(crate) fn forget_uploads(&mut self) {
        self.confirmed.clear();
        self.pending.clear();
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
            db.register(kind, ttl);
        }
        // Weir before one row per list kept a list sequence number here.
        let mut seq = META.to_vec();
        seq.extend_from_slice(b"seq");
        if db
            .db
            .get(&seq)
            .map_err(|e| db.fail("a restore", e))?
            .is_some()
        {
            return Err(db.fail(
                "a restore",
                "the checkpoint keeps list state in the row layout of an older weir; restore \
                 the job from a savepoint instead (savepoints do not depend on the layout)",
            ));
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
pub(super) fn file_name(name: &[u8]) -> Result<&str, StateError> {
    match std::str::from_utf8(name) {
        Ok(n) if !n.is_empty() && !n.contains('/') && n != ".." => Ok(n),
        _ => Err(StateError::Backend(format!(
            "a checkpoint manifest names a file {:?}, which is not a plain file name",
            String::from_utf8_lossy(name)
        ))),
    }
}
