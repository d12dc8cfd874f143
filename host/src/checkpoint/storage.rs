//! Where checkpoints live and how they are written, verified, found and deleted.
//!
//! ```text
//! <dir>/<job>/chk-<n>/<vertex>-<subtask>   keyed state of one operator subtask
//! <dir>/<job>/chk-<n>/_metadata           JSON, written last and atomically
//! <dir>/<job>/history.json                the last checkpoints' id, duration, size, ...
//! <dir>/<job>/shared/                     SST files of incremental RocksDB checkpoints
//! <dir>/<job>/finished.json               the job ran to its end (then no chk-<n> is left)
//! <dir>/<job>/origin                      the savepoint or checkpoint elsewhere it started from
//! <dir>/<job>/.lock                       held by the process running the job
//! ```
//!
//! An incremental checkpoint's keyed-state file is a manifest naming the files of `shared/`
//! it consists of; consecutive checkpoints share the files that did not change. A shared
//! file is deleted once no checkpoint directory left refers to it (see
//! [`CheckpointStore::collect_shared`]).
//!
//! A checkpoint exists once its `_metadata` exists: the file is written to a temporary name,
//! synced, renamed and the directory synced, after every state file it names was synced.
//! The metadata records each state file's size and CRC-32, and ends with its own CRC-32, so
//! a truncated or bit-flipped file is detected before anything is restored from it.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::operator::{SharedFiles, Snapshot};
use crate::role::Role;
use crate::state::{link_or_copy, rocks};

/// The metadata format this host writes; it reads it and format 1, whose `_metadata` had no
/// checksum of its own.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The last member of a `_metadata` object: the CRC-32 of what comes before it (see
/// [`encode_metadata`]).
const CRC_MEMBER: &[u8] = b",\n  \"crc32\": ";
const METADATA: &str = "_metadata";
const HISTORY: &str = "history.json";
const FINISHED: &str = "finished.json";
const ORIGIN: &str = "origin";
pub(crate) const SHARED: &str = "shared";
/// Entries kept in `history.json`.
const HISTORY_LEN: usize = 100;

/// A checkpoint problem, naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The checkpoint directory cannot be created or written.
    #[error(
        "checkpoint directory {path} is not writable ({cause}); set [checkpoint] dir in the job spec to a writable directory"
    )]
    NotWritable {
        /// The file or directory involved.
        path: PathBuf,
        /// Why it failed.
        cause: std::io::Error,
    },
    /// A savepoint cannot go into the directory named for it.
    #[error("savepoint directory {path}: {cause}; name another savepoint directory")]
    SavepointTarget {
        /// The directory named.
        path: PathBuf,
        /// Why it cannot.
        cause: std::io::Error,
    },
    /// Reading or writing a checkpoint file failed.
    #[error("cannot {action} {path}: {cause}")]
    Io {
        /// What was being done, as a verb phrase.
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// Why it failed.
        cause: std::io::Error,
    },
    /// A checkpoint is incomplete or damaged.
    #[error("checkpoint {path} is damaged: {reason}")]
    Corrupt {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The path given to restore from holds no checkpoint or savepoint.
    #[error("{path} is no checkpoint or savepoint: {reason}")]
    NotACheckpoint {
        /// The directory named.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// A checkpoint cannot be restored into this job.
    #[error("checkpoint {path} does not fit this job: {reason}")]
    Incompatible {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Checkpoints of the job completed, so its sinks committed their output, but none can
    /// be restored: starting over from the beginning would write that output again.
    #[error(
        "none of the job's completed checkpoints in {path} can be restored ({}); fix that, or \
         start the job over from the beginning of its input (`weir run --fresh`), which writes \
         its output again",
        reasons.join("; ")
    )]
    NoneRestorable {
        /// The job's checkpoint directory.
        path: PathBuf,
        /// Why each was refused.
        reasons: Vec<String>,
    },
    /// The newest completed checkpoint cannot be restored, and a sink committed its output
    /// where an older one's restore would write it again.
    #[error(
        "the job's newest checkpoint {path} cannot be restored ({reason}), and sink \"{sink}\" \
         committed its output for good: an older checkpoint would write that output again. Fix \
         it, or accept that: `weir run --from-checkpoint <an older chk-N>` (or `--fresh` to \
         start over)"
    )]
    NewestNotRestorable {
        /// The newest completed checkpoint.
        path: PathBuf,
        /// Why it cannot be restored.
        reason: String,
        /// The sink that cannot take back its committed output.
        sink: String,
    },
}

fn io(action: &'static str, path: &Path, cause: std::io::Error) -> CheckpointError {
    CheckpointError::Io {
        action,
        path: path.to_path_buf(),
        cause,
    }
}

/// A state file of a checkpoint, as the metadata records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateFile {
    /// File name inside the checkpoint directory.
    pub file: String,
    pub size: u64,
    pub crc32: u32,
    /// The key groups it holds, `[start, end)`.
    pub key_groups: (u32, u32),
}

/// What one subtask of one vertex put into a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum SubtaskState {
    /// The subtask had finished: on restore it ends at once.
    Finished,
    /// A source's position in its input.
    Source {
        /// See the variant.
        position: serde_json::Value,
    },
    /// An operator's keyed state and timers, its non-keyed operator state (`None`: it had
    /// none) and its watermark (`None`: none had reached it).
    Operator {
        state: Option<StateFile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        operator_state: Option<StateFile>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        watermark: Option<i64>,
    },
    /// What a sink needs to restore (its pre-committed output).
    Sink {
        /// See the variant.
        state: serde_json::Value,
    },
    /// A sink that had finished, with the pre-commit of its last output, which a restore
    /// commits.
    FinishedSink {
        /// See the variant.
        commit: serde_json::Value,
    },
}

