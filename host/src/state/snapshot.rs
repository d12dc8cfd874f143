//! The snapshot of one operator subtask's keyed state and timers: one byte string, laid out
//! by key group so that a later restore at another parallelism can take just the groups it
//! owns.
//!
//! ```text
//! magic "WEIRKS02"
//! u32 first group, u32 end group
//! u32 states; per state: name, kind u8, ttl flag u8 [ttl_ms i64, update u8, visibility u8, event_time u8]
//! per key group: u32 group
//!     per state: u32 entries; value: key, value | list: key, u32 n, n elems | map: key, u32 n, n (k, v)
//!     u32 timers; per timer: domain u8, timestamp i64, key
//! ```
//!
//! Entries of a state with a TTL carry their stamp (see `ttl`), so a restore keeps their
//! expiry times. Integers are little-endian and byte strings length-prefixed, as in `weir-wire`. The file's
//! checksum lives in the checkpoint metadata; this reader still bounds every count by the
//! bytes left, so a damaged file fails with an error, never a huge allocation.

use std::collections::BTreeMap;
use std::path::Path;

use weir_wire::{DecodeError, Reader, TimeDomain, put_bytes, put_i64, put_u8, put_u32};

use super::rocks::{Manifest, Rocks};
use super::ttl::split;
use super::{
    Backend, Declared, KeyedState, Row, StateError, StateId, StateKind, Ttl, TtlUpdate,
    TtlVisibility,
};
use crate::key_group::key_group;
use crate::operator::{SharedFiles, SnapshotFormat};

const MAGIC: &[u8; 8] = b"WEIRKS02";
const OPERATOR_MAGIC: &[u8; 8] = b"WEIROS02";
/// The format before lists: one value per name.
const OPERATOR_MAGIC_V1: &[u8; 8] = b"WEIROS01";

/// How an operator state's list is spread over the subtasks when a restore changes the
/// parallelism (the WIT `redistribution`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Redistribution {
    /// The subtasks' lists are joined in subtask order and cut into even, contiguous parts.
    #[default]
    Split,
    /// Every subtask gets every element.
    Union,
}

/// One operator state of a subtask: its mode and its elements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorList {
    /// How it spreads at another parallelism.
    pub mode: Redistribution,
    /// Its elements, in order.
    pub elements: Vec<Vec<u8>>,
}

impl OperatorList {
    /// The bytes it holds: its elements' and what holding each takes.
    pub fn bytes(&self) -> usize {
        let each = std::mem::size_of::<Vec<u8>>();
        self.elements.iter().map(|e| e.len() + each).sum()
    }
}

/// Non-keyed operator state of one subtask: a list per name.
pub type OperatorStates = BTreeMap<String, OperatorList>;

/// The snapshot of operator state: magic `WEIROS02`, u32 count, then per state its name, mode
/// u8 (0 split, 1 union), u32 elements and each element.
pub fn snapshot_operator_states(states: &OperatorStates) -> Vec<u8> {
    let mut out = OPERATOR_MAGIC.to_vec();
    put_u32(&mut out, states.len() as u32);
    for (name, list) in states {
        put_bytes(&mut out, name.as_bytes());
        put_u8(&mut out, list.mode as u8);
        put_u32(&mut out, list.elements.len() as u32);
        for e in &list.elements {
            put_bytes(&mut out, e);
        }
    }
    out
}

/// Reads what [`snapshot_operator_states`] wrote (or the one-value-per-name format before it,
/// each value a split list of one element).
pub fn restore_operator_states(bytes: &[u8]) -> Result<OperatorStates, SnapshotError> {
    let (body, lists) = match bytes.strip_prefix(OPERATOR_MAGIC) {
        Some(body) => (body, true),
        None => (
            bytes
                .strip_prefix(OPERATOR_MAGIC_V1)
                .ok_or(SnapshotError::Magic)?,
            false,
        ),
    };
    let mut r = Reader::new(body, "operator-state snapshot");
    let mut states = OperatorStates::new();
    for _ in 0..r.count(8)? {
        let name = std::str::from_utf8(r.bytes()?)
            .map_err(|_| SnapshotError::Invalid("an operator state name is not UTF-8".into()))?
            .to_string();
        let list = if lists {
            let mode = match r.u8()? {
                0 => Redistribution::Split,
                1 => Redistribution::Union,
                m => {
                    return Err(SnapshotError::Invalid(format!(
                        "operator state \"{name}\" has an unknown redistribution mode {m}"
                    )));
                }
            };
            let n = r.count(4)?;
            let mut elements = Vec::with_capacity(n);
            for _ in 0..n {
                elements.push(r.bytes()?.to_vec());
            }
            OperatorList { mode, elements }
        } else {
            OperatorList {
                mode: Redistribution::Split,
                elements: vec![r.bytes()?.to_vec()],
            }
        };
        states.insert(name, list);
    }
    if !r.is_empty() {
        return Err(SnapshotError::Invalid(
            "trailing bytes after the last operator state".into(),
        ));
    }
    Ok(states)
}

