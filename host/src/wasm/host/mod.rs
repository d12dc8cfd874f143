//! The host side of the WIT imports, one file per interface (`state`, `timers`, `output`,
//! `log`), over the data of one operator instance's store ([`HostState`]).
//!
//! A guest call goes [`HostState::begin`] (with its [`Hook`]), [`HostState::add_key`] for each
//! distinct key of the batch, the call, [`HostState::end`]. A guest addresses keys only by
//! *slot* of the current call; the host refuses state access outside a call or for keys
//! outside the subtask's key groups. Every failure traps the guest call with a message naming
//! the state or buffer, which the runtime reports with the operator's uid.

mod log;
mod output;
mod state;
mod timers;

use std::path::Path;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::capabilities::{Grants, GuestLog};
use super::interrupt::CallClock;
use super::limits::{Limit, LimitExceeded, Limiter, Limits, bytes};
use super::{describe_bytes, is_bidi_control};
use crate::batch::Batch;
use crate::clock::Clock;
use crate::operator::OperatorContext;
use crate::operator::{OperatorError, Snapshot};
use crate::state::{
    FastMap, KeyedState, OperatorList, OperatorStates, Redistribution, Slots, StateError, StateId,
    StateSetup,
};
use crate::state::{restore_operator_states, snapshot_operator_states};

/// The most keys given an id ([`HostState::key_ids_full`]): a word count's subtask meets
/// some 50,000 distinct words of 100,000.
const MAX_KEY_IDS: usize = 1 << 17;
/// The most bytes of keys given an id.
const MAX_KEY_ID_BYTES: usize = 16 << 20;

/// The longest name of a state or side output, in bytes.
const MAX_NAME: usize = 1024;
/// The characters of a guest's error message that go into weir's own messages.
pub(crate) const MAX_GUEST_ERROR: usize = 2048;

/// A guest export the host calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    Open,
    Process,
    OnTimers,
    Close,
    /// `process` with the write-back batch.
    WriteBack,
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hook::Open => "open",
            Hook::Process => "process",
            Hook::OnTimers => "on-timers",
            Hook::Close => "close",
            Hook::WriteBack => "process (the write-back of its state)",
        })
    }
}

/// The data of one operator instance's wasmtime store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    ctx: OperatorContext,
    state: KeyedState,
    /// Declared states by resource rep.
    declared: Vec<Declared>,
    /// The distinct keys of the current call.
    slots: Slots,
    /// Reused: the keys of a `load-slots` or `store-ids` call.
    picked: Slots,
    /// The keys given an id (`key-ids`) so far, by id.
    key_ids: Slots,
    /// Whether the guest keeps values from call to call (it has called `key-ids`): it is
    /// sent the write-back batch before every snapshot.
    writes_back: bool,
    /// Whether a call that may use state, timers and output is in progress (not `open`).
    in_call: bool,
    /// Where emitted records go during a call.
    out: Batch,
    /// Every side output the instance emitted to, in order of first use, with the records
    /// emitted to it during the current call.
    side_outputs: Vec<(String, Batch)>,
    /// Index into `side_outputs` by name.
    side_index: FastMap<Box<[u8]>, usize>,
    watermark: Option<i64>,
    /// The last error the guest logged (its panic hook logs the panic message there).
    last_error: Option<String>,
    /// Non-keyed operator state by name.
    operator_state: OperatorStates,
    /// Operator-state names by resource rep.
    operator_names: Vec<String>,
    /// Resource rep and declared mode by operator-state name.
    operator_reps: FastMap<String, (u32, Redistribution)>,
    /// The bytes of every operator-state element.
    operator_bytes: usize,
    limiter: Limiter,
    /// The guest's stdout, stderr and log messages, rate-limited.
    log: GuestLog,
    /// The hook being called, for error messages.
    hook: Hook,
    /// Records and bytes emitted by the current call, against the output limits.
    emitted_records: u64,
    emitted_bytes: u64,
    /// The current call's deadline and the job's cancellation.
    call: Arc<CallClock>,
    /// Processing time.
    clock: Clock,
}

