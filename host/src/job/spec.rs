//! The job spec file (TOML) and its validation.
//!
//! ```toml
//! [job]
//! name = "wordcount"
//! parallelism = 2          # default for every vertex
//! max_parallelism = 128    # number of key groups
//! buffer_debloat_target = "1s"  # optional: records queued per channel ≈ this much work
//!
//! [[source]]
//! name = "lines"
//! type = "file"            # the connector; the other keys are its configuration
//! path = "input.txt"
//!
//! [[operator]]
//! name = "split"
//! uid = "split"            # ties state to code across upgrades: never change it
//! wasm = "split.wasm"      # or `native = "split_words"` for a built-in
//! input = "lines"          # or a list; "op.name" reads op's side output `name`
//! second_input = "other"   # an operator's second input (`Record::input()` is 1), or a list
//! edge = "rebalance"       # forward (default) | key_by | rebalance
//! config = { lowercase = true }
//! limits = { memory = "512 MiB" }   # over the job's [limits] (see `wasm::Limits`)
//! grants = { env = ["TZ"] }         # nothing outside the sandbox unless granted
//!
//! [[sink]]
//! name = "out"
//! type = "print"
//! input = "split"
//!
//! [state]
//! backend = "rocksdb"      # or "memory" (default); see `state::StateConfig`
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::checkpoint::{CheckpointConfig, RestartStrategy};
use crate::connectors::{SinkConfig, SourceConfig};
use crate::native;
use crate::native::join::JoinSpec;
use crate::native::window::{GuestCode, WindowSpec};
use crate::state::StateConfig;
use crate::wasm::{Grants, Limits};
use crate::watermark::WatermarkStrategy;

/// Flink's default number of key groups.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;
/// Flink's upper bound for `max_parallelism`.
pub const MAX_MAX_PARALLELISM: u32 = 32_768;

/// A spec that cannot run, with what to change.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec file cannot be read.
    #[error("cannot read job spec {path}: {cause}")]
    Read {
        /// The file or directory involved.
        path: PathBuf,
        /// Why it failed.
        cause: std::io::Error,
    },
    /// The spec is not valid TOML, or has keys or values of the wrong kind.
    #[error("job spec {path} is not valid: {message}")]
    Parse {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong, in the words of the check that failed.
        message: String,
    },
    /// The spec parses but describes a job that cannot run.
    #[error("job spec {path}: {message}")]
    Invalid {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong, in the words of the check that failed.
        message: String,
    },
}

/// How records travel from one vertex to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// Subtask `i` feeds subtask `i` (same parallelism); chained into one thread when possible.
    #[default]
    Forward,
    /// By key group of the record's key, so each key always reaches the same subtask.
    KeyBy,
    /// Round-robin over the downstream subtasks.
    Rebalance,
}

/// What an operator runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorCode {
    /// A WebAssembly component (absolute path), with its limits and grants.
    Wasm {
        /// The file or directory involved.
        path: PathBuf,
        /// The limits of each instance.
        limits: Limits,
        /// What it may reach outside its sandbox.
        grants: Grants,
    },
    /// A built-in native operator by name.
    Native(String),
    /// A window in the host, with a built-in aggregate.
    Window(WindowSpec),
    /// A join of its two inputs in the host.
    Join(JoinSpec),
}

/// Kind of a vertex of the job graph.
#[derive(Debug, Clone)]
pub enum VertexKind {
    /// A source, with its connector's configuration.
    Source(SourceConfig),
    /// An operator.
    Operator {
        /// The stable id that ties its state to it across upgrades.
        uid: String,
        /// What it runs.
        code: OperatorCode,
        /// The `config` table as JSON, handed to the operator's `open`.
        config: String,
    },
    /// A sink, with its connector's configuration.
    Sink(SinkConfig),
}

/// Where a vertex reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The upstream vertex, by index into [`JobSpec::vertices`].
    pub from: usize,
    /// How records are distributed over the consumer's subtasks.
    pub edge: EdgeKind,
    /// A side output of `from` (`input = "op.name"`) instead of its main output.
    pub side_output: Option<String>,
    /// Which of the consumer's inputs it feeds: 0 for `input`, 1 for `second_input`.
    pub index: u8,
}

/// A vertex of the logical job graph: a source, an operator or a sink.
#[derive(Debug, Clone)]
pub struct Vertex {
    /// The name, unique in the job.
    pub name: String,
    /// How many subtasks run it.
    pub parallelism: u32,
    /// What it reads (none for a source).
    pub inputs: Vec<Input>,
    /// Source, operator or sink, with its configuration.
    pub kind: VertexKind,
    /// How the watermarks of its output are made from its records' timestamps (a source, or
    /// an operator that sets the timestamps); `None`: a source makes none, an operator
    /// forwards those of its input.
    pub watermark: Option<WatermarkStrategy>,
}

/// A validated job: vertices in topological order (every input before its consumer).
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The name, unique in the job.
    pub name: String,
    /// The number of key groups: the most subtasks an operator can ever have.
    pub max_parallelism: u32,
    /// The vertices, every input before its consumer.
    pub vertices: Vec<Vertex>,
    /// The directory relative paths in the spec are resolved against.
    pub base_dir: PathBuf,
    /// The `[checkpoint]` table: checkpointing is on when it is present.
    pub checkpoint: Option<CheckpointConfig>,
    /// The `[restart]` table, or Flink's default for the checkpoint setting.
    pub restart: RestartStrategy,
    /// The `[state]` table: the keyed-state backend.
    pub state: StateConfig,
    /// Buffer debloating (Flink's `taskmanager.network.memory.buffer-debloat.target`): the
    /// records queued in a channel are bounded to about what its receiver processes in this
    /// time, by shrinking the batches its senders send (see `runtime::debloat`). `None` (the
    /// default, as in Flink): the channels hold a fixed number of full batches.
    pub buffer_debloat_target: Option<Duration>,
}

