//! The host side of the WIT imports: keyed state, timers, output and log.
//!
//! A guest addresses keys only by *slot* of the batch (or timer batch) being handled; the
//! host keeps the slot table of the current call and refuses state access outside a call or
//! for keys outside the subtask's key groups. Every failure traps the guest call with a
//! message naming the state or buffer, which the runtime reports with the operator's uid.

use std::sync::Arc;

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use weir_wire::{OutputReader, read_timer_ops};

use super::capabilities::{Grants, GuestLog, Level};
use super::interrupt::CallClock;
use super::limits::{Limit, LimitExceeded, Limiter, Limits, bytes};
use super::weir::stream::{log, output, state, timers, types};
use super::{describe_bytes, guest_text, is_bidi_control};
use crate::batch::Batch;
use crate::clock::Clock;
use crate::operator::OperatorContext;
use crate::state::{
    FastMap, KeyedState, OperatorStates, Slots, StateError, StateId, StateKind, StateSetup, Timers,
    Ttl, TtlUpdate, TtlVisibility,
};

/// The longest name of a state or side output, in bytes.
const MAX_NAME: usize = 1024;
/// The characters of a guest's error message that go into weir's own messages.
pub(crate) const MAX_GUEST_ERROR: usize = 2048;

/// The data of one operator instance's wasmtime store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) ctx: OperatorContext,
    pub(crate) state: KeyedState,
    /// Declared states by resource rep.
    declared: Vec<StateId>,
    /// The distinct keys of the current call.
    pub(crate) slots: Slots,
    pub(crate) in_call: bool,
    /// Where emitted records go during a call.
    pub(crate) out: Batch,
    /// Every side output the instance emitted to, in order of first use, with the records
    /// emitted to it during the current call.
    side_outputs: Vec<(String, Batch)>,
    /// Index into `side_outputs` by name.
    side_index: FastMap<Box<[u8]>, usize>,
    pub(crate) timers: Timers,
    pub(crate) watermark: Option<i64>,
    /// The last error the guest logged (its panic hook logs the panic message there).
    pub(crate) last_error: Option<String>,
    /// Non-keyed operator state by name.
    pub(crate) operator_state: OperatorStates,
    /// Operator-state names by resource rep.
    operator_names: Vec<String>,
    /// Resource rep by operator-state name.
    operator_reps: FastMap<String, u32>,
    /// The bytes of every operator-state value.
    operator_bytes: usize,
    pub(crate) limiter: Limiter,
    /// The guest's stdout, stderr and log messages, rate-limited.
    log: GuestLog,
    /// The hook being called (`process`, `on-timers`, ...), for error messages.
    pub(crate) hook: &'static str,
    /// Records and bytes emitted by the current call, against the output limits.
    emitted_records: u64,
    emitted_bytes: u64,
    /// The current call's deadline and the job's cancellation.
    call: Arc<CallClock>,
    /// Processing time.
    clock: Clock,
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
        let log = GuestLog::new(&ctx);
        let call = CallClock::new(Arc::clone(&ctx.cancelled));
        Ok(HostState {
            wasi: grants.wasi_ctx(&log, &call)?,
            table: ResourceTable::new(),
            ctx,
            state,
            declared: Vec::new(),
            slots: Slots::default(),
            in_call: false,
            out: Batch::default(),
            side_outputs: Vec::new(),
            side_index: FastMap::default(),
            timers: Timers::default(),
            watermark: None,
            last_error: None,
            operator_state: OperatorStates::new(),
            operator_names: Vec::new(),
            operator_reps: FastMap::default(),
            operator_bytes: 0,
            limiter: Limiter { limits },
            log,
            hook: "open",
            emitted_records: 0,
            emitted_bytes: 0,
            call,
            clock,
        })
    }

    /// The instance's call clock (see [`super::interrupt`]).
    pub(crate) fn call_clock(&self) -> &Arc<CallClock> {
        &self.call
    }

    /// The instance's WASI resources.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// Starts a call of `hook`: its output counts from zero.
    pub(crate) fn begin_call(&mut self, hook: &'static str) {
        self.hook = hook;
        self.emitted_records = 0;
        self.emitted_bytes = 0;
    }

    fn limits(&self) -> &Limits {
        &self.limiter.limits
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
        let (state, timers) = (self.state.memory_bytes(), self.timers.bytes());
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

    /// Adds the key of the next slot; returns its slot.
    pub(crate) fn push_slot(&mut self, key: &[u8]) -> u32 {
        let group = self.state.key_group(key);
        self.slots.push(key, group)
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

    fn declare(
        &mut self,
        name: String,
        kind: StateKind,
        ttl: Option<types::Ttl>,
    ) -> wasmtime::Result<u32> {
        self.check_declaration("state", &name)?;
        let ttl = ttl.map(|t| Ttl {
            ttl_ms: t.ttl_ms,
            update: match t.update {
                types::TtlUpdate::OnCreateAndWrite => TtlUpdate::OnCreateAndWrite,
                types::TtlUpdate::OnReadAndWrite => TtlUpdate::OnReadAndWrite,
                types::TtlUpdate::Disabled => TtlUpdate::Disabled,
            },
            visibility: match t.visibility {
                types::TtlVisibility::NeverReturnExpired => TtlVisibility::NeverReturnExpired,
                types::TtlVisibility::ReturnExpiredIfNotCleanedUp => {
                    TtlVisibility::ReturnExpiredIfNotCleanedUp
                }
            },
            event_time: matches!(t.time, types::TtlTime::EventTime),
        });
        let id = self
            .state
            .declare(&name, kind, ttl)
            .map_err(|e| wasmtime::format_err!("{e}"))?;
        self.declared.push(id);
        Ok((self.declared.len() - 1) as u32)
    }

    fn state_id(&self, rep: u32, kind: StateKind) -> wasmtime::Result<StateId> {
        let id = *self
            .declared
            .get(rep as usize)
            .ok_or_else(|| wasmtime::format_err!("unknown state handle {rep}"))?;
        if self.state.kind(id) != kind {
            return Err(wasmtime::format_err!(
                "state \"{}\" is {} state, not {kind} state",
                self.state.name(id),
                self.state.kind(id)
            ));
        }
        if !self.in_call {
            return Err(wasmtime::format_err!(
                "state \"{}\" was accessed outside of process or on-timers; keyed state needs a current key",
                self.state.name(id)
            ));
        }
        Ok(id)
    }

    fn load(&mut self, rep: u32, kind: StateKind) -> wasmtime::Result<Vec<u8>> {
        let id = self.state_id(rep, kind)?;
        let mut buf = Vec::new();
        self.state
            .load(id, &self.slots, &mut buf)
            .map_err(|e| self.state_error(id, e))?;
        Ok(buf)
    }

    fn store(&mut self, rep: u32, kind: StateKind, changes: &[u8]) -> wasmtime::Result<()> {
        let id = self.state_id(rep, kind)?;
        let limit = self.limits().state_value.as_u64();
        self.state
            .store(id, &self.slots, changes, limit)
            .map_err(|e| self.state_error(id, e))?;
        self.check_host_memory(|| format!("writing state {}", quoted(self.state.name(id))))
    }
}

impl types::Host for HostState {}

impl state::Host for HostState {}

impl state::HostValueState for HostState {
    fn new(
        &mut self,
        name: String,
        ttl: Option<types::Ttl>,
    ) -> wasmtime::Result<Resource<state::ValueState>> {
        Ok(Resource::new_own(self.declare(
            name,
            StateKind::Value,
            ttl,
        )?))
    }

    fn load(&mut self, s: Resource<state::ValueState>) -> wasmtime::Result<Vec<u8>> {
        HostState::load(self, s.rep(), StateKind::Value)
    }

    fn store(&mut self, s: Resource<state::ValueState>, changes: Vec<u8>) -> wasmtime::Result<()> {
        HostState::store(self, s.rep(), StateKind::Value, &changes)
    }

    fn drop(&mut self, _s: Resource<state::ValueState>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl state::HostListState for HostState {
    fn new(
        &mut self,
        name: String,
        ttl: Option<types::Ttl>,
    ) -> wasmtime::Result<Resource<state::ListState>> {
        Ok(Resource::new_own(self.declare(
            name,
            StateKind::List,
            ttl,
        )?))
    }

    fn load(&mut self, s: Resource<state::ListState>) -> wasmtime::Result<Vec<u8>> {
        HostState::load(self, s.rep(), StateKind::List)
    }

    fn store(&mut self, s: Resource<state::ListState>, changes: Vec<u8>) -> wasmtime::Result<()> {
        HostState::store(self, s.rep(), StateKind::List, &changes)
    }

    fn drop(&mut self, _s: Resource<state::ListState>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl state::HostMapState for HostState {
    fn new(
        &mut self,
        name: String,
        ttl: Option<types::Ttl>,
    ) -> wasmtime::Result<Resource<state::MapState>> {
        Ok(Resource::new_own(self.declare(
            name,
            StateKind::Map,
            ttl,
        )?))
    }

    fn load(&mut self, s: Resource<state::MapState>) -> wasmtime::Result<Vec<u8>> {
        HostState::load(self, s.rep(), StateKind::Map)
    }

    fn store(&mut self, s: Resource<state::MapState>, changes: Vec<u8>) -> wasmtime::Result<()> {
        HostState::store(self, s.rep(), StateKind::Map, &changes)
    }

    fn drop(&mut self, _s: Resource<state::MapState>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl state::HostOperatorState for HostState {
    fn new(&mut self, name: String) -> wasmtime::Result<Resource<state::OperatorState>> {
        let rep = match self.operator_reps.get(&name) {
            Some(&rep) => rep,
            None => {
                self.check_declaration("operator state", &name)?;
                let rep = self.operator_names.len() as u32;
                self.operator_reps.insert(name.clone(), rep);
                self.operator_names.push(name);
                rep
            }
        };
        Ok(Resource::new_own(rep))
    }

    fn get(&mut self, s: Resource<state::OperatorState>) -> wasmtime::Result<Option<Vec<u8>>> {
        let name = self.operator_name(s.rep())?;
        Ok(self.operator_state.get(name).cloned())
    }

    fn set(
        &mut self,
        s: Resource<state::OperatorState>,
        value: Option<Vec<u8>>,
    ) -> wasmtime::Result<()> {
        let name = self.operator_name(s.rep())?.to_string();
        if let Some(v) = &value {
            self.check_value_size(v.len(), || format!("operator state {}", quoted(&name)))?;
            self.operator_bytes += v.len();
        }
        let old = match value {
            Some(v) => self.operator_state.insert(name.clone(), v),
            None => self.operator_state.remove(&name),
        };
        self.operator_bytes -= old.map_or(0, |v| v.len());
        self.check_host_memory(|| format!("writing operator state {}", quoted(&name)))
    }

    fn drop(&mut self, _s: Resource<state::OperatorState>) -> wasmtime::Result<()> {
        Ok(())
    }
}

impl HostState {
    fn operator_name(&self, rep: u32) -> wasmtime::Result<&str> {
        self.operator_names
            .get(rep as usize)
            .map(String::as_str)
            .ok_or_else(|| wasmtime::format_err!("unknown operator state handle {rep}"))
    }
}

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
            if op.register {
                self.timers.register(op.domain, op.timestamp, key);
            } else {
                self.timers.delete(op.domain, op.timestamp, key);
            }
        }
        let limit = self.limits().timers;
        if self.timers.len() as u64 > limit {
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

impl output::Host for HostState {
    fn emit(&mut self, records: Vec<u8>) -> wasmtime::Result<()> {
        if !self.in_call {
            return Err(wasmtime::format_err!(
                "records were emitted outside of process, on-timers or close"
            ));
        }
        self.emitted_bytes += records.len() as u64;
        let limit = self.limits().output_bytes.as_u64();
        if self.emitted_bytes > limit {
            return Err(LimitExceeded::error(
                Limit::OutputBytes,
                format!(
                    "{} emitted more than {} in one call",
                    self.hook,
                    bytes(limit)
                ),
            ));
        }
        // A batch addresses its bytes with u32 offsets.
        if self.out.bytes() + records.len() > u32::MAX as usize {
            return Err(wasmtime::format_err!(
                "the operator emitted more than 4 GiB in one call; emit less per record or batch"
            ));
        }
        let before = self.out.len();
        let side = self
            .out
            .extend_from_output(&records)
            .map_err(|e| wasmtime::format_err!("{e}"))?;
        self.emitted_records += (self.out.len() - before) as u64 + side;
        let limit = self.limits().output_records;
        if self.emitted_records > limit {
            return Err(LimitExceeded::error(
                Limit::OutputRecords,
                format!(
                    "{} emitted more than {limit} records in one call",
                    self.hook
                ),
            ));
        }
        if side > 0 {
            // The buffer decoded whole above; now pick out its side-output records.
            for (name, rec) in OutputReader::new(&records).flatten() {
                let Some(name) = name else { continue };
                let at = match self.side_index.get(name) {
                    Some(&at) => at,
                    None => self.add_side_output(name)?,
                };
                self.side_outputs[at].1.push(&rec);
            }
        }
        Ok(())
    }
}

impl HostState {
    /// Starts side output `name`, within the `side_outputs` limit.
    fn add_side_output(&mut self, name: &[u8]) -> wasmtime::Result<usize> {
        check_name("side output", name)?;
        let limit = self.limits().side_outputs;
        if self.side_outputs.len() as u64 >= limit {
            return Err(LimitExceeded::error(
                Limit::SideOutputs,
                format!(
                    "{} emitted to more than {limit} side outputs (the next: {})",
                    self.hook,
                    quoted(&String::from_utf8_lossy(name))
                ),
            ));
        }
        let name = std::str::from_utf8(name).expect("check_name checked it");
        self.side_outputs.push((name.to_owned(), Batch::default()));
        self.side_index
            .insert(name.as_bytes().into(), self.side_outputs.len() - 1);
        Ok(self.side_outputs.len() - 1)
    }

    /// The records emitted to side outputs by the last call, by side output name.
    pub(crate) fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        self.side_outputs
            .iter_mut()
            .filter(|(_, batch)| !batch.is_empty())
            .map(|(name, batch)| (name.clone(), std::mem::take(batch)))
            .collect()
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
