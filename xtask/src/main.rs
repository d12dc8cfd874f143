//! Project automation, run as `cargo xtask <command>` (the alias is in `.cargo/config.toml`).
//!
//! - `guests`: build every guest component and copy it to `build/operators/`
//! - `demo`: build everything, run the word count example and show its top words
//! - `services`: make the services the tests use ready (PostgreSQL with prepared transactions)
//! - `test`: everything CI runs, failing fast
//! - `soak [--iterations N]`: the crash tests over and over, with a tally (not in CI)
//! - `bench [--words N] [--runs R] [--compare BIN]`: word count throughput, WASM vs native
//!   operators (and against another `weir` binary)
//! - `bench-checkpoints [--records N] [--runs R] [--keys K]`: throughput with checkpoints off and on,
//!   checkpoint duration and size at 100k and 1M keys
//! - `bench-postgres [--rows N] [--runs R]`: rows/s into PostgreSQL per sink mode, and the time
//!   from a row's write to its visibility
//! - `bench-state [--keys N]...`: memory vs RocksDB state, full vs incremental checkpoints
//! - `bench-serve [--keys K] [--words N]`: the service's operations and its cost
//! - `openapi`: write the HTTP API's document to `docs/openapi.json`
//! - `fuzz-api [--cases N]`: schemathesis against `weir serve` (part of `test`)

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

mod api;
mod bench;
mod bench_checkpoints;
mod bench_languages;
mod bench_operators;
mod bench_postgres;
mod bench_serve;
mod bench_state;
mod bench_windows;
mod callgrind;
mod demo;
mod guests;
mod services;
mod soak;
mod test;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  guests                      build the guest components into build/operators/
                              (Rust; Python and JavaScript with `weir build`,
                              which installs componentize-py, componentize-js
                              and esbuild on first use)
  pytest                      the Python SDK's and examples' tests (pytest)
  node-test                   the JavaScript SDK's and examples' tests (node --test)
  demo                        build everything and run examples/wordcount
  services                    make PostgreSQL ready for the tests (install, start,
                              max_prepared_transactions = 64)
  test                        run everything CI runs (fmt, clippy, guests, pytest,
                              node-test, build, services, tests)
  soak [--iterations N]       run the SIGKILL crash tests N times (default 3) and
                              print runs, kills, rows compared and mismatches
  bench [--words N] [--runs R] [--compare BIN] [--callgrind] [--functions N]
                              word count throughput, WASM vs native operators
                              (default 5000000 words, 3 runs); with --compare,
                              also with another weir binary, before/after
                              a change; --callgrind: instructions per word by
                              part instead (default 1000000 words),
                              --functions N: and the N functions (host and
                              guest) that run the most
  bench-checkpoints [--records N] [--runs R] [--keys K]
                              keyed count with checkpoints off and every second:
                              throughput, checkpoint duration and size at 100k
                              and 1M keys (default 40000000 records, 3 runs)
  bench-postgres [--rows N] [--runs R]
                              rows/s into PostgreSQL in append and upsert mode with
                              checkpoints every second, and write-to-visible latency
                              (default 2000000 rows, 3 runs)
  bench-state [--keys N]...   memory vs RocksDB: throughput, checkpoint duration and
                              bytes (full vs incremental) after 1% of the keys
                              changed, restore time (default 1M and 10M keys)
  bench-serve [--keys K] [--words N]
                              weir serve: submit-to-first-record, savepoint time and
                              size (1M and 10M keys, both backends), rescale
                              downtime, throughput against weir run
  bench-operators [--records N] [--runs R] [--no-flink] [--callgrind]
                  [--functions N] [--job scorer|topn] [--state memory|rocksdb]
                              operators as users write them (account scorer, top-N),
                              weir and Flink 2.3 (bench/flink)
                              on memory and RocksDB, with and without checkpoints:
                              records/s, CPU, peak RSS, output checked (default
                              3000000 records, 3 runs); --callgrind: instructions
                              per record by part, --functions N: and the N
                              functions (host and guest) that run the most
  bench-windows [--events N] [--state memory|rocksdb] [--no-flink]
                              keyed tumbling and sliding window counts, built in and
                              as a WebAssembly aggregate, memory and RocksDB, beside
                              Flink 2.3: events/s, CPU, peak RSS, output checked
                              (default 50000000 events)
  bench-languages [--words N] [--no-pyflink]
                              the word count's operators in Rust, Python and
                              JavaScript beside PyFlink's Python DataStream API:
                              words/s, CPU, peak RSS, output checked (default
                              2000000 words)
  bench-upgrade [--keys K] [--swaps N] [--backend memory|rocksdb]
                              hot deploy: pause per subtask over N swaps (default
                              100) at K keys (default 1M), throughput around a
                              swap, request to commit, against stop-with-savepoint
                              and resubmit
  openapi                     write the HTTP API's document to docs/openapi.json
  fuzz-api [--cases N]        fuzz `weir serve` from its document with schemathesis
                              (default 100 cases per operation)";