impl JobSpec {
    /// Where the job's RocksDB working directories go: `<spec dir>/<[state] dir>/<job>`.
    pub fn state_root(&self) -> PathBuf {
        self.base_dir.join(&self.state.dir).join(&self.name)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    job: Option<RawJob>,
    #[serde(default)]
    source: Vec<toml::Table>,
    #[serde(default)]
    operator: Vec<RawOperator>,
    #[serde(default)]
    sink: Vec<toml::Table>,
    checkpoint: Option<CheckpointConfig>,
    restart: Option<toml::Table>,
    state: Option<StateConfig>,
    /// Limits of every WebAssembly operator (see [`Limits`]).
    limits: Option<toml::Table>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Option<String>,
    parallelism: Option<u32>,
    max_parallelism: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    buffer_debloat_target: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Inputs {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    name: String,
    uid: Option<String>,
    wasm: Option<PathBuf>,
    native: Option<String>,
    input: Option<Inputs>,
    second_input: Option<Inputs>,
    #[serde(default)]
    edge: EdgeKind,
    parallelism: Option<u32>,
    config: Option<toml::Table>,
    limits: Option<toml::Table>,
    grants: Option<toml::Table>,
    watermark: Option<WatermarkStrategy>,
    window: Option<WindowSpec>,
    join: Option<JoinSpec>,
}

/// The keys every vertex table has besides its connector configuration.
struct Common {
    name: String,
    parallelism: Option<u32>,
    inputs: Vec<String>,
    /// An operator's `second_input`.
    second_inputs: Vec<String>,
    edge: EdgeKind,
    watermark: Option<WatermarkStrategy>,
}

fn take_common(table: &mut toml::Table, what: &str, index: usize) -> Result<Common, String> {
    let name = match table.remove("name") {
        Some(toml::Value::String(s)) => s,
        Some(_) => return Err(format!("{what} #{}: `name` must be a string", index + 1)),
        None => return Err(format!("{what} #{} has no `name`", index + 1)),
    };
    let parallelism = match table.remove("parallelism") {
        None => None,
        Some(toml::Value::Integer(p)) => Some(u32::try_from(p).map_err(|_| {
            format!("{what} \"{name}\": parallelism {p} is out of range; use 1 to max_parallelism")
        })?),
        Some(_) => {
            return Err(format!(
                "{what} \"{name}\": `parallelism` must be an integer"
            ));
        }
    };
    let inputs = match table.remove("input") {
        None => Vec::new(),
        Some(v) => match Inputs::deserialize(v) {
            Ok(Inputs::One(s)) => vec![s],
            Ok(Inputs::Many(v)) => v,
            Err(_) => {
                return Err(format!(
                    "{what} \"{name}\": `input` must be a vertex name or a list of names"
                ));
            }
        },
    };
    let edge = match table.remove("edge") {
        None => EdgeKind::Forward,
        Some(v) => EdgeKind::deserialize(v).map_err(|e| format!("{what} \"{name}\": edge: {e}"))?,
    };
    let watermark = match table.remove("watermark") {
        None => None,
        Some(v) => Some(
            WatermarkStrategy::deserialize(v)
                .map_err(|e| format!("{what} \"{name}\": watermark: {e}"))?,
        ),
    };
    Ok(Common {
        name,
        parallelism,
        inputs,
        second_inputs: Vec::new(),
        edge,
        watermark,
    })
}

impl JobSpec {
    /// Reads and validates a spec file (`job.toml` of a project directory).
    pub fn from_file(path: &Path) -> Result<JobSpec, SpecError> {
        // A project's directory, as `weir new` makes it, stands for its job.
        let project = path.join("job.toml");
        let path = if path.is_dir() && project.is_file() {
            &project
        } else {
            path
        };
        let text = std::fs::read_to_string(path).map_err(|cause| SpecError::Read {
            path: path.to_path_buf(),
            cause,
        })?;
        let base_dir = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."));
        let base_dir = std::fs::canonicalize(base_dir).unwrap_or_else(|_| base_dir.to_path_buf());
        let default_name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "job".into());
        Self::parse(&text, &base_dir, &default_name).map_err(|e| match e {
            ParseError::Syntax(message) => SpecError::Parse {
                path: path.to_path_buf(),
                message,
            },
            ParseError::Invalid(message) => SpecError::Invalid {
                path: path.to_path_buf(),
                message,
            },
        })
    }

    /// Parses and validates spec text; relative paths resolve against `base_dir`.
    pub(crate) fn parse(
        text: &str,
        base_dir: &Path,
        default_name: &str,
    ) -> Result<JobSpec, ParseError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ParseError::Syntax(e.to_string()))?;
        build(raw, base_dir, default_name).map_err(ParseError::Invalid)
    }

    /// How many inputs (of all vertices, main or side output) read from vertex `v`.
    pub fn consumer_count(&self, v: usize) -> usize {
        self.vertices
            .iter()
            .flat_map(|vertex| &vertex.inputs)
            .filter(|input| input.from == v)
            .count()
    }
}

#[derive(Debug)]
pub(crate) enum ParseError {
    Syntax(String),
    Invalid(String),
}

/// A job's name names its directories (of checkpoints, of RocksDB state): it must be one
/// file name, or a job would write its files outside them.
fn check_job_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(format!(
            "[job] name {name:?} cannot name a job: a job's name is the name of its checkpoint \
             and state directories, so it must be one file name (not empty, `.` or `..`, without \
             `/` or `\\`), e.g. name = \"wordcount\""
        ));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "[job] name is {} bytes long; a job's name names its checkpoint and state \
             directories, so it may be at most {MAX_NAME} bytes",
            name.len()
        ));
    }
    Ok(())
}

/// The longest name of a job or a vertex, in bytes: they name directories and files, whose
/// names take at most 255 bytes with what weir adds.
const MAX_NAME: usize = 128;

