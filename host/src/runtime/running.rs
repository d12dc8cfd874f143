//! A started job ([`RunningJob`]): watching it, stopping or cancelling it ([`JobControl`]),
//! waiting for its end ([`JobSummary`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::savepoint::{Request, Requests, SavepointHandle};
use super::upgrade::{self, Upgrade, UpgradeHandle};
use super::{CheckpointStatus, JobEnd, JobError, JobEvent, Metrics};
use crate::role::Role;

/// Flags the tasks of one attempt look at: the attempt's own cancellation, and the job's
/// (set by the user through [`JobControl`]).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    cancelled: Arc<AtomicBool>,
    /// The job's flags; `None` in the job's own instance.
    job: Option<Arc<Shared>>,
    /// The job stops: at a stop checkpoint or, when draining (or without checkpoints), by
    /// ending its input.
    stopping: AtomicBool,
    /// A stop ends the input: sources end at the next poll and the job drains and finishes.
    draining: AtomicBool,
    /// A stop ended a source's input before the source had read it all (the job's instance
    /// only): a job that drained that way stopped, one whose sources had all ended finished.
    cut_short: AtomicBool,
    /// Savepoints asked for (the job's instance only).
    pub(super) savepoints: Requests,
    /// Upgrades asked for (the job's instance only).
    pub(super) upgrades: upgrade::Requests,
    /// The swap plans of the attempt's upgrade checkpoints (an attempt's instance only).
    pub(super) plans: upgrade::Plans,
    /// The upgrade on probation is to be rolled back (the job's instance only).
    roll_back: AtomicBool,
}

impl Shared {
    /// The flags of a new attempt of the job whose flags are `job`.
    pub(crate) fn attempt(job: &Arc<Shared>) -> Shared {
        Shared {
            job: Some(Arc::clone(job)),
            ..Shared::default()
        }
    }

    /// Makes every task of the attempt (or of the job) stop.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// The attempt's own cancellation flag, for guest calls to watch (the supervisor sets it
    /// when the user cancels the job).
    pub(crate) fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancelled)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
            || self.job.as_ref().is_some_and(|j| j.is_cancelled())
    }

    /// Whether the user cancelled the job.
    pub(crate) fn is_user_cancelled(&self) -> bool {
        match &self.job {
            Some(j) => j.is_cancelled(),
            None => self.cancelled.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed) || self.job.as_ref().is_some_and(|j| j.is_stopping())
    }

    /// Whether a rollback of the upgrade on probation was asked for since the last call.
    pub(crate) fn take_roll_back(&self) -> bool {
        let job = self.job.as_deref().unwrap_or(self);
        job.roll_back.swap(false, Ordering::SeqCst)
    }

    /// Whether a stop drains the job (ends its input) rather than stopping at a checkpoint.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed) || self.job.as_ref().is_some_and(|j| j.is_draining())
    }

    /// A source ended its input because the job stops, before it had read it all.
    pub(crate) fn cut_input_short(&self) {
        let job = self.job.as_deref().unwrap_or(self);
        job.cut_short.store(true, Ordering::SeqCst);
    }

    /// Whether a stop ended some source's input before the source had read it all.
    pub(crate) fn was_input_cut_short(&self) -> bool {
        let job = self.job.as_deref().unwrap_or(self);
        job.cut_short.load(Ordering::SeqCst)
    }
}

/// A started job.
#[derive(Debug)]
pub struct RunningJob {
    pub(super) metrics: Arc<Metrics>,
    pub(super) supervisor: JoinHandle<Result<JobEnd, JobError>>,
    pub(super) shared: Arc<Shared>,
    pub(super) events: Receiver<JobEvent>,
    pub(super) started: Instant,
    pub(super) checkpointing: bool,
}

/// Stops or cancels a running job from anywhere; see [`RunningJob::control`].
#[derive(Debug, Clone, Default)]
pub struct JobControl {
    pub(super) shared: Arc<Shared>,
}

impl JobControl {
    /// A control for a job not started yet: see [`Job::start_controlled`](super::Job::start_controlled).
    pub fn new() -> JobControl {
        JobControl::default()
    }

