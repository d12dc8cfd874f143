//! One operator instance: decodes what the host sends, runs the operator's hooks and sends
//! back state changes, timer changes and output, once per batch.
//!
//! The component export (`wit.rs`) and the test harness (`testing.rs`) both drive an
//! [`Instance`]; only the [`Backend`] differs.

use std::cell::{Cell, RefCell};
use std::mem;

use weir_wire::{
    BatchReader, FORGET, FiredTimer, OutputWriter, TimeDomain, TimerOp, WRITE_BACK, put_timer_op,
    read_fired_timers,
};

use crate::backend::Backend;
use crate::fxhash::FxSet;
use crate::state::{Changes, KeyIds, StateEntry};
use crate::{Codec, Context, Error, OpenContext, Operator, Record, Redistribution, Result, Timer};

/// How many of a key's latest timer changes in a batch a new change of it looks through for one
/// of the same timer (see `Core::timer_ops`).
const TIMER_LOOKBACK: usize = 8;
/// A key slot without a timer change in the batch.
const NO_TIMER_OP: u32 = u32::MAX;

/// Output is sent to the host whenever this many bytes are buffered, and at the end of a batch.
pub(crate) const OUTPUT_FLUSH_BYTES: usize = 64 * 1024;

/// What the hooks reach through their context: the backend and this batch's buffers.
pub(crate) struct Core {
    pub(crate) backend: Box<dyn Backend>,
    /// The operator's state codec ([`Operator::STATE_CODEC`]).
    pub(crate) codec: Codec,
    pub(crate) states: Vec<StateEntry>,
    /// The index after the state looked up last (see `Context::state_id`).
    pub(crate) next_state: Cell<usize>,
    /// Operator states declared so far: name, mode, handle.
    pub(crate) operator_states: Vec<(String, Redistribution, usize)>,
    /// Incremented per batch; state caches of an older epoch are stale.
    pub(crate) epoch: u64,
    pub(crate) output: OutputWriter,
    /// This batch's timer changes, each with the index of the previous change of its key
    /// slot ([`NO_TIMER_OP`]: none). A change of a timer that one of its key's last
    /// [`TIMER_LOOKBACK`] changes names replaces that change: a timer's fate depends on the
    /// last one only, so "delete my previous timer, register a new one" per record sends the
    /// host one change per timer, not two per record, and registering one time per record
    /// (the end of a window) sends one. Changes further back are sent as they come; the host
    /// applies them in order, to the same end.
    timer_ops: Vec<(TimerOp, u32)>,
    /// Per key slot, the index of its last change in `timer_ops`; `begin` clears both.
    timer_last: Vec<u32>,
    timer_changes: Vec<u8>,
    /// While timers fire: the timers (key slot, domain, time) a callback deleted, which then
    /// do not fire if they were due in the same call, as in Flink (registering one again
    /// undoes its delete). `None` outside a firing.
    deleted_in_firing: Option<FxSet<(u32, TimeDomain, i64)>>,
    store_buf: Vec<u8>,
    /// The budget of each value state's write-back cache ([`Operator::STATE_CACHE_BYTES`]).
    held_bytes: usize,
    /// Whether the host advises a write-back cache, once asked.
    advised: Option<bool>,
    /// The host's ids of the batch's keys, for the write-back caches.
    pub(crate) key_ids: KeyIds,
}

impl Core {
    pub(crate) fn new(backend: Box<dyn Backend>, codec: Codec, held_bytes: usize) -> Self {
        Core {
            backend,
            codec,
            states: Vec::new(),
            next_state: Cell::new(0),
            operator_states: Vec::new(),
            epoch: 0,
            output: OutputWriter::default(),
            timer_ops: Vec::new(),
            timer_last: Vec::new(),
            timer_changes: Vec::new(),
            deleted_in_firing: None,
            store_buf: Vec::new(),
            held_bytes,
            advised: None,
            key_ids: KeyIds::default(),
        }
    }