fn build(raw: RawFile, base_dir: &Path, default_name: &str) -> Result<JobSpec, String> {
    let job = raw.job.unwrap_or_default();
    let name = job.name.unwrap_or_else(|| default_name.to_string());
    check_job_name(&name)?;
    let max_parallelism = job.max_parallelism.unwrap_or(DEFAULT_MAX_PARALLELISM);
    if max_parallelism == 0 || max_parallelism > MAX_MAX_PARALLELISM {
        return Err(format!(
            "max_parallelism {max_parallelism} is out of range; use 1 to {MAX_MAX_PARALLELISM} \
             (default {DEFAULT_MAX_PARALLELISM})"
        ));
    }
    let default_parallelism = job.parallelism.unwrap_or(1);
    let buffer_debloat_target = job.buffer_debloat_target.filter(|t| !t.is_zero());
    if let Some(t) = buffer_debloat_target
        && t < Duration::from_millis(10)
    {
        return Err(format!(
            "buffer_debloat_target {t:?} is too short: batches would shrink to a few records; \
             use at least 10ms, or leave it out to turn debloating off"
        ));
    }
    if let Some(c) = &raw.checkpoint {
        c.validate().map_err(|e| format!("[checkpoint]: {e}"))?;
    }
    let state = raw.state.clone().unwrap_or_default();
    state.validate().map_err(|e| format!("[state]: {e}"))?;
    let restart = restart_strategy(raw.restart, raw.checkpoint.is_some())?;
    restart.validate()?;
    // Checked on its own, so that a mistake there is not blamed on the first operator (nor
    // missed in a job without WebAssembly operators).
    if let Some(limits) = &raw.limits {
        Limits::resolve(Some(limits), None).map_err(|e| match e.strip_prefix("limits") {
            Some(rest) => format!("[limits]{rest}"),
            None => e,
        })?;
    }

    // Collect every vertex with its unresolved inputs.
    struct Pending {
        common: Common,
        kind: VertexKind,
        role: &'static str,
    }
    let mut pending = Vec::new();
    for (i, mut table) in raw.source.into_iter().enumerate() {
        let common = take_common(&mut table, "source", i)?;
        if !common.inputs.is_empty() {
            return Err(format!(
                "source \"{}\" has an `input`; sources read from outside the job, remove it",
                common.name
            ));
        }
        let config = connector(table, "source", &common.name, |c: &SourceConfig| {
            c.validate(base_dir)
        })?;
        if common.watermark.is_some() && !config.produces_timestamps() {
            return Err(format!(
                "source \"{}\" has a `watermark` strategy, but its records carry no event time; \
                 put the strategy on the operator that gives them one (it emits them with a \
                 timestamp), or give the source `event_time = {{ ... }}`",
                common.name
            ));
        }
        pending.push(Pending {
            common,
            kind: VertexKind::Source(config),
            role: "source",
        });
    }
    let mut uids = HashSet::new();
    for op in raw.operator {
        let name = op.name;
        let code = match (op.wasm, op.native, op.window, op.join) {
            (None, None, None, Some(join)) => {
                join.validate()
                    .map_err(|e| format!("operator \"{name}\": join: {e}"))?;
                if op.limits.is_some() || op.grants.is_some() || op.config.is_some() {
                    return Err(format!(
                        "operator \"{name}\": `limits`, `grants` and `config` apply to \
                         WebAssembly operators; remove them from the join"
                    ));
                }
                if op.second_input.is_none() {
                    return Err(format!(
                        "join \"{name}\" has no `second_input`; a join reads two streams: \
                         `input` (the left side) and `second_input` (the right side)"
                    ));
                }
                OperatorCode::Join(join)
            }
            (Some(path), None, Some(mut window), None) => {
                window
                    .validate()
                    .map_err(|e| format!("operator \"{name}\": window: {e}"))?;
                if window.function.is_none() {
                    return Err(format!(
                        "operator \"{name}\" sets `wasm` and a window with a built-in aggregate; \
                         for a window function in the component set function = \"aggregate\" or \
                         \"process\" in the window instead of aggregate, or remove `wasm`"
                    ));
                }
                window.code = Some(Box::new(GuestCode {
                    path: base_dir.join(path),
                    limits: Limits::resolve(raw.limits.as_ref(), op.limits.as_ref())
                        .map_err(|e| format!("operator \"{name}\": {e}"))?,
                    grants: Grants::resolve(op.grants, base_dir)
                        .map_err(|e| format!("operator \"{name}\": {e}"))?,
                }));
                OperatorCode::Window(window)
            }
            (None, None, Some(window), None) => {
                window
                    .validate()
                    .map_err(|e| format!("operator \"{name}\": window: {e}"))?;
                if window.function.is_some() {
                    return Err(format!(
                        "operator \"{name}\": a window with a function needs the component that \
                         implements it: add wasm = \"path/to/function.wasm\""
                    ));
                }
                if op.limits.is_some() || op.grants.is_some() || op.config.is_some() {
                    return Err(format!(
                        "operator \"{name}\": `limits`, `grants` and `config` apply to \
                         WebAssembly operators; remove them from the window"
                    ));
                }
                OperatorCode::Window(window)
            }
            (Some(path), None, None, None) => OperatorCode::Wasm {
                path: base_dir.join(path),
                limits: Limits::resolve(raw.limits.as_ref(), op.limits.as_ref())
                    .map_err(|e| format!("operator \"{name}\": {e}"))?,
                grants: Grants::resolve(op.grants, base_dir)
                    .map_err(|e| format!("operator \"{name}\": {e}"))?,
            },
            (None, Some(native), None, None) => {
                if op.limits.is_some() || op.grants.is_some() {
                    return Err(format!(
                        "operator \"{name}\": `limits` and `grants` apply to WebAssembly \
                         operators; remove them from the native operator"
                    ));
                }
                if !native::exists(&native) {
                    return Err(format!(
                        "operator \"{name}\": unknown native operator \"{native}\"; built-ins are: {}",
                        native::NAMES.join(", ")
                    ));
                }
                OperatorCode::Native(native)
            }
            (None, None, None, None) => {
                return Err(format!(
                    "operator \"{name}\" needs `wasm = \"path/to/operator.wasm\"` (or `native = \"...\"` for a built-in, `window = {{ ... }}` or `join = {{ ... }}`)"
                ));
            }
            _ => {
                return Err(format!(
                    "operator \"{name}\" sets more than one of `wasm`, `native`, `window` and `join`; keep one"
                ));
            }
        };
        if op.second_input.is_some()
            && !matches!(code, OperatorCode::Wasm { .. } | OperatorCode::Join(_))
        {
            return Err(format!(
                "operator \"{name}\" has a `second_input`, which only WebAssembly operators and \
                 joins read; list every stream in `input` for a union of them"
            ));
        }
        let uid = match op.uid {
            Some(uid) if uid.is_empty() => {
                return Err(format!("operator \"{name}\": `uid` must not be empty"));
            }
            Some(uid) => uid,
            None => {
                return Err(format!(
                    "operator \"{name}\" has no `uid`; give it a stable id (e.g. uid = \"{name}\") \
                     that never changes, it ties the operator's state to it across upgrades"
                ));
            }
        };
        if !uids.insert(uid.clone()) {
            return Err(format!(
                "operator \"{name}\": uid \"{uid}\" is used by another operator; uids must be unique"
            ));
        }
        let config = serde_json::to_string(&op.config.unwrap_or_default())
            .map_err(|e| format!("operator \"{name}\": config: {e}"))?;
        let names = |inputs: Option<Inputs>| match inputs {
            None => Vec::new(),
            Some(Inputs::One(s)) => vec![s],
            Some(Inputs::Many(v)) => v,
        };
        pending.push(Pending {
            common: Common {
                name,
                parallelism: op.parallelism,
                inputs: names(op.input),
                second_inputs: names(op.second_input),
                edge: op.edge,
                watermark: op.watermark,
            },
            kind: VertexKind::Operator { uid, code, config },
            role: "operator",
        });
    }
    for (i, mut table) in raw.sink.into_iter().enumerate() {
        let common = take_common(&mut table, "sink", i)?;
        if common.watermark.is_some() {
            return Err(format!(
                "sink \"{}\" has a `watermark`; watermarks are made at sources and operators, \
                 remove it",
                common.name
            ));
        }
        let config = connector(table, "sink", &common.name, |c: &SinkConfig| {
            c.validate(base_dir)
        })?;
        pending.push(Pending {
            common,
            kind: VertexKind::Sink(config),
            role: "sink",
        });
    }

    // Two file sinks in one directory would delete each other's part files.
    let mut file_sinks: HashMap<PathBuf, &str> = HashMap::new();
    for p in &pending {
        if let VertexKind::Sink(SinkConfig::File(file)) = &p.kind {
            let dir = crate::checkpoint::storage::resolved(&base_dir.join(&file.path));
            if let Some(other) = file_sinks.insert(dir, &p.common.name) {
                return Err(format!(
                    "sinks \"{other}\" and \"{}\" both write part files into {}; give each \
                     file sink a directory of its own",
                    p.common.name,
                    base_dir.join(&file.path).display()
                ));
            }
        }
    }

    if !pending
        .iter()
        .any(|p| matches!(p.kind, VertexKind::Source(_)))
    {
        return Err("the job has no [[source]]; add one".into());
    }
    let mut index = HashMap::new();
    for (i, p) in pending.iter().enumerate() {
        if p.common.name.is_empty() {
            return Err(format!("a {} has an empty name", p.role));
        }
        if p.common.name.len() > MAX_NAME {
            return Err(format!(
                "{} \"{}...\": the name is {} bytes long; names of files in checkpoints are \
                 made of it, so it may be at most {MAX_NAME} bytes",
                p.role,
                p.common.name.chars().take(20).collect::<String>(),
                p.common.name.len()
            ));
        }
        if p.common.name.contains('.') {
            return Err(format!(
                "{} \"{}\": names cannot contain '.', which separates a side output in `input = \"op.side\"`",
                p.role, p.common.name
            ));
        }
        if index.insert(p.common.name.clone(), i).is_some() {
            return Err(format!(
                "two vertices are named \"{}\"; names must be unique across sources, operators and sinks",
                p.common.name
            ));
        }
    }

    // Resolve inputs and check edges.
    let mut inputs: Vec<Vec<Input>> = Vec::with_capacity(pending.len());
    for p in &pending {
        let name = &p.common.name;
        if p.role != "source" && p.common.inputs.is_empty() {
            return Err(format!(
                "{} \"{name}\" has no `input`; name the vertex it reads from",
                p.role
            ));
        }
        let mut resolved = Vec::new();
        let all = (p.common.inputs.iter().map(|i| (0, i)))
            .chain(p.common.second_inputs.iter().map(|i| (1, i)));
        for (which, input) in all {
            // "op.side" names a side output; vertex names cannot contain '.'.
            let (input, side_output) = match input.split_once('.') {
                Some((vertex, side)) => (vertex, Some(side.to_string())),
                None => (input.as_str(), None),
            };
            let Some(&from) = index.get(input) else {
                let known: Vec<_> = pending
                    .iter()
                    .filter(|q| !matches!(q.kind, VertexKind::Sink(_)))
                    .map(|q| q.common.name.as_str())
                    .collect();
                return Err(format!(
                    "{} \"{name}\" reads from \"{input}\", which is not defined; known sources and operators: {}",
                    p.role,
                    known.join(", ")
                ));
            };
            if matches!(pending[from].kind, VertexKind::Sink(_)) {
                return Err(format!(
                    "{} \"{name}\" reads from sink \"{input}\"; sinks have no output",
                    p.role
                ));
            }
            if let Some(side) = &side_output {
                match &pending[from].kind {
                    VertexKind::Operator {
                        code: OperatorCode::Wasm { .. },
                        ..
                    } => {}
                    VertexKind::Operator {
                        code: OperatorCode::Window(w),
                        ..
                    } if w.late == *side => {}
                    VertexKind::Operator {
                        code: OperatorCode::Join(j),
                        ..
                    } if j.late == *side => {}
                    VertexKind::Operator {
                        code: OperatorCode::Window(w),
                        ..
                    } => {
                        return Err(format!(
                            "{} \"{name}\" reads side output \"{side}\" of window \"{input}\", which emits only \"{}\" (its late records)",
                            p.role, w.late
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "{} \"{name}\" reads side output \"{side}\" of \"{input}\", which has none; only WebAssembly operators, windows and joins emit side outputs",
                            p.role
                        ));
                    }
                }
                if side.is_empty() {
                    return Err(format!(
                        "{} \"{name}\": input \"{input}.\" names no side output; write \"{input}.<side output>\"",
                        p.role
                    ));
                }
            }
            resolved.push(Input {
                from,
                edge: p.common.edge,
                side_output,
                index: which,
            });
        }
        inputs.push(resolved);
    }

    // Parallelism.
    let parallelism: Vec<u32> = pending
        .iter()
        .map(|p| p.common.parallelism.unwrap_or(default_parallelism))
        .collect();
    for (p, &par) in pending.iter().zip(&parallelism) {
        if par == 0 || par > max_parallelism {
            return Err(format!(
                "{} \"{}\": parallelism {par} is out of range; use 1 to max_parallelism ({max_parallelism})",
                p.role, p.common.name
            ));
        }
    }

    // Topological order (Kahn); what remains lies on a cycle or behind one.
    let order = topological_order(&inputs).map_err(|cycle| {
        let names: Vec<_> = cycle
            .iter()
            .map(|&i| pending[i].common.name.as_str())
            .collect();
        format!(
            "the job graph has a cycle: {}; streams must flow from sources to sinks",
            names.join(" -> ")
        )
    })?;

    // Edge rules that need the whole graph.
    let keyed = keys_known(
        &pending.iter().map(|p| &p.kind).collect::<Vec<_>>(),
        &inputs,
        &order,
    );
    for (v, ins) in inputs.iter().enumerate() {
        for Input {
            from,
            edge,
            side_output,
            ..
        } in ins
        {
            let (from, edge) = (*from, *edge);
            let (name, up) = (&pending[v].common.name, &pending[from].common.name);
            if edge == EdgeKind::Forward && parallelism[from] != parallelism[v] {
                return Err(format!(
                    "{} \"{name}\" (parallelism {}) reads from \"{up}\" (parallelism {}) over a forward edge, \
                     which needs equal parallelism; set edge = \"rebalance\" or \"key_by\", or equal parallelism",
                    pending[v].role, parallelism[v], parallelism[from]
                ));
            }
            if edge != EdgeKind::KeyBy
                && let VertexKind::Operator {
                    code: code @ (OperatorCode::Window(_) | OperatorCode::Join(_)),
                    ..
                } = &pending[v].kind
            {
                let what = match code {
                    OperatorCode::Window(_) => "window",
                    _ => "join",
                };
                return Err(format!(
                    "{what} \"{name}\" reads from \"{up}\" with edge = \"{}\"; a {what} is \
                     per key, so its input must be keyed: set edge = \"key_by\"",
                    if edge == EdgeKind::Forward {
                        "forward"
                    } else {
                        "rebalance"
                    }
                ));
            }
            if edge == EdgeKind::KeyBy && side_output.is_none() && keyed[from] == Some(false) {
                return Err(format!(
                    "{} \"{name}\" reads from \"{up}\" with edge = \"key_by\", but \"{up}\" emits records without keys; \
                     put an operator that sets keys in between (e.g. one that emits with a key) or use another edge",
                    pending[v].role
                ));
            }
        }
    }

    let mut position = vec![0; pending.len()];
    for (new, &old) in order.iter().enumerate() {
        position[old] = new;
    }
    let mut slots: Vec<Option<Pending>> = pending.into_iter().map(Some).collect();
    let vertices = order
        .iter()
        .map(|&old| {
            let p = slots[old].take().expect("each vertex is placed once");
            Vertex {
                name: p.common.name,
                parallelism: parallelism[old],
                inputs: inputs[old]
                    .iter()
                    .map(|input| Input {
                        from: position[input.from],
                        ..input.clone()
                    })
                    .collect(),
                kind: p.kind,
                watermark: p.common.watermark,
            }
        })
        .collect();
    Ok(JobSpec {
        name,
        max_parallelism,
        vertices,
        base_dir: base_dir.to_path_buf(),
        checkpoint: raw.checkpoint,
        restart,
        state,
        buffer_debloat_target,
    })
}

