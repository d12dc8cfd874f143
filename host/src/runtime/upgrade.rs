//! Hot deploy: new code for operators of a running job, swapped in at a checkpoint barrier
//! while the state stays in the host, and rolled back by itself when the new code fails
//! during its probation.
//!
//! [`JobControl::upgrade`](super::JobControl::upgrade) queues an [`Upgrade`]. The attempt's
//! checkpoint loop triggers a checkpoint at once (the swap checkpoint, which no other can
//! subsume); every subtask of the named operators snapshots as for any checkpoint, hands its
//! state to an instance of the new code, calls `open` and goes on with the next record.
//! Sources, other operators and sinks run on.
//!
//! Probation: for [`Probation::time`] after the swap checkpoint completed, and until the new
//! code has handled [`Probation::records`], no checkpoint is taken, so that nothing the new
//! code wrote is committed by a two-phase-commit sink. Any
//! failure of the job in that time restores the swap checkpoint with the old code and the old
//! config and discards anything later: the old code only ever reads state the old code wrote,
//! and the output is exactly once. The first checkpoint after it commits the upgrade (and the
//! new code's output with it), as does the checkpoint of a stop during the probation. A
//! failure of the swap checkpoint itself rolls back to the checkpoint before it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::JobError;
use crate::job::spec::{JobSpec, VertexKind};
use crate::wasm::{OperatorComponent, WasmEngine};

/// New code (and optionally a new config) for one operator, named by uid.
#[derive(Debug, Clone)]
pub struct OperatorUpgrade {
    /// The operator's uid.
    pub uid: String,
    /// Its new code, loaded (validated, compiled, linked) already.
    pub component: OperatorComponent,
    /// Its new `config` (as JSON); `None` keeps the old one.
    pub config: Option<String>,
}

/// When an upgrade is committed: at the first checkpoint after `time` without failure once
/// the new code has handled `records`. Until then no checkpoint is taken (the new code's
/// output waits uncommitted in two-phase-commit sinks), so that a rollback loses nothing and
/// repeats nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probation {
    /// Time after the swap checkpoint without failure.
    pub time: Duration,
    /// Records the upgraded operators' new instances handle (all subtasks together).
    pub records: u64,
}

impl Probation {
    /// Whether the probation still runs `elapsed` after the swap checkpoint, the new code
    /// having handled `records`: until both its time and its records are reached.
    pub fn lasts(&self, elapsed: Duration, records: u64) -> bool {
        elapsed < self.time || records < self.records
    }
}

impl Default for Probation {
    fn default() -> Self {
        Probation {
            time: Duration::from_secs(10),
            records: 0,
        }
    }
}

/// An upgrade of one or several operators, applied at one barrier.
#[derive(Debug, Clone)]
pub struct Upgrade {
    /// The operators and their new code.
    pub operators: Vec<OperatorUpgrade>,
    /// When it is committed.
    pub probation: Probation,
}

impl Upgrade {
    /// The upgrade from the job of spec `old` to that of spec `new`, which differ in the
    /// code, limits, grants or config of WebAssembly operators only: each such operator's
    /// new component loaded (validated, compiled, linked), while the job runs on. An error
    /// names the operator whose new code did not load.
    pub fn between(
        old: &JobSpec,
        new: &JobSpec,
        engine: &WasmEngine,
        probation: Probation,
    ) -> Result<Upgrade, JobError> {
        let mut operators = Vec::new();
        for vertex in &new.vertices {
            let VertexKind::Operator { uid, code, config } = &vertex.kind else {
                continue;
            };
            let before = old.vertices.iter().find_map(|v| match &v.kind {
                VertexKind::Operator {
                    uid: u,
                    code,
                    config,
                } if u == uid => Some((code, config)),
                _ => None,
            });
            if before == Some((code, config)) {
                continue;
            }
            if let Some(component) = super::job::load_component(vertex, engine)? {
                operators.push(OperatorUpgrade {
                    uid: uid.clone(),
                    component,
                    config: Some(config.clone()),
                });
            }
        }
        Ok(Upgrade {
            operators,
            probation,
        })
    }
}

/// How an upgrade ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeOutcome {
    /// The new code passed its probation (or the job ended without a failure of it).
    Committed {
        /// The swap checkpoint.
        checkpoint: u64,
        /// How the swap went.
        report: SwapReport,
    },
    /// Refused before anything changed: the job is untouched.
    Refused(String),
    /// The new code failed, or its swap did; the job went back to the old code and resumed
    /// from the swap checkpoint (or, if the swap checkpoint did not complete, the one before).
    RolledBack {
        /// Why.
        cause: String,
    },
}