impl SubtaskState {
    /// Whether this is a sink's state with output to commit or go on from (a print or
    /// discard sink has none).
    pub(crate) fn holds_sink_output(&self) -> bool {
        match self {
            SubtaskState::Sink { state } => !state.is_null(),
            SubtaskState::FinishedSink { commit } => !commit.is_null(),
            _ => false,
        }
    }
}

/// One vertex in a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VertexMeta {
    pub name: String,
    pub role: Role,
    pub uid: Option<String>,
    pub parallelism: u32,
    /// By subtask index.
    pub subtasks: Vec<SubtaskState>,
    /// Which code wrote the state of a WebAssembly operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeVersion>,
    /// The records in flight to the vertex that an unaligned checkpoint stored, by subtask
    /// that recorded them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<InFlightFile>,
}

/// The records in flight to one subtask of a vertex at an unaligned checkpoint: what its
/// inputs delivered after its snapshot and before their barriers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InFlightFile {
    pub subtask: u32,
    pub records: u64,
    pub file: StateFile,
}

/// A version of an operator: its component and its config. A checkpoint (and a savepoint)
/// records the version of each WebAssembly operator that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeVersion {
    /// The SHA-256 of the component, hex.
    pub component: String,
    /// The operator's `config`, as JSON.
    pub config: String,
}

/// The `_metadata` file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Metadata {
    pub format: u32,
    pub weir_version: String,
    pub job: String,
    pub checkpoint: u64,
    /// Unix time in milliseconds when the checkpoint completed.
    pub timestamp_ms: u64,
    pub max_parallelism: u32,
    pub vertices: Vec<VertexMeta>,
    /// A savepoint: self-contained, in the canonical format, restorable into any job it fits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub savepoint: bool,
}

impl Metadata {
    pub(crate) fn vertex(&self, name: &str) -> Option<&VertexMeta> {
        self.vertices.iter().find(|v| v.name == name)
    }

    /// Every sink pre-commit the checkpoint records, of running and of finished sinks:
    /// `(vertex name, subtask, pre-commit)`.
    pub(crate) fn pre_commits(&self) -> impl Iterator<Item = (&str, u32, &serde_json::Value)> {
        self.vertices.iter().flat_map(|v| {
            v.subtasks
                .iter()
                .enumerate()
                .filter_map(move |(s, sub)| match sub {
                    SubtaskState::Sink { state: commit }
                    | SubtaskState::FinishedSink { commit } => {
                        Some((v.name.as_str(), s as u32, commit))
                    }
                    _ => None,
                })
        })
    }
}

/// How a checkpoint of the history ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointOutcome {
    /// Its metadata was written: it can be restored.
    Completed,
    /// It was given up; `reason` says why.
    Aborted,
}

/// One line of the checkpoint history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The checkpoint id.
    pub id: u64,
    /// Whether it completed.
    pub status: CheckpointOutcome,
    /// Why it was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unix time in milliseconds of the trigger.
    pub triggered_ms: u64,
    /// From trigger to completion (or abort).
    pub duration_ms: u64,
    /// Bytes written for this checkpoint: with incremental RocksDB checkpoints, only the
    /// files earlier checkpoints did not share.
    pub size_bytes: u64,
    /// Bytes of the state the checkpoint consists of (Flink's "full checkpoint data size").
    #[serde(default)]
    pub full_size_bytes: u64,
    /// The longest barrier alignment of any task.
    pub alignment_ms: u64,
    /// Bytes of records in flight an unaligned checkpoint stored (included in `size_bytes`).
    #[serde(default)]
    pub in_flight_bytes: u64,
    /// Per vertex: what it wrote and how long its snapshots took.
    pub operators: Vec<OperatorStats>,
}

/// What one vertex contributed to a checkpoint, summed over its subtasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorStats {
    /// The vertex name.
    pub vertex: String,
    /// Bytes written for the checkpoint by every subtask of the vertex.
    pub size_bytes: u64,
    /// The longest synchronous snapshot part of any of its subtasks.
    pub sync_ms: u64,
    /// The longest barrier alignment of any of its subtasks.
    pub alignment_ms: u64,
}

/// The `history.json` file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointHistory {
    /// The job name.
    pub job: String,
    /// The last checkpoints, oldest first.
    pub checkpoints: Vec<HistoryEntry>,
}

/// The record that a job ran to the end of its input and committed all its output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The job name.
    pub job: String,
    /// Unix time in milliseconds when it was recorded.
    pub finished_ms: u64,
    /// The last checkpoint, which recorded every task finished.
    pub checkpoint: u64,
}

/// The checkpoints of one job: `<dir>/<job>/`.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointStore {
    root: PathBuf,
    /// Held while files are put into `shared/` and the manifest naming them is written, and
    /// while unreferenced shared files are deleted: so a file is never deleted between its
    /// upload and the write of the manifest that refers to it.
    shared_lock: std::sync::Arc<std::sync::Mutex<()>>,
    /// The `shared/` of a checkpoint restored from another directory: the files of it that
    /// this job's checkpoints go on referring to are linked (or copied) into its own
    /// `shared/` as the first one does, so that they do not depend on the other directory.
    adopted: Option<PathBuf>,
}

