//! An operator subtask running a component instance.

use wasmtime::{Store, Trap};
use weir_wire::{BatchWriter, FORGET, TimeDomain, WRITE_BACK, write_fired_timers};

use super::OperatorComponent;
use super::Processor;
use super::describe_bytes;
use super::exports::weir::stream::operator::OpenContext;
use super::guest_text;
use super::host::{Hook, HostState, MAX_GUEST_ERROR};
use super::interrupt;
use super::limits::{Limit, LimitExceeded, bytes};
use crate::batch::{BATCH_RECORDS, Batch};
use crate::operator::{
    FailureKind, InstanceUsage, Operator, OperatorContext, OperatorError, Snapshot,
};
use crate::state::StateSetup;
use std::path::Path;

/// A record without key in [`WasmOperator::record_slots`].
const NO_KEY: u32 = u32::MAX;

/// Runs one instance of an operator component for one subtask.
pub(crate) struct WasmOperator {
    store: Store<HostState>,
    bindings: Processor,
    /// Reused encoding buffer for batches.
    buf: Vec<u8>,
    /// Reused: the key slot of each record of the batch being encoded, [`NO_KEY`] for none.
    record_slots: Vec<u32>,
    /// Whether calls have an execution deadline (see [`super::EngineOptions`]).
    deadlines: bool,
    /// Calls into the instance so far.
    calls: u64,
    /// Bytes of linear memory the instance held once instantiated.
    start_bytes: u64,
    /// The firing of timers under way, which goes on in the next call of the same time.
    firing: Option<Firing>,
    /// Whether `close` was called: the guest has written back what it kept and is gone.
    closed: bool,
}

/// A firing of timers that went on over several calls of the guest (see
/// [`WasmOperator::fire_timers`]).
#[derive(Clone, Copy)]
struct Firing {
    domain: TimeDomain,
    upto: i64,
    /// How many more timers it may fire.
    budget: u64,
}

/// What one step of a firing of timers did.
enum Fired {
    /// Handed a batch of timers to the guest; more may be due.
    Batch,
    /// Found none left to fire; `left`: due timers remain beyond the firing's budget.
    Done { left: bool },
}

impl WasmOperator {
    /// Instantiates `component` for one subtask, within the component's limits and grants.
    pub(crate) fn new(
        component: &OperatorComponent,
        ctx: OperatorContext,
        state: &StateSetup,
    ) -> Result<Self, OperatorError> {
        let data = HostState::new(ctx, state, component.limits, &component.grants)
            .map_err(OperatorError::Failed)?;
        Self::instantiate(component, data)
    }

    /// An instance of `component` (new code, or the same) that carries on with what the host
    /// holds for this one: its keyed state, timers and operator state.
    pub(crate) fn carry_on(
        mut self,
        component: &OperatorComponent,
        ctx: OperatorContext,
        clock: crate::clock::Clock,
    ) -> Result<Self, OperatorError> {
        self.write_back()?;
        let firing = self.firing;
        let held = self.store.into_data().into_held();
        let data = HostState::with_held(ctx, held, clock, component.limits, &component.grants)
            .map_err(OperatorError::Failed)?;
        let mut op = Self::instantiate(component, data)?;
        op.firing = firing;
        Ok(op)
    }

    fn instantiate(component: &OperatorComponent, data: HostState) -> Result<Self, OperatorError> {
        let engine = component.pre.engine();
        let limits = component.limits;
        let mut store = Store::new(engine, data);
        store.limiter(|s| s.limiter());
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
        let start_bytes = store.data().memory_bytes();
        Ok(WasmOperator {
            store,
            bindings,
            buf: Vec::new(),
            record_slots: Vec::new(),
            deadlines: component.deadlines,
            calls: 0,
            start_bytes,
            firing: None,
            closed: false,
        })
    }

    /// Calls the guest's `process` with `input` from its input `which`; an error the guest
    /// did not explain names the batch with `describe` (a window's function: its window
    /// calls, see `weir_wire::window`, rather than records).
    pub(crate) fn process_described(
        &mut self,
        which: u8,
        input: &Batch,
        out: &mut Batch,
        describe: Describe,
    ) -> Result<(), OperatorError> {
        self.bound_key_ids()?;
        // Deduplicate the batch's keys into slots; the guest sees each key once.
        self.begin(Hook::Process);
        let data = self.store.data_mut();
        let mut writer = BatchWriter::new(std::mem::take(&mut self.buf));
        writer.from_input(which);
        // Keys precede records in the buffer: one pass finds each record's slot (one hash
        // per record), the second writes the records.
        self.record_slots.clear();
        self.record_slots
            .extend(input.iter().map(|rec| match rec.key {
                Some(key) => {
                    let (slot, new) = data.key_slot(key);
                    if new {
                        let at = writer.key(key);
                        debug_assert_eq!(at, slot, "the guest's key table follows the slots");
                    }
                    slot
                }
                None => NO_KEY,
            }));
        for (rec, &slot) in input.iter().zip(&self.record_slots) {
            let slot = (slot != NO_KEY).then_some(slot);
            if let (Some(slot), Some(ts)) = (slot, rec.timestamp) {
                data.note_time(slot, ts);
            }
            writer.record(slot, rec.kind, rec.timestamp, rec.value);
        }
        self.buf = writer.finish();
        let result = self
            .bindings
            .weir_stream_operator()
            .call_process(&mut self.store, &self.buf);
        self.end(result, Some((input, describe)), out)
    }

