//! Guests written in Python (the SDK in `guest-sdk/python`, built with `weir build`): the
//! sandbox holds for them as for Rust guests. (The word count's Python operators are checked
//! in `wordcount.rs` and `exactly_once.rs`, the state semantics in `state.rs`.)

use crate::support::{Workspace, part_text, toml_path, wasm};

/// A job whose operator is the Python hostile guest, fed `lines`.
fn hostile_job(ws: &Workspace, lines: &str) -> String {
    let input = ws.write("input.txt", lines);
    format!(
        r#"
[job]
name = "hostile-python"

[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "hostile"
uid = "hostile-python"
{hostile}
input = "lines"

[[sink]]
name = "out"
type = "file"
input = "hostile"
path = {out}
"#,
        input = toml_path(&input),
        hostile = wasm("weir_test_hostile_py"),
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
    ws.run_ok(&hostile_job(&ws, &lines));
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
fn a_python_guest_that_loops_forever_is_stopped_at_the_call_deadline() {
    let ws = Workspace::new();
    let run = ws.run(&hostile_job(&ws, "apple\nspin\ncherry\n"));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("hostile-python")
            && stderr.contains("execution deadline exceeded: process ran longer than 5s"),
        "{run}"
    );
}

#[test]
fn a_python_guest_that_allocates_without_bound_is_stopped_at_the_memory_limit() {
    let ws = Workspace::new();
    let run = ws.run(&hostile_job(&ws, "apple\nhog\n"));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("hostile-python")
            && stderr.contains("memory limit exceeded")
            && stderr.contains("over the limit of 256 MiB"),
        "{run}"
    );
}
