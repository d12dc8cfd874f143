//! Savepoints through `weir run`: a stop with a savepoint (`--stop-savepoint`) and a restore
//! from it (`--from-savepoint`) into a job of another name, at another operator parallelism
//! and on the other state backend, give the output of a run without stops; what does not fit
//! is refused with the reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::process::Child;

use crate::lifecycle::{committed_lines, finish, log, probe_input, signal};
use crate::support::{
    Workspace, key_value_file_sink, part_files, tally_job, toml_path, wasm, weir, weir_command,
};

/// `weir run`'s exit code for a stopped job.
const STOPPED: i32 = 3;

/// The state probe (value and list state, event-time timers) keyed at parallelism `probe`
/// on `backend`, as job `name` with checkpoints in `chk`, writing into the sink directory
/// `out`.
fn probe_job(ws: &Workspace, name: &str, probe: u32, backend: &str, input: &Path) -> PathBuf {
    probe_job_of(ws, name, probe, backend, input, "weir_test_state_probe")
}

/// [`probe_job`] with the state probe component `component` (the Rust or the Python one).
fn probe_job_of(
    ws: &Workspace,
    name: &str,
    probe: u32,
    backend: &str,
    input: &Path,
    component: &str,
) -> PathBuf {
    ws.write(
        &format!("{name}.toml"),
        format!(
            r#"[job]
name = "{name}"
parallelism = 2

[checkpoint]
interval = "50ms"
dir = {chk}

[state]
backend = "{backend}"
dir = {state}

[[source]]
name = "lines"
type = "file"
path = {input}
parallelism = 1

[[operator]]
name = "keyer"
uid = "keyer"
{keyer}
input = "lines"
parallelism = 1

[[operator]]
name = "probe"
uid = "probe"
{probe_wasm}
input = "keyer"
edge = "key_by"
parallelism = {probe}
{sink}"#,
            chk = toml_path(&ws.path(&format!("chk-{name}"))),
            state = toml_path(&ws.path(&format!("state-{name}"))),
            input = toml_path(input),
            keyer = wasm("weir_test_keyer"),
            probe_wasm = wasm(component),
            sink = key_value_file_sink("probe", &ws.path("out")) + "edge = \"key_by\"\n",
        ),
    )
}

