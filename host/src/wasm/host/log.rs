//! `weir:stream/log`: the guest's log lines, rate-limited; an error line is kept for the
//! failure it may explain.

use super::{HostState, MAX_GUEST_ERROR};
use crate::wasm::capabilities::Level;
use crate::wasm::guest_text;
use crate::wasm::weir::stream::{log, types};

impl log::Host for HostState {
    fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        let level = match level {
            types::LogLevel::Trace => Level::Trace,
            types::LogLevel::Debug => Level::Debug,
            types::LogLevel::Info => Level::Info,
            types::LogLevel::Warn => Level::Warn,
            types::LogLevel::Error => Level::Error,
        };
        self.log.line(level, "log", &message);
        if let Level::Error = level {
            self.last_error = Some(guest_text(&message, MAX_GUEST_ERROR));
        }
        Ok(())
    }
}
