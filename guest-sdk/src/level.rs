//! Log levels of the operator's log.

use std::fmt;

/// The level of a log line sent to the host with [`Context::log`](crate::Context::log).
///
/// ```
/// use weir_sdk::Level;
/// assert!(Level::Warn > Level::Info);
/// assert_eq!(Level::Error.to_string(), "error");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the operator handled, such as a dropped record.
    Warn,
    /// Something failed.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        })
    }
}
