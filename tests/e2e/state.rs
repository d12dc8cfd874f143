//! Value, list and map state semantics and event-time timers, through the state-probe guest:
//! each input line `KEY COMMAND` is keyed by the keyer guest, routed with `key_by`, and the
//! probe answers every command with one `KEY<TAB>RESULT` line.
//!
//! The commands and their results are the conformance script `tests/conformance/state.txt`,
//! which the state-probe guest's unit test also runs through the SDK's test harness, so that
//! the host and the harness agree. Commands of one key are spread over several batches by
//! blocks of filler commands on other keys, so state must survive between batches.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::{
    Workspace, key_value, key_value_file_sink, keyed_operators, part_files, repo, toml_path, wasm,
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

/// Time-to-live in event time, through each SDK's state declarations and the host's
/// backends: one line a step, `TIME<TAB>KEY<TAB>COMMAND<TAB>EXPECTED`, with the `t` commands
/// of the state probe (TTL 1 s; "tr" restarts it on reads too). Each step is a record at
/// event time TIME, and before the first step at each TIME the watermark reaches TIME: an
/// entry written at `t` has expired once a step runs at `t + 1000` or later.
const TTL_SCRIPT: &str = "\
1000	v	tvset a	ok
1000	r	trset a	ok
1000	l	tladd x	ok
1000	m	tmput a 1	ok
1600	l	tladd y	ok
1600	m	tmput b 2	ok
1800	m	tmput a 3	ok
1900	v	tvget	a
1900	r	trget	a
1900	l	tlget	[x,y]
2100	v	tvget	none
2100	l	tlget	[y]
2100	m	tmentries	{a=3,b=2}
2700	r	trget	a
2700	l	tlget	[]
2700	m	tmentries	{a=3}
2900	m	tmentries	{}
2900	m	tmput c 4	ok
3000	m	tmentries	{c=4}
3800	r	trget	none
3800	v	tvset b	ok
3900	v	tvget	b
";

/// A job at parallelism 2 that stamps `key,time,command` lines (`input`, written into `ws`)
/// with a parser whose watermark trails by nothing, and runs the commands through state
/// probe `probe` on `backend`, keyed; `limits` is a line for the probe (or none).
fn stamped_probe_job(
    ws: &Workspace,
    input: String,
    probe: &str,
    backend: &str,
    limits: &str,
) -> String {
    let input = ws.write("steps.txt", input);
    format!(
        r#"
[job]
name = "stamped-probe"
parallelism = 2

[state]
backend = "{backend}"

[[source]]
name = "steps"
type = "file"
path = {input}
parallelism = 1

[[operator]]
name = "parse"
uid = "parse"
{parse}
input = "steps"
parallelism = 1
config = {{ parse = true }}
watermark = {{ max_out_of_orderness = "0s" }}

[[operator]]
name = "probe"
uid = "probe"
{probe}
input = "parse"
edge = "key_by"
{limits}
{sink}"#,
        input = toml_path(&input),
        parse = wasm("weir_test_windows"),
        probe = wasm(probe),
        sink = key_value_file_sink("probe", &ws.path("out")),
    )
}

/// Runs [`TTL_SCRIPT`] through state probe `probe` on `backend` at parallelism 2 and checks
/// every answer. A record parser with a watermark that trails by nothing stamps the steps;
/// each new time is preceded by more filler records (key `fill`) at that time than two
/// batches hold, so its watermark has reached the probe before the step.
fn ttl_expires_as_the_watermark_passes(probe: &str, backend: &str) {
    let ws = Workspace::new();
    let steps: Vec<Vec<&str>> = TTL_SCRIPT
        .lines()
        .map(|l| l.split('\t').collect())
        .collect();
    let mut input = String::new();
    let mut time = "";
    for step in &steps {
        if step[0] != time {
            time = step[0];
            for _ in 0..9_000 {
                input.push_str(&format!("fill,{time},vget\n"));
            }
        }
        input.push_str(&format!("{},{},{}\n", step[1], step[0], step[2]));
    }
    let spec = stamped_probe_job(&ws, input, probe, backend, "");
    ws.run_ok(&spec);
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for step in &steps {
        want.entry(step[1].to_owned())
            .or_default()
            .push(step[3].to_owned());
    }
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in part_files(&ws.path("out")).into_values().flatten() {
        let (key, result) = key_value(&line);
        if key != "fill" {
            got.entry(key.to_owned())
                .or_default()
                .push(result.to_owned());
        }
    }
    assert_eq!(got, want, "{probe} on {backend}");
}

