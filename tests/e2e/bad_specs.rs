//! Every bad input is refused before the job starts, with an error that names the item at
//! fault; `weir validate` gives the same verdict without running anything.

use std::path::Path;

use crate::support::{Run, Workspace, operator, repo, toml_path, wasm, weir};

/// The pieces of a good job, to break one at a time.
struct Job {
    job: String,
    source: String,
    split: String,
    count: String,
}

impl Job {
    fn new(ws: &Workspace) -> Job {
        let input = ws.write("input.txt", "to be or not to be\n");
        Job {
            job: "[job]\nname = \"bad\"\nparallelism = 2\n".into(),
            source: format!(
                "[[source]]\nname = \"lines\"\ntype = \"file\"\npath = {}\n",
                toml_path(&input)
            ),
            split: format!(
                "[[operator]]\nname = \"split\"\nuid = \"split-uid\"\n{}\ninput = \"lines\"\nedge = \"rebalance\"\n",
                wasm("wordcount_split")
            ),
            count: format!(
                "[[operator]]\nname = \"count\"\nuid = \"count-uid\"\n{}\ninput = \"split\"\nedge = \"key_by\"\n",
                wasm("wordcount_count")
            ),
        }
    }

    fn text(&self, ws: &Workspace) -> String {
        format!(
            "{}\n{}\n{}\n{}\n[[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"count\"\npath = {}\nformat = \"key_value\"\n",
            self.job,
            self.source,
            self.split,
            self.count,
            toml_path(&ws.path("out"))
        )
    }
}

/// Runs `weir run` and `weir validate` on the spec text and checks both fail cleanly, name
/// every one of `needles`, and that the job never started (its sink made no output).
fn refused(ws: &Workspace, spec: &str, needles: &[&str]) {
    let path = ws.write("job.toml", spec);
    refused_at(ws, &path, needles);
}

fn refused_at(ws: &Workspace, path: &Path, needles: &[&str]) {
    for command in ["run", "validate"] {
        let run = weir(&[command], path);
        check_refusal(&run, command, needles);
        assert!(
            !ws.path("out").exists(),
            "`weir {command}` started the job before refusing it:\n{run}"
        );
    }
}

fn check_refusal(run: &Run, command: &str, needles: &[&str]) {
    run.assert_clean_failure();
    assert!(
        !run.stdout().contains("finished"),
        "`weir {command}` ran the job:\n{run}"
    );
    let stderr = run.stderr();
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "`weir {command}`: the error does not mention {needle:?}:\n{run}"
        );
    }
}

#[test]
fn the_good_spec_runs_and_validates() {
    let ws = Workspace::new();
    let spec = Job::new(&ws).text(&ws);
    ws.run_ok(&spec);
    let validate = weir(&["validate"], &ws.path("job.toml"));
    assert!(validate.success(), "{validate}");
}

#[test]
fn validate_accepts_the_wordcount_example() {
    let run = weir(&["validate"], &repo().join("examples/wordcount/job.toml"));
    assert!(run.success(), "{run}");
    assert!(run.stdout().contains("is valid"), "{run}");
}

#[test]
fn an_operator_that_rejects_its_config_is_refused_by_validate() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.split.push_str("config = { lowercase = \"yes\" }\n");
    let spec = ws.write("job.toml", job.text(&ws));
    let needles = ["\"split\"", "open failed", "lowercase"];
    let validate = weir(&["validate"], &spec);
    check_refusal(&validate, "validate", &needles);
    assert!(!ws.path("out").exists(), "validate wrote nothing");
    // `run` gets as far as opening the operator, and fails at once.
    check_refusal(&weir(&["run"], &spec), "run", &needles);
}

#[test]
fn a_sink_directory_that_cannot_be_created_is_refused_by_validate() {
    let ws = Workspace::new();
    let spec = Job::new(&ws).text(&ws).replace(
        &toml_path(&ws.path("out")),
        &format!("\"/sys/weir-e2e-{}\"", std::process::id()),
    );
    refused(
        &ws,
        &spec,
        &["sink \"out\"", "cannot create the output directory"],
    );
}

