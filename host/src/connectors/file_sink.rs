//! The file sink: one line per record into part files of a directory, committed in two phases.
//!
//! Subtask `s` writes numbered part files, each through three stages whose names tell them
//! apart; a reader that skips hidden files sees only finished ones:
//!
//! | stage | file | becomes the next stage |
//! |---|---|---|
//! | in progress | `.part-<s>-<n>.inprogress` | when it rolls (synced first) |
//! | pending | `.part-<s>-<n>.pending` | when the checkpoint whose barrier covers it completes |
//! | finished | `part-<s>-<n>` | never changes again |
//!
//! A part file rolls when it reaches `rolling.max_part_size`, when it has been open for
//! `rolling.rollover_interval`, and at every checkpoint barrier unless
//! `rolling.on_checkpoint = false` (then the in-progress file's length is recorded instead, and a
//! restore cuts it back to that length and writes on). A checkpoint records the pending files
//! (and that length) as the sink's pre-commit; when it completes, the runtime renames them to
//! finished ([`FileSinkConfig::commit`]), and again before restoring from it (committing
//! twice is harmless). A restore then deletes the subtask's other in-progress and pending
//! files, whose records are replayed.
//! So what is finished is exactly the output of the records before the last completed
//! checkpoint, never more, and a crash loses none of it.
//!
//! Without checkpointing, or with `delivery = "at_least_once"`, a part file is finished when it
//! rolls.
//! A fresh start (no checkpoint to restore) deletes the subtask's files of earlier runs, and
//! subtask 0 those of subtasks beyond the parallelism, so the directory holds this run's output.
//!
//! A checkpoint records the directory its files are in. A job started from a savepoint of a
//! job whose sink wrote elsewhere commits the recorded pending files where they are, and starts
//! its own directory afresh, from a copy of the checkpointed part of the in-progress file: the
//! new directory holds exactly the output a run from the savepoint makes, and the old one is
//! left to the job it belongs to (which may still run from the same savepoint). A recorded
//! directory that no longer exists was moved with the job if the directory the spec names
//! holds its files; otherwise they are gone with it, and nothing is committed from it. A
//! checkpointed in-progress file must still start with the bytes recorded (length and
//! CRC-32), or it is refused: another run may have written a file of its name since.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::{ConnectorError, Delivery, LineFormat, Sink, SinkContext, resolve, resolved_note};
use crate::batch::Batch;

/// What to do when part files a checkpoint records are gone.
const AFRESH: &str = "start the job afresh, without its checkpoints (`weir run --fresh`; \
                      in `weir serve`, submit it again)";

/// Bytes buffered before a write reaches the file.
const WRITE_BUFFER: usize = 1 << 20;

/// `type = "file"`: part files of subtask `s` in the directory `path` (see the module
/// documentation), one line per record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The output directory; a relative path is resolved against the job spec's directory.
    pub path: PathBuf,
    /// What each line holds: `"value"` (the default) or `"key_value"` (key, tab, value).
    #[serde(default)]
    pub format: LineFormat,
    /// When a part file is closed and a new one started.
    #[serde(default)]
    pub rolling: RollingPolicy,
    /// `"at_least_once"`: a part file is finished when it rolls, without waiting for a
    /// checkpoint.
    #[serde(default)]
    pub delivery: Delivery,
}

/// When an in-progress part file rolls (Flink's `DefaultRollingPolicy` defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RollingPolicy {
    /// Roll once a part file is this large.
    pub max_part_size: ByteSize,
    /// Roll once a part file has been open this long.
    #[serde(with = "humantime_serde")]
    pub rollover_interval: Duration,
    /// Roll at every checkpoint barrier, so that each completed checkpoint makes its output
    /// visible at once.
    pub on_checkpoint: bool,
}

impl Default for RollingPolicy {
    fn default() -> Self {
        RollingPolicy {
            max_part_size: ByteSize::mib(128),
            rollover_interval: Duration::from_secs(60),
            on_checkpoint: true,
        }
    }
}

impl FileSinkConfig {
    pub(super) fn validate(&self, base_dir: &Path) -> Result<(), String> {
        if self.path.as_os_str().is_empty() {
            return Err("path is empty: set it to the directory the part files go into".into());
        }
        if self.delivery == Delivery::WriteAhead {
            return Err(
                "delivery = \"write_ahead\" is for targets without transactions; the file sink \
                 commits in two phases: use \"exactly_once\" (the default)"
                    .into(),
            );
        }
        if self.rolling.max_part_size.as_u64() == 0 || self.rolling.rollover_interval.is_zero() {
            return Err(
                "rolling: max_part_size and rollover_interval must be greater than 0".into(),
            );
        }
        let dir = resolve(base_dir, &self.path);
        // The nearest existing ancestor must be a directory for `create_dir_all` to succeed.
        let mut at = Some(dir.as_path());
        while let Some(p) = at {
            if let Ok(meta) = p.metadata() {
                if meta.is_dir() {
                    return Ok(());
                }
                let what = if p == dir {
                    format!("path \"{}\"", self.path.display())
                } else {
                    format!("path \"{}\": \"{}\"", self.path.display(), p.display())
                };
                return Err(format!(
                    "{what} exists and is not a directory{}; the file sink writes part files \
                     (part-<subtask>-<n>) into a directory, so point path at a directory or at a \
                     path that does not exist yet",
                    resolved_note(base_dir, &self.path)
                ));
            }
            at = p.parent();
        }
        Ok(())
    }

