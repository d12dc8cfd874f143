//! Sources and sinks, each behind one small trait.
//!
//! A source subtask reads its share of the input (its *splits*) into batches and can report
//! and restore its position, so that input is replayable from a checkpoint. A sink subtask
//! writes batches out. The job spec selects a connector with `type = "..."` in a `[[source]]`
//! or `[[sink]]` table; the other keys of that table are the connector's configuration:
//!
//! ```toml
//! [[source]]
//! name = "lines"
//! type = "file"
//! path = "data/"          # every regular, non-hidden file in data/, sorted
//!
//! [[sink]]
//! name = "out"
//! input = "count"
//! type = "file"
//! path = "out/"           # subtask s writes out/part-<s>-<n>, committed at checkpoints
//! format = "key_value"
//! ```
//!
//! Connectors v0: [`FileSourceConfig`] (`type = "file"`), [`GeneratorConfig`]
//! (`type = "generator"`), [`PrintSinkConfig`] (`type = "print"`) and [`FileSinkConfig`]
//! (`type = "file"`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::batch::Batch;
use crate::clock::Clock;

mod discard_sink;
mod file_sink;
mod file_source;
mod generator;
mod line_format;
mod postgres_sink;
mod print_sink;

pub use discard_sink::DiscardSinkConfig;
pub use file_sink::{FileSinkConfig, RollingPolicy};
pub use file_source::FileSourceConfig;
pub use generator::{EventTime, GeneratorConfig, GeneratorMode};
pub use line_format::LineFormat;
pub use postgres_sink::{PostgresSinkConfig, RowFormat, WriteMode};
pub use print_sink::PrintSinkConfig;

/// Where a source subtask stands in its input. Restoring it makes the source continue with
/// the first record it had not emitted when the position was taken.
pub type SourcePosition = serde_json::Value;

/// What a source has to say after a poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// Records may have been added; poll again.
    Ready,
    /// Nothing to emit now (for example a rate limit); poll again after this long at most.
    Idle(Duration),
    /// The input is exhausted: this subtask's splits are done.
    Finished,
}

/// A failure in a connector, naming the file or setting involved.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// Reading or writing `path` failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory (or `stdout`) involved.
        path: String,
        #[source]
        /// The I/O error.
        source: std::io::Error,
    },
    /// An operation on a file or directory failed; `action` says which ("create the output
    /// directory", "read", ...).
    #[error("cannot {action} {path}: {source}")]
    File {
        /// What the connector was doing, as a verb phrase.
        action: &'static str,
        /// The file or directory.
        path: String,
        #[source]
        /// The I/O error.
        source: std::io::Error,
    },
    /// A configuration or a restored position that the connector cannot work with.
    #[error("{0}")]
    Invalid(String),
    /// Input the connector cannot read as configured (a line without its timestamp).
    #[error("{0}")]
    Input(String),
    /// An external system (a database) refused or failed an operation.
    #[error("{message}")]
    External {
        /// What the system said.
        message: String,
        /// Whether trying again cannot help (a missing table, bad credentials), unlike a
        /// dropped connection.
        permanent: bool,
    },
}

impl ConnectorError {
    /// Whether the same operation would fail again after a restart: a bad setting, a missing
    /// permission, a path in the way. Such a failure fails the job at once instead of
    /// restarting it.
    pub fn is_permanent(&self) -> bool {
        use std::io::ErrorKind::*;
        match self {
            ConnectorError::Io { source, .. } | ConnectorError::File { source, .. } => matches!(
                source.kind(),
                PermissionDenied
                    | ReadOnlyFilesystem
                    | NotADirectory
                    | IsADirectory
                    | InvalidFilename
                    | InvalidInput
            ),
            ConnectorError::Invalid(_) | ConnectorError::Input(_) => true,
            ConnectorError::External { permanent, .. } => *permanent,
        }
    }

    /// `action` (a verb phrase such as "read") on `path` failed with `source`.
    pub(crate) fn file(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        ConnectorError::File {
            action,
            path: path.display().to_string(),
            source,
        }
    }
}

