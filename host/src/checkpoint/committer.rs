//! Committing what two-phase-commit sinks pre-committed, once a checkpoint that records it is
//! complete, and again after a crash before the restore (a commit is idempotent).
//!
//! The supervisor commits, not the sink's own task: a task may be waiting on what its last
//! pre-commit holds (a database's row locks). A commit that fails fails the job, whose restore
//! commits again: pre-committed output is never dropped.

use crate::connectors::{ConnectorError, SinkConfig, SinkContext};

/// One sink subtask's pre-commit.
pub(crate) struct PreCommit<'a> {
    pub sink: &'a SinkConfig,
    pub ctx: SinkContext<'a>,
    pub state: &'a serde_json::Value,
}

/// A commit that failed: of which sink subtask, and why.
#[derive(Debug)]
pub(crate) struct CommitFailed {
    pub sink: String,
    pub subtask: usize,
    pub cause: ConnectorError,
}

/// Commits every pre-commit, in order; stops at the first that fails.
pub(crate) fn commit<'a>(
    pre_commits: impl IntoIterator<Item = PreCommit<'a>>,
) -> Result<(), CommitFailed> {
    for p in pre_commits {
        p.sink
            .commit(&p.ctx, p.state)
            .map_err(|cause| CommitFailed {
                sink: p.ctx.name.to_owned(),
                subtask: p.ctx.subtask,
                cause,
            })?;
    }
    Ok(())
}
