//! Records that wait in a list state of their key with their timestamps, for the host's
//! windows (a process-window function's records) and window joins: appended once per record,
//! not once per window it is in, read when one of the key's windows fires, and dropped when
//! no window holds them any more. So a batch costs what it adds, not what its windows hold
//! (kept in the window's entry, every record of a window was rewritten by each batch that
//! added to it).

use std::ops::Range;

use weir_wire::{ListWrite, Reader, put_list_op};

use super::failed;
use crate::operator::OperatorError;
use crate::state::{KeyedState, Slots, StateId};

/// One key's waiting records in arrival order, borrowed from a load: each its timestamp and
/// its element, the timestamp's 8 bytes and then the value ([`value`]).
pub(super) type Waiting<'b> = Vec<(i64, &'b [u8])>;

/// The value of a waiting record's element.
pub(super) fn value(element: &[u8]) -> &[u8] {
    &element[8..]
}

/// Each slot's waiting records in list state `id`.
pub(super) fn load<'b>(
    state: &mut KeyedState,
    id: StateId,
    slots: &Slots,
    buf: &'b mut Vec<u8>,
) -> Result<Vec<Waiting<'b>>, OperatorError> {
    state.load(id, slots, usize::MAX, buf).map_err(failed)?;
    let bad = |e: weir_wire::DecodeError| OperatorError::Contract(e.to_string());
    let mut r = Reader::new(buf, "waiting records");
    let mut all = Vec::with_capacity(slots.len());
    for _ in 0..slots.len() {
        let n = r.u32().map_err(bad)?;
        let mut records = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let e = r.bytes().map_err(bad)?;
            let ts = e.first_chunk::<8>().ok_or_else(|| {
                OperatorError::Contract("a waiting record of another layout".into())
            })?;
            records.push((i64::from_le_bytes(*ts), e));
        }
        all.push(records);
    }
    Ok(all)
}

/// A batch's records to append to their keys' lists.
#[derive(Debug, Default)]
pub(super) struct Appends {
    /// Each record's slot and its element in `elements`, in arrival order.
    added: Vec<(u32, Range<usize>)>,
    elements: Vec<u8>,
}

impl Appends {
    pub(super) fn push(&mut self, slot: u32, ts: i64, value: &[u8]) {
        let at = self.elements.len();
        self.elements.extend_from_slice(&ts.to_le_bytes());
        self.elements.extend_from_slice(value);
        self.added.push((slot, at..self.elements.len()));
    }

    /// Appends them to list state `id`, one append per key, and forgets them.
    pub(super) fn store(
        &mut self,
        state: &mut KeyedState,
        id: StateId,
        slots: &Slots,
    ) -> Result<(), OperatorError> {
        if self.added.is_empty() {
            return Ok(());
        }
        // Stable: a key's records stay in arrival order.
        self.added.sort_by_key(|(slot, _)| *slot);
        let mut changes = Vec::new();
        for run in self.added.chunk_by(|a, b| a.0 == b.0) {
            let elems = run.iter().map(|(_, at)| &self.elements[at.clone()]);
            put_list_op(&mut changes, run[0].0, ListWrite::Append, elems);
        }
        self.added.clear();
        self.elements.clear();
        state.store(id, slots, &changes, u64::MAX).map_err(failed)
    }
}

/// Keeps the records of `slot`'s key at the times `keep` holds: adds the list's change to
/// `changes` (a list store buffer) when some go.
pub(super) fn retain(
    changes: &mut Vec<u8>,
    slot: u32,
    records: &Waiting<'_>,
    keep: impl Fn(i64) -> bool,
) {
    let kept: Vec<&[u8]> = (records.iter())
        .filter(|&&(ts, _)| keep(ts))
        .map(|&(_, e)| e)
        .collect();
    match kept.len() {
        n if n == records.len() => {}
        0 => put_list_op(changes, slot, ListWrite::Clear, std::iter::empty()),
        _ => put_list_op(changes, slot, ListWrite::Replace, kept.into_iter()),
    }
}

/// Applies `changes` (of [`retain`]) to list state `id`.
pub(super) fn store_changes(
    state: &mut KeyedState,
    id: StateId,
    slots: &Slots,
    changes: &[u8],
) -> Result<(), OperatorError> {
    if changes.is_empty() {
        return Ok(());
    }
    state.store(id, slots, changes, u64::MAX).map_err(failed)
}
