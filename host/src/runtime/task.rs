//! One chain subtask: its thread's loop.
//!
//! A source chain polls its source and pushes each batch through the chained operators; any
//! other chain selects over its input channels. When the input ends, operators are closed in
//! chain order (each one's last output still flows to the next), sinks are flushed, and the
//! end is passed downstream.
//!
//! Checkpoints: a source task gets a trigger from the supervisor, a downstream task aligns
//! the barriers of its inputs (see [`super::barrier`]). Either then forwards the barrier,
//! snapshots the chain (source position, operator state, sink pre-commit) and hands the
//! bytes to the snapshot writer, which writes them off this thread.
//!
//! An unaligned checkpoint starts in every task at its trigger (or first barrier): the task
//! snapshots at once and records what its inputs deliver until their barriers, reading them
//! ahead into per-input queues so that the checkpoint does not wait for those records to be
//! processed; the recorded records go with the snapshot, and a restore replays them first.
//!
//! Stop: after the barrier of the checkpoint the job stops at, a task processes nothing more
//! (a source reads no further, operators are not closed, so end-of-input timers do not fire)
//! and ends once that checkpoint is complete.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TryRecvError};

use super::barrier::{Aligner, Alignment, Progress};
use super::debloat::{Budget, CHANNEL_CAPACITY, Debloater};
use super::output::{Disconnected, Message, Output, PushError, Target};
use super::restore::Restored;
use super::upgrade::{Pause, SwapPlan};
use super::{Cause, JobError, Metrics, Shared, vertex_failure};
use crate::batch::{BATCH_RECORDS, Batch};
use crate::checkpoint::coordinator::TaskId;
use crate::checkpoint::writer::{InFlight, Part, PartState, TaskSnapshot};
use crate::checkpoint::{Barrier, BarrierKind, CheckpointMode};
use crate::clock::Clock;
use crate::connectors::{ConnectorError, Poll, Sink, SinkContext, Source, SplitTime};
use crate::job::spec::{JobSpec, OperatorCode, VertexKind};
use crate::key_group::key_group_range;
use crate::native;
use crate::operator::Snapshot;
use crate::operator::{FailureKind, Operator, OperatorContext, OperatorError};
use crate::state::{StateSetup, redistribute, snapshot_operator_states};
use crate::wasm::{OperatorComponent, WasmOperator};
use crate::watermark::{Generator, Valve, Watermark};

/// The most batches an unaligned checkpoint reads ahead of an input: a full channel, and as
/// much again for what its sender sends before its barrier.
const READ_AHEAD: usize = 2 * CHANNEL_CAPACITY;
/// In the records in flight of an unaligned checkpoint (output encoding), the side-output
/// name of those that went to the operator's second input; the others have none.
pub(crate) const SECOND_INPUT: &str = "second_input";
/// The longest a source sleeps when it has nothing to emit, so cancellation stays prompt.
const MAX_IDLE: Duration = Duration::from_millis(100);
/// The share of its memory limit at which a WebAssembly operator's instance is renewed
/// (see [`Chain::renew`]).
const RENEW_AT: (u64, u64) = (3, 4);

pub(crate) struct TaskSetup {
    pub spec: Arc<JobSpec>,
    pub task: TaskId,
    pub chain: Vec<usize>,
    pub inputs: Vec<Receiver<Message>>,
    /// The debloating budget of each input's channel.
    pub budgets: Vec<Budget>,
    /// Which input of the chain's head operator each channel feeds: 0 its `input`, 1 its
    /// `second_input`.
    pub input_of: Vec<u8>,
    pub targets: Vec<Target>,
    pub components: HashMap<usize, OperatorComponent>,
    pub metrics: Arc<Metrics>,
    pub shared: Arc<Shared>,
    pub control: Receiver<Control>,
    pub snapshots: Sender<TaskSnapshot>,
    pub restore: Option<Arc<Restored>>,
    pub clock: Clock,
}

/// What the supervisor tells a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// Take the barrier's checkpoint (sent to source tasks).
    Trigger(Barrier),
    /// Checkpoint `n` is complete (sinks commit).
    Complete(u64),
}

enum Stage {
    Operator(Box<dyn Operator>),
    Sink(Box<dyn Sink>),
}

/// The chained vertices after the head source (or all of them when there is no source).
struct Chain {
    spec: Arc<JobSpec>,
    /// The vertex whose records leave the chain.
    tail: usize,
    subtask: u32,
    vertices: Vec<usize>,
    stages: Vec<Stage>,
    /// Output buffer of each operator stage, reused between batches.
    bufs: Vec<Batch>,
    /// The size of each stage's last snapshot: the next one reserves that much at once.
    snapshot_sizes: Vec<usize>,
    output: Output,
    metrics: Arc<Metrics>,
    snapshots: Sender<TaskSnapshot>,
    task: TaskId,
    /// The last checkpoint this task snapshotted.
    last_snapshot: Option<u64>,
    /// Side-output records no vertex reads, by vertex and side output name.
    side_dropped: std::collections::BTreeMap<(usize, String), u64>,
    /// The attempt's flags, with the swap plans of upgrades.
    shared: Arc<Shared>,
    /// Processing time, for instances of new code.
    clock: Clock,
    /// After a swap, until the first record reached the new code: when the swap barrier was
    /// aligned, how long the snapshot took, the first stage swapped, and the plan that
    /// reports the pause.
    swapped: Option<(Instant, Duration, usize, Arc<SwapPlan>)>,
    /// The snapshot of the unaligned checkpoint in progress, held until the records in
    /// flight to it are recorded, and those records so far.
    recording: Option<(TaskSnapshot, weir_wire::OutputWriter)>,
    /// Per stage: the watermark generator of an operator with a `watermark` strategy, which
    /// makes the watermarks after it (those of its input stop there).
    generators: Vec<Option<Generator>>,
    /// The watermark generator of the source heading the chain, with its strategy.
    head_generator: Option<Generator>,
    /// Per stage: the last watermark it was told (restored with its state), which the
    /// watermarks its input makes again after a restore do not take back.
    watermarks: Vec<Option<i64>>,
    /// The source heading the chain, if one does.
    source: Option<usize>,
    /// Per stage: the code (and config, after an upgrade) of a WebAssembly operator, for a
    /// new instance when its memory nears the limit (see [`Chain::renew`]).
    code: Vec<Option<(OperatorComponent, Option<String>)>>,
    /// Of the sinks whose calls may wait on their target, until the chain ends.
    _interrupts: Vec<Interrupt>,
}

