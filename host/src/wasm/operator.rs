//! An operator subtask running a component instance.

use wasmtime::{Store, Trap};
use weir_wire::{BatchWriter, TimeDomain, write_fired_timers};

use super::OperatorComponent;
use super::Processor;
use super::capabilities::Grants;
use super::describe_bytes;
use super::exports::weir::stream::operator::OpenContext;
use super::guest_text;
use super::host::{HostState, MAX_GUEST_ERROR};
use super::interrupt;
use super::limits::{Limit, LimitExceeded, Limits, bytes};
use crate::batch::{BATCH_RECORDS, Batch};
use crate::operator::{FailureKind, Operator, OperatorContext, OperatorError, Snapshot};
use crate::state::{FastMap, StateSetup, restore_operator_states, snapshot_operator_states};
use std::path::Path;

/// Runs one instance of an operator component for one subtask.
pub(crate) struct WasmOperator {
    store: Store<HostState>,
    bindings: Processor,
    /// Reused encoding buffer for batches.
    buf: Vec<u8>,
    /// Whether calls have an execution deadline (see [`super::EngineOptions`]).
    deadlines: bool,
}

impl WasmOperator {
    /// Instantiates `component` for one subtask, with `limits` and `grants`.
    pub(crate) fn new(
        component: &OperatorComponent,
        ctx: OperatorContext,
        state: &StateSetup,
        limits: Limits,
        grants: &Grants,
    ) -> Result<Self, OperatorError> {
        let engine = component.pre.engine();
        let data = HostState::new(ctx, state, limits, grants).map_err(OperatorError::Failed)?;
        let mut store = Store::new(engine, data);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(
            usize::try_from(limits.host_call_bytes.as_u64()).unwrap_or(usize::MAX),
        );
        if component.deadlines {
            // Every tick while guest code runs, `on_epoch` looks at the call's deadline and
            // at the job's cancellation.
            store.epoch_deadline_callback(|ctx| interrupt::on_epoch(ctx.data().call_clock()));
            store.set_epoch_deadline(1);
            store.data().call_clock().arm(Some(limits.call_deadline));
        }
        let bindings = component.pre.instantiate(&mut store).map_err(|e| {
            let kind = match e.downcast_ref::<LimitExceeded>() {
                Some(l) => FailureKind::Limit(l.limit),
                // Over `instances`: wasmtime's own error names the count.
                None => FailureKind::Trap,
            };
            OperatorError::Guest {
                kind,
                message: format!("instantiation failed: {e:#}"),
            }
        })?;
        Ok(WasmOperator {
            store,
            bindings,
            buf: Vec::new(),
            deadlines: component.deadlines,
        })
    }

    /// Starts a call of `hook`: arms its execution deadline and zeroes its output counts.
    fn arm(&mut self, hook: &'static str) {
        if self.deadlines {
            let data = self.store.data();
            data.call_clock()
                .arm(Some(data.limiter.limits.call_deadline));
            self.store.set_epoch_deadline(1);
        }
        let data = self.store.data_mut();
        data.begin_call(hook);
        data.in_call = hook != "open";
    }