/// One subtask of a source: reads its splits into batches.
pub(crate) trait Source: Send {
    /// Appends up to `max_records` records to `out`.
    fn poll(&mut self, out: &mut Batch, max_records: usize) -> Result<Poll, ConnectorError>;
    /// The position after the last record appended.
    fn position(&self) -> SourcePosition;
    /// Continues from `position`, as returned by [`Source::position`] of the same subtask.
    fn restore(&mut self, position: &SourcePosition) -> Result<(), ConnectorError>;
    /// Of a source that reads several splits at once and stamps their records itself: how
    /// far all of them have come in event time, from which its watermark is made instead
    /// of from each batch's timestamps, so that one split's records are not late behind
    /// another's. `None`: the source does not read that way.
    fn split_time(&self) -> Option<SplitTime> {
        None
    }
}

/// How far the event time of a source's splits has come (see [`Source::split_time`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitTime {
    /// A split not finished has read no record yet.
    Waiting,
    /// Every split not finished has read a record stamped at or after this time.
    Reached(i64),
}

/// One subtask of a sink: writes batches out.
pub(crate) trait Sink: Send {
    /// Writes every record of `batch`.
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError>;
    /// Makes everything written so far durable (at the end of input).
    fn flush(&mut self) -> Result<(), ConnectorError>;
    /// Checkpoint barrier `checkpoint`: makes everything written so far durable and returns
    /// what a restore from this checkpoint needs. This is where a two-phase-commit sink
    /// pre-commits its transaction; the state lists every pre-commit not yet known committed,
    /// and [`SinkConfig::commit`] of it must commit them all.
    fn snapshot(&mut self, _checkpoint: u64) -> Result<serde_json::Value, ConnectorError> {
        self.flush()?;
        Ok(serde_json::Value::Null)
    }
    /// Checkpoint `checkpoint` is complete, and the runtime has committed what the sink's
    /// snapshots up to it pre-committed (with [`SinkConfig::commit`]): a two-phase-commit sink
    /// forgets them.
    fn notify_complete(&mut self, _checkpoint: u64) -> Result<(), ConnectorError> {
        Ok(())
    }
    /// The input has ended: makes everything written durable and returns the pre-commit of
    /// what is not committed yet (`Null`: nothing), which the runtime commits with
    /// [`SinkConfig::commit`] once the job's end is recorded.
    fn finish(&mut self) -> Result<serde_json::Value, ConnectorError> {
        self.flush()?;
        Ok(serde_json::Value::Null)
    }
    /// What makes a call of the sink that waits on its target return with an error, for a
    /// task that must end (its job is cancelled or failed) while the call waits — on a row
    /// lock its own prepared transaction holds, say, which nothing commits any more. `None`:
    /// its calls do not wait on anything that long.
    fn interrupter(&self) -> Option<Box<dyn Fn() + Send>> {
        None
    }
}

/// The configuration of a `[[source]]` table, selected by its `type` key.
///
/// ```
/// use weir::connectors::SourceConfig;
///
/// let cfg: SourceConfig = toml::from_str(r#"
///     type = "generator"
///     mode = "keyed_words"
///     count = 1000
/// "#).unwrap();
/// assert!(cfg.produces_keys() && cfg.is_bounded());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceConfig {
    /// Lines of text files (`type = "file"`).
    File(FileSourceConfig),
    /// Deterministic synthetic records (`type = "generator"`).
    Generator(GeneratorConfig),
}

impl SourceConfig {
    /// Checks the configuration (including that input files exist); the message names the
    /// setting at fault and says what to do. Relative paths are resolved against `base_dir`,
    /// the directory of the job spec.
    pub fn validate(&self, base_dir: &Path) -> Result<(), String> {
        match self {
            SourceConfig::File(c) => c.validate(base_dir),
            SourceConfig::Generator(c) => c.validate(),
        }
    }

