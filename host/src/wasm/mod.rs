//! WebAssembly operators: the wasmtime engine and compiled-component cache (`engine`), the
//! host side of the WIT imports (`host`), the limits of an instance (`limits`), what it may
//! reach outside (`capabilities`) and the operator that runs a component instance
//! (`operator`).

mod capabilities;
mod engine;
mod host;
mod limits;
mod operator;

pub use capabilities::{DirGrant, Grants};
pub use engine::{EngineOptions, OperatorComponent, WasmEngine, WasmError};
pub use limits::{Limit, Limits};
pub(crate) use operator::WasmOperator;

/// Bytes of a key or value for an error message: quoted text if UTF-8, else hex; shortened.
pub(crate) fn describe_bytes(bytes: &[u8]) -> String {
    const MAX: usize = 64;
    let more = if bytes.len() > MAX { "…" } else { "" };
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            let short: String = text.chars().take(MAX).collect();
            let more = if short.len() < text.len() { "…" } else { "" };
            format!("\"{}{more}\"", short.escape_debug())
        }
        Err(_) => {
            let hex: String = bytes.iter().take(MAX).map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}{more}")
        }
    }
}

wasmtime::component::bindgen!({
    path: "../wit",
    world: "processor",
    imports: { default: trappable },
});
