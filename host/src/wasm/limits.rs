//! Limits of one operator instance: linear memory, table elements, and the execution
//! deadline of every call into the guest.
//!
//! | limit | default | exceeded |
//! |---|---|---|
//! | linear memory | 256 MiB | the growing call traps, naming the limit |
//! | table elements | 100,000 | the growing call traps, naming the limit |
//! | execution deadline | 5 s per call (`open`, a batch, a timer batch, `close`) | the call traps |
//!
//! The deadline uses wasmtime's epoch interruption: one ticker thread per engine advances the
//! epoch every [`EPOCH_TICK`], and every call is armed with the deadline in ticks, so a guest
//! that loops forever is stopped within a tick of its deadline.

use std::time::Duration;

use wasmtime::{Engine, ResourceLimiter};

/// How often the engine's epoch advances: the resolution of the execution deadline.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);
pub(crate) const DEFAULT_MEMORY_BYTES: usize = 256 << 20;
pub(crate) const DEFAULT_TABLE_ELEMENTS: usize = 100_000;
pub(crate) const DEFAULT_CALL_DEADLINE: Duration = Duration::from_secs(5);

/// The deadline of one call, in epoch ticks.
pub(crate) fn deadline_ticks(deadline: Duration) -> u64 {
    (deadline.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
}

/// Advances `engine`'s epoch every tick for as long as the engine lives (its components and
/// stores keep it alive).
pub(crate) fn start_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
}

/// Refuses growth of an instance's memories and tables beyond its limits.
#[derive(Debug)]
pub(crate) struct Limiter {
    pub memory_bytes: usize,
    pub table_elements: usize,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            table_elements: DEFAULT_TABLE_ELEMENTS,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return Err(wasmtime::format_err!(
                "memory limit exceeded: the operator tried to grow its linear memory from {} MiB \
                 to {} MiB, over the limit of {} MiB",
                current >> 20,
                desired.div_ceil(1 << 20),
                self.memory_bytes >> 20
            ));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return Err(wasmtime::format_err!(
                "table limit exceeded: the operator tried to grow a table from {current} to \
                 {desired} elements, over the limit of {}",
                self.table_elements
            ));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_within_limits_is_allowed_and_beyond_is_an_error_naming_the_limit() {
        let mut l = Limiter::default();
        assert!(l.memory_growing(1 << 20, 2 << 20, None).unwrap());
        let err = l.memory_growing(1 << 20, 300 << 20, None).unwrap_err();
        assert!(err.to_string().contains("limit of 256 MiB"), "{err}");
        assert!(l.table_growing(10, 20, None).unwrap());
        let err = l.table_growing(10, 200_000, None).unwrap_err();
        assert!(err.to_string().contains("limit of 100000"), "{err}");
    }

    #[test]
    fn deadlines_round_to_ticks() {
        assert_eq!(deadline_ticks(Duration::from_secs(5)), 500);
        assert_eq!(deadline_ticks(Duration::from_millis(1)), 1);
    }
}
