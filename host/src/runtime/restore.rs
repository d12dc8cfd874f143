//! Restoring a checkpoint: finding the newest one that verifies and fits the job, and what
//! each task reads from it. Whether a checkpoint fits a job is the runtime's question: only it
//! knows which parts of a job must match (sources and sinks keep their parallelism, keyed state
//! rescales by key group, operator state by its redistribution mode).

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::task::SECOND_INPUT;
use super::{Cause, role};
use crate::batch::Batch;
use crate::checkpoint::CheckpointError;
use crate::checkpoint::storage::{self, Metadata, SubtaskState};
use crate::job::spec::{JobSpec, Vertex, VertexKind};
use crate::key_group::{key_group, key_group_range};
use crate::role::Role;
#[cfg(doc)]
use crate::state::redistribute;
use crate::state::{OperatorStates, restore_operator_states};

/// A checkpoint being restored.
#[derive(Debug)]
pub(crate) struct Restored {
    pub dir: PathBuf,
    pub meta: Metadata,
}

impl Restored {
    /// Reads and verifies the checkpoint or savepoint in `dir` and checks that it fits
    /// `spec` (see [`fits`]).
    pub(crate) fn load(
        dir: &Path,
        spec: &JobSpec,
        allow_non_restored: bool,
    ) -> Result<Restored, CheckpointError> {
        let meta = storage::load(dir)?;
        fits(&meta, spec, allow_non_restored).map_err(|reason| CheckpointError::Incompatible {
            path: dir.to_path_buf(),
            reason,
        })?;
        Ok(Restored {
            dir: dir.to_path_buf(),
            meta,
        })
    }

    /// The newest checkpoint in `store`, with an id from `since` on, that verifies and fits
    /// `spec` (dropping the state of operators it no longer has if `allow_non_restored`); see
    /// [`storage::CheckpointStore::latest`].
    pub(crate) fn latest(
        store: &storage::CheckpointStore,
        spec: &JobSpec,
        since: u64,
        allow_non_restored: bool,
    ) -> Result<Option<Restored>, CheckpointError> {
        let strict = spec.vertices.iter().find_map(|v| match &v.kind {
            VertexKind::Sink(c) if !c.rewinds_committed() => Some(v.name.as_str()),
            _ => None,
        });
        Ok(store
            .latest(since, strict, |m| fits(m, spec, allow_non_restored))?
            .map(|meta| Restored {
                dir: store.dir_of(meta.checkpoint),
                meta,
            }))
    }

    pub(crate) fn id(&self) -> u64 {
        self.meta.checkpoint
    }

    /// Where the files that incremental checkpoints share are: `<job dir>/shared/`.
    pub(crate) fn shared_dir(&self) -> std::path::PathBuf {
        self.dir.parent().unwrap_or(&self.dir).join(storage::SHARED)
    }

    /// What subtask `s` of the vertex named `name` put into the checkpoint.
    fn subtask(&self, name: &str, s: u32) -> Option<&SubtaskState> {
        self.meta.vertex(name)?.subtasks.get(s as usize)
    }

    /// Whether subtask `s` of `vertex` (an operator found by its uid) had finished (it then
    /// ends at once): at another parallelism, whose subtasks take over the key groups of any
    /// of the old ones, only if every old subtask had.
    pub(crate) fn is_finished(&self, vertex: &Vertex, s: u32) -> bool {
        let finished = |state: &SubtaskState| {
            matches!(
                state,
                SubtaskState::Finished | SubtaskState::FinishedSink { .. }
            )
        };
        let old = match &vertex.kind {
            VertexKind::Operator { uid, .. } => self.operator(uid),
            _ => self.meta.vertex(&vertex.name),
        };
        match old {
            Some(old) if old.parallelism == vertex.parallelism => {
                old.subtasks.get(s as usize).is_some_and(finished)
            }
            Some(old) => old.subtasks.iter().all(finished),
            None => false,
        }
    }