/// The operator state subtask `subtask` of `parallelism` gets from the states `old` of the
/// subtasks that wrote them (in subtask order): its own at the same parallelism, else each
/// list spread as its mode says.
pub fn redistribute(old: &[OperatorStates], parallelism: u32, subtask: u32) -> OperatorStates {
    if old.len() == parallelism as usize {
        return old.get(subtask as usize).cloned().unwrap_or_default();
    }
    let mut joined = OperatorStates::new();
    for states in old {
        for (name, list) in states {
            let all = joined.entry(name.clone()).or_insert_with(|| OperatorList {
                mode: list.mode,
                elements: Vec::new(),
            });
            all.elements.extend(list.elements.iter().cloned());
        }
    }
    for list in joined.values_mut() {
        if list.mode == Redistribution::Split {
            let n = list.elements.len();
            let (p, s) = (parallelism as usize, subtask as usize);
            let (from, to) = (s * n / p, (s + 1) * n / p);
            list.elements = list.elements.drain(from..to).collect();
        }
    }
    joined
}

/// A keyed-state snapshot that cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a state snapshot of this kind (bad magic bytes)")]
    Magic,
    #[error("damaged keyed-state snapshot: {0}")]
    Decode(#[from] DecodeError),
    #[error("damaged keyed-state snapshot: {0}")]
    Invalid(String),
    #[error("{0}")]
    State(#[from] super::StateError),
}

/// A registered timer.
pub type Timer<'a> = (TimeDomain, i64, &'a [u8]);