#[test]
fn validate_leaves_nothing_behind() {
    let ws = Workspace::new();
    let spec = ws.write("job.toml", Job::new(&ws).text(&ws));
    let run = weir(&["validate"], &spec);
    assert!(run.success(), "{run}");
    assert!(
        !ws.path("out").exists(),
        "validate created the sink's directory"
    );
}

#[test]
fn missing_spec_file() {
    let ws = Workspace::new();
    refused_at(&ws, &ws.path("no-such-job.toml"), &["no-such-job.toml"]);
}

#[test]
fn malformed_toml() {
    let ws = Workspace::new();
    let spec = Job::new(&ws).text(&ws).replace("[[sink]]", "[[sink]");
    refused(&ws, &spec, &["job.toml", "not valid"]);
}

#[test]
fn unknown_input_name() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.count = job.count.replace("input = \"split\"", "input = \"splitt\"");
    refused(&ws, &job.text(&ws), &["\"count\"", "\"splitt\""]);
}

#[test]
fn a_cycle() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.split = job
        .split
        .replace("input = \"lines\"", "input = [\"lines\", \"count\"]");
    refused(&ws, &job.text(&ws), &["cycle", "split", "count"]);
}

#[test]
fn parallelism_zero() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.count.push_str("parallelism = 0\n");
    refused(&ws, &job.text(&ws), &["\"count\"", "parallelism 0"]);
}

#[test]
fn parallelism_above_max_parallelism() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.job.push_str("max_parallelism = 4\n");
    job.count.push_str("parallelism = 8\n");
    refused(&ws, &job.text(&ws), &["\"count\"", "parallelism 8", "(4)"]);
}

#[test]
fn key_by_after_a_file_source() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.split = job
        .split
        .replace("edge = \"rebalance\"", "edge = \"key_by\"");
    refused(&ws, &job.text(&ws), &["\"split\"", "\"lines\"", "key_by"]);
}

#[test]
fn a_misspelt_or_impossible_limit() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.job.push_str("[limits]\nmemroy = \"1 GiB\"\n");
    refused(
        &ws,
        &job.text(&ws),
        &[
            "[limits]: unknown field",
            "memroy",
            "expected one of `memory`",
        ],
    );
    let mut job = Job::new(&ws);
    job.count.push_str("limits = { memory = \"8 GiB\" }\n");
    refused(&ws, &job.text(&ws), &["\"count\"", "memory", "4 GiB"]);
}

#[test]
fn a_grant_of_what_does_not_exist() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.count
        .push_str("grants = { dirs = [{ host = \"no-such-dir\", guest = \"/data\" }] }\n");
    refused(
        &ws,
        &job.text(&ws),
        &["\"count\"", "no-such-dir", "not a directory"],
    );
    let mut job = Job::new(&ws);
    job.count
        .push_str("grants = { env = [\"WEIR_NO_SUCH_VARIABLE\"] }\n");
    refused(
        &ws,
        &job.text(&ws),
        &["\"count\"", "WEIR_NO_SUCH_VARIABLE", "not set"],
    );
}

#[test]
fn limits_on_a_native_operator() {
    let ws = Workspace::new();
    let mut job = Job::new(&ws);
    job.count = job
        .count
        .replace(&wasm("wordcount_count"), "native = \"count_words\"");
    job.count.push_str("limits = { memory = \"1 GiB\" }\n");
    refused(&ws, &job.text(&ws), &["\"count\"", "WebAssembly"]);
}

/// Replaces the split operator's component with `bytes` (or a missing file).
fn bad_component(bytes: Option<&[u8]>, needles: &[&str]) {
    let ws = Workspace::new();
    let file = ws.path("split.wasm");
    if let Some(bytes) = bytes {
        ws.write("split.wasm", bytes);
    }
    let mut job = Job::new(&ws);
    job.split = job
        .split
        .replace(&toml_path(&operator("wordcount_split")), &toml_path(&file));
    let mut all = vec!["\"split\"", "split-uid", "split.wasm"];
    all.extend_from_slice(needles);
    refused(&ws, &job.text(&ws), &all);
}

#[test]
fn a_core_module_instead_of_a_component() {
    // `(module)`: the magic, then version 1.
    bad_component(Some(b"\0asm\x01\0\0\0"), &["core", "not a component"]);
}