#[test]
fn state_with_an_event_time_ttl_expires_as_the_watermark_passes() {
    ttl_expires_as_the_watermark_passes(RUST_PROBE, "memory");
    ttl_expires_as_the_watermark_passes(RUST_PROBE, "rocksdb");
}

#[test]
fn state_ttl_of_the_python_sdk_expires_as_the_watermark_passes() {
    ttl_expires_as_the_watermark_passes(PYTHON_PROBE, "memory");
    ttl_expires_as_the_watermark_passes(PYTHON_PROBE, "rocksdb");
}

#[test]
fn state_ttl_of_the_javascript_sdk_expires_as_the_watermark_passes() {
    ttl_expires_as_the_watermark_passes(JS_PROBE, "memory");
    ttl_expires_as_the_watermark_passes(JS_PROBE, "rocksdb");
}

/// Runs state probe `probe` under a memory limit of 16 MiB over 12 batches (kept apart by
/// filler commands), each setting a value, adding to a list and, with `leak`, leaking
/// 3 MiB; a timer is registered first; `state` is the job's `[state]` table, if any. Returns
/// the probe's last three answers for key `k` (the value, the list, the timer firing at the
/// end), how many times its instance was renewed, and the run.
fn under_a_memory_limit(
    probe: &str,
    leak: bool,
    state: &str,
) -> (Vec<String>, u64, crate::support::Run) {
    let mut input = String::from("k timer 7\n");
    for i in 0..12 {
        input.push_str(&format!("k vset {i}\nk ladd {i}\n"));
        if leak {
            input.push_str("k leak 3145728\n");
        }
        input.push_str(&"fill vget\n".repeat(5_000));
    }
    input.push_str("k vget\nk lget\n");
    let ws = Workspace::new();
    let commands = ws.write("commands.txt", input);
    let spec = ws.write(
        "job.toml",
        format!(
            r#"
[job]
name = "leaky"

[[source]]
name = "commands"
type = "file"
path = {input}
{operators}limits = {{ memory = "16 MiB" }}
{sink}
{state}"#,
            input = toml_path(&commands),
            operators = keyed_operators("commands", "", probe),
            sink = key_value_file_sink("probe", &ws.path("out")),
        ),
    );
    let (run, renewed) = run_counting_renewals(&ws, &spec, "probe");
    let mut answers: Vec<String> = (part_files(&ws.path("out")).into_values().flatten())
        .filter(|l| l.starts_with("k\t"))
        .collect();
    let tail = answers.split_off(answers.len() - 3);
    (tail, renewed, run)
}

/// Runs the job `spec` to its end; returns the run and how many times the instances of its
/// vertex `name` were renewed (from its `--summary-json`).
fn run_counting_renewals(ws: &Workspace, spec: &Path, name: &str) -> (crate::support::Run, u64) {
    let run = ws.run_with_summary(spec);
    assert!(run.success(), "{run}");
    let summary = ws.summary();
    let vertex = (summary["vertices"].as_array().unwrap().iter())
        .find(|v| v["name"] == name)
        .unwrap();
    (run, vertex["guest"]["renewed"].as_u64().unwrap())
}

#[test]
fn a_window_function_that_leaks_continues_in_a_new_instance_and_every_window_fires_once() {
    // Sliding windows of 100k events with a process-window function leaking 4 KiB per window
    // against a limit of 16 MiB (48 MiB a subtask in all): each time an instance reaches
    // 12 MiB it is renewed, and the windows, which the host holds, fire in the next one.
    const EVENTS: u64 = 100_000;
    let run = |settings: &str| {
        let ws = Workspace::new();
        let spec = crate::deploy::windowed_spec(&ws, EVENTS, settings, "out");
        let (run, renewed) = run_counting_renewals(&ws, &spec, "windows");
        (crate::service::committed(&ws.path("out")), renewed, run)
    };
    let (reference, renewed, _) = run("");
    assert_eq!(renewed, 0);
    let (lines, renewed, run) = run("config = { leak = 4096 }\nlimits = { memory = \"16 MiB\" }\n");
    assert!((2..=24).contains(&renewed), "renewed {renewed} times");
    assert!(
        run.stderr().contains("carries on in a new instance"),
        "{run}"
    );
    // Every window fired once, with all its records, those before a renewal included.
    assert!(lines == reference, "the windows of a run without the leak");
}

