//! What happens in a job's life ([`JobEvent`]) and how it ended ([`JobEnd`]).

use std::path::PathBuf;
use std::time::Duration;

use crossbeam_channel::Sender;

use super::JobError;
use crate::checkpoint::storage::Completion;
#[cfg(doc)]
use crate::operator::FailureKind;

/// How a job ended without failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnd {
    /// Its input was exhausted, everything was processed and the sinks committed it all.
    Finished,
    /// An earlier run finished the job (see [`Completion`]); nothing ran. A fresh start
    /// ([`RestoreFrom::Fresh`](crate::checkpoint::RestoreFrom::Fresh)) runs it again.
    AlreadyFinished(Completion),
    /// Stopped on request ([`JobControl::stop`](super::JobControl::stop)). With checkpoints, at `checkpoint`, the newest
    /// complete one (`None`: none had completed), from which the next start resumes; sinks have
    /// committed everything up to it. `problem` says why that is not the stop's own checkpoint
    /// (it failed, or the job was failing). Without checkpoints, the sources ended their input
    /// early and what they had read was processed to the end (drained).
    Stopped {
        /// The checkpoint it stopped at.
        checkpoint: Option<u64>,
        /// Why it is not the stop's own checkpoint.
        problem: Option<String>,
    },
}

/// What happens in a job's life, as it happens: for a user to read and for a service to
/// record. See [`RunningJob::events`](super::RunningJob::events).
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// An attempt starts, from the beginning of the input or from a checkpoint (its id and
    /// directory). `restart` counts the restarts before it.
    Starting {
        /// The checkpoint it resumes from, and its directory.
        restored_from: Option<(u64, PathBuf)>,
        /// Restarts so far.
        restart: u32,
    },
    /// A stop was asked for: the job stops at checkpoint `checkpoint` once it completes
    /// (`None`: without checkpoints, the sources end their input and the job drains).
    Stopping {
        /// The checkpoint it stops at.
        checkpoint: Option<u64>,
    },
    /// A task failed with `failure`: the job's tasks are being stopped; then the job
    /// restarts ([`JobEvent::Restarting`]) or fails.
    Failing {
        /// The failure.
        failure: Failure,
    },
    /// The job failed with `failure` and restarts (restart number `restart`) after `delay`.
    Restarting {
        /// The failure.
        failure: Failure,
        /// How long it waits before the restart.
        delay: Duration,
        /// Restarts so far.
        restart: u32,
    },
}

/// A failure of a job, for its exception history: what happened and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The whole message, naming the vertex.
    pub message: String,
    /// The vertex that failed, if one did.
    pub vertex: Option<String>,
    /// Its uid, for an operator.
    pub uid: Option<String>,
    /// The subtask that failed.
    pub subtask: Option<u32>,
    /// What kind of failure (`trap`, `deadline`, `limit:memory`, ...; see [`FailureKind`]).
    pub kind: Option<String>,
}

impl Failure {
    /// The failure `error` describes (the last failure, when restarts ran out).
    pub fn of(error: &JobError) -> Failure {
        let (vertex, uid, subtask, kind) = match error {
            JobError::Restarts(exhausted) => {
                let inner = Failure::of(&exhausted.cause);
                (inner.vertex, inner.uid, inner.subtask, inner.kind)
            }
            JobError::Task {
                name,
                uid,
                subtask,
                kind,
                ..
            } => (
                Some(name.clone()),
                uid.clone(),
                Some(*subtask),
                Some(kind.to_string()),
            ),
            JobError::Component { name, uid, .. } => (
                Some(name.clone()),
                Some(uid.clone()),
                None,
                Some("component".to_string()),
            ),
            _ => (None, None, None, None),
        };
        Failure {
            message: error.to_string(),
            vertex,
            uid,
            subtask,
            kind,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The sending side of a job's events; events nobody reads are dropped beyond a bound.
#[derive(Debug, Clone)]
pub(crate) struct Events(pub(super) Sender<JobEvent>);

impl Events {
    pub(crate) fn send(&self, event: JobEvent) {
        let _ = self.0.try_send(event);
    }
}
