//! An operator subtask running a component instance.

use wasmtime::{Store, Trap};
use weir_wire::{BatchWriter, TimeDomain, write_fired_timers};

use super::OperatorComponent;
use super::Processor;
use super::exports::weir::stream::operator::OpenContext;
use super::host::HostState;
use super::limits::{DEFAULT_CALL_DEADLINE, deadline_ticks};
use crate::batch::{BATCH_RECORDS, Batch};
use crate::runtime::operator::{Operator, OperatorContext, OperatorError};
use crate::state::{FastMap, restore_operator_states, snapshot_operator_states};

/// Runs one instance of an operator component for one subtask.
pub(crate) struct WasmOperator {
    store: Store<HostState>,
    bindings: Processor,
    /// Reused encoding buffer for batches.
    buf: Vec<u8>,
}

impl WasmOperator {
    pub(crate) fn new(
        component: &OperatorComponent,
        ctx: OperatorContext,
    ) -> Result<Self, OperatorError> {
        let engine = component.pre.engine();
        let mut store = Store::new(engine, HostState::new(ctx));
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(deadline_ticks(DEFAULT_CALL_DEADLINE));
        let bindings = component
            .pre
            .instantiate(&mut store)
            .map_err(|e| OperatorError::Trap(format!("instantiation failed: {e:#}")))?;
        Ok(WasmOperator {
            store,
            bindings,
            buf: Vec::new(),
        })
    }

    /// Starts the execution deadline of the next call.
    fn arm(&mut self) {
        self.store
            .set_epoch_deadline(deadline_ticks(DEFAULT_CALL_DEADLINE));
    }

    /// Turns the result of a guest call into the operator's result.
    fn check(
        &mut self,
        hook: &str,
        result: wasmtime::Result<Result<(), String>>,
    ) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        data.in_call = false;
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(OperatorError::Failed(format!("{hook} failed: {message}"))),
            Err(trap) => {
                // The wasm backtrace goes to the debug log; the error keeps the cause.
                tracing::debug!(operator = data.ctx.uid, "{hook} failed: {trap:?}");
                let mut message = match trap.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => format!(
                        "execution deadline exceeded: {hook} ran longer than {:?}, the limit \
                         of one call",
                        DEFAULT_CALL_DEADLINE
                    ),
                    _ => format!("in {hook}: {}", trap.root_cause()),
                };
                if let Some(logged) = data.last_error.take() {
                    message = format!("{logged} ({message})");
                }
                Err(OperatorError::Trap(message))
            }
        }
    }

    /// Hands the guest's output of the last call to `out`.
    fn take_output(&mut self, out: &mut Batch) {
        let data = self.store.data_mut();
        if out.is_empty() {
            std::mem::swap(out, &mut data.out);
        } else {
            for rec in data.out.iter() {
                out.push(&rec);
            }
            data.out.clear();
        }
    }

    /// Fires every registered event-time timer in timestamp order, as at the end of input
    /// (the watermark jumps to the end of time), in batches.
    fn fire_all_event_timers(&mut self, out: &mut Batch) -> Result<(), OperatorError> {
        self.store.data_mut().watermark = Some(i64::MAX);
        loop {
            let data = self.store.data_mut();
            if data.event_timers.is_empty() {
                return Ok(());
            }
            let mut fired = Vec::with_capacity(BATCH_RECORDS.min(data.event_timers.len()));
            while fired.len() < BATCH_RECORDS {
                match data.event_timers.pop_first() {
                    Some(t) => fired.push(t),
                    None => break,
                }
            }
            data.clear_slots();
            let mut slots: FastMap<&[u8], u32> = FastMap::default();
            let mut keys: Vec<&[u8]> = Vec::new();
            let mut entries = Vec::with_capacity(fired.len());
            for (ts, key) in &fired {
                let slot = *slots.entry(&key[..]).or_insert_with(|| {
                    keys.push(&key[..]);
                    (keys.len() - 1) as u32
                });
                entries.push((TimeDomain::EventTime, slot, *ts));
            }
            for k in &keys {
                data.push_slot(k);
            }
            write_fired_timers(&mut self.buf, &keys, entries.into_iter());
            data.in_call = true;
            self.arm();
            let result = self
                .bindings
                .weir_stream_operator()
                .call_on_timers(&mut self.store, &self.buf);
            self.check("on-timers", result)?;
            self.take_output(out);
        }
    }
}