/// Starts `weir run <args> <spec>` with its log (level info) in `<log>.log`.
fn start(ws: &Workspace, spec: &Path, log: &str, args: &[&str]) -> Child {
    let file = std::fs::File::create(ws.path(&format!("{log}.log"))).expect("a log file");
    let mut all = vec!["run", "--no-progress"];
    all.extend_from_slice(args);
    weir_command(&all, spec)
        .env("WEIR_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(file)
        .spawn()
        .expect("start weir")
}

/// Runs `spec` with `args`, stops it with a savepoint into `savepoint` once it has run a
/// while, and checks that it stopped with one.
pub(crate) fn stop_with_savepoint(
    ws: &Workspace,
    spec: &Path,
    args: &[&str],
    savepoint: &Path,
    run: &str,
) {
    let mut all = vec!["--stop-savepoint", savepoint.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut child = start(ws, spec, run, &all);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log(ws, run).contains("checkpoint 3 complete") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{run} ended early:\n{}",
            log(ws, run)
        );
        assert!(
            Instant::now() < deadline,
            "{run} took no checkpoint:\n{}",
            log(ws, run)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(&child, "INT");
    let out = finish(child, Duration::from_secs(120));
    let report = format!("{run}: {}\n{}", out.status, log(ws, run));
    assert_eq!(out.status.code(), Some(STOPPED), "{report}");
    assert!(
        log(ws, run).contains("savepoint") && savepoint.join("_metadata").exists(),
        "{report}"
    );
    assert!(
        !std::fs::read_dir(savepoint).unwrap().any(|e| {
            let head = std::fs::read(e.unwrap().path()).unwrap_or_default();
            head.starts_with(b"WEIRRI")
        }),
        "a savepoint refers to no shared file"
    );
}

#[test]
fn savepoints_move_a_job_between_parallelisms_backends_and_names_exactly_once() {
    let ws = Workspace::new();
    let seed = fastrand::u64(..);
    eprintln!("savepoint seed {seed}");
    // Enough that each run, stopped after its third checkpoint, is still reading then.
    let (text, expected) = probe_input(4_000_000, seed);
    let input = ws.write("input.txt", text);
    let (sp1, sp2) = (ws.path("savepoints/one"), ws.path("savepoints/two"));

    // Memory at parallelism 2 → RocksDB at 3 (another job) → memory at 1 (a third, whose
    // sink writes into another directory).
    let first = probe_job(&ws, "first", 2, "memory", &input);
    stop_with_savepoint(&ws, &first, &[], &sp1, "first");
    // A savepoint is self-contained: moved elsewhere, it restores from there.
    let moved = ws.path("moved");
    std::fs::create_dir_all(&moved).unwrap();
    for entry in std::fs::read_dir(&sp1).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), moved.join(entry.file_name())).unwrap();
    }
    std::fs::remove_dir_all(&sp1).unwrap();
    let second = probe_job(&ws, "second", 3, "rocksdb", &input);
    // Its savepoint holds the sink's in-progress file, which the third job continues.
    let spec = std::fs::read_to_string(&second).unwrap();
    std::fs::write(&second, spec + "rolling = { on_checkpoint = false }\n").unwrap();
    let from = ["--from-savepoint", moved.to_str().unwrap()];
    stop_with_savepoint(&ws, &second, &from, &sp2, "second");
    let third = probe_job(&ws, "third", 1, "memory", &input);
    let (out, elsewhere) = (toml_path(&ws.path("out")), ws.path("elsewhere"));
    let spec = std::fs::read_to_string(&third).unwrap();
    std::fs::write(&third, spec.replace(&out, &toml_path(&elsewhere))).unwrap();
    let run = weir(&["run", "-s", sp2.to_str().unwrap()], &third);
    assert!(run.success(), "{}", run.stderr());

    let mut lines = committed_lines(&ws);
    lines.extend(part_files(&elsewhere).into_values().flatten());
    lines.sort_unstable();
    assert_eq!(
        lines.len(),
        expected.len(),
        "as many lines as a run without stops"
    );
    assert!(lines == expected, "the output of a run without stops");
    // The savepoints are the user's: the jobs' ends deleted their checkpoints, not these.
    assert!(moved.join("_metadata").exists() && sp2.join("_metadata").exists());
}

#[test]
fn a_savepoint_of_python_operators_restores_into_their_rust_rewrite() {
    across_languages(
        "weir_test_state_probe_py",
        ("memory", 2),
        "weir_test_state_probe",
        ("rocksdb", 2),
    );
}

#[test]
fn a_savepoint_of_javascript_operators_restores_into_their_python_rewrite() {
    across_languages(
        "weir_test_state_probe_js",
        ("rocksdb", 2),
        "weir_test_state_probe_py",
        ("memory", 3),
    );
}

/// The state probe written in one language, component `from` (value and list state,
/// timers; state in CBOR, the SDKs' shared codec), stops with a savepoint; its rewrite in
/// another, component `to`, resumes from it: the output is that of a run without stops.
/// Each runs on the backend and at the parallelism given with it.
fn across_languages(
    from: &str,
    (backend, parallelism): (&str, u32),
    to: &str,
    resumed: (&str, u32),
) {
    let ws = Workspace::new();
    let seed = fastrand::u64(..);
    eprintln!("savepoint seed {seed}");
    let (text, expected) = probe_input(1_000_000, seed);
    let input = ws.write("input.txt", text);
    let savepoint = ws.path("savepoint");
    let first = probe_job_of(&ws, "first", parallelism, backend, &input, from);
    stop_with_savepoint(&ws, &first, &[], &savepoint, "first");
    let second = probe_job_of(&ws, "second", resumed.1, resumed.0, &input, to);
    let run = weir(&["run", "-s", savepoint.to_str().unwrap()], &second);
    assert!(run.success(), "{}", run.stderr());
    let lines = committed_lines(&ws);
    assert_eq!(
        lines.len(),
        expected.len(),
        "as many lines as a run without stops"
    );
    assert!(
        lines == expected,
        "{from} to {to}: the output of a run without stops"
    );
}

