//! What happens in a job's life ([`JobEvent`]) and how it ended ([`JobEnd`]).

use std::path::PathBuf;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::checkpoint::storage::Completion;

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
    /// The job failed with `cause` and restarts (restart number `restart`) after `delay`.
    Restarting {
        /// The failure.
        cause: String,
        /// How long it waits before the restart.
        delay: Duration,
        /// Restarts so far.
        restart: u32,
    },
}

/// The sending side of a job's events; events nobody reads are dropped beyond a bound.
#[derive(Debug, Clone)]
pub(crate) struct Events(pub(super) Sender<JobEvent>);

impl Events {
    pub(crate) fn send(&self, event: JobEvent) {
        let _ = self.0.try_send(event);
    }
}
