//! The sandbox through the library's runtime API, in one process: every hostile component fails
//! its own job with the class of what it did, or is denied what it reached for, while a job
//! running beside them on the same engine keeps running and produces exact output.

use std::path::{Path, PathBuf};

use weir::{FailureKind, Job, JobError, JobSpec, JobSummary, Limit, Limits, WasmEngine, WasmError};

use crate::support::{Workspace, operator, part_text, toml_path, toml_str};

/// A job spec file: `lines` → operator `op` (its `wasm` and `extra` keys) → file sink `out-<name>`.
/// A name that starts with `keyed-` puts the keyer between (`KEY VALUE` lines) over `key_by`.
fn spec(ws: &Workspace, name: &str, wasm: &Path, lines: &str, extra: &str) -> PathBuf {
    let input = ws.write(&format!("{name}.txt"), lines);
    let (keyer, input_of_op) = if name.starts_with("keyed-") {
        (
            format!(
                "[[operator]]\nname = \"keys\"\nuid = \"keys\"\nwasm = {}\ninput = \"lines\"\n",
                toml_path(&operator("weir_test_keyer"))
            ),
            "input = \"keys\"\nedge = \"key_by\"",
        )
    } else {
        (String::new(), "input = \"lines\"")
    };
    ws.write(
        &format!("{name}.toml"),
        format!(
            r#"
[job]
name = "{name}"

[[source]]
name = "lines"
type = "file"
path = {input}

{keyer}
[[operator]]
name = "op"
uid = "hostile-op"
wasm = {wasm}
{input_of_op}
{extra}

[[sink]]
name = "out"
type = "file"
input = "op"
path = {out}
"#,
            input = toml_path(&input),
            wasm = toml_path(wasm),
            out = toml_path(&ws.path(&format!("out-{name}"))),
        ),
    )
}

fn run(engine: &WasmEngine, spec: &Path) -> Result<JobSummary, JobError> {
    let spec = JobSpec::from_file(spec).expect("a valid spec");
    Job::new(spec, engine)?.start()?.wait()
}

