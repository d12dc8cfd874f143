//! The host side of the WIT imports: keyed state, timers, output and log.
//!
//! A guest addresses keys only by *slot* of the batch (or timer batch) being handled; the
//! host keeps the slot table of the current call and refuses state access outside a call or
//! for keys outside the subtask's key groups. Every failure traps the guest call with a
//! message naming the state or buffer, which the runtime reports with the operator's uid.

use std::collections::BTreeSet;
use std::ops::Range;

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use weir_wire::{
    ListOp, MapOp, OutputReader, TimeDomain, ValueOp, put_bytes, put_opt_bytes, put_u32,
    read_list_ops, read_map_ops, read_timer_ops, read_value_ops,
};

use super::capabilities::{Grants, GuestLog, Level};
use super::describe_bytes;
use super::limits::{Limit, LimitExceeded, Limiter, Limits, bytes};
use super::weir::stream::{log, output, state, timers, types};
use crate::batch::Batch;
use crate::runtime::key_group::key_group;
use crate::runtime::operator::OperatorContext;
use crate::state::{
    KeyGroupIndex, KeyedState, OperatorStates, StateId, StateKind, Ttl, TtlUpdate, TtlVisibility,
    ValuePos,
};

/// Event-time timers: `(timestamp, key)` in firing order.
pub(crate) type TimerSet = BTreeSet<(i64, Box<[u8]>)>;

