//! WebAssembly operators: the wasmtime engine and compiled-component cache (`engine`), the
//! host side of the WIT imports (`host`), the limits of an instance (`limits`) and the operator
//! that runs a component instance (`operator`).

mod engine;
mod host;
mod limits;
mod operator;

pub use engine::{OperatorComponent, WasmEngine, WasmError};
pub(crate) use operator::WasmOperator;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "processor",
    imports: { default: trappable },
});