    /// Whether the records carry keys (so that a `key_by` edge can follow without a key
    /// extractor).
    pub fn produces_keys(&self) -> bool {
        match self {
            SourceConfig::File(_) => false,
            SourceConfig::Generator(c) => c.produces_keys(),
        }
    }

    /// Whether the records carry event time (a file or generator source with `event_time`).
    pub fn produces_timestamps(&self) -> bool {
        match self {
            SourceConfig::File(c) => c.event_time.is_some(),
            SourceConfig::Generator(c) => c.event_time.is_some(),
        }
    }

    /// Whether the input ends (files; a generator with a `count`).
    pub fn is_bounded(&self) -> bool {
        match self {
            SourceConfig::File(_) => true,
            SourceConfig::Generator(c) => c.is_bounded(),
        }
    }

    /// Builds subtask `subtask` of `parallelism`, which reads processing time from `clock`.
    pub(crate) fn build(
        &self,
        base_dir: &Path,
        subtask: usize,
        parallelism: usize,
        clock: &Clock,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        check_subtask(subtask, parallelism)?;
        Ok(match self {
            SourceConfig::File(c) => c.build(base_dir, subtask, parallelism)?,
            SourceConfig::Generator(c) => Box::new(c.build(subtask, parallelism, clock)?),
        })
    }
}

/// The configuration of a `[[sink]]` table, selected by its `type` key.
///
/// ```
/// use weir::connectors::SinkConfig;
///
/// let cfg: SinkConfig = toml::from_str(r#"type = "print""#).unwrap();
/// assert!(cfg.validate(std::path::Path::new(".")).is_ok());
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SinkConfig {
    /// One line per record on standard output (`type = "print"`).
    Print(PrintSinkConfig),
    /// One line per record into `part-<subtask>` files of a directory (`type = "file"`).
    File(FileSinkConfig),
    /// Rows of a PostgreSQL table, committed in two phases (`type = "postgres"`).
    Postgres(PostgresSinkConfig),
    /// Drops every record (`type = "discard"`), for benchmarks.
    Discard(DiscardSinkConfig),
}

impl SinkConfig {
    /// Checks the configuration; the message names the setting at fault and says what to do.
    /// Relative paths are resolved against `base_dir`, the directory of the job spec.
    pub fn validate(&self, base_dir: &Path) -> Result<(), String> {
        match self {
            SinkConfig::Print(_) | SinkConfig::Discard(_) => Ok(()),
            SinkConfig::File(c) => c.validate(base_dir),
            SinkConfig::Postgres(c) => c.validate(),
        }
    }

    /// Checks, writing nothing, that the sink can write where it is told to: a file sink that
    /// it can create and write into its directory, the PostgreSQL sink that it can connect, its
    /// table has the columns it writes and (when it commits in two phases, in a job with
    /// `checkpointing`) the server allows prepared transactions.
    pub fn check(&self, base_dir: &Path, checkpointing: bool) -> Result<(), ConnectorError> {
        match self {
            SinkConfig::File(c) => c.check(base_dir),
            SinkConfig::Postgres(c) => c.check(checkpointing),
            SinkConfig::Print(_) | SinkConfig::Discard(_) => Ok(()),
        }
    }

    /// The job ended for good without finishing (cancelled, or failed), after what the newest
    /// completed checkpoint recorded was committed: undoes what subtask `ctx` pre-committed
    /// for checkpoints that did not complete, where that holds on to something (a prepared
    /// PostgreSQL transaction holds its rows' locks, and PostgreSQL never times it out).
    pub(crate) fn release(&self, ctx: &SinkContext<'_>) -> Result<(), ConnectorError> {
        match self {
            SinkConfig::Postgres(c) => c.release(ctx),
            SinkConfig::File(_) | SinkConfig::Print(_) | SinkConfig::Discard(_) => Ok(()),
        }
    }