#[test]
fn a_guest_that_leaks_continues_in_a_new_instance_with_its_state() {
    // 36 MiB leaked against a limit of 16 MiB, which failed the job before: each time an
    // instance reaches 12 MiB it is renewed, and the next one carries on with the value,
    // list and timer state of the old ones. With RocksDB state the probe keeps its value in
    // the guest from call to call (the write-back cache): an instance writes it back before
    // it is replaced.
    let all: Vec<String> = (0..12).map(|i| i.to_string()).collect();
    let want = [
        "k\t11".to_owned(),
        format!("k\t[{}]", all.join(",")),
        "k\tfired 7".to_owned(),
    ];
    for state in ["", "[state]\nbackend = \"rocksdb\"\n"] {
        let (tail, renewed, run) = under_a_memory_limit(RUST_PROBE, true, state);
        assert_eq!(tail, want, "{state}");
        // Each instance absorbs at least a quarter of the limit, 4 MiB, before it is renewed.
        assert!((2..=9).contains(&renewed), "renewed {renewed} times");
        assert!(
            run.stderr().contains("carries on in a new instance"),
            "{run}"
        );
    }
    // The Python probe starts with 12.75 MiB, over 3/4 of the limit, and does not grow by
    // a quarter of it: it is never renewed (renewing it would only start it over again).
    let (tail, renewed, _) = under_a_memory_limit(PYTHON_PROBE, false, "");
    assert_eq!((tail, renewed), (want.to_vec(), 0));
}

#[test]
fn what_a_call_emits_to_a_side_output_survives_the_renewal_that_follows_it() {
    // Each `leak-side` leaks 6 MiB against a limit of 16 MiB and emits to side output
    // `late`: every second one is followed by a renewal, and what it emitted there survives.
    let mut input = String::new();
    for _ in 0..5 {
        input.push_str("leak-side 6291456\n");
        input.push_str(&"pass\n".repeat(5_000));
    }
    let ws = Workspace::new();
    let lines = ws.write("lines.txt", input);
    let spec = ws.write(
        "job.toml",
        format!(
            r#"
[job]
name = "leaky-side"

[[source]]
name = "lines"
type = "file"
path = {lines}

[[operator]]
name = "op"
uid = "op"
wasm = {wasm}
input = "lines"
limits = {{ memory = "16 MiB" }}

[[sink]]
name = "main"
type = "discard"
input = "op"

[[sink]]
name = "late"
type = "file"
input = "op.late"
path = {late}
"#,
            lines = toml_path(&lines),
            wasm = toml_path(&crate::support::operator("weir_test_hostile")),
            late = toml_path(&ws.path("late")),
        ),
    );
    let (_, renewed) = run_counting_renewals(&ws, &spec, "op");
    assert_eq!(renewed, 2);
    let late: Vec<String> = part_files(&ws.path("late"))
        .into_values()
        .flatten()
        .collect();
    assert_eq!(late, vec!["leaked 6291456"; 5]);
}

#[test]
fn a_window_function_over_its_memory_limit_in_one_call_fails_naming_the_windows() {
    // 32 MiB a window against a limit of 16 MiB: no renewal can help, and the trap (about
    // which the guest says nothing) names the windows the call was firing, not the host's
    // encoding of the call.
    let settings = "config = { leak = 33554432 }\nlimits = { memory = \"16 MiB\" }\n";
    let run = failed_window_job("weir_test_window_process", settings);
    let stderr = run.stderr();
    assert!(
        stderr.contains("operator \"windows\"")
            && stderr.contains("memory limit exceeded")
            && stderr.contains("it was firing")
            && stderr.contains("of key \"")
            && !stderr.contains("value 0x"),
        "{run}"
    );
}