/// Interrupts the calls of a sink that wait on its target (see [`Sink::interrupter`]) once
/// the attempt is cancelled, until dropped.
struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// How often the attempt's cancellation is looked at, and a waiting call interrupted
    /// again (one that began just after an interruption waits again).
    const EVERY: Duration = Duration::from_millis(100);

    fn watch(cancelled: Arc<AtomicBool>, interrupt: Box<dyn Fn() + Send>) -> Option<Interrupt> {
        let done = Arc::new(AtomicBool::new(false));
        let ended = Arc::clone(&done);
        let watcher = move || {
            while !ended.load(Ordering::Relaxed) {
                if cancelled.load(Ordering::Relaxed) {
                    interrupt();
                }
                std::thread::sleep(Self::EVERY);
            }
        };
        let spawned = std::thread::Builder::new()
            .name("sink-interrupt".into())
            .spawn(watcher);
        if let Err(e) = &spawned {
            tracing::warn!("cannot start a thread to interrupt a sink on cancel: {e}");
        }
        spawned.ok().map(|_| Interrupt(done))
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How a task ended badly: with its own error, or because another task went away.
enum Stop {
    Failed(JobError),
    Disconnected,
}

impl From<Disconnected> for Stop {
    fn from(_: Disconnected) -> Self {
        Stop::Disconnected
    }
}

/// What a finished task reports: see [`TaskEnd::Finished`].
type Finish = (Option<u64>, Vec<(usize, serde_json::Value)>);

/// How a task ended.
#[derive(Debug)]
pub(crate) enum TaskEnd {
    /// Its input ended and everything was processed: the last checkpoint it snapshotted, and
    /// the final pre-commit of each of its sinks that has one, by vertex.
    Finished(Option<u64>, Vec<(usize, serde_json::Value)>),
    /// It stopped at the barrier of the stop checkpoint, which then completed.
    Suspended,
    /// It failed.
    Failed(JobError),
    /// It stopped because the attempt was cancelled or a peer went away.
    Cancelled,
}

/// Runs the task to its end.
pub(crate) fn run(setup: TaskSetup) -> TaskEnd {
    match run_inner(setup) {
        Ok(Ended::Input((last, commits))) => TaskEnd::Finished(last, commits),
        Ok(Ended::Stopped) => TaskEnd::Suspended,
        Err(Stop::Failed(e)) => TaskEnd::Failed(e),
        Err(Stop::Disconnected) => TaskEnd::Cancelled,
    }
}

/// How the loop of a task ended without failing.
enum Ended {
    /// At the end of its input.
    Input(Finish),
    /// At the barrier of the stop checkpoint, which completed.
    Stopped,
}

/// A failure of `vertex` caused by `cause`, said after `context` (when not empty).
fn error(
    spec: &JobSpec,
    vertex: usize,
    subtask: u32,
    context: &str,
    cause: impl Into<Cause> + std::fmt::Display,
) -> Stop {
    let message = match context {
        "" => cause.to_string(),
        context => format!("{context}: {cause}"),
    };
    Stop::Failed(vertex_failure(
        spec,
        vertex,
        subtask,
        FailureKind::Other,
        message,
        Some(cause.into()),
    ))
}

/// The failure of operator `vertex`, of the kind the operator reported; a call that the
/// job's cancellation stopped is no failure of its own.
fn operator_error(spec: &JobSpec, vertex: usize, subtask: u32, e: OperatorError) -> Stop {
    match e {
        OperatorError::Cancelled => Stop::Disconnected,
        e => Stop::Failed(vertex_failure(
            spec,
            vertex,
            subtask,
            e.kind(),
            e.to_string(),
            Some(e.into()),
        )),
    }
}

/// `stop`, marked as a failure that a restart cannot heal (see [`JobError::permanent_if`]).
fn permanent(stop: Stop) -> Stop {
    permanent_if(true, stop)
}

/// `stop` marked [`permanent`] when `is` holds.
fn permanent_if(is: bool, stop: Stop) -> Stop {
    match stop {
        Stop::Failed(e) => Stop::Failed(e.permanent_if(is)),
        other => other,
    }
}

fn run_inner(mut setup: TaskSetup) -> Result<Ended, Stop> {
    let spec = Arc::clone(&setup.spec);
    let s = setup.task.subtask;
    let head = setup.chain[0];
    let restore = setup.restore.clone();
    if let Some(r) = &restore
        && setup
            .chain
            .iter()
            .all(|&v| r.is_finished(&spec.vertices[v], s))
    {
        // Finished before the checkpoint: its output is in the downstream state already.
        // Downstream tasks may have finished too and be gone, which is fine.
        let _ = Output::new(std::mem::take(&mut setup.targets)).end();
        return Ok(Ended::Input((None, Vec::new())));
    }
    let source = match &spec.vertices[head].kind {
        VertexKind::Source(config) => {
            let fail = |context: &str, e: ConnectorError| error(&spec, head, s, context, e);
            let p = spec.vertices[head].parallelism as usize;
            let mut source = config
                .build(&spec.base_dir, s as usize, p, &setup.clock)
                .map_err(|e| permanent_if(e.is_permanent(), fail("", e)))?;
            if let Some(position) = restore
                .as_ref()
                .and_then(|r| r.source_position(&spec.vertices[head].name, s))
            {
                source
                    .restore(position)
                    .map_err(|e| permanent(fail("cannot resume from the checkpoint", e)))?;
            }
            Some(source)
        }
        _ => None,
    };
    let rest: Vec<usize> = setup.chain[usize::from(source.is_some())..].to_vec();
    let code = (rest.iter())
        .map(|v| setup.components.get(v).map(|c| (c.clone(), None)))
        .collect();
    let mut stages = Vec::with_capacity(rest.len());
    for &v in &rest {
        stages.push(build_stage(
            &spec,
            v,
            s,
            &mut setup.components,
            restore.as_deref(),
            &setup.clock,
            setup.shared.cancel_flag(),
        )?);
    }
    let interrupts = (stages.iter())
        .filter_map(|stage| match stage {
            Stage::Sink(sink) => sink.interrupter(),
            Stage::Operator(_) => None,
        })
        .filter_map(|interrupt| Interrupt::watch(setup.shared.cancel_flag(), interrupt))
        .collect();
    let mut chain = Chain {
        tail: *setup.chain.last().expect("a chain has a vertex"),
        bufs: rest.iter().map(|_| Batch::default()).collect(),
        snapshot_sizes: vec![0; rest.len()],
        watermarks: (rest.iter())
            .map(|&v| match (&spec.vertices[v].kind, restore.as_deref()) {
                (VertexKind::Operator { uid, .. }, Some(r)) => {
                    r.watermark(uid, spec.vertices[v].parallelism, s)
                }
                _ => None,
            })
            .collect(),
        spec: Arc::clone(&spec),
        subtask: s,
        vertices: rest,
        stages,
        output: Output::new(std::mem::take(&mut setup.targets)),
        side_dropped: Default::default(),
        metrics: Arc::clone(&setup.metrics),
        snapshots: setup.snapshots.clone(),
        task: setup.task,
        last_snapshot: None,
        shared: Arc::clone(&setup.shared),
        clock: setup.clock.clone(),
        swapped: None,
        recording: None,
        generators: Vec::new(),
        head_generator: None,
        source: source.is_some().then_some(head),
        code,
        _interrupts: interrupts,
    };
    let now = chain.clock.now_ms();
    if source.is_some() {
        chain.head_generator =
            (spec.vertices[head].watermark.as_ref()).map(|s| Generator::new(s, now));
    }
    chain.generators = (chain.vertices.iter())
        .map(|&v| spec.vertices[v].watermark.as_ref())
        .map(|strategy| strategy.map(|s| Generator::new(s, now)))
        .collect();
    for i in 0..chain.stages.len() {
        if let Stage::Operator(op) = &mut chain.stages[i] {
            if let Some(w) = chain.watermarks[i] {
                op.restore_watermark(w);
            }
            // `open` sees only the code, its config and the restored state: what fails here
            // fails again after a restart.
            op.open()
                .map_err(|e| permanent(operator_error(&spec, chain.vertices[i], s, e)))?;
        }
    }
    if let Some(r) = &restore {
        chain.replay_in_flight(r)?;
    }
    let stopped = match source {
        Some(source) => run_source(&setup, head, source, &mut chain)?,
        None => run_inputs(&setup, &mut chain)?,
    };
    match stopped {
        Some(_) => Ok(Ended::Stopped),
        None => chain.finish().map(Ended::Input),
    }
}

/// Where subtask `s` of sink `v` runs.
pub(crate) fn sink_context(spec: &JobSpec, v: usize, s: u32) -> SinkContext<'_> {
    let vertex = &spec.vertices[v];
    SinkContext {
        job: &spec.name,
        name: &vertex.name,
        base_dir: &spec.base_dir,
        subtask: s as usize,
        parallelism: vertex.parallelism as usize,
        checkpoints: spec.checkpoint.as_ref().map(|c| c.dir.as_path()),
    }
}