/// The pause of one subtask at a swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// From the alignment of its swap barrier to the first records handed to the new
    /// instance: the snapshot, the instantiation and `open` of the new code, and the wait for
    /// those records.
    pub total: Duration,
    /// The synchronous part of its snapshot, in `total`: what any checkpoint pauses it for.
    pub snapshot: Duration,
}

/// What a committed upgrade measured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SwapReport {
    /// Of each subtask of the upgraded operators that handled a record after the swap.
    pub pauses: Vec<Pause>,
    /// From the request to the commit.
    pub committed_after: Duration,
}

/// The answer to an upgrade, once there is one.
#[derive(Debug)]
pub struct UpgradeHandle {
    answer: Receiver<UpgradeOutcome>,
    got: OnceLock<UpgradeOutcome>,
    swapped: Arc<OnceLock<u64>>,
}

impl UpgradeHandle {
    /// The swap checkpoint, once it completed: the new code runs, on probation.
    pub fn swapped(&self) -> Option<u64> {
        self.swapped.get().copied()
    }

    /// Waits for the upgrade to be committed, refused or rolled back.
    pub fn wait(self) -> UpgradeOutcome {
        if let Some(answer) = self.got.into_inner() {
            return answer;
        }
        self.answer.recv().unwrap_or_else(|_| ended())
    }

    /// The outcome, once there is one.
    pub fn poll(&self) -> Option<UpgradeOutcome> {
        if let Some(answer) = self.got.get() {
            return Some(answer.clone());
        }
        let answer = match self.answer.try_recv() {
            Ok(answer) => answer,
            Err(crossbeam_channel::TryRecvError::Empty) => return None,
            Err(crossbeam_channel::TryRecvError::Disconnected) => ended(),
        };
        Some(self.got.get_or_init(|| answer).clone())
    }
}

fn ended() -> UpgradeOutcome {
    UpgradeOutcome::Refused("the job ended before the upgrade was applied".into())
}

/// An upgrade asked for and not yet answered.
#[derive(Debug)]
pub(crate) struct Request {
    pub upgrade: Upgrade,
    reply: Sender<UpgradeOutcome>,
    swapped: Arc<OnceLock<u64>>,
    /// When it was asked for.
    pub at: Instant,
}

impl Request {
    pub(crate) fn new(upgrade: Upgrade) -> (Request, UpgradeHandle) {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let swapped = Arc::new(OnceLock::new());
        (
            Request {
                upgrade,
                reply,
                swapped: Arc::clone(&swapped),
                at: Instant::now(),
            },
            UpgradeHandle {
                answer,
                got: OnceLock::new(),
                swapped,
            },
        )
    }

    /// Its swap checkpoint `id` completed.
    pub(crate) fn swapped(&self, id: u64) {
        let _ = self.swapped.set(id);
    }

    pub(crate) fn answer(self, outcome: UpgradeOutcome) {
        match &outcome {
            UpgradeOutcome::Committed { checkpoint, .. } => {
                tracing::info!("upgrade committed (swapped at checkpoint {checkpoint})")
            }
            UpgradeOutcome::Refused(why) => tracing::warn!("upgrade refused: {why}"),
            UpgradeOutcome::RolledBack { cause } => tracing::warn!("upgrade rolled back: {cause}"),
        }
        let _ = self.reply.send(outcome);
    }
}

/// The upgrades asked of a job and not yet taken; `None` once the job has ended.
#[derive(Debug)]
pub(crate) struct Requests(Mutex<Option<Vec<Request>>>);

impl Default for Requests {
    fn default() -> Self {
        Requests(Mutex::new(Some(Vec::new())))
    }
}

impl Requests {
    pub(crate) fn push(&self, request: Request) {
        match &mut *self.lock() {
            Some(queued) => queued.push(request),
            None => request.answer(ended()),
        }
    }