/// A window function that returns an error (or raises one in Python and JavaScript), or
/// panics, fails its job with a message that names the window it was firing and its key
/// (not the index and binary encoding of the host's call), after the function's own.
#[test]
fn a_window_function_that_fails_or_panics_names_the_window() {
    let fails = "this window function fails";
    for (component, fail, said) in [
        ("weir_test_window_process", "error", fails),
        (
            "weir_test_window_process",
            "panic",
            "this window function panics",
        ),
        ("weir_test_window_process_py", "error", fails),
        ("weir_test_window_process_js", "error", fails),
    ] {
        let settings = format!("config = {{ fail = \"{fail}\" }}\n");
        let run = failed_window_job(component, &settings);
        let stderr = run.stderr();
        assert!(
            stderr.contains("operator \"windows\"")
                && stderr.contains(said)
                && stderr.contains("firing the window [")
                && stderr.contains(") of key ")
                && !stderr.contains("of the batch")
                && !stderr.contains("value 0x"),
            "{component} ({fail}): {run}"
        );
    }
}

/// The window job of [`crate::deploy::windowed_spec_of`] over 1,000 events with the function
/// `component` and `settings`, run without restarts, which must fail.
fn failed_window_job(component: &str, settings: &str) -> crate::support::Run {
    let ws = Workspace::new();
    let spec = crate::deploy::windowed_spec_of(&ws, component, 1_000, settings, "out");
    let mut text = std::fs::read_to_string(&spec).unwrap();
    text.push_str("\n[restart]\nstrategy = \"none\"\n");
    std::fs::write(&spec, text).unwrap();
    let run = crate::support::weir(&["run", "--no-progress"], &spec);
    assert!(!run.success(), "{run}");
    run
}

/// A guest that leaks only as its timers fire (calls with no record) is renewed after those
/// calls too: 12 event-time timers of key `k`, each leaking 3 MiB against a limit of 16 MiB
/// as it fires, fire one at a time while the watermark passes them, in calls of their own
/// (the records that move the watermark go to the probe's other subtask).
#[test]
fn a_guest_that_leaks_in_its_timers_continues_in_a_new_instance() {
    let limits = "limits = { memory = \"16 MiB\" }";
    let spec = |ws: &Workspace, input| stamped_probe_job(ws, input, RUST_PROBE, "memory", limits);
    // Which keys the other subtask than k's gets.
    let ws = Workspace::new();
    let keys: Vec<String> = (0..32).map(|i| format!("f{i}")).collect();
    let mut input = String::from("k,0,vget\n");
    for key in &keys {
        input.push_str(&format!("{key},0,vget\n"));
    }
    ws.run_ok(&spec(&ws, input));
    let parts = part_files(&ws.path("out"));
    let subtask_of = |key: &str| {
        let prefix = format!("{key}\t");
        (parts.iter())
            .find(|(_, lines)| lines.iter().any(|l| l.starts_with(&prefix)))
            .map(|(s, _)| *s)
            .unwrap()
    };
    let fillers: Vec<&String> = (keys.iter())
        .filter(|f| subtask_of(f) != subtask_of("k"))
        .collect();
    assert!(
        !fillers.is_empty(),
        "no key of 32 goes to the other subtask"
    );

    let ws = Workspace::new();
    let mut input = String::from("k,0,timerleak 3145728\n");
    for i in 0..12 {
        input.push_str(&format!("k,0,timer {}\n", i * 1_000 + 500));
    }
    for i in 0..12 {
        // More than two batches later in event time: the watermark passes a timer.
        for n in 0..9_000 {
            let filler = fillers[n % fillers.len()];
            input.push_str(&format!("{filler},{},vget\n", (i + 1) * 1_000));
        }
    }
    let spec = ws.write("job.toml", spec(&ws, input));
    let (_, renewed) = run_counting_renewals(&ws, &spec, "probe");
    let mut got: Vec<String> = (part_files(&ws.path("out")).into_values().flatten())
        .filter(|l| l.starts_with("k\t"))
        .collect();
    got.sort();
    let mut want: Vec<String> = (0..12)
        .map(|i| format!("k\tfired {}", i * 1_000 + 500))
        .collect();
    want.extend(std::iter::repeat_n("k\tok".to_owned(), 13));
    want.sort();
    assert_eq!(got, want);
    assert!((2..=9).contains(&renewed), "renewed {renewed} times");
}