/// A new instance of operator `v` for subtask `s`, keeping its keyed state as `state` says.
/// (A `Job` holds the component of every WebAssembly operator.)
pub(super) fn new_operator(
    spec: &JobSpec,
    v: usize,
    s: u32,
    component: Option<&OperatorComponent>,
    state: StateSetup,
    cancelled: Arc<AtomicBool>,
) -> Result<Box<dyn Operator>, OperatorError> {
    let VertexKind::Operator { code, .. } = &spec.vertices[v].kind else {
        unreachable!("vertex {v} is an operator");
    };
    let ctx = operator_context(spec, v, s, cancelled);
    match code {
        OperatorCode::Native(name) => native::build(name, &ctx, &state),
        OperatorCode::Window(window) => native::window::build(window, &ctx, &state, component),
        OperatorCode::Join(join) => native::join::build(join, &ctx, &state),
        OperatorCode::Wasm { .. } => {
            let component = component.expect("Job::new loads every wasm operator");
            WasmOperator::new(component, ctx, &state).map(|o| Box::new(o) as Box<dyn Operator>)
        }
    }
}

/// What subtask `s` of operator `v` learns of itself.
fn operator_context(
    spec: &JobSpec,
    v: usize,
    s: u32,
    cancelled: Arc<AtomicBool>,
) -> OperatorContext {
    let vertex = &spec.vertices[v];
    let VertexKind::Operator { uid, config, .. } = &vertex.kind else {
        unreachable!("vertex {v} is an operator");
    };
    OperatorContext {
        job: spec.name.clone(),
        uid: uid.clone(),
        subtask: s,
        parallelism: vertex.parallelism,
        max_parallelism: spec.max_parallelism,
        key_groups: key_group_range(spec.max_parallelism, vertex.parallelism, s),
        config: config.clone(),
        cancelled,
    }
}

/// What an operator stage holds while its instance is being swapped for new code.
struct Swapping;

impl Operator for Swapping {
    fn process(&mut self, _: &Batch, _: &mut Batch) -> Result<(), OperatorError> {
        Err(OperatorError::Contract(
            "the operator is being upgraded".into(),
        ))
    }
}

fn build_stage(
    spec: &JobSpec,
    v: usize,
    s: u32,
    components: &mut HashMap<usize, OperatorComponent>,
    restore: Option<&Restored>,
    clock: &Clock,
    cancelled: Arc<AtomicBool>,
) -> Result<Stage, Stop> {
    let vertex = &spec.vertices[v];
    match &vertex.kind {
        VertexKind::Operator { uid, .. } => {
            let state = StateSetup {
                config: spec.state.clone(),
                root: spec.state_root(),
                clock: clock.clone(),
            };
            let groups = key_group_range(spec.max_parallelism, vertex.parallelism, s);
            let component = components.remove(&v);
            let mut op = new_operator(spec, v, s, component.as_ref(), state, cancelled)
                .map_err(|e| permanent(operator_error(spec, v, s, e)))?;
            if let Some(r) = restore {
                let fail = |e: Cause| {
                    let message = format!("cannot restore its state: {e}");
                    permanent(Stop::Failed(vertex_failure(
                        spec,
                        v,
                        s,
                        FailureKind::Other,
                        message,
                        Some(e),
                    )))
                };
                for bytes in r.keyed_state(uid, &groups).map_err(|e| fail(e.into()))? {
                    op.restore(&bytes, &r.shared_dir())
                        .map_err(|e| fail(e.into()))?;
                }
                let old = r.operator_states(uid).map_err(fail)?;
                let share = redistribute(&old, vertex.parallelism, s);
                if !share.is_empty() {
                    op.restore_operator_state(&snapshot_operator_states(&share))
                        .map_err(|e| fail(e.into()))?;
                }
            }
            Ok(Stage::Operator(op))
        }
        VertexKind::Sink(config) => {
            let state = restore.and_then(|r| r.sink_state(&vertex.name, s));
            config
                .restore(&sink_context(spec, v, s), state)
                .map(Stage::Sink)
                .map_err(|e| permanent_if(e.is_permanent(), error(spec, v, s, "", e)))
        }
        VertexKind::Source(_) => unreachable!("a source only heads a chain"),
    }
}