fn main() -> ExitCode {
    match dispatch(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: Vec<String>) -> Result<()> {
    let Some((command, rest)) = args.split_first() else {
        bail!("no command given\n\n{USAGE}");
    };
    match command.as_str() {
        "guests" => no_args(rest).and_then(|()| guests::run()),
        "pytest" => no_args(rest).and_then(|()| guests::pytest()),
        "node-test" => no_args(rest).and_then(|()| guests::node_test()),
        "demo" => no_args(rest).and_then(|()| demo::run()),
        "services" => no_args(rest).and_then(|()| services::run()),
        "test" => no_args(rest).and_then(|()| test::run()),
        "soak" => soak::run(rest),
        "bench" => bench::run(bench::Options::parse(rest)?),
        "bench-checkpoints" => bench_checkpoints::run(bench_checkpoints::Options::parse(rest)?),
        "bench-postgres" => bench_postgres::run(bench_postgres::Options::parse(rest)?),
        "bench-state" => bench_state::run(rest),
        "bench-serve" => bench_serve::run(rest),
        "bench-operators" => bench_operators::run(rest),
        "bench-windows" => bench_windows::run(rest),
        "bench-languages" => bench_languages::run(rest),
        "bench-upgrade" => bench_serve::run_upgrade(rest),
        "openapi" => no_args(rest).and_then(|()| api::openapi()),
        "fuzz-api" => api::fuzz(rest),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command `{other}`\n\n{USAGE}"),
    }
}

fn no_args(rest: &[String]) -> Result<()> {
    match rest.first() {
        None => Ok(()),
        Some(arg) => bail!("unexpected argument `{arg}`\n\n{USAGE}"),
    }
}

/// The workspace root: the parent of this package's directory, which `cargo run` gives at run
/// time. (The compile-time path would be wrong when one target directory serves several
/// checkouts, as CI's does: cargo then reuses the xtask binary another checkout built.)
fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the current directory, as cargo
/// reads it) or `<repo>/target`.
fn target_dir() -> Result<PathBuf> {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => Ok(std::env::current_dir()
            .context("cannot read the current directory")?
            .join(dir)),
        _ => Ok(repo().join("target")),
    }
}

/// `cargo` as the one running us, with the workspace root as working directory.
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(repo());
    cmd
}

/// Runs `cmd` with inherited stdio; an error if it cannot start or exits unsuccessfully.
fn exec(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(())
}

/// `program arg arg ...`, for messages.
fn describe(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program())
        .file_name()
        .unwrap_or(cmd.get_program())
        .to_string_lossy()
        .into_owned();
    std::iter::once(program)
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The component cache the end-to-end tests' `weir` commands share (`tests/e2e/support.rs`).
fn e2e_component_cache() -> Result<PathBuf> {
    Ok(target_dir()?.join("release").join("e2e-component-cache"))
}

/// `cargo build --release -p weir` and the path of the binary it built.
fn build_weir() -> Result<PathBuf> {
    services::build_deps()?;
    exec(cargo().args(["build", "--release", "-p", "weir", "--bins"]))?;
    Ok(target_dir()?.join("release").join("weir"))
}
