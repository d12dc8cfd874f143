//! A guest that traps fails its job with an error naming the operator; the host survives.

use crate::support::{Workspace, part_text, toml_path, wasm};

fn poison_job(ws: &Workspace, lines: &str) -> String {
    let input = ws.write("input.txt", lines);
    format!(
        r#"
[job]
name = "poisoned"

[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "filter"
uid = "poison-filter"
{poison}
input = "lines"

[[sink]]
name = "out"
type = "file"
input = "filter"
path = {out}
"#,
        input = toml_path(&input),
        poison = wasm("weir_test_poison"),
        out = toml_path(&ws.path("out")),
    )
}

#[test]
fn a_trap_fails_the_job_and_names_the_operator() {
    let ws = Workspace::new();
    let run = ws.run(&poison_job(&ws, "apple\nbanana\npoison\ncherry\n"));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(stderr.contains("poison-filter"), "no operator uid:\n{run}");
    assert!(stderr.contains("poison record"), "no guest message:\n{run}");
    assert!(
        !run.stdout().contains("finished"),
        "reported as finished:\n{run}"
    );
}

#[test]
fn a_poison_record_fails_every_restart_the_same_way_until_attempts_run_out() {
    let ws = Workspace::new();
    let spec = poison_job(&ws, "apple\nbanana\npoison\ncherry\n").replace(
        "[[source]]",
        &format!(
            "[checkpoint]\ninterval = \"50ms\"\ndir = {}\n\n\
             [restart]\nstrategy = \"fixed_delay\"\nattempts = 2\ndelay = \"10ms\"\n\
             identical_failures = 0\n\n[[source]]",
            toml_path(&ws.path("chk"))
        ),
    );
    let run = ws.run(&spec);
    run.assert_clean_failure();
    let stderr = run.stderr();
    let restarts: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("restarting in"))
        .collect();
    assert_eq!(restarts.len(), 2, "one warning per restart:\n{run}");
    for line in restarts {
        assert!(
            line.contains("poison-filter") && line.contains("poison record"),
            "each restart names the same cause: {line}"
        );
    }
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert!(
        error.contains("after 2 restart(s)")
            && error.contains("poison record")
            && error.contains("attempts = 2"),
        "{error}"
    );
}

#[test]
fn without_their_bad_records_the_poison_and_hostile_guests_pass_records_through() {
    for job in [poison_job, hostile_job] {
        let ws = Workspace::new();
        ws.run_ok(&job(&ws, "apple\nbanana\ncherry\n"));
        let out = part_text(&ws.path("out"), 0);
        assert_eq!(out, "apple\nbanana\ncherry\n");
    }
}

#[test]
fn records_without_keys_into_key_by_fail_the_job_naming_the_emitter() {
    // The poison guest passes lines through without keys; `count` reads them over key_by.
    // Only running the guest tells that its records have no key.
    let ws = Workspace::new();
    let input = ws.write("input.txt", "apple\nbanana\n");
    let run = ws.run(&format!(
        r#"
[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "filter"
uid = "poison-filter"
{poison}
input = "lines"

[[operator]]
name = "count"
uid = "count"
{count}
input = "filter"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
        input = toml_path(&input),
        poison = wasm("weir_test_poison"),
        count = wasm("wordcount_count"),
    ));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("\"filter\" (uid poison-filter)")
            && stderr.contains("without a key into the key_by edge to \"count\""),
        "{run}"
    );
}

