//! WebAssembly operators: the wasmtime engine and compiled-component cache (`engine`), the
//! host side of the WIT imports (`host`), the limits of an instance (`limits`), what it may
//! reach outside (`capabilities`) and the operator that runs a component instance
//! (`operator`).

mod capabilities;
mod engine;
mod host;
mod interrupt;
mod limits;
mod operator;

pub use capabilities::{DirGrant, Grants};
pub use engine::{EngineOptions, OperatorComponent, WORLD, WasmEngine, WasmError};
pub(crate) use limits::bytes;
pub use limits::{Limit, Limits};
pub(crate) use operator::WasmOperator;

/// Text that came from a guest (a log line, an error), made safe to print: control
/// characters (a newline, a terminal escape) and bidirectional overrides are shown escaped,
/// never interpreted, and the text is cut after `max` characters, saying how much was cut.
pub(crate) fn guest_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for (i, (at, c)) in text.char_indices().enumerate() {
        if i == max {
            out.push_str(&format!("… ({} more bytes cut)", text.len() - at));
            break;
        }
        if c.is_control() || is_bidi_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The characters that reorder how text around them is shown.
pub(crate) fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

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