#[test]
fn a_savepoint_that_does_not_fit_is_refused_with_the_reason() {
    let ws = Workspace::new();
    // As long as the other tests' input: a job that reads 1M lines can end before the stop.
    let (text, _) = probe_input(4_000_000, 7);
    let input = ws.write("input.txt", text);
    let savepoint = ws.path("sp");
    let spec = probe_job(&ws, "taken", 2, "memory", &input);
    stop_with_savepoint(&ws, &spec, &[], &savepoint, "taken");

    // The probe's uid changed: its state would be lost.
    let renamed = ws.write(
        "renamed.toml",
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("uid = \"probe\"", "uid = \"probe-v2\"")
            .replace("name = \"taken\"", "name = \"renamed\""),
    );
    let sp = savepoint.to_str().unwrap();
    let run = weir(&["run", "--from-savepoint", sp], &renamed);
    run.assert_clean_failure();
    let err = run.stderr();
    assert!(
        err.contains("operator uid \"probe\"") && err.contains("--allow-non-restored-state"),
        "{err}"
    );
    // Allowed, the job runs without that state.
    let run = weir(
        &["run", "--from-savepoint", sp, "--allow-non-restored-state"],
        &renamed,
    );
    assert!(run.success(), "{}", run.stderr());

    // A missing or damaged savepoint is named.
    let run = weir(
        &["run", "-s", ws.path("nothing-here").to_str().unwrap()],
        &spec,
    );
    run.assert_clean_failure();
    assert!(run.stderr().contains("nothing-here"), "{}", run.stderr());
    let damaged = ws.path("damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    for entry in std::fs::read_dir(&savepoint).unwrap() {
        let entry = entry.unwrap();
        let mut bytes = std::fs::read(entry.path()).unwrap();
        if entry.file_name() != "_metadata" && !bytes.is_empty() {
            let at = bytes.len() / 2;
            bytes[at] ^= 0xff;
        }
        std::fs::write(damaged.join(entry.file_name()), bytes).unwrap();
    }
    let run = weir(&["run", "-s", damaged.to_str().unwrap()], &spec);
    run.assert_clean_failure();
    assert!(run.stderr().contains("damaged"), "{}", run.stderr());
}

#[test]
fn operator_state_is_split_or_unioned_when_the_parallelism_changes() {
    const COUNT: u64 = 600_000;
    let ws = Workspace::new();
    let savepoint = ws.path("sp");
    let before = tally_job(&ws, 2, "{ union = true }", COUNT, 100_000);
    stop_with_savepoint(&ws, &before, &[], &savepoint, "before");
    let after = tally_job(&ws, 3, "{ union = true, tag = \"b:\" }", COUNT, 100_000);
    let run = weir(
        &["run", "--no-progress", "-s", savepoint.to_str().unwrap()],
        &after,
    );
    assert!(run.success(), "{run}");

    let lines = committed_lines(&ws);
    // Split: the three new subtasks continued from the two old totals, each of which went to
    // exactly one of them, so the last numbers of the new subtasks add up to every record.
    let mut last = [0u64; 3];
    for line in &lines {
        if let Some(rest) = line.strip_prefix("b:s") {
            let (subtask, n) = rest.split_once(' ').unwrap();
            let s: usize = subtask.parse().unwrap();
            last[s] = last[s].max(n.parse().unwrap());
        }
    }
    assert!(last.iter().all(|&n| n > 0), "{last:?}");
    assert_eq!(last.iter().sum::<u64>(), COUNT, "split state: {last:?}");
    // Union: every new subtask got both old subtasks' elements; the first run had none.
    for s in 0..3 {
        let line = format!("b:u{s} 0,1");
        assert!(lines.contains(&line), "no {line:?}");
    }
    assert!(lines.contains(&"u0 ".to_string()) && lines.contains(&"u1 ".to_string()));
}