    /// Whether the sink's writes after a pre-commit may wait on the locks that pre-commit
    /// holds until a checkpoint commits it: PostgreSQL's upsert in transactions (a prepared
    /// transaction keeps its rows locked). A checkpoint that fails after its pre-commit then
    /// leaves the sink waiting for good, so the job restarts instead of going on.
    pub(crate) fn waits_on_its_pre_commits(&self) -> bool {
        matches!(self, SinkConfig::Postgres(c)
            if c.mode == postgres_sink::WriteMode::Upsert && c.delivery == Delivery::ExactlyOnce)
    }

    /// Whether a restore from a checkpoint older than the newest completed one takes back
    /// what the newer ones committed: the file sink deletes their part files, an upsert
    /// writes the same rows again, and what the print and discard sinks emit is not
    /// committed. PostgreSQL's append mode cannot: its rows would be there twice.
    pub fn rewinds_committed(&self) -> bool {
        match self {
            SinkConfig::Postgres(c) => c.mode == postgres_sink::WriteMode::Upsert,
            SinkConfig::File(_) | SinkConfig::Print(_) | SinkConfig::Discard(_) => true,
        }
    }

    /// Where the sink's output can be found, if it writes files.
    pub fn location(&self, base_dir: &Path) -> Option<PathBuf> {
        match self {
            SinkConfig::Print(_) | SinkConfig::Discard(_) | SinkConfig::Postgres(_) => None,
            SinkConfig::File(c) => Some(resolve(base_dir, &c.path)),
        }
    }

    /// Builds subtask `subtask` of `parallelism` for a job without checkpoints.
    #[cfg(test)]
    pub(crate) fn build(
        &self,
        base_dir: &Path,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        let ctx = SinkContext {
            job: "job",
            name: "sink",
            base_dir,
            subtask,
            parallelism,
            checkpoints: None,
        };
        self.restore(&ctx, None)
    }

    /// Builds the subtask `ctx` describes, continuing from `state` (what [`Sink::snapshot`]
    /// returned) when given.
    pub(crate) fn restore(
        &self,
        ctx: &SinkContext<'_>,
        state: Option<&serde_json::Value>,
    ) -> Result<Box<dyn Sink>, ConnectorError> {
        check_subtask(ctx.subtask, ctx.parallelism)?;
        Ok(match self {
            SinkConfig::Print(c) => Box::new(c.build(ctx.subtask, ctx.parallelism)),
            SinkConfig::File(c) => Box::new(c.build(ctx, state)?),
            SinkConfig::Postgres(c) => Box::new(c.build(ctx, state)?),
            SinkConfig::Discard(_) => Box::new(discard_sink::DiscardSink),
        })
    }

    /// Commits what the subtask `ctx` describes pre-committed in `state` (from
    /// [`Sink::finish`] or [`Sink::snapshot`]); committing twice is harmless.
    pub(crate) fn commit(
        &self,
        ctx: &SinkContext<'_>,
        state: &serde_json::Value,
    ) -> Result<(), ConnectorError> {
        match self {
            _ if state.is_null() => Ok(()),
            SinkConfig::File(c) => c.commit(ctx, state),
            SinkConfig::Postgres(c) => c.commit(ctx, state),
            SinkConfig::Print(_) | SinkConfig::Discard(_) => Ok(()),
        }
    }
}

/// What a two-phase-commit sink promises when the job checkpoints (`delivery = "..."`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// What it commits equals a run without crashes: output becomes visible when the
    /// checkpoint after it completes.
    #[default]
    ExactlyOnce,
    /// Nothing is lost, but output after the last checkpoint is written again after a crash;
    /// in exchange it becomes visible as soon as it is written.
    AtLeastOnce,
    /// For targets without transactions but with idempotent writes: the output of each
    /// checkpoint interval is kept in the checkpoint and written when it completes (again
    /// after a crash, which changes nothing).
    WriteAhead,
}

impl Delivery {
    /// Whether the sink subtask `ctx` describes commits only at completed checkpoints.
    pub(crate) fn transactional(self, ctx: &SinkContext<'_>) -> bool {
        ctx.checkpoints.is_some() && self == Delivery::ExactlyOnce
    }
}