    /// Turns the result of a guest call into the operator's result; `input` is the batch a
    /// `process` call was handling.
    fn check(
        &mut self,
        result: wasmtime::Result<Result<(), String>>,
        input: Option<&Batch>,
    ) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        data.in_call = false;
        let (hook, limits) = (data.hook, data.limiter.limits);
        let trap = match result {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(message)) => {
                let message = guest_text(&message, MAX_GUEST_ERROR);
                return Err(OperatorError::Failed(format!("{hook} failed: {message}")));
            }
            Err(trap) => trap,
        };
        // The wasm backtrace goes to the debug log; the error keeps the cause.
        tracing::debug!(operator = data.ctx.uid, "{hook} failed: {trap:?}");
        if trap.downcast_ref::<interrupt::Cancelled>().is_some() {
            return Err(OperatorError::Cancelled);
        }
        let (kind, mut message) = if let Some(limit) = trap.downcast_ref::<LimitExceeded>() {
            (FailureKind::Limit(limit.limit), limit.to_string())
        } else if trap
            .root_cause()
            .to_string()
            // wasmtime's hostcall fuel, set to `host_call_bytes`; its error type is private.
            .contains("fuel allocated for hostcalls has been exhausted")
        {
            let limit = LimitExceeded {
                limit: Limit::HostCallBytes,
                message: format!(
                    "{hook} passed more than {} to the host in one call (a buffer of output, \
                     state changes or a state value)",
                    bytes(limits.host_call_bytes.as_u64())
                ),
            };
            (FailureKind::Limit(limit.limit), limit.to_string())
        } else {
            match trap.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => (
                    FailureKind::Deadline,
                    format!(
                        "execution deadline exceeded: {hook} ran longer than {:?}, the limit of \
                         one call; raise `limits.call_deadline` of the operator if this is \
                         expected",
                        limits.call_deadline
                    ),
                ),
                Some(Trap::StackOverflow) => (
                    FailureKind::StackOverflow,
                    format!("stack overflow in {hook}: the guest recursed too deep"),
                ),
                Some(Trap::MemoryOutOfBounds) => (
                    FailureKind::Trap,
                    format!(
                        "in {hook}: {} (in Rust and C guests often a stack overflow: their \
                         stack is in linear memory)",
                        trap.root_cause()
                    ),
                ),
                _ => (
                    FailureKind::Trap,
                    format!("in {hook}: {}", trap.root_cause()),
                ),
            }
        };
        match (data.last_error.take(), input) {
            // The guest's own account (weir-sdk's panic message names the record).
            (Some(logged), _) => message = format!("{logged} ({message})"),
            (None, Some(input)) => message.push_str(&describe_batch(input)),
            (None, None) => {}
        }
        Err(OperatorError::Guest { kind, message })
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

    /// Fires the event-time timers as at the end of input, when the watermark jumps to the
    /// end of time: in timestamp order and in batches, every timer pending when the input
    /// ended, then once more as many as are pending after that (those the callbacks
    /// registered, which the watermark has passed too), and no more, so that a timer that keeps
    /// registering itself cannot keep the job from ending. The job's cancellation ends the
    /// firing between batches.
    fn fire_all_event_timers(&mut self, out: &mut Batch) -> Result<(), OperatorError> {
        self.store.data_mut().watermark = Some(i64::MAX);
        for _round in 0..2 {
            let mut due = self.store.data().timers.event_len();
            while due > 0 {
                if self.store.data().call_clock().is_cancelled() {
                    return Err(OperatorError::Cancelled);
                }
                let n = due.min(BATCH_RECORDS);
                due -= n;
                self.fire_event_timers(n, out)?;
            }
        }
        let data = self.store.data();
        let left = data.timers.event_len();
        if left > 0 {
            tracing::warn!(
                job = data.ctx.job,
                operator = data.ctx.uid,
                subtask = data.ctx.subtask,
                "{left} event-time timer(s) registered by timer callbacks at the end of input \
                 did not fire: at the end of input, timers registered while timers fire fire \
                 once more, not again and again"
            );
        }
        Ok(())
    }

    /// Fires the `n` earliest event-time timers in one call.
    fn fire_event_timers(&mut self, n: usize, out: &mut Batch) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        let fired: Vec<(i64, Box<[u8]>)> = std::iter::from_fn(|| data.timers.pop_event())
            .take(n)
            .collect();
        data.slots.clear();
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
        for &(_, slot, ts) in &entries {
            data.slots.note_time(slot, ts);
        }
        write_fired_timers(&mut self.buf, &keys, entries.into_iter());
        self.arm("on-timers");
        let result = self
            .bindings
            .weir_stream_operator()
            .call_on_timers(&mut self.store, &self.buf);
        self.check(result, None)?;
        self.take_output(out);
        Ok(())
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
        self.arm("open");
        let result = self
            .bindings
            .weir_stream_operator()
            .call_open(&mut self.store, &ctx);
        self.check(result, None)
    }

    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        // Deduplicate the batch's keys into slots; the guest sees each key once.
        let data = self.store.data_mut();
        data.slots.clear();
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
            if let (Some(slot), Some(ts)) = (slot, rec.timestamp) {
                data.slots.note_time(slot, ts);
            }
            writer.record(slot, rec.kind, rec.timestamp, rec.value);
        }
        self.buf = writer.finish();
        self.arm("process");
        let result = self
            .bindings
            .weir_stream_operator()
            .call_process(&mut self.store, &self.buf);
        self.check(result, Some(input))?;
        self.take_output(out);
        Ok(())
    }

    fn close(&mut self, out: &mut Batch) -> Result<(), OperatorError> {
        self.fire_all_event_timers(out)?;
        self.store.data_mut().slots.clear();
        self.arm("close");
        let result = self
            .bindings
            .weir_stream_operator()
            .call_close(&mut self.store);
        self.check(result, None)?;
        self.take_output(out);
        Ok(())
    }

    fn snapshot(&mut self, n: u64, snapshot: &mut Snapshot) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        if data.state.is_empty() && data.timers.is_empty() {
            return Ok(());
        }
        snapshot.shared = data
            .state
            .checkpoint(n, data.timers.iter(), &mut snapshot.bytes)
            .map_err(|e| OperatorError::Failed(format!("snapshot of its state failed: {e}")))?;
        Ok(())
    }

    fn notify_complete(&mut self, n: u64) {
        self.store.data_mut().state.notify_complete(n);
    }

    fn restore(&mut self, snapshot: &[u8], shared: &Path) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        let timers = &mut data.timers;
        data.state
            .restore_file(snapshot, shared, |(domain, ts, key)| {
                timers.register(domain, ts, key);
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
        self.store.data_mut().take_side_outputs()
    }
}

/// Which records a failed `process` call was handling, when the guest did not say: the host
/// cannot see which record of the batch the guest was at.
fn describe_batch(input: &Batch) -> String {
    let Some(first) = input.iter().next() else {
        return String::new();
    };
    let record = |rec: &weir_wire::RecordRef<'_>| match rec.key {
        Some(key) => format!(
            "key {}, value {}",
            describe_bytes(key),
            describe_bytes(rec.value)
        ),
        None => format!("value {}", describe_bytes(rec.value)),
    };
    match input.len() {
        1 => format!("; the record: {}", record(&first)),
        n => format!(
            "; it was processing a batch of {n} records, the first: {}",
            record(&first)
        ),
    }
}
