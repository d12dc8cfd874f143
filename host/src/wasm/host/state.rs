//! `weir:stream/state`: keyed value, list and map state of the current call's keys, and
//! operator state.

use wasmtime::component::Resource;
use weir_wire::{put_value_op, read_value_ops};

use super::{Declared, HostState, quoted};
use crate::state::{
    MAP_LOAD_LIMIT, OperatorList, Redistribution, StateError, StateId, StateKind, Ttl, TtlUpdate,
    TtlVisibility,
};
use crate::wasm::weir::stream::{state, types};

impl HostState {
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
        self.declared.push(Declared { id, last_load: 0 });
        Ok((self.declared.len() - 1) as u32)
    }

    fn state_id(&self, rep: u32, kind: StateKind) -> wasmtime::Result<StateId> {
        let id = self
            .declared
            .get(rep as usize)
            .ok_or_else(|| wasmtime::format_err!("unknown state handle {rep}"))?
            .id;
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
        let last = self.declared[rep as usize].last_load;
        let mut buf = Vec::with_capacity(last + last / 4);
        self.state
            .load(id, &self.slots, MAP_LOAD_LIMIT, &mut buf)
            .map_err(|e| self.state_error(id, e))?;
        self.declared[rep as usize].last_load = buf.len();
        Ok(buf)
    }

    /// `value-state.load-slots`: the values of `slots` of the current call, which must be
    /// in increasing order.
    fn load_slots(&mut self, rep: u32, slots: &[u32]) -> wasmtime::Result<Vec<u8>> {
        let id = self.state_id(rep, StateKind::Value)?;
        self.picked.clear();
        let mut last = None;
        for &slot in slots {
            if last.is_some_and(|last| slot <= last) || slot as usize >= self.slots.len() {
                return Err(wasmtime::format_err!(
                    "state {}: load-slots was given key slot {slot} after {last:?}, in a call of \
                     {} key slots; give each slot of the call at most once, in increasing order",
                    quoted(self.state.name(id)),
                    self.slots.len()
                ));
            }
            last = Some(slot);
            self.picked.push_slot_of(&self.slots, slot as usize);
        }
        let mut buf = Vec::with_capacity(slots.len() * 8);
        self.state
            .load(id, &self.picked, MAP_LOAD_LIMIT, &mut buf)
            .map_err(|e| self.state_error(id, e))?;
        Ok(buf)
    }

    /// `value-state.store-ids`: changes of keys named by id (`key-ids`), of a value state
    /// without a TTL.
    fn store_ids(&mut self, rep: u32, changes: &[u8]) -> wasmtime::Result<()> {
        let id = self.state_id(rep, StateKind::Value)?;
        let name = quoted(self.state.name(id));
        if self.state.has_ttl(id) {
            return Err(wasmtime::format_err!(
                "state {name} has a TTL: its changes cannot be written back by key id (store-ids), \
                 whose time the host cannot tell; send them with store in the call that made them"
            ));
        }
        // The keys become the slots of a call of their own, so that the changes go through
        // `store` as any other: the size limit and the memory accounting alike.
        self.picked.clear();
        let mut by_slot = Vec::with_capacity(changes.len());
        for op in read_value_ops(changes) {
            let (key_id, op) = op.map_err(|cause| {
                let name = self.state.name(id).to_owned();
                self.state_error(id, StateError::Decode { name, cause })
            })?;
            if key_id as usize >= self.key_ids.len() {
                return Err(wasmtime::format_err!(
                    "state {name}: store-ids was given key id {key_id}, which the host never \
                     gave (it gave ids below {})",
                    self.key_ids.len()
                ));
            }
            let slot = self.picked.push_slot_of(&self.key_ids, key_id as usize);
            put_value_op(&mut by_slot, slot, op);
        }
        // In `slots` while stored, so that an error names the key.
        std::mem::swap(&mut self.slots, &mut self.picked);
        let limit = self.limits().state_value.as_u64();
        let stored = (self.state)
            .store(id, &self.slots, &by_slot, limit)
            .map_err(|e| self.state_error(id, e));
        std::mem::swap(&mut self.slots, &mut self.picked);
        stored?;
        self.check_host_memory(|| format!("writing back state {name}"))
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

impl state::Host for HostState {
    fn write_back_advised(&mut self) -> wasmtime::Result<bool> {
        Ok(!self.state.in_memory())
    }

    fn key_ids(&mut self) -> wasmtime::Result<Vec<u32>> {
        if !self.in_call {
            return Err(wasmtime::format_err!(
                "key-ids was called outside of process or on-timers"
            ));
        }
        self.writes_back = true;
        let HostState { slots, key_ids, .. } = self;
        Ok((0..slots.len())
            .map(|slot| {
                let (id, _) = key_ids.slot_of(slots.key(slot), || slots.group(slot));
                id
            })
            .collect())
    }
}

/// The host side of one keyed-state resource of the WIT contract (value, list and map state
/// differ in the kind they declare and check, and map state has point reads).
macro_rules! keyed_state_resource {
    ($trait:ident, $resource:ident, $kind:expr $(, { $($extra:tt)* })?) => {
        impl state::$trait for HostState {
            fn new(
                &mut self,
                name: String,
                ttl: Option<types::Ttl>,
            ) -> wasmtime::Result<Resource<state::$resource>> {
                Ok(Resource::new_own(self.declare(name, $kind, ttl)?))
            }

            fn load(&mut self, s: Resource<state::$resource>) -> wasmtime::Result<Vec<u8>> {
                HostState::load(self, s.rep(), $kind)
            }

            fn store(
                &mut self,
                s: Resource<state::$resource>,
                changes: Vec<u8>,
            ) -> wasmtime::Result<()> {
                HostState::store(self, s.rep(), $kind, &changes)
            }

            fn drop(&mut self, _s: Resource<state::$resource>) -> wasmtime::Result<()> {
                Ok(())
            }

            $($($extra)*)?
        }
    };
}

keyed_state_resource!(HostValueState, ValueState, StateKind::Value, {
    fn load_slots(
        &mut self,
        s: Resource<state::ValueState>,
        key_slots: Vec<u32>,
    ) -> wasmtime::Result<Vec<u8>> {
        HostState::load_slots(self, s.rep(), &key_slots)
    }

    fn store_ids(
        &mut self,
        s: Resource<state::ValueState>,
        changes: Vec<u8>,
    ) -> wasmtime::Result<()> {
        HostState::store_ids(self, s.rep(), &changes)
    }
});
keyed_state_resource!(HostListState, ListState, StateKind::List);
keyed_state_resource!(HostMapState, MapState, StateKind::Map, {
    fn get(
        &mut self,
        s: Resource<state::MapState>,
        key_slot: u32,
        map_key: Vec<u8>,
    ) -> wasmtime::Result<Option<Vec<u8>>> {
        let id = self.state_id(s.rep(), StateKind::Map)?;
        self.state
            .map_get(id, &self.slots, key_slot, &map_key)
            .map_err(|e| self.state_error(id, e))
    }

    fn entries(
        &mut self,
        s: Resource<state::MapState>,
        key_slot: u32,
    ) -> wasmtime::Result<Vec<u8>> {
        let id = self.state_id(s.rep(), StateKind::Map)?;
        let mut buf = Vec::new();
        self.state
            .map_entries(id, &self.slots, key_slot, &mut buf)
            .map_err(|e| self.state_error(id, e))?;
        Ok(buf)
    }
});

impl state::HostOperatorState for HostState {
    fn new(
        &mut self,
        name: String,
        mode: types::Redistribution,
    ) -> wasmtime::Result<Resource<state::OperatorState>> {
        let mode = match mode {
            types::Redistribution::Split => Redistribution::Split,
            types::Redistribution::Union => Redistribution::Union,
        };
        let rep = match self.operator_reps.get(&name) {
            Some(&(_, declared)) if declared != mode => {
                return Err(wasmtime::format_err!(
                    "operator state {} is declared with redistribution {declared:?} and now \
                     with {mode:?}; use one mode per name",
                    quoted(&name)
                ));
            }
            Some(&(rep, _)) => rep,
            None => {
                self.check_declaration("operator state", &name)?;
                let rep = self.operator_names.len() as u32;
                self.operator_reps.insert(name.clone(), (rep, mode));
                // A restored list takes the mode its code declares now.
                if let Some(list) = self.operator_state.get_mut(&name) {
                    list.mode = mode;
                }
                self.operator_names.push(name);
                rep
            }
        };
        Ok(Resource::new_own(rep))
    }

    fn get(&mut self, s: Resource<state::OperatorState>) -> wasmtime::Result<Vec<Vec<u8>>> {
        let name = self.operator_name(s.rep())?;
        Ok(self
            .operator_state
            .get(name)
            .map(|l| l.elements.clone())
            .unwrap_or_default())
    }

    fn set(
        &mut self,
        s: Resource<state::OperatorState>,
        elements: Vec<Vec<u8>>,
    ) -> wasmtime::Result<()> {
        let name = self.operator_name(s.rep())?.to_string();
        for e in &elements {
            self.check_value_size(e.len(), || format!("operator state {}", quoted(&name)))?;
        }
        let mode = self
            .operator_reps
            .get(&name)
            .map(|&(_, m)| m)
            .unwrap_or_default();
        let new = OperatorList { mode, elements };
        self.operator_bytes += new.bytes();
        let old = if new.elements.is_empty() {
            self.operator_state.remove(&name)
        } else {
            self.operator_state.insert(name.clone(), new)
        };
        self.operator_bytes -= old.map_or(0, |l| l.bytes());
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