/// Reads the source into the chain until its input ends (`None`) or the job stops at a
/// checkpoint (its id).
fn run_source(
    setup: &TaskSetup,
    vertex: usize,
    mut source: Box<dyn Source>,
    chain: &mut Chain,
) -> Result<Option<u64>, Stop> {
    let mut batch = Batch::default();
    let counter = &setup.metrics.vertices[vertex].records_out;
    // `Some(n)`: the job stops at checkpoint n, whose barrier has just been sent.
    let control = |chain: &mut Chain, source: &dyn Source, c: Control| match c {
        Control::Trigger(barrier) => {
            chain.checkpoint(barrier, Some((vertex, source)), Duration::ZERO)?;
            Ok((barrier.kind == BarrierKind::Stop).then_some(barrier.id))
        }
        Control::Complete(n) => chain.notify_complete(n).map(|()| None),
    };
    // Without checkpoints there is nothing to stop at: a stop ends the input (drains).
    let no_checkpoints = setup.spec.checkpoint.is_none();
    loop {
        if setup.shared.is_cancelled() {
            return Err(Stop::Disconnected);
        }
        // A stop ends the input after a last poll of at most one record: a source that has
        // read all of its input says so at its next poll, which tells a job that had read
        // everything from one whose input the stop cuts short (the record the poll may read is
        // processed as the ones before it).
        let ending = setup.shared.is_stopping() && (no_checkpoints || setup.shared.is_draining());
        while !ending && let Ok(c) = setup.control.try_recv() {
            if let Some(n) = control(chain, source.as_ref(), c)? {
                return chain.park(n, setup).map(|()| Some(n));
            }
        }
        let status = source
            .poll(&mut batch, if ending { 1 } else { BATCH_RECORDS })
            .map_err(|e| {
                let permanent = e.is_permanent();
                permanent_if(
                    permanent,
                    error(&setup.spec, vertex, setup.task.subtask, "", e),
                )
            })?;
        if !batch.is_empty() {
            counter.fetch_add(batch.len() as u64, Ordering::Relaxed);
            chain.push_source(&batch, source.split_time())?;
            batch.clear();
        }
        if ending {
            if !matches!(status, Poll::Finished) {
                setup.shared.cut_input_short();
            }
            return Ok(None);
        }
        let next = chain.on_time()?;
        match status {
            Poll::Ready => {}
            Poll::Idle(d) => {
                chain.output.flush()?;
                let wait = next.map_or(d, |n| n.min(d)).min(MAX_IDLE);
                // Wake up for a checkpoint trigger at once.
                if let Ok(c) = setup.control.recv_timeout(wait)
                    && let Some(n) = control(chain, source.as_ref(), c)?
                {
                    return chain.park(n, setup).map(|()| Some(n));
                }
            }
            Poll::Finished => return Ok(None),
        }
    }
}

/// Reads the task's inputs into the chain until they all end (`None`) or the job stops at a
/// checkpoint (its id).
fn run_inputs(setup: &TaskSetup, chain: &mut Chain) -> Result<Option<u64>, Stop> {
    let mode = setup.spec.checkpoint.as_ref().map(|c| c.mode);
    let alignment = match mode {
        Some(CheckpointMode::AtLeastOnce) => Alignment::AtLeast,
        _ => Alignment::Exactly,
    };
    let inputs = &setup.inputs;
    let mut reader = Inputs {
        setup,
        aligner: Aligner::new(alignment, inputs.len()),
        origin: Instant::now(),
        ended: vec![false; inputs.len()],
        barriers: BTreeMap::new(),
        queued: inputs.iter().map(|_| VecDeque::new()).collect(),
        valve: Valve::new(inputs.len()),
        debloater: setup
            .spec
            .buffer_debloat_target
            .map(|target| Debloater::new(target, setup.budgets.clone())),
    };
    loop {
        // Control first: the trigger of an unaligned checkpoint must not wait behind records.
        while let Ok(c) = setup.control.try_recv() {
            if let Some(n) = reader.control(chain, c)? {
                return Ok(Some(n));
            }
        }
        if let Some(n) = reader.read_ahead(chain)? {
            return Ok(Some(n));
        }
        // Records read ahead go before anything their input delivers after them.
        if let Some(i) = (0..inputs.len()).find(|&i| !reader.queued[i].is_empty()) {
            match reader.queued[i].pop_front().expect("not empty") {
                Queued::Data(batch) => chain.push_input(setup.input_of[i], &batch)?,
                Queued::Watermark(w) => reader.watermark(chain, i, w)?,
                Queued::End => reader.end_watermark(chain, i)?,
            }
            reader.flush_if_idle(chain)?;
            continue;
        }
        let wait = chain.on_time()?;
        if reader.aligner.open_inputs() == 0 {
            return Ok(None);
        }
        // The inputs readable now; rebuilt whenever a barrier, an end, a control message or
        // a recording changes that.
        let readable: Vec<usize> = (0..inputs.len())
            .filter(|&i| !reader.ended[i] && !reader.aligner.is_blocked(i))
            .collect();
        let mut select = Select::new();
        for &i in &readable {
            select.recv(&inputs[i]);
        }
        let control = select.recv(&setup.control);
        loop {
            let op = match wait {
                None => select.select(),
                Some(wait) => match select.select_timeout(wait) {
                    Ok(op) => op,
                    // Processing time moved on: fire what is due.
                    Err(_) => break,
                },
            };
            if op.index() == control {
                match op.recv(&setup.control) {
                    Ok(c) => {
                        if let Some(n) = reader.control(chain, c)? {
                            return Ok(Some(n));
                        }
                        break;
                    }
                    Err(_) => return Err(Stop::Disconnected),
                }
            }
            let i = readable[op.index()];
            let message = op.recv(&inputs[i]).map_err(|_| Stop::Disconnected)?;
            let data = matches!(message, Message::Data(_));
            if let Some(n) = reader.deliver(chain, i, message)? {
                return Ok(Some(n));
            }
            // With timers or idleness to watch, the select needs a timeout: the loop above
            // sets it (and fires what is due) after every batch.
            if !data
                || reader.aligner.is_recording(i)
                || !setup.control.is_empty()
                || wait.is_some()
                || chain.on_time()?.is_some()
            {
                break;
            }
        }
    }
}

/// What an input delivered ahead, during an unaligned checkpoint.
enum Queued {
    Data(Batch),
    Watermark(Watermark),
    /// The input ended after the records queued before it: only then may the watermark
    /// leave it out (before, its queued records would be late).
    End,
}

/// The input side of a task that reads channels: barrier alignment, the records read ahead
/// for an unaligned checkpoint, and the watermark.
struct Inputs<'a> {
    setup: &'a TaskSetup,
    aligner: Aligner,
    /// The aligner's clock.
    origin: Instant,
    ended: Vec<bool>,
    /// The barriers come on some input and not yet snapshotted, by checkpoint.
    barriers: BTreeMap<u64, Barrier>,
    /// Per input: batches (and the watermarks between them) read ahead while an unaligned
    /// checkpoint recorded them, to be processed before anything else of that input.
    queued: Vec<VecDeque<Queued>>,
    /// The task's watermark, from its inputs'.
    valve: Valve,
    /// Sizes the batches of the input channels to their pace (none when turned off).
    debloater: Option<Debloater>,
}

