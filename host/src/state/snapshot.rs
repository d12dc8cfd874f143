//! The snapshot of one operator subtask's keyed state and timers: one byte string, laid out
//! by key group so that a later restore at another parallelism can take just the groups it
//! owns.
//!
//! ```text
//! magic "WEIRKS01"
//! u32 first group, u32 end group
//! u32 states; per state: name, kind u8, ttl flag u8 [ttl_ms i64, update u8, visibility u8, event_time u8]
//! per key group: u32 group
//!     per state: u32 entries; value: key, value | list: key, u32 n, n elems | map: key, u32 n, n (k, v)
//!     u32 timers; per timer: domain u8, timestamp i64, key
//! ```
//!
//! Integers are little-endian and byte strings length-prefixed, as in `weir-wire`. The file's
//! checksum lives in the checkpoint metadata; this reader still bounds every count by the
//! bytes left, so a damaged file fails with an error, never a huge allocation.

use std::collections::BTreeMap;

use weir_wire::{DecodeError, Reader, TimeDomain, put_bytes, put_i64, put_u8, put_u32};

use super::{KeyGroupIndex, KeyedState, StateKind, Table, Ttl, TtlUpdate, TtlVisibility};
use crate::runtime::key_group::key_group;

const MAGIC: &[u8; 8] = b"WEIRKS01";
const OPERATOR_MAGIC: &[u8; 8] = b"WEIROS01";

/// Non-keyed operator state of one subtask: a byte string per name.
pub type OperatorStates = BTreeMap<String, Vec<u8>>;

/// The snapshot of operator state: magic `WEIROS01`, u32 count, then name and value each.
pub fn snapshot_operator_states(states: &OperatorStates) -> Vec<u8> {
    let mut out = OPERATOR_MAGIC.to_vec();
    put_u32(&mut out, states.len() as u32);
    for (name, value) in states {
        put_bytes(&mut out, name.as_bytes());
        put_bytes(&mut out, value);
    }
    out
}