    /// See [`RunningJob::stop`].
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
    }

    /// See [`RunningJob::cancel`].
    pub fn cancel(&self) {
        self.shared.cancel();
    }

    /// Takes a savepoint into `dir` (which must not exist yet, or be empty): a checkpoint
    /// triggered at once, in the canonical format that either state backend restores, whose
    /// files are then copied into `dir` (Flink's triggered savepoint). Two-phase-commit sinks
    /// commit at it as at any checkpoint. The job goes on; a savepoint that fails does not
    /// fail the job. Needs a `[checkpoint]` table (its directory holds it while it is taken).
    pub fn savepoint(&self, dir: impl Into<PathBuf>) -> SavepointHandle {
        let (request, handle) = Request::new(dir.into());
        self.shared.savepoints.push(request);
        handle
    }

    /// Replaces the code (and optionally the config) of operators of the running job at a
    /// checkpoint barrier, keeping their state; rolls back by itself if the new code fails
    /// during its probation (see [`Upgrade`] and [`UpgradeOutcome`](super::UpgradeOutcome)).
    pub fn upgrade(&self, upgrade: Upgrade) -> UpgradeHandle {
        let (request, handle) = upgrade::Request::new(upgrade);
        self.shared.upgrades.push(request);
        handle
    }

    /// Rolls back the upgrade on probation, if there is one: as if its new code had failed,
    /// the job resumes with the old code from the swap checkpoint, and the upgrade's outcome
    /// is [`UpgradeOutcome::RolledBack`](super::UpgradeOutcome::RolledBack). An upgrade that
    /// is committed already is not undone: upgrade to the old code for that.
    pub fn roll_back(&self) {
        self.shared.roll_back.store(true, Ordering::SeqCst);
    }

    /// Stops the job with a savepoint into `dir` (Flink's stop-with-savepoint): as
    /// [`JobControl::stop`], and the stop checkpoint is a savepoint. With `drain` the sources
    /// end their input instead, so that the job processes what it has read and its operators
    /// close (end-of-input timers fire); the savepoint is then that of the finished job.
    pub fn stop_with_savepoint(&self, dir: impl Into<PathBuf>, drain: bool) -> SavepointHandle {
        let (request, handle) = Request::new(dir.into());
        self.shared.savepoints.set_stop(request);
        if drain {
            self.drain();
        } else {
            self.stop();
        }
        handle
    }

    /// Ends the job's input now (Flink's stop with drain): the sources end, the job
    /// processes what it has read, its operators close (end-of-input timers fire) and it
    /// finishes.
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.stop();
    }

    /// Whether a stop was asked for.
    pub fn is_stopping(&self) -> bool {
        self.shared.is_stopping()
    }
}

/// Records in and out of one vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexSummary {
    /// The vertex name.
    pub name: String,
    /// Source, operator or sink.
    pub role: Role,
    /// Records it received.
    pub records_in: u64,
    /// Records it emitted.
    pub records_out: u64,
    /// Its event-time watermark (the least of its subtasks'), once every subtask has one.
    pub watermark: Option<i64>,
    /// Of a sink that received records with timestamps: how long after them.
    pub event_time_lag: Option<super::EventTimeLag>,
    /// Of a WebAssembly operator: calls into its instances and their linear memory.
    pub guest: Option<super::GuestUsage>,
}

/// How a job that did not fail went.
#[derive(Debug, Clone)]
pub struct JobSummary {
    /// How it ended.
    pub end: JobEnd,
    /// From the start to the end.
    pub duration: Duration,
    /// Per vertex of the spec, in its order.
    pub vertices: Vec<VertexSummary>,
    /// Checkpoints and restarts.
    pub checkpoints: CheckpointStatus,
}

impl RunningJob {
    /// Its live counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Its live counters, to keep after [`RunningJob::wait`] took the job.
    pub fn shared_metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Whether the job takes checkpoints.
    pub fn checkpointing(&self) -> bool {
        self.checkpointing
    }

    /// Whether the job has ended (successfully or not).
    pub fn is_finished(&self) -> bool {
        self.supervisor.is_finished()
    }

    /// Asks every task to end now, without a checkpoint; [`RunningJob::wait`] then returns
    /// [`JobError::Cancelled`]. Output after the last checkpoint stays uncommitted.
    pub fn cancel(&self) {
        self.control().cancel();
    }

    /// Stops the job (Flink's stop-with-savepoint, without drain), the way to end a job over
    /// unbounded input. With checkpoints: sources stop reading where they are, one more
    /// checkpoint is taken, and once it completes (sinks commit everything up to it) every task
    /// ends without closing its operators, so end-of-input timers do not fire; the next start
    /// resumes from that checkpoint. Without checkpoints the sources end their input early and
    /// the job drains: what was read is processed, operators are closed and sinks flushed.
    /// [`RunningJob::wait`] returns a summary whose end is [`JobEnd::Stopped`].
    pub fn stop(&self) {
        self.control().stop();
    }

    /// The job's events so far and to come (a bounded number are kept for a reader that comes
    /// late). The channel disconnects once the job has ended.
    pub fn events(&self) -> Receiver<JobEvent> {
        self.events.clone()
    }

    /// A handle that can call [`RunningJob::stop`] or [`RunningJob::cancel`] from another
    /// thread (a signal handler, say).
    pub fn control(&self) -> JobControl {
        JobControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Waits for the job to end; the error is the failure that ended it, naming its operator.
    pub fn wait(self) -> Result<JobSummary, JobError> {
        let end = match self.supervisor.join() {
            Ok(result) => result?,
            Err(_) => return Err(JobError::Internal("the supervisor panicked".into())),
        };
        Ok(JobSummary {
            end,
            duration: self.started.elapsed(),
            vertices: self.metrics.summaries(),
            checkpoints: self.metrics.checkpoint_status(),
        })
    }
}