impl CheckpointStore {
    /// Opens (creating it) the checkpoint directory of job `job` under `dir`, and checks that
    /// it can be written, so that a bad directory fails the job at start, not at the first
    /// checkpoint.
    pub(crate) fn open(dir: &Path, job: &str) -> Result<Self, CheckpointError> {
        let root = dir.join(job);
        let not_writable = |cause| CheckpointError::NotWritable {
            path: root.clone(),
            cause,
        };
        std::fs::create_dir_all(&root).map_err(not_writable)?;
        let probe = root.join(".write-probe");
        File::create(&probe)
            .and_then(|mut f| f.write_all(b"ok"))
            .map_err(not_writable)?;
        let _ = std::fs::remove_file(&probe);
        Ok(CheckpointStore {
            root,
            shared_lock: Default::default(),
            adopted: None,
        })
    }

    /// The job starts from a checkpoint whose shared files are in `shared`: when that is not
    /// this job's own `shared/`, its checkpoints take in the files they refer to there.
    pub(crate) fn adopt_shared(&mut self, shared: &Path) {
        if shared != self.root.join(SHARED) {
            self.adopted = Some(shared.to_path_buf());
        }
    }

    /// `<dir>/<job>`.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The record that the job finished, if an earlier run wrote one.
    pub(crate) fn completion(&self) -> Result<Option<Completion>, CheckpointError> {
        let path = self.root.join(FINISHED);
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| CheckpointError::Corrupt {
                        path,
                        reason: format!(
                            "it is not a valid completion record ({e}); delete it, or run with \
                         --fresh"
                        ),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("read", &path, e)),
        }
    }

    /// Records durably that the job finished: a later run finds it so, instead of starting
    /// over.
    pub(crate) fn write_completion(&self, completion: &Completion) -> Result<(), CheckpointError> {
        let json = serde_json::to_vec_pretty(completion).expect("a completion serializes");
        write_atomically(&self.root.join(FINISHED), &json, true)
    }

    /// Forgets that the job finished (a fresh start).
    /// Records that the job starts from `from`, a savepoint or checkpoint outside this
    /// directory, which a start that finds no checkpoint here resumes from; `None` forgets
    /// it (the job starts over, or from a checkpoint of its own).
    pub(crate) fn set_origin(&self, from: Option<&Path>) -> Result<(), CheckpointError> {
        let path = self.root.join(ORIGIN);
        match from {
            Some(dir) => {
                write_atomically(&path, resolved(dir).as_os_str().as_encoded_bytes(), true)
            }
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("delete", &path, e)),
                _ => Ok(()),
            },
        }
    }

    /// See [`set_origin`](Self::set_origin).
    pub(crate) fn origin(&self) -> Option<PathBuf> {
        let bytes = std::fs::read(self.root.join(ORIGIN)).ok()?;
        Some(PathBuf::from(String::from_utf8(bytes).ok()?))
    }

    pub(crate) fn remove_completion(&self) -> Result<(), CheckpointError> {
        let path = self.root.join(FINISHED);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("delete", &path, e)),
            _ => Ok(()),
        }
    }

    pub(crate) fn dir_of(&self, id: u64) -> PathBuf {
        self.root.join(format!("chk-{id}"))
    }

    /// Whether checkpoint `id` completed: its `_metadata` was written.
    pub(crate) fn is_complete(&self, id: u64) -> bool {
        self.dir_of(id).join(METADATA).exists()
    }

    /// Ids of every `chk-<n>` directory, complete or not, in ascending order.
    pub(crate) fn ids(&self) -> Result<Vec<u64>, CheckpointError> {
        let mut ids: Vec<u64> = (self.named_chk()?.into_iter())
            .filter_map(|(id, dir)| dir.then_some(id))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// The ids of the entries named `chk-<n>`, each with whether it is a directory (a file of
    /// that name is none of weir's: it is left alone).
    fn named_chk(&self) -> Result<Vec<(u64, bool)>, CheckpointError> {
        let entries = std::fs::read_dir(&self.root).map_err(|e| io("list", &self.root, e))?;
        Ok(entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let id = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
                Some((id, e.file_type().is_ok_and(|t| t.is_dir())))
            })
            .collect())
    }

    /// The id the next checkpoint gets: above every existing entry of that name, so that
    /// nothing of an earlier run is overwritten and no file is in the way.
    pub(crate) fn next_id(&self) -> Result<u64, CheckpointError> {
        let last = self.named_chk()?.into_iter().map(|(id, _)| id).max();
        Ok(last.map_or(1, |last| last + 1))
    }

    /// Writes one state file of checkpoint `id` and syncs it.
    pub(crate) fn write_state(
        &self,
        id: u64,
        file: &str,
        bytes: &[u8],
        key_groups: (u32, u32),
    ) -> Result<StateFile, CheckpointError> {
        let dir = self.dir_of(id);
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        let path = dir.join(file);
        File::create(&path)
            .and_then(|mut f| {
                f.write_all(bytes)?;
                f.sync_all()
            })
            .map_err(|e| io("write", &path, e))?;
        Ok(StateFile {
            file: file.to_string(),
            size: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
            key_groups,
        })
    }

    /// Writes the keyed-state file of one operator subtask, after putting the files it refers
    /// to into `shared/` (an incremental RocksDB checkpoint). Returns the file and, of the
    /// shared files, the bytes newly put there and the bytes of all it refers to.
    pub(crate) fn write_keyed_state(
        &self,
        id: u64,
        file: &str,
        snapshot: &Snapshot,
    ) -> Result<(StateFile, (u64, u64)), CheckpointError> {
        let groups = (snapshot.key_groups.start, snapshot.key_groups.end);
        let Some(files) = &snapshot.shared else {
            return Ok((self.write_state(id, file, &snapshot.bytes, groups)?, (0, 0)));
        };
        let shared = self.root.join(SHARED);
        let _guard = self.shared_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(from) = &self.adopted {
            std::fs::create_dir_all(&shared).map_err(|e| io("create", &shared, e))?;
            for name in rocks::shared_names(&snapshot.bytes) {
                let (from, to) = (from.join(&name), shared.join(&name));
                if !to.exists() && from.exists() {
                    link_or_copy(&from, &to).map_err(|e| io("copy into", &to, e))?;
                }
            }
        }
        let uploaded = put_shared(files, &shared).map_err(|e| io("put files into", &shared, e))?;
        let state = self.write_state(id, file, &snapshot.bytes, groups)?;
        Ok((state, (uploaded, files.full_bytes)))
    }

    /// Deletes the files of `shared/` that no checkpoint directory refers to any more,
    /// complete or in progress.
    pub(crate) fn collect_shared(&self) -> Result<(), CheckpointError> {
        let shared = self.root.join(SHARED);
        let _guard = self.shared_lock.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(entries) = std::fs::read_dir(&shared) else {
            return Ok(());
        };
        let mut live = std::collections::HashSet::new();
        for id in self.ids()? {
            let dir = self.dir_of(id);
            for file in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = file.path();
                let mut head = [0u8; 8];
                let is_manifest = File::open(&path)
                    .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                    .is_ok_and(|()| rocks::is_manifest(&head));
                if is_manifest {
                    let bytes = std::fs::read(&path).map_err(|e| io("read", &path, e))?;
                    live.extend(rocks::shared_names(&bytes));
                }
            }
        }
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live.contains(&name) {
                tracing::debug!("deleting shared checkpoint file {name}: no checkpoint uses it");
                if let Err(e) = std::fs::remove_file(entry.path()) {
                    tracing::warn!("cannot delete {}: {e}", entry.path().display());
                }
            }
        }
        Ok(())
    }

    /// Makes checkpoint `meta.checkpoint` complete: writes its `_metadata` atomically.
    pub(crate) fn write_metadata(&self, meta: &Metadata) -> Result<(), CheckpointError> {
        let dir = self.dir_of(meta.checkpoint);
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        // The checkpoint's directory entry lasts too.
        File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("sync", &self.root, e))?;
        let json = encode_metadata(meta);
        write_atomically(&dir.join(METADATA), &json, true)
    }

    /// Deletes checkpoint `id` (complete or not). The metadata goes first, so that a crash
    /// halfway leaves an incomplete checkpoint, never one that names missing files.
    pub(crate) fn discard(&self, id: u64) {
        let dir = self.dir_of(id);
        let _ = std::fs::remove_file(dir.join(METADATA));
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot delete checkpoint {}: {e}", dir.display());
        }
    }

    /// Applies the retention policy after a checkpoint completed (see [`to_delete`]); `pinned`
    /// is kept whatever the policy says.
    pub(crate) fn retain(
        &self,
        num_retained: u32,
        pinned: Option<u64>,
    ) -> Result<(), CheckpointError> {
        let ids = self.ids()?;
        let complete: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|&id| self.dir_of(id).join(METADATA).exists())
            .collect();
        for id in to_delete(&ids, &complete, num_retained as usize)
            .into_iter()
            .filter(|&id| Some(id) != pinned)
        {
            tracing::debug!("deleting checkpoint {id} (retention)");
            self.discard(id);
        }
        self.collect_shared()
    }

    /// Copies complete checkpoint `id`, taken in the canonical format, into `target` (which
    /// must not exist or be empty, nor be inside the job's checkpoints, whose retention
    /// would delete it) as a savepoint: its state files (hard links where the file system
    /// allows), then its `_metadata`, marked a savepoint, written last. Returns the bytes of
    /// its files. What a failed copy left is deleted.
    pub(crate) fn export(&self, id: u64, target: &Path) -> Result<u64, CheckpointError> {
        let refuse = |why: &str| CheckpointError::SavepointTarget {
            path: target.to_path_buf(),
            cause: std::io::Error::new(std::io::ErrorKind::AlreadyExists, why.to_string()),
        };
        if std::fs::read_dir(target).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(refuse("it exists and is not empty"));
        }
        if is_inside(target, &self.root) {
            return Err(refuse(
                "it is inside the job's checkpoint directory, whose retention would delete it",
            ));
        }
        std::fs::create_dir_all(target).map_err(|cause| CheckpointError::SavepointTarget {
            path: target.to_path_buf(),
            cause,
        })?;
        self.copy_savepoint(id, target).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(target);
        })
    }

    /// [`export`](Self::export) into `target`, which exists and is empty.
    fn copy_savepoint(&self, id: u64, target: &Path) -> Result<u64, CheckpointError> {
        let dir = self.dir_of(id);
        let mut meta = load(&dir)?;
        let mut size = 0;
        for entry in std::fs::read_dir(&dir).map_err(|e| io("list", &dir, e))? {
            let entry = entry.map_err(|e| io("list", &dir, e))?;
            let name = entry.file_name();
            if name == METADATA {
                continue;
            }
            let to = target.join(&name);
            link_or_copy(&entry.path(), &to).map_err(|e| io("copy into", &to, e))?;
            size += entry
                .metadata()
                .map_err(|e| io("read", &entry.path(), e))?
                .len();
        }
        File::open(target)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("sync", target, e))?;
        meta.savepoint = true;
        let json = encode_metadata(&meta);
        size += json.len() as u64;
        write_atomically(&target.join(METADATA), &json, true)?;
        Ok(size)
    }

    /// Deletes every checkpoint of the job (its history stays).
    pub(crate) fn discard_all(&self) -> Result<(), CheckpointError> {
        for (i, id) in self.ids()?.into_iter().enumerate() {
            self.discard(id);
            if i == 0 {
                crate::failpoint::hit("finish.during-discard");
            }
        }
        self.set_origin(None)?;
        self.collect_shared()
    }

    /// Deletes every checkpoint after `id`, complete or not.
    pub(crate) fn discard_after(&self, id: u64) -> Result<(), CheckpointError> {
        for newer in self.ids()?.into_iter().filter(|&n| n > id) {
            self.discard(newer);
        }
        self.collect_shared()
    }

    /// The newest checkpoint with an id from `since` on that verifies and fits the job; each
    /// one skipped is logged with the reason. `None` when none from `since` on completed; an
    /// error when some completed but none of them verifies and fits, or when the newest
    /// completed one does not and `strict` names a sink that cannot take back what it
    /// committed (see [`SinkConfig::rewinds_committed`](crate::connectors::SinkConfig)).
    pub(crate) fn latest(
        &self,
        since: u64,
        strict: Option<&str>,
        fits: impl Fn(&Metadata) -> Result<(), String>,
    ) -> Result<Option<Metadata>, CheckpointError> {
        let mut refused = Vec::new();
        for id in self.ids()?.into_iter().rev().take_while(|&id| id >= since) {
            let dir = self.dir_of(id);
            let completed = dir.join(METADATA).exists();
            match load(&dir).and_then(|meta| match fits(&meta) {
                Ok(()) => Ok(meta),
                Err(reason) => Err(CheckpointError::Incompatible {
                    path: dir.clone(),
                    reason,
                }),
            }) {
                Ok(meta) => return Ok(Some(meta)),
                Err(e) => {
                    if let (true, Some(sink)) = (completed, strict) {
                        return Err(CheckpointError::NewestNotRestorable {
                            path: dir,
                            reason: e.to_string(),
                            sink: sink.to_string(),
                        });
                    }
                    tracing::warn!("skipping checkpoint {id}: {e}");
                    if completed {
                        refused.push(e.to_string());
                    }
                }
            }
        }
        match refused.is_empty() {
            true => Ok(None),
            false => Err(CheckpointError::NoneRestorable {
                path: self.root.clone(),
                reasons: refused,
            }),
        }
    }

    /// Appends `entry` to `history.json`, keeping the last entries.
    pub(crate) fn record(&self, job: &str, entry: HistoryEntry) -> Result<(), CheckpointError> {
        let path = self.root.join(HISTORY);
        let mut history: CheckpointHistory = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        history.job = job.to_string();
        history.checkpoints.push(entry);
        let excess = history.checkpoints.len().saturating_sub(HISTORY_LEN);
        history.checkpoints.drain(..excess);
        let json = serde_json::to_vec_pretty(&history).expect("history serializes");
        write_atomically(&path, &json, false)
    }
}