impl Inputs<'_> {
    /// Handles a control message; `Some(n)`: the job stopped at checkpoint n.
    fn control(&mut self, chain: &mut Chain, c: Control) -> Result<Option<u64>, Stop> {
        match c {
            Control::Complete(n) => chain.notify_complete(n).map(|()| None),
            Control::Trigger(barrier) if barrier.unaligned => {
                self.barriers.entry(barrier.id).or_insert(barrier);
                let progress = self.aligner.on_trigger(barrier.id, self.origin.elapsed());
                self.progress(chain, progress)
            }
            // Aligned checkpoints start in the sources.
            Control::Trigger(_) => Ok(None),
        }
    }

    /// Handles what input `i` delivered; `Some(n)`: the job stopped at checkpoint n.
    fn deliver(&mut self, chain: &mut Chain, i: usize, m: Message) -> Result<Option<u64>, Stop> {
        let progress = match m {
            Message::Data(batch) => {
                if let Some(d) = &mut self.debloater {
                    d.took(i, batch.len());
                }
                let input = self.setup.input_of[i];
                if self.aligner.is_recording(i) {
                    chain.record(input, &batch);
                    self.queued[i].push_back(Queued::Data(batch));
                } else {
                    chain.push_input(input, &batch)?;
                    self.flush_if_idle(chain)?;
                }
                return Ok(None);
            }
            Message::Barrier(barrier) => {
                self.barriers.entry(barrier.id).or_insert(barrier);
                let now = self.origin.elapsed();
                self.aligner
                    .on_barrier(i, barrier.id, barrier.unaligned, now)
                    .map_err(|e| chain.fail_task("checkpoint barrier protocol", e))?
            }
            Message::Watermark(w) => {
                if self.aligner.is_recording(i) {
                    // Behind the records read ahead before it.
                    self.queued[i].push_back(Queued::Watermark(w));
                } else {
                    self.watermark(chain, i, w)?;
                }
                return Ok(None);
            }
            Message::End => {
                self.ended[i] = true;
                if self.queued[i].is_empty() {
                    self.end_watermark(chain, i)?;
                } else {
                    self.queued[i].push_back(Queued::End);
                }
                // For the checkpoint in progress, the end counts at once, as a barrier.
                self.aligner.on_end(i, self.origin.elapsed())
            }
        };
        self.progress(chain, progress)
    }

    /// Input `i` ended: the task's watermark leaves it out from now on.
    fn end_watermark(&mut self, chain: &mut Chain, i: usize) -> Result<(), Stop> {
        for w in self.valve.on_end(i) {
            chain.watermark(0, w)?;
        }
        Ok(())
    }

    /// Input `i` said `w`: what it changes of the task's watermark goes through the chain.
    fn watermark(&mut self, chain: &mut Chain, i: usize, w: Watermark) -> Result<(), Stop> {
        for w in self.valve.on_input(i, w) {
            chain.watermark(0, w)?;
        }
        Ok(())
    }

    /// Reads every input the unaligned checkpoint in progress records, as far as it has
    /// delivered, into the queues: so the checkpoint completes as soon as the barriers are
    /// in, however many records are queued before them. A queue holds at most
    /// [`READ_AHEAD`] batches: an operator slower than its checkpoint interval would
    /// otherwise queue more at every checkpoint than it processes in between.
    fn read_ahead(&mut self, chain: &mut Chain) -> Result<Option<u64>, Stop> {
        for i in 0..self.setup.inputs.len() {
            while self.aligner.is_recording(i) && self.queued[i].len() < READ_AHEAD {
                let message = match self.setup.inputs[i].try_recv() {
                    Ok(m) => m,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Err(Stop::Disconnected),
                };
                if let Some(n) = self.deliver(chain, i, message)? {
                    return Ok(Some(n));
                }
            }
        }
        Ok(None)
    }

    /// Sends partial batches only when no readable input has more waiting: full batches
    /// under load, low latency when idle.
    fn flush_if_idle(&self, chain: &mut Chain) -> Result<(), Stop> {
        let idle = self.queued.iter().all(VecDeque::is_empty)
            && (0..self.setup.inputs.len()).all(|i| {
                self.ended[i] || self.aligner.is_blocked(i) || self.setup.inputs[i].is_empty()
            });
        if idle {
            chain.output.flush()?;
        }
        Ok(())
    }

    /// Does what the aligner decided; `Some(n)`: the job stopped at checkpoint n.
    fn progress(&mut self, chain: &mut Chain, progress: Progress) -> Result<Option<u64>, Stop> {
        let Progress {
            aligned,
            recorded,
            aborted,
        } = progress;
        for n in aborted {
            tracing::debug!(task = ?chain.task, "checkpoint {n} abandoned during alignment");
            chain.abandon(n);
        }
        if let Some(a) = aligned {
            // Older barriers were abandoned: this one subsumes them.
            let barrier = self
                .barriers
                .remove(&a.id)
                .expect("an aligned barrier came");
            self.barriers = self.barriers.split_off(&a.id);
            if barrier.unaligned {
                chain.start_recording(barrier)?;
                // Batches read ahead for an earlier checkpoint and not processed yet are
                // input the snapshot does not reflect: records in flight of this one too.
                for (i, queued) in self.queued.iter().enumerate() {
                    for queued in queued {
                        if let Queued::Data(batch) = queued {
                            chain.record(self.setup.input_of[i], batch);
                        }
                    }
                }
            } else {
                chain.checkpoint(barrier, None, a.alignment)?;
                if barrier.kind == BarrierKind::Stop {
                    return chain.park(a.id, self.setup).map(|()| Some(a.id));
                }
            }
        }
        if let Some(n) = recorded {
            chain.finish_recording(n)?;
        }
        Ok(None)
    }
}

impl Chain {
    /// The failure of operator stage `i`.
    fn operator_failed(&self, i: usize, e: OperatorError) -> Stop {
        operator_error(&self.spec, self.vertices[i], self.subtask, e)
    }

    fn fail(&self, i: usize, context: &str, cause: impl Into<Cause> + std::fmt::Display) -> Stop {
        error(&self.spec, self.vertices[i], self.subtask, context, cause)
    }

    /// The failure of sink stage `i`; one that a restart cannot heal (a missing permission,
    /// a bad setting) fails the job at once.
    fn connector_failed(&self, i: usize, context: &str, e: ConnectorError) -> Stop {
        let permanent = e.is_permanent();
        permanent_if(permanent, self.fail(i, context, e))
    }

    /// A failure of the task as a whole, reported for its last vertex.
    fn fail_task(&self, context: &str, cause: impl Into<Cause> + std::fmt::Display) -> Stop {
        error(&self.spec, self.tail, self.subtask, context, cause)
    }

    /// The barrier's checkpoint: forwards the barrier (after every record before it),
    /// snapshots the source position (a source chain), every operator's state and every
    /// sink's pre-commit, and hands the snapshot to the writer.
    fn checkpoint(
        &mut self,
        barrier: Barrier,
        source: Option<(usize, &dyn Source)>,
        alignment: Duration,
    ) -> Result<(), Stop> {
        let aligned = Instant::now();
        let snapshot = self.snapshot(barrier, source, alignment)?;
        let sync = snapshot.sync;
        self.snapshots
            .send(snapshot)
            .map_err(|_| Stop::Disconnected)?;
        if barrier.kind == BarrierKind::Upgrade
            && let Some(plan) = self.shared.plans.get(barrier.id)
        {
            self.swap(&plan)?;
            let first = (0..self.stages.len()).find(|&i| plan.code.contains_key(&self.vertices[i]));
            self.swapped = first.map(|i| (aligned, sync, i, plan));
        }
        Ok(())
    }