impl Operator for WasmOperator {
    fn open(&mut self) -> Result<(), OperatorError> {
        let c = &self.store.data().ctx;
        let ctx = OpenContext {
            operator_uid: c.uid.clone(),
            subtask_index: c.subtask,
            parallelism: c.parallelism,
            config: c.config.clone(),
        };
        self.arm();
        let result = self
            .bindings
            .weir_stream_operator()
            .call_open(&mut self.store, &ctx);
        self.check("open", result)
    }

    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        // Deduplicate the batch's keys into slots; the guest sees each key once.
        let data = self.store.data_mut();
        data.clear_slots();
        let mut writer = BatchWriter::new(std::mem::take(&mut self.buf));
        let mut slots: FastMap<&[u8], u32> =
            FastMap::with_capacity_and_hasher(input.len(), Default::default());
        for rec in input.iter() {
            if let Some(key) = rec.key {
                slots.entry(key).or_insert_with(|| {
                    data.push_slot(key);
                    writer.key(key)
                });
            }
        }
        for rec in input.iter() {
            let slot = rec.key.map(|k| slots[k]);
            writer.record(slot, rec.kind, rec.timestamp, rec.value);
        }
        self.buf = writer.finish();
        data.in_call = true;
        self.arm();
        let result = self
            .bindings
            .weir_stream_operator()
            .call_process(&mut self.store, &self.buf);
        self.check("process", result)?;
        self.take_output(out);
        Ok(())
    }

    fn close(&mut self, out: &mut Batch) -> Result<(), OperatorError> {
        self.fire_all_event_timers(out)?;
        let data = self.store.data_mut();
        data.clear_slots();
        data.in_call = true;
        self.arm();
        let result = self
            .bindings
            .weir_stream_operator()
            .call_close(&mut self.store);
        self.check("close", result)?;
        self.take_output(out);
        Ok(())
    }

    fn snapshot(&mut self, out: &mut Vec<u8>) -> Result<bool, OperatorError> {
        let data = self.store.data();
        if data.state.is_empty()
            && data.event_timers.is_empty()
            && data.processing_timers.is_empty()
        {
            return Ok(false);
        }
        let timers = (data
            .event_timers
            .iter()
            .map(|(ts, k)| (TimeDomain::EventTime, *ts, &k[..])))
        .chain(
            data.processing_timers
                .iter()
                .map(|(ts, k)| (TimeDomain::ProcessingTime, *ts, &k[..])),
        );
        data.state.snapshot(timers, out);
        Ok(true)
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        let (event, processing) = (&mut data.event_timers, &mut data.processing_timers);
        data.state
            .restore(snapshot, |(domain, ts, key)| {
                let set = match domain {
                    TimeDomain::EventTime => &mut *event,
                    TimeDomain::ProcessingTime => &mut *processing,
                };
                set.insert((ts, key.into()));
            })
            .map_err(|e| OperatorError::Contract(e.to_string()))
    }

    fn snapshot_operator_state(&mut self) -> Option<Vec<u8>> {
        let states = &self.store.data().operator_state;
        (!states.is_empty()).then(|| snapshot_operator_states(states))
    }

    fn restore_operator_state(&mut self, snapshot: &[u8]) -> Result<(), OperatorError> {
        self.store.data_mut().operator_state = restore_operator_states(snapshot)
            .map_err(|e| OperatorError::Contract(e.to_string()))?;
        Ok(())
    }

    fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        std::mem::take(&mut self.store.data_mut().side_outputs)
    }
}