/// Whether `path` is `dir` or inside it (both made absolute): a savepoint there would be
/// deleted by the retention of the checkpoints in `dir`.
pub fn is_inside(path: &Path, dir: &Path) -> bool {
    resolved(path).starts_with(resolved(dir))
}

/// `path` made absolute, with `..` and symbolic links resolved as far as it exists: two
/// spellings of one directory (`chk/job/chk-3`, `out/../chk/job/chk-3`, through a link)
/// give the same path.
pub(crate) fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return missing.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// Puts every file of `files` into `shared` (a hard link where the file system allows, else a
/// copy) and syncs; returns the bytes put there.
pub(crate) fn put_shared(files: &SharedFiles, shared: &Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(shared)?;
    let mut bytes = 0;
    for (from, name, size) in &files.files {
        let to = shared.join(name);
        bytes += size;
        if std::fs::metadata(&to).is_ok_and(|m| m.len() == *size) {
            continue; // an earlier attempt of this checkpoint put it there
        }
        link_or_copy(from, &to)?;
    }
    File::open(shared)?.sync_all()?;
    Ok(bytes)
}

/// Reads the checkpoint in `dir` and verifies every state file it names.
pub(crate) fn load(dir: &Path) -> Result<Metadata, CheckpointError> {
    let path = dir.join(METADATA);
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: dir.to_path_buf(),
        reason,
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            let not = |reason: String| CheckpointError::NotACheckpoint {
                path: dir.to_path_buf(),
                reason,
            };
            if !dir.is_dir() {
                let reason = match dir.parent() {
                    Some(parent) if dir.ends_with(METADATA) && dir.is_file() => format!(
                        "it is the _metadata file of one; name its directory, {}",
                        parent.display()
                    ),
                    _ if dir.exists() => "it is a file; name a checkpoint's directory".into(),
                    _ => "there is no such directory".into(),
                };
                return Err(not(reason));
            }
            let newest = std::fs::read_dir(dir).ok().and_then(|entries| {
                (entries.filter_map(Result::ok))
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()?
                            .strip_prefix("chk-")?
                            .parse::<u64>()
                            .ok()
                    })
                    .max()
            });
            if let Some(newest) = newest {
                return Err(not(format!(
                    "it holds a job's checkpoints; name one of them, such as its newest, \
                     {}",
                    dir.join(format!("chk-{newest}")).display()
                )));
            }
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name
                .strip_prefix("chk-")
                .is_some_and(|id| id.parse::<u64>().is_ok())
            {
                return Err(corrupt(
                    "it has no _metadata file: it never completed (the job stopped while taking \
                     it)"
                    .into(),
                ));
            }
            return Err(not(
                "it has no _metadata file, which every complete checkpoint and savepoint has"
                    .into(),
            ));
        }
        Err(e) => return Err(io("read", &path, e)),
    };
    let meta: Metadata = serde_json::from_slice(&bytes)
        .map_err(|e| corrupt(format!("_metadata is not valid: {e}")))?;
    if !(1..=FORMAT_VERSION).contains(&meta.format) {
        return Err(CheckpointError::Incompatible {
            path: dir.to_path_buf(),
            reason: format!(
                "it was written in checkpoint format {} by weir {}; this weir reads format {FORMAT_VERSION}",
                meta.format, meta.weir_version
            ),
        });
    }
    if meta.format >= 2 && !checksum_matches(&bytes) {
        return Err(corrupt(
            "_metadata does not match its CRC-32: it was changed or damaged since it was \
             written"
                .into(),
        ));
    }
    for file in meta
        .vertices
        .iter()
        .flat_map(|v| &v.subtasks)
        .flat_map(|s| match s {
            SubtaskState::Operator {
                state,
                operator_state,
                ..
            } => [state.as_ref(), operator_state.as_ref()],
            _ => [None, None],
        })
        .flatten()
        .chain(
            meta.vertices
                .iter()
                .flat_map(|v| &v.in_flight)
                .map(|f| &f.file),
        )
    {
        read_state(dir, file)?;
    }
    Ok(meta)
}