    fn begin(&mut self) {
        self.epoch += 1;
        self.output.clear();
        self.timer_ops.clear();
        self.timer_last.clear();
        self.deleted_in_firing = None;
    }

    /// Whether a callback of the timers firing now deleted timer `t`.
    fn deleted_while_firing(&self, t: &FiredTimer<'_>) -> bool {
        (self.deleted_in_firing.as_ref())
            .is_some_and(|d| !d.is_empty() && d.contains(&(t.slot, t.domain, t.timestamp)))
    }

    /// Records timer change `op` of a batch with `n_keys` key slots.
    pub(crate) fn timer(&mut self, op: TimerOp, n_keys: usize) {
        if let Some(deleted) = &mut self.deleted_in_firing {
            let timer = (op.slot, op.domain, op.timestamp);
            match op.register {
                true => drop(deleted.remove(&timer)),
                false => drop(deleted.insert(timer)),
            }
        }
        let slot = op.slot as usize;
        // Sized once per batch (slots are below `n_keys`, from the batch's key table).
        let slots = n_keys.max(slot + 1);
        if self.timer_last.len() < slots {
            self.timer_last.resize(slots, NO_TIMER_OP);
        }
        // A short walk back rather than a hash map of every change: this is on the path of
        // every record of an operator with a timer per record (measured on the account
        // scorer, `cargo xtask bench-operators --callgrind`: 356 instructions per record with
        // the map).
        let mut at = self.timer_last[slot];
        for _ in 0..TIMER_LOOKBACK {
            let Some((earlier, previous)) = self.timer_ops.get_mut(at as usize) else {
                break;
            };
            if earlier.domain == op.domain && earlier.timestamp == op.timestamp {
                *earlier = op;
                return;
            }
            at = *previous;
        }
        self.timer_ops.push((op, self.timer_last[slot]));
        self.timer_last[slot] = (self.timer_ops.len() - 1) as u32;
    }

    #[inline(always)]
    pub(crate) fn flush_output_if_full(&mut self) {
        if self.output.len() > OUTPUT_FLUSH_BYTES {
            self.backend.emit(self.output.as_bytes());
            self.output.clear();
        }
    }

    /// Sends this batch's state changes (one `store` per changed state, unless its write-back
    /// cache keeps them), timer changes (one `update`) and the rest of the output.
    fn finish(&mut self, keys: &[&[u8]]) -> Result<()> {
        let Core {
            backend,
            states,
            epoch,
            output,
            timer_ops,
            timer_changes,
            store_buf,
            key_ids,
            ..
        } = self;
        for state in states.iter_mut() {
            let ids = match state.keeps_changes(*epoch) {
                true => key_ids
                    .of_batch(*epoch, &mut **backend, keys)
                    .map_err(Error::msg)?,
                false => &[],
            };
            match state.finish(*epoch, ids, store_buf) {
                Changes::None => {}
                Changes::BySlot => backend.store(state.handle(), keys, store_buf),
                Changes::ById => backend.store_ids(state.handle(), store_buf),
            }
        }
        if !timer_ops.is_empty() {
            timer_changes.clear();
            for (op, _) in timer_ops.drain(..) {
                put_timer_op(timer_changes, op);
            }
            backend.update_timers(keys, timer_changes);
        }
        if !output.is_empty() {
            backend.emit(output.as_bytes());
            output.clear();
        }
        Ok(())
    }

    /// The budget of a value state's write-back cache: [`Operator::STATE_CACHE_BYTES`], or
    /// 0 when the host does not advise one (its state is in memory).
    pub(crate) fn held_bytes(&mut self) -> usize {
        if self.held_bytes == 0 {
            return 0;
        }
        let backend = &mut self.backend;
        match *self
            .advised
            .get_or_insert_with(|| backend.write_back_advised())
        {
            true => self.held_bytes,
            false => 0,
        }
    }

