//! Instructions per record under callgrind, split by where they go: `cargo xtask
//! bench-operators --callgrind` runs each job once, on memory state without checkpoints, under
//! `valgrind --tool=callgrind` (instruction counts are exact and do not depend on the machine's
//! load), and splits the total by the inclusive counts of the functions that enter each part.
//! With `--functions N` it also lists the N functions that run the most instructions
//! themselves, the guests' functions by their names (from the map of the guests' code that
//! wasmtime's `perfmap` agent writes for the run).

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench::run_job_by;
use crate::{exec, guests};

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

/// `weir` built with wasmtime's profiling agents (copied to `release/weir-profiling`; the next
/// plain build puts the plain binary back in `release/weir`), and the guests `packages` built
/// with their function names (in `guest-symbols/` of the target directory, so that the guests
/// of `build/operators` stay as they are): what `--functions` runs.
pub(crate) fn with_symbols(packages: &[&str]) -> Result<(PathBuf, PathBuf)> {
    let target = crate::target_dir()?;
    exec(crate::cargo().args([
        "build",
        "--release",
        "-p",
        "weir",
        "--bins",
        "--features",
        "profiling",
    ]))?;
    let weir = target.join("release").join("weir-profiling");
    std::fs::copy(target.join("release").join("weir"), &weir)
        .with_context(|| format!("cannot copy weir to {}", weir.display()))?;
    let symbols = target.join("guest-symbols");
    let mut build = crate::cargo();
    build
        .args(["build", "--profile", "guest", "--target", guests::TARGET])
        .args(["--config", "profile.guest.strip=false", "--target-dir"])
        .arg(&symbols);
    for package in packages {
        build.args(["-p", package]);
    }
    exec(&mut build)?;
    Ok((weir, symbols.join(guests::TARGET).join("guest")))
}

/// Runs the job `spec` once under callgrind, its counts into `out`; with `functions`, with
/// [`FUNCTION_OPTIONS`] and the guests' names in wasmtime's perf map (`weir` built by
/// [`with_symbols`]). The spec must allow calls far longer than usual (`[limits]
/// call_deadline`): under callgrind a batch runs some fifty times slower. `sink_dir`, where
/// the job writes its output, is emptied before the measured run, for its output to be
/// checked.
pub(crate) fn run(
    weir: &Path,
    spec: &Path,
    summary: &Path,
    out: &Path,
    sink_dir: Option<&Path>,
    functions: bool,
) -> Result<()> {
    // Once under valgrind without a tool, so that the components are compiled (into weir's
    // cache) before: for the CPU valgrind presents and the same profiler, which are part of
    // the cache's key.
    let mut warm_up = Command::new("valgrind");
    warm_up.args(["--tool=none", "-q"]).arg(weir);
    if functions {
        warm_up.env("WEIR_WASM_PROFILER", "perfmap");
    }
    run_job_by(warm_up, spec, summary, &[])?;
    if let Some(dir) = sink_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    let mut command = Command::new("valgrind");
    command
        .args(["--tool=callgrind", "--dump-line=no"])
        .arg(format!("--callgrind-out-file={}", out.display()));
    if functions {
        command
            .args(FUNCTION_OPTIONS)
            .env("WEIR_WASM_PROFILER", "perfmap");
    }
    command.arg(weir);
    run_job_by(command, spec, summary, &[]).map(|_| ())
}

/// Prints the `n` functions of `listed` that run the most instructions themselves, per unit
/// of `per` (records, words) and as a share of `total`.
pub(crate) fn print_functions(listed: &[Function], n: usize, per: u64, total: u64) {
    println!("    functions by their own instructions (G: guest, H: host):");
    for f in listed.iter().take(n) {
        // The end of a long name says the most: the function, not its crate.
        let cut = f.name.len().saturating_sub(110);
        let name = &f.name[f.name.ceil_char_boundary(cut)..];
        println!(
            "    {} {:>7} {:>5.1} %  {name}",
            if f.guest { 'G' } else { 'H' },
            f.instructions / per,
            f.instructions as f64 * 100.0 / total as f64
        );
    }
}

/// The instructions of the callgrind output file `out`, start-up left out, without a split:
/// for jobs without guests.
pub(crate) fn total(out: &Path) -> Result<u64> {
    let (total, functions) = inclusive(out)?;
    Ok(total.saturating_sub(sum(&functions, STARTUP)))
}

