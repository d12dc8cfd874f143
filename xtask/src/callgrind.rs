//! Instructions per record under callgrind, split by where they go: `cargo xtask
//! bench-operators --callgrind` runs each job once, on memory state without checkpoints, under
//! `valgrind --tool=callgrind` (instruction counts are exact and do not depend on the machine's
//! load), and splits the total by the inclusive counts of the functions that enter each part.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The parts, each the sum of the inclusive counts of its entry functions (none nested in
/// another of the same part), matched at the end of their demangled names.
const PARTS: &[(&str, &[&str])] = &[
    (
        "host state",
        &[
            "weir::wasm::host::state::<impl weir::wasm::host::HostState>::load",
            "weir::wasm::host::state::<impl weir::wasm::host::HostState>::store",
        ],
    ),
    (
        "timers",
        &[
            "stream::timers::Host for weir::wasm::host::HostState>::update",
            "weir::state::keyed_timers::<impl weir::state::KeyedState>::pop_timer",
        ],
    ),
    (
        "output",
        &["stream::output::Host for weir::wasm::host::HostState>::emit"],
    ),
    (
        "channels",
        &[
            "weir::runtime::output::Output::push",
            "weir::runtime::output::Output::flush",
        ],
    ),
    (
        "source, sink",
        &[
            "FileSource as weir::connectors::Source>::poll",
            "FileSink as weir::connectors::Sink>::write",
        ],
    ),
];

/// The parts above that run inside calls into guests (host imports).
const IN_GUEST_CALLS: &[&str] = &["host state", "timers", "output"];

/// The calls into the guests: guest code, the boundary, and the host imports above. (None
/// called by another: `close` fires the last timers through `fire_timers`, so it is left
/// out, and with it the guests' own `close`, which the benchmark jobs do not use.)
const GUEST: &[&str] = &[
    "<weir::wasm::operator::WasmOperator as weir::operator::Operator>::process_input",
    "weir::wasm::operator::WasmOperator::fire_timers",
];

/// Loading the components and, on a cold cache, compiling them (wasmtime compiles functions
/// in parallel on rayon's threads): not per record.
const STARTUP: &[&str] = &[
    "weir::wasm::engine::WasmEngine::load",
    "rayon_core::registry::ThreadBuilder::run",
];

/// Instructions of one run, by part.
#[derive(Debug)]
pub(crate) struct Split {
    /// All but the start-up.
    pub total: u64,
    pub startup: u64,
    /// `(part, instructions)`, guest code first, the rest last.
    pub parts: Vec<(&'static str, u64)>,
}

/// Installs valgrind with apt where it is missing.
pub(crate) fn ensure_valgrind() -> Result<()> {
    if Command::new("valgrind").arg("--version").output().is_ok() {
        return Ok(());
    }
    crate::exec(Command::new("apt-get").args(["install", "-y", "valgrind"]))
        .context("valgrind is needed for --callgrind; install it (apt-get install valgrind)")
}

/// Splits the counts of the callgrind output file `out`.
pub(crate) fn split(out: &Path) -> Result<Split> {
    let annotated = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(out)
        .output()
        .context("cannot run callgrind_annotate")?;
    if !annotated.status.success() {
        bail!(
            "callgrind_annotate failed: {}",
            String::from_utf8_lossy(&annotated.stderr)
        );
    }
    let text = String::from_utf8_lossy(&annotated.stdout);
    let mut total = None;
    // A function's instructions are listed per source file its code came from (inlining);
    // the line of the largest count is the function's inclusive count.
    let mut functions: std::collections::HashMap<String, u64> = Default::default();
    for line in text.lines() {
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        if rest.contains("PROGRAM TOTALS") {
            total = Some(count);
            continue;
        }
        // "(12.3%)  file:function [object]"
        let name = rest.split_once(')').map_or(rest, |(_, n)| n).trim();
        let name = name.rsplit_once(" [").map_or(name, |(n, _)| n);
        let most = functions
            .entry(function_name(name).to_string())
            .or_default();
        *most = (*most).max(count);
    }
    let total = total.context("callgrind_annotate printed no PROGRAM TOTALS")?;
    let sum = |entries: &[&str]| -> u64 {
        functions
            .iter()
            .filter(|(name, _)| entries.iter().any(|e| name.ends_with(e)))
            .map(|(_, n)| n)
            .sum()
    };
    let startup = sum(STARTUP);
    let total = total.saturating_sub(startup);
    let mut parts: Vec<(&'static str, u64)> = PARTS.iter().map(|(p, e)| (*p, sum(e))).collect();
    let inside: u64 = parts
        .iter()
        .filter(|(p, _)| IN_GUEST_CALLS.contains(p))
        .map(|(_, n)| n)
        .sum();
    let guest = sum(GUEST);
    if guest == 0 {
        // The jobs run guests: the entry points were renamed, and every part would be wrong.
        bail!(
            "{}: no call into a guest found under the names in xtask/src/callgrind.rs \
             (GUEST); update them to the host's entry points into a guest",
            out.display()
        );
    }
    parts.insert(0, ("guest code, boundary", guest.saturating_sub(inside)));
    let counted: u64 = parts.iter().map(|(_, n)| n).sum();
    parts.push(("the rest", total.saturating_sub(counted)));
    Ok(Split {
        total,
        startup,
        parts,
    })
}

/// The function of `file:function` (a path has no `::`, a function name may).
fn function_name(located: &str) -> &str {
    let bytes = located.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':') {
            return &located[i + 1..];
        }
    }
    located
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_function_is_after_the_file() {
        assert_eq!(
            function_name("/w/host/src/state/mod.rs:weir::state::KeyedState::load"),
            "weir::state::KeyedState::load"
        );
        assert_eq!(
            function_name("???:crossbeam_channel::select::Select::select"),
            "crossbeam_channel::select::Select::select"
        );
    }
}