    /// Checks, leaving nothing behind, that the output directory can be created (or exists)
    /// and written into.
    pub(super) fn check(&self, base_dir: &Path) -> Result<(), ConnectorError> {
        let dir = resolve(base_dir, &self.path);
        super::check_writable(&dir).map_err(|e| {
            ConnectorError::file("create the output directory or write into it", &dir, e)
        })
    }

    /// The subtask `ctx` describes, restored from `restore` (what [`Sink::snapshot`]
    /// returned) when given.
    pub(super) fn build(
        &self,
        ctx: &SinkContext<'_>,
        restore: Option<&serde_json::Value>,
    ) -> Result<FileSink, ConnectorError> {
        let (subtask, parallelism) = (ctx.subtask, ctx.parallelism);
        let dir = self.create_dir(ctx.base_dir)?;
        let writer = Writer::claim(&dir, ctx)?;
        let mut sink = FileSink {
            _writer: writer,
            parts: Parts { dir, subtask },
            format: self.format,
            rolling: self.rolling,
            transactional: self.delivery.transactional(ctx),
            next: 0,
            current: None,
            pending: Vec::new(),
            line: Vec::new(),
        };
        match restore {
            None => sink.parts.remove_earlier_runs(parallelism)?,
            Some(state) => {
                // The runtime committed the pending files `state` records before the restore.
                let handle = Handle::parse(state, &sink.parts)?;
                let written_in = handle.written_in(&sink.parts);
                let mut in_progress = handle.in_progress;
                if written_in == sink.parts.dir {
                    sink.parts.remove_uncommitted(in_progress.map(|p| p.seq))?;
                } else {
                    // A savepoint of a job that wrote elsewhere: this directory starts afresh.
                    tracing::info!(
                        from = %written_in.display(),
                        "file sink subtask {subtask}: the checkpoint's part files are in another \
                         directory; continuing in {}",
                        sink.parts.dir.display()
                    );
                    sink.parts.remove_earlier_runs(parallelism)?;
                    if let Some(p) = in_progress {
                        let old = Parts {
                            dir: written_in,
                            subtask,
                        };
                        if !old.copy_checkpointed(p, &sink.parts, sink.transactional)? {
                            in_progress = None;
                        }
                    }
                }
                if let Some(p) = in_progress {
                    sink.current = sink.parts.reopen(p)?;
                }
                sink.parts.sync()?;
                sink.next = handle.next;
            }
        }
        tracing::debug!(dir = %sink.parts.dir.display(), "file sink subtask {subtask}/{parallelism} writing");
        Ok(sink)
    }

    /// Commits what a [`Sink::finish`] or [`Sink::snapshot`] of the subtask pre-committed;
    /// committing twice is harmless.
    pub(super) fn commit(
        &self,
        ctx: &SinkContext<'_>,
        state: &serde_json::Value,
    ) -> Result<(), ConnectorError> {
        let mut parts = Parts {
            dir: resolve(ctx.base_dir, &self.path),
            subtask: ctx.subtask,
        };
        let handle = Handle::parse(state, &parts)?;
        parts.dir = handle.written_in(&parts);
        if handle.pending.is_empty() {
            return Ok(());
        }
        if !parts.dir.exists() {
            // Another directory, gone with the part files: a savepoint's were committed when
            // it completed; a job starting from it writes elsewhere.
            tracing::warn!(
                "the checkpoint's pending part files were in {}, which is gone; not \
                 committing them",
                parts.dir.display()
            );
            return Ok(());
        }
        for seq in handle.pending {
            parts.finish(seq)?;
        }
        parts.sync()
    }

    /// Creates the output directory of a job whose spec is in `base_dir`; returns its path
    /// with links and `..` resolved, as checkpoints record it.
    fn create_dir(&self, base_dir: &Path) -> Result<PathBuf, ConnectorError> {
        let dir = resolve(base_dir, &self.path);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::canonicalize(&dir))
            .map_err(|e| ConnectorError::file("create the output directory", &dir, e))
    }
}

/// What the file sink records in a checkpoint: its pre-commit.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Handle {
    /// The directory the part files are in, links and `..` resolved (absent in checkpoints of
    /// earlier weir builds: the one the spec names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dir: Option<PathBuf>,
    /// The number of the next part file.
    next: u64,
    /// Pending part files to finish.
    pending: Vec<u64>,
    /// The in-progress part file and its length (when it does not roll on checkpoints).
    in_progress: Option<InProgress>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct InProgress {
    seq: u64,
    len: u64,
    /// The CRC-32 of those bytes (absent in checkpoints of earlier weir builds): a file of the
    /// same name that another run wrote since is not taken for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crc: Option<u32>,
}

impl Handle {
    fn parse(state: &serde_json::Value, parts: &Parts) -> Result<Handle, ConnectorError> {
        Handle::deserialize(state).map_err(|e| {
            ConnectorError::Invalid(format!(
                "the checkpointed state of the file sink for part files of subtask {} in {} is \
                 not valid: {e}",
                parts.subtask,
                parts.dir.display()
            ))
        })
    }

    fn value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a handle serializes")
    }

    /// The directory the handle's part files are in: the one recorded. If that is gone, the
    /// spec's (`configured`) when it holds them (moved with the job), else the recorded one
    /// still (gone with them).
    fn written_in(&self, configured: &Parts) -> PathBuf {
        let spec_dir =
            std::fs::canonicalize(&configured.dir).unwrap_or_else(|_| configured.dir.clone());
        let Some(recorded) = &self.dir else {
            return spec_dir;
        };
        if let Ok(real) = std::fs::canonicalize(recorded) {
            return real;
        }
        let stages = [Stage::InProgress, Stage::Pending, Stage::Finished];
        let files = (self.pending.iter().copied())
            .chain(self.in_progress.map(|p| p.seq))
            .flat_map(|seq| stages.map(|stage| configured.path(seq, stage)));
        let mut files = files.peekable();
        if files.peek().is_none() || files.any(|f| f.exists()) {
            spec_dir
        } else {
            recorded.clone()
        }
    }
}