/// The connector configuration of the `role` table named `name` (the table without the keys
/// every vertex has), checked by `validate`; errors name the vertex.
fn connector<C: for<'de> Deserialize<'de>>(
    table: toml::Table,
    role: &str,
    name: &str,
    validate: impl FnOnce(&C) -> Result<(), String>,
) -> Result<C, String> {
    let config = C::deserialize(toml::Value::Table(table))
        .map_err(|e| format!("{role} \"{name}\": {}", e.message()))?;
    validate(&config).map_err(|e| format!("{role} \"{name}\": {e}"))?;
    Ok(config)
}

/// The `[restart]` table; without `strategy` (or without the table), Flink's default for the
/// checkpoint setting, so that `[restart] attempts = 5` tunes the default strategy.
fn restart_strategy(
    table: Option<toml::Table>,
    checkpointing: bool,
) -> Result<RestartStrategy, String> {
    let default = RestartStrategy::default_for(checkpointing);
    let Some(mut table) = table else {
        return Ok(default);
    };
    if !table.contains_key("strategy") {
        if !table.is_empty() && default == RestartStrategy::None {
            return Err(
                "[restart] has settings but no strategy, and without [checkpoint] the default \
                 strategy is \"none\", which has none; add a [checkpoint] table (restarts \
                 resume from the newest checkpoint) or set strategy = \"fixed_delay\" \
                 (each restart starts the input over)"
                    .into(),
            );
        }
        table.insert("strategy".into(), default.name().into());
    }
    if table.get("strategy").and_then(|s| s.as_str()) == Some("none") && table.len() > 1 {
        let settings: Vec<&str> = (table.keys())
            .filter(|k| *k != "strategy")
            .map(String::as_str)
            .collect();
        return Err(format!(
            "[restart]: strategy = \"none\" never restarts and takes no settings, but {} \
             set; remove them, or choose strategy = \"fixed_delay\" or \"exponential_delay\"",
            settings.join(", ") + if settings.len() == 1 { " is" } else { " are" }
        ));
    }
    RestartStrategy::deserialize(toml::Value::Table(table))
        .map_err(|e| format!("[restart]: {}", e.message()))
}