/// A keyed state the instance's code declared.
struct Declared {
    id: StateId,
    /// The length of its last `load` answer: the next answer starts at about 5/4 of it
    /// rather than growing by doubling, a copy of the answer so far each time.
    last_load: usize,
}

/// What an instance holds for its operator that outlives its code: keyed state, timers,
/// operator state and the watermark. An upgrade hands it from the old instance to the new one.
pub(crate) struct Held {
    state: KeyedState,
    operator_state: OperatorStates,
    operator_bytes: usize,
    watermark: Option<i64>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl HostState {
    /// The store data of an instance with `limits` that may reach what `grants` grants
    /// (see [`super::capabilities`]).
    pub(crate) fn new(
        ctx: OperatorContext,
        state: &StateSetup,
        limits: Limits,
        grants: &Grants,
    ) -> Result<Self, String> {
        let clock = state.clock.clone();
        let state = KeyedState::open(
            state,
            &ctx.uid,
            ctx.subtask,
            ctx.max_parallelism,
            ctx.key_groups.clone(),
        )
        .map_err(|e| e.to_string())?;
        let held = Held {
            state,
            operator_state: OperatorStates::new(),
            operator_bytes: 0,
            watermark: None,
        };
        Self::with_held(ctx, held, clock, limits, grants)
    }

    /// The store data of an instance of new code for the operator whose old instance held
    /// `held`, with `ctx` (its config may be new), `limits` and `grants`.
    pub(crate) fn with_held(
        ctx: OperatorContext,
        held: Held,
        clock: Clock,
        limits: Limits,
        grants: &Grants,
    ) -> Result<Self, String> {
        let log = GuestLog::new(&ctx);
        let call = CallClock::new(Arc::clone(&ctx.cancelled));
        let mut state = held.state;
        // The new code declares what it uses; the rest stays, for a later version.
        state.forget_declarations();
        Ok(HostState {
            wasi: grants.wasi_ctx(&log, &call)?,
            table: ResourceTable::new(),
            ctx,
            state,
            declared: Vec::new(),
            slots: Slots::default(),
            picked: Slots::default(),
            key_ids: Slots::default(),
            writes_back: false,
            in_call: false,
            out: Batch::default(),
            side_outputs: Vec::new(),
            side_index: FastMap::default(),
            watermark: held.watermark,
            last_error: None,
            operator_state: held.operator_state,
            operator_names: Vec::new(),
            operator_reps: FastMap::default(),
            operator_bytes: held.operator_bytes,
            limiter: Limiter {
                limits,
                memory_bytes: 0,
            },
            log,
            hook: Hook::Open,
            emitted_records: 0,
            emitted_bytes: 0,
            call,
            clock,
        })
    }

    /// The keyed states held that the instance's code has not declared.
    pub(crate) fn undeclared_states(&self) -> Vec<String> {
        self.state.undeclared().map(String::from).collect()
    }

    /// What outlives the instance's code (see [`Held`]).
    pub(crate) fn into_held(self) -> Held {
        Held {
            state: self.state,
            operator_state: self.operator_state,
            operator_bytes: self.operator_bytes,
            watermark: self.watermark,
        }
    }

    /// The instance's call clock (see [`super::interrupt`]).
    pub(crate) fn call_clock(&self) -> &Arc<CallClock> {
        &self.call
    }

    /// The instance's WASI resources.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// The resource limiter of the store.
    pub(crate) fn limiter(&mut self) -> &mut Limiter {
        &mut self.limiter
    }

    /// Bytes of linear memory the instance holds.
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.limiter.memory_bytes
    }

    pub(crate) fn context(&self) -> &OperatorContext {
        &self.ctx
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limiter.limits
    }

    /// The hook being (or last) called.
    pub(crate) fn hook(&self) -> Hook {
        self.hook
    }

    /// Whether the guest keeps state changes from call to call, which it writes back when
    /// sent the write-back batch.
    pub(crate) fn writes_back(&self) -> bool {
        self.writes_back
    }

