//! A job's life at its edges: a stop (SIGINT) at any moment followed by a resume gives the
//! output of a run without stops; a crash at any step of a job's end writes nothing twice and
//! a finished job does not run again; failures that a restart cannot heal end the job at once;
//! a stop is honoured while the job waits to restart; one run of a job at a time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::exactly_once::{
    assert_visible_output_stays, checkpointed_job, command, completed, tally,
};
use crate::postgres::{CONNECTION, assert_sequence, client, table};
use crate::support::{
    Workspace, key_value_file_sink, keyed_probe_operators, part_files, toml_path, toml_str, wasm,
    weir_bin,
};

/// `weir run`'s exit code for a stopped job.
const STOPPED: i32 = 3;

/// Sends SIGINT to `child`, as Ctrl-C does.
fn interrupt(child: &Child) {
    signal(child, "INT");
}

/// Sends signal `name` (`INT`, `TERM`, ...) to `child`.
pub(crate) fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {}", child.id());
}

/// Waits until `child` handles SIGINT (its `SigCgt` mask in /proc has the signal): before
/// that, in the first milliseconds of a process, a Ctrl-C ends it as it would any program.
fn wait_for_signal_handler(child: &Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0);
        // SIGINT is signal 2: bit 1.
        if caught & 0b10 != 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "weir installed no SIGINT handler"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Starts `weir run` on `spec` with its log (level info) in `<log>.log`, and `env` set.
fn start(ws: &Workspace, spec: &Path, log: &str, env: &[(&str, &str)]) -> Child {
    let file = std::fs::File::create(ws.path(&format!("{log}.log"))).expect("a log file");
    let mut cmd = command(ws, spec);
    cmd.env("WEIR_LOG", "info").stderr(file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start weir")
}

/// Waits for `child`, killing it if it takes longer than `limit` (a hang is a failure).
pub(crate) fn finish(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    {
        let (done, killed) = (Arc::clone(&done), Arc::clone(&killed));
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                if done.load(Ordering::SeqCst) {
                    return;
                }
            }
            killed.store(true, Ordering::SeqCst);
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        });
    }
    let out = child.wait_with_output().expect("wait for weir");
    done.store(true, Ordering::SeqCst);
    assert!(
        !killed.load(Ordering::SeqCst),
        "weir did not end within {limit:?} and was killed"
    );
    out
}

pub(crate) fn log(ws: &Workspace, name: &str) -> String {
    std::fs::read_to_string(ws.path(&format!("{name}.log"))).unwrap_or_default()
}

fn summary(ws: &Workspace) -> serde_json::Value {
    let bytes = std::fs::read(ws.path("summary.json")).expect("weir wrote its summary");
    serde_json::from_slice(&bytes).expect("the summary is JSON")
}

/// Lines for the state probe over 500 keys, in which each key's answers depend on its own
/// history: value and list state, and event-time timers that fire at the end of input. Returns
/// the input and the output a run without interruption writes (sorted `key<TAB>value` lines),
/// computed here from the probe's documented semantics.
pub(crate) fn probe_input(lines: usize, seed: u64) -> (String, Vec<String>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut input = String::new();
    let mut out = Vec::new();
    let mut values: HashMap<String, String> = HashMap::new();
    let mut lists: HashMap<String, Vec<String>> = HashMap::new();
    let mut timers: BTreeSet<(String, u64)> = BTreeSet::new();
    for i in 0..lines {
        let key = format!("k{}", rng.u32(..500));
        let (command, answer) = match rng.u32(..100) {
            0..55 => {
                values.insert(key.clone(), i.to_string());
                (format!("vset {i}"), "ok".to_owned())
            }
            55..85 => (
                "vget".to_owned(),
                values.get(&key).cloned().unwrap_or_else(|| "none".into()),
            ),
            85..95 => {
                lists.entry(key.clone()).or_default().push(i.to_string());
                (format!("ladd {i}"), "ok".to_owned())
            }
            95..97 => (
                "lget".to_owned(),
                format!(
                    "[{}]",
                    lists.get(&key).map(|l| l.join(",")).unwrap_or_default()
                ),
            ),
            97..99 => {
                lists.remove(&key);
                ("lclear".to_owned(), "ok".to_owned())
            }
            _ => {
                let at = rng.u64(..1000);
                timers.insert((key.clone(), at));
                (format!("timer {at}"), "ok".to_owned())
            }
        };
        input.push_str(&format!("{key} {command}\n"));
        out.push(format!("{key}\t{answer}"));
    }
    out.extend(timers.iter().map(|(k, at)| format!("{k}\tfired {at}")));
    out.sort_unstable();
    (input, out)
}