impl KeyedState {
    /// Appends the full snapshot of every state and timer to `out`. Expired entries are left
    /// out (TTL's cleanup on full snapshot).
    pub fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<(), StateError> {
        on_backend!(&mut self.backend, b => b.flush())?;
        out.extend_from_slice(MAGIC);
        put_u32(out, self.groups.start);
        put_u32(out, self.groups.end);
        put_u32(out, self.states.len() as u32);
        for s in &self.states {
            put_bytes(out, s.name.as_bytes());
            put_u8(out, s.kind as u8);
            match s.ttl {
                None => put_u8(out, 0),
                Some(t) => {
                    put_u8(out, 1);
                    put_i64(out, t.ttl_ms as i64);
                    put_u8(out, t.update as u8);
                    put_u8(out, t.visibility as u8);
                    put_u8(out, u8::from(t.event_time));
                }
            }
        }
        let mut by_group: Vec<Vec<Timer<'_>>> = vec![Vec::new(); self.groups.len()];
        for t in self.timers.iter() {
            let g = key_group(t.2, self.max_parallelism);
            if let Some(bucket) = g
                .checked_sub(self.groups.start)
                .and_then(|i| by_group.get_mut(i as usize))
            {
                bucket.push(t);
            }
        }
        let nows: Vec<Option<(Ttl, i64)>> = (0..self.states.len())
            .map(|i| self.ttl(StateId(i)).map(|t| (t, self.now(&t))))
            .collect();
        for (i, group) in self.groups.clone().enumerate() {
            put_u32(out, group);
            for (st, now) in nows.iter().enumerate() {
                let live =
                    |raw: &[u8]| now.is_none_or(|(ttl, now)| !ttl.expired(split(raw).0, now));
                let mut entries = Entries::new(out);
                on_backend!(&self.backend, b => b.scan(st, group, &mut |key: &[u8], row: Row<'_>| {
                    match row {
                        Row::Value(v) if live(v) => entries.value(key, v),
                        Row::Element(e) if live(e) => entries.element(key, e, None),
                        Row::Entry(k, v) if live(v) => entries.element(key, k, Some(v)),
                        _ => {}
                    }
                }))?;
                entries.finish();
            }
            let at = out.len();
            put_u32(out, by_group[i].len() as u32);
            let mut count = by_group[i].len() as u32;
            let mut timer = |domain: TimeDomain, ts: i64, key: &[u8]| {
                put_u8(out, domain as u8);
                put_i64(out, ts);
                put_bytes(out, key);
            };
            for &(domain, ts, key) in &by_group[i] {
                timer(domain, ts, key);
            }
            self.spilled_timers(group, |domain, ts, key| {
                timer(domain, ts, key);
                count += 1;
            })?;
            out[at..at + 4].copy_from_slice(&count.to_le_bytes());
        }
        Ok(())
    }

    /// Writes checkpoint `n` of every state and timer to `out`: in the native format with
    /// RocksDB and `incremental`, a manifest of the database's files (with the timers held in
    /// memory), and returns those the checkpoint does not have yet; else a full snapshot.
    pub fn checkpoint(
        &mut self,
        n: u64,
        format: SnapshotFormat,
        out: &mut Vec<u8>,
    ) -> Result<Option<SharedFiles>, StateError> {
        if self.incremental && format == SnapshotFormat::Native {
            self.store_timer_bounds();
        }
        match &mut self.backend {
            Backend::Rocks(r) if self.incremental && format == SnapshotFormat::Native => {
                r.checkpoint(n, self.timers.iter(), out).map(Some)
            }
            Backend::Rocks(r) => {
                // The checkpoint's retention may delete the last incremental checkpoint, and
                // with it the files a next one would refer to: the next one uploads anew.
                r.forget_uploads();
                self.snapshot(out).map(|()| None)
            }
            Backend::Memory(_) => self.snapshot(out).map(|()| None),
        }
    }

    /// Checkpoint `n` completed.
    pub fn notify_complete(&mut self, n: u64) {
        if let Backend::Rocks(r) = &mut self.backend {
            r.notify_complete(n);
        }
    }

    /// Restores a keyed-state file of a checkpoint, full or incremental (whose files are in
    /// `shared`), as [`restore`](Self::restore) does.
    pub fn restore_file(&mut self, file: &[u8], shared: &Path) -> Result<(), SnapshotError> {
        let Some(manifest) = Manifest::parse(file) else {
            return self.restore(file);
        };
        let manifest = manifest?;
        self.open_rocks()?;
        let db = match &self.backend {
            Backend::Rocks(r) => r.restored(&manifest, shared)?,
            Backend::Memory(_) => Rocks::restored_apart(&manifest, shared, &self.clock)?,
        };
        let declared = db.declarations()?;
        // The checkpoint's database becomes this subtask's when it holds exactly its key
        // groups; else its full snapshot is restored from (another parallelism or backend).
        let adopt = matches!(self.backend, Backend::Rocks(_))
            && self.states.is_empty()
            && manifest.groups == self.groups;
        let mut apart;
        let target = if adopt {
            self.backend = Backend::Rocks(Box::new(db));
            &mut *self
        } else {
            apart = KeyedState::with_backend(
                self.max_parallelism,
                manifest.groups.clone(),
                Backend::Rocks(Box::new(db)),
                self.clock.clone(),
                false,
            );
            &mut apart
        };
        for (name, kind, ttl) in declared {
            let id = StateId(target.states.len());
            target.states.push(Declared {
                name: name.clone(),
                kind,
                ttl,
                restored: true,
            });
            target.by_name.insert(name, id);
        }
        // The manifest has the timers memory held, the database the others.
        target.load_timer_bounds()?;
        for &(domain, ts, key) in &manifest.timers {
            target.timers.register(domain, ts, key);
        }
        if adopt {
            return Ok(());
        }
        let mut full = Vec::new();
        target.snapshot(&mut full)?;
        self.restore(&full)
    }

    /// Adds the entries and timers of `snapshot` that belong to this subtask's key groups
    /// (the snapshot may come from a subtask of another parallelism, and of either backend),
    /// declaring its states.
    pub fn restore(&mut self, snapshot: &[u8]) -> Result<(), SnapshotError> {
        if snapshot.starts_with(b"WEIRKS01") {
            return Err(SnapshotError::Invalid(
                "it is in the keyed-state format of an older weir (WEIRKS01), which this weir \
                 no longer reads; start the job with --fresh"
                    .into(),
            ));
        }
        let body = snapshot.strip_prefix(MAGIC).ok_or(SnapshotError::Magic)?;
        let mut r = Reader::new(body, "keyed-state snapshot");
        let (first, end) = (r.u32()?, r.u32()?);
        if first > end || end > self.max_parallelism {
            return Err(SnapshotError::Invalid(format!(
                "key groups {first}..{end} do not fit max_parallelism {}",
                self.max_parallelism
            )));
        }
        let n = r.count(6)?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let name = std::str::from_utf8(r.bytes()?)
                .map_err(|_| SnapshotError::Invalid("a state name is not UTF-8".into()))?
                .to_string();
            let kind = match r.u8()? {
                0 => StateKind::Value,
                1 => StateKind::List,
                2 => StateKind::Map,
                k => return Err(SnapshotError::Invalid(format!("unknown state kind {k}"))),
            };
            let ttl = match r.u8()? {
                0 => None,
                _ => Some(Ttl {
                    ttl_ms: r.i64()? as u64,
                    update: match r.u8()? {
                        0 => TtlUpdate::OnCreateAndWrite,
                        1 => TtlUpdate::OnReadAndWrite,
                        _ => TtlUpdate::Disabled,
                    },
                    visibility: match r.u8()? {
                        0 => TtlVisibility::NeverReturnExpired,
                        _ => TtlVisibility::ReturnExpiredIfNotCleanedUp,
                    },
                    event_time: r.u8()? != 0,
                }),
            };
            let id = self.declare(&name, kind, ttl)?;
            self.states[id.0].restored = true;
            ids.push(id);
        }
        let mut elems: Vec<&[u8]> = Vec::new();
        let mut changes: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        for _ in first..end {
            let group = r.u32()?;
            let mine = self.groups.contains(&group);
            for &id in &ids {
                let st = id.0;
                for _ in 0..r.count(8)? {
                    let key = r.bytes()?;
                    match self.kind(id) {
                        StateKind::Value => {
                            let v = r.bytes()?;
                            if mine {
                                on_backend!(&mut self.backend, b => b.put_value(st, group, key, v))?;
                            }
                        }
                        StateKind::List => {
                            elems.clear();
                            for _ in 0..r.count(4)? {
                                elems.push(r.bytes()?);
                            }
                            if mine {
                                let e = elems.iter().copied();
                                on_backend!(&mut self.backend, b => b.write_list(st, group, key, false, e))?;
                            }
                        }
                        StateKind::Map => {
                            changes.clear();
                            for _ in 0..r.count(8)? {
                                changes.push((r.bytes()?, Some(r.bytes()?)));
                            }
                            if mine {
                                let c = changes.iter().copied();
                                on_backend!(&mut self.backend, b => b.write_map(st, group, key, false, c))?;
                            }
                        }
                    }
                }
            }
            self.commit()?;
            for _ in 0..r.count(13)? {
                let domain = match r.u8()? {
                    0 => TimeDomain::EventTime,
                    _ => TimeDomain::ProcessingTime,
                };
                let (ts, key) = (r.i64()?, r.bytes()?);
                if mine {
                    self.register_timer(domain, ts, key)?;
                }
            }
        }
        if !r.is_empty() {
            return Err(SnapshotError::Invalid(
                "trailing bytes after the last key group".into(),
            ));
        }
        Ok(())
    }
}