    /// Has a guest that keeps state changes from call to call write them back (the
    /// write-back batch, see `wit/stream.wit`), so that the host holds all of its state.
    fn write_back(&mut self) -> Result<(), OperatorError> {
        self.send_write_back(&WRITE_BACK)
    }

    /// Before a call: when the key ids given out are too many, has the guest write back and
    /// forget them (the forget batch), and starts them over.
    fn bound_key_ids(&mut self) -> Result<(), OperatorError> {
        if !self.store.data().key_ids_full() {
            return Ok(());
        }
        self.send_write_back(&FORGET)?;
        self.store.data_mut().forget_key_ids();
        Ok(())
    }

    /// Sends `batch`, the write-back or the forget batch, to a guest that writes back.
    fn send_write_back(&mut self, batch: &[u8; 4]) -> Result<(), OperatorError> {
        if self.closed || !self.store.data().writes_back() {
            return Ok(());
        }
        self.begin(Hook::WriteBack);
        self.buf.clear();
        self.buf.extend_from_slice(batch);
        let result = self
            .bindings
            .weir_stream_operator()
            .call_process(&mut self.store, &self.buf);
        // Emitting is refused (`output::Host::emit`): nothing comes out.
        self.end(result, None, &mut Batch::default())
    }

    /// Starts a call of `hook` (see [`HostState::begin`]), with its execution deadline.
    fn begin(&mut self, hook: Hook) {
        self.calls += 1;
        if self.deadlines {
            self.store.set_epoch_deadline(1);
        }
        self.store.data_mut().begin(hook, self.deadlines);
    }

    /// Ends the call: hands its output to `out` and turns its result into the operator's;
    /// `input` is the batch a `process` call was handling, with what describes it in an error.
    fn end(
        &mut self,
        result: wasmtime::Result<Result<(), String>>,
        input: Option<(&Batch, Describe)>,
        out: &mut Batch,
    ) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        let logged = data.end(out);
        let (hook, limits) = (data.hook(), *data.limits());
        let trap = match result {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(message)) => {
                let message = guest_text(&message, MAX_GUEST_ERROR);
                return Err(OperatorError::Failed(format!("{hook} failed: {message}")));
            }
            Err(trap) => trap,
        };
        // The wasm backtrace goes to the debug log; the error keeps the cause.
        tracing::debug!(operator = data.context().uid, "{hook} failed: {trap:?}");
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
        match (logged, input) {
            // The guest's own account (weir-sdk's panic message names the record).
            (Some(logged), _) => message = format!("{logged} ({message})"),
            (None, Some((input, describe))) => message.push_str(&describe(input)),
            (None, None) => {}
        }
        Err(OperatorError::Guest { kind, message })
    }

    /// Fires the next batch of the timers of `domain` due at `upto`, in timestamp order: one
    /// call of the guest, whose output the caller hands on before the next, so that a firing
    /// of many timers never holds more than one call's output. A firing goes on over the
    /// calls for the same `domain` and `upto` and fires at most twice as many timers as were
    /// pending when it began, so that timers that keep registering themselves at or before
    /// `upto` cannot keep the task here (those left fire at the next advance, or stay when
    /// the input ends, with a warning). The job's cancellation ends the firing between batches.
    fn fire_timers(
        &mut self,
        domain: TimeDomain,
        upto: i64,
        out: &mut Batch,
    ) -> Result<Fired, OperatorError> {
        let state = self.store.data_mut().keyed_state();
        let budget = match self.firing {
            Some(f) if f.domain == domain && f.upto == upto => f.budget,
            _ => 2 * state.timer_count(domain),
        };
        let mut fired = Vec::new();
        while fired.len() < BATCH_RECORDS.min(budget as usize)
            && let Some(timer) = state
                .pop_timer(domain, upto)
                .map_err(OperatorError::timers)?
        {
            fired.push(timer);
        }
        if fired.is_empty() {
            self.firing = None;
            let next = state.next_timer(domain);
            return Ok(Fired::Done {
                left: next.is_some_and(|t| t <= upto),
            });
        }
        self.firing = Some(Firing {
            domain,
            upto,
            budget: budget - fired.len() as u64,
        });
        if self.store.data_mut().call_clock().is_cancelled() {
            return Err(OperatorError::Cancelled);
        }
        self.call_on_timers(domain, &fired, out)?;
        Ok(Fired::Batch)
    }

    /// Hands `fired` timers of `domain` to the guest in one call.
    fn call_on_timers(
        &mut self,
        domain: TimeDomain,
        fired: &[(i64, crate::state::Key)],
        out: &mut Batch,
    ) -> Result<(), OperatorError> {
        self.bound_key_ids()?;
        self.begin(Hook::OnTimers);
        let data = self.store.data_mut();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut entries = Vec::with_capacity(fired.len());
        for (ts, key) in fired {
            let (slot, new) = data.key_slot(key);
            if new {
                keys.push(key);
            }
            entries.push((domain, slot, *ts));
        }
        // An event-time timer's time is its key's event time, for event-time TTL; a
        // processing-time timer's is a wall-clock time, which is not.
        if domain == TimeDomain::EventTime {
            for &(_, slot, ts) in &entries {
                data.note_time(slot, ts);
            }
        }
        write_fired_timers(&mut self.buf, &keys, entries.into_iter());
        let result = self
            .bindings
            .weir_stream_operator()
            .call_on_timers(&mut self.store, &self.buf);
        self.end(result, None, out)
    }
}