/// A sink's claim on its output directory, held while any of its subtasks runs: two sinks
/// writing part files into one directory would delete and overwrite each other's (a fresh
/// start removes earlier runs' files), so a second is refused. Within the process by
/// [`WRITERS`], across processes by a lock on the file [`Writer::FILE`] in the directory.
#[derive(Debug)]
struct Writer {
    _lock: File,
}

/// The sink that writes into each output directory in this process: job name, the
/// directory its spec is in, its checkpoint directory (two jobs of a service with one name
/// and spec directory have their own), and sink name.
type WriterKey = (String, PathBuf, Option<PathBuf>, String);
static WRITERS: Mutex<BTreeMap<PathBuf, (WriterKey, Weak<Writer>)>> = Mutex::new(BTreeMap::new());

impl Writer {
    const FILE: &str = ".weir-writer";

    /// Claims `dir` for the sink `ctx` describes, or names the sink that has it.
    fn claim(dir: &Path, ctx: &SinkContext<'_>) -> Result<Arc<Writer>, ConnectorError> {
        let key = (
            ctx.job.to_string(),
            ctx.base_dir.to_path_buf(),
            ctx.checkpoints.map(Path::to_path_buf),
            ctx.name.to_string(),
        );
        let mut writers = WRITERS.lock().unwrap_or_else(|p| p.into_inner());
        let taken = |by: String| {
            ConnectorError::Invalid(format!(
                "{by} writes part files into {} already; give each file sink a directory of its \
                 own",
                dir.display()
            ))
        };
        if let Some((holder, writer)) = writers.get(dir)
            && let Some(writer) = writer.upgrade()
        {
            if *holder != key {
                let (job, _, _, sink) = holder;
                return Err(taken(format!("sink \"{sink}\" of job \"{job}\"")));
            }
            return Ok(writer);
        }
        let path = dir.join(Self::FILE);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| ConnectorError::file("create the lock file", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(taken("a job of another process".into()));
            }
            // A file system without locks: the claim holds within this process only.
            Err(std::fs::TryLockError::Error(e)) => {
                tracing::warn!("cannot lock {}: {e}", path.display());
            }
        }
        let writer = Arc::new(Writer { _lock: file });
        writers.retain(|_, (_, w)| w.strong_count() > 0);
        writers.insert(dir.to_path_buf(), (key, Arc::downgrade(&writer)));
        Ok(writer)
    }
}

/// A part file's stage, as its name tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    InProgress,
    Pending,
    Finished,
}

/// Parses `part-<s>-<n>`, `.part-<s>-<n>.inprogress` and `.part-<s>-<n>.pending`; also
/// `part-<s>`, the single part file of earlier weir versions (as finished, without a number).
fn parse_name(name: &str) -> Option<(usize, Option<u64>, Stage)> {
    let (rest, stage) = if let Some(hidden) = name.strip_prefix(".part-") {
        if let Some(r) = hidden.strip_suffix(".inprogress") {
            (r, Stage::InProgress)
        } else {
            (hidden.strip_suffix(".pending")?, Stage::Pending)
        }
    } else {
        (name.strip_prefix("part-")?, Stage::Finished)
    };
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match rest.split_once('-') {
        Some((s, n)) => Some((number(s)? as usize, Some(number(n)?), stage)),
        None if stage == Stage::Finished => Some((number(rest)? as usize, None, stage)),
        None => None,
    }
}

/// The part files of one subtask.
struct Parts {
    dir: PathBuf,
    subtask: usize,
}

impl Parts {
    fn path(&self, seq: u64, stage: Stage) -> PathBuf {
        let s = self.subtask;
        self.dir.join(match stage {
            Stage::InProgress => format!(".part-{s}-{seq}.inprogress"),
            Stage::Pending => format!(".part-{s}-{seq}.pending"),
            Stage::Finished => format!("part-{s}-{seq}"),
        })
    }