#[test]
fn random_bytes() {
    let mut seed = 0x1234_5678_9abc_def0_u64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 56) as u8
        })
        .collect();
    bad_component(Some(&bytes), &["not a WebAssembly file"]);
}

#[test]
fn random_bytes_after_the_wasm_magic() {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.extend((0..512u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8));
    bad_component(Some(&bytes), &[]);
}

#[test]
fn an_empty_file() {
    bad_component(Some(b""), &["empty"]);
}

#[test]
fn a_missing_wasm_file() {
    bad_component(None, &["cannot read"]);
}

#[test]
fn a_component_of_another_world() {
    let bytes = std::fs::read(operator("weir_test_other_world")).expect("the other-world guest");
    bad_component(
        Some(&bytes),
        &["not a weir operator", "weir:stream/operator"],
    );
}

#[test]
fn a_component_of_another_version() {
    let bytes =
        std::fs::read(operator("weir_test_wrong_version")).expect("the wrong-version guest");
    bad_component(Some(&bytes), &["0.9.0", "0.2.0"]);
}

#[test]
fn a_stop_savepoint_that_could_not_be_taken_is_refused_before_the_job_starts() {
    let ws = Workspace::new();
    let spec = ws.write("job.toml", Job::new(&ws).text(&ws));
    let savepoint = ws.path("savepoint");
    let summary = ws.path("summary.json");
    let args = [
        "run",
        "--summary-json",
        summary.to_str().unwrap(),
        "--stop-savepoint",
        savepoint.to_str().unwrap(),
    ];
    // A job without checkpoints takes no savepoint.
    let run = weir(&args, &spec);
    check_refusal(&run, "run", &["--stop-savepoint", "[checkpoint]"]);
    assert!(!ws.path("out").exists(), "the job started:\n{run}");
    // The summary says why, as for a job that failed while it ran.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary).expect("a summary")).unwrap();
    assert_eq!(json["status"], "failed", "{json}");
    assert!(
        json["error"].as_str().unwrap().contains("[checkpoint]"),
        "{json}"
    );
    // Nor one into a directory that holds something.
    let chk = toml_path(&ws.path("chk"));
    let text = Job::new(&ws).text(&ws).replace(
        "[job]",
        &format!("[checkpoint]\ninterval = \"1s\"\ndir = {chk}\n\n[job]"),
    );
    let spec = ws.write("job.toml", text);
    std::fs::create_dir(&savepoint).unwrap();
    ws.write("savepoint/notes.txt", "mine");
    let run = weir(&args, &spec);
    check_refusal(&run, "run", &["--stop-savepoint", "name a new one"]);
    assert!(!ws.path("out").exists(), "the job started:\n{run}");
    let kept = std::fs::read_to_string(savepoint.join("notes.txt")).unwrap();
    assert_eq!(kept, "mine");
    // Nor one into a directory a start would lose it in, or one weir cannot write; each
    // found at the start rather than at the stop.
    let refused = |dir: &Path, spec: &Path, why: &str| {
        let run = weir(&[&args[..4], &[dir.to_str().unwrap()]].concat(), spec);
        check_refusal(&run, "run", &["--stop-savepoint", why]);
        assert!(!ws.path("out").exists(), "the job started:\n{run}");
    };
    // The job's checkpoint directory, whose retention would delete it.
    refused(&ws.path("chk/bad/savepoint"), &spec, "checkpoint directory");
    // Under a file: root may write anywhere else.
    refused(&spec.join("savepoint"), &spec, "cannot create it or write");
    // The RocksDB state directory, which the next start clears.
    let state = toml_path(&ws.path("state"));
    let rocks = std::fs::read_to_string(&spec).unwrap().replace(
        "[job]",
        &format!("[state]\nbackend = \"rocksdb\"\ndir = {state}\n\n[job]"),
    );
    let rocks = ws.write("rocks.toml", rocks);
    refused(
        &ws.path("state/bad/savepoint"),
        &rocks,
        "RocksDB state directory",
    );
    // An empty or new directory is fine.
    std::fs::remove_file(savepoint.join("notes.txt")).unwrap();
    let run = weir(&args, &spec);
    assert!(run.success(), "{run}");
    assert!(ws.path("out").exists(), "{run}");
}