    /// Starts the unaligned checkpoint of `barrier`: snapshots now and records the records in
    /// flight until [`Chain::finish_recording`].
    fn start_recording(&mut self, barrier: Barrier) -> Result<(), Stop> {
        let snapshot = self.snapshot(barrier, None, Duration::ZERO)?;
        self.recording = Some((snapshot, weir_wire::OutputWriter::default()));
        Ok(())
    }

    /// Adds `batch`, which came in to operator input `input` after the snapshot and before
    /// its channel's barrier, to the records in flight of the unaligned checkpoint in progress.
    fn record(&mut self, input: u8, batch: &Batch) {
        if let Some((_, records)) = &mut self.recording {
            let to = (input == 1).then_some(SECOND_INPUT);
            for rec in batch.iter() {
                records.push(to, &rec);
            }
        }
    }

    /// Every input delivered the barrier of unaligned checkpoint `n` (or ended): hands its
    /// snapshot, with the records in flight, to the writer.
    fn finish_recording(&mut self, n: u64) -> Result<(), Stop> {
        let Some((mut snapshot, mut records)) = self.recording.take_if(|(s, _)| s.id == n) else {
            return Ok(());
        };
        if !records.is_empty() {
            snapshot.in_flight = Some(InFlight {
                vertex: self.vertices[0],
                records: records.records() as u64,
                bytes: records.take(),
            });
        }
        self.snapshots
            .send(snapshot)
            .map_err(|_| Stop::Disconnected)
    }

    /// Checkpoint `n` was abandoned before its records in flight were complete.
    fn abandon(&mut self, n: u64) {
        self.recording.take_if(|(s, _)| s.id == n);
    }

    /// Replays the records in flight to this subtask that the restored checkpoint stored,
    /// before anything else; to the chain's last stage first, whose own records in flight
    /// (when it headed a chain of its own at the checkpoint) came before what the stages
    /// before it emit.
    fn replay_in_flight(&mut self, restored: &Restored) -> Result<(), Stop> {
        for i in (0..self.stages.len()).rev() {
            let v = self.vertices[i];
            let batches = restored
                .in_flight(&self.spec, v, self.subtask)
                .map_err(|e| permanent(self.fail(i, "cannot restore its records in flight", e)))?;
            let records: usize = batches.iter().map(|(_, b)| b.len()).sum();
            if records > 0 {
                tracing::info!(
                    subtask = self.subtask,
                    "replaying {records} records in flight to \"{}\" from checkpoint {}",
                    self.spec.vertices[v].name,
                    restored.id()
                );
            }
            for (input, batch) in &batches {
                self.push_from(i, *input, batch)?;
            }
        }
        Ok(())
    }

    /// Forwards the barrier and snapshots the chain (see [`Chain::checkpoint`]).
    fn snapshot(
        &mut self,
        barrier: Barrier,
        source: Option<(usize, &dyn Source)>,
        alignment: Duration,
    ) -> Result<TaskSnapshot, Stop> {
        let n = barrier.id;
        self.output.barrier(barrier)?;
        let started = Instant::now();
        let mut parts = Vec::with_capacity(self.stages.len() + 1);
        if let Some((vertex, source)) = source {
            parts.push(Part {
                vertex,
                state: PartState::Source(source.position()),
            });
        }
        for i in 0..self.stages.len() {
            let vertex = self.vertices[i];
            let state = match &mut self.stages[i] {
                Stage::Operator(op) => {
                    let mut snapshot = Snapshot {
                        format: barrier.format,
                        bytes: Vec::with_capacity(self.snapshot_sizes[i] + 4096),
                        key_groups: key_group_range(
                            self.spec.max_parallelism,
                            self.spec.vertices[vertex].parallelism,
                            self.subtask,
                        ),
                        shared: None,
                    };
                    if let Err(e) = op.snapshot(n, &mut snapshot) {
                        return Err(self.fail(i, "snapshot failed", e));
                    }
                    self.metrics.vertices[vertex]
                        .set_undeclared_states(self.subtask, op.undeclared_states());
                    self.snapshot_sizes[i] = snapshot.bytes.len();
                    PartState::Operator {
                        keyed: (!snapshot.bytes.is_empty()).then_some(snapshot),
                        operator: op.snapshot_operator_state(),
                        watermark: self.watermarks[i],
                    }
                }
                Stage::Sink(sink) => match sink.snapshot(n) {
                    Ok(state) => PartState::Sink(state),
                    Err(e) => return Err(self.connector_failed(i, "pre-commit failed", e)),
                },
            };
            parts.push(Part { vertex, state });
        }
        self.last_snapshot = Some(n);
        Ok(TaskSnapshot {
            id: n,
            task: self.task,
            alignment,
            sync: started.elapsed(),
            parts,
            in_flight: None,
        })
    }

    /// Swaps the instances of the operators `plan` names for instances of their new code,
    /// which carry on with the old instances' state (see `runtime::upgrade`) and are opened.
    fn swap(&mut self, plan: &SwapPlan) -> Result<(), Stop> {
        for i in 0..self.stages.len() {
            let v = self.vertices[i];
            let (Some((component, config)), Stage::Operator(op)) =
                (plan.code.get(&v), &mut self.stages[i])
            else {
                continue;
            };
            let old = std::mem::replace(op, Box::new(Swapping));
            let new = self.carry_on(v, old, component, config.as_ref())?;
            tracing::info!(
                subtask = self.subtask,
                "operator \"{}\" runs its new code",
                self.spec.vertices[v].name
            );
            self.stages[i] = Stage::Operator(new);
            self.code[i] = Some((component.clone(), config.clone()));
        }
        Ok(())
    }

    /// Operator vertex `v`'s instance `old` carried on by `component` (with `config`, else the
    /// spec's), opened.
    fn carry_on(
        &self,
        v: usize,
        old: Box<dyn Operator>,
        component: &OperatorComponent,
        config: Option<&String>,
    ) -> Result<Box<dyn Operator>, Stop> {
        let mut ctx = operator_context(&self.spec, v, self.subtask, self.shared.cancel_flag());
        if let Some(config) = config {
            ctx.config = config.clone();
        }
        let failed = |e| operator_error(&self.spec, v, self.subtask, e);
        let mut new = old
            .with_code(component, ctx, self.clock.clone())
            .map_err(failed)?;
        new.open().map_err(failed)?;
        Ok(new)
    }

