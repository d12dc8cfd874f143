//! The discard sink: drops every record (Flink's `DiscardingSink`), for benchmarks and for
//! jobs whose effect is their state.

use serde::{Deserialize, Serialize};

use super::{ConnectorError, Sink};
use crate::batch::Batch;

/// `type = "discard"`: accepts and drops every record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscardSinkConfig {}

pub(super) struct DiscardSink;

impl Sink for DiscardSink {
    fn write(&mut self, _batch: &Batch) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}
