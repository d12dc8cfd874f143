//! One chain subtask: its thread's loop.
//!
//! A source chain polls its source and pushes each batch through the chained operators; any
//! other chain selects over its input channels. When the input ends, operators are closed in
//! chain order (each one's last output still flows to the next), sinks are flushed, and the
//! end is passed downstream.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::{Receiver, Select};

use super::native;
use super::operator::{Operator, OperatorContext};
use super::output::{Disconnected, Message, Output, PushError, Target};
use super::{JobError, Metrics, Shared, key_group::key_group_range, role};
use crate::batch::{BATCH_RECORDS, Batch};
use crate::connectors::{Poll, Sink, Source};
use crate::job::spec::{JobSpec, OperatorCode, VertexKind};
use crate::wasm::{OperatorComponent, WasmOperator};

/// The longest a source sleeps when it has nothing to emit, so cancellation stays prompt.
const MAX_IDLE: Duration = Duration::from_millis(100);

pub(crate) struct TaskSetup {
    pub spec: Arc<JobSpec>,
    pub chain: Vec<usize>,
    pub subtask: u32,
    pub inputs: Vec<Receiver<Message>>,
    pub targets: Vec<Target>,
    pub components: HashMap<usize, OperatorComponent>,
    pub metrics: Arc<Metrics>,
    pub shared: Arc<Shared>,
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
    output: Output,
    metrics: Arc<Metrics>,
    /// Side-output records no vertex reads, by vertex and side output name.
    side_dropped: std::collections::BTreeMap<(usize, String), u64>,
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

/// Runs the task; `Err` is this task's own failure (not the echo of another's).
pub(crate) fn run(setup: TaskSetup) -> Result<(), JobError> {
    let shared = Arc::clone(&setup.shared);
    match run_inner(setup) {
        Ok(()) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
        Err(Stop::Disconnected) => {
            if !shared.is_cancelled() {
                // A peer went away without recording why: make sure the job still fails.
                shared.fail(JobError::Cancelled);
            }
            Ok(())
        }
    }
}

fn error(spec: &JobSpec, vertex: usize, subtask: u32, message: String) -> Stop {
    let v = &spec.vertices[vertex];
    Stop::Failed(JobError::Task {
        role: role(&v.kind),
        name: v.name.clone(),
        uid: match &v.kind {
            VertexKind::Operator { uid, .. } => Some(uid.clone()),
            _ => None,
        },
        subtask,
        parallelism: v.parallelism,
        message,
    })
}

fn run_inner(mut setup: TaskSetup) -> Result<(), Stop> {
    let spec = Arc::clone(&setup.spec);
    let s = setup.subtask;
    let head = setup.chain[0];
    let source = match &spec.vertices[head].kind {
        VertexKind::Source(config) => {
            let p = spec.vertices[head].parallelism as usize;
            Some(
                config
                    .build(&spec.base_dir, s as usize, p)
                    .map_err(|e| error(&spec, head, s, e.to_string()))?,
            )
        }
        _ => None,
    };
    let rest: Vec<usize> = setup.chain[usize::from(source.is_some())..].to_vec();
    let mut stages = Vec::with_capacity(rest.len());
    for &v in &rest {
        stages.push(build_stage(&spec, v, s, &mut setup.components)?);
    }
    let mut chain = Chain {
        tail: *setup.chain.last().expect("a chain has a vertex"),
        bufs: rest.iter().map(|_| Batch::default()).collect(),
        spec: Arc::clone(&spec),
        subtask: s,
        vertices: rest,
        stages,
        output: Output::new(std::mem::take(&mut setup.targets)),
        side_dropped: Default::default(),
        metrics: Arc::clone(&setup.metrics),
    };
    for i in 0..chain.stages.len() {
        if let Stage::Operator(op) = &mut chain.stages[i] {
            op.open()
                .map_err(|e| error(&spec, chain.vertices[i], s, e.to_string()))?;
        }
    }
    match source {
        Some(source) => run_source(&setup, head, source, &mut chain)?,
        None => run_inputs(&setup, &mut chain)?,
    }
    chain.finish()
}

fn build_stage(
    spec: &JobSpec,
    v: usize,
    s: u32,
    components: &mut HashMap<usize, OperatorComponent>,
) -> Result<Stage, Stop> {
    let vertex = &spec.vertices[v];
    match &vertex.kind {
        VertexKind::Operator { uid, code, config } => {
            let ctx = OperatorContext {
                job: spec.name.clone(),
                uid: uid.clone(),
                subtask: s,
                parallelism: vertex.parallelism,
                max_parallelism: spec.max_parallelism,
                key_groups: key_group_range(spec.max_parallelism, vertex.parallelism, s),
                config: config.clone(),
            };
            let op: Box<dyn Operator> = match code {
                OperatorCode::Native(name) => native::build(name, &ctx),
                OperatorCode::Wasm(_) => {
                    let component = components
                        .remove(&v)
                        .expect("Job::new loads every wasm operator");
                    WasmOperator::new(&component, ctx).map(|o| Box::new(o) as Box<dyn Operator>)
                }
            }
            .map_err(|e| error(spec, v, s, e.to_string()))?;
            Ok(Stage::Operator(op))
        }
        VertexKind::Sink(config) => config
            .build(&spec.base_dir, s as usize, vertex.parallelism as usize)
            .map(Stage::Sink)
            .map_err(|e| error(spec, v, s, e.to_string())),
        VertexKind::Source(_) => unreachable!("a source only heads a chain"),
    }
}

fn run_source(
    setup: &TaskSetup,
    vertex: usize,
    mut source: Box<dyn Source>,
    chain: &mut Chain,
) -> Result<(), Stop> {
    let mut batch = Batch::default();
    let counter = &setup.metrics.vertices[vertex].records_out;
    loop {
        if setup.shared.is_cancelled() {
            return Err(Stop::Disconnected);
        }
        if setup.shared.is_stopping() {
            return Ok(());
        }
        let status = source
            .poll(&mut batch, BATCH_RECORDS)
            .map_err(|e| error(&setup.spec, vertex, setup.subtask, e.to_string()))?;
        if !batch.is_empty() {
            counter.fetch_add(batch.len() as u64, Ordering::Relaxed);
            chain.push(0, &batch)?;
            batch.clear();
        }
        match status {
            Poll::Ready => {}
            Poll::Idle(d) => {
                chain.output.flush()?;
                std::thread::sleep(d.min(MAX_IDLE));
            }
            Poll::Finished => return Ok(()),
        }
    }
}

fn run_inputs(setup: &TaskSetup, chain: &mut Chain) -> Result<(), Stop> {
    let inputs = &setup.inputs;
    let mut select = Select::new();
    for rx in inputs {
        select.recv(rx);
    }
    let mut open = inputs.len();
    while open > 0 {
        let op = select.select();
        let i = op.index();
        match op.recv(&inputs[i]) {
            Ok(Message::Data(batch)) => chain.push(0, &batch)?,
            Ok(Message::End) => {
                select.remove(i);
                open -= 1;
            }
            Err(_) => return Err(Stop::Disconnected),
        }
        // Send partial batches only when no input has more waiting: full batches under load,
        // low latency when idle.
        if inputs.iter().all(Receiver::is_empty) {
            chain.output.flush()?;
        }
    }
    Ok(())
}

impl Chain {
    fn fail(&self, i: usize, message: String) -> Stop {
        error(&self.spec, self.vertices[i], self.subtask, message)
    }

