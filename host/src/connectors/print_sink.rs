//! The print sink: one line per record on standard output.

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::{ConnectorError, LineFormat, Sink};
use crate::batch::Batch;

/// `type = "print"`: writes each record to standard output as one line. When the sink runs
/// with parallelism > 1, every line starts with `<subtask>> ` (as Flink's print sink does),
/// where `<subtask>` is the 0-based index of the writing subtask.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrintSinkConfig {
    /// What each line holds: `"value"` (the default) or `"key_value"` (key, tab, value).
    #[serde(default)]
    pub format: LineFormat,
}

impl PrintSinkConfig {
    pub(super) fn build(&self, subtask: usize, parallelism: usize) -> PrintSink {
        PrintSink {
            format: self.format,
            prefix: if parallelism > 1 {
                format!("{subtask}> ").into_bytes()
            } else {
                Vec::new()
            },
            buf: Vec::new(),
        }
    }
}

/// One subtask of the print sink.
pub(super) struct PrintSink {
    format: LineFormat,
    prefix: Vec<u8>,
    /// The lines of one batch, written to stdout at once so that lines of concurrent
    /// subtasks never interleave within a line, and stdout is locked once per batch.
    buf: Vec<u8>,
}

impl PrintSink {
    fn render(&mut self, batch: &Batch) {
        self.buf.clear();
        for rec in batch.iter() {
            self.buf.extend_from_slice(&self.prefix);
            self.format.write(&mut self.buf, &rec);
        }
    }
}

fn stdout_error(e: std::io::Error) -> ConnectorError {
    ConnectorError::Io {
        path: "stdout".into(),
        source: e,
    }
}

impl Sink for PrintSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.render(batch);
        std::io::stdout()
            .lock()
            .write_all(&self.buf)
            .map_err(stdout_error)
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        std::io::stdout().lock().flush().map_err(stdout_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::Kind;

    fn batch() -> Batch {
        let mut b = Batch::default();
        b.push_with(Kind::Insert, Some(b"k1"), None, |v| {
            v.extend_from_slice(b"one")
        });
        b.push_with(Kind::Insert, None, None, |v| v.extend_from_slice(b"two"));
        b
    }

    #[test]
    fn lines_carry_the_subtask_prefix_only_when_parallel() {
        let mut single = PrintSinkConfig::default().build(0, 1);
        single.render(&batch());
        assert_eq!(single.buf, b"one\ntwo\n");

        let cfg = PrintSinkConfig {
            format: LineFormat::KeyValue,
        };
        let mut parallel = cfg.build(2, 3);
        parallel.render(&batch());
        assert_eq!(parallel.buf, b"2> k1\tone\n2> \ttwo\n");
    }

    #[test]
    fn an_empty_batch_writes_nothing() {
        let mut sink = PrintSinkConfig::default().build(0, 1);
        sink.write(&Batch::default()).unwrap();
        assert!(sink.buf.is_empty());
        sink.flush().unwrap();
    }
}