    pub(crate) fn source_position(&self, name: &str, s: u32) -> Option<&serde_json::Value> {
        match self.subtask(name, s)? {
            SubtaskState::Source { position } => Some(position),
            _ => None,
        }
    }

    pub(crate) fn sink_state(&self, name: &str, s: u32) -> Option<&serde_json::Value> {
        match self.subtask(name, s)? {
            SubtaskState::Sink { state } => Some(state),
            _ => None,
        }
    }

    fn operator(&self, uid: &str) -> Option<&storage::VertexMeta> {
        self.meta
            .vertices
            .iter()
            .find(|v| v.uid.as_deref() == Some(uid))
    }

    /// The keyed-state files of operator `uid` that hold any of the key groups `groups`,
    /// read and verified (they may come from subtasks of another parallelism).
    pub(crate) fn keyed_state(
        &self,
        uid: &str,
        groups: &Range<u32>,
    ) -> Result<Vec<Vec<u8>>, CheckpointError> {
        let Some(vertex) = self.operator(uid) else {
            return Ok(Vec::new());
        };
        vertex
            .subtasks
            .iter()
            .filter_map(|s| match s {
                SubtaskState::Operator { state: Some(f), .. } => Some(f),
                _ => None,
            })
            .filter(|f| f.key_groups.0 < groups.end && groups.start < f.key_groups.1)
            .map(|f| storage::read_state(&self.dir, f))
            .collect()
    }

    /// The records in flight to vertex `v` of `spec` that an unaligned checkpoint stored, for
    /// subtask `s`, in batches to replay before the subtask reads its inputs, each with the
    /// operator input it goes to. At the
    /// parallelism of the checkpoint each subtask gets back what it recorded; at another, a
    /// record with a key goes to the subtask that owns its key group (where a keyed operator
    /// needs it), one without to subtask `old subtask % parallelism`.
    pub(crate) fn in_flight(
        &self,
        spec: &JobSpec,
        v: usize,
        s: u32,
    ) -> Result<Vec<(u8, Batch)>, CheckpointError> {
        let vertex = &spec.vertices[v];
        let meta = match &vertex.kind {
            VertexKind::Operator { uid, .. } => self.operator(uid),
            _ => self.meta.vertex(&vertex.name),
        };
        let Some(meta) = meta else {
            return Ok(Vec::new());
        };
        let p = vertex.parallelism;
        let rescaled = meta.parallelism != p;
        let groups = key_group_range(spec.max_parallelism, p, s);
        let mut batches = vec![(0, Batch::default())];
        for f in &meta.in_flight {
            if !rescaled && f.subtask != s {
                continue;
            }
            let bytes = storage::read_state(&self.dir, &f.file)?;
            for rec in weir_wire::OutputReader::new(&bytes) {
                let (to, rec) = rec.map_err(|e| CheckpointError::Corrupt {
                    path: self.dir.join(&f.file.file),
                    reason: format!("its records in flight do not decode: {e}"),
                })?;
                let mine = !rescaled
                    || match rec.key {
                        Some(key) => groups.contains(&key_group(key, spec.max_parallelism)),
                        None => f.subtask % p == s,
                    };
                if !mine {
                    continue;
                }
                let input = u8::from(to == Some(SECOND_INPUT.as_bytes()));
                let (last_input, last) = batches.last_mut().expect("one batch at least");
                if *last_input != input || last.is_full() {
                    batches.push((input, Batch::default()));
                }
                batches.last_mut().expect("pushed").1.push(&rec);
            }
        }
        batches.retain(|(_, b)| !b.is_empty());
        Ok(batches)
    }

