//! A job ready to run ([`Job`]): its spec, plan and loaded components; starting it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::lock;
use super::restore::Restored;
use super::supervisor;
use super::{Events, JobControl, JobEnd, JobError, Metrics, RunningJob, role};
use crate::checkpoint::RestoreFrom;
use crate::checkpoint::storage::{CheckpointStore, resolved};
use crate::clock::Clock;
use crate::job::plan::Plan;
use crate::job::spec::{JobSpec, OperatorCode, Vertex, VertexKind};
use crate::native::window::WindowSpec;
use crate::state::BackendKind;
use crate::wasm::{OperatorComponent, WasmEngine};

/// The component of `vertex` if it is a WebAssembly operator: loaded (validated, compiled,
/// linked) within its limits, with its grants; an error names the operator.
pub(crate) fn load_component(
    vertex: &Vertex,
    engine: &WasmEngine,
) -> Result<Option<OperatorComponent>, JobError> {
    let VertexKind::Operator { uid, code, .. } = &vertex.kind else {
        return Ok(None);
    };
    let (path, limits, grants) = match code {
        OperatorCode::Wasm {
            path,
            limits,
            grants,
        } => (path, limits, grants),
        // A window whose function is user code.
        OperatorCode::Window(WindowSpec {
            code: Some(code), ..
        }) => (&code.path, &code.limits, &code.grants),
        _ => return Ok(None),
    };
    let component = engine
        .load(path, limits)
        .map_err(|cause| JobError::Component {
            name: vertex.name.clone(),
            uid: uid.clone(),
            cause,
        })?;
    Ok(Some(component.with_grants(grants.clone())))
}

/// A job whose operators are loaded and linked, ready to start (any number of times).
#[derive(Debug)]
pub struct Job {
    pub(super) parts: Arc<JobParts>,
}

/// What every attempt of a job starts from.
#[derive(Debug, Clone)]
pub(crate) struct JobParts {
    pub spec: Arc<JobSpec>,
    pub plan: Plan,
    pub components: HashMap<usize, OperatorComponent>,
    /// Processing time for every task.
    pub clock: Clock,
    /// A restore lets go of state of operators the job no longer has.
    pub allow_non_restored: bool,
}

impl Job {
    /// Loads and validates every WebAssembly operator of `spec`.
    pub fn new(spec: JobSpec, engine: &WasmEngine) -> Result<Job, JobError> {
        let mut components = HashMap::new();
        for (v, vertex) in spec.vertices.iter().enumerate() {
            if let Some(component) = load_component(vertex, engine)? {
                components.insert(v, component);
            }
        }
        let plan = Plan::new(&spec);
        Ok(Job {
            parts: Arc::new(JobParts {
                spec: Arc::new(spec),
                plan,
                components,
                clock: Clock::system(),
                allow_non_restored: false,
            }),
        })
    }

    /// Runs the job on `clock` instead of the system clock: what state TTL and the guests'
    /// processing time read. Tests use a [`Clock::manual`] to expire state exactly.
    pub fn with_clock(mut self, clock: Clock) -> Job {
        Arc::make_mut(&mut self.parts).clock = clock;
        self
    }

    /// Lets a restore drop the state of operators (by uid) that the job no longer has, instead
    /// of refusing the checkpoint or savepoint (Flink's `--allowNonRestoredState`).
    pub fn allow_non_restored_state(mut self, allow: bool) -> Job {
        Arc::make_mut(&mut self.parts).allow_non_restored = allow;
        self
    }

    /// The job's spec.
    pub fn spec(&self) -> &JobSpec {
        &self.parts.spec
    }

    /// Starts the job from its newest checkpoint, if it has one (see [`Job::start_from`]).
    pub fn start(&self) -> Result<RunningJob, JobError> {
        self.start_from(RestoreFrom::Latest)
    }

    /// Starts every task of the job, restored from a checkpoint as `from` says. With
    /// checkpointing on, a failed task restarts the job from its newest checkpoint under the
    /// spec's restart strategy. A job an earlier run finished does not run again unless `from`
    /// is [`RestoreFrom::Fresh`] ([`JobEnd::AlreadyFinished`]); one another process runs does
    /// not start ([`JobError::AlreadyRunning`]).
    pub fn start_from(&self, from: RestoreFrom) -> Result<RunningJob, JobError> {
        self.start_controlled(from, JobControl::new())
    }

