//! weir: a stream processor whose user operators are sandboxed WebAssembly components.
//!
//! The host owns the dataflow, keyed state and connectors; operators are components built
//! against `wit/stream.wit` (with the `weir-sdk` crate for Rust) and reach their state
//! through WIT interfaces. Run a job from its spec file:
//!
//! ```no_run
//! use std::path::Path;
//! use weir::{Job, JobSpec, WasmEngine};
//!
//! # fn main() -> anyhow::Result<()> {
//! let spec = JobSpec::from_file(Path::new("examples/wordcount/job.toml"))?;
//! let engine = WasmEngine::new(WasmEngine::default_cache_dir())?;
//! let job = Job::new(spec, &engine)?;
//! let summary = job.start()?.wait()?;
//! for v in &summary.vertices {
//!     println!("{}: {} in, {} out", v.name, v.records_in, v.records_out);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! Modules depend on each other one way only: the leaf contracts (`batch`, `clock`,
//! `key_group`, `operator`, `role`, `failpoint`, `watermark`) → `state` → `wasm`, `native`, `connectors` →
//! `checkpoint` → `job` → `runtime`. Pure decisions (the checkpoint coordinator, barrier
//! alignment, the restart strategy) are free of I/O, with their tests beside them; the code
//! that carries them out sits next to them. The command line is part of the `weir` binary,
//! not of this library.

#![deny(missing_docs)]

pub(crate) mod batch;
/// Benchmarks of internals, for `host/benches` (not a stable interface).
#[doc(hidden)]
pub mod bench;
pub mod checkpoint;
pub mod clock;
pub mod connectors;
mod failpoint;
pub(crate) mod job;
pub(crate) mod key_group;
pub(crate) mod native;
pub(crate) mod operator;
pub mod role;
pub(crate) mod runtime;
pub mod service;
pub(crate) mod state;
pub(crate) mod wasm;
pub mod watermark;

pub use clock::Clock;
pub use job::spec::{EdgeKind, Input, JobSpec, OperatorCode, SpecError, Vertex, VertexKind};
pub use native::join::{JoinKind, JoinSpec};
pub use native::window::{Aggregate, FunctionKind, GuestCode, WindowKind, WindowSpec, WindowTime};
pub use operator::FailureKind;
pub use role::Role;
pub use runtime::{
    Cause, CheckpointStatus, EventTimeLag, Failure, GuestUsage, Job, JobControl, JobEnd, JobError,
    JobEvent, JobSummary, Metrics, OperatorUpgrade, Pause, Probation, RunningJob, Savepoint,
    SavepointFailed, SavepointHandle, SwapReport, Upgrade, UpgradeHandle, UpgradeOutcome,
    VertexMetrics, VertexSummary,
};
pub use state::{BackendKind, StateConfig};
pub use wasm::{
    DirGrant, EngineOptions, Grants, Limit, Limits, OperatorComponent, WasmEngine, WasmError,
};