    /// The watermark operator `uid` had at the checkpoint, for subtask `s` of `parallelism`:
    /// its own at the same parallelism; at another, where its keys may come from any of the
    /// old subtasks, theirs if they all had the same (as behind an all-to-all edge at an
    /// aligned checkpoint), else none: a lower one would take a window that fired for one
    /// that did not, a higher one a record on time for a late one. A subtask that had
    /// finished has no say.
    pub(crate) fn watermark(&self, uid: &str, parallelism: u32, s: u32) -> Option<i64> {
        let vertex = self.operator(uid)?;
        let of = |state: &SubtaskState| match state {
            SubtaskState::Operator { watermark, .. } => Some(*watermark),
            _ => None,
        };
        if vertex.parallelism == parallelism {
            return of(vertex.subtasks.get(s as usize)?).flatten();
        }
        let mut watermarks = vertex.subtasks.iter().filter_map(of);
        let first = watermarks.next()??;
        watermarks.all(|w| w == Some(first)).then_some(first)
    }

    /// The operator state of every subtask of operator `uid` that wrote it, read, verified
    /// and in subtask order (empty for a subtask that had none); see [`redistribute`].
    pub(crate) fn operator_states(&self, uid: &str) -> Result<Vec<OperatorStates>, Cause> {
        let Some(vertex) = self.operator(uid) else {
            return Ok(Vec::new());
        };
        let mut states = Vec::with_capacity(vertex.subtasks.len());
        for subtask in &vertex.subtasks {
            states.push(match subtask {
                SubtaskState::Operator {
                    operator_state: Some(f),
                    ..
                } => restore_operator_states(&storage::read_state(&self.dir, f)?)?,
                _ => OperatorStates::new(),
            });
        }
        if states.iter().all(OperatorStates::is_empty) {
            states.clear();
        }
        Ok(states)
    }
}