    /// [`Job::start_from`] under `control`, which may have been handed to a signal handler
    /// (and even used) before the job started: a stop asked for before the start stops the job
    /// at its first checkpoint.
    pub fn start_controlled(
        &self,
        from: RestoreFrom,
        control: JobControl,
    ) -> Result<RunningJob, JobError> {
        if control.shared.is_user_cancelled() {
            // Before it deletes anything (checkpoints for --fresh, earlier output).
            return Err(JobError::Cancelled);
        }
        let spec = &self.parts.spec;
        let mut store = match &spec.checkpoint {
            Some(c) => Some(CheckpointStore::open(
                &spec.base_dir.join(&c.dir),
                &spec.name,
            )?),
            None => None,
        };
        let rocks = spec.state.backend == BackendKind::RocksDb;
        let locks = lock::lock_paths(
            store.as_ref().map(CheckpointStore::root),
            rocks.then(|| spec.state_root()).as_deref(),
        )
        .iter()
        .map(|path| lock::JobLock::acquire(path, &spec.name))
        .collect::<Result<Vec<_>, _>>()?;
        let (event_tx, events) = crossbeam_channel::bounded(1024);
        let events_out = Events(event_tx);
        let mut done = None;
        if let Some(store) = &store {
            if matches!(from, RestoreFrom::Latest | RestoreFrom::LatestOr(_)) {
                if let Some(completion) = store.completion()? {
                    // A crash may have come while its checkpoints were being deleted.
                    store.discard_all()?;
                    done = Some(JobEnd::AlreadyFinished(completion));
                }
            } else {
                store.remove_completion()?;
            }
        }
        if done.is_none() && rocks {
            // Working directories of an earlier process of this job that did not end cleanly
            // (killed): their state is in the checkpoints, if anywhere.
            let root = spec.state_root();
            if let Err(e) = std::fs::remove_dir_all(&root)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!("cannot clear the RocksDB directory {}: {e}", root.display());
            }
        }
        let allow = self.parts.allow_non_restored;
        let chosen = matches!(from, RestoreFrom::Fresh | RestoreFrom::Path(_));
        let restore = match (from, &store) {
            _ if done.is_some() => None,
            (RestoreFrom::Fresh, _) | (RestoreFrom::Latest, None) => None,
            (RestoreFrom::Latest, Some(store)) => match Restored::latest(store, spec, 0, allow)? {
                Some(latest) => Some(latest),
                // None of its own yet: where an earlier start was told to start from.
                None => (store.origin())
                    .map(|dir| Restored::load(&dir, spec, allow))
                    .transpose()?,
            },
            (RestoreFrom::LatestOr(dir), Some(store)) => {
                match Restored::latest(store, spec, 0, allow)? {
                    Some(latest) => Some(latest),
                    None => Some(Restored::load(&dir, spec, allow)?),
                }
            }
            (RestoreFrom::Path(dir) | RestoreFrom::LatestOr(dir), _) => {
                Some(Restored::load(&dir, spec, allow)?)
            }
        };
        if let (Some(store), true) = (&store, chosen && done.is_none()) {
            // The job starts over, or from a checkpoint of the user's choosing: its checkpoints
            // after that are of a run whose output this one replaces, which a restart after a
            // crash must not resume.
            // However the user spelled its path (relative, through `..` or a link).
            let root = resolved(store.root());
            let own = |r: &&Restored| r.dir.parent().is_some_and(|p| resolved(p) == root);
            store.discard_after(restore.as_ref().filter(own).map_or(0, Restored::id))?;
            // A start from elsewhere is resumed from there until it has checkpoints here.
            let elsewhere = restore.as_ref().filter(|r| !own(r));
            store.set_origin(elsewhere.map(|r| r.dir.as_path()))?;
        }
        if let (Some(store), Some(restored)) = (&mut store, &restore) {
            store.adopt_shared(&restored.shared_dir());
        }
        let metrics = Arc::new(Metrics::new(
            spec.vertices
                .iter()
                .map(|v| (v.name.clone(), role(&v.kind), v.parallelism)),
        ));
        let flags = control.shared;
        let supervisor = {
            let (parts, metrics, flags) = (
                Arc::clone(&self.parts),
                Arc::clone(&metrics),
                Arc::clone(&flags),
            );
            std::thread::Builder::new()
                .name("supervisor".into())
                .spawn(move || {
                    // Held until the job has ended.
                    let _locks = locks;
                    let end = match done {
                        Some(end) => Ok(end),
                        None => supervisor::supervise(
                            parts,
                            metrics,
                            Arc::clone(&flags),
                            store,
                            restore.map(Arc::new),
                            events_out,
                        ),
                    };
                    flags.savepoints.end();
                    flags.upgrades.end();
                    end
                })
                .map_err(JobError::Spawn)?
        };
        Ok(RunningJob {
            metrics,
            supervisor,
            shared: flags,
            events,
            started: Instant::now(),
            checkpointing: spec.checkpoint.is_some(),
        })
    }
}