/// The probe job: one file source (so that each key's records keep their order), the keyer,
/// then over `key_by` the state probe at parallelism 2 into a file sink, checkpointed every
/// 30 ms; `checkpoint` is more of the `[checkpoint]` table.
fn probe_job(ws: &Workspace, input: &Path, checkpoint: &str) -> PathBuf {
    checkpointed_job(
        ws,
        "crashy",
        "30ms",
        &format!(
            r#"{checkpoint}
[[source]]
name = "lines"
type = "file"
path = {input}
parallelism = 1
{operators}{sink}"#,
            input = toml_path(input),
            operators = keyed_probe_operators("lines", "parallelism = 1"),
            sink = key_value_file_sink("probe", &ws.path("out")),
        ),
    )
}

/// The names in the sink's directory that are not finished part files (in-progress and
/// pending ones).
fn unfinished_parts(ws: &Workspace) -> Vec<String> {
    std::fs::read_dir(ws.path("out"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".pending"))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn committed_lines(ws: &Workspace) -> Vec<String> {
    let mut lines: Vec<String> = part_files(&ws.path("out"))
        .into_values()
        .flatten()
        .collect();
    lines.sort_unstable();
    lines
}

#[test]
fn stops_at_random_moments_and_resumes_give_the_output_of_an_uninterrupted_run() {
    stop_loop("", false, 20);
}

/// The stop is an aligned checkpoint, taken while unaligned ones come and go.
#[test]
fn stops_at_random_moments_with_unaligned_checkpoints_give_the_output_of_an_uninterrupted_run() {
    stop_loop("unaligned = true", false, 8);
}

/// On RocksDB state the probe keeps its value state in the guest between batches (the
/// write-back cache): what a stop's checkpoint holds must include what the guest held.
#[test]
fn stops_at_random_moments_on_rocksdb_state_give_the_output_of_an_uninterrupted_run() {
    stop_loop("", true, 8);
}

/// Stops the probe job (with `checkpoint` in its `[checkpoint]` table, its state in RocksDB
/// if `rocksdb`) at `planned` random moments, resuming it after each, and checks its output
/// against a run without stops.
fn stop_loop(checkpoint: &str, rocksdb: bool, planned: usize) {
    let ws = Workspace::new();
    let seed = fastrand::u64(..);
    eprintln!("stop loop seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let (text, expected) = probe_input(4_000_000, seed);
    let input = ws.write("input.txt", text);
    let mut tables = checkpoint.to_owned();
    if rocksdb {
        let dir = toml_path(&ws.path("state"));
        tables.push_str(&format!("\n[state]\nbackend = \"rocksdb\"\ndir = {dir}\n"));
    }
    let spec = probe_job(&ws, &input, &tables);
    let mut visible = BTreeMap::new();
    let mut stops = 0;
    for run in 0..=planned {
        let name = format!("run-{run}");
        let child = start(&ws, &spec, &name, &[]);
        if run < planned {
            // A random moment: one in four while the job may still be starting (loading its
            // components, restoring), the others while it runs, early enough that every run
            // leaves input for the next.
            if rng.u32(..4) == 0 {
                wait_for_signal_handler(&child);
                std::thread::sleep(Duration::from_millis(rng.u64(..30)));
            } else {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !log(&ws, &name).contains("job \"crashy\" ") {
                    assert!(Instant::now() < deadline, "run {run} did not start");
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(rng.u64(..60)));
            }
            // Ctrl-C, or what a service manager sends.
            signal(&child, if rng.u32(..4) == 0 { "TERM" } else { "INT" });
        }
        let out = finish(child, Duration::from_secs(120));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report = format!("run {run}: {}\n{stdout}\n{}", out.status, log(&ws, &name));
        let status = summary(&ws)["status"].clone();
        assert_visible_output_stays(&ws, &mut visible);
        match out.status.code() {
            Some(STOPPED) => {
                stops += 1;
                assert_eq!(status, "stopped", "{report}");
                assert!(stdout.contains("stopped at checkpoint"), "{report}");
                assert_eq!(
                    unfinished_parts(&ws),
                    Vec::<String>::new(),
                    "a stop commits everything up to its checkpoint: {report}"
                );
                assert!(
                    !visible.values().any(|text| text.contains("fired")),
                    "a stop fires no end-of-input timer: {report}"
                );
            }
            Some(0) => {
                assert_eq!(status, "finished", "{report}");
                break;
            }
            _ => panic!("neither stopped nor finished: {report}"),
        }
        assert!(run < planned, "the last run was not interrupted: {report}");
    }
    assert!(
        stops >= planned / 2,
        "only {stops} of {planned} runs were stopped before the input ended; make it larger"
    );
    let lines = committed_lines(&ws);
    assert_eq!(
        lines.len(),
        expected.len(),
        "as many lines as a run without stops"
    );
    assert!(lines == expected, "the output of a run without stops");
    // Stopped and resumed, then finished: nothing is left to resume.
    assert_eq!(completed(&ws), Vec::<u64>::new());
    tally(0, stops, lines.len());
}

/// The crash points of a job's end, in order (see `host/src/failpoint.rs`).
const END_STEPS: [&str; 4] = [
    "finish.after-final-checkpoint",
    "finish.after-commit",
    "finish.after-completion-record",
    "finish.during-discard",
];

#[test]
fn a_crash_at_any_step_of_a_jobs_end_writes_nothing_twice() {
    const COUNT: u64 = 60_000;
    let mut db = client();
    for (i, step) in END_STEPS.iter().enumerate() {
        let ws = Workspace::new();
        let table = table(&mut db, "end", "k text, n bigint, kind text");
        let sink = format!("end{i}");
        let spec = checkpointed_job(
            &ws,
            "crashy",
            "20ms",
            &format!(
                r#"num_retained = 3

[[source]]
name = "seq"
type = "generator"
mode = "sequence"
count = {COUNT}
rate = 200000
parallelism = 2

[[sink]]
name = "{sink}"
type = "postgres"
input = "seq"
connection = {connection}
table = "{table}"
mode = "append"
format = "key_value"
columns = ["k", "n"]
kind_column = "kind"

[[sink]]
name = "files"
type = "file"
input = "seq"
path = {out}
"#,
                connection = toml_str(CONNECTION),
                out = toml_path(&ws.path("out")),
            ),
        );
        let crashed = finish(
            start(&ws, &spec, "crash", &[("WEIR_FAILPOINT", step)]),
            Duration::from_secs(120),
        );
        assert_eq!(
            crashed.status.signal(),
            Some(6),
            "{step}: the run aborts there ({}):\n{}",
            crashed.status,
            log(&ws, "crash")
        );
        let mut visible = BTreeMap::new();
        assert_visible_output_stays(&ws, &mut visible);

        let again = finish(start(&ws, &spec, "again", &[]), Duration::from_secs(120));
        assert!(
            again.status.success(),
            "{step}: {}\n{}",
            again.status,
            log(&ws, "again")
        );
        assert_visible_output_stays(&ws, &mut visible);
        assert_sequence(&mut db, &table, COUNT);
        let mut numbers: Vec<u64> = part_files(&ws.path("out"))
            .into_values()
            .flatten()
            .map(|l| l.parse().expect("a number"))
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (0..COUNT).collect::<Vec<_>>(), "{step}: the files");

        // Once more: the job is finished and says so, and nothing changes.
        let third = finish(start(&ws, &spec, "third", &[]), Duration::from_secs(120));
        let stdout = String::from_utf8_lossy(&third.stdout);
        assert!(third.status.success(), "{step}: {}", log(&ws, "third"));
        assert!(stdout.contains("finished earlier"), "{step}: {stdout}");
        assert_eq!(summary(&ws)["status"], "finished");
        assert_visible_output_stays(&ws, &mut visible);
        assert_sequence(&mut db, &table, COUNT);
        assert_eq!(
            completed(&ws),
            Vec::<u64>::new(),
            "{step}: checkpoints left"
        );

        // A fresh start runs it again from the beginning.
        if i == 0 {
            let fresh = command(&ws, &spec)
                .arg("--fresh")
                .stderr(Stdio::piped())
                .output()
                .expect("weir runs");
            assert!(fresh.status.success(), "{fresh:?}");
            let rows: i64 = db
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .unwrap()
                .get(0);
            assert_eq!(rows as u64, 2 * COUNT, "--fresh ran the job once more");
        }
    }
}

/// A job that fails at once, and so never restarts, would restart under the default
/// strategy otherwise: it checkpoints. `body` holds its sources, operators and sinks.
fn failing_job(ws: &Workspace, body: &str) -> PathBuf {
    checkpointed_job(ws, "crashy", "20ms", body)
}

/// Runs the spec; asserts that it failed (exit 1, status `failed`) after `restarts` restarts
/// with an error naming each of `needles`.
fn assert_fails_after(ws: &Workspace, spec: &Path, restarts: u64, needles: &[&str]) {
    let out = finish(start(ws, spec, "failing", &[]), Duration::from_secs(120));
    let report = format!("{}\n{}", out.status, log(ws, "failing"));
    assert_eq!(out.status.code(), Some(1), "{report}");
    let summary = summary(ws);
    assert_eq!(summary["status"], "failed", "{report}");
    let error = summary["error"].as_str().expect("the error");
    for needle in needles {
        assert!(error.contains(needle), "no {needle:?} in {error}");
    }
    assert_eq!(
        log(ws, "failing").matches("restarting in").count() as u64,
        restarts,
        "{report}"
    );
}

#[test]
fn failures_a_restart_cannot_heal_end_the_job_at_once() {
    let ws = Workspace::new();
    let input = ws.write("input.txt", "a\nb\nc\n");
    let hostile = wasm("weir_test_hostile");
    let source = format!(
        "[[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\nparallelism = 1\n",
        toml_path(&input)
    );

    // The operator's `open` rejects its config.
    let spec = failing_job(
        &ws,
        &format!(
            "{source}\n[[operator]]\nname = \"op\"\nuid = \"op\"\n{hostile}\ninput = \"lines\"\n\
             edge = \"rebalance\"\nconfig = {{ spin_in_open = \"yes\" }}\n\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"op\"\n"
        ),
    );
    assert_fails_after(
        &ws,
        &spec,
        0,
        &["operator \"op\"", "open failed", "boolean"],
    );

    // A sink directory that cannot be created (even by root).
    let spec = failing_job(
        &ws,
        &format!(
            "{source}\n[[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"lines\"\n\
             parallelism = 1\npath = \"/sys/weir-e2e-{}\"\n",
            fastrand::u32(..)
        ),
    );
    assert_fails_after(
        &ws,
        &spec,
        0,
        &["sink \"out\"", "cannot create the output directory"],
    );

    // A line without its event time, found while the job runs: a restart reads it again.
    let stamped = ws.write("stamped.txt", "1,a\n2,b\nno time\n3,c\n");
    let spec = failing_job(
        &ws,
        &format!(
            "[[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\nparallelism = 1\n\
             event_time = {{ field = 0 }}\n\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"lines\"\nparallelism = 1\n",
            toml_path(&stamped)
        ),
    );
    assert_fails_after(
        &ws,
        &spec,
        0,
        &["source \"lines\"", "\"no time\", has no event time"],
    );

    // A poison record: the same trap from the same (no) checkpoint, three times. (Were it
    // further into the input, restarts would go on while checkpoints got closer to it.)
    let mut lines = String::from("trap-until 99999999999999\n");
    lines.extend((0..1000).map(|i| format!("line {i}\n")));
    let poisoned = ws.write("poisoned.txt", &lines);
    let spec = failing_job(
        &ws,
        &format!(
            "[restart]\ninitial_backoff = \"10ms\"\n\n\
             [[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\nparallelism = 1\n\n\
             [[operator]]\nname = \"op\"\nuid = \"op\"\n{hostile}\ninput = \"lines\"\n\
             parallelism = 1\n\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"op\"\nparallelism = 1\n",
            toml_path(&poisoned)
        ),
    );
    assert_fails_after(
        &ws,
        &spec,
        2,
        &[
            "transient failure until",
            "the same way 3 times in a row",
            "identical_failures",
        ],
    );
}

#[test]
fn a_stop_during_a_restart_delay_ends_the_run() {
    let ws = Workspace::new();
    let mut lines: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    lines.push_str("trap-until 99999999999999\n");
    let input = ws.write("input.txt", &lines);
    let spec = failing_job(
        &ws,
        &format!(
            "[restart]\nstrategy = \"fixed_delay\"\nattempts = 5\ndelay = \"1h\"\n\n\
             [[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\nparallelism = 1\n\n\
             [[operator]]\nname = \"op\"\nuid = \"op\"\n{}\ninput = \"lines\"\nparallelism = 1\n\n\
             [[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"op\"\npath = {}\nparallelism = 1\n",
            toml_path(&input),
            wasm("weir_test_hostile"),
            toml_path(&ws.path("out")),
        ),
    );
    // Runs `spec` until it fails and waits to restart, then stops it.
    let stopped_waiting = |spec: &Path, name: &str| {
        let child = start(&ws, spec, name, &[]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !log(&ws, name).contains("restarting in") {
            assert!(Instant::now() < deadline, "no restart: {}", log(&ws, name));
            std::thread::sleep(Duration::from_millis(20));
        }
        interrupt(&child);
        // Far less than the hour the restart would wait.
        finish(child, Duration::from_secs(60))
    };
    let out = stopped_waiting(&spec, "delay");
    let report = format!("{}\n{}", out.status, log(&ws, "delay"));
    assert_eq!(out.status.code(), Some(STOPPED), "{report}");
    assert_eq!(summary(&ws)["status"], "stopped", "{report}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("waiting to restart"), "{stdout}");

    // Resumed from that checkpoint and stopped again before one of its own: it stopped at
    // the one it resumed from, where the next run resumes too.
    let stopped_at = summary(&ws)["stopped_at_checkpoint"].clone();
    let n = stopped_at.as_u64().expect("the checkpoint of the stop");
    let slow = ws.write(
        "slow.toml",
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("interval = \"20ms\"", "interval = \"1h\""),
    );
    let out = stopped_waiting(&slow, "delay-again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(STOPPED), "{stdout}");
    assert!(
        stdout.contains(&format!("stopped at its last checkpoint, {n},")),
        "{stdout}"
    );
    assert_eq!(summary(&ws)["stopped_at_checkpoint"], stopped_at);
}

#[test]
fn one_run_of_a_job_at_a_time() {
    let ws = Workspace::new();
    let spec = checkpointed_job(
        &ws,
        "crashy",
        "50ms",
        &format!(
            "[[source]]\nname = \"seq\"\ntype = \"generator\"\nmode = \"sequence\"\nrate = 10000\n\n\
             [[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"seq\"\npath = {}\n",
            toml_path(&ws.path("out"))
        ),
    );
    let wait_for_checkpoint = |child: &mut Child, name: &str| {
        let before = completed(&ws).last().copied();
        let deadline = Instant::now() + Duration::from_secs(60);
        while completed(&ws).last().copied() <= before {
            assert!(child.try_wait().unwrap().is_none(), "{}", log(&ws, name));
            assert!(Instant::now() < deadline, "{}", log(&ws, name));
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let mut first = start(&ws, &spec, "first", &[]);
    wait_for_checkpoint(&mut first, "first");

    let second = crate::support::weir(&["run", "--no-progress"], &spec);
    second.assert_clean_failure();
    let expected = format!("already running in process {}", first.id());
    assert!(second.stderr().contains(&expected), "{second}");

    interrupt(&first);
    let out = finish(first, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(STOPPED), "{}", log(&ws, "first"));

    // The lock of a killed run is taken over.
    let mut killed = start(&ws, &spec, "killed", &[]);
    wait_for_checkpoint(&mut killed, "killed");
    killed.kill().unwrap();
    killed.wait().unwrap();
    let mut next = start(&ws, &spec, "next", &[]);
    wait_for_checkpoint(&mut next, "next");
    interrupt(&next);
    let out = finish(next, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(STOPPED), "{}", log(&ws, "next"));
    assert!(log(&ws, "next").contains("resumes from checkpoint"));
}

/// A checkpointed job whose operator runs `command` in `process` with a call deadline of
/// `deadline`: `sleep 3600000` (a WASI clock subscription: no guest code runs meanwhile) or
/// `spin` (guest code that never ends).
fn blocked_job(ws: &Workspace, command: &str, deadline: &str) -> PathBuf {
    let input = ws.write("input.txt", format!("a\nb\n{command}\nc\n"));
    failing_job(
        ws,
        &format!(
            "[[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\nparallelism = 1\n\n\
             [[operator]]\nname = \"op\"\nuid = \"op\"\n{}\ninput = \"lines\"\nparallelism = 1\n\
             limits = {{ call_deadline = \"{deadline}\" }}\n\n\
             [[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"op\"\npath = {}\nparallelism = 1\n",
            toml_path(&input),
            wasm("weir_test_hostile"),
            toml_path(&ws.path("out")),
        ),
    )
}

/// Starts `spec` and waits until its one sleeping operator is inside the sleep (a checkpoint
/// completes no more).
fn start_blocked(ws: &Workspace, spec: &Path) -> Child {
    let child = start(ws, spec, "blocked", &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log(ws, "blocked").contains("starts from") {
        assert!(Instant::now() < deadline, "{}", log(ws, "blocked"));
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    child
}

#[test]
fn a_stop_ends_a_job_whose_guest_blocks_at_the_guests_call_deadline() {
    let ws = Workspace::new();
    let spec = blocked_job(&ws, "sleep 3600000", "2s");
    let child = start_blocked(&ws, &spec);
    interrupt(&child);
    // The stop cannot take its checkpoint past the blocked guest; the guest's deadline ends
    // its call, and the job stops at its last checkpoint instead of restarting.
    let out = finish(child, Duration::from_secs(30));
    let report = format!("{}\n{}", out.status, log(&ws, "blocked"));
    assert_eq!(out.status.code(), Some(STOPPED), "{report}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("process ran longer than 2s"),
        "{stdout}\n{report}"
    );
}

#[test]
fn a_second_ctrl_c_cancels_a_job_whose_guest_blocks_or_loops() {
    for command in ["sleep 3600000", "spin"] {
        let ws = Workspace::new();
        let spec = blocked_job(&ws, command, "1h");
        let child = start_blocked(&ws, &spec);
        interrupt(&child);
        std::thread::sleep(Duration::from_millis(200));
        interrupt(&child);
        // Far less than the hour the guest's call may take.
        let out = finish(child, Duration::from_secs(30));
        let report = format!("{command}: {}\n{}", out.status, log(&ws, "blocked"));
        assert_eq!(out.status.code(), Some(130), "{report}");
        assert_eq!(summary(&ws)["status"], "cancelled", "{report}");
    }
}

/// A job without checkpoints whose operator sleeps 3 s on `sleep 3000` among `lines`, behind
/// an edge of kind `edge` from its file source.
fn drained_job(ws: &Workspace, lines: &str, edge: &str) -> PathBuf {
    let input = ws.write("input.txt", lines);
    ws.write(
        "job.toml",
        format!(
            "[job]\nname = \"drained\"\n\n\
             [[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\nparallelism = 1\n\n\
             [[operator]]\nname = \"op\"\nuid = \"op\"\n{}\ninput = \"lines\"\nedge = \"{edge}\"\n\
             parallelism = 1\n\n\
             [[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"op\"\npath = {}\nparallelism = 1\n",
            toml_path(&input),
            wasm("weir_test_hostile"),
            toml_path(&ws.path("out")),
        ),
    )
}

/// Starts `spec`, waits until its operator has printed `now sleeping` (the record before the
/// sleep) and a moment more, then sends Ctrl-C; returns what `weir run` ended with.
fn stop_while_sleeping(ws: &Workspace, spec: &Path) -> (Option<i32>, String) {
    let child = start(ws, spec, "drained", &[]);
    wait_for_signal_handler(&child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log(ws, "drained").contains("now sleeping") {
        assert!(Instant::now() < deadline, "{}", log(ws, "drained"));
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&child);
    let out = finish(child, Duration::from_secs(60));
    (out.status.code(), log(ws, "drained"))
}

#[test]
fn a_stop_without_checkpoints_finishes_a_job_whose_input_was_all_read_and_stops_one_whose_was_not()
{
    // The source has read all of its input while the operator still sleeps, in a task of its
    // own (the source has ended) or in the source's (it has not polled its end yet): the stop
    // ends no input, so the job drains and has finished.
    for edge in ["rebalance", "forward"] {
        let ws = Workspace::new();
        let lines = "a\nprint now sleeping\nsleep 3000\nb\n";
        let spec = drained_job(&ws, lines, edge);
        let (code, log) = stop_while_sleeping(&ws, &spec);
        assert_eq!(code, Some(0), "{edge}: {log}");
        assert_eq!(summary(&ws)["status"], "finished", "{edge}: {log}");
        assert_eq!(part_files(&ws.path("out"))[&0].join("\n") + "\n", lines);
    }

    // The operator sleeps in the source's own thread (chained) with most of the input not read
    // yet: the stop ends the input there, and the job has stopped with what came before.
    let ws = Workspace::new();
    let mut lines = String::from("print now sleeping\nsleep 3000\n");
    for i in 0..20_000 {
        lines.push_str(&format!("line {i}\n"));
    }
    let spec = drained_job(&ws, &lines, "forward");
    let (code, log) = stop_while_sleeping(&ws, &spec);
    assert_eq!(code, Some(STOPPED), "{log}");
    assert_eq!(summary(&ws)["status"], "stopped", "{log}");
    let written = part_files(&ws.path("out")).remove(&0).unwrap_or_default();
    assert!(
        written.len() < 20_002,
        "the whole input went through: {log}"
    );
    let expected: Vec<&str> = lines.lines().take(written.len()).collect();
    assert_eq!(written, expected, "not the input's first lines");
}

#[test]
fn a_stop_while_the_components_compile_ends_weir_at_once_with_nothing_started() {
    // A Python component takes seconds to compile when the cache does not hold it, as on a
    // job's first run: a Ctrl-C then ends weir without waiting for the compile to finish, with
    // or without a savepoint asked of the stop.
    for stop_savepoint in [false, true] {
        let ws = Workspace::new();
        let cache = ws.path("cache");
        let spec = ws.write(
            "job.toml",
            format!(
                "[job]\nname = \"compiling\"\n\n\
                 [checkpoint]\ninterval = \"1s\"\ndir = {}\n\n\
                 [[source]]\nname = \"gen\"\ntype = \"generator\"\ncount = 10\n\n\
                 [[operator]]\nname = \"parse\"\nuid = \"parse\"\n{}\ninput = \"gen\"\n\n\
                 [[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"parse\"\npath = {}\n",
                toml_path(&ws.path("chk")),
                wasm("clickstream_parse_py"),
                toml_path(&ws.path("out")),
            ),
        );
        let savepoint = ws.path("savepoint");
        let mut command = Command::new(weir_bin());
        command
            .arg("--cache-dir")
            .arg(&cache)
            .args(["run", "--summary-json"])
            .arg(ws.path("summary.json"));
        if stop_savepoint {
            command.arg("--stop-savepoint").arg(&savepoint);
        }
        let mut child = command
            .arg(&spec)
            .env_remove("WEIR_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start weir");
        let stderr = child.stderr.take().expect("piped stderr");
        let (lines_tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                drop(lines_tx.send(line));
            }
        });
        let mut said = Vec::new();
        while !said
            .iter()
            .any(|l: &String| l.contains("compiling the WebAssembly components"))
        {
            match lines.recv_timeout(Duration::from_secs(120)) {
                Ok(line) => said.push(line),
                Err(_) => panic!("weir did not say it was compiling: {said:?}"),
            }
        }
        wait_for_signal_handler(&child);
        interrupt(&child);
        let out = finish(child, Duration::from_secs(120));
        // The rest of what it said, up to the end of its stderr.
        said.extend(lines.iter());
        let report = format!("{}\n{}", out.status, said.join("\n"));
        assert_eq!(out.status.code(), Some(STOPPED), "{report}");
        let expected = match stop_savepoint {
            true => "stopped before the job started; nothing changed (and no savepoint taken)",
            false => "stopped before the job started; nothing changed",
        };
        assert!(said.iter().any(|l| l.ends_with(expected)), "{report}");
        // Nothing started and nothing was written: no output, no checkpoint, no savepoint, no
        // summary of a run, and the compile was left unfinished (weir did not wait for it).
        for path in ["out", "chk", "savepoint", "summary.json"] {
            assert!(!ws.path(path).exists(), "{path} was written\n{report}");
        }
        let cached: Vec<_> = std::fs::read_dir(&cache)
            .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            cached.is_empty(),
            "the compile was waited for: {cached:?}\n{report}"
        );
    }
}