/// Reads what [`snapshot_operator_states`] wrote.
pub fn restore_operator_states(bytes: &[u8]) -> Result<OperatorStates, SnapshotError> {
    let body = bytes
        .strip_prefix(OPERATOR_MAGIC)
        .ok_or(SnapshotError::Magic)?;
    let mut r = Reader::new(body, "operator-state snapshot");
    let mut states = OperatorStates::new();
    for _ in 0..r.count(8)? {
        let name = std::str::from_utf8(r.bytes()?)
            .map_err(|_| SnapshotError::Invalid("an operator state name is not UTF-8".into()))?;
        states.insert(name.to_string(), r.bytes()?.to_vec());
    }
    if !r.is_empty() {
        return Err(SnapshotError::Invalid(
            "trailing bytes after the last operator state".into(),
        ));
    }
    Ok(states)
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
    /// Appends the snapshot of every state and of `timers` (whose keys belong to this
    /// subtask's key groups) to `out`.
    pub fn snapshot<'a>(&self, timers: impl Iterator<Item = Timer<'a>>, out: &mut Vec<u8>) {
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
        let mut by_group: Vec<Vec<Timer<'a>>> = vec![Vec::new(); self.groups.len()];
        for t in timers {
            let g = key_group(t.2, self.max_parallelism);
            if let Some(bucket) = g
                .checked_sub(self.groups.start)
                .and_then(|i| by_group.get_mut(i as usize))
            {
                bucket.push(t);
            }
        }
        for (i, group) in self.groups.clone().enumerate() {
            put_u32(out, group);
            for s in &self.states {
                match &s.table {
                    Table::Value(t) => {
                        put_u32(out, t[i].len() as u32);
                        for (k, v) in t[i].iter() {
                            put_bytes(out, k);
                            put_bytes(out, v);
                        }
                    }
                    Table::List(t) => {
                        put_u32(out, t[i].len() as u32);
                        for (k, list) in &t[i] {
                            put_bytes(out, k);
                            put_u32(out, list.len() as u32);
                            for e in list {
                                put_bytes(out, e);
                            }
                        }
                    }
                    Table::Map(t) => {
                        put_u32(out, t[i].len() as u32);
                        for (k, map) in &t[i] {
                            put_bytes(out, k);
                            put_u32(out, map.len() as u32);
                            for (mk, mv) in map {
                                put_bytes(out, mk);
                                put_bytes(out, mv);
                            }
                        }
                    }
                }
            }
            put_u32(out, by_group[i].len() as u32);
            for (domain, ts, key) in &by_group[i] {
                put_u8(out, *domain as u8);
                put_i64(out, *ts);
                put_bytes(out, key);
            }
        }
    }

    /// Adds the entries of `snapshot` that belong to this subtask's key groups (the snapshot
    /// may come from a subtask of another parallelism), declaring its states, and hands each
    /// of those groups' timers to `timer`.
    pub fn restore(
        &mut self,
        snapshot: &[u8],
        mut timer: impl FnMut(Timer<'_>),
    ) -> Result<(), SnapshotError> {
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
            ids.push(self.declare(&name, kind, ttl)?);
        }
        for _ in first..end {
            let group = r.u32()?;
            let mine = self.groups.contains(&group);
            let g = KeyGroupIndex(group.wrapping_sub(self.groups.start) as usize);
            for &id in &ids {
                let entries = r.count(8)?;
                for _ in 0..entries {
                    let key = r.bytes()?;
                    match &mut self.states[id.0].table {
                        Table::Value(t) => {
                            let v = r.bytes()?;
                            if mine {
                                t[g.0].set(key, v);
                            }
                        }
                        Table::List(t) => {
                            let n = r.count(4)?;
                            let mut list = Vec::with_capacity(n);
                            for _ in 0..n {
                                list.push(r.bytes()?.to_vec());
                            }
                            if mine {
                                t[g.0].insert(key.into(), list);
                            }
                        }
                        Table::Map(t) => {
                            let n = r.count(8)?;
                            let mut map = super::MapEntries::new();
                            for _ in 0..n {
                                map.insert(r.bytes()?.to_vec(), r.bytes()?.to_vec());
                            }
                            if mine {
                                t[g.0].insert(key.into(), map);
                            }
                        }
                    }
                }
            }
            let timers = r.count(13)?;
            for _ in 0..timers {
                let domain = match r.u8()? {
                    0 => TimeDomain::EventTime,
                    _ => TimeDomain::ProcessingTime,
                };
                let (ts, key) = (r.i64()?, r.bytes()?);
                if mine {
                    timer((domain, ts, key));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::key_group::key_group_range;

    fn sample(groups: std::ops::Range<u32>) -> KeyedState {
        let mut s = KeyedState::new(128, groups);
        let v = s.declare("v", StateKind::Value, None).unwrap();
        let l = s.declare("l", StateKind::List, None).unwrap();
        let ttl = Ttl {
            ttl_ms: 60_000,
            update: TtlUpdate::OnReadAndWrite,
            visibility: TtlVisibility::ReturnExpiredIfNotCleanedUp,
            event_time: true,
        };
        let m = s.declare("m", StateKind::Map, Some(ttl)).unwrap();
        for i in 0..500u32 {
            let key = format!("key-{i}");
            let Ok(g) = s.locate(v, key.as_bytes()) else {
                continue;
            };
            s.set_value(v, g, key.as_bytes(), &i.to_le_bytes());
            s.extend_list(l, g, key.as_bytes(), false, [&b"a"[..], key.as_bytes()]);
            s.put_map(m, g, key.as_bytes(), b"x", key.as_bytes());
        }
        s
    }

    /// Every entry as `(state, key, rendered value)`, sorted.
    fn dump(s: &KeyedState) -> Vec<(String, Vec<u8>, String)> {
        let mut out = Vec::new();
        for (i, d) in s.states.iter().enumerate() {
            let id = super::super::StateId(i);
            for key in s.keys(id) {
                let g = s.locate(id, key).unwrap();
                let rendered = match d.kind {
                    StateKind::Value => format!("{:?}", s.value(id, g, key)),
                    StateKind::List => format!("{:?}", s.list(id, g, key)),
                    StateKind::Map => format!("{:?}", s.map(id, g, key)),
                };
                out.push((d.name.clone(), key.to_vec(), rendered));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_snapshot_restores_every_state_and_timer() {
        let s = sample(0..128);
        let timers = [
            (TimeDomain::EventTime, 10, &b"key-1"[..]),
            (TimeDomain::ProcessingTime, -5, &b"key-2"[..]),
        ];
        let mut bytes = Vec::new();
        s.snapshot(timers.iter().copied(), &mut bytes);
        let mut back = KeyedState::new(128, 0..128);
        let mut got = Vec::new();
        back.restore(&bytes, |(d, ts, k)| got.push((d, ts, k.to_vec())))
            .unwrap();
        assert_eq!(dump(&back), dump(&s));
        assert_eq!(dump(&s).len(), 1500);
        got.sort();
        assert_eq!(
            got,
            vec![
                (TimeDomain::EventTime, 10, b"key-1".to_vec()),
                (TimeDomain::ProcessingTime, -5, b"key-2".to_vec())
            ]
        );
        assert_eq!(back.states[2].ttl, s.states[2].ttl, "TTL survives");
    }

    #[test]
    fn a_subtask_of_another_parallelism_takes_only_its_key_groups() {
        let whole = sample(0..128);
        let mut bytes = Vec::new();
        whole.snapshot(std::iter::empty(), &mut bytes);
        let mut halves = Vec::new();
        for sub in 0..2 {
            let mut part = KeyedState::new(128, key_group_range(128, 2, sub));
            part.restore(&bytes, |_| {}).unwrap();
            halves.extend(dump(&part));
        }
        halves.sort();
        assert_eq!(halves, dump(&whole));
    }

    #[test]
    fn damaged_snapshots_fail_cleanly() {
        let mut bytes = Vec::new();
        sample(0..128).snapshot(std::iter::empty(), &mut bytes);
        let mut s = KeyedState::new(128, 0..128);
        assert!(matches!(
            s.restore(b"nonsense", |_| {}),
            Err(SnapshotError::Magic)
        ));
        for cut in [9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut s = KeyedState::new(128, 0..128);
            assert!(s.restore(&bytes[..cut], |_| {}).is_err(), "cut at {cut}");
        }
        // A huge count must not allocate: it is bounded by the bytes left.
        let mut evil = MAGIC.to_vec();
        evil.extend_from_slice(&[0, 0, 0, 0, 128, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]);
        assert!(s.restore(&evil, |_| {}).is_err());
    }

    #[test]
    fn operator_states_round_trip_and_damage_is_an_error() {
        let mut states = OperatorStates::new();
        states.insert("total".into(), vec![7, 0, 1]);
        states.insert("empty".into(), Vec::new());
        let bytes = snapshot_operator_states(&states);
        assert_eq!(restore_operator_states(&bytes).unwrap(), states);
        assert!(restore_operator_states(&bytes[..bytes.len() - 1]).is_err());
        let mut keyed = Vec::new();
        sample(0..128).snapshot(std::iter::empty(), &mut keyed);
        assert!(matches!(
            restore_operator_states(&keyed),
            Err(SnapshotError::Magic)
        ));
    }

    #[test]
    fn a_restored_state_keeps_its_kind() {
        let mut bytes = Vec::new();
        sample(0..128).snapshot(std::iter::empty(), &mut bytes);
        let mut s = KeyedState::new(128, 0..128);
        s.restore(&bytes, |_| {}).unwrap();
        let err = s.declare("v", StateKind::List, None).unwrap_err();
        assert!(matches!(err, super::super::StateError::KindMismatch { .. }));
    }
}