/// Kahn's algorithm; `Err` holds a cycle, in the direction of its streams, its first vertex
/// again at its end.
fn topological_order(inputs: &[Vec<Input>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = inputs.len();
    let mut indegree: Vec<usize> = inputs.iter().map(Vec::len).collect();
    let mut consumers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (v, ins) in inputs.iter().enumerate() {
        for input in ins {
            consumers.entry(input.from).or_default().push(v);
        }
    }
    let mut ready: Vec<usize> = (0..n).rev().filter(|&v| indegree[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop() {
        order.push(v);
        for &c in consumers.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                ready.push(c);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Every vertex left over reads from one left over: walking back along such inputs from
    // any of them comes round to a vertex walked through, and the walk from there is a cycle.
    let left = |v: usize| indegree[v] > 0;
    let mut walked = vec![(0..n).find(|&v| left(v)).expect("a vertex is left over")];
    loop {
        let last = *walked.last().expect("not empty");
        let from = (inputs[last].iter().map(|i| i.from))
            .find(|&f| left(f))
            .expect("a vertex left over reads from one left over");
        if let Some(at) = walked.iter().position(|&v| v == from) {
            let mut cycle: Vec<usize> = walked[at..].iter().rev().copied().collect();
            cycle.push(last);
            return Err(cycle);
        }
        walked.push(from);
    }
}

/// For each vertex: `Some(false)` when its records certainly have no key, `Some(true)` when
/// they certainly have one, `None` when only running it tells (WASM operators).
fn keys_known(kinds: &[&VertexKind], inputs: &[Vec<Input>], order: &[usize]) -> Vec<Option<bool>> {
    let mut keyed = vec![None; kinds.len()];
    for &v in order {
        keyed[v] = match kinds[v] {
            VertexKind::Source(c) => Some(c.produces_keys()),
            VertexKind::Operator {
                code: OperatorCode::Native(name),
                ..
            } => native::emits_keys(name, inputs[v].iter().map(|i| keyed[i.from])),
            // A process-window function emits what it likes.
            VertexKind::Operator {
                code: OperatorCode::Window(w),
                ..
            } => (w.function != Some(crate::native::window::FunctionKind::Process)).then_some(true),
            VertexKind::Operator {
                code: OperatorCode::Join(_),
                ..
            } => Some(true),
            _ => None,
        };
    }
    keyed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<JobSpec, String> {
        JobSpec::parse(text, Path::new("/nonexistent"), "job").map_err(|e| match e {
            ParseError::Syntax(m) | ParseError::Invalid(m) => m,
        })
    }

    const GEN: &str = "[[source]]\nname = \"gen\"\ntype = \"generator\"\ncount = 10\n";
    /// [`GEN`] with event time.
    const EVENTS: &str =
        "[[source]]\nname = \"gen\"\ntype = \"generator\"\ncount = 10\nevent_time = {}\n";
    /// The head of a keyed operator reading [`EVENTS`].
    const OP: &str =
        "[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\nedge = \"key_by\"\n";

    #[test]
    fn minimal_job_orders_vertices_topologically() {
        let spec = parse(&format!(
            "[[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"split\"\n\
             [[operator]]\nname = \"split\"\nuid = \"s\"\nnative = \"split_words\"\ninput = \"gen\"\n{GEN}"
        ))
        .unwrap();
        let names: Vec<_> = spec.vertices.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["gen", "split", "out"]);
        assert_eq!(
            spec.vertices[2].inputs,
            vec![Input {
                from: 1,
                edge: EdgeKind::Forward,
                side_output: None,
                index: 0,
            }]
        );
        assert_eq!(spec.max_parallelism, 128);
    }

    #[test]
    fn a_second_input_feeds_input_1_of_its_operator() {
        let keyed = |name: &str| {
            format!(
                "[[source]]\nname = \"{name}\"\ntype = \"generator\"\nmode = \"keyed_words\"\n\
                 event_time = {{}}\n"
            )
        };
        let spec = parse(&format!(
            "{}{}{OP}second_input = [\"more\", \"gen\"]\n\
             join = {{ type = \"interval\", lower = \"-5m\", upper = \"0s\" }}\n",
            keyed("gen"),
            keyed("more")
        ))
        .unwrap();
        let join = spec.vertices.iter().find(|v| v.name == "w").unwrap();
        let inputs: Vec<(&str, u8)> = (join.inputs.iter())
            .map(|i| (spec.vertices[i.from].name.as_str(), i.index))
            .collect();
        assert_eq!(inputs, [("gen", 0), ("more", 1), ("gen", 1)]);
        let VertexKind::Operator {
            code: OperatorCode::Join(j),
            ..
        } = &join.kind
        else {
            panic!("a join");
        };
        assert_eq!((j.lower, j.upper), (Some(-300_000), Some(0)));
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let cases = [
            ("[[source]\n", "TOML parse error"),
            ("[job]\nname = 'x'\n", "no [[source]]"),
            (
                &format!("{GEN}[[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"nope\"\n"),
                "reads from \"nope\", which is not defined",
            ),
            (
                &format!("{GEN}parallelism = 0\n"),
                "parallelism 0 is out of range",
            ),
            (
                &format!("[job]\nmax_parallelism = 4\n{GEN}parallelism = 5\n"),
                "parallelism 5 is out of range",
            ),
            (
                &format!("[job]\nbuffer_debloat_target = \"1ms\"\n{GEN}"),
                "buffer_debloat_target 1ms is too short",
            ),
            (
                &format!("[job]\nname = \"../../escape\"\n{GEN}"),
                "[job] name \"../../escape\" cannot name a job",
            ),
            (
                &format!("[job]\nname = \"/tmp/abs\"\n{GEN}"),
                "must be one file name",
            ),
            (&format!("[job]\nname = \"..\"\n{GEN}"), "cannot name a job"),
            (
                &format!("[job]\nname = \"{}\"\n{GEN}", "x".repeat(129)),
                "[job] name is 129 bytes long",
            ),
            (
                &GEN.replace("\"gen\"", &format!("\"{}\"", "g".repeat(200))),
                "the name is 200 bytes long",
            ),
            (&format!("[job]\nname = \"\"\n{GEN}"), "cannot name a job"),
            (
                &format!("{EVENTS}watermark = {{ max_out_of_orderness = \"soon\" }}\n"),
                "source \"gen\": watermark: ",
            ),
            (
                &format!(
                    "{EVENTS}[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\nedge = \"key_by\"\n\
                     window = {{ type = \"tumbling\", size = \"1s\", aggregate = \"median\" }}\n"
                ),
                "unknown variant `median`, expected one of `count`, `sum`, `min`, `max`, `avg`",
            ),
            (
                &format!(
                    "{EVENTS}[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\nedge = \"key_by\"\n\
                     window = {{ type = \"sliding\", size = \"1s\", aggregate = \"count\" }}\n"
                ),
                "operator \"w\": window: a sliding window needs slide",
            ),
            (
                &format!(
                    "{EVENTS}[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\n\
                     window = {{ type = \"tumbling\", size = \"1s\", aggregate = \"count\" }}\n"
                ),
                "window \"w\" reads from \"gen\" with edge = \"forward\"; a window is per key",
            ),
            (
                &format!(
                    "{EVENTS}[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\nedge = \"key_by\"\n\
                     native = \"count_words\"\nwindow = {{ type = \"tumbling\", size = \"1s\", aggregate = \"count\" }}\n"
                ),
                "sets more than one of `wasm`, `native`, `window` and `join`",
            ),
            (
                &format!(
                    "{EVENTS}[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\nedge = \"key_by\"\n\
                     window = {{ type = \"tumbling\", size = \"1s\", aggregate = \"count\" }}\n\
                     [[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"w.dropped\"\n"
                ),
                "reads side output \"dropped\" of window \"w\", which emits only \"late\"",
            ),
            (
                &format!("{GEN}watermark = {{}}\n"),
                "source \"gen\" has a `watermark` strategy, but its records carry no event time",
            ),
            (
                &format!("{EVENTS}watermark = {{ delay = \"1s\" }}\n"),
                "unknown field `delay`, expected `max_out_of_orderness` or `idleness`",
            ),
            (
                &format!(
                    "{GEN}[[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"gen\"\n\
                     watermark = {{ idleness = \"1s\" }}\n"
                ),
                "sink \"out\" has a `watermark`; watermarks are made at sources and operators",
            ),
            (
                &format!(
                    "[checkpoint]\ninterval = \"1s\"\nunaligned = true\nmode = \"at_least_once\"\n{GEN}"
                ),
                "unaligned = true needs mode = \"exactly_once\"",
            ),
            (
                &format!(
                    "[checkpoint]\ninterval = \"1s\"\nunaligned = true\nmax_concurrent = 2\n{GEN}"
                ),
                "unaligned = true needs max_concurrent = 1 (it is 2)",
            ),
            (
                &format!(
                    "{GEN}[[operator]]\nname = \"a\"\nuid = \"a\"\nnative = \"split_words\"\ninput = [\"gen\", \"b\"]\n\
                     [[operator]]\nname = \"b\"\nuid = \"b\"\nnative = \"split_words\"\ninput = \"a\"\n"
                ),
                "has a cycle: b -> a -> b;",
            ),
            (
                // Behind the cycle, `out` is not on it; `c` reads itself.
                &format!(
                    "{GEN}[[operator]]\nname = \"a\"\nuid = \"a\"\nnative = \"split_words\"\ninput = [\"gen\", \"b\"]\n\
                     [[operator]]\nname = \"b\"\nuid = \"b\"\nnative = \"split_words\"\ninput = \"a\"\n\
                     [[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"b\"\n"
                ),
                "has a cycle: b -> a -> b;",
            ),
            (
                &format!(
                    "{GEN}[[operator]]\nname = \"c\"\nuid = \"c\"\nnative = \"split_words\"\ninput = [\"gen\", \"c\"]\n\
                     [[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"c\"\n"
                ),
                "has a cycle: c -> c;",
            ),
            (
                &format!(
                    "{GEN}[[operator]]\nname = \"c\"\nuid = \"c\"\nnative = \"count_words\"\ninput = \"gen\"\nedge = \"key_by\"\n"
                ),
                "emits records without keys",
            ),
            (
                &format!(
                    "{GEN}[[operator]]\nname = \"c\"\nnative = \"count_words\"\ninput = \"gen\"\n"
                ),
                "has no `uid`",
            ),
            (
                &format!("{GEN}[[operator]]\nname = \"c\"\nuid = \"c\"\ninput = \"gen\"\n"),
                "needs `wasm = ",
            ),
            (
                &format!(
                    "{GEN}[[operator]]\nname = \"c\"\nuid = \"c\"\nnative = \"split_words\"\ninput = \"gen\"\nparallelism = 2\n"
                ),
                "which needs equal parallelism",
            ),
            (
                &format!("{GEN}[[sink]]\nname = \"gen\"\ntype = \"print\"\ninput = \"gen\"\n"),
                "two vertices are named \"gen\"",
            ),
            (&format!("{GEN}bogus = 1\n"), "bogus"),
            (
                &format!(
                    "{EVENTS}{OP}join = {{ type = \"interval\", lower = \"-1s\", upper = \"1s\" }}\n"
                ),
                "has no `second_input`",
            ),
            (
                &format!(
                    "{EVENTS}{OP}second_input = \"gen\"\njoin = {{ type = \"interval\", lower = \"1s\" }}\n"
                ),
                "needs lower = \"...\" and upper = \"...\"",
            ),
            (
                &format!(
                    "{EVENTS}{OP}second_input = \"gen\"\njoin = {{ type = \"interval\", lower = \"1s\", upper = \"-1s\" }}\n"
                ),
                "lower (1000 ms) is above upper (-1000 ms)",
            ),
            (
                &format!(
                    "{EVENTS}{OP}second_input = \"gen\"\njoin = {{ type = \"interval\", lower = \"soon\", upper = \"1s\" }}\n"
                ),
                "\"soon\" is not a duration",
            ),
            (
                &format!(
                    "{EVENTS}{OP}second_input = \"gen\"\njoin = {{ type = \"tumbling\", size = \"1s\", lower = \"1s\" }}\n"
                ),
                "lower does not apply to type = \"tumbling\"",
            ),
            (
                &format!("{EVENTS}{OP}second_input = \"gen\"\njoin = {{ type = \"session\" }}\n"),
                "a session window needs gap = \"...\"",
            ),
            (
                &format!(
                    "{EVENTS}{OP}second_input = \"gen\"\njoin = {{ type = \"interval\", lower = \"0s\", upper = \"1s\", gap = \"1s\" }}\n"
                ),
                "gap does not apply to type = \"interval\"",
            ),
            (
                &format!(
                    "{EVENTS}{OP}second_input = \"gen\"\nwindow = {{ type = \"tumbling\", size = \"1s\", aggregate = \"count\" }}\n"
                ),
                "only WebAssembly operators and joins read",
            ),
            (
                &format!(
                    "{EVENTS}{OP}window = {{ type = \"tumbling\", size = \"1s\", function = \"aggregate\" }}\n"
                ),
                "add wasm = ",
            ),
            (
                &format!(
                    "{EVENTS}{OP}wasm = \"f.wasm\"\nwindow = {{ type = \"tumbling\", size = \"1s\", aggregate = \"count\" }}\n"
                ),
                "set function = \"aggregate\" or",
            ),
            (
                &format!(
                    "{EVENTS}{OP}window = {{ type = \"tumbling\", size = \"1s\", aggregate = \"count\", function = \"process\" }}\n"
                ),
                "both set; keep one",
            ),
            (
                &format!("{EVENTS}{OP}window = {{ type = \"tumbling\", size = \"1s\" }}\n"),
                "a window needs aggregate = ",
            ),
            (
                &format!(
                    "{EVENTS}[[operator]]\nname = \"w\"\nuid = \"w\"\ninput = \"gen\"\nsecond_input = \"gen\"\njoin = {{ type = \"tumbling\", size = \"1s\" }}\n"
                ),
                "a join is per key, so its input must be keyed",
            ),
            (
                &format!("{GEN}[[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"gen.late\"\n"),
                "reads side output \"late\" of \"gen\", which has none",
            ),
            (
                &format!("{GEN}[[sink]]\nname = \"a.b\"\ntype = \"print\"\ninput = \"gen\"\n"),
                "names cannot contain '.'",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).expect_err(text);
            assert!(
                err.contains(want),
                "{text:?}\n gave: {err}\n wanted: {want}"
            );
        }
    }

    #[test]
    fn a_watermark_strategy_belongs_to_its_vertex() {
        let spec = parse(&format!(
            "{EVENTS}watermark = {{ max_out_of_orderness = \"2s\", idleness = \"1m\" }}\n\
             [[operator]]\nname = \"split\"\nuid = \"s\"\nnative = \"split_words\"\ninput = \"gen\"\n\
             watermark = {{}}\n"
        ))
        .unwrap();
        let strategy = |name: &str| {
            let v = spec.vertices.iter().find(|v| v.name == name).unwrap();
            v.watermark
        };
        assert_eq!(
            strategy("gen"),
            Some(WatermarkStrategy {
                max_out_of_orderness: Duration::from_secs(2),
                idleness: Some(Duration::from_secs(60)),
            })
        );
        assert_eq!(strategy("split"), Some(WatermarkStrategy::default()));
    }

    #[test]
    fn buffer_debloating_is_off_unless_a_target_is_given() {
        assert_eq!(parse(GEN).unwrap().buffer_debloat_target, None);
        let spec = parse(&format!("[job]\nbuffer_debloat_target = \"500ms\"\n{GEN}")).unwrap();
        assert_eq!(spec.buffer_debloat_target, Some(Duration::from_millis(500)));
        let spec = parse(&format!("[job]\nbuffer_debloat_target = \"0s\"\n{GEN}")).unwrap();
        assert_eq!(spec.buffer_debloat_target, None);
    }

    #[test]
    fn two_file_sinks_in_one_directory_are_refused() {
        let sink = |name: &str, path: &str| {
            format!(
                "[[sink]]\nname = \"{name}\"\ntype = \"file\"\ninput = \"gen\"\npath = \"{path}\"\n"
            )
        };
        let err = parse(&format!("{GEN}{}{}", sink("a", "out"), sink("b", "./out/"))).unwrap_err();
        assert!(
            err.starts_with("sinks \"a\" and \"b\" both write part files into"),
            "{err}"
        );
        parse(&format!("{GEN}{}{}", sink("a", "out"), sink("b", "out-2"))).unwrap();
    }

    #[test]
    fn a_mistake_in_the_jobs_limits_is_named_as_there() {
        // Also in a job without WebAssembly operators, which would never read them.
        let err = parse(&format!("[limits]\nmemry = \"64 MiB\"\n{GEN}")).unwrap_err();
        assert!(err.starts_with("[limits]: unknown field `memry`"), "{err}");
        let err = parse(&format!("[limits]\ncall_deadline = 5\n{GEN}")).unwrap_err();
        assert!(err.starts_with("[limits]: invalid type"), "{err}");
    }

    #[test]
    fn a_restart_table_without_strategy_tunes_the_default() {
        let chk = "[checkpoint]\ninterval = \"1s\"\n";
        let spec = parse(&format!("{chk}[restart]\nattempts = 5\n{GEN}")).unwrap();
        match &spec.restart {
            RestartStrategy::ExponentialDelay(e) => assert_eq!(e.attempts, Some(5)),
            other => panic!("{other:?}"),
        }
        let err = parse(&format!(
            "[restart]\nstrategy = \"none\"\nattempts = 3\n{GEN}"
        ))
        .unwrap_err();
        assert!(
            err.contains("strategy = \"none\" never restarts") && err.contains("attempts is set"),
            "{err}"
        );
        let spec = parse(&format!("{chk}[restart]\n{GEN}")).unwrap();
        assert_eq!(spec.restart, RestartStrategy::default_for(true));
        // Without checkpoints the default is "none", which has no settings.
        let err = parse(&format!("[restart]\nattempts = 5\n{GEN}")).unwrap_err();
        assert!(err.contains("no strategy"), "{err}");
        let err = parse(&format!("{chk}[restart]\nattempt = 5\n{GEN}")).unwrap_err();
        assert!(err.contains("attempt"), "{err}");
    }

    #[test]
    fn key_by_after_keyed_native_operator_is_allowed() {
        let spec = parse(&format!(
            "[job]\nparallelism = 2\n{GEN}parallelism = 1\n\
             [[operator]]\nname = \"split\"\nuid = \"s\"\nnative = \"split_words\"\ninput = \"gen\"\nedge = \"rebalance\"\n\
             [[operator]]\nname = \"count\"\nuid = \"c\"\nnative = \"count_words\"\ninput = \"split\"\nedge = \"key_by\"\n"
        ))
        .unwrap();
        assert_eq!(spec.vertices.len(), 3);
        assert_eq!(spec.vertices[2].inputs[0].from, 1);
        assert_eq!(spec.vertices[2].inputs[0].edge, EdgeKind::KeyBy);
    }
}