/// Writes the entries of one state in one key group: a count, then each key's entry. The
/// rows of a list or map key arrive one after another and become one entry.
struct Entries<'o> {
    out: &'o mut Vec<u8>,
    count_at: usize,
    count: u32,
    key: Vec<u8>,
    elems: Vec<u8>,
    n: u32,
}

impl<'o> Entries<'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        let count_at = out.len();
        put_u32(out, 0);
        Entries {
            out,
            count_at,
            count: 0,
            key: Vec::new(),
            elems: Vec::new(),
            n: 0,
        }
    }

    fn value(&mut self, key: &[u8], v: &[u8]) {
        put_bytes(self.out, key);
        put_bytes(self.out, v);
        self.count += 1;
    }

    /// A list element (`v` = `None`) or a map entry `(e, v)` of `key`.
    fn element(&mut self, key: &[u8], e: &[u8], v: Option<&[u8]>) {
        if self.n > 0 && self.key != key {
            self.end_key();
        }
        if self.n == 0 {
            self.key.clear();
            self.key.extend_from_slice(key);
        }
        put_bytes(&mut self.elems, e);
        if let Some(v) = v {
            put_bytes(&mut self.elems, v);
        }
        self.n += 1;
    }

    fn end_key(&mut self) {
        put_bytes(self.out, &self.key);
        put_u32(self.out, self.n);
        self.out.extend_from_slice(&self.elems);
        self.elems.clear();
        self.n = 0;
        self.count += 1;
    }

    fn finish(mut self) {
        if self.n > 0 {
            self.end_key();
        }
        let at = self.count_at;
        self.out[at..at + 4].copy_from_slice(&self.count.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_states_round_trip_and_damage_is_an_error() {
        let list = |mode, elements: &[&[u8]]| OperatorList {
            mode,
            elements: elements.iter().map(|e| e.to_vec()).collect(),
        };
        let mut states = OperatorStates::new();
        states.insert(
            "total".into(),
            list(Redistribution::Split, &[&[7, 0, 1], &[]]),
        );
        states.insert("seen".into(), list(Redistribution::Union, &[]));
        let bytes = snapshot_operator_states(&states);
        assert_eq!(restore_operator_states(&bytes).unwrap(), states);
        assert!(restore_operator_states(&bytes[..bytes.len() - 1]).is_err());
        let mut keyed = Vec::new();
        KeyedState::new(128, 0..128).snapshot(&mut keyed).unwrap();
        assert!(matches!(
            restore_operator_states(&keyed),
            Err(SnapshotError::Magic)
        ));
        // The format before lists: a value per name, read as a list of one.
        let mut v1 = OPERATOR_MAGIC_V1.to_vec();
        put_u32(&mut v1, 1);
        put_bytes(&mut v1, b"total");
        put_bytes(&mut v1, &[9]);
        let old = restore_operator_states(&v1).unwrap();
        assert_eq!(old["total"], list(Redistribution::Split, &[&[9]]));
    }

    #[test]
    fn operator_lists_are_split_or_unioned_at_another_parallelism() {
        let subtask = |split: &[u8], union: u8| {
            let mut s = OperatorStates::new();
            s.insert(
                "split".into(),
                OperatorList {
                    mode: Redistribution::Split,
                    elements: split.iter().map(|&e| vec![e]).collect(),
                },
            );
            s.insert(
                "union".into(),
                OperatorList {
                    mode: Redistribution::Union,
                    elements: vec![vec![union]],
                },
            );
            s
        };
        let old = [subtask(&[1, 2, 3], 10), subtask(&[4, 5], 11)];
        let elements = |s: &OperatorStates, name: &str| -> Vec<u8> {
            s.get(name)
                .map(|l| l.elements.iter().map(|e| e[0]).collect())
                .unwrap_or_default()
        };
        // The same parallelism: each its own.
        assert_eq!(redistribute(&old, 2, 1), old[1]);
        // Three subtasks: the five split elements in even, contiguous parts; every union
        // element to each.
        let new: Vec<OperatorStates> = (0..3).map(|s| redistribute(&old, 3, s)).collect();
        let parts: Vec<Vec<u8>> = new.iter().map(|s| elements(s, "split")).collect();
        assert_eq!(parts, vec![vec![1], vec![2, 3], vec![4, 5]]);
        for s in &new {
            assert_eq!(elements(s, "union"), vec![10, 11]);
        }
        // One subtask: everything.
        let one = redistribute(&new, 1, 0);
        assert_eq!(elements(&one, "split"), vec![1, 2, 3, 4, 5]);
        assert_eq!(elements(&one, "union"), vec![10, 11, 10, 11, 10, 11]);
    }
}