    /// Sends a batch of the chain's last vertex to the targets that read that output.
    fn send(&mut self, side_output: Option<&str>, batch: &Batch) -> Result<bool, Stop> {
        self.output.push(side_output, batch).map_err(|e| match e {
            PushError::Disconnected => Stop::Disconnected,
            PushError::MissingKey { to } => error(
                &self.spec,
                self.tail,
                self.subtask,
                format!(
                    "emitted a record without a key into the key_by edge to \"{to}\"; \
                         emit every record with a key (or use another edge)"
                ),
            ),
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

    /// Pushes `batch` into stage `i` and everything after it.
    fn push(&mut self, i: usize, batch: &Batch) -> Result<(), Stop> {
        if i == self.stages.len() {
            return self.send(None, batch).map(|_| ());
        }
        let m = &self.metrics.vertices[self.vertices[i]];
        m.records_in
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        match &mut self.stages[i] {
            Stage::Operator(op) => {
                let mut out = std::mem::take(&mut self.bufs[i]);
                if let Err(e) = op.process(batch, &mut out) {
                    return Err(self.fail(i, e.to_string()));
                }
                m.records_out.fetch_add(out.len() as u64, Ordering::Relaxed);
                let result = self
                    .send_side_outputs(i)
                    .and_then(|()| self.push(i + 1, &out));
                out.clear();
                self.bufs[i] = out;
                result
            }
            Stage::Sink(sink) => sink
                .write(batch)
                .map_err(|e| error(&self.spec, self.vertices[i], self.subtask, e.to_string())),
        }
    }

    /// End of input: closes operators in order, flushes sinks, ends the output.
    fn finish(mut self) -> Result<(), Stop> {
        for i in 0..self.stages.len() {
            match &mut self.stages[i] {
                Stage::Operator(op) => {
                    let mut out = std::mem::take(&mut self.bufs[i]);
                    if let Err(e) = op.close(&mut out) {
                        return Err(self.fail(i, e.to_string()));
                    }
                    let m = &self.metrics.vertices[self.vertices[i]];
                    m.records_out.fetch_add(out.len() as u64, Ordering::Relaxed);
                    self.send_side_outputs(i)?;
                    self.push(i + 1, &out)?;
                }
                Stage::Sink(sink) => {
                    if let Err(e) = sink.flush() {
                        return Err(self.fail(i, e.to_string()));
                    }
                }
            }
        }
        for ((v, name), n) in &self.side_dropped {
            let vertex = &self.spec.vertices[*v].name;
            tracing::warn!(
                subtask = self.subtask,
                "{n} records emitted to side output \"{name}\" of \"{vertex}\" were dropped: no vertex \
                 reads it (read it with input = \"{vertex}.{name}\")"
            );
        }
        Ok(self.output.end()?)
    }
}
