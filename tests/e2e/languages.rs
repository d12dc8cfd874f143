//! Guests written in Python and JavaScript (the SDKs in `guest-sdk/python` and
//! `guest-sdk/js`, built with `weir build`): the sandbox holds for them as for Rust guests.
//! (Their word counts are checked in `wordcount.rs` and `exactly_once.rs`, their state
//! semantics in `state.rs`, a savepoint across languages in `savepoint.rs`.)

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