/// The kind and message of a task failure.
fn failure(result: Result<JobSummary, JobError>) -> (FailureKind, String) {
    match result {
        Err(JobError::Task {
            kind, uid, message, ..
        }) => {
            assert_eq!(uid.as_deref(), Some("hostile-op"), "{message}");
            (kind, message)
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
}

/// The load error of a component.
fn refused(result: Result<JobSummary, JobError>) -> WasmError {
    match result {
        Err(JobError::Component { uid, cause, .. }) => {
            assert_eq!(uid, "hostile-op");
            cause
        }
        other => panic!("expected a component error, got {other:?}"),
    }
}

fn output(ws: &Workspace, name: &str) -> Vec<String> {
    part_text(&ws.path(&format!("out-{name}")), 0)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The job that must keep running: an unbounded sequence through a WebAssembly operator.
fn steady_job(ws: &Workspace) -> PathBuf {
    ws.write(
        "steady.toml",
        format!(
            r#"
[job]
name = "steady"

[[source]]
name = "seq"
type = "generator"
mode = "sequence"
rate = 200000

[[operator]]
name = "pass"
uid = "pass"
wasm = {wasm}
input = "seq"

[[sink]]
name = "out"
type = "file"
input = "pass"
path = {out}
"#,
            wasm = toml_path(&operator("weir_test_poison")),
            out = toml_path(&ws.path("out-steady")),
        ),
    )
}

/// Whether this is the process of its own that test `name` runs in (to measure how much it
/// grows the process: tests running beside it in this one, one of which reads a
/// million-line output, grew it by over a gigabyte). If not, runs the test there and returns
/// `false`.
fn in_a_process_of_its_own(name: &str) -> bool {
    const ALONE: &str = "WEIR_E2E_ALONE";
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    let name = format!("isolation::{name}");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--test-threads", "1", "--nocapture"])
        .env(ALONE, "1")
        .status()
        .expect("run the test in a process of its own");
    assert!(
        status.success(),
        "{name} failed in its own process (its output is above)"
    );
    false
}

/// The most resident memory this process has held.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM in /proc/self/status");
    kib * 1024
}

#[test]
fn a_firing_of_many_timers_hands_on_each_calls_output_before_the_next() {
    if !in_a_process_of_its_own(
        "a_firing_of_many_timers_hands_on_each_calls_output_before_the_next",
    ) {
        return;
    }
    // 100,000 timers of one key fire at the end of the input, 4,096 to a call of the guest,
    // each emitting 16 KiB: 1.6 GB in all, 64 MiB a call. Each call's output goes on to the
    // sink before the next call, so the process holds a few calls' worth, not the firing's.
    let ws = Workspace::new();
    let input = ws.write("commands.txt", "k timers 100000\n");
    let spec = ws.write(
        "timers.toml",
        format!(
            r#"
[job]
name = "many-timers"

[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "keys"
uid = "keys"
wasm = {keyer}
input = "lines"

[[operator]]
name = "op"
uid = "hostile-op"
wasm = {wasm}
input = "keys"
edge = "key_by"
config = {{ timer_bytes = 16384 }}

[[sink]]
name = "out"
type = "discard"
input = "op"
"#,
            input = toml_path(&input),
            keyer = toml_path(&operator("weir_test_keyer")),
            wasm = toml_path(&operator("weir_test_hostile")),
        ),
    );
    let engine = WasmEngine::new(Some(ws.path("cache"))).expect("an engine");
    let summary = run(&engine, &spec).expect("the job finishes");
    let out = summary.vertices.iter().find(|v| v.name == "out").unwrap();
    assert_eq!(
        out.records_in, 100_001,
        "every timer fired, after the command's answer"
    );
    let peak = peak_rss_bytes();
    assert!(
        peak < 768 << 20,
        "the process held {} MiB at its peak",
        peak >> 20
    );
}

#[test]
fn a_slow_compile_holds_back_other_compiles_only_for_their_time_limit() {
    // An engine without a cache compiles a Python component (18 MB; several seconds on two
    // cores). Meanwhile a component it loaded before loads at once, and a compile of another
    // waits at most its own compile_time for its turn, then fails saying why.
    let engine = WasmEngine::new(None).expect("an engine");
    let loaded = operator("weir_test_hostile");
    engine.load(&loaded, &Limits::default()).expect("it loads");
    let slow = {
        let (engine, python) = (engine.clone(), operator("wordcount_count_py"));
        std::thread::spawn(move || engine.load(&python, &Limits::default()).map(drop))
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    engine
        .load(&loaded, &Limits::default())
        .expect("loaded before");
    let short = Limits {
        compile_time: std::time::Duration::from_millis(500),
        ..Limits::default()
    };
    let busy = engine.load(&operator("weir_test_keyer"), &short).err();
    assert!(
        !slow.is_finished(),
        "the Python component compiled too fast to hold the others back"
    );
    let busy = busy.expect("another compile waits its turn");
    assert!(
        matches!(busy, WasmError::CompileBusy { .. })
            && busy.to_string().contains("another component was compiling"),
        "{busy}"
    );
    slow.join().unwrap().expect("the Python component compiles");
}

#[test]
fn hostile_components_fail_their_own_jobs_while_a_job_beside_them_runs_on() {
    if !in_a_process_of_its_own(
        "hostile_components_fail_their_own_jobs_while_a_job_beside_them_runs_on",
    ) {
        return;
    }
    let ws = Workspace::new();
    let cache = ws.path("cache");
    let engine = WasmEngine::new(Some(cache)).expect("an engine");
    let hostile = operator("weir_test_hostile");
    let fast_deadline = r#"limits = { call_deadline = "500ms" }"#;

    let steady = JobSpec::from_file(&steady_job(&ws)).unwrap();
    let steady = Job::new(steady, &engine).unwrap().start().unwrap();

    // Files that are not components, and components that are not weir operators.
    let not_wasm = ws.write("random.wasm", b"\x13\x37 certainly not wasm \xff\xfe");
    let core = ws.write("core.wasm", b"\0asm\x01\0\0\0");
    let empty = ws.write("empty.wasm", b"");
    for (name, wasm, check) in [
        (
            "random",
            not_wasm,
            (|e: &WasmError| matches!(e, WasmError::NotWasm { .. })) as fn(&WasmError) -> bool,
        ),
        ("core", core, |e| matches!(e, WasmError::CoreModule { .. })),
        ("empty", empty, |e| matches!(e, WasmError::Empty { .. })),
        ("other-world", operator("weir_test_other_world"), |e| {
            matches!(e, WasmError::WrongWorld { .. })
        }),
        (
            "unknown-import",
            operator("weir_test_unknown_import"),
            |e| matches!(e, WasmError::UnknownImport { imports, .. } if imports == &["acme:vault/secrets"]),
        ),
    ] {
        let e = refused(run(&engine, &spec(&ws, name, &wasm, "a\n", "")));
        assert!(check(&e), "{name}: {e}");
    }
    let e = refused(run(
        &engine,
        &spec(
            &ws,
            "too-big",
            &hostile,
            "a\n",
            r#"limits = { wasm_size = "1 KiB" }"#,
        ),
    ));
    assert!(
        matches!(e, WasmError::TooLarge { .. }) && e.to_string().contains("limits.wasm_size"),
        "{e}"
    );
    // One byte over: both sizes in bytes, not rounded to the same figure.
    let size = std::fs::metadata(&hostile).unwrap().len();
    let e = refused(run(
        &engine,
        &spec(
            &ws,
            "one-byte-too-big",
            &hostile,
            "a\n",
            &format!("limits = {{ wasm_size = {} }}", size - 1),
        ),
    ));
    assert!(
        e.to_string().contains(&format!(
            "is {size} bytes, over the limit of {} bytes",
            size - 1
        )),
        "{e}"
    );
    // A component too large for its memory limit from the start does not instantiate.
    let e = failure(run(
        &engine,
        &spec(
            &ws,
            "small-memory",
            &hostile,
            "a\n",
            r#"limits = { memory = "1 MiB" }"#,
        ),
    ));
    assert_eq!(e.0, FailureKind::Limit(Limit::Memory), "{}", e.1);
    // A new engine without a cache has to compile, which takes longer than 1 ms.
    let fresh = WasmEngine::new(None).unwrap();
    let e = refused(run(
        &fresh,
        &spec(
            &ws,
            "slow",
            &hostile,
            "a\n",
            r#"limits = { compile_time = "1ms" }"#,
        ),
    ));
    assert!(matches!(e, WasmError::CompileTimeout { .. }), "{e}");

    // Guests that misbehave while running: each fails its job with the class of what it did.
    let cases: &[(&str, &str, &str, FailureKind, &[&str])] = &[
        (
            "spin-open",
            "a\n",
            "limits = { call_deadline = \"500ms\" }\nconfig = { spin_in_open = true }",
            FailureKind::Deadline,
            &["open ran longer than 500ms", "limits.call_deadline"],
        ),
        (
            "spin",
            "a\nspin\n",
            fast_deadline,
            FailureKind::Deadline,
            &["process ran longer than 500ms", "value \"a\""],
        ),
        (
            "hog",
            "hog\n",
            "",
            FailureKind::Limit(Limit::Memory),
            &[
                "over the limit of 256 MiB",
                "limits.memory",
                "the record: value \"hog\"",
            ],
        ),
        (
            "recurse",
            "recurse\n",
            "",
            FailureKind::StackOverflow,
            &["stack overflow in process"],
        ),
        (
            "flood",
            "flood 10000000\n",
            "",
            FailureKind::Limit(Limit::OutputRecords),
            &[
                "process emitted more than 1000000 records in one call",
                "limits.output_records",
            ],
        ),
        (
            "big-state",
            "big-state 1073741824\n",
            // Filling 1 GiB takes seconds on a loaded machine.
            "limits = { memory = \"4 GiB\", call_deadline = \"120s\" }",
            FailureKind::Limit(Limit::HostCallBytes),
            &[
                "process passed more than 256 MiB to the host in one call",
                "limits.host_call_bytes",
            ],
        ),
        (
            "operator-state",
            "big-state 104857600\n",
            "limits = { memory = \"1 GiB\" }",
            FailureKind::Limit(Limit::StateValue),
            &[
                "100.0 MiB into operator state \"big\"",
                "over the limit of 64 MiB",
                "limits.state_value",
            ],
        ),
        (
            "keyed-state",
            "k big-state 2097152\n",
            "limits = { state_value = \"1 MiB\" }",
            FailureKind::Limit(Limit::StateValue),
            &[
                "2.0 MiB into state \"big\" for key \"k\"",
                "over the limit of 1 MiB",
            ],
        ),
        (
            "poison",
            "a\nb\ntrap-until 99999999999999\n",
            "",
            FailureKind::Trap,
            &[
                "transient failure until",
                "at record 2 of the batch: without key, value \"trap-until 99999999999999\"",
            ],
        ),
        (
            "keyvalue",
            "keyvalue api-key\n",
            "",
            FailureKind::Trap,
            &["wasi:keyvalue/store@0.2.0-draft#get", "does not provide"],
        ),
        // Waiting in a host call counts against the deadline like running does.
        (
            "sleep",
            "a\nsleep 3600000\n",
            fast_deadline,
            FailureKind::Deadline,
            &["process ran longer than 500ms"],
        ),
        (
            "sleep-open",
            "a\n",
            "limits = { call_deadline = \"500ms\" }\nconfig = { sleep_in_open = true }",
            FailureKind::Deadline,
            &["open ran longer than 500ms"],
        ),
        // What the host holds or does for a guest is bounded.
        (
            "side-names",
            "side-names 200000\n",
            "",
            FailureKind::Limit(Limit::SideOutputs),
            &["more than 100 side outputs", "limits.side_outputs"],
        ),
        (
            "side-flood",
            "side-flood 2000000\n",
            "",
            FailureKind::Limit(Limit::OutputRecords),
            &["more than 1000000 records in one call"],
        ),
        (
            "keyed-states",
            "k states 1000000\n",
            "",
            FailureKind::Limit(Limit::States),
            &["declared more than 1000 states", "limits.states"],
        ),
        (
            "keyed-timers",
            "k timers 2000000\n",
            "",
            FailureKind::Limit(Limit::Timers),
            &["more than 1000000 timers pending", "limits.timers"],
        ),
        (
            "keyed-fill",
            "k fill 30000\n",
            "limits = { host_memory = \"16 MiB\" }",
            FailureKind::Limit(Limit::HostMemory),
            &[
                "over the limit of 16 MiB",
                "keyed state in memory",
                "limits.host_memory",
            ],
        ),
        // A million elements of one byte hold far more than a million bytes.
        (
            "op-units",
            "op-units 1000000\n",
            "limits = { host_memory = \"16 MiB\" }",
            FailureKind::Limit(Limit::HostMemory),
            &[
                "over the limit of 16 MiB",
                "writing operator state \"units\"",
                "limits.host_memory",
            ],
        ),
        // A guest that keeps values from batch to batch writes them back by the host's key
        // ids: only ids the host gave, and not into a state with a TTL.
        (
            "keyed-write-back",
            "k write-back written\n",
            "",
            FailureKind::Trap,
            &["state \"written\": store-ids was given key id 1000000, which the host never gave"],
        ),
        (
            "keyed-write-back-ttl",
            "k write-back ttl\n",
            "",
            FailureKind::Trap,
            &["state \"ttl\" has a TTL: its changes cannot be written back by key id"],
        ),
        // Text from a guest reaches weir's messages escaped and cut.
        (
            "forge",
            "forge\n",
            "",
            FailureKind::Error,
            &["ok\\n2026-01-01", "\\u{1b}[31m", "\\u{202e}"],
        ),
        (
            "err-big",
            "err-big 16777216\n",
            "",
            FailureKind::Error,
            &["more bytes cut"],
        ),
    ];
    let before_limits = rss_bytes();
    for &(name, lines, extra, kind, needles) in cases {
        let (found, message) = failure(run(&engine, &spec(&ws, name, &hostile, lines, extra)));
        assert_eq!(found, kind, "{name}: {message}");
        for needle in needles {
            assert!(
                message.contains(needle),
                "{name}: no {needle:?} in: {message}"
            );
        }
        if name == "poison" {
            assert!(
                !message.contains("value \"a\""),
                "the panic names its own record, not the batch's first: {message}"
            );
        }
        assert!(
            !message.contains(['\n', '\u{1b}', '\u{202e}']) && message.len() < 16 << 10,
            "{name}: a message with raw control characters, or {} bytes long",
            message.len()
        );
    }
    // Without the limits, the states, timers and state above would have made the host hold
    // gigabytes.
    let grown = rss_bytes().saturating_sub(before_limits);
    assert!(
        grown < 1 << 30,
        "the limited guests grew the process by {grown} bytes"
    );

    // A timer that registers itself again fires once more at the end of input, not for ever.
    let rearm = spec(&ws, "keyed-rearm", &hostile, "k rearm\n", "");
    run(&engine, &rearm).expect("the job ends");
    assert_eq!(output(&ws, "keyed-rearm"), ["ok", "fired 0", "fired 0"]);

    // Reaching outside the sandbox: denied inside the guest, which carries on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let secret = ws.write("secret.txt", "the host's secret\n");
    let escape = ws.path("escaped.txt");
    let lines = format!(
        "read-file {}\nwrite-file {}\nconnect {}\nenv PATH\n",
        secret.display(),
        escape.display(),
        listener.local_addr().unwrap()
    );
    run(&engine, &spec(&ws, "denied", &hostile, &lines, "")).expect("the guest carries on");
    let out = output(&ws, "denied");
    assert_eq!(out.len(), 4, "{out:?}");
    for line in &out {
        assert!(line.starts_with("err "), "access was not denied: {out:?}");
    }
    assert!(!escape.exists(), "the guest wrote a file on the host");
    assert!(
        listener.accept().is_err(),
        "the guest connected a TCP socket"
    );

    // What a spec grants, the guest gets, and no more: read-only.
    std::fs::create_dir(ws.path("reference")).unwrap();
    std::fs::write(ws.path("reference/data.txt"), "granted line\nmore\n").unwrap();
    let grants = format!(
        "grants = {{ env = [\"PATH\"], dirs = [{{ host = {}, guest = \"/reference\" }}] }}",
        toml_str("reference")
    );
    let lines =
        "read-file /reference/data.txt\nwrite-file /reference/new.txt\nenv PATH\nenv HOME\n";
    run(&engine, &spec(&ws, "granted", &hostile, lines, &grants)).expect("the guest runs");
    let out = output(&ws, "granted");
    assert_eq!(out[0], "ok granted line");
    assert!(out[1].starts_with("err "), "{out:?}");
    assert!(!ws.path("reference/new.txt").exists());
    assert_eq!(out[2], format!("ok {}", std::env::var("PATH").unwrap()));
    assert!(
        out[3].starts_with("err "),
        "only granted variables: {out:?}"
    );

    // Failing guests leave nothing behind: each hog fills 256 MiB before it fails, so 8 that
    // leaked would grow the process by 2 GiB. (Other tests run in this process too, so the
    // bound leaves them room.)
    let before = rss_bytes();
    for i in 0..8 {
        let (kind, _) = failure(run(
            &engine,
            &spec(&ws, &format!("hog{i}"), &hostile, "hog\n", ""),
        ));
        assert_eq!(kind, FailureKind::Limit(Limit::Memory));
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 1 << 30,
        "8 failed 256 MiB guests grew the process by {grown} bytes"
    );

    // The job beside them ran throughout, and its output is exact.
    assert!(!steady.is_finished(), "the steady job stopped early");
    steady.stop();
    let summary = steady.wait().expect("the steady job finishes cleanly");
    let lines: Vec<u64> = output(&ws, "steady")
        .iter()
        .map(|l| l.parse().expect("a sequence number"))
        .collect();
    assert!(lines.len() > 100_000, "only {} records", lines.len());
    assert_eq!(lines, (0..lines.len() as u64).collect::<Vec<_>>());
    let sink = summary.vertices.iter().find(|v| v.name == "out").unwrap();
    assert_eq!(sink.records_in, lines.len() as u64);
}
