//! Limits of one operator instance, set per job (`[limits]`) and per operator
//! (`limits = { ... }` in its `[[operator]]` table, which overrides the job's).
//!
//! | limit | key | default | exceeded |
//! |---|---|---|---|
//! | linear memory | `memory` | 256 MiB | the growing call traps |
//! | table elements | `table_elements` | 100,000 | the growing call traps |
//! | instances, memories and tables | `instances` | 100 | instantiation fails |
//! | execution deadline per call | `call_deadline` | 5 s | the call traps |
//! | records emitted by one call | `output_records` | 1,000,000 | the call traps |
//! | bytes emitted by one call | `output_bytes` | 256 MiB | the call traps |
//! | one state value, list element or map entry | `state_value` | 64 MiB | the call traps |
//! | bytes passed to the host in one host call | `host_call_bytes` | 256 MiB | the call traps |
//! | side outputs one instance emits to | `side_outputs` | 100 | the call traps |
//! | states one instance declares (keyed and operator state) | `states` | 1,000 | the call traps |
//! | timers pending in one instance (with RocksDB state, those kept in memory) | `timers` | 1,000,000 | the call traps |
//! | memory the host holds for one instance: keyed state of the memory backend, timers in memory, operator state | `host_memory` | 1 GiB | the call traps |
//! | size of the `.wasm` file | `wasm_size` | 100 MiB | the job does not start |
//! | compiling the `.wasm` file | `compile_time` | 120 s | the job does not start |
//!
//! A call is `open`, one batch of `process`, one batch of `on-timers` or `close`; a batch holds
//! up to 4,096 records. The wasm call stack is 512 KiB for every operator (wasmtime's
//! default); a deeper recursion traps as a stack overflow.
//!
//! The deadline uses wasmtime's epoch interruption: one ticker thread per engine advances the
//! epoch every [`EPOCH_TICK`], and at every tick a running call compares the time with its
//! deadline (see `interrupt`), so a guest that loops forever, or waits in a host call, is
//! stopped within a tick of its deadline.

use std::fmt;
use std::time::Duration;

use bytesize::ByteSize;
use serde::Deserialize;
use wasmtime::{Engine, ResourceLimiter};

pub use crate::operator::Limit;

/// How often the engine's epoch advances: the resolution of the execution deadline.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The largest linear memory of a 32-bit WebAssembly instance.
const MAX_MEMORY: u64 = 4 << 30;

/// The limits of one operator instance (see the module documentation for the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory of one instance (at most 4 GiB).
    pub memory: ByteSize,
    /// Elements of one table.
    pub table_elements: u64,
    /// Core instances, memories and tables of one component.
    pub instances: u64,
    #[serde(with = "humantime_serde")]
    /// How long one call may take, what it waits for in the host included.
    pub call_deadline: Duration,
    /// Records one call may emit, to side outputs too.
    pub output_records: u64,
    /// Bytes one call may emit.
    pub output_bytes: ByteSize,
    /// One state value, list element or map entry.
    pub state_value: ByteSize,
    /// What one import call may pass to the host.
    pub host_call_bytes: ByteSize,
    /// Side outputs one instance may emit to.
    pub side_outputs: u64,
    /// States one instance may declare, keyed and operator state.
    pub states: u64,
    /// Timers pending in one instance (with RocksDB state, those kept in memory).
    pub timers: u64,
    /// What the host may hold for one instance: keyed state of the memory backend, timers, operator state.
    pub host_memory: ByteSize,
    /// The size of the `.wasm` file.
    pub wasm_size: ByteSize,
    #[serde(with = "humantime_serde")]
    /// How long compiling it may take (once; then it is cached).
    pub compile_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: ByteSize::mib(256),
            table_elements: 100_000,
            instances: 100,
            call_deadline: Duration::from_secs(5),
            output_records: 1_000_000,
            output_bytes: ByteSize::mib(256),
            state_value: ByteSize::mib(64),
            host_call_bytes: ByteSize::mib(256),
            side_outputs: 100,
            states: 1000,
            timers: 1_000_000,
            host_memory: ByteSize::gib(1),
            wasm_size: ByteSize::mib(100),
            compile_time: Duration::from_secs(120),
        }
    }
}

impl Limits {
    /// The job's `[limits]` table with an operator's `limits` table over it.
    pub(crate) fn resolve(
        job: Option<&toml::Table>,
        operator: Option<&toml::Table>,
    ) -> Result<Limits, String> {
        let mut merged = job.cloned().unwrap_or_default();
        merged.extend(operator.cloned().unwrap_or_default());
        let limits = Limits::deserialize(toml::Value::Table(merged)).map_err(|e| {
            let message = e.message();
            if message.contains("expected one of") {
                format!("limits: {message}")
            } else {
                format!(
                    "limits: {message}; the keys are memory, table_elements, instances, \
                     call_deadline, output_records, output_bytes, state_value, \
                     host_call_bytes, side_outputs, states, timers, host_memory, wasm_size and \
                     compile_time"
                )
            }
        })?;
        limits.validate()?;
        Ok(limits)
    }