#[test]
fn timers_of_keys_that_arrive_over_another_edge_than_key_by_fail_the_job() {
    // Keyed records rebalanced over two subtasks: half reach a subtask that does not own
    // their key's group. Its timers would be dropped from its checkpoints; they are refused.
    let ws = Workspace::new();
    let lines: String = (0..16).map(|i| format!("key{i} timers 1\n")).collect();
    let input = ws.write("input.txt", lines);
    let run = ws.run(&format!(
        r#"
[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "keys"
uid = "keys"
{keyer}
input = "lines"

[[operator]]
name = "op"
uid = "hostile-op"
{hostile}
input = "keys"
edge = "rebalance"
parallelism = 2

[[sink]]
name = "out"
type = "discard"
input = "op"
parallelism = 2
"#,
        input = toml_path(&input),
        keyer = wasm("weir_test_keyer"),
        hostile = wasm("weir_test_hostile"),
    ));
    run.assert_clean_failure();
    assert!(
        run.stderr()
            .contains("a timer was registered for a key in key group")
            && run.stderr().contains("over a key_by edge"),
        "{run}"
    );
}

#[test]
fn ctrl_c_drains_an_unbounded_job_and_flushes_its_sink() {
    let ws = Workspace::new();
    let spec = ws.write(
        "job.toml",
        format!(
            r#"
[[source]]
name = "gen"
type = "generator"
mode = "sequence"
rate = 500000

[[operator]]
name = "filter"
uid = "poison-filter"
{poison}
input = "gen"

[[sink]]
name = "out"
type = "file"
input = "filter"
path = {out}
"#,
            poison = wasm("weir_test_poison"),
            out = toml_path(&ws.path("out")),
        ),
    );
    let child = crate::support::weir_command(&["run", "--no-progress"], &spec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start weir");
    // Let it run until records reach the sink's (in-progress) part file, then interrupt it
    // once.
    let written = || {
        std::fs::read_dir(ws.path("out"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.metadata().is_ok_and(|m| m.len() > 0))
    };
    for _ in 0..600 {
        if written() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let out = child.wait_with_output().expect("weir exits");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a stopped job exits 3: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stopped after"), "{stdout}");
    // Everything the sink received is in its file, in order, without gaps.
    let lines: Vec<u64> = part_text(&ws.path("out"), 0)
        .lines()
        .map(|l| l.parse().expect("a sequence number"))
        .collect();
    assert!(!lines.is_empty(), "records flowed before the stop");
    assert_eq!(lines, (0..lines.len() as u64).collect::<Vec<_>>());
    let sink_in = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("out "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse::<usize>().ok())
        .expect("the summary's sink line");
    assert_eq!(
        sink_in,
        lines.len(),
        "the summary counts what the sink wrote"
    );
}

/// A job whose operator is the hostile guest, fed `lines`.
fn hostile_job(ws: &Workspace, lines: &str) -> String {
    poison_job(ws, lines).replace(&wasm("weir_test_poison"), &wasm("weir_test_hostile"))
}

#[test]
fn a_guest_that_loops_forever_is_stopped_at_the_call_deadline() {
    let ws = Workspace::new();
    let run = ws.run(&hostile_job(&ws, "apple\nspin\ncherry\n"));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("poison-filter")
            && stderr.contains("execution deadline exceeded: process ran longer than 5s"),
        "{run}"
    );
}

#[test]
fn a_guest_that_grows_memory_without_bound_is_stopped_at_the_memory_limit() {
    let ws = Workspace::new();
    let run = ws.run(&hostile_job(&ws, "apple\nhog\n"));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("poison-filter")
            && stderr.contains("memory limit exceeded")
            && stderr.contains("over the limit of 256 MiB"),
        "{run}"
    );
}

#[test]
fn guest_stdout_and_stderr_go_to_the_log_tagged_with_the_operator_and_rate_limited() {
    let ws = Workspace::new();
    let mut lines = String::from("print hello from the guest\n");
    for i in 0..500 {
        lines.push_str(&format!("print noise {i}\n"));
    }
    let run = ws.run_ok(&hostile_job(&ws, &lines));
    let stderr = run.stderr();
    let hello = stderr
        .lines()
        .find(|l| l.contains("hello from the guest"))
        .unwrap_or_else(|| panic!("the guest's stderr is not in the log:\n{run}"));
    assert!(
        hello.contains("poisoned") && hello.contains("poison-filter") && hello.contains("stderr"),
        "not tagged with job, operator and stream: {hello}"
    );
    // Each `print` writes a line to stdout (logged at info, not shown) and one to stderr.
    let noise = stderr.lines().filter(|l| l.contains("noise")).count();
    assert!(noise < 500, "not rate-limited: {noise} lines");
    assert!(
        stderr.contains("line(s) of the operator's output over the limit of 100 lines per second"),
        "the dropped lines are not reported:\n{run}"
    );
    // The records themselves pass through untouched.
    let out = part_text(&ws.path("out"), 0);
    assert_eq!(out, lines);
}

/// Asserts that `stderr` holds no control character a terminal would act on (a newline only
/// ends a line), no bidirectional override, and no line that pretends to be one of weir's.
fn assert_no_forged_text(stderr: &str) {
    assert!(
        !stderr.contains(['\u{1b}', '\u{202e}', '\r']),
        "raw control characters on stderr:\n{stderr}"
    );
    assert!(
        !stderr.lines().any(|l| l.starts_with("2026-01-01")),
        "a guest started a line of its own on stderr:\n{stderr}"
    );
}

#[test]
fn what_guests_write_reaches_stderr_escaped_and_bounded() {
    // Printed and logged text with a terminal escape and a bidirectional override, then an
    // error text that would forge a line of weir's log.
    let ws = Workspace::new();
    let run = ws.run(&hostile_job(
        &ws,
        "print \u{1b}[31mred\u{202e}desrever\nforge\n",
    ));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(stderr.contains("\\u{1b}[31mred\\u{202e}"), "{run}");
    assert!(stderr.contains("ok\\n2026-01-01"), "{run}");
    assert_no_forged_text(&stderr);

    // A 16 MiB error text is cut.
    let ws = Workspace::new();
    let run = ws.run(&hostile_job(&ws, "err-big 16777216\n"));
    run.assert_clean_failure();
    assert!(run.stderr().contains("more bytes cut"), "{run}");
    assert!(
        run.stderr().len() < 64 << 10,
        "{} bytes",
        run.stderr().len()
    );

    // Records to 100 side outputs that nothing reads: one warning, naming a few.
    let ws = Workspace::new();
    let run = ws.run_ok(&hostile_job(&ws, "side-names 100\n"));
    let stderr = run.stderr();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("side outputs no vertex reads"))
        .collect();
    assert_eq!(warnings.len(), 1, "{run}");
    assert!(
        warnings[0].contains("100 records") && warnings[0].contains("95 more"),
        "{}",
        warnings[0]
    );
}
