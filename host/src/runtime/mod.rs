//! The local runtime: one thread per chain subtask, bounded channels between them.
//!
//! [`Job::new`] validates a spec's operators (loading and linking every component) before
//! anything runs; [`Job::start`] spawns the tasks and returns a [`RunningJob`] whose metrics
//! can be watched while it runs and whose [`RunningJob::wait`] reports the first failure with
//! the operator that caused it.

mod attempt;
pub(crate) mod barrier;
mod checkpointing;
mod debloat;
mod error;
mod events;
mod job;
mod lock;
mod metrics;
pub(crate) mod output;
pub(crate) mod restore;
mod running;
mod savepoint;
mod supervisor;
mod task;
pub mod upgrade;
mod validate;

pub use error::{Cause, JobError};
pub(crate) use events::Events;
pub use events::{Failure, JobEnd, JobEvent};
pub use job::Job;
pub(crate) use job::JobParts;
pub use metrics::{CheckpointStatus, EventTimeLag, GuestUsage, Metrics, VertexMetrics};
pub(crate) use running::Shared;
pub use running::{JobControl, JobSummary, RunningJob, VertexSummary};
pub use savepoint::{Savepoint, SavepointFailed, SavepointHandle};
pub use upgrade::{
    OperatorUpgrade, Pause, Probation, SwapReport, Upgrade, UpgradeHandle, UpgradeOutcome,
};
pub(crate) use validate::open_operator;

use crate::job::spec::{JobSpec, VertexKind};
use crate::operator::FailureKind;
use crate::role::Role;

/// A failure of subtask `subtask` of vertex `vertex`.
pub(crate) fn vertex_failure(
    spec: &JobSpec,
    vertex: usize,
    subtask: u32,
    kind: FailureKind,
    message: String,
    cause: Option<Cause>,
) -> JobError {
    let v = &spec.vertices[vertex];
    JobError::Task {
        kind,
        role: role(&v.kind),
        name: v.name.clone(),
        uid: match &v.kind {
            VertexKind::Operator { uid, .. } => Some(uid.clone()),
            _ => None,
        },
        subtask,
        parallelism: v.parallelism,
        message,
        cause,
        permanent: false,
    }
}

/// The role of a vertex of kind `kind`.
pub(crate) fn role(kind: &VertexKind) -> Role {
    match kind {
        VertexKind::Source(_) => Role::Source,
        VertexKind::Operator { .. } => Role::Operator,
        VertexKind::Sink(_) => Role::Sink,
    }
}
