//! What an operator may reach outside its own memory: nothing, unless its job grants it.
//!
//! Every operator is linked with the standard WASI interfaces, because guest toolchains import
//! them even for pure code, but its WASI context has no preopened directories, no environment
//! variables, no arguments and no network: opening a file, reading a variable or connecting a
//! socket fails inside the guest with an error (`access-denied`, not found). Clocks and
//! randomness are the host's. What the guest writes to stdout and stderr, and what it logs
//! through `weir:stream/log`, goes to weir's log, tagged with job, operator and subtask, and
//! rate-limited.
//!
//! A job spec grants an operator specific things:
//!
//! ```toml
//! [[operator]]
//! name = "enrich"
//! grants = { env = ["TZ"], dirs = [{ host = "reference", guest = "/reference" }] }
//! ```
//!
//! `env` passes variables of weir's own environment through by name; `dirs` opens host
//! directories read-only at the given guest path.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::Deserialize;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{FsPerms, WasiCtx};

use super::guest_text;
use super::interrupt::{CallClock, MonotonicClock};
use crate::operator::OperatorContext;

/// What a job grants one operator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Variables of weir's environment the operator may read, by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// Host directories the operator may read (never write).
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
}

/// A host directory an operator may read, at a path of its own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The directory on the host (relative paths start at the job spec's directory).
    pub host: PathBuf,
    /// Where the operator sees it, e.g. "/reference".
    pub guest: String,
}

impl Grants {
    /// Parses an operator's `grants` table, resolves relative directories against `base_dir`
    /// and checks that everything granted exists.
    pub(crate) fn resolve(table: Option<toml::Table>, base_dir: &Path) -> Result<Grants, String> {
        let Some(table) = table else {
            return Ok(Grants::default());
        };
        let mut grants = Grants::deserialize(toml::Value::Table(table)).map_err(|e| {
            format!(
                "grants: {}; grants are `env = [\"NAME\"]` and `dirs = [{{ host = \"dir\", \
                 guest = \"/dir\" }}]`",
                e.message()
            )
        })?;
        for name in &grants.env {
            if std::env::var_os(name).is_none() {
                return Err(format!(
                    "grants: env grants the variable {name}, which is not set in weir's \
                     environment; set it or remove it from the grant"
                ));
            }
        }
        for dir in &mut grants.dirs {
            dir.host = base_dir.join(&dir.host);
            if !dir.host.is_dir() {
                return Err(format!(
                    "grants: dirs grants {}, which is not a directory",
                    dir.host.display()
                ));
            }
            if !dir.guest.starts_with('/') {
                return Err(format!(
                    "grants: the guest path \"{}\" of {} must be absolute, e.g. \"/data\"",
                    dir.guest,
                    dir.host.display()
                ));
            }
        }
        Ok(grants)
    }

    /// The WASI context of one operator instance: these grants and nothing else, and the
    /// monotonic clock of its call clock.
    pub(crate) fn wasi_ctx(
        &self,
        log: &GuestLog,
        call: &Arc<CallClock>,
    ) -> Result<WasiCtx, String> {
        let mut builder = WasiCtx::builder();
        builder
            .monotonic_clock(MonotonicClock(Arc::clone(call)))
            .stdout(log.stream("stdout"))
            .stderr(log.stream("stderr"))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for name in &self.env {
            if let Some(value) = std::env::var_os(name) {
                builder.env(name, value.to_string_lossy());
            }
        }
        for dir in &self.dirs {
            builder
                .preopened_dir(&dir.host, &dir.guest, FsPerms::ReadOnly)
                .map_err(|e| format!("cannot open {} for the operator: {e}", dir.host.display()))?;
        }
        Ok(builder.build())
    }
}

/// Lines of guest output and log messages one operator instance may write per second; the
/// rest are counted and reported as dropped.
pub(crate) const LOG_LINES_PER_SECOND: u32 = 100;
/// Longer lines are cut.
const MAX_LINE: usize = 4096;

/// The log of one operator instance: its stdout, stderr and `weir:stream/log` messages,
/// rate-limited together.
#[derive(Clone)]
pub(crate) struct GuestLog {
    inner: Arc<Mutex<LogInner>>,
}

struct LogInner {
    job: String,
    operator: String,
    subtask: u32,
    window: Instant,
    lines: u32,
    dropped: u64,
}

impl LogInner {
    fn report_dropped(&mut self) {
        if self.dropped > 0 {
            tracing::warn!(
                job = self.job,
                operator = self.operator,
                subtask = self.subtask,
                "dropped {} line(s) of the operator's output over the limit of \
                 {LOG_LINES_PER_SECOND} lines per second",
                self.dropped
            );
            self.dropped = 0;
        }
    }
}

