//! The component side: WIT bindings, the [`Backend`] over the WIT imports, the export glue
//! that [`export!`](crate::export) expands to, and the panic hook.

use std::cell::RefCell;
use std::sync::Once;

use crate::backend::{Backend, StateKind};
use crate::runtime::{Instance, OpenInfo};
use crate::{
    Level, Operator, Redistribution, Result, StateVisibility, Ttl, TtlTimeCharacteristic,
    UpdateType,
};

#[allow(unsafe_code, missing_docs, clippy::all)]
pub mod bindings {
    // Generated code; `unsafe` is the canonical-ABI glue wit-bindgen emits.
    wit_bindgen::generate!({
        path: "../wit",
        world: "processor",
        pub_export_macro: true,
        export_macro_name: "__export_processor",
        default_bindings_module: "weir_sdk::__private::bindings",
        runtime_path: "weir_sdk::__private::wit_bindgen_rt",
    });
}

use bindings::weir::stream::{log, output, state, timers, types};

pub use bindings::exports::weir::stream::operator::Guest;
pub use types::OpenContext as WitOpenContext;

enum WitState {
    Value(state::ValueState),
    List(state::ListState),
    Map(state::MapState),
}

#[derive(Default)]
struct WitBackend {
    states: Vec<WitState>,
    operator_states: Vec<state::OperatorState>,
}

fn wit_ttl(ttl: &Ttl) -> types::Ttl {
    types::Ttl {
        ttl_ms: ttl.ttl_ms(),
        update: match ttl.update_type() {
            UpdateType::Disabled => types::TtlUpdate::Disabled,
            UpdateType::OnCreateAndWrite => types::TtlUpdate::OnCreateAndWrite,
            UpdateType::OnReadAndWrite => types::TtlUpdate::OnReadAndWrite,
        },
        visibility: match ttl.state_visibility() {
            StateVisibility::NeverReturnExpired => types::TtlVisibility::NeverReturnExpired,
            StateVisibility::ReturnExpiredIfNotCleanedUp => {
                types::TtlVisibility::ReturnExpiredIfNotCleanedUp
            }
        },
        time: match ttl.time_characteristic() {
            TtlTimeCharacteristic::ProcessingTime => types::TtlTime::ProcessingTime,
            TtlTimeCharacteristic::EventTime => types::TtlTime::EventTime,
        },
    }
}

fn wit_level(level: Level) -> types::LogLevel {
    match level {
        Level::Trace => types::LogLevel::Trace,
        Level::Debug => types::LogLevel::Debug,
        Level::Info => types::LogLevel::Info,
        Level::Warn => types::LogLevel::Warn,
        Level::Error => types::LogLevel::Error,
    }
}

impl Backend for WitBackend {
    fn declare_state(&mut self, kind: StateKind, name: &str, ttl: Option<&Ttl>) -> usize {
        let ttl = ttl.map(wit_ttl);
        self.states.push(match kind {
            StateKind::Value => WitState::Value(state::ValueState::new(name, ttl)),
            StateKind::List => WitState::List(state::ListState::new(name, ttl)),
            StateKind::Map => WitState::Map(state::MapState::new(name, ttl)),
        });
        self.states.len() - 1
    }

    fn load(&mut self, state: usize, _keys: &[&[u8]]) -> Vec<u8> {
        match &self.states[state] {
            WitState::Value(s) => s.load(),
            WitState::List(s) => s.load(),
            WitState::Map(s) => s.load(),
        }
    }

