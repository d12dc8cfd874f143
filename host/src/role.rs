//! What a vertex is in a job: a source, an operator or a sink.

use serde::{Deserialize, Serialize};

/// The role of a vertex of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads from outside the job.
    Source,
    /// Runs code on records: a WebAssembly component or a built-in.
    Operator,
    /// Writes out of the job.
    Sink,
}

impl Role {
    /// `source`, `operator` or `sink`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Operator => "operator",
            Role::Sink => "sink",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
