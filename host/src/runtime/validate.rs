//! What `weir validate` checks beyond the spec: that every operator instantiates and its
//! `open` accepts its config, and that every sink can write where it is told to.

use super::task::new_operator;
use super::{Job, JobError, vertex_failure};
use crate::job::spec::{JobSpec, VertexKind};
use crate::operator::{FailureKind, OperatorError};
use crate::state::StateSetup;
use crate::wasm::OperatorComponent;

impl Job {
    /// Checks what can be checked without running the job: each operator is instantiated
    /// once (with memory state) and opened with its config, and each sink checks its target
    /// (a file sink that it can create and write its directory, the PostgreSQL sink that it
    /// can connect and finds its table and columns). Nothing is read from the sources and
    /// nothing is written into a sink.
    pub fn check(&self) -> Result<(), JobError> {
        let spec = &self.parts.spec;
        for (v, vertex) in spec.vertices.iter().enumerate() {
            match &vertex.kind {
                VertexKind::Operator { .. } => {
                    open_operator(spec, v, self.parts.components.get(&v))?
                }
                VertexKind::Sink(config) => config
                    .check(&spec.base_dir, spec.checkpoint.is_some())
                    .map_err(|e| {
                        vertex_failure(
                            spec,
                            v,
                            0,
                            FailureKind::Other,
                            e.to_string(),
                            Some(e.into()),
                        )
                    })?,
                VertexKind::Source(_) => {}
            }
        }
        Ok(())
    }
}

/// Instantiates operator `v` of `spec` (with `component`, if it runs one) once, with memory
/// state, and opens it with its config.
pub(crate) fn open_operator(
    spec: &JobSpec,
    v: usize,
    component: Option<&OperatorComponent>,
) -> Result<(), JobError> {
    let fail =
        |e: OperatorError| vertex_failure(spec, v, 0, e.kind(), e.to_string(), Some(e.into()));
    let mut op = new_operator(
        spec,
        v,
        0,
        component,
        StateSetup::memory(),
        Default::default(),
    )
    .map_err(fail)?;
    op.open().map_err(fail)
}