    pub(crate) fn take(&self) -> Vec<Request> {
        self.lock().as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The job has ended: refuses every request still waiting, and those that come later.
    pub(crate) fn end(&self) {
        for request in self.lock().take().into_iter().flatten() {
            request.answer(ended());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Request>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the tasks swap at the barrier of a swap checkpoint.
#[derive(Debug, Default)]
pub(crate) struct SwapPlan {
    /// New code and config by vertex.
    pub code: HashMap<usize, (OperatorComponent, Option<String>)>,
    /// The pause of each subtask that swapped and has handled a record since.
    pauses: Mutex<Vec<Pause>>,
}

impl SwapPlan {
    pub(crate) fn paused(&self, pause: Pause) {
        self.pauses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pause);
    }

    fn pauses(&self) -> Vec<Pause> {
        self.pauses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The swap plans of an attempt, by checkpoint id, for its tasks to find at the barrier.
#[derive(Debug, Default)]
pub(crate) struct Plans(Mutex<HashMap<u64, Arc<SwapPlan>>>);

impl Plans {
    pub(crate) fn insert(&self, checkpoint: u64, plan: Arc<SwapPlan>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(checkpoint, plan);
    }

    pub(crate) fn get(&self, checkpoint: u64) -> Option<Arc<SwapPlan>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&checkpoint)
            .cloned()
    }
}

/// An upgrade between its request and its commit or rollback, as the supervisor and its
/// attempts follow it.
pub(crate) struct Pending {
    pub request: Request,
    /// The swap checkpoint.
    pub checkpoint: u64,
    /// Whether the swap checkpoint completed (probation runs).
    pub swapped: bool,
    /// Whether a checkpoint after the swap checkpoint completed (probation is over).
    pub passed: bool,
    /// When the swap checkpoint completed.
    pub since: Instant,
    /// What the tasks swap.
    pub plan: Arc<SwapPlan>,
    /// The records the upgraded operators had handled at the swap checkpoint.
    pub records_before: u64,
    /// The job with the old code and config, to roll back to.
    pub old: Arc<super::JobParts>,
    /// The job with the new code and config.
    pub new: Arc<super::JobParts>,
}

impl Pending {
    /// Whether checkpoints wait: the new code is on probation (its records counted by
    /// `metrics`).
    pub(crate) fn holds_checkpoints(&self, metrics: &super::Metrics) -> bool {
        let records = self.records(metrics).saturating_sub(self.records_before);
        self.swapped
            && self
                .request
                .upgrade
                .probation
                .lasts(self.since.elapsed(), records)
    }

    /// The records the upgraded operators have handled, by `metrics`.
    pub(crate) fn records(&self, metrics: &super::Metrics) -> u64 {
        self.plan
            .code
            .keys()
            .map(|&v| {
                metrics.vertices[v]
                    .records_in
                    .load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum()
    }

    /// Answers the request: committed.
    pub(crate) fn commit(self) {
        let report = SwapReport {
            pauses: self.plan.pauses(),
            committed_after: self.request.at.elapsed(),
        };
        self.request.answer(UpgradeOutcome::Committed {
            checkpoint: self.checkpoint,
            report,
        });
    }
}

/// What the supervisor keeps of upgrades across attempts.
#[derive(Default)]
pub(crate) struct Upgrades {
    /// The upgrade in progress.
    pub pending: Option<Pending>,
    /// The job's parts after an upgrade committed in the last attempt.
    pub committed: Option<Arc<super::JobParts>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probation_lasts_until_both_its_time_and_its_records_are_reached() {
        let p = Probation {
            time: Duration::from_secs(2),
            records: 100,
        };
        let s = Duration::from_secs;
        assert!(p.lasts(s(1), 0));
        assert!(p.lasts(s(1), 500), "records reached, time not");
        assert!(p.lasts(s(3), 99), "time reached, records not");
        assert!(!p.lasts(s(2), 100));
        assert!(
            !Probation::default().lasts(s(10), 0),
            "by default, 10 s and no records"
        );
    }

    #[test]
    fn upgrades_waiting_or_asked_for_when_the_job_has_ended_are_refused() {
        let requests = Requests::default();
        let upgrade = || Upgrade {
            operators: Vec::new(),
            probation: Probation::default(),
        };
        let (waiting, before) = Request::new(upgrade());
        requests.push(waiting);
        assert!(before.poll().is_none());
        requests.end();
        let (late, after) = Request::new(upgrade());
        requests.push(late);
        for handle in [before, after] {
            assert!(
                matches!(handle.poll(), Some(UpgradeOutcome::Refused(why)) if why.contains("ended")),
                "answered at once"
            );
        }
        assert!(requests.take().is_empty());
    }
}
