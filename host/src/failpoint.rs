//! Crash points for tests of a job's edges: with `WEIR_FAILPOINT=<name>` in its environment,
//! the process aborts when it reaches the point of that name, as a crash would (nothing is
//! cleaned up, flushed or unlocked by weir). Without the variable a point costs one load.
//!
//! The points: `finish.after-final-checkpoint`, `finish.after-commit`,
//! `finish.after-completion-record` and `finish.during-discard` (see `runtime::supervisor`).

use std::sync::OnceLock;

/// Aborts the process if `WEIR_FAILPOINT` names `point`.
pub(crate) fn hit(point: &str) {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    if ARMED
        .get_or_init(|| std::env::var("WEIR_FAILPOINT").ok())
        .as_deref()
        == Some(point)
    {
        eprintln!("weir: failpoint {point} reached; aborting");
        std::process::abort();
    }
}