/// `_metadata`'s bytes: `meta` as JSON whose last member is the CRC-32 of what comes before
/// it (with the object closed), so that a changed byte anywhere in it is found, also one
/// that leaves valid JSON (a digit of a source's position, a transaction's id).
fn encode_metadata(meta: &Metadata) -> Vec<u8> {
    let mut json = serde_json::to_vec_pretty(meta).expect("metadata serializes");
    debug_assert!(json.ends_with(b"\n}"));
    let crc = crc32fast::hash(&json);
    json.truncate(json.len() - 2);
    json.extend_from_slice(CRC_MEMBER);
    json.extend_from_slice(format!("{crc}\n}}").as_bytes());
    json
}

/// Whether `_metadata`'s bytes end with the CRC-32 of what comes before (see
/// [`encode_metadata`]).
fn checksum_matches(bytes: &[u8]) -> bool {
    let Some(at) = bytes
        .windows(CRC_MEMBER.len())
        .rposition(|w| w == CRC_MEMBER)
    else {
        return false;
    };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..at]);
    hasher.update(b"\n}");
    let written = std::str::from_utf8(&bytes[at + CRC_MEMBER.len()..])
        .ok()
        .and_then(|tail| tail.strip_suffix("\n}"))
        .and_then(|crc| crc.parse::<u32>().ok());
    written == Some(hasher.finalize())
}