    /// Replaces the instance of WebAssembly operator stage `i` by a new one of the same code
    /// when its linear memory has reached [`RENEW_AT`] of its limit after a call (records,
    /// event time or processing time), having grown by a quarter of the limit since the
    /// instance was made. The host holds the operator's keyed state, timers and operator
    /// state, so the new instance carries on with them (as after an upgrade); what the old
    /// one kept in its own memory (fields of the operator object) starts over, as after a
    /// restore. A guest whose memory grows with every call (a leak in its code or its
    /// language's runtime) so keeps running instead of failing the job at the limit.
    fn renew(&mut self, i: usize) -> Result<(), Stop> {
        let (Some((component, config)), Stage::Operator(op)) = (&self.code[i], &mut self.stages[i])
        else {
            return Ok(());
        };
        let limit = component.limits.memory.as_u64();
        let Some(usage) = op.guest_usage() else {
            return Ok(());
        };
        // An instance that started near the limit would be renewed again and again: only
        // one that grew by a quarter of the limit is.
        let (calls, memory) = (usage.calls, usage.memory_bytes);
        if memory < limit / RENEW_AT.1 * RENEW_AT.0
            || memory.saturating_sub(usage.start_bytes) < limit / 4
        {
            return Ok(());
        }
        let v = self.vertices[i];
        let old = std::mem::replace(op, Box::new(Swapping));
        let (component, config) = (component.clone(), config.clone());
        let new = self.carry_on(v, old, &component, config.as_ref())?;
        tracing::warn!(
            subtask = self.subtask,
            "operator \"{}\" held {} of linear memory after {} calls, {}/{} of its limit of \
             {}: it carries on in a new instance of its code (its state is kept; fields of \
             the operator object start over). Memory that grows with every call is a leak in \
             the operator or its language's runtime",
            self.spec.vertices[v].name,
            crate::wasm::bytes(memory),
            calls,
            RENEW_AT.0,
            RENEW_AT.1,
            crate::wasm::bytes(limit),
        );
        self.metrics.vertices[v].renewed();
        self.stages[i] = Stage::Operator(new);
        Ok(())
    }

    /// After the barrier of the stop checkpoint `n`: processes nothing more (its upstream
    /// tasks send nothing after that barrier either) and waits until `n` is complete, or the
    /// attempt is cancelled.
    fn park(&mut self, n: u64, setup: &TaskSetup) -> Result<(), Stop> {
        loop {
            match setup.control.recv_timeout(MAX_IDLE) {
                Ok(Control::Complete(id)) => {
                    self.notify_complete(id)?;
                    if id >= n {
                        return Ok(());
                    }
                }
                Ok(Control::Trigger(_)) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(Stop::Disconnected),
            }
            if setup.shared.is_cancelled() {
                return Err(Stop::Disconnected);
            }
        }
    }

    /// Checkpoint `n` completed: sinks forget what they pre-committed for it, operators
    /// that the files of it are shared for good.
    fn notify_complete(&mut self, n: u64) -> Result<(), Stop> {
        for i in 0..self.stages.len() {
            match &mut self.stages[i] {
                Stage::Sink(sink) => {
                    if let Err(e) = sink.notify_complete(n) {
                        let context = format!("commit of checkpoint {n} failed");
                        return Err(self.connector_failed(i, &context, e));
                    }
                }
                Stage::Operator(op) => op.notify_complete(n),
            }
        }
        Ok(())
    }

    /// One warning per vertex about the records it emitted to side outputs that nothing
    /// reads, naming a few of them (a guest chooses the names and how many there are).
    fn warn_side_dropped(&self) {
        const SHOWN: usize = 5;
        let mut by_vertex: std::collections::BTreeMap<usize, Vec<(&str, u64)>> = Default::default();
        for ((v, name), n) in &self.side_dropped {
            by_vertex.entry(*v).or_default().push((name, *n));
        }
        for (v, outputs) in by_vertex {
            let vertex = &self.spec.vertices[v].name;
            let total: u64 = outputs.iter().map(|(_, n)| n).sum();
            let mut names: Vec<String> = outputs
                .iter()
                .take(SHOWN)
                .map(|(name, n)| format!("{} ({n})", crate::wasm::describe_bytes(name.as_bytes())))
                .collect();
            if outputs.len() > SHOWN {
                names.push(format!("{} more", outputs.len() - SHOWN));
            }
            tracing::warn!(
                subtask = self.subtask,
                "{total} records that \"{vertex}\" emitted to side outputs no vertex reads were \
                 dropped: {}; read one with input = \"{vertex}.<name>\"",
                names.join(", ")
            );
        }
    }

    /// Sends a batch of the chain's last vertex to the targets that read that output.
    fn send(&mut self, side_output: Option<&str>, batch: &Batch) -> Result<bool, Stop> {
        self.output.push(side_output, batch).map_err(|e| match e {
            PushError::Disconnected => Stop::Disconnected,
            PushError::MissingKey { to } => Stop::Failed(vertex_failure(
                &self.spec,
                self.tail,
                self.subtask,
                FailureKind::Other,
                format!(
                    "emitted a record without a key into the key_by edge to \"{to}\"; \
                     emit every record with a key (or use another edge)"
                ),
                None,
            )),
        })
    }

    /// Routes what stage `i` emitted to side outputs: to the targets reading them when the
    /// stage ends the chain (only then can a side output be read), else nowhere.
    fn send_side_outputs(&mut self, i: usize) -> Result<(), Stop> {
        let Stage::Operator(op) = &mut self.stages[i] else {
            return Ok(());
        };
        for (name, batch) in op.take_side_outputs() {
            let m = &self.metrics.vertices[self.vertices[i]];
            m.records_out
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let read = i + 1 == self.stages.len() && self.send(Some(&name), &batch)?;
            if !read {
                *self
                    .side_dropped
                    .entry((self.vertices[i], name))
                    .or_default() += batch.len() as u64;
            }
        }
        Ok(())
    }

    /// What a source read: into the chain, then the watermarks it makes (with the source's
    /// strategy; `split_time` from a source that reads several splits at once).
    fn push_source(&mut self, batch: &Batch, split_time: Option<SplitTime>) -> Result<(), Stop> {
        self.push(0, batch)?;
        if let Some(g) = &mut self.head_generator {
            let mut made = smallvec::SmallVec::<[Watermark; 2]>::new();
            let now = self.clock.now_ms();
            match split_time {
                Some(time) => g.on_split_batch(batch, time, now, |w| made.push(w)),
                None => g.on_batch(batch, now, |w| made.push(w)),
            }
            for w in made {
                if let (Watermark::At(t), Some(source)) = (w, self.source) {
                    self.metrics.vertices[source].set_watermark(self.subtask, t);
                }
                self.watermark(0, w)?;
            }
        }
        Ok(())
    }