    /// Whether the key ids given out hold more than [`MAX_KEY_IDS`] or [`MAX_KEY_ID_BYTES`]:
    /// the guest is then sent the forget batch and the ids start over.
    pub(crate) fn key_ids_full(&self) -> bool {
        self.key_ids.len() > MAX_KEY_IDS || self.key_ids.key_bytes() > MAX_KEY_ID_BYTES
    }

    /// Starts the key ids over (after the forget batch).
    pub(crate) fn forget_key_ids(&mut self) {
        self.key_ids.clear();
    }

    /// Starts a call of `hook`: its deadline armed (when `deadline`), no keys, no output.
    pub(crate) fn begin(&mut self, hook: Hook, deadline: bool) {
        if deadline {
            self.call.arm(Some(self.limits().call_deadline));
        }
        self.hook = hook;
        self.in_call = hook != Hook::Open;
        self.slots.clear();
        self.emitted_records = 0;
        self.emitted_bytes = 0;
        self.last_error = None;
    }

    /// The slot of `key` in the call being prepared, and whether it is new (the next slot).
    pub(crate) fn key_slot(&mut self, key: &[u8]) -> (u32, bool) {
        let state = &self.state;
        self.slots.slot_of(key, || state.key_group(key))
    }

    /// Notes event time `ts` of a record (or timer) of `slot`'s key, for event-time TTL.
    pub(crate) fn note_time(&mut self, slot: u32, ts: i64) {
        self.slots.note_time(slot, ts);
    }

    /// Ends the call: hands what it emitted to `out` and returns what the guest logged as an
    /// error during it (weir-sdk's panic message), if anything.
    pub(crate) fn end(&mut self, out: &mut Batch) -> Option<String> {
        self.in_call = false;
        if out.is_empty() {
            std::mem::swap(out, &mut self.out);
        } else {
            out.append(&self.out);
        }
        self.out.clear();
        self.last_error.take()
    }

    /// The operator's keyed state, which holds its timers.
    pub(crate) fn keyed_state(&mut self) -> &mut KeyedState {
        &mut self.state
    }

    /// Sets the watermark the guest sees and event-time TTLs expire against.
    pub(crate) fn set_watermark(&mut self, watermark: i64) {
        self.watermark = Some(watermark);
        self.state.set_watermark(watermark);
    }

    /// The input ended: the guest sees the watermark at the end of time, while event-time
    /// TTLs stay where the last watermark left them, so that what the last timers read does
    /// not expire under them.
    pub(crate) fn set_end_of_time(&mut self) {
        self.watermark = Some(i64::MAX);
    }

    /// Fills `snapshot` with keyed state and timers for checkpoint `n`.
    pub(crate) fn snapshot(
        &mut self,
        n: u64,
        snapshot: &mut Snapshot,
    ) -> Result<(), OperatorError> {
        if self.state.is_empty() {
            return Ok(());
        }
        snapshot.shared = self
            .state
            .checkpoint(n, snapshot.format, &mut snapshot.bytes)
            .map_err(|e| OperatorError::Failed(format!("snapshot of its state failed: {e}")))?;
        Ok(())
    }

    /// Checkpoint `n` completed.
    pub(crate) fn notify_complete(&mut self, n: u64) {
        self.state.notify_complete(n);
    }

    /// Restores a keyed-state file of a checkpoint (the files it refers to are in `shared`).
    pub(crate) fn restore(&mut self, file: &[u8], shared: &Path) -> Result<(), OperatorError> {
        self.state
            .restore_file(file, shared)
            .map_err(|e| OperatorError::Contract(e.to_string()))
    }

    /// The operator state, snapshotted (`None`: there is none).
    pub(crate) fn snapshot_operator_state(&self) -> Option<Vec<u8>> {
        (!self.operator_state.is_empty()).then(|| snapshot_operator_states(&self.operator_state))
    }

    pub(crate) fn restore_operator_state(&mut self, snapshot: &[u8]) -> Result<(), OperatorError> {
        self.operator_state = restore_operator_states(snapshot)
            .map_err(|e| OperatorError::Contract(e.to_string()))?;
        self.operator_bytes = self.operator_state.values().map(OperatorList::bytes).sum();
        Ok(())
    }

