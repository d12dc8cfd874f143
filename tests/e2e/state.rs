//! Value, list and map state semantics and event-time timers, through the state-probe guest:
//! each input line `KEY COMMAND` is keyed by the keyer guest, routed with `key_by`, and the
//! probe answers every command with one `KEY<TAB>RESULT` line.
//!
//! The commands and their results are the conformance script `tests/conformance/state.txt`,
//! which the state-probe guest's unit test also runs through the SDK's test harness, so that
//! the host and the harness agree. Commands of one key are spread over several batches by
//! blocks of filler commands on other keys, so state must survive between batches.

use std::collections::BTreeMap;

use crate::support::{
    Workspace, key_value, key_value_file_sink, keyed_operators, part_files, repo, toml_path,
};

#[path = "../conformance/script.rs"]
mod script;

use script::{Conformance, Step};

/// The conformance script.
fn conformance() -> Conformance {
    let path = repo().join("tests").join("conformance").join("state.txt");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    script::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The probe job at `parallelism`, with `backend` as its keyed-state backend.
fn probe_job(ws: &Workspace, steps: &[Step], parallelism: u32, backend: &str) -> String {
    probe_job_of(ws, steps, parallelism, backend, RUST_PROBE)
}

/// The state probes: the Rust SDK's and the Python SDK's.
const RUST_PROBE: &str = "weir_test_state_probe";
const PYTHON_PROBE: &str = "weir_test_state_probe_py";
const JS_PROBE: &str = "weir_test_state_probe_js";

/// [`probe_job`] with the state probe component `probe`.
fn probe_job_of(
    ws: &Workspace,
    steps: &[Step],
    parallelism: u32,
    backend: &str,
    probe: &str,
) -> String {
    let lines: String = steps
        .iter()
        .map(|s| format!("{} {}\n", s.key, s.command))
        .collect();
    let input = ws.write("commands.txt", lines);
    format!(
        r#"
[job]
name = "state-probe"
parallelism = {parallelism}

[state]
backend = "{backend}"
{timers}

[[source]]
name = "commands"
type = "file"
path = {input}
# One reader and one keyer keep each key's commands in file order.
parallelism = 1
{operators}{sink}"#,
        input = toml_path(&input),
        operators = keyed_operators("commands", "parallelism = 1", probe),
        sink = key_value_file_sink("probe", &ws.path("out")),
        // RocksDB caches 4 values (so list appends are merges) and keeps 2 timers per domain
        // in memory, the others in RocksDB.
        timers = if backend == "rocksdb" {
            "cache_entries = 4\ntimer_cache = 2"
        } else {
            ""
        },
    )
}

#[test]
fn state_and_timers_give_exact_results() {
    exact_results("memory", RUST_PROBE);
}

#[test]
fn state_and_timers_give_exact_results_on_rocksdb() {
    exact_results("rocksdb", RUST_PROBE);
}

#[test]
fn state_and_timers_of_the_python_sdk_give_exact_results() {
    exact_results("memory", PYTHON_PROBE);
    exact_results("rocksdb", PYTHON_PROBE);
}

#[test]
fn state_and_timers_of_the_javascript_sdk_give_exact_results() {
    exact_results("memory", JS_PROBE);
    exact_results("rocksdb", JS_PROBE);
}

fn exact_results(backend: &str, probe: &str) {
    let ws = Workspace::new();
    let script = conformance();
    let steps = script::input(&script.scripts);
    ws.run_ok(&probe_job_of(&ws, &steps, 1, backend, probe));
    let parts = part_files(&ws.path("out"));
    let got: Vec<(&str, &str)> = parts[&0].iter().map(|l| key_value(l)).collect();
    let mut want: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| (s.key.as_str(), s.expect.as_str()))
        .collect();
    want.extend(script.at_end.iter().map(|(k, r)| (k.as_str(), r.as_str())));
    // Compare the first difference rather than thousands of lines.
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let command = steps.get(i).map_or("(timer)", |s| s.command.as_str());
        assert_eq!(
            g,
            w,
            "{probe} on {backend}: output line {} (command {command:?})",
            i + 1
        );
    }
    assert_eq!(got.len(), want.len(), "number of output lines");
}

#[test]
fn keys_keep_their_own_state_across_subtasks() {
    // At parallelism 3 the keys are spread over subtasks; each key's results, in order, must
    // be the same as at parallelism 1, and each key must be answered by one subtask only.
    // (On RocksDB: the memory backend's results are checked at parallelism 1.)
    let ws = Workspace::new();
    let script = conformance();
    let steps = script::input(&script.scripts);
    ws.run_ok(&probe_job(&ws, &steps, 3, "rocksdb"));
    let mut want: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in &steps {
        want.entry(&s.key).or_default().push(&s.expect);
    }
    for (key, result) in &script.at_end {
        want.entry(key.as_str()).or_default().push(result.as_str());
    }
    let mut got: BTreeMap<&str, (usize, Vec<&str>)> = BTreeMap::new();
    let parts = part_files(&ws.path("out"));
    assert_eq!(parts.len(), 3);
    for (&part, lines) in &parts {
        for line in lines {
            let (key, result) = key_value(line);
            let entry = got.entry(key).or_insert((part, Vec::new()));
            assert_eq!(entry.0, part, "key {key:?} is answered by two subtasks");
            entry.1.push(result);
        }
    }
    let got: BTreeMap<&str, Vec<&str>> = got.into_iter().map(|(k, (_, r))| (k, r)).collect();
    assert_eq!(got, want);
}