    /// Renames pending file `seq` to finished; an already finished one is fine.
    fn finish(&self, seq: u64) -> Result<(), ConnectorError> {
        let (pending, finished) = (
            self.path(seq, Stage::Pending),
            self.path(seq, Stage::Finished),
        );
        match std::fs::rename(&pending, &finished) {
            Ok(()) => Ok(()),
            Err(_) if finished.exists() => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(ConnectorError::Invalid(format!(
                    "pending part file {} is gone, but a checkpoint recorded it as \
                     pre-committed: it was deleted outside weir (or by another job writing into \
                     the same directory); restore it, or {AFRESH}",
                    pending.display()
                )))
            }
            Err(e) => Err(ConnectorError::file("commit", &pending, e)),
        }
    }

    /// Where in-progress file `p` is now, in whatever stage it has reached.
    fn checkpointed(&self, p: InProgress) -> Result<(PathBuf, Stage), ConnectorError> {
        let stages = [Stage::InProgress, Stage::Pending, Stage::Finished];
        (stages.into_iter())
            .map(|stage| (self.path(p.seq, stage), stage))
            .find(|(path, _)| path.exists())
            .ok_or_else(|| {
                ConnectorError::Invalid(format!(
                    "part file {} is gone, but a checkpoint recorded its first {} bytes as \
                     written: it was deleted outside weir (or by another job writing into the \
                     same directory); restore it, or {AFRESH}",
                    self.path(p.seq, Stage::InProgress).display(),
                    p.len
                ))
            })
    }

    /// Opens in-progress file `p.seq` again, cut back to its checkpointed length. It may have
    /// rolled since the checkpoint (when files roll by size or time): pending, it is in
    /// progress again; finished (at-least-once delivery), it stays as it is, and the records
    /// after the checkpoint come again in the next file (`None`).
    fn reopen(&self, p: InProgress) -> Result<Option<Part>, ConnectorError> {
        let path = self.path(p.seq, Stage::InProgress);
        match self.checkpointed(p)? {
            (_, Stage::InProgress) => {}
            (pending, Stage::Pending) => std::fs::rename(&pending, &path).map_err(|e| {
                ConnectorError::file("reopen the checkpointed part file", &pending, e)
            })?,
            (_, Stage::Finished) => return Ok(None),
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| ConnectorError::file("reopen the checkpointed part file", &path, e))?;
        let len = file
            .metadata()
            .map_err(|e| ConnectorError::file("read", &path, e))?
            .len();
        if len < p.len {
            return Err(ConnectorError::Invalid(format!(
                "part file {} has {len} bytes but the checkpoint recorded {}: it was truncated or \
                 replaced outside weir; restore its content, or {AFRESH}",
                path.display(),
                p.len
            )));
        }
        let crc = crc_of(&file, p.len).map_err(|e| ConnectorError::file("read", &path, e))?;
        if p.crc.is_some_and(|recorded| recorded != crc) {
            return Err(ConnectorError::Invalid(format!(
                "part file {} does not start with the {} bytes the checkpoint recorded: another \
                 run wrote a file of that name since (a fresh start into its directory, say); \
                 restore it, or {AFRESH}",
                path.display(),
                p.len
            )));
        }
        file.set_len(p.len)
            .and_then(|()| file.seek(std::io::SeekFrom::End(0)).map(drop))
            .map_err(|e| ConnectorError::file("cut back", &path, e))?;
        Ok(Some(Part {
            seq: p.seq,
            out: BufWriter::with_capacity(WRITE_BUFFER, file),
            path,
            len: p.len,
            crc: crc32fast::Hasher::new_with_initial_len(crc, p.len),
            opened: Instant::now(),
        }))
    }

    /// Copies the checkpointed start of in-progress file `p` (whatever stage it is in by now)
    /// into `to`'s in-progress file of that number, for [`Parts::reopen`] there; returns
    /// whether it did. A file that was finished after the checkpoint is not copied without a
    /// transaction (`transactional`): its records are delivered, and those after the
    /// checkpoint come again in the next file.
    fn copy_checkpointed(
        &self,
        p: InProgress,
        to: &Parts,
        transactional: bool,
    ) -> Result<bool, ConnectorError> {
        let (from, stage) = self.checkpointed(p)?;
        if stage == Stage::Finished && !transactional {
            return Ok(false);
        }
        let copy = to.path(p.seq, Stage::InProgress);
        let mut reader = File::open(&from)
            .map_err(|e| ConnectorError::file("read", &from, e))?
            .take(p.len);
        let mut writer =
            File::create(&copy).map_err(|e| ConnectorError::file("create", &copy, e))?;
        std::io::copy(&mut reader, &mut writer)
            .and_then(|_| writer.sync_all())
            .map_err(|e| ConnectorError::file("copy the checkpointed part file to", &copy, e))?;
        Ok(true)
    }

    /// Deletes the files that `keep` says nothing about.
    fn remove(
        &self,
        what: &str,
        keep: impl Fn(usize, Option<u64>, Stage) -> bool,
    ) -> Result<(), ConnectorError> {
        let list = |e| ConnectorError::file("list the output directory", &self.dir, e);
        for entry in std::fs::read_dir(&self.dir).map_err(list)? {
            let entry = entry.map_err(list)?;
            let Some((s, seq, stage)) = entry.file_name().to_str().and_then(parse_name) else {
                continue;
            };
            if !keep(s, seq, stage) && entry.file_type().is_ok_and(|t| t.is_file()) {
                let path = entry.path();
                tracing::debug!(path = %path.display(), "removing {what} part file");
                std::fs::remove_file(&path)
                    .map_err(|e| ConnectorError::file("remove the part file", &path, e))?;
            }
        }
        Ok(())
    }

    /// A fresh start: removes this subtask's files of earlier runs, and (subtask 0) those of
    /// subtasks `parallelism` and above.
    fn remove_earlier_runs(&self, parallelism: usize) -> Result<(), ConnectorError> {
        self.remove("an earlier run's", |s, _, _| {
            s != self.subtask && (self.subtask != 0 || s < parallelism)
        })
    }

    /// A restore: removes this subtask's in-progress and pending files other than the
    /// checkpoint's in-progress file `keep` (in progress, or pending if it rolled since),
    /// whose start the checkpoint covers.
    fn remove_uncommitted(&self, keep: Option<u64>) -> Result<(), ConnectorError> {
        self.remove("an uncommitted", |s, seq, stage| {
            s != self.subtask || stage == Stage::Finished || seq == keep
        })
    }

    /// Makes the renames in the directory durable.
    fn sync(&self) -> Result<(), ConnectorError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ConnectorError::file("sync", &self.dir, e))
    }
}

/// The CRC-32 of the first `len` bytes of `file`, read from its start.
fn crc_of(file: &File, len: u64) -> std::io::Result<u32> {
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    reader.seek(std::io::SeekFrom::Start(0))?;
    let mut reader = reader.take(len);
    let mut crc = crc32fast::Hasher::new();
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(crc.finalize());
        }
        crc.update(chunk);
        let n = chunk.len();
        reader.consume(n);
    }
}