    /// Writes back what the states' write-back caches hold (one `store-ids` per state with
    /// changes), and forgets it if `forget`: the write-back and the forget batch.
    fn write_back(&mut self, forget: bool) {
        let Core {
            backend,
            states,
            store_buf,
            ..
        } = self;
        for state in states.iter_mut() {
            if state.write_back(forget, store_buf) {
                backend.store_ids(state.handle(), store_buf);
            }
        }
    }
}

/// The core, borrowed for one host call or state access; an error (not a panic) when a hook
/// re-enters it from a `Display` or serde implementation the core itself is running.
#[inline(always)]
pub(crate) fn borrow_core(core: &RefCell<Core>) -> Result<std::cell::RefMut<'_, Core>> {
    core.try_borrow_mut().map_err(|_| {
        Error::msg(
            "weir-sdk: the context was used from inside a Display or serde implementation \
             that the context itself was running; compute the value first",
        )
    })
}

/// What `open` tells an instance (the WIT `open-context`).
#[derive(Clone, Debug)]
pub(crate) struct OpenInfo {
    pub(crate) operator_uid: String,
    pub(crate) subtask_index: u32,
    pub(crate) parallelism: u32,
    pub(crate) config: String,
}

thread_local! {
    /// The index in its batch of the record `process` is handling, for the panic message.
    pub(crate) static CURRENT_RECORD: std::cell::Cell<Option<u32>> =
        const { std::cell::Cell::new(None) };
}

/// An operator with its runtime state.
pub(crate) struct Instance<T> {
    operator: T,
    core: RefCell<Core>,
    info: OpenInfo,
    // Allocations kept between calls; always empty here.
    key_table: Vec<&'static [u8]>,
    key_copy: Vec<&'static [u8]>,
    fired: Vec<FiredTimer<'static>>,
}

/// Reuses the allocation of a `Vec` of references for references of another lifetime: the
/// vector is emptied, and std collects `into_iter().map(..)` in place.
fn recycle<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter()
        .map(|_| -> &'b [u8] { unreachable!("the vector is empty") })
        .collect()
}

fn recycle_timers<'b>(mut v: Vec<FiredTimer<'_>>) -> Vec<FiredTimer<'b>> {
    v.clear();
    v.into_iter()
        .map(|_| -> FiredTimer<'b> { unreachable!("the vector is empty") })
        .collect()
}

fn malformed(e: weir_wire::DecodeError) -> Error {
    Error::new(e).context("weir-sdk: the host sent a malformed buffer")
}

/// A key for an error message: text if it is UTF-8, shortened.
pub(crate) fn describe_key(key: Option<&[u8]>) -> String {
    match key {
        None => "without key".to_owned(),
        Some(k) => format!("key {}", describe_text(k)),
    }
}

/// Bytes as quoted, escaped text, cut at 64 characters.
pub(crate) fn describe_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let short: String = text.chars().take(64).collect();
    let more = if short.len() < text.len() { "…" } else { "" };
    format!("\"{}{more}\"", short.escape_debug())
}

impl<T: Operator> Instance<T> {
    pub(crate) fn new(operator: T, backend: Box<dyn Backend>, info: OpenInfo) -> Self {
        Instance {
            operator,
            core: RefCell::new(Core::new(backend, T::STATE_CODEC, T::STATE_CACHE_BYTES)),
            info,
            key_table: Vec::new(),
            key_copy: Vec::new(),
            fired: Vec::new(),
        }
    }

    pub(crate) fn open(&mut self) -> Result<()> {
        let mut ctx = OpenContext::new(&self.info, &self.core);
        self.operator.open(&mut ctx)
    }