/// Whether checkpoint `meta` can be restored into `spec`: the same job and key groups;
/// sources and sinks (whose positions are per subtask) at the same parallelism; every
/// operator with state in the checkpoint still in the job (matched by uid), unless
/// `allow_non_restored` (Flink's `--allowNonRestoredState`) lets that state go. Operators may
/// change parallelism: their keyed state is split by key group, their operator state as its
/// redistribution mode says. A savepoint restores into a job of any name.
pub(crate) fn fits(
    meta: &Metadata,
    spec: &JobSpec,
    allow_non_restored: bool,
) -> Result<(), String> {
    if meta.job != spec.name && !meta.savepoint {
        return Err(format!(
            "it belongs to job \"{}\", not \"{}\"",
            meta.job, spec.name
        ));
    }
    if meta.max_parallelism != spec.max_parallelism {
        return Err(format!(
            "it was taken with max_parallelism {}, the job has {}; max_parallelism fixes how \
             keyed state is split and cannot change",
            meta.max_parallelism, spec.max_parallelism
        ));
    }
    for v in &spec.vertices {
        let (role, parallelism) = match &v.kind {
            VertexKind::Operator { .. } => continue,
            VertexKind::Source(_) => ("source", meta.vertex(&v.name).map(|m| m.parallelism)),
            VertexKind::Sink(_) => ("sink", meta.vertex(&v.name).map(|m| m.parallelism)),
        };
        if let Some(p) = parallelism
            && p != v.parallelism
        {
            return Err(format!(
                "{role} \"{}\" ran at parallelism {p} and now has {}; a {role}'s position is \
                 per subtask, so keep its parallelism (or start with --fresh)",
                v.name, v.parallelism
            ));
        }
    }
    for m in &meta.vertices {
        // A source or sink is matched by name: one renamed or removed starts over (a source
        // reads its input again, a file sink replaces the part files in its directory).
        let holds = match m.role {
            Role::Source => "the position in its input of source",
            Role::Sink if m.subtasks.iter().any(SubtaskState::holds_sink_output) => {
                "the pre-committed output of sink"
            }
            _ => continue,
        };
        let kept = (spec.vertices.iter()).any(|v| v.name == m.name && role(&v.kind) == m.role);
        if kept {
            continue;
        }
        if !allow_non_restored {
            return Err(format!(
                "it holds {holds} \"{name}\", which the job no longer has; name a {role} \
                 \"{name}\" again (a {role} under a new name starts over: a source reads its \
                 input again, a file sink replaces the part files in its directory), or let it \
                 go with --allow-non-restored-state (or start with --fresh)",
                name = m.name,
                role = m.role,
            ));
        }
        tracing::warn!(
            "not restoring {holds} \"{}\": the job has none of that name \
             (allow_non_restored_state)",
            m.name
        );
    }
    for m in &meta.vertices {
        let Some(uid) = &m.uid else { continue };
        let has_state = !m.in_flight.is_empty()
            || m.subtasks.iter().any(|s| {
                matches!(
                    s,
                    SubtaskState::Operator { state: Some(_), .. }
                        | SubtaskState::Operator {
                            operator_state: Some(_),
                            ..
                        }
                )
            });
        let kept = spec
            .vertices
            .iter()
            .any(|v| matches!(&v.kind, VertexKind::Operator { uid: u, .. } if u == uid));
        if has_state && !kept {
            if !allow_non_restored {
                return Err(format!(
                    "it holds state of operator uid \"{uid}\" (\"{}\"), which the job no longer \
                     has; give an operator that uid, or let its state go with \
                     --allow-non-restored-state (or start with --fresh)",
                    m.name
                ));
            }
            tracing::warn!(
                "not restoring the state of operator uid \"{uid}\" (\"{}\"): the job has no \
                 operator with that uid (allow_non_restored_state)",
                m.name
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job `name` with a generator, a native count at `count_p` and a discard sink.
    fn spec(name: &str, source_p: u32, count_p: u32) -> JobSpec {
        let text = format!(
            "[job]\nname = \"{name}\"\n\
             [[source]]\nname = \"gen\"\ntype = \"generator\"\nmode = \"keyed_words\"\nparallelism = {source_p}\n\
             [[operator]]\nname = \"count\"\nuid = \"count\"\nnative = \"count_words\"\ninput = \"gen\"\nedge = \"key_by\"\nparallelism = {count_p}\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"count\"\nedge = \"rebalance\"\n"
        );
        match JobSpec::parse(&text, Path::new("."), "job") {
            Ok(spec) => spec,
            Err(e) => panic!("{e:?}"),
        }
    }

    fn meta_of(spec: &JobSpec, operator_state: bool) -> Metadata {
        let file = |groups| storage::StateFile {
            file: "f".into(),
            size: 0,
            crc32: 0,
            key_groups: groups,
        };
        Metadata {
            format: storage::FORMAT_VERSION,
            weir_version: "test".into(),
            job: spec.name.clone(),
            checkpoint: 1,
            timestamp_ms: 0,
            max_parallelism: spec.max_parallelism,
            savepoint: false,
            vertices: spec
                .vertices
                .iter()
                .map(|v| storage::VertexMeta {
                    name: v.name.clone(),
                    role: role(&v.kind),
                    uid: match &v.kind {
                        VertexKind::Operator { uid, .. } => Some(uid.clone()),
                        _ => None,
                    },
                    parallelism: v.parallelism,
                    subtasks: (0..v.parallelism)
                        .map(|_| match &v.kind {
                            VertexKind::Operator { .. } => SubtaskState::Operator {
                                state: Some(file((0, 128))),
                                operator_state: operator_state.then(|| file((0, 0))),
                                watermark: None,
                            },
                            _ => SubtaskState::Finished,
                        })
                        .collect(),
                    code: None,
                    in_flight: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_rescaled_subtask_is_finished_and_has_a_watermark_as_all_the_old_ones_it_may_take_over() {
        let taken = spec("j", 2, 2);
        let mut meta = meta_of(&taken, false);
        let count = meta
            .vertices
            .iter_mut()
            .find(|v| v.name == "count")
            .unwrap();
        count.subtasks[1] = SubtaskState::Finished;
        if let SubtaskState::Operator { watermark, .. } = &mut count.subtasks[0] {
            *watermark = Some(500);
        }
        let restored = Restored {
            dir: PathBuf::from("chk-1"),
            meta,
        };
        let (same, more) = (spec("j", 2, 2), spec("j", 2, 3));
        let vertex = |spec: &JobSpec| spec.vertices.iter().find(|v| v.name == "count").cloned();
        let (same, more) = (vertex(&same).unwrap(), vertex(&more).unwrap());
        assert!(restored.is_finished(&same, 1));
        assert!(!restored.is_finished(&same, 0));
        // At parallelism 3 each subtask may hold key groups of the one still running.
        assert!((0..3).all(|s| !restored.is_finished(&more, s)));
        assert_eq!(restored.watermark("count", 2, 0), Some(500));
        assert_eq!(restored.watermark("count", 2, 1), None);
        assert_eq!(restored.watermark("count", 3, 2), Some(500));
        assert_eq!(restored.watermark("gone", 2, 0), None);
        // Old subtasks at different watermarks: none.
        let mut meta = restored.meta.clone();
        let count = meta
            .vertices
            .iter_mut()
            .find(|v| v.name == "count")
            .unwrap();
        count.subtasks[1] = count.subtasks[0].clone();
        if let SubtaskState::Operator { watermark, .. } = &mut count.subtasks[1] {
            *watermark = Some(400);
        }
        let restored = Restored { meta, ..restored };
        assert_eq!(restored.watermark("count", 2, 1), Some(400));
        assert_eq!(restored.watermark("count", 3, 0), None);
    }

    #[test]
    fn what_a_checkpoint_can_be_restored_into() {
        let taken = spec("j", 2, 2);
        let meta = meta_of(&taken, false);
        assert_eq!(fits(&meta, &taken, false), Ok(()));
        assert_eq!(
            fits(&meta, &spec("j", 2, 4), false),
            Ok(()),
            "keyed state rescales"
        );
        let err = fits(&meta, &spec("other", 2, 2), false).unwrap_err();
        assert!(err.contains("belongs to job \"j\""), "{err}");
        let err = fits(&meta, &spec("j", 3, 2), false).unwrap_err();
        assert!(err.contains("source \"gen\" ran at parallelism 2"), "{err}");
        assert_eq!(
            fits(&meta_of(&taken, true), &spec("j", 2, 3), false),
            Ok(()),
            "operator state is redistributed"
        );
        let mut renamed = spec("j", 2, 2);
        if let VertexKind::Operator { uid, .. } = &mut renamed.vertices[1].kind {
            *uid = "count-v2".into();
        }
        let err = fits(&meta, &renamed, false).unwrap_err();
        assert!(err.contains("operator uid \"count\""), "{err}");
        assert!(err.contains("--allow-non-restored-state"), "{err}");
        assert_eq!(
            fits(&meta, &renamed, true),
            Ok(()),
            "its state may be let go"
        );
        // Sources and sinks are matched by name: one renamed would start over.
        let mut renamed = spec("j", 2, 2);
        renamed.vertices[0].name = "events".into();
        let err = fits(&meta, &renamed, false).unwrap_err();
        assert!(
            err.contains("position in its input of source \"gen\""),
            "{err}"
        );
        assert_eq!(fits(&meta, &renamed, true), Ok(()), "it may be let go");
        let mut renamed = spec("j", 2, 2);
        renamed.vertices[2].name = "discarded".into();
        assert_eq!(
            fits(&meta, &renamed, false),
            Ok(()),
            "a sink without output to commit may be renamed"
        );
        let mut with_output = meta.clone();
        with_output.vertices[2].subtasks = vec![
            SubtaskState::Sink {
                state: serde_json::json!({ "pending": ["part-0-3"] })
            };
            2
        ];
        let err = fits(&with_output, &renamed, false).unwrap_err();
        assert!(
            err.contains("pre-committed output of sink \"out\""),
            "{err}"
        );
        let savepoint = Metadata {
            savepoint: true,
            ..meta.clone()
        };
        assert_eq!(
            fits(&savepoint, &spec("other", 2, 2), false),
            Ok(()),
            "a savepoint restores into a job of another name"
        );
        let mut wider = spec("j", 2, 2);
        wider.max_parallelism = 256;
        assert!(
            fits(&meta, &wider, false)
                .unwrap_err()
                .contains("max_parallelism")
        );
    }

    /// Records in flight to the count operator at parallelism 2: subtask 0 recorded keyed
    /// records `k0..k99` (those of odd `i` to the operator's second input), subtask 1 records
    /// without a key.
    fn in_flight_checkpoint(dir: &Path) -> Restored {
        let taken = spec("j", 2, 2);
        let mut meta = meta_of(&taken, false);
        let store = storage::CheckpointStore::open(dir, "j").unwrap();
        for subtask in 0..2u32 {
            let mut records = weir_wire::OutputWriter::default();
            for i in 0..100 {
                let key = format!("k{i}");
                records.push(
                    (subtask == 0 && i % 2 == 1).then_some(SECOND_INPUT),
                    &weir_wire::RecordRef {
                        kind: weir_wire::Kind::Insert,
                        key: (subtask == 0).then_some(key.as_bytes()),
                        timestamp: Some(i),
                        value: key.as_bytes(),
                    },
                );
            }
            let file = store
                .write_state(1, &format!("in-{subtask}"), records.as_bytes(), (0, 0))
                .unwrap();
            meta.vertices[1].in_flight.push(storage::InFlightFile {
                subtask,
                records: 100,
                file,
            });
        }
        Restored {
            dir: store.dir_of(1),
            meta,
        }
    }

    fn values(batches: &[(u8, Batch)]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
        batches
            .iter()
            .flat_map(|(_, b)| b.iter())
            .map(|r| (r.key.map(<[u8]>::to_vec), r.value.to_vec()))
            .collect()
    }

    #[test]
    fn records_in_flight_go_back_to_their_subtask_or_by_key_group_when_rescaled() {
        let dir = tempfile::tempdir().unwrap();
        let restored = in_flight_checkpoint(dir.path());
        let same = spec("j", 2, 2);
        let batches = restored.in_flight(&same, 1, 0).unwrap();
        let own = values(&batches);
        assert_eq!(own.len(), 100, "subtask 0 gets what it recorded, in order");
        assert_eq!(own[7], (Some(b"k7".to_vec()), b"k7".to_vec()));
        let inputs: Vec<u8> = (batches.iter())
            .flat_map(|(input, b)| b.iter().map(|_| *input))
            .collect();
        let expected: Vec<u8> = (0..100).map(|i| (i % 2) as u8).collect();
        assert_eq!(
            inputs, expected,
            "each record goes back to the input it came to"
        );
        assert!(
            values(&restored.in_flight(&same, 1, 1).unwrap())
                .iter()
                .all(|(k, _)| k.is_none())
        );
        assert!(
            restored.in_flight(&same, 0, 0).unwrap().is_empty(),
            "the source has none"
        );

        let wider = spec("j", 2, 3);
        let mut keyed = Vec::new();
        let mut unkeyed = 0;
        for s in 0..3 {
            let groups = key_group_range(wider.max_parallelism, 3, s);
            for (key, _) in values(&restored.in_flight(&wider, 1, s).unwrap()) {
                match key {
                    Some(key) => {
                        assert!(groups.contains(&key_group(&key, wider.max_parallelism)));
                        keyed.push(key);
                    }
                    // Old subtask 1's records go to new subtask 1 % 3.
                    None => {
                        assert_eq!(s, 1);
                        unkeyed += 1;
                    }
                }
            }
        }
        keyed.sort();
        let mut all: Vec<Vec<u8>> = (0..100).map(|i| format!("k{i}").into_bytes()).collect();
        all.sort();
        assert_eq!(keyed, all, "every keyed record goes to exactly one subtask");
        assert_eq!(unkeyed, 100);
    }
}