/// The in-progress part file.
struct Part {
    seq: u64,
    out: BufWriter<File>,
    path: PathBuf,
    len: u64,
    /// Of the bytes written.
    crc: crc32fast::Hasher,
    opened: Instant,
}

impl Part {
    /// Writes out the buffer and syncs the file.
    fn sync(&mut self) -> Result<(), ConnectorError> {
        self.out
            .flush()
            .map_err(|e| ConnectorError::file("write to", &self.path, e))?;
        self.out
            .get_ref()
            .sync_all()
            .map_err(|e| ConnectorError::file("sync", &self.path, e))
    }
}

/// One subtask of the file sink.
pub(super) struct FileSink {
    /// This sink's claim on its directory.
    _writer: Arc<Writer>,
    parts: Parts,
    format: LineFormat,
    rolling: RollingPolicy,
    /// Whether finishing waits for checkpoints.
    transactional: bool,
    /// The number of the next part file.
    next: u64,
    current: Option<Part>,
    /// Pending part files: number, and the checkpoint whose barrier covered it (`None`: none
    /// yet).
    pending: Vec<(u64, Option<u64>)>,
    /// Reused for each line.
    line: Vec<u8>,
}

impl FileSink {
    fn open_next(&mut self) -> Result<Part, ConnectorError> {
        let seq = self.next;
        let path = self.parts.path(seq, Stage::InProgress);
        let file = File::create(&path)
            .map_err(|e| ConnectorError::file("create the part file", &path, e))?;
        self.next += 1;
        Ok(Part {
            seq,
            out: BufWriter::with_capacity(WRITE_BUFFER, file),
            path,
            len: 0,
            crc: crc32fast::Hasher::new(),
            opened: Instant::now(),
        })
    }

    /// Closes the in-progress file: pending when transactional, else finished.
    fn roll(&mut self) -> Result<(), ConnectorError> {
        let Some(mut part) = self.current.take() else {
            return Ok(());
        };
        part.sync()?;
        let stage = if self.transactional {
            Stage::Pending
        } else {
            Stage::Finished
        };
        let to = self.parts.path(part.seq, stage);
        std::fs::rename(&part.path, &to)
            .map_err(|e| ConnectorError::file("close the part file", &part.path, e))?;
        if self.transactional {
            self.pending.push((part.seq, None));
        }
        Ok(())
    }

    /// The pre-commit of everything written so far, covered by checkpoint `n`.
    fn pre_commit(&mut self, n: u64) -> Result<serde_json::Value, ConnectorError> {
        let in_progress = match &mut self.current {
            Some(part) => {
                part.sync()?;
                Some(InProgress {
                    seq: part.seq,
                    len: part.len,
                    crc: Some(part.crc.clone().finalize()),
                })
            }
            None => None,
        };
        for (_, covered) in &mut self.pending {
            covered.get_or_insert(n);
        }
        self.parts.sync()?;
        Ok(Handle {
            dir: Some(self.parts.dir.clone()),
            next: self.next,
            pending: self.pending.iter().map(|&(seq, _)| seq).collect(),
            in_progress,
        }
        .value())
    }
}