    /// Handles one batch buffer (`operator.process`), or the write-back batch.
    pub(crate) fn process(&mut self, batch: &[u8]) -> Result<()> {
        if batch == WRITE_BACK || batch == FORGET {
            borrow_core(&self.core)?.write_back(batch == FORGET);
            return Ok(());
        }
        let mut reader =
            BatchReader::new(batch, recycle(mem::take(&mut self.key_table))).map_err(malformed)?;
        let mut keys = recycle(mem::take(&mut self.key_copy));
        keys.extend_from_slice(reader.keys());
        self.core.borrow_mut().begin();
        let result = run_batch(&mut self.operator, &self.core, &keys, batch, &mut reader)
            .and_then(|()| self.core.borrow_mut().finish(&keys));
        CURRENT_RECORD.set(None);
        self.key_table = recycle(reader.into_keys());
        self.key_copy = recycle(keys);
        result
    }

    /// Handles a fired-timers buffer (`operator.on-timers`).
    pub(crate) fn on_timers(&mut self, timers: &[u8]) -> Result<()> {
        let mut keys = recycle(mem::take(&mut self.key_copy));
        let mut fired = recycle_timers(mem::take(&mut self.fired));
        let result = read_fired_timers(timers, &mut keys, &mut fired)
            .map_err(malformed)
            .and_then(|()| {
                let mut core = self.core.borrow_mut();
                core.begin();
                core.deleted_in_firing = Some(FxSet::default());
                drop(core);
                run_timers(&mut self.operator, &self.core, &keys, timers, &fired)?;
                self.core.borrow_mut().finish(&keys)
            });
        self.key_copy = recycle(keys);
        self.fired = recycle_timers(fired);
        result
    }

    /// `operator.close`: the hook may emit, but there is no current key. What the state
    /// caches hold is written back: the instance ends here.
    pub(crate) fn close(&mut self) -> Result<()> {
        self.core.borrow_mut().begin();
        let mut ctx = Context::new(&self.core, &[]);
        self.operator.close(&mut ctx)?;
        let mut core = self.core.borrow_mut();
        core.finish(&[])?;
        core.write_back(false);
        Ok(())
    }
}

fn run_batch<T: Operator>(
    operator: &mut T,
    core: &RefCell<Core>,
    keys: &[&[u8]],
    batch: &[u8],
    reader: &mut BatchReader<'_>,
) -> Result<()> {
    let mut ctx = Context::new(core, keys);
    ctx.input = batch;
    let mut index = 0;
    while let Some(next) = reader.next() {
        let rec = next.map_err(malformed)?;
        ctx.slot = rec.slot;
        ctx.timestamp = rec.record.timestamp;
        CURRENT_RECORD.set(Some(index));
        if let Err(e) = operator.process(&mut ctx, Record::from_ref(rec.record, rec.input)) {
            return Err(e.context(T::describe_input(
                index,
                rec.record.key,
                rec.record.value,
                false,
            )));
        }
        index += 1;
    }
    CURRENT_RECORD.set(None);
    ctx.slot = None;
    ctx.timestamp = None;
    operator
        .finish_batch(&mut ctx)
        .map_err(|e| e.context("finish_batch"))
}

fn run_timers<T: Operator>(
    operator: &mut T,
    core: &RefCell<Core>,
    keys: &[&[u8]],
    timers: &[u8],
    fired: &[FiredTimer<'_>],
) -> Result<()> {
    let mut ctx = Context::new(core, keys);
    ctx.input = timers;
    for t in fired {
        if core.borrow().deleted_while_firing(t) {
            continue;
        }
        ctx.slot = Some(t.slot);
        // As in Flink: output of an event-time timer carries the timer's time, output of a
        // processing-time timer none.
        ctx.timestamp = match t.domain {
            TimeDomain::EventTime => Some(t.timestamp),
            TimeDomain::ProcessingTime => None,
        };
        let timer = Timer::new(t.domain, t.key, t.timestamp);
        if let Err(e) = operator.on_timer(&mut ctx, timer) {
            let domain = match t.domain {
                TimeDomain::EventTime => "event-time",
                TimeDomain::ProcessingTime => "processing-time",
            };
            return Err(e.context(format!(
                "{domain} timer at {} ({})",
                t.timestamp,
                describe_key(Some(t.key))
            )));
        }
    }
    Ok(())
}