    /// What operator stage `i` emitted into `out` (from a batch, timers or its close): counted,
    /// side outputs routed, pushed on, then the watermarks it makes (with its strategy). The
    /// buffer goes back to the stage, empty.
    fn emitted(&mut self, i: usize, mut out: Batch) -> Result<(), Stop> {
        let m = &self.metrics.vertices[self.vertices[i]];
        m.records_out.fetch_add(out.len() as u64, Ordering::Relaxed);
        if let Stage::Operator(op) = &self.stages[i]
            && let Some(usage) = op.guest_usage()
        {
            m.set_guest_usage(self.subtask, usage);
        }
        let mut made = smallvec::SmallVec::<[Watermark; 2]>::new();
        if let Some(g) = &mut self.generators[i] {
            g.on_batch(&out, self.clock.now_ms(), |w| made.push(w));
            if let Some(&Watermark::At(t)) = made.iter().rfind(|w| matches!(w, Watermark::At(_))) {
                m.set_watermark(self.subtask, t);
            }
        }
        let result = self
            .send_side_outputs(i)
            .and_then(|()| self.push(i + 1, &out));
        out.clear();
        self.bufs[i] = out;
        result?;
        for w in made {
            self.watermark(i + 1, w)?;
        }
        Ok(())
    }

    /// Event time reaches stage `from` (from the chain's input, or made by the stage before
    /// it): each operator from there on fires its event-time timers up to it, and it goes on
    /// to the next stage and out of the chain, unless a stage makes its own watermarks.
    fn watermark(&mut self, from: usize, w: Watermark) -> Result<(), Stop> {
        for i in from..self.stages.len() {
            let behind =
                matches!(w, Watermark::At(t) if self.watermarks[i].is_some_and(|at| t <= at));
            if let (Watermark::At(t), false) = (w, behind) {
                if self.generators[i].is_none() {
                    self.metrics.vertices[self.vertices[i]].set_watermark(self.subtask, t);
                }
                if let Stage::Operator(_) = &self.stages[i] {
                    self.watermarks[i] = Some(t);
                    self.fire(i, true, |op, out| op.on_watermark(t, out))?;
                }
            }
            if self.generators[i].is_some() {
                return Ok(());
            }
        }
        Ok(self.output.watermark(w)?)
    }

    /// Fires the processing-time timers due now and says idleness where it set in; returns
    /// how long until there is more to do then (`None`: nothing is pending). A manual clock
    /// moves without telling, so it is looked at every [`MAX_IDLE`].
    fn on_time(&mut self) -> Result<Option<Duration>, Stop> {
        let now = self.clock.now_ms();
        let mut next: Option<i64> = None;
        let mut due = |t: Option<i64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if let Some(g) = &mut self.head_generator {
            if let Some(w) = g.on_time(now) {
                self.watermark(0, w)?;
            }
            due(self.head_generator.as_ref().and_then(Generator::next_check));
        }
        for i in 0..self.stages.len() {
            if let Stage::Operator(op) = &mut self.stages[i] {
                if op.next_processing_time().is_some_and(|t| t <= now) {
                    self.fire(i, true, |op, out| op.on_processing_time(now, out))?;
                }
                if let Stage::Operator(op) = &mut self.stages[i] {
                    due(op.next_processing_time());
                }
            }
            if let Some(g) = &mut self.generators[i] {
                if let Some(w) = g.on_time(now) {
                    self.watermark(i + 1, w)?;
                }
                due(self.generators[i].as_ref().and_then(Generator::next_check));
            }
        }
        let wait = next.map(|t| Duration::from_millis(t.saturating_sub(now).max(0) as u64));
        Ok(match (wait, self.clock.is_manual()) {
            (Some(wait), true) => Some(wait.max(Duration::from_millis(1)).min(MAX_IDLE)),
            (wait, _) => wait,
        })
    }

    /// Calls `call` (timers firing, or the end of input) on operator stage `i` until it has
    /// no more to emit, handing on what each call emitted before the next, and renews the
    /// instance after each call (after the last one too, if `renew_at_end`).
    fn fire(
        &mut self,
        i: usize,
        renew_at_end: bool,
        mut call: impl FnMut(&mut dyn Operator, &mut Batch) -> Result<bool, OperatorError>,
    ) -> Result<(), Stop> {
        loop {
            let Stage::Operator(op) = &mut self.stages[i] else {
                return Ok(());
            };
            let mut out = std::mem::take(&mut self.bufs[i]);
            let more = match call(op.as_mut(), &mut out) {
                Ok(more) => more,
                Err(e) => return Err(self.operator_failed(i, e)),
            };
            self.emitted(i, out)?;
            if more || renew_at_end {
                self.renew(i)?;
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Pushes `batch` into stage `i` and everything after it.
    fn push(&mut self, i: usize, batch: &Batch) -> Result<(), Stop> {
        self.push_from(i, 0, batch)
    }

    /// Pushes `batch`, which a channel delivered to the head's input `input`, into the chain.
    fn push_input(&mut self, input: u8, batch: &Batch) -> Result<(), Stop> {
        self.push_from(0, input, batch)
    }

    /// Pushes `batch` into input `input` of stage `i` and everything after it.
    fn push_from(&mut self, i: usize, input: u8, batch: &Batch) -> Result<(), Stop> {
        if i == self.stages.len() {
            return self.send(None, batch).map(|_| ());
        }
        let m = &self.metrics.vertices[self.vertices[i]];
        m.records_in
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        match &mut self.stages[i] {
            Stage::Operator(op) => {
                if let Some((aligned, snapshot, stage, _)) = &self.swapped
                    && *stage == i
                {
                    // The first records reach the new code.
                    let pause = Pause {
                        total: aligned.elapsed(),
                        snapshot: *snapshot,
                    };
                    let (.., plan) = self.swapped.take().expect("checked");
                    plan.paused(pause);
                }
                let mut out = std::mem::take(&mut self.bufs[i]);
                if let Err(e) = op.process_input(input, batch, &mut out) {
                    return Err(self.operator_failed(i, e));
                }
                self.emitted(i, out)?;
                self.renew(i)
            }
            Stage::Sink(sink) => {
                m.received(self.clock.now_ms(), batch.timestamps());
                sink.write(batch)
                    .map_err(|e| self.connector_failed(i, "", e))
            }
        }
    }

    /// End of input: closes operators in order, finishes sinks, ends the output. Returns the
    /// last checkpoint the task snapshotted and the sinks' final pre-commits.
    fn finish(mut self) -> Result<Finish, Stop> {
        let mut commits = Vec::new();
        for i in 0..self.stages.len() {
            match &mut self.stages[i] {
                Stage::Operator(_) => self.fire(i, false, |op, out| op.close(out))?,
                Stage::Sink(sink) => match sink.finish() {
                    Ok(commit) if commit.is_null() => {}
                    Ok(commit) => commits.push((self.vertices[i], commit)),
                    Err(e) => return Err(self.connector_failed(i, "", e)),
                },
            }
        }
        self.warn_side_dropped();
        self.output.end()?;
        Ok((self.last_snapshot, commits))
    }
}