/// Where a sink subtask runs.
#[derive(Debug, Clone, Copy)]
pub struct SinkContext<'a> {
    /// The job name.
    pub job: &'a str,
    /// The sink's name in the job spec.
    pub name: &'a str,
    /// The directory relative paths of the spec start at.
    pub base_dir: &'a Path,
    /// Which subtask of the sink this is.
    pub subtask: usize,
    /// The sink's parallelism.
    pub parallelism: usize,
    /// The job's checkpoint directory, if it checkpoints: a two-phase-commit sink then
    /// commits what each completed checkpoint covers, and otherwise as it goes. It also tells
    /// two jobs of one name apart.
    pub checkpoints: Option<&'a Path>,
}

fn check_subtask(subtask: usize, parallelism: usize) -> Result<(), ConnectorError> {
    if subtask >= parallelism {
        return Err(ConnectorError::Invalid(format!(
            "subtask index {subtask} is out of range for parallelism {parallelism}"
        )));
    }
    Ok(())
}

/// Checks, leaving nothing behind, that directory `dir` can be created (or exists) and
/// written into: a file sink's output directory, a savepoint's.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    // The outermost directory this creates, removed again after the check.
    let created = (dir.ancestors())
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .last()
        .map(Path::to_path_buf);
    let probe = dir.join(".weir-write-probe");
    let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&probe, b""));
    let _ = std::fs::remove_file(&probe);
    if let Some(created) = created {
        let _ = std::fs::remove_dir_all(created);
    }
    written
}

/// `path` as given, resolved against `base_dir` when relative.
fn resolve(base_dir: &Path, path: &Path) -> PathBuf {
    base_dir.join(path)
}

/// The explanation to append to a message about a path the user wrote.
fn resolved_note(base_dir: &Path, path: &Path) -> String {
    if path.is_absolute() {
        String::new()
    } else {
        format!(
            " (relative paths are resolved against the job spec's directory {})",
            base_dir.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_from_toml_tables() {
        let cfg: SourceConfig =
            toml::from_str("type = \"file\"\npath = \"in.txt\"\nsplit_size = 1024").unwrap();
        match &cfg {
            SourceConfig::File(f) => assert_eq!(f.split_size, 1024),
            other => panic!("parsed as {other:?}"),
        }
        assert!(cfg.is_bounded() && !cfg.produces_keys());

        let cfg: SourceConfig = toml::from_str("type = \"generator\"\nrate = 1000").unwrap();
        assert!(!cfg.is_bounded() && !cfg.produces_keys());

        let cfg: SinkConfig = toml::from_str("type = \"file\"\npath = \"out\"").unwrap();
        assert!(matches!(cfg, SinkConfig::File(_)));
        let cfg: SinkConfig = toml::from_str("type = \"print\"\nformat = \"key_value\"").unwrap();
        match cfg {
            SinkConfig::Print(p) => assert_eq!(p.format, LineFormat::KeyValue),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn unknown_settings_and_types_are_rejected() {
        let err = toml::from_str::<SourceConfig>("type = \"file\"\npaht = \"x\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("paht"), "{err}");
        let err = toml::from_str::<SourceConfig>("type = \"kafka\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kafka"), "{err}");
        let err = toml::from_str::<SinkConfig>("type = \"print\"\nformat = \"json\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("json"), "{err}");
    }

    #[test]
    fn configs_round_trip_through_json() {
        let cfg: SourceConfig =
            toml::from_str("type = \"generator\"\nmode = \"words\"\nseed = 7").unwrap();
        let json = serde_json::to_string(&cfg).unwrap();
        let back: SourceConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(format!("{cfg:?}"), format!("{back:?}"));
    }

    #[test]
    fn subtask_out_of_range_is_an_error() {
        let cfg: SourceConfig = toml::from_str("type = \"generator\"").unwrap();
        assert!(cfg.build(Path::new("."), 2, 2, &Clock::system()).is_err());
        assert!(cfg.build(Path::new("."), 0, 0, &Clock::system()).is_err());
    }
}
