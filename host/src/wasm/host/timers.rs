//! `weir:stream/timers`: the current call's keys' timers, the watermark and processing time.

use weir_wire::read_timer_ops;

use super::HostState;
use crate::state::StateError;
use crate::wasm::limits::{Limit, LimitExceeded};
use crate::wasm::weir::stream::timers;

impl timers::Host for HostState {
    fn current_watermark(&mut self) -> wasmtime::Result<Option<i64>> {
        Ok(self.watermark)
    }

    fn current_processing_time(&mut self) -> wasmtime::Result<i64> {
        Ok(self.clock.now_ms())
    }

    fn update(&mut self, changes: Vec<u8>) -> wasmtime::Result<()> {
        if !self.in_call {
            return Err(wasmtime::format_err!(
                "timers were changed outside of process or on-timers; timers need a current key"
            ));
        }
        for op in read_timer_ops(&changes) {
            let op = op.map_err(|e| wasmtime::format_err!("{e}"))?;
            let slot = op.slot as usize;
            if slot >= self.slots.len() {
                return Err(wasmtime::format_err!(
                    "{}",
                    StateError::NoSuchSlot {
                        slot: op.slot,
                        len: self.slots.len()
                    }
                ));
            }
            let key = self.slots.key(slot);
            let done = match op.register {
                true => (self.state.check_timer_group(self.slots.group(slot)))
                    .and_then(|()| self.state.register_timer(op.domain, op.timestamp, key)),
                false => (self.state).delete_timer(op.domain, op.timestamp, key),
            };
            done.map_err(|e| wasmtime::format_err!("{e}"))?;
        }
        let limit = self.limits().timers;
        if self.state.timers_in_memory().0 as u64 > limit {
            return Err(LimitExceeded::error(
                Limit::Timers,
                format!(
                    "{} left more than {limit} timers pending; delete timers that are no longer \
                     needed (one timer per key, replaced when it moves, is the usual pattern)",
                    self.hook
                ),
            ));
        }
        self.check_host_memory(|| "registering timers".into())
    }
}
