//! The local runtime: one thread per chain subtask, bounded channels between them.
//!
//! [`Job::new`] validates a spec's operators (loading and linking every component) before
//! anything runs; [`Job::start`] spawns the tasks and returns a [`RunningJob`] whose metrics
//! can be watched while it runs and whose [`RunningJob::wait`] reports the first failure with
//! the operator that caused it.

pub(crate) mod key_group;
pub(crate) mod native;
pub(crate) mod operator;
pub(crate) mod output;
mod task;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::job::plan::Plan;
use crate::job::spec::{EdgeKind, JobSpec, OperatorCode, VertexKind};
use crate::wasm::{OperatorComponent, WasmEngine, WasmError};
use output::{Message, Target};

/// Batches a channel holds before its sender blocks.
const CHANNEL_CAPACITY: usize = 8;

/// Why a job could not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("operator \"{name}\" (uid {uid}): {cause}")]
    Component {
        name: String,
        uid: String,
        cause: WasmError,
    },
    #[error("{role} \"{name}\"{uid} (subtask {subtask} of {parallelism}) failed: {message}", uid = uid.as_ref().map(|u| format!(" (uid {u})")).unwrap_or_default())]
    Task {
        role: &'static str,
        name: String,
        uid: Option<String>,
        subtask: u32,
        parallelism: u32,
        message: String,
    },
    #[error("cannot start a task thread: {0}")]
    Spawn(std::io::Error),
    #[error("the job was cancelled")]
    Cancelled,
}

/// Counters of one vertex, summed over its subtasks.
#[derive(Debug)]
pub struct VertexMetrics {
    pub name: String,
    pub role: &'static str,
    pub parallelism: u32,
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
}

/// Live counters of a running job.
#[derive(Debug)]
pub struct Metrics {
    pub vertices: Vec<VertexMetrics>,
}

/// A job whose operators are loaded and linked, ready to start (any number of times).
#[derive(Debug)]
pub struct Job {
    spec: Arc<JobSpec>,
    plan: Plan,
    components: HashMap<usize, OperatorComponent>,
}

fn role(kind: &VertexKind) -> &'static str {
    match kind {
        VertexKind::Source(_) => "source",
        VertexKind::Operator { .. } => "operator",
        VertexKind::Sink(_) => "sink",
    }
}

impl Job {
    /// Loads and validates every WebAssembly operator of `spec`.
    pub fn new(spec: JobSpec, engine: &WasmEngine) -> Result<Job, JobError> {
        let mut components = HashMap::new();
        for (v, vertex) in spec.vertices.iter().enumerate() {
            if let VertexKind::Operator {
                uid,
                code: OperatorCode::Wasm(path),
                ..
            } = &vertex.kind
            {
                let component = engine.load(path).map_err(|cause| JobError::Component {
                    name: vertex.name.clone(),
                    uid: uid.clone(),
                    cause,
                })?;
                components.insert(v, component);
            }
        }
        let plan = Plan::new(&spec);
        Ok(Job {
            spec: Arc::new(spec),
            plan,
            components,
        })
    }

    pub fn spec(&self) -> &JobSpec {
        &self.spec
    }