impl Drop for LogInner {
    fn drop(&mut self) {
        self.report_dropped();
    }
}

/// The level of a guest's log line.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl GuestLog {
    pub(crate) fn new(ctx: &OperatorContext) -> GuestLog {
        GuestLog {
            inner: Arc::new(Mutex::new(LogInner {
                job: ctx.job.clone(),
                operator: ctx.uid.clone(),
                subtask: ctx.subtask,
                window: Instant::now(),
                lines: 0,
                dropped: 0,
            })),
        }
    }

    /// Logs one line unless this second's lines are used up. Lines of a level the log does
    /// not show use up nothing.
    pub(crate) fn line(&self, level: Level, source: &str, text: &str) {
        let shown = match level {
            Level::Trace => tracing::enabled!(tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(tracing::Level::INFO),
            Level::Warn => tracing::enabled!(tracing::Level::WARN),
            Level::Error => tracing::enabled!(tracing::Level::ERROR),
        };
        if !shown {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now.duration_since(inner.window) >= Duration::from_secs(1) {
            inner.report_dropped();
            inner.window = now;
            inner.lines = 0;
        }
        if inner.lines >= LOG_LINES_PER_SECOND {
            inner.dropped += 1;
            return;
        }
        inner.lines += 1;
        let text = guest_text(text, MAX_LINE);
        let (job, operator, subtask) = (&inner.job, &inner.operator, inner.subtask);
        match level {
            Level::Trace => tracing::trace!(job, operator, subtask, source, "{text}"),
            Level::Debug => tracing::debug!(job, operator, subtask, source, "{text}"),
            Level::Info => tracing::info!(job, operator, subtask, source, "{text}"),
            Level::Warn => tracing::warn!(job, operator, subtask, source, "{text}"),
            Level::Error => tracing::error!(job, operator, subtask, source, "{text}"),
        }
    }

    fn stream(&self, name: &'static str) -> GuestStream {
        GuestStream {
            log: self.clone(),
            name,
            partial: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

/// A guest's stdout or stderr: whole lines go to the log (stdout at info, stderr at warn).
#[derive(Clone)]
struct GuestStream {
    log: GuestLog,
    name: &'static str,
    /// The unfinished last line.
    partial: Arc<Mutex<Vec<u8>>>,
}

impl GuestStream {
    fn write_bytes(&self, bytes: &[u8]) {
        let mut partial = self.partial.lock().unwrap_or_else(|p| p.into_inner());
        partial.extend_from_slice(bytes);
        let level = if self.name == "stderr" {
            Level::Warn
        } else {
            Level::Info
        };
        let mut start = 0;
        while let Some(end) = partial[start..].iter().position(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(&partial[start..start + end]);
            self.log.line(level, self.name, line.trim_end_matches('\r'));
            start += end + 1;
        }
        partial.drain(..start);
        if partial.len() >= MAX_LINE {
            self.log
                .line(level, self.name, &String::from_utf8_lossy(&partial));
            partial.clear();
        }
    }
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_resolve_relative_dirs_and_refuse_what_does_not_exist() {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir(base.path().join("ref")).unwrap();
        let table = |text: &str| Some(toml::from_str::<toml::Table>(text).unwrap());
        let g = Grants::resolve(
            table("dirs = [{ host = \"ref\", guest = \"/ref\" }]"),
            base.path(),
        )
        .unwrap();
        assert_eq!(g.dirs[0].host, base.path().join("ref"));
        let err = Grants::resolve(
            table("dirs = [{ host = \"nope\", guest = \"/x\" }]"),
            base.path(),
        )
        .unwrap_err();
        assert!(
            err.contains("nope") && err.contains("not a directory"),
            "{err}"
        );
        let err = Grants::resolve(
            table("dirs = [{ host = \"ref\", guest = \"ref\" }]"),
            base.path(),
        )
        .unwrap_err();
        assert!(err.contains("must be absolute"), "{err}");
        let err =
            Grants::resolve(table("env = [\"WEIR_SURELY_UNSET_VAR\"]"), base.path()).unwrap_err();
        assert!(err.contains("WEIR_SURELY_UNSET_VAR"), "{err}");
        let err = Grants::resolve(table("network = true"), base.path()).unwrap_err();
        assert!(err.contains("network"), "{err}");
        assert_eq!(
            Grants::resolve(None, base.path()).unwrap(),
            Grants::default()
        );
    }
}
