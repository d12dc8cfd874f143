//! Guests written in Python and JavaScript (the SDKs in `guest-sdk/python` and
//! `guest-sdk/js`, built with `weir build`): the sandbox holds for them as for Rust guests.
//! (Their word counts are checked in `wordcount.rs` and `exactly_once.rs`, their state
//! semantics in `state.rs`, a savepoint across languages in `savepoint.rs`.)

use std::time::{Duration, Instant};

use weir::checkpoint::RestoreFrom;
use weir::{GuestUsage, Job, JobControl, JobSpec, WasmEngine};

use crate::support::{Workspace, part_text, toml_path, wasm};

/// A job whose operator is the hostile guest `component`, fed `lines`.
fn hostile_job_of(ws: &Workspace, lines: &str, component: &str) -> String {
    let input = ws.write("input.txt", lines);
    format!(
        r#"
[job]
name = "hostile"

[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "hostile"
uid = "hostile-guest"
{hostile}
input = "lines"

[[sink]]
name = "out"
type = "file"
input = "hostile"
path = {out}
"#,
        input = toml_path(&input),
        hostile = wasm(component),
        out = toml_path(&ws.path("out")),
    )
}

#[test]
fn a_python_guest_cannot_reach_files_sockets_or_the_environment() {
    let ws = Workspace::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let secret = ws.write("secret.txt", "the host's secret\n");
    let escape = ws.path("escaped.txt");
    let lines = format!(
        "read-file {}\nwrite-file {}\nconnect {}\nenv PATH\npassed\n",
        secret.display(),
        escape.display(),
        listener.local_addr().unwrap()
    );
    ws.run_ok(&hostile_job_of(&ws, &lines, "weir_test_hostile_py"));
    let out = part_text(&ws.path("out"), 0);
    let out: Vec<&str> = out.lines().collect();
    assert_eq!(out.len(), 5, "{out:?}");
    for line in &out[..4] {
        assert!(line.starts_with("err "), "access was not denied: {out:?}");
    }
    assert_eq!(out[4], "passed", "the guest carried on");
    assert!(!escape.exists(), "the guest wrote a file on the host");
    assert!(
        listener.accept().is_err(),
        "the guest connected a TCP socket"
    );
}

#[test]
fn a_python_guest_that_loops_or_allocates_without_bound_is_stopped_at_the_limits() {
    assert_stopped_at_the_limits("weir_test_hostile_py");
}

/// The hostile guest `component` fails its job cleanly, naming the operator and the limit,
/// when it loops forever and when it allocates without bound.
fn assert_stopped_at_the_limits(component: &str) {
    let cases: [(&str, &[&str]); 2] = [
        (
            "spin",
            &["execution deadline exceeded: process ran longer than 5s"],
        ),
        (
            "hog",
            &["memory limit exceeded", "over the limit of 256 MiB"],
        ),
    ];
    for (line, errors) in cases {
        let ws = Workspace::new();
        let lines = format!("apple\n{line}\ncherry\n");
        let run = ws.run(&hostile_job_of(&ws, &lines, component));
        run.assert_clean_failure();
        let stderr = run.stderr();
        let named = errors.iter().all(|e| stderr.contains(e));
        assert!(
            stderr.contains("hostile-guest") && named,
            "{component}: {run}"
        );
    }
}

#[test]
fn a_javascript_guest_reaches_nothing_outside_and_is_stopped_at_the_limits() {
    // No Node or Deno API to reach files, processes or sockets.
    let ws = Workspace::new();
    ws.run_ok(&hostile_job_of(
        &ws,
        "globals\npassed\n",
        "weir_test_hostile_js",
    ));
    let out = part_text(&ws.path("out"), 0);
    assert_eq!(out, "err none\npassed\n");

    // `fetch` is there (StarlingMonkey defines it) but built without its HTTP feature: a
    // call traps, which fails the job cleanly; nothing connects.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let line = format!("fetch http://{}/\n", listener.local_addr().unwrap());
    let run = ws.run(&hostile_job_of(&ws, &line, "weir_test_hostile_js"));
    run.assert_clean_failure();
    assert!(
        run.stderr().contains("hostile-guest") && run.stderr().contains("guest trapped"),
        "{run}"
    );
    assert!(
        listener.accept().is_err(),
        "the guest connected a TCP socket"
    );

    assert_stopped_at_the_limits("weir_test_hostile_js");
}

/// Runs the word count operator `component` over keyed words that come a few at a time, so
/// that nearly every record is a call of its own, until it has been called `calls` times;
/// returns what the job reported of it (calls, linear memory) every 100 ms.
fn guest_memory_over_calls(component: &str, calls: u64) -> Vec<GuestUsage> {
    let ws = Workspace::new();
    let spec = ws.write(
        "job.toml",
        format!(
            r#"
[job]
name = "soak"

[[source]]
name = "words"
type = "generator"
mode = "keyed_words"
vocabulary = 5000
rate = 4000

[[operator]]
name = "count"
uid = "count"
{count}
input = "words"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
            count = wasm(component),
        ),
    );
    let engine = WasmEngine::new(Some(ws.path("cache"))).expect("an engine");
    let job = Job::new(JobSpec::from_file(&spec).unwrap(), &engine).unwrap();
    let control = JobControl::new();
    let running = job
        .start_controlled(RestoreFrom::Fresh, control.clone())
        .unwrap();
    let usage = || {
        let v = &running.metrics().vertices;
        v.iter().find(|v| v.name == "count").unwrap().guest_usage()
    };
    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while samples.last().is_none_or(|u: &GuestUsage| u.calls < calls) {
        assert!(!running.is_finished(), "the job ended");
        assert!(Instant::now() < deadline, "{calls} calls took too long");
        std::thread::sleep(Duration::from_millis(100));
        samples.extend(usage());
    }
    control.stop();
    running.wait().unwrap();
    samples
}

#[test]
fn python_and_javascript_guests_do_not_grow_per_call_as_reported() {
    // componentize-js was reported to grow an instance's memory from 74 to 1,145 MiB over
    // 100k export calls (11 KiB a call). Here a call is about one record: linear memory
    // (which only grows) may grow while a runtime sizes its heap (StarlingMonkey's GC heap
    // grows to about 80 MiB over the first 35k calls, then stays), but over the second half
    // of 40k calls such a leak would add 220 MiB.
    for component in ["wordcount_count_py", "wordcount_count_js"] {
        let samples = guest_memory_over_calls(component, 40_000);
        let last = *samples.last().unwrap();
        let half = (samples.iter())
            .find(|u| u.calls >= last.calls / 2)
            .copied()
            .unwrap();
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        assert!(
            last.memory_bytes <= half.memory_bytes + (64 << 20),
            "{component} grew from {:.1} MiB at {} calls to {:.1} MiB at {}",
            mib(half.memory_bytes),
            half.calls,
            mib(last.memory_bytes),
            last.calls
        );
    }
}