/// The data of one operator instance's wasmtime store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) ctx: OperatorContext,
    pub(crate) state: KeyedState,
    /// Declared states by resource rep.
    declared: Vec<StateId>,
    /// The key of every slot of the current call, as `(start, length)` in `slot_bytes`, and
    /// its key group.
    slot_ranges: Vec<(u32, u32, u32)>,
    slot_bytes: Vec<u8>,
    /// Where this call's value-state loads found each slot's value, per state, so that
    /// `store` writes back without a second hash lookup.
    value_positions: Vec<(StateId, Vec<Option<ValuePos>>)>,
    pub(crate) in_call: bool,
    /// Where emitted records go during a call.
    pub(crate) out: Batch,
    /// Records emitted to side outputs during the current call, by name.
    pub(crate) side_outputs: Vec<(String, Batch)>,
    pub(crate) event_timers: TimerSet,
    pub(crate) processing_timers: TimerSet,
    pub(crate) watermark: Option<i64>,
    /// The last error the guest logged (its panic hook logs the panic message there).
    pub(crate) last_error: Option<String>,
    /// Non-keyed operator state by name.
    pub(crate) operator_state: OperatorStates,
    /// Operator-state names by resource rep.
    operator_names: Vec<String>,
    pub(crate) limiter: Limiter,
    /// The guest's stdout, stderr and log messages, rate-limited.
    log: GuestLog,
    /// The hook being called (`process`, `on-timers`, ...), for error messages.
    pub(crate) hook: &'static str,
    /// Records and bytes emitted by the current call, against the output limits.
    emitted_records: u64,
    emitted_bytes: u64,
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
        limits: Limits,
        grants: &Grants,
    ) -> Result<Self, String> {
        let state = KeyedState::new(ctx.max_parallelism, ctx.key_groups.clone());
        let log = GuestLog::new(&ctx);
        Ok(HostState {
            wasi: grants.wasi_ctx(&log)?,
            table: ResourceTable::new(),
            ctx,
            state,
            declared: Vec::new(),
            slot_ranges: Vec::new(),
            slot_bytes: Vec::new(),
            value_positions: Vec::new(),
            in_call: false,
            out: Batch::default(),
            side_outputs: Vec::new(),
            event_timers: TimerSet::new(),
            processing_timers: TimerSet::new(),
            watermark: None,
            last_error: None,
            operator_state: OperatorStates::new(),
            operator_names: Vec::new(),
            limiter: Limiter { limits },
            log,
            hook: "open",
            emitted_records: 0,
            emitted_bytes: 0,
        })
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

    /// Keyed state `id` of the key in `slot`, for a message.
    fn keyed_target(&self, id: StateId, slot: u32) -> String {
        let key = self
            .slot_key(slot)
            .map(|(range, _)| describe_bytes(&self.slot_bytes[range]))
            .unwrap_or_default();
        format!("state \"{}\" for key {key}", self.state.name(id))
    }

    /// Starts a new slot table for the next call.
    pub(crate) fn clear_slots(&mut self) {
        self.slot_ranges.clear();
        self.slot_bytes.clear();
        self.value_positions.clear();
    }

    /// Adds the key of the next slot.
    pub(crate) fn push_slot(&mut self, key: &[u8]) {
        let at = self.slot_bytes.len() as u32;
        self.slot_bytes.extend_from_slice(key);
        let group = key_group(key, self.ctx.max_parallelism);
        self.slot_ranges.push((at, key.len() as u32, group));
    }

    /// The key of `slot` and its key group.
    /// Where the key of `slot` is in `slot_bytes`, and its key group. A range rather than a
    /// slice, so that callers can read the key while they change `state` (disjoint fields).
    fn slot_key(&self, slot: u32) -> wasmtime::Result<(Range<usize>, u32)> {
        let &(at, len, group) = self.slot_ranges.get(slot as usize).ok_or_else(|| {
            wasmtime::format_err!(
                "key slot {slot} does not exist: the current batch has {} keys",
                self.slot_ranges.len()
            )
        })?;
        Ok((at as usize..(at + len) as usize, group))
    }

    fn declare(
        &mut self,
        name: String,
        kind: StateKind,
        ttl: Option<types::Ttl>,
    ) -> wasmtime::Result<u32> {
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

    /// Locates the key of `slot` for state `id`.
    fn locate(&self, id: StateId, slot: u32) -> wasmtime::Result<(KeyGroupIndex, Range<usize>)> {
        let (key, group) = self.slot_key(slot)?;
        let g = self
            .state
            .group_index(id, group)
            .map_err(|e| wasmtime::format_err!("{e}"))?;
        Ok((g, key))
    }

    fn load(&mut self, rep: u32, kind: StateKind) -> wasmtime::Result<Vec<u8>> {
        let id = self.state_id(rep, kind)?;
        let mut buf = Vec::new();
        let mut positions = Vec::new();
        for slot in 0..self.slot_ranges.len() as u32 {
            let (g, key) = self.locate(id, slot)?;
            let key = &self.slot_bytes[key];
            match kind {
                StateKind::Value => {
                    let pos = self.state.find_value(id, g, key);
                    put_opt_bytes(&mut buf, pos.and_then(|p| self.state.value_at(id, g, p)));
                    positions.push(pos);
                }
                StateKind::List => {
                    let list = self.state.list(id, g, key);
                    put_u32(&mut buf, list.len() as u32);
                    for e in list {
                        put_bytes(&mut buf, e);
                    }
                }
                StateKind::Map => match self.state.map(id, g, key) {
                    Some(map) => {
                        put_u32(&mut buf, map.len() as u32);
                        for (k, v) in map {
                            put_bytes(&mut buf, k);
                            put_bytes(&mut buf, v);
                        }
                    }
                    None => put_u32(&mut buf, 0),
                },
            }
        }
        if kind == StateKind::Value {
            self.value_positions.retain(|(s, _)| *s != id);
            self.value_positions.push((id, positions));
        }
        Ok(buf)
    }

    fn store(&mut self, rep: u32, kind: StateKind, changes: &[u8]) -> wasmtime::Result<()> {
        let id = self.state_id(rep, kind)?;
        let name = self.state.name(id).to_string();
        let bad = |e: weir_wire::DecodeError| wasmtime::format_err!("state \"{name}\": {e}");
        // Resolve each slot's key once into an owned copy, so the state can be mutated.
        match kind {
            StateKind::Value => {
                let at = self.value_positions.iter().position(|(s, _)| *s == id);
                let mut positions = at
                    .map(|i| std::mem::take(&mut self.value_positions[i].1))
                    .unwrap_or_default();
                for op in read_value_ops(changes) {
                    let (slot, op) = op.map_err(bad)?;
                    let known = positions.get(slot as usize).copied().flatten();
                    if let ValueOp::Set(v) = &op {
                        self.check_value_size(v.len(), || self.keyed_target(id, slot))?;
                    }
                    match (op, known) {
                        (ValueOp::Set(v), Some(pos)) => {
                            let (g, key) = self.locate(id, slot)?;
                            let key = &self.slot_bytes[key];
                            self.state.set_value_at(id, g, pos, key, v);
                        }
                        (ValueOp::Set(v), None) => {
                            let (g, key) = self.locate(id, slot)?;
                            let key = &self.slot_bytes[key];
                            self.state.set_value(id, g, key, v);
                        }
                        (ValueOp::Clear, _) => {
                            let (g, key) = self.locate(id, slot)?;
                            let key = &self.slot_bytes[key];
                            self.state.clear(id, g, key);
                            if let Some(p) = positions.get_mut(slot as usize) {
                                *p = None;
                            }
                        }
                    }
                }
                if let Some(i) = at {
                    self.value_positions[i].1 = positions;
                }
            }
            StateKind::List => {
                for op in read_list_ops(changes) {
                    let (slot, op) = op.map_err(bad)?;
                    if let ListOp::Replace(elems) | ListOp::Append(elems) = &op {
                        for e in elems {
                            self.check_value_size(e.len(), || self.keyed_target(id, slot))?;
                        }
                    }
                    let (g, key) = self.locate(id, slot)?;
                    let key = &self.slot_bytes[key];
                    match op {
                        ListOp::Clear => self.state.clear(id, g, key),
                        ListOp::Replace(elems) => self.state.extend_list(id, g, key, true, elems),
                        ListOp::Append(elems) => self.state.extend_list(id, g, key, false, elems),
                    }
                }
            }
            StateKind::Map => {
                for op in read_map_ops(changes) {
                    let (slot, op) = op.map_err(bad)?;
                    if let MapOp::Put(k, v) = &op {
                        let len = k.len() + v.len();
                        self.check_value_size(len, || self.keyed_target(id, slot))?;
                    }
                    let (g, key) = self.locate(id, slot)?;
                    let key = &self.slot_bytes[key];
                    match op {
                        MapOp::Clear => self.state.clear(id, g, key),
                        MapOp::Put(k, v) => self.state.put_map(id, g, key, k, v),
                        MapOp::Remove(k) => self.state.remove_map(id, g, key, k),
                    }
                }
            }
        }
        Ok(())
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
        let rep = match self.operator_names.iter().position(|n| *n == name) {
            Some(rep) => rep,
            None => {
                self.operator_names.push(name);
                self.operator_names.len() - 1
            }
        };
        Ok(Resource::new_own(rep as u32))
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
            self.check_value_size(v.len(), || format!("operator state \"{name}\""))?;
        }
        match value {
            Some(v) => self.operator_state.insert(name, v),
            None => self.operator_state.remove(&name),
        };
        Ok(())
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
        Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0))
    }

    fn update(&mut self, changes: Vec<u8>) -> wasmtime::Result<()> {
        if !self.in_call {
            return Err(wasmtime::format_err!(
                "timers were changed outside of process or on-timers; timers need a current key"
            ));
        }
        for op in read_timer_ops(&changes) {
            let op = op.map_err(|e| wasmtime::format_err!("{e}"))?;
            let key: Box<[u8]> = self.slot_bytes[self.slot_key(op.slot)?.0].into();
            let set = match op.domain {
                TimeDomain::EventTime => &mut self.event_timers,
                TimeDomain::ProcessingTime => &mut self.processing_timers,
            };
            if op.register {
                set.insert((op.timestamp, key));
            } else {
                set.remove(&(op.timestamp, key));
            }
        }
        Ok(())
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
        self.emitted_records += (self.out.len() - before) as u64;
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
                let name = String::from_utf8_lossy(name);
                let at = match self.side_outputs.iter().position(|(n, _)| *n == name) {
                    Some(at) => at,
                    None => {
                        self.side_outputs
                            .push((name.into_owned(), Batch::default()));
                        self.side_outputs.len() - 1
                    }
                };
                self.side_outputs[at].1.push(&rec);
            }
        }
        Ok(())
    }
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
            self.last_error = Some(message);
        }
        Ok(())
    }
}