/// Reads a state file of the checkpoint in `dir`, checking its size and checksum.
pub(crate) fn read_state(dir: &Path, file: &StateFile) -> Result<Vec<u8>, CheckpointError> {
    let path = dir.join(&file.file);
    let bytes = std::fs::read(&path).map_err(|e| io("read", &path, e))?;
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: path.clone(),
        reason,
    };
    if bytes.len() as u64 != file.size {
        return Err(corrupt(format!(
            "it has {} bytes, the metadata says {} (truncated or overwritten)",
            bytes.len(),
            file.size
        )));
    }
    let crc = crc32fast::hash(&bytes);
    if crc != file.crc32 {
        return Err(corrupt(format!(
            "its CRC-32 is {crc:08x}, the metadata says {:08x} (the file changed after it was written)",
            file.crc32
        )));
    }
    Ok(bytes)
}

/// Which checkpoint directories retention deletes: completed ones beyond the newest
/// `num_retained`, and incomplete ones older than the newest completed one (abandoned).
/// Nothing newer than the newest completed checkpoint is touched: it may be in progress.
pub(crate) fn to_delete(ids: &[u64], complete: &[u64], num_retained: usize) -> Vec<u64> {
    let Some(&newest) = complete.iter().max() else {
        return Vec::new();
    };
    let mut keep: Vec<u64> = complete.to_vec();
    keep.sort_unstable();
    let keep = &keep[keep.len().saturating_sub(num_retained.max(1))..];
    ids.iter()
        .copied()
        .filter(|id| *id < newest && !keep.contains(id))
        .collect()
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader sees the old
/// content or the new, never a mix; with `durable`, syncs the file and its directory.
fn write_atomically(path: &Path, bytes: &[u8], durable: bool) -> Result<(), CheckpointError> {
    let tmp = path.with_extension("tmp");
    File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            if durable {
                f.sync_all()?;
            }
            Ok(())
        })
        .map_err(|e| io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename into place", path, e))?;
    if durable && let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("sync", dir, e))?;
    }
    Ok(())
}