/// A savepoint of an earlier weir (`tests/fixtures/process-window-savepoint`, made by
/// 41251ea), whose process-window functions kept an open window's records' values in the
/// window's own map entry, restores with this one: every window fires once, with the
/// records it carried in the savepoint and those that came after, so the output before and
/// after the stop is that of a run without it.
#[test]
fn a_savepoint_of_the_earlier_window_layout_restores_every_window() {
    let function = crate::support::operator("weir_test_window_process");
    restores_as_an_uninterrupted_run(
        "process-window-savepoint",
        "legacy-windows",
        &format!(
            r#"[[source]]
name = "events"
type = "generator"
mode = "keyed_words"
vocabulary = 30
count = 20000
event_time = {{ start = 0, interval = "2ms", max_disorder = "100ms" }}
watermark = {{ max_out_of_orderness = "100ms" }}

[[operator]]
name = "windows"
uid = "windows"
wasm = {function}
input = "events"
edge = "key_by"
window = {{ type = "sliding", size = "1s", slide = "250ms", function = "process" }}
"#,
            function = toml_path(&function),
        ),
        "windows",
    );
}

/// A savepoint of an earlier weir (`tests/fixtures/window-join-savepoint`, made by 41251ea),
/// whose window joins kept each side's records in a map entry per window start, restores
/// with this one: every window joins the records it held in the savepoint with those that
/// came after, once, so the output before and after the stop is that of a run without it.
#[test]
fn a_savepoint_of_the_earlier_window_join_layout_joins_every_window() {
    let side = |name: &str, seed: u32| {
        format!(
            r#"[[source]]
name = "{name}"
type = "generator"
mode = "keyed_words"
seed = {seed}
vocabulary = 200
count = 1000
event_time = {{ start = 0, interval = "10ms", max_disorder = "100ms" }}
watermark = {{ max_out_of_orderness = "100ms" }}
"#
        )
    };
    restores_as_an_uninterrupted_run(
        "window-join-savepoint",
        "legacy-join",
        &format!(
            r#"{left}
{right}
[[operator]]
name = "join"
uid = "join"
input = "left"
second_input = "right"
edge = "key_by"
join = {{ type = "sliding", size = "1s", slide = "500ms" }}
"#,
            left = side("left", 0),
            right = side("right", 1),
        ),
        "join",
    );
}

/// Restores the savepoint of `tests/fixtures/<fixture>` (made by an earlier weir) into job
/// `name` at parallelism 2 of `vertices` (its sources and operators; `last` feeds a file
/// sink), with the output that sink had committed before the stop, and checks that the
/// output before and after the stop is that of a run of the job without it.
fn restores_as_an_uninterrupted_run(fixture: &str, name: &str, vertices: &str, last: &str) {
    let ws = Workspace::new();
    let fixture = crate::support::repo().join("tests/fixtures").join(fixture);
    for dir in ["savepoint", "out"] {
        let to = ws.path(dir);
        std::fs::create_dir_all(&to).unwrap();
        for file in std::fs::read_dir(fixture.join(dir)).unwrap() {
            let file = file.unwrap().path();
            std::fs::copy(&file, to.join(file.file_name().unwrap())).unwrap();
        }
    }
    let before_stop = committed_lines(&ws).len();
    let spec = |out: &str| {
        ws.write(
            &format!("{out}.toml"),
            format!(
                "[job]\nname = \"{name}\"\nparallelism = 2\n\n[checkpoint]\ninterval = \"200ms\"\n\
                 dir = {chk}\n\n{vertices}{sink}",
                chk = toml_path(&ws.path(&format!("{out}-chk"))),
                sink = key_value_file_sink(last, &ws.path(out)),
            ),
        )
    };
    let savepoint = ws.path("savepoint");
    let restored = weir(
        &["run", "--no-progress", "-s", savepoint.to_str().unwrap()],
        &spec("out"),
    );
    assert!(restored.success(), "{restored}");
    let reference = weir(&["run", "--no-progress"], &spec("reference"));
    assert!(reference.success(), "{reference}");
    let mut want: Vec<String> = (crate::support::part_files(&ws.path("reference")))
        .into_values()
        .flatten()
        .collect();
    want.sort_unstable();
    let got = committed_lines(&ws);
    assert!(
        0 < before_stop && before_stop < got.len(),
        "{before_stop} of {}",
        got.len()
    );
    assert_eq!(got, want);
}