    /// Refuses a state value (or list element, or map entry) of `len` bytes over the
    /// `state_value` limit; `target` names the state (and key) it was for.
    fn check_value_size(
        &self,
        len: usize,
        target: impl FnOnce() -> String,
    ) -> wasmtime::Result<()> {
        let limit = self.limits().state_value.as_u64();
        if len as u64 <= limit {
            return Ok(());
        }
        Err(LimitExceeded::error(
            Limit::StateValue,
            format!(
                "{} tried to write {} into {}, over the limit of {}",
                self.hook,
                bytes(len as u64),
                target(),
                bytes(limit)
            ),
        ))
    }

    /// Refuses to hold more for the instance than `host_memory`: keyed state of the memory
    /// backend, timers and operator state. `after` says what the guest just did.
    fn check_host_memory(&self, after: impl FnOnce() -> String) -> wasmtime::Result<()> {
        let (state, timers) = (self.state.memory_bytes(), self.state.timers_in_memory().1);
        let held = (state + timers + self.operator_bytes) as u64;
        let limit = self.limits().host_memory.as_u64();
        if held <= limit {
            return Ok(());
        }
        Err(LimitExceeded::error(
            Limit::HostMemory,
            format!(
                "after {} the host held {} for the operator, over the limit of {} (keyed state in \
                 memory {}, timers {}, operator state {}); keep less state, or use [state] \
                 backend = \"rocksdb\" for keyed state larger than memory",
                after(),
                bytes(held),
                bytes(limit),
                bytes(state as u64),
                bytes(timers as u64),
                bytes(self.operator_bytes as u64)
            ),
        ))
    }

    /// Refuses another declaration (or handle) of a state beyond the `states` limit, and a
    /// name that is too long or not printable.
    fn check_declaration(&self, what: &str, name: &str) -> wasmtime::Result<()> {
        check_name(what, name.as_bytes())?;
        let limit = self.limits().states;
        if (self.declared.len() + self.operator_names.len()) as u64 >= limit {
            return Err(LimitExceeded::error(
                Limit::States,
                format!(
                    "{} declared more than {limit} states ({what} {})",
                    self.hook,
                    quoted(name)
                ),
            ));
        }
        Ok(())
    }

    /// Keyed state `id` of the key in `slot`, for a message.
    fn keyed_target(&self, id: StateId, slot: u32) -> String {
        let key = match (slot as usize) < self.slots.len() {
            true => describe_bytes(self.slots.key(slot as usize)),
            false => String::new(),
        };
        format!("state \"{}\" for key {key}", self.state.name(id))
    }

    /// A state error as the guest's trap; a value over the limit as a limit error.
    fn state_error(&self, id: StateId, e: StateError) -> wasmtime::Error {
        match e {
            StateError::TooLarge { slot, len, .. } => {
                let limit = self.limits().state_value.as_u64();
                LimitExceeded::error(
                    Limit::StateValue,
                    format!(
                        "{} tried to write {} into {}, over the limit of {}",
                        self.hook,
                        bytes(len as u64),
                        self.keyed_target(id, slot),
                        bytes(limit)
                    ),
                )
            }
            e => wasmtime::format_err!("{e}"),
        }
    }
}

/// Refuses a name of a state or side output that is too long or holds anything but printable
/// UTF-8 text, which weir's messages could not show as it is.
fn check_name(what: &str, name: &[u8]) -> wasmtime::Result<()> {
    let printable = std::str::from_utf8(name)
        .is_ok_and(|name| !name.chars().any(|c| c.is_control() || is_bidi_control(c)));
    if name.len() > MAX_NAME || !printable {
        return Err(wasmtime::format_err!(
            "the name of a {what} must be printable UTF-8 text of at most {MAX_NAME} bytes, \
             not {}",
            describe_bytes(name)
        ));
    }
    Ok(())
}

/// `name` in quotes, escaped and shortened for a message.
fn quoted(name: &str) -> String {
    describe_bytes(name.as_bytes())
}
