//! `weir:stream/state`: keyed value, list and map state of the current call's keys, and
//! operator state.

use wasmtime::component::Resource;

use super::{Declared, HostState, quoted};
use crate::state::{
    MAP_LOAD_LIMIT, OperatorList, Redistribution, StateId, StateKind, Ttl, TtlUpdate, TtlVisibility,
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

keyed_state_resource!(HostValueState, ValueState, StateKind::Value);
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