impl Sink for FileSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        if self
            .current
            .as_ref()
            .is_some_and(|p| p.opened.elapsed() >= self.rolling.rollover_interval)
        {
            self.roll()?;
        }
        for rec in batch.iter() {
            if self.current.is_none() {
                self.current = Some(self.open_next()?);
            }
            let part = self.current.as_mut().expect("opened above");
            self.line.clear();
            self.format.write(&mut self.line, &rec);
            part.out
                .write_all(&self.line)
                .map_err(|e| ConnectorError::file("write to", &part.path, e))?;
            part.len += self.line.len() as u64;
            part.crc.update(&self.line);
            if part.len >= self.rolling.max_part_size.as_u64() {
                self.roll()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        match &mut self.current {
            Some(part) => part.sync(),
            None => Ok(()),
        }
    }

    fn snapshot(&mut self, checkpoint: u64) -> Result<serde_json::Value, ConnectorError> {
        if self.rolling.on_checkpoint {
            self.roll()?;
        }
        self.pre_commit(checkpoint)
    }

    fn notify_complete(&mut self, checkpoint: u64) -> Result<(), ConnectorError> {
        let due = |&(_, covered): &(u64, Option<u64>)| covered.is_some_and(|c| c <= checkpoint);
        self.pending.retain(|p| !due(p));
        Ok(())
    }

    fn finish(&mut self) -> Result<serde_json::Value, ConnectorError> {
        self.roll()?;
        if !self.transactional {
            return self.parts.sync().map(|()| serde_json::Value::Null);
        }
        // Covered by the job's end, which a final checkpoint records before the commit.
        self.pre_commit(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::SinkConfig;
    use weir_wire::Kind;

    fn batch(values: &[&str]) -> Batch {
        let mut b = Batch::default();
        for v in values {
            b.push_with(Kind::Insert, Some(b"k"), None, |buf| {
                buf.extend_from_slice(v.as_bytes())
            });
        }
        b
    }

    fn config(path: &str, extra: &str) -> SinkConfig {
        toml::from_str(&format!("type = \"file\"\npath = \"{path}\"\n{extra}")).unwrap()
    }

    /// Subtask 0 of 1 of a checkpointed job.
    fn ctx(base_dir: &Path) -> SinkContext<'_> {
        SinkContext {
            job: "job",
            name: "out",
            base_dir,
            subtask: 0,
            parallelism: 1,
            checkpoints: Some(Path::new("chk")),
        }
    }

    /// The directory's file names, sorted, but for the writer's lock.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != Writer::FILE)
            .collect();
        names.sort();
        names
    }

    fn read(dir: &Path, name: &str) -> String {
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn names_tell_the_stage() {
        assert_eq!(
            parse_name("part-3-17"),
            Some((3, Some(17), Stage::Finished))
        );
        assert_eq!(
            parse_name(".part-0-2.inprogress"),
            Some((0, Some(2), Stage::InProgress))
        );
        assert_eq!(
            parse_name(".part-1-0.pending"),
            Some((1, Some(0), Stage::Pending))
        );
        assert_eq!(parse_name("part-2"), Some((2, None, Stage::Finished)));
        for other in [
            "part-x",
            "part-1-",
            ".part-1.pending",
            "data.txt",
            "part--1",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn without_checkpoints_each_subtask_finishes_its_part_file_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out/nested", "format = \"key_value\"");
        cfg.validate(dir.path()).unwrap();
        let mut sinks: Vec<_> = (0..2)
            .map(|s| cfg.build(dir.path(), s, 2).unwrap())
            .collect();
        sinks[0].write(&batch(&["a", "b"])).unwrap();
        sinks[1].write(&batch(&["c"])).unwrap();
        let out = dir.path().join("out/nested");
        assert_eq!(
            names(&out),
            [".part-0-0.inprogress", ".part-1-0.inprogress"]
        );
        for s in &mut sinks {
            assert_eq!(s.finish().unwrap(), serde_json::Value::Null);
        }
        assert_eq!(names(&out), ["part-0-0", "part-1-0"]);
        assert_eq!(read(&out, "part-0-0"), "k\ta\nk\tb\n");
        assert_eq!(read(&out, "part-1-0"), "k\tc\n");
    }

    #[test]
    fn files_roll_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out", "rolling = { max_part_size = 4 }");
        let mut sink = cfg.build(dir.path(), 0, 1).unwrap();
        sink.write(&batch(&["a", "b", "c", "d", "e"])).unwrap();
        sink.finish().unwrap();
        let out = dir.path().join("out");
        assert_eq!(names(&out), ["part-0-0", "part-0-1", "part-0-2"]);
        let all: String = ["part-0-0", "part-0-1", "part-0-2"]
            .iter()
            .map(|n| read(&out, n))
            .collect();
        assert_eq!(all, "a\nb\nc\nd\ne\n");
    }

    #[test]
    fn a_new_run_removes_earlier_runs_and_stale_subtasks() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out", "");
        for s in 0..3 {
            let mut sink = cfg.build(dir.path(), s, 3).unwrap();
            sink.write(&batch(&["old", "older"])).unwrap();
            sink.finish().unwrap();
        }
        let out = dir.path().join("out");
        std::fs::write(out.join("part-x"), "not ours").unwrap();
        std::fs::write(out.join("part-0"), "an earlier version's").unwrap();
        let mut sink = cfg.build(dir.path(), 0, 1).unwrap();
        sink.write(&batch(&["new"])).unwrap();
        sink.finish().unwrap();
        assert_eq!(names(&out), ["part-0-0", "part-x"]);
        assert_eq!(read(&out, "part-0-0"), "new\n");
    }

    /// Checkpoints 1 and 2, then a crash after checkpoint 2's barrier but before its
    /// completion reached the sink, and records after it.
    #[test]
    fn only_committed_checkpoints_are_visible_and_a_restore_removes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cfg = config("out", "");
        let mut sink = cfg.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let one = sink.snapshot(1).unwrap();
        assert_eq!(names(&out), [".part-0-0.pending"], "pending until complete");
        sink.write(&batch(&["c"])).unwrap();
        cfg.commit(&ctx(dir.path()), &one).unwrap();
        sink.notify_complete(1).unwrap();
        assert_eq!(names(&out), [".part-0-1.inprogress", "part-0-0"]);
        let state = sink.snapshot(2).unwrap();
        sink.write(&batch(&["after the checkpoint"])).unwrap();
        drop(sink);
        assert_eq!(
            names(&out),
            [".part-0-1.pending", ".part-0-2.inprogress", "part-0-0"]
        );

        // A crash before checkpoint 2's completion reached the sink: the restore commits it.
        cfg.commit(&ctx(dir.path()), &state).unwrap();
        let mut sink = cfg.restore(&ctx(dir.path()), Some(&state)).unwrap();
        assert_eq!(names(&out), ["part-0-0", "part-0-1"]);
        sink.write(&batch(&["d"])).unwrap();
        let end = sink.finish().unwrap();
        assert_eq!(names(&out), [".part-0-2.pending", "part-0-0", "part-0-1"]);
        cfg.commit(&ctx(dir.path()), &end).unwrap();
        cfg.commit(&ctx(dir.path()), &end).unwrap();
        let all: String = ["part-0-0", "part-0-1", "part-0-2"]
            .iter()
            .map(|n| read(&out, n))
            .collect();
        assert_eq!(all, "a\nb\nc\nd\n");

        std::fs::remove_file(out.join("part-0-2")).unwrap();
        let err = cfg.commit(&ctx(dir.path()), &end).unwrap_err().to_string();
        assert!(err.contains("deleted outside weir"), "{err}");
    }

    #[test]
    fn without_rolling_on_checkpoints_a_restore_cuts_the_in_progress_file_back() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cfg = config("out", "rolling = { on_checkpoint = false }");
        let mut sink = cfg.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let state = sink.snapshot(1).unwrap();
        sink.notify_complete(1).unwrap();
        assert_eq!(names(&out), [".part-0-0.inprogress"], "nothing rolled yet");
        sink.write(&batch(&["after the checkpoint"])).unwrap();
        sink.flush().unwrap();
        drop(sink);
        let mut sink = cfg.restore(&ctx(dir.path()), Some(&state)).unwrap();
        sink.write(&batch(&["c"])).unwrap();
        let end = sink.finish().unwrap();
        cfg.commit(&ctx(dir.path()), &end).unwrap();
        assert_eq!(names(&out), ["part-0-0"]);
        assert_eq!(read(&out, "part-0-0"), "a\nb\nc\n");

        std::fs::write(out.join(".part-0-0.inprogress"), "a").unwrap();
        let err = cfg
            .restore(&ctx(dir.path()), Some(&state))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("truncated or replaced outside weir"), "{err}");

        // Gone, in every stage: a restart cannot bring it back.
        for name in [".part-0-0.inprogress", "part-0-0"] {
            std::fs::remove_file(out.join(name)).unwrap();
        }
        let err = cfg.restore(&ctx(dir.path()), Some(&state)).err().unwrap();
        assert!(err.is_permanent(), "{err}");
        assert!(err.to_string().contains("deleted outside weir"), "{err}");
    }

    /// Files roll by size, not on checkpoints: the checkpoint's in-progress file rolled
    /// after it, then a crash came before the next checkpoint.
    #[test]
    fn a_restore_reopens_the_checkpoints_file_that_rolled_after_it() {
        for (delivery, expected) in [
            ("exactly_once", "a\nb\nc\n"),
            // The records after the checkpoint stay in the finished file and come again.
            ("at_least_once", "a\nb\nafter\nc\n"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("out");
            let extra = format!(
                "rolling = {{ on_checkpoint = false, max_part_size = 8 }}\ndelivery = \"{delivery}\""
            );
            let cfg = config("out", &extra);
            let mut sink = cfg.restore(&ctx(dir.path()), None).unwrap();
            sink.write(&batch(&["a", "b"])).unwrap();
            let state = sink.snapshot(1).unwrap();
            sink.notify_complete(1).unwrap();
            sink.write(&batch(&["after"])).unwrap();
            drop(sink);
            assert!(!names(&out).contains(&".part-0-0.inprogress".to_owned()));

            cfg.commit(&ctx(dir.path()), &state).unwrap();
            let mut sink = cfg.restore(&ctx(dir.path()), Some(&state)).unwrap();
            sink.write(&batch(&["c"])).unwrap();
            let end = sink.finish().unwrap();
            cfg.commit(&ctx(dir.path()), &end).unwrap();
            let all: String = names(&out).iter().map(|n| read(&out, n)).collect();
            assert_eq!(all, expected, "{delivery}: {:?}", names(&out));
        }
    }

    /// A savepoint of a job writing into `a`, started by a job writing into `b`: the pending
    /// files are committed in `a`, `b` starts from the in-progress file's checkpointed start,
    /// and a crash before `b`'s first checkpoint starts `b` over from the savepoint.
    #[test]
    fn a_start_from_a_savepoint_of_a_sink_writing_elsewhere_continues_in_its_own_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let rolling = "rolling = { on_checkpoint = false, max_part_size = 6 }";
        let (cfg_a, cfg_b) = (config("a", rolling), config("b", rolling));
        let mut sink = cfg_a.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["a1", "a2", "a3"])).unwrap();
        let savepoint = sink.snapshot(1).unwrap();
        sink.write(&batch(&["after the savepoint"])).unwrap();
        sink.flush().unwrap();
        drop(sink);
        // The in-progress file rolled after the savepoint.
        assert_eq!(names(&a), [".part-0-0.pending", ".part-0-1.pending"]);
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("part-0-7"), "an earlier run's").unwrap();

        for attempt in 0..2 {
            cfg_b.commit(&ctx(dir.path()), &savepoint).unwrap();
            let mut sink = cfg_b.restore(&ctx(dir.path()), Some(&savepoint)).unwrap();
            assert_eq!(names(&a), [".part-0-1.pending", "part-0-0"], "{attempt}");
            assert_eq!(read(&a, "part-0-0"), "a1\na2\n");
            sink.write(&batch(&["b1"])).unwrap();
            if attempt == 0 {
                sink.flush().unwrap();
                continue; // a crash before b's first checkpoint
            }
            let end = sink.finish().unwrap();
            cfg_b.commit(&ctx(dir.path()), &end).unwrap();
        }
        assert_eq!(names(&b), ["part-0-1"]);
        assert_eq!(read(&b, "part-0-1"), "a3\nb1\n");
        assert_eq!(read(&a, ".part-0-1.pending"), "a3\nafter the savepoint\n");
        // b's own checkpoints record b.
        let mut sink = cfg_b.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["x"])).unwrap();
        let own = sink.snapshot(1).unwrap();
        assert_eq!(
            own["dir"].as_str().map(PathBuf::from),
            Some(std::fs::canonicalize(&b).unwrap())
        );
    }

    /// The job's directory moved with its checkpoints: the recorded one is gone, and the part
    /// files are where the spec says.
    #[test]
    fn a_checkpoint_whose_directory_moved_commits_in_the_spec_s_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        let cfg = config("out", "");
        let mut sink = cfg.restore(&ctx(&old), None).unwrap();
        sink.write(&batch(&["a"])).unwrap();
        let state = sink.snapshot(1).unwrap();
        sink.write(&batch(&["after"])).unwrap();
        sink.flush().unwrap();
        drop(sink);
        std::fs::rename(&old, &new).unwrap();

        cfg.commit(&ctx(&new), &state).unwrap();
        let mut sink = cfg.restore(&ctx(&new), Some(&state)).unwrap();
        sink.write(&batch(&["b"])).unwrap();
        let end = sink.finish().unwrap();
        cfg.commit(&ctx(&new), &end).unwrap();
        let out = new.join("out");
        assert_eq!(names(&out), ["part-0-0", "part-0-1"]);
        assert_eq!(read(&out, "part-0-0") + &read(&out, "part-0-1"), "a\nb\n");
    }

    /// The savepoint's in-progress file was replaced by a fresh run into its directory
    /// since: neither a start into another directory nor one into that one takes the new
    /// file's bytes for the savepoint's.
    #[test]
    fn a_part_file_another_run_wrote_since_the_checkpoint_is_not_taken_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let rolling = "rolling = { on_checkpoint = false }";
        let (cfg_a, cfg_b) = (config("a", rolling), config("b", rolling));
        let mut sink = cfg_a.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["one", "two"])).unwrap();
        let savepoint = sink.snapshot(1).unwrap();
        drop(sink);
        let mut fresh = cfg_a.restore(&ctx(dir.path()), None).unwrap();
        fresh.write(&batch(&["six", "ten", "more"])).unwrap();
        fresh.flush().unwrap();
        drop(fresh);
        for cfg in [&cfg_b, &cfg_a] {
            cfg.commit(&ctx(dir.path()), &savepoint).unwrap();
            let err = cfg
                .restore(&ctx(dir.path()), Some(&savepoint))
                .err()
                .unwrap();
            assert!(err.is_permanent(), "{err}");
            assert!(err.to_string().contains("another run wrote"), "{err}");
        }
        let a = dir.path().join("a");
        assert_eq!(
            read(&a, ".part-0-0.inprogress"),
            "six\nten\nmore\n",
            "left as it was"
        );
    }

    /// The savepoint's job's directory was deleted: its pending files were committed when the
    /// savepoint completed, and a job starting from it writes into a directory of its own.
    #[test]
    fn a_savepoint_whose_sink_directory_is_gone_starts_another_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg_a, cfg_b) = (config("a", ""), config("b", ""));
        let mut sink = cfg_a.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["a"])).unwrap();
        let savepoint = sink.snapshot(1).unwrap();
        cfg_a.commit(&ctx(dir.path()), &savepoint).unwrap();
        drop(sink);
        std::fs::remove_dir_all(dir.path().join("a")).unwrap();

        cfg_b.commit(&ctx(dir.path()), &savepoint).unwrap();
        let mut sink = cfg_b.restore(&ctx(dir.path()), Some(&savepoint)).unwrap();
        sink.write(&batch(&["b"])).unwrap();
        let end = sink.finish().unwrap();
        cfg_b.commit(&ctx(dir.path()), &end).unwrap();
        let b = dir.path().join("b");
        assert_eq!(names(&b), ["part-0-1"]);
        assert_eq!(read(&b, "part-0-1"), "b\n");
    }

    #[test]
    fn a_directory_another_sink_writes_into_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out", "");
        let first = cfg.restore(&ctx(dir.path()), None).unwrap();
        // Its other subtasks, and its next attempt, share the claim.
        let again = cfg.restore(&ctx(dir.path()), None).unwrap();
        let other = SinkContext {
            name: "other",
            ..ctx(dir.path())
        };
        let err = cfg.restore(&other, None).err().unwrap();
        assert!(err.is_permanent(), "{err}");
        let err = err.to_string();
        assert!(err.contains("sink \"out\" of job \"job\" writes"), "{err}");
        assert!(err.contains("a directory of its own"), "{err}");
        // A job of the same name and spec, submitted twice to a service: its own checkpoints.
        let twin = SinkContext {
            checkpoints: Some(Path::new("jobs/2/checkpoints")),
            ..ctx(dir.path())
        };
        assert!(cfg.restore(&twin, None).is_err());
        drop((first, again));
        drop(cfg.restore(&other, None).unwrap());

        // Another process holds the lock.
        let lock = File::open(dir.path().join("out").join(Writer::FILE)).unwrap();
        lock.try_lock().unwrap();
        let err = cfg.restore(&ctx(dir.path()), None).err().unwrap();
        assert!(
            err.to_string().contains("a job of another process"),
            "{err}"
        );
        drop(lock);
        cfg.restore(&ctx(dir.path()), None).unwrap();
    }

    #[test]
    fn at_least_once_delivery_finishes_files_when_they_roll() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out", "delivery = \"at_least_once\"");
        let mut sink = cfg.restore(&ctx(dir.path()), None).unwrap();
        sink.write(&batch(&["a"])).unwrap();
        assert_eq!(sink.snapshot(1).unwrap()["pending"], serde_json::json!([]));
        assert_eq!(names(&dir.path().join("out")), ["part-0-0"]);
    }

    #[test]
    fn a_file_in_the_way_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("taken"), "").unwrap();

        let err = config("taken", "").validate(dir.path()).unwrap_err();
        assert!(
            err.contains("path \"taken\" exists and is not a directory"),
            "{err}"
        );
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        let err = config("taken/sub", "").validate(dir.path()).unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");
        let err = config("out", "delivery = \"write_ahead\"")
            .validate(dir.path())
            .unwrap_err();
        assert!(err.contains("exactly_once"), "{err}");

        let err = config("taken/sub", "")
            .build(dir.path(), 0, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("cannot create the output directory"), "{err}");
        assert!(err.contains("taken/sub"), "{err}");
    }
}