impl Operator for WasmOperator {
    fn open(&mut self) -> Result<(), OperatorError> {
        let c = self.store.data().context();
        let ctx = OpenContext {
            operator_uid: c.uid.clone(),
            subtask_index: c.subtask,
            parallelism: c.parallelism,
            config: c.config.clone(),
        };
        self.begin(Hook::Open);
        let result = self
            .bindings
            .weir_stream_operator()
            .call_open(&mut self.store, &ctx);
        self.end(result, None, &mut Batch::default())
    }

    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        self.process_input(0, input, out)
    }

    fn process_input(
        &mut self,
        which: u8,
        input: &Batch,
        out: &mut Batch,
    ) -> Result<(), OperatorError> {
        self.process_described(which, input, out, describe_batch)
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Batch) -> Result<bool, OperatorError> {
        self.store.data_mut().set_watermark(watermark);
        let fired = self.fire_timers(TimeDomain::EventTime, watermark, out)?;
        Ok(matches!(fired, Fired::Batch))
    }

    fn restore_watermark(&mut self, watermark: i64) {
        self.store.data_mut().set_watermark(watermark);
    }

    fn on_processing_time(&mut self, now: i64, out: &mut Batch) -> Result<bool, OperatorError> {
        let fired = self.fire_timers(TimeDomain::ProcessingTime, now, out)?;
        Ok(matches!(fired, Fired::Batch))
    }

    fn next_processing_time(&mut self) -> Option<i64> {
        self.store
            .data_mut()
            .keyed_state()
            .next_timer(TimeDomain::ProcessingTime)
    }

    fn close(&mut self, out: &mut Batch) -> Result<bool, OperatorError> {
        self.store.data_mut().set_end_of_time();
        match self.fire_timers(TimeDomain::EventTime, i64::MAX, out)? {
            Fired::Batch => return Ok(true),
            Fired::Done { left: false } => {}
            Fired::Done { left: true } => {
                let data = self.store.data_mut();
                let left = data.keyed_state().timer_count(TimeDomain::EventTime);
                let ctx = data.context();
                tracing::warn!(
                    job = ctx.job,
                    operator = ctx.uid,
                    subtask = ctx.subtask,
                    "up to {} event-time timer(s) registered by timer callbacks at the end of \
                     input did not fire: at the end of input, timers fire as often as twice the \
                     number pending when it ended, not again and again",
                    left
                );
            }
        }
        self.begin(Hook::Close);
        let result = self
            .bindings
            .weir_stream_operator()
            .call_close(&mut self.store);
        self.closed = true;
        self.end(result, None, out).map(|()| false)
    }

    fn snapshot(&mut self, n: u64, snapshot: &mut Snapshot) -> Result<(), OperatorError> {
        self.write_back()?;
        self.store.data_mut().snapshot(n, snapshot)
    }

    fn notify_complete(&mut self, n: u64) {
        self.store.data_mut().notify_complete(n);
    }

    fn restore(&mut self, snapshot: &[u8], shared: &Path) -> Result<(), OperatorError> {
        self.store.data_mut().restore(snapshot, shared)
    }

    fn snapshot_operator_state(&mut self) -> Option<Vec<u8>> {
        self.store.data().snapshot_operator_state()
    }

    fn restore_operator_state(&mut self, snapshot: &[u8]) -> Result<(), OperatorError> {
        self.store.data_mut().restore_operator_state(snapshot)
    }

    fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        self.store.data_mut().take_side_outputs()
    }

    fn guest_usage(&self) -> Option<InstanceUsage> {
        Some(InstanceUsage {
            calls: self.calls,
            memory_bytes: self.store.data().memory_bytes(),
            start_bytes: self.start_bytes,
        })
    }

    fn undeclared_states(&self) -> Vec<String> {
        self.store.data().undeclared_states()
    }

    fn with_code(
        self: Box<Self>,
        component: &OperatorComponent,
        ctx: OperatorContext,
        clock: crate::clock::Clock,
    ) -> Result<Box<dyn Operator>, OperatorError> {
        Ok(Box::new(self.carry_on(component, ctx, clock)?))
    }
}

/// What a batch was, for the error of a failed `process` call the guest did not explain.
pub(crate) type Describe = fn(&Batch) -> String;

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