/// Splits the counts of the callgrind output file `out`.
pub(crate) fn split(out: &Path) -> Result<Split> {
    let (total, functions) = inclusive(out)?;
    let sum = |entries: &[&str]| sum(&functions, entries);
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

/// The inclusive counts of the functions whose names end in one of `entries`.
fn sum(functions: &HashMap<String, u64>, entries: &[&str]) -> u64 {
    functions
        .iter()
        .filter(|(name, _)| entries.iter().any(|e| name.ends_with(e)))
        .map(|(_, n)| n)
        .sum()
}

/// The program's total and each function's inclusive count in the callgrind output file
/// `out`.
fn inclusive(out: &Path) -> Result<(u64, HashMap<String, u64>)> {
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
    let mut functions: HashMap<String, u64> = HashMap::new();
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
    Ok((total, functions))
}

/// Instructions a function runs itself (its callees' not counted).
#[derive(Debug)]
pub(crate) struct Function {
    pub name: String,
    /// Compiled from a guest (named by the perf map) rather than part of the host.
    pub guest: bool,
    pub instructions: u64,
}

/// The valgrind options [`functions`] needs: a cost line per instruction, positions and names
/// written out in full; nothing counted while the components load (hashing them, and on a cold
/// cache compiling them, is not per record).
pub(crate) const FUNCTION_OPTIONS: &[&str] = &[
    "--dump-instr=yes",
    "--compress-pos=no",
    "--compress-strings=no",
    "--toggle-collect=weir::wasm::engine::WasmEngine::load",
    // After the toggle, which would otherwise start the run with nothing counted.
    "--collect-atstart=yes",
];

/// The functions of the callgrind output file `out` (written with [`FUNCTION_OPTIONS`]) by the
/// instructions they run themselves, most first; instructions at addresses of the run's perf
/// map, `perf-<pid>.map` in `maps` (`/tmp`, where wasmtime writes it), go to the guest
/// functions it names.
pub(crate) fn functions(out: &Path, maps: &Path) -> Result<Vec<Function>> {
    let file =
        std::fs::File::open(out).with_context(|| format!("cannot open {}", out.display()))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let mut names: Vec<(String, bool)> = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut id = |name: &str, guest: bool, names: &mut Vec<(String, bool)>| match ids.get(name) {
        Some(&i) => i,
        None => {
            names.push((name.to_string(), guest));
            ids.insert(name.to_string(), names.len() - 1);
            names.len() - 1
        }
    };
    // (start, end, function id), by start, once the header has named the process.
    let mut guest_code: Vec<(u64, u64, usize)> = Vec::new();
    let mut costs: Vec<u64> = Vec::new();
    let mut current = None;
    while let Some(line) = lines.next() {
        let line = line?;
        if let Some(pid) = line.strip_prefix("pid: ") {
            let map = maps.join(format!("perf-{}.map", pid.trim()));
            let text = std::fs::read_to_string(&map).with_context(|| {
                format!(
                    "cannot read {}, the names of the guests' code: was weir built with \
                     --features profiling and run with WEIR_WASM_PROFILER=perfmap?",
                    map.display()
                )
            })?;
            for entry in text.lines() {
                let mut fields = entry.splitn(3, ' ');
                let (Some(start), Some(size), Some(name)) =
                    (fields.next(), fields.next(), fields.next())
                else {
                    continue;
                };
                let start = start.trim_start_matches("0x");
                let (Ok(start), Ok(size)) = (
                    u64::from_str_radix(start, 16),
                    u64::from_str_radix(size, 16),
                ) else {
                    continue;
                };
                guest_code.push((start, start + size, id(&readable(name), true, &mut names)));
            }
            // wasmtime names a function twice, demangled first: keep the first name.
            guest_code.sort_by_key(|&(start, _, _)| start);
            guest_code.dedup_by_key(|&mut (start, _, _)| start);
        } else if let Some(name) = line.strip_prefix("fn=") {
            current = Some(id(name, false, &mut names));
        } else if line.starts_with("calls=") {
            // The next line is the call's inclusive cost, which is its callee's.
            lines.next();
        } else if let Some(rest) = line.strip_prefix("0x") {
            let mut fields = rest.split_ascii_whitespace();
            let (Some(addr), Some(cost)) = (fields.next(), fields.next()) else {
                continue;
            };
            let (Ok(addr), Ok(cost)) = (u64::from_str_radix(addr, 16), cost.parse::<u64>()) else {
                continue;
            };
            let at = guest_code.partition_point(|&(start, _, _)| start <= addr);
            let function = match at.checked_sub(1).map(|i| guest_code[i]) {
                Some((_, end, f)) if addr < end => f,
                _ => current.context("a cost line before any fn= line")?,
            };
            if costs.len() <= function {
                costs.resize(names.len(), 0);
            }
            costs[function] += cost;
        }
    }
    if guest_code.is_empty() {
        bail!("{}: no pid: line, or an empty perf map", out.display());
    }
    costs.resize(names.len(), 0);
    let mut functions: Vec<Function> = names
        .into_iter()
        .zip(costs)
        .filter(|(_, n)| *n > 0)
        .map(|((name, guest), instructions)| Function {
            name,
            guest,
            instructions,
        })
        .collect();
    functions.sort_unstable_by_key(|f| std::cmp::Reverse(f.instructions));
    Ok(functions)
}

/// A guest function's name without the hashes rustc adds (`::h0123…` at the end, `[0123…]`
/// after a crate's name).
fn readable(name: &str) -> String {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let name = match name.rsplit_once("::h") {
        Some((front, hash)) if hash.len() == 16 && hex(hash) => front,
        _ => name,
    };
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').map(|c| open + c);
        match close {
            Some(close) if hex(&rest[open + 1..close]) => {
                out.push_str(&rest[..open]);
                rest = &rest[close + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = &rest[open + 1..];
            }
        }
    }
    out.push_str(rest);
    out
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

    #[test]
    fn guest_code_is_named_by_the_perf_map_and_calls_are_not_self_cost() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("perf-42.map"),
            "0x7000 40 guest::process\n0x7040 10 core[0a1b]::load::h0123456789abcdef\n",
        )
        .unwrap();
        let out = dir.path().join("callgrind.out");
        std::fs::write(
            &out,
            "# callgrind format\nversion: 1\npid: 42\npositions: instr\nevents: Ir\n\
             ob=/weir\nfl=/w/src/a.rs\nfn=weir::run\n0x1000 5\n0x1004 1\n\
             cfn=0x7000\ncalls=1 0x7000\n0x1008 900\n\
             fn=0x7000\n0x7000 30\n0x703f 2\n0x7040 7\n\
             fn=weir::run\n0x1010 4\n",
        )
        .unwrap();
        let found: Vec<(String, bool, u64)> = functions(&out, dir.path())
            .unwrap()
            .into_iter()
            .map(|f| (f.name, f.guest, f.instructions))
            .collect();
        assert_eq!(
            found,
            [
                ("guest::process".to_string(), true, 32),
                ("weir::run".to_string(), false, 10),
                ("core::load".to_string(), true, 7),
            ]
        );
    }
}