    fn validate(&self) -> Result<(), String> {
        if self.memory.as_u64() < 1 << 20 || self.memory.as_u64() > MAX_MEMORY {
            return Err(format!(
                "limits: memory = \"{}\" is out of range; use 1 MiB to 4 GiB, the most a 32-bit \
                 WebAssembly instance can address",
                bytes(self.memory.as_u64())
            ));
        }
        if self.call_deadline < EPOCH_TICK {
            return Err(format!(
                "limits: call_deadline = {:?} is shorter than the deadline's resolution of {:?}",
                self.call_deadline, EPOCH_TICK
            ));
        }
        for (key, value) in [
            ("table_elements", self.table_elements),
            ("instances", self.instances),
            ("output_records", self.output_records),
            ("output_bytes", self.output_bytes.as_u64()),
            ("state_value", self.state_value.as_u64()),
            ("host_call_bytes", self.host_call_bytes.as_u64()),
            ("side_outputs", self.side_outputs),
            ("states", self.states),
            ("timers", self.timers),
            ("host_memory", self.host_memory.as_u64()),
            ("wasm_size", self.wasm_size.as_u64()),
            ("compile_time", self.compile_time.as_millis() as u64),
        ] {
            if value == 0 {
                return Err(format!("limits: {key} must be greater than 0"));
            }
        }
        Ok(())
    }
}

/// A guest call went over one of its limits: the error a host function or the resource
/// limiter fails the call with, recognised again when the call returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitExceeded {
    pub limit: Limit,
    /// What the guest did, and the limit's value.
    pub message: String,
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} limit exceeded: {}; raise `limits.{}` of the operator if this is expected",
            self.limit.key().replace('_', " "),
            self.message,
            self.limit.key()
        )
    }
}

impl std::error::Error for LimitExceeded {}

impl LimitExceeded {
    pub(crate) fn error(limit: Limit, message: String) -> wasmtime::Error {
        wasmtime::Error::new(LimitExceeded { limit, message })
    }
}

/// Shows a byte count as people write it in a spec: "256 MiB", "1.5 GiB".
pub(crate) fn bytes(n: u64) -> String {
    for (unit, size) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    if n < 1 << 10 {
        return format!("{n} bytes");
    }
    ByteSize::b(n).display().iec().to_string()
}

/// Advances `engine`'s epoch every tick for as long as the engine lives (its components and
/// stores keep it alive).
pub(crate) fn start_ticker(engine: &Engine) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
}

/// Refuses growth of an instance's memories and tables beyond its limits, and more
/// instances, memories or tables than `instances`; counts the linear memory it allowed.
#[derive(Debug)]
pub(crate) struct Limiter {
    pub limits: Limits,
    /// Bytes of linear memory the store's memories hold (they grow, never shrink).
    pub memory_bytes: u64,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.limits.memory.as_u64() {
            return Err(LimitExceeded::error(
                Limit::Memory,
                format!(
                    "the operator tried to grow its linear memory from {} to {}, over the limit \
                     of {}",
                    bytes(current as u64),
                    bytes(desired as u64),
                    bytes(self.limits.memory.as_u64())
                ),
            ));
        }
        self.memory_bytes += desired.saturating_sub(current) as u64;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.limits.table_elements {
            return Err(LimitExceeded::error(
                Limit::TableElements,
                format!(
                    "the operator tried to grow a table from {current} to {desired} elements, \
                     over the limit of {}",
                    self.limits.table_elements
                ),
            ));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.limits.instances as usize
    }

    fn memories(&self) -> usize {
        self.limits.instances as usize
    }

    fn tables(&self) -> usize {
        self.limits.instances as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn growth_within_limits_is_allowed_and_beyond_is_an_error_naming_the_limit() {
        let mut l = Limiter {
            limits: Limits::default(),
            memory_bytes: 0,
        };
        assert!(l.memory_growing(1 << 20, 2 << 20, None).unwrap());
        let err = l.memory_growing(1 << 20, 300 << 20, None).unwrap_err();
        let limit = err.downcast_ref::<LimitExceeded>().unwrap();
        assert_eq!(limit.limit, Limit::Memory);
        assert!(err.to_string().contains("limit of 256 MiB"), "{err}");
        assert!(err.to_string().contains("`limits.memory`"), "{err}");
        assert!(l.table_growing(10, 20, None).unwrap());
        let err = l.table_growing(10, 200_000, None).unwrap_err();
        assert!(err.to_string().contains("limit of 100000"), "{err}");
    }

    #[test]
    fn an_operators_limits_override_the_jobs_key_by_key() {
        let job = table("memory = \"64 MiB\"\ncall_deadline = \"2s\"");
        let op = table("memory = \"1GiB\"\noutput_records = 10");
        let l = Limits::resolve(Some(&job), Some(&op)).unwrap();
        assert_eq!(l.memory, ByteSize::gib(1));
        assert_eq!(l.call_deadline, Duration::from_secs(2));
        assert_eq!(l.output_records, 10);
        assert_eq!(l.state_value, Limits::default().state_value);
        assert_eq!(Limits::resolve(None, None).unwrap(), Limits::default());
    }

    #[test]
    fn bad_limits_are_refused_naming_the_key() {
        let err = |text: &str| Limits::resolve(Some(&table(text)), None).unwrap_err();
        assert!(err("memory = \"8 GiB\"").contains("memory"));
        assert!(err("call_deadline = \"1ms\"").contains("call_deadline"));
        assert!(err("output_records = 0").contains("output_records"));
        let unknown = err("memroy = 5");
        assert!(
            unknown.contains("memroy") && unknown.contains("expected one of `memory`"),
            "{unknown}"
        );
        assert!(err("memory = 5").contains("out of range; use 1 MiB to 4 GiB"));
        let mistyped = err("call_deadline = 5");
        assert!(mistyped.contains("the keys are memory"), "{mistyped}");
    }
}