/// Milliseconds, rounded down, for the history.
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// Unix time in milliseconds.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(id: u64, files: Vec<StateFile>) -> Metadata {
        Metadata {
            format: FORMAT_VERSION,
            weir_version: "test".into(),
            job: "j".into(),
            checkpoint: id,
            timestamp_ms: 0,
            max_parallelism: 128,
            savepoint: false,
            vertices: vec![VertexMeta {
                name: "count".into(),
                role: Role::Operator,
                uid: Some("count".into()),
                parallelism: files.len() as u32,
                subtasks: files
                    .into_iter()
                    .map(|f| SubtaskState::Operator {
                        state: Some(f),
                        operator_state: None,
                        watermark: None,
                    })
                    .collect(),
                code: None,
                in_flight: Vec::new(),
            }],
        }
    }

    fn complete(store: &CheckpointStore, id: u64, payload: &[u8]) {
        let f = store.write_state(id, "count-0", payload, (0, 128)).unwrap();
        store.write_metadata(&meta(id, vec![f])).unwrap();
    }

    #[test]
    fn retention_keeps_the_newest_and_what_may_be_in_progress() {
        assert_eq!(to_delete(&[1, 2, 3], &[1, 2, 3], 1), vec![1, 2]);
        assert_eq!(to_delete(&[1, 2, 3], &[1, 2, 3], 2), vec![1]);
        assert_eq!(
            to_delete(&[1, 2, 3, 4], &[1, 3], 1),
            vec![1, 2],
            "4 may be in progress"
        );
        assert_eq!(
            to_delete(&[1, 2], &[], 1),
            Vec::<u64>::new(),
            "nothing complete: keep all"
        );
        assert_eq!(to_delete(&[5], &[5], 3), Vec::<u64>::new());
    }

    #[test]
    fn a_written_checkpoint_loads_and_verifies() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        assert_eq!(store.next_id().unwrap(), 1);
        complete(&store, 1, b"state bytes");
        assert_eq!(store.next_id().unwrap(), 2);
        let m = store.latest(0, None, |_| Ok(())).unwrap().unwrap();
        assert_eq!(m.checkpoint, 1);
        let SubtaskState::Operator { state: Some(f), .. } = &m.vertices[0].subtasks[0] else {
            panic!()
        };
        assert_eq!(read_state(&store.dir_of(1), f).unwrap(), b"state bytes");
    }

    #[test]
    fn damaged_and_partial_checkpoints_are_skipped_for_older_good_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        complete(&store, 1, b"good state");
        complete(&store, 2, b"flipped state");
        complete(&store, 3, b"truncated state");
        // 4: state written, no metadata (crashed while taking it).
        store.write_state(4, "count-0", b"x", (0, 128)).unwrap();
        let flip = store.dir_of(2).join("count-0");
        let mut bytes = std::fs::read(&flip).unwrap();
        bytes[3] ^= 0x10;
        std::fs::write(&flip, bytes).unwrap();
        std::fs::write(store.dir_of(3).join("count-0"), b"trunc").unwrap();

        let err = load(&store.dir_of(2)).unwrap_err().to_string();
        assert!(err.contains("CRC-32"), "{err}");
        let err = load(&store.dir_of(3)).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        let err = load(&store.dir_of(4)).unwrap_err().to_string();
        assert!(err.contains("never completed"), "{err}");
        assert_eq!(
            store
                .latest(0, None, |_| Ok(()))
                .unwrap()
                .unwrap()
                .checkpoint,
            1
        );
        // Nothing fits: an error naming each completed one, not a start from the beginning.
        let err = store
            .latest(0, None, |m| Err(format!("not {}", m.job)))
            .unwrap_err()
            .to_string();
        for id in 1..=3 {
            assert!(err.contains(&format!("chk-{id}")), "{err}");
        }
        assert!(!err.contains("chk-4") && err.contains("not j"), "{err}");
        assert!(err.contains("--fresh"), "{err}");
        // With a sink that cannot take back what the newest committed, no older one.
        let err = store
            .latest(0, Some("rows"), |_| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("chk-3") && err.contains("truncated") && err.contains("\"rows\""),
            "{err}"
        );
        assert!(err.contains("--from-checkpoint"), "{err}");
        // Since 4, where only the one that never completed is: nothing to restore.
        assert!(store.latest(4, None, |_| Ok(())).unwrap().is_none());
    }

    #[test]
    fn garbage_and_foreign_versions_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        complete(&store, 1, b"s");
        let path = store.dir_of(1).join(METADATA);
        std::fs::write(&path, b"{not json").unwrap();
        assert!(
            load(&store.dir_of(1))
                .unwrap_err()
                .to_string()
                .contains("not valid")
        );
        let mut m = meta(1, vec![]);
        m.format = 99;
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        let err = load(&store.dir_of(1)).unwrap_err().to_string();
        assert!(err.contains("format 99"), "{err}");
        // Any changed byte is found, also one that leaves valid JSON (a digit).
        complete(&store, 2, b"s");
        let path = store.dir_of(2).join(METADATA);
        let good = std::fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(
                load(&store.dir_of(2)).is_err(),
                "byte {at} changed:\n{}",
                String::from_utf8_lossy(&bad)
            );
        }
        // Format 1 had no checksum.
        let mut m = meta(2, vec![]);
        m.format = 1;
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(load(&store.dir_of(2)).unwrap(), m);
        // Paths that hold no checkpoint say what they are.
        let err = load(&tmp.path().join("nope")).unwrap_err().to_string();
        assert!(err.ends_with("is no checkpoint or savepoint: there is no such directory"));
        let err = load(tmp.path()).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "is no checkpoint or savepoint: it has no _metadata file, which every \
                 complete checkpoint and savepoint has"
            ),
            "{err}"
        );
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.ends_with(&format!(
                "name its directory, {}",
                store.dir_of(2).display()
            )),
            "{err}"
        );
        complete(&store, 7, b"s");
        let err = load(store.root()).unwrap_err().to_string();
        assert!(
            err.contains("holds a job's checkpoints") && err.ends_with("chk-7"),
            "{err}"
        );
    }

    #[test]
    fn retain_deletes_only_after_a_newer_checkpoint_completed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        complete(&store, 1, b"a");
        store.write_state(2, "count-0", b"b", (0, 128)).unwrap();
        store.retain(1, None).unwrap();
        assert_eq!(store.ids().unwrap(), vec![1, 2], "2 is not complete yet");
        complete(&store, 3, b"c");
        store.retain(1, None).unwrap();
        assert_eq!(store.ids().unwrap(), vec![3]);
    }

    #[test]
    fn a_file_named_like_a_checkpoint_is_left_alone_and_numbered_past() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        complete(&store, 1, b"a");
        let stray = store.root().join("chk-100");
        std::fs::write(&stray, b"not weir's").unwrap();
        assert_eq!(store.ids().unwrap(), vec![1]);
        assert_eq!(store.next_id().unwrap(), 101, "the file is not in the way");
        complete(&store, 101, b"b");
        store.retain(1, None).unwrap();
        assert_eq!(store.ids().unwrap(), vec![101]);
        assert_eq!(std::fs::read(&stray).unwrap(), b"not weir's");
    }

    /// The manifest of an incremental checkpoint that refers to shared files `names`.
    fn manifest(names: &[&str]) -> Vec<u8> {
        use weir_wire::{put_bytes, put_i64, put_u32};
        let mut out = b"WEIRRI01".to_vec();
        put_u32(&mut out, 0);
        put_u32(&mut out, 128);
        put_u32(&mut out, names.len() as u32);
        for name in names {
            put_bytes(&mut out, b"000001.sst");
            put_bytes(&mut out, name.as_bytes());
            put_i64(&mut out, 1);
        }
        put_u32(&mut out, 0);
        put_u32(&mut out, 0);
        out
    }

    #[test]
    fn shared_files_live_as_long_as_a_checkpoint_refers_to_them() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        let shared = store.root().join(SHARED);
        std::fs::create_dir_all(&shared).unwrap();
        for name in ["a", "b", "c", "d"] {
            std::fs::write(shared.join(name), "x").unwrap();
        }
        let left = || {
            let mut names: Vec<String> = std::fs::read_dir(&shared)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        complete(&store, 1, &manifest(&["a", "b"]));
        complete(&store, 2, &manifest(&["b", "c"]));
        // In progress: its manifest is written, its metadata is not.
        store
            .write_state(3, "count-0", &manifest(&["d"]), (0, 128))
            .unwrap();
        store.retain(1, None).unwrap();
        assert_eq!(store.ids().unwrap(), vec![2, 3]);
        assert_eq!(left(), ["b", "c", "d"], "a: only checkpoint 1 used it");
        store.discard(3);
        complete(&store, 4, &manifest(&["c"]));
        store.retain(1, None).unwrap();
        assert_eq!(left(), ["c"]);
        store.discard_all().unwrap();
        assert!(left().is_empty());
    }

    #[test]
    fn an_unwritable_directory_is_reported_up_front() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain-file");
        std::fs::write(&file, b"").unwrap();
        let err = CheckpointStore::open(&file, "j").unwrap_err().to_string();
        assert!(
            err.contains("not writable") && err.contains("[checkpoint] dir"),
            "{err}"
        );
    }

    #[test]
    fn history_keeps_the_last_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(tmp.path(), "j").unwrap();
        for id in 0..(HISTORY_LEN as u64 + 5) {
            store
                .record(
                    "j",
                    HistoryEntry {
                        id,
                        status: CheckpointOutcome::Completed,
                        reason: None,
                        triggered_ms: 0,
                        duration_ms: 1,
                        size_bytes: 2,
                        full_size_bytes: 2,
                        alignment_ms: 0,
                        in_flight_bytes: 0,
                        operators: vec![],
                    },
                )
                .unwrap();
        }
        let h: CheckpointHistory =
            serde_json::from_slice(&std::fs::read(store.root().join(HISTORY)).unwrap()).unwrap();
        assert_eq!(h.checkpoints.len(), HISTORY_LEN);
        assert_eq!(h.checkpoints[0].id, 5);
    }
}
