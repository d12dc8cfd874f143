//! Savepoints: checkpoints a user asks for, in the canonical format, copied out of the job's
//! checkpoint directory into one of the user's own, where no retention deletes them.
//!
//! [`JobControl::savepoint`](super::JobControl::savepoint) queues a [`Request`]; the attempt's
//! checkpoint loop triggers it at once (it is a checkpoint like any other for barriers and
//! two-phase-commit sinks, which commit at it) and, once complete, exports it and answers the
//! [`SavepointHandle`].

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use crossbeam_channel::{Receiver, Sender};

/// A completed savepoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Savepoint {
    /// Its directory, which `weir run --from-savepoint` restores.
    pub path: PathBuf,
    /// The checkpoint it was taken as.
    pub checkpoint: u64,
    /// The bytes of its files.
    pub size_bytes: u64,
}

/// Why a savepoint was not taken; the job goes on (unless it was a stop's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SavepointFailed(pub String);

/// The answer to a savepoint request, once there is one.
#[derive(Debug)]
pub struct SavepointHandle {
    answer: Receiver<Result<Savepoint, SavepointFailed>>,
    got: OnceLock<Result<Savepoint, SavepointFailed>>,
}

impl SavepointHandle {
    /// Waits for the savepoint to complete or fail.
    pub fn wait(self) -> Result<Savepoint, SavepointFailed> {
        if let Some(answer) = self.got.into_inner() {
            return answer;
        }
        self.answer.recv().unwrap_or_else(|_| Err(lost()))
    }

    /// The answer, once there is one; `None` while the savepoint is in progress.
    pub fn poll(&self) -> Option<Result<Savepoint, SavepointFailed>> {
        if let Some(answer) = self.got.get() {
            return Some(answer.clone());
        }
        let answer = match self.answer.try_recv() {
            Ok(answer) => answer,
            Err(crossbeam_channel::TryRecvError::Empty) => return None,
            Err(crossbeam_channel::TryRecvError::Disconnected) => Err(lost()),
        };
        Some(self.got.get_or_init(|| answer).clone())
    }
}

fn lost() -> SavepointFailed {
    SavepointFailed(ENDED.into())
}

/// A savepoint asked for and not yet answered.
#[derive(Debug)]
pub(crate) struct Request {
    /// Where it goes.
    pub dir: PathBuf,
    reply: Sender<Result<Savepoint, SavepointFailed>>,
}

impl Request {
    pub(crate) fn new(dir: PathBuf) -> (Request, SavepointHandle) {
        let (reply, answer) = crossbeam_channel::bounded(1);
        (
            Request { dir, reply },
            SavepointHandle {
                answer,
                got: OnceLock::new(),
            },
        )
    }

    pub(crate) fn complete(self, savepoint: Savepoint) {
        tracing::info!(
            "savepoint {} complete at {} ({} bytes)",
            savepoint.checkpoint,
            savepoint.path.display(),
            savepoint.size_bytes
        );
        let _ = self.reply.send(Ok(savepoint));
    }

    pub(crate) fn fail(self, why: impl Into<String>) {
        let why = why.into();
        tracing::warn!("savepoint to {} failed: {why}", self.dir.display());
        let _ = self.reply.send(Err(SavepointFailed(why)));
    }
}

/// The savepoints asked of a job and not yet triggered, and the one its stop is to take.
#[derive(Debug, Default)]
pub(crate) struct Requests(Mutex<Queued>);

#[derive(Debug, Default)]
struct Queued {
    triggered: Vec<Request>,
    stop: Option<Request>,
    /// The job has ended: a request now fails at once.
    ended: bool,
}

impl Requests {
    pub(crate) fn push(&self, request: Request) {
        let mut q = self.lock();
        if q.ended {
            request.fail(ENDED);
        } else {
            q.triggered.push(request);
        }
    }

    pub(crate) fn take(&self) -> Vec<Request> {
        std::mem::take(&mut self.lock().triggered)
    }

    /// Sets the savepoint the stop takes; a second stop's request replaces (and fails) the
    /// first's.
    pub(crate) fn set_stop(&self, request: Request) {
        let mut q = self.lock();
        if q.ended {
            request.fail(ENDED);
        } else if let Some(old) = q.stop.replace(request) {
            old.fail("another stop with a savepoint was asked for");
        }
    }

    pub(crate) fn take_stop(&self) -> Option<Request> {
        self.lock().stop.take()
    }

    /// Fails every request still waiting.
    pub(crate) fn fail_all(&self, why: &str) {
        for r in self.take().into_iter().chain(self.take_stop()) {
            r.fail(why);
        }
    }

    /// The job has ended: fails every request still waiting, and those that come later.
    pub(crate) fn end(&self) {
        let mut q = self.lock();
        q.ended = true;
        for r in std::mem::take(&mut q.triggered)
            .into_iter()
            .chain(q.stop.take())
        {
            r.fail(ENDED);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

const ENDED: &str = "the job ended before the savepoint was taken";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savepoints_waiting_or_asked_for_when_the_job_has_ended_fail() {
        let requests = Requests::default();
        let (waiting, before) = Request::new("a".into());
        requests.push(waiting);
        assert!(before.poll().is_none());
        requests.end();
        let (late, after) = Request::new("b".into());
        requests.push(late);
        let (stop, at_stop) = Request::new("c".into());
        requests.set_stop(stop);
        for handle in [before, after, at_stop] {
            assert_eq!(handle.poll(), Some(Err(SavepointFailed(ENDED.into()))));
        }
        assert!(requests.take().is_empty() && requests.take_stop().is_none());
    }
}