    fn map_get(
        &mut self,
        state: usize,
        _keys: &[&[u8]],
        slot: u32,
        map_key: &[u8],
    ) -> Option<Vec<u8>> {
        match &self.states[state] {
            WitState::Map(s) => s.get(slot, map_key),
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }

    fn map_entries(&mut self, state: usize, _keys: &[&[u8]], slot: u32) -> Vec<u8> {
        match &self.states[state] {
            WitState::Map(s) => s.entries(slot),
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }

    fn store(&mut self, state: usize, _keys: &[&[u8]], changes: &[u8]) {
        match &self.states[state] {
            WitState::Value(s) => s.store(changes),
            WitState::List(s) => s.store(changes),
            WitState::Map(s) => s.store(changes),
        }
    }

    fn load_slots(&mut self, state: usize, _keys: &[&[u8]], slots: &[u32]) -> Vec<u8> {
        match &self.states[state] {
            WitState::Value(s) => s.load_slots(slots),
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }

    fn write_back_advised(&mut self) -> bool {
        state::write_back_advised()
    }

    fn key_ids(&mut self, _keys: &[&[u8]]) -> Vec<u32> {
        state::key_ids()
    }

    fn store_ids(&mut self, state: usize, changes: &[u8]) {
        match &self.states[state] {
            WitState::Value(s) => s.store_ids(changes),
            _ => unreachable!("state kinds are checked when a handle is made"),
        }
    }

    fn emit(&mut self, records: &[u8]) {
        output::emit(records);
    }

    fn update_timers(&mut self, _keys: &[&[u8]], changes: &[u8]) {
        timers::update(changes);
    }

    fn current_watermark(&mut self) -> Option<i64> {
        timers::current_watermark()
    }

    fn current_processing_time(&mut self) -> i64 {
        timers::current_processing_time()
    }

    fn log(&mut self, level: Level, message: &str) {
        log::log(wit_level(level), message);
    }

    fn declare_operator_state(&mut self, name: &str, mode: Redistribution) -> usize {
        let mode = match mode {
            Redistribution::Split => types::Redistribution::Split,
            Redistribution::Union => types::Redistribution::Union,
        };
        self.operator_states
            .push(state::OperatorState::new(name, mode));
        self.operator_states.len() - 1
    }

    fn get_operator_state(&mut self, state: usize) -> Vec<Vec<u8>> {
        self.operator_states[state].get()
    }

    fn set_operator_state(&mut self, state: usize, elements: &[Vec<u8>]) {
        self.operator_states[state].set(elements);
    }
}

/// An instance with its operator type erased, so the export glue needs no generics.
trait Exported {
    fn process(&mut self, batch: &[u8]) -> Result<()>;
    fn on_timers(&mut self, timers: &[u8]) -> Result<()>;
    fn close(&mut self) -> Result<()>;
}

impl<T: Operator> Exported for Instance<T> {
    fn process(&mut self, batch: &[u8]) -> Result<()> {
        Instance::process(self, batch)
    }

    fn on_timers(&mut self, timers: &[u8]) -> Result<()> {
        Instance::on_timers(self, timers)
    }

    fn close(&mut self) -> Result<()> {
        Instance::close(self)
    }
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Exported>>> = const { RefCell::new(None) };
}

/// Reports a panic through the `log` import before the trap, so the host can say what went
/// wrong and where rather than only "wasm trap: unreachable".
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(a panic without message)");
            let text = match info.location() {
                Some(at) => format!(
                    "operator panicked at {}:{}:{}: {message}",
                    at.file(),
                    at.line(),
                    at.column()
                ),
                None => format!("operator panicked: {message}"),
            };
            let text = match crate::runtime::CURRENT_RECORD.get() {
                Some(index) => format!("{text} ({})", describe_record(index)),
                None => text,
            };
            // Not also the default hook: its copy on stderr would only repeat this.
            log::log(types::LogLevel::Error, &text);
        }));
    });
}

thread_local! {
    /// The buffer `process` is handling, kept for the panic hook to describe the record the
    /// operator panicked on.
    static BATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// How the exported operator describes what it was handling ([`Operator::describe_input`]);
/// set by `open`.
type Describe = fn(u32, Option<&[u8]>, &[u8], bool) -> String;

thread_local! {
    static DESCRIBE: std::cell::Cell<Option<Describe>> = const { std::cell::Cell::new(None) };
}

/// Record `index` of the batch being processed, with its key and value, for a panic message.
fn describe_record(index: u32) -> String {
    BATCH
        .with(|slot| {
            let batch = slot.try_borrow().ok()?;
            let mut reader = weir_wire::BatchReader::new(&batch, Vec::new()).ok()?;
            let mut record = None;
            for _ in 0..=index {
                record = Some(reader.next()?.ok()?.record);
            }
            let record = record?;
            let describe = DESCRIBE.get()?;
            Some(describe(index, record.key, record.value, true))
        })
        .unwrap_or_else(|| format!("at record {index} of the batch"))
}

fn with_instance(call: impl FnOnce(&mut dyn Exported) -> Result<()>) -> Result<(), String> {
    install_panic_hook();
    INSTANCE.with(|slot| match slot.borrow_mut().as_deref_mut() {
        Some(instance) => call(instance).map_err(|e| e.to_string()),
        None => Err("weir-sdk: the host called the operator before `open`".to_owned()),
    })
}

/// `operator.open`: creates the instance with `T::default()` and runs its `open` hook.
pub fn open<T: Operator + Default + 'static>(ctx: WitOpenContext) -> Result<(), String> {
    install_panic_hook();
    let info = OpenInfo {
        operator_uid: ctx.operator_uid,
        subtask_index: ctx.subtask_index,
        parallelism: ctx.parallelism,
        config: ctx.config,
    };
    DESCRIBE.set(Some(T::describe_input));
    let mut instance = Instance::new(T::default(), Box::new(WitBackend::default()), info);
    instance.open().map_err(|e| e.to_string())?;
    INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(instance)));
    Ok(())
}

/// `operator.process`. The batch stays in [`BATCH`] (moved, not copied) while it is handled.
pub fn process(batch: Vec<u8>) -> Result<(), String> {
    BATCH.with(|slot| {
        *slot.borrow_mut() = batch;
        let batch = slot.borrow();
        with_instance(|i| i.process(&batch))
    })
}

/// `operator.on-timers`.
pub fn on_timers(timers: Vec<u8>) -> Result<(), String> {
    with_instance(|i| i.on_timers(&timers))
}

/// `operator.close`: runs the `close` hook and drops the instance.
pub fn close() -> Result<(), String> {
    let result = with_instance(|i| i.close());
    INSTANCE.with(|slot| *slot.borrow_mut() = None);
    result
}