    /// Starts every task of the job.
    pub fn start(&self) -> Result<RunningJob, JobError> {
        let spec = &self.spec;
        let metrics = Arc::new(Metrics {
            vertices: spec
                .vertices
                .iter()
                .map(|v| VertexMetrics {
                    name: v.name.clone(),
                    role: role(&v.kind),
                    parallelism: v.parallelism,
                    records_in: AtomicU64::new(0),
                    records_out: AtomicU64::new(0),
                })
                .collect(),
        });

        // Channels: inputs[chain][subtask] and targets[chain][subtask].
        let chains = &self.plan.chains;
        let mut inputs: Vec<Vec<Vec<crossbeam_channel::Receiver<Message>>>> = chains
            .iter()
            .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
            .collect();
        let mut targets: Vec<Vec<Vec<Target>>> = chains
            .iter()
            .map(|c| (0..c.parallelism).map(|_| Vec::new()).collect())
            .collect();
        for conn in &self.plan.connections {
            let (up, down) = (
                chains[conn.from_chain].parallelism,
                chains[conn.to_chain].parallelism,
            );
            for u in 0..up {
                let mut senders = Vec::new();
                for d in 0..down {
                    if conn.edge == EdgeKind::Forward && d != u {
                        continue;
                    }
                    let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
                    senders.push(tx);
                    inputs[conn.to_chain][d as usize].push(rx);
                }
                targets[conn.from_chain][u as usize].push(Target::new(
                    spec.vertices[chains[conn.to_chain].head()].name.clone(),
                    conn.side_output.clone(),
                    conn.edge,
                    senders,
                    spec.max_parallelism,
                ));
            }
        }

        let shared = Arc::new(Shared {
            failure: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
        });
        let mut threads = Vec::new();
        for (c, chain) in chains.iter().enumerate() {
            for s in (0..chain.parallelism).rev() {
                let setup = task::TaskSetup {
                    spec: Arc::clone(spec),
                    chain: chain.vertices.clone(),
                    subtask: s,
                    inputs: inputs[c].pop().unwrap_or_default(),
                    targets: targets[c].pop().unwrap_or_default(),
                    components: chain
                        .vertices
                        .iter()
                        .filter_map(|v| self.components.get(v).map(|c| (*v, c.clone())))
                        .collect(),
                    metrics: Arc::clone(&metrics),
                    shared: Arc::clone(&shared),
                };
                let name = format!("{}-{s}", spec.vertices[chain.head()].name);
                let shared = Arc::clone(&shared);
                let handle = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || {
                        if let Err(e) = task::run(setup) {
                            shared.fail(e);
                        }
                    })
                    .map_err(JobError::Spawn)?;
                threads.push(handle);
            }
        }
        Ok(RunningJob {
            metrics,
            threads,
            shared,
            started: Instant::now(),
        })
    }
}

/// What the tasks of one job share.
#[derive(Debug)]
pub(crate) struct Shared {
    failure: Mutex<Option<JobError>>,
    cancelled: AtomicBool,
    /// Sources end their input at the next poll, and the job drains and finishes.
    stopping: AtomicBool,
}

impl Shared {
    /// Records the first failure and makes every task stop.
    pub(crate) fn fail(&self, e: JobError) {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(e);
        }
        self.cancelled.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}

/// A started job.
#[derive(Debug)]
pub struct RunningJob {
    metrics: Arc<Metrics>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
    started: Instant,
}

/// Stops or cancels a running job from anywhere; see [`RunningJob::control`].
#[derive(Debug, Clone)]
pub struct JobControl {
    shared: Arc<Shared>,
}

impl JobControl {
    /// See [`RunningJob::stop`].
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
    }

    /// See [`RunningJob::cancel`].
    pub fn cancel(&self) {
        self.shared.fail(JobError::Cancelled);
    }

    pub fn is_stopping(&self) -> bool {
        self.shared.is_stopping()
    }
}

/// Records in and out of one vertex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexSummary {
    pub name: String,
    pub role: &'static str,
    pub records_in: u64,
    pub records_out: u64,
}

/// How a finished job went.
#[derive(Debug, Clone)]
pub struct JobSummary {
    pub duration: Duration,
    pub vertices: Vec<VertexSummary>,
}

impl RunningJob {
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether every task has ended (successfully or not).
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(JoinHandle::is_finished)
    }

    /// Asks every task to stop; [`RunningJob::wait`] then returns [`JobError::Cancelled`].
    pub fn cancel(&self) {
        self.control().cancel();
    }

    /// Ends the input of every source as if it were exhausted: what is in flight is processed,
    /// operators are closed and sinks flushed, and [`RunningJob::wait`] returns the summary
    /// (Flink's "stop" with drain). The way to end a job over unbounded input.
    pub fn stop(&self) {
        self.control().stop();
    }

    /// A handle that can call [`RunningJob::stop`] or [`RunningJob::cancel`] from another
    /// thread (a signal handler, say).
    pub fn control(&self) -> JobControl {
        JobControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Waits for every task; the error is the first failure, naming its operator.
    pub fn wait(self) -> Result<JobSummary, JobError> {
        for t in self.threads {
            if let Err(panic) = t.join() {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                self.shared.fail(JobError::Task {
                    role: "task",
                    name: "runtime".into(),
                    uid: None,
                    subtask: 0,
                    parallelism: 1,
                    message: format!("internal error (please report): {message}"),
                });
            }
        }
        if let Some(e) = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(e);
        }
        Ok(JobSummary {
            duration: self.started.elapsed(),
            vertices: self
                .metrics
                .vertices
                .iter()
                .map(|v| VertexSummary {
                    name: v.name.clone(),
                    role: v.role,
                    records_in: v.records_in.load(Ordering::Relaxed),
                    records_out: v.records_out.load(Ordering::Relaxed),
                })
                .collect(),
        })
    }
}
