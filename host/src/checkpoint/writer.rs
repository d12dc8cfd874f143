//! The checkpoint writer: takes the snapshots of tasks off their threads and writes them, state
//! files after the shared files they refer to, each synced, so that a checkpoint's metadata
//! names only files that are complete.

use std::time::Duration;

use crossbeam_channel::Receiver;

use super::CheckpointError;
use super::coordinator::TaskId;
use super::storage::{CheckpointStore, InFlightFile, SubtaskState};
use crate::operator::Snapshot;

/// A task's snapshot for checkpoint `id`, on its way to the writer.
#[derive(Debug)]
pub(crate) struct TaskSnapshot {
    pub id: u64,
    pub task: TaskId,
    pub alignment: Duration,
    /// The synchronous part: copying the state (and a sink's pre-commit).
    pub sync: Duration,
    pub parts: Vec<Part>,
    /// The records in flight of an unaligned checkpoint, to be replayed into `vertex` on
    /// restore (see `runtime::barrier`).
    pub in_flight: Option<InFlight>,
}

/// The records a task's inputs delivered between its snapshot and their barriers, in the
/// output encoding of `wit/stream.wit` (a restore reads them back with `OutputReader`).
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The vertex that reads the task's inputs.
    pub vertex: usize,
    pub records: u64,
    pub bytes: Vec<u8>,
}

/// The snapshot of one vertex of the chain.
#[derive(Debug)]
pub(crate) struct Part {
    pub vertex: usize,
    pub state: PartState,
}

#[derive(Debug)]
pub(crate) enum PartState {
    Source(serde_json::Value),
    Operator {
        /// Keyed state and timers.
        keyed: Option<Snapshot>,
        /// Non-keyed operator state.
        operator: Option<Vec<u8>>,
        /// The last watermark the operator was told.
        watermark: Option<i64>,
    },
    Sink(serde_json::Value),
}

/// What a task's snapshot became: the files written for it, for the checkpoint's metadata and
/// history.
#[derive(Debug)]
pub(crate) struct Written {
    /// `(vertex, state, bytes written)` for each vertex of the task's chain.
    pub parts: Vec<(usize, SubtaskState, u64)>,
    pub alignment: Duration,
    pub sync: Duration,
    /// Bytes written for the checkpoint (state files and newly shared files).
    pub bytes: u64,
    /// Bytes of the state it consists of, shared files written earlier included.
    pub full_bytes: u64,
    /// The file of the records in flight, for the vertex that reads them.
    pub in_flight: Option<(usize, InFlightFile)>,
}

/// The writer thread's loop: writes each task snapshot's files into `store` (the vertices of
/// the job are named `vertices`), then tells `done` how it went; ends when the snapshots end or
/// `done` returns `false`.
pub(crate) fn write_snapshots(
    store: &CheckpointStore,
    vertices: &[String],
    snapshots: &Receiver<TaskSnapshot>,
    mut done: impl FnMut(u64, TaskId, Result<Written, CheckpointError>) -> bool,
) {
    for snap in snapshots {
        let (id, task) = (snap.id, snap.task);
        if !done(id, task, write_one(store, vertices, snap)) {
            return;
        }
    }
}

fn write_one(
    store: &CheckpointStore,
    vertices: &[String],
    snap: TaskSnapshot,
) -> Result<Written, CheckpointError> {
    let mut acked = Written {
        parts: Vec::with_capacity(snap.parts.len()),
        alignment: snap.alignment,
        sync: snap.sync,
        bytes: 0,
        full_bytes: 0,
        in_flight: None,
    };
    if let Some(in_flight) = snap.in_flight {
        let v = in_flight.vertex;
        let name = state_file_name(v, &vertices[v], snap.task.subtask);
        let file = store.write_state(
            snap.id,
            &format!("{name}.inflight"),
            &in_flight.bytes,
            (0, 0),
        )?;
        acked.bytes += file.size;
        acked.full_bytes += file.size;
        let file = InFlightFile {
            subtask: snap.task.subtask,
            records: in_flight.records,
            file,
        };
        acked.in_flight = Some((v, file));
    }
    for part in snap.parts {
        let mut written = 0;
        let state = match part.state {
            PartState::Source(position) => SubtaskState::Source { position },
            PartState::Sink(state) => SubtaskState::Sink { state },
            PartState::Operator {
                keyed,
                operator,
                watermark,
            } => {
                let name = state_file_name(part.vertex, &vertices[part.vertex], snap.task.subtask);
                let mut shared = (0, 0);
                let state = match keyed {
                    Some(snapshot) => {
                        let (file, uploaded) =
                            store.write_keyed_state(snap.id, &name, &snapshot)?;
                        shared = uploaded;
                        Some(file)
                    }
                    None => None,
                };
                let operator_state = match operator {
                    Some(bytes) => {
                        Some(store.write_state(snap.id, &format!("{name}.op"), &bytes, (0, 0))?)
                    }
                    None => None,
                };
                let files = state
                    .iter()
                    .chain(&operator_state)
                    .map(|f| f.size)
                    .sum::<u64>();
                written = files + shared.0;
                acked.full_bytes += files + shared.1;
                SubtaskState::Operator {
                    state,
                    operator_state,
                    watermark,
                }
            }
        };
        acked.bytes += written;
        acked.parts.push((part.vertex, state, written));
    }
    Ok(acked)
}

/// `<index>-<vertex name>-<subtask>`, with anything but letters, digits, `-` and `_` in the
/// name replaced (the index keeps replaced names apart).
fn state_file_name(index: usize, name: &str, subtask: u32) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{index}-{safe}-{subtask}")
}
