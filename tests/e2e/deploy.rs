//! Hot deploy through `weir serve`: operators of a running word count get new code while
//! sources and sinks run on; new code that fails rolls back by itself; a rollback is one call;
//! a server killed during a probation resumes the job on one version; an upgrade that names a
//! component that does not load changes nothing; a window's function gets new code while its
//! windows stay open, and a server stopped or killed during its probation resumes the job on
//! one version; an upgrade on RocksDB state carries on what the old code held in the guest.
//! Outputs are checked word by word (every count once, in order, the old
//! format before the new) or against a run without the upgrade.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::service::{Server, TOKEN, committed, reference, word_count};
use crate::support::{Workspace, operator, toml_path, toml_str, weir};

/// Lines of the rate-limited word counts, and their rate: long enough for an upgrade or two.
const LINES: u64 = 200_000;
const RATE: u64 = 20_000;

/// A server running the word count into `out`, with `tables` added to its spec; the server
/// and the job's id.
fn running_word_count(ws: &Workspace, out: &Path, tables: &str) -> (Server, String) {
    let server = Server::start(ws, &ws.path("data"), &[]);
    let (split, count) = server.word_count_components();
    let spec = word_count("deployed", LINES, Some(RATE), &split, &count, 2, out) + tables;
    let id = server.submit(json!({ "spec": spec }));
    server.wait_status(&id, "running", Duration::from_secs(60));
    server.wait_checkpoints(&id, 2);
    (server, id)
}

/// Asks for `request` of job `id` (`upgrade` or `rollback`) and waits for its operation.
fn operate(server: &Server, id: &str, what: &str, request: Value) -> Value {
    let op = server.ok("POST", &format!("/v1/jobs/{id}/{what}"), Some(request), 202);
    server.wait_operation(id, op["request_id"].as_str().unwrap())
}

/// Asks job `id` to upgrade its operator `uid` to component `sha` with `config` on a
/// probation too long to end in a test, and waits until it is on probation; the operation.
fn start_probation(server: &Server, id: &str, uid: &str, sha: &str, config: Value) -> Value {
    let request = json!({
        "operators": [{ "uid": uid, "component": format!("sha256:{sha}"), "config": config }],
        "probation_ms": 600_000,
    });
    let op = server.ok(
        "POST",
        &format!("/v1/jobs/{id}/upgrade"),
        Some(request),
        202,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.job(id)["upgrades"][0]["status"] != "probation" {
        assert!(Instant::now() < deadline, "{}", server.job(id));
        std::thread::sleep(Duration::from_millis(20));
    }
    op
}

/// Asserts that every word's counts in `by_word` go on across an upgrade: the old code's and
/// the new code's together are 1..its total in `totals`, each once, the old before the new;
/// and that both codes wrote some.
fn assert_counts_go_on(
    by_word: &BTreeMap<String, (Vec<u64>, Vec<u64>)>,
    totals: &BTreeMap<String, u64>,
) {
    assert_eq!(
        by_word.keys().collect::<Vec<_>>(),
        totals.keys().collect::<Vec<_>>()
    );
    let (mut old_lines, mut new_lines) = (0, 0);
    for (word, (old, new)) in by_word {
        // The new code read the counts the old code wrote.
        let all: Vec<u64> = old.iter().chain(new).copied().collect();
        let expected: Vec<u64> = (1..=totals[word]).collect();
        assert_eq!(all, expected, "the counts of {word:?}");
        old_lines += old.len();
        new_lines += new.len();
    }
    assert!(old_lines > 0 && new_lines > 0, "{old_lines} {new_lines}");
}

/// Upgrades the count of job `id` to component `sha` with `config` and `probation_ms`.
fn upgrade_count(server: &Server, id: &str, sha: &str, config: Value, probation_ms: u64) -> Value {
    let request = json!({
        "operators": [{ "uid": "count", "component": format!("sha256:{sha}"), "config": config }],
        "probation_ms": probation_ms,
    });
    operate(server, id, "upgrade", request)
}

/// The counts of each word in committed `lines` (`word<TAB>count`), split by whether the
/// count has `prefix` (the new code's format): `(old, new)`, each sorted.
fn counts(lines: &[String], prefix: &str) -> BTreeMap<String, (Vec<u64>, Vec<u64>)> {
    let mut by_word: BTreeMap<String, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for line in lines {
        let (word, value) = line.split_once('\t').expect("key<TAB>value");
        let entry = by_word.entry(word.to_string()).or_default();
        match value.strip_prefix(prefix) {
            Some(n) => entry.1.push(n.parse().unwrap()),
            None => entry.0.push(value.parse().unwrap()),
        }
    }
    for (old, new) in by_word.values_mut() {
        old.sort_unstable();
        new.sort_unstable();
    }
    by_word
}

/// The final count of each word of `reference` (its output without any upgrade).
fn totals(reference: &[String]) -> BTreeMap<String, u64> {
    counts(reference, "\u{0}")
        .into_iter()
        .map(|(word, (old, _))| (word, *old.last().unwrap()))
        .collect()
}

/// Runs `weir ARGS` against `server`; what it printed, once it succeeded.
fn cli(server: &Server, args: &[&str]) -> String {
    let output = server.cli(args);
    assert!(
        output.status.success(),
        "weir {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The job's restarts and exceptions: none, if sources and sinks were not restarted.
fn assert_not_restarted(server: &Server, id: &str) {
    let job = server.job(id);
    assert_eq!(job["restarts"], 0, "{job}");
    let exceptions = server.ok("GET", &format!("/v1/jobs/{id}/exceptions"), None, 200);
    assert_eq!(exceptions["exceptions"], json!([]), "{exceptions}");
}

#[test]
fn an_upgrade_changes_the_output_format_and_every_count_goes_on() {
    upgrade_changes_the_output_format("");
    // With RocksDB state the count keeps its counts in the guest from batch to batch (the
    // write-back cache): what the old code holds must reach the host (the write-back batch
    // before the swap's snapshot) before the new code reads it, or counts start over.
    upgrade_changes_the_output_format("\n[state]\nbackend = \"rocksdb\"\n");
}

/// Upgrades the count of the word count with `tables` added to its spec to new code that
/// writes another format; checks the upgrade's record, a savepoint's, and the output.
fn upgrade_changes_the_output_format(tables: &str) {
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = running_word_count(&ws, &out, tables);
    let recount = server.component("weir_test_recount");
    let done = upgrade_count(&server, &id, &recount, json!({ "prefix": "v2:" }), 500);
    assert_eq!(done["status"], "completed", "{done}");
    let job = server.job(&id);
    let upgrade = &job["upgrades"][0];
    assert_eq!(upgrade["status"], "committed", "{job}");
    assert_eq!(upgrade["operators"][0]["uid"], "count");
    assert_eq!(upgrade["operators"][0]["to"]["component"], recount.as_str());
    assert!(upgrade["swap_checkpoint"].as_u64().is_some(), "{upgrade}");
    assert!(upgrade["time_to_commit_ms"].as_u64().is_some(), "{upgrade}");
    // Both subtasks of the count swapped and handled records.
    assert_eq!(upgrade["pauses"].as_array().unwrap().len(), 2, "{upgrade}");
    for pause in upgrade["pauses"].as_array().unwrap() {
        assert!(
            pause["snapshot_us"].as_u64() <= pause["pause_us"].as_u64(),
            "{pause}"
        );
    }
    assert!(job["spec"].as_str().unwrap().contains(&recount), "{job}");
    // The new code declares every state the old one wrote.
    assert_eq!(job["undeclared_states"], json!({}), "{job}");
    // A savepoint says which code wrote each operator's state.
    let savepoint = operate(&server, &id, "savepoints", json!({}));
    let path = Path::new(savepoint["savepoint"].as_str().unwrap()).join("_metadata");
    let meta: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let vertex = |name: &str| {
        meta["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(vertex("count")["code"]["component"], recount.as_str());
    assert_eq!(vertex("count")["code"]["config"], r#"{"prefix":"v2:"}"#);
    assert_eq!(vertex("lines")["code"], Value::Null);
    server.wait_status(&id, "finished", Duration::from_secs(120));
    assert_not_restarted(&server, &id);

    let totals = totals(&reference(&ws, LINES));
    assert_counts_go_on(&counts(&committed(&out), "v2:"), &totals);
}

#[test]
fn new_code_that_traps_or_changes_a_states_kind_rolls_back_by_itself() {
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = running_word_count(&ws, &out, "");
    // New code that does not open with its config is refused at once; nothing changes.
    let (split, _) = server.word_count_components();
    let request = json!({
        "operators": [{ "uid": "split", "component": split, "config": { "lowercase": "yes" } }],
    });
    let path = format!("/v1/jobs/{id}/upgrade");
    let (status, error) = server.call("POST", &path, Some(TOKEN), Some(request));
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains("lowercase"), "{error}");
    assert_eq!(server.job(&id)["upgrades"], json!([]));
    let hostile = server.component("weir_test_hostile");
    let recount = server.component("weir_test_recount");
    let cases = [
        (hostile, json!({ "trap_after_ms": 0 }), "trapping"),
        (
            recount.clone(),
            json!({ "kind": "map" }),
            "declared as map state",
        ),
        // The same, declared in `open` (as a state handle is).
        (
            recount,
            json!({ "kind": "map", "in_open": true }),
            "declared as map state",
        ),
    ];
    for (i, (sha, config, cause)) in cases.into_iter().enumerate() {
        let done = upgrade_count(&server, &id, &sha, config, 2_000);
        assert_eq!(done["status"], "failed", "{done}");
        let job = server.job(&id);
        let upgrade = &job["upgrades"][i];
        assert_eq!(upgrade["status"], "rolled_back", "{job}");
        assert!(
            upgrade["cause"].as_str().unwrap().contains(cause),
            "{upgrade}"
        );
        // The job runs its old code again.
        assert!(!job["spec"].as_str().unwrap().contains(&sha), "{job}");
        server.wait_status(&id, "running", Duration::from_secs(60));
        server.wait_checkpoints(&id, 1);
    }
    server.wait_status(&id, "finished", Duration::from_secs(120));
    assert!(
        committed(&out) == reference(&ws, LINES),
        "the output of a run without the failed upgrades"
    );
}

#[test]
fn a_rollback_is_one_call_and_state_the_new_code_does_not_use_is_kept() {
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = running_word_count(&ws, &out, "");
    let recount = server.component("weir_test_recount");
    // Version 2 counts in a state of its own: `count` is kept, and listed.
    let config = json!({ "prefix": "v2:", "state": "count2" });
    // On probation, a rollback takes the job back to the swap checkpoint with version 1.
    let upgrade = start_probation(&server, &id, "count", &recount, config.clone());
    // The new code of an upgrade in progress is in use: it cannot be deleted.
    let (status, refused) = server.call(
        "DELETE",
        &format!("/v1/components/{recount}"),
        Some(TOKEN),
        None,
    );
    assert_eq!(status, 409, "{refused}");
    let rollback = operate(&server, &id, "rollback", json!({}));
    assert_eq!(rollback["status"], "completed", "{rollback}");
    let upgrade = server.wait_operation(&id, upgrade["request_id"].as_str().unwrap());
    assert_eq!(upgrade["status"], "failed", "{upgrade}");
    let job = server.job(&id);
    assert_eq!(job["upgrades"][0]["status"], "rolled_back", "{job}");
    assert!(
        job["upgrades"][0]["cause"]
            .as_str()
            .unwrap()
            .contains("rolled back by request"),
        "{job}"
    );
    server.wait_status(&id, "running", Duration::from_secs(60));
    // Committed this time, through the CLI, which waits for the commit (and uploads the
    // local file it is given).
    let config = format!("count={config}");
    let component = format!("count={}", operator("weir_test_recount").display());
    let upgraded = cli(
        &server,
        &[
            "upgrade",
            &id,
            &component,
            "--config",
            &config,
            "--probation",
            "300ms",
        ],
    );
    assert_eq!(upgraded.trim(), "upgraded");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = server.job(&id);
        if job["undeclared_states"] == json!({ "count": ["count"] }) {
            break;
        }
        assert!(Instant::now() < deadline, "{job}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A rescale since: the rollback changes the code, not the parallelism.
    let rescaled = operate(
        &server,
        &id,
        "rescale",
        json!({ "parallelism": { "count": 3 } }),
    );
    assert_eq!(rescaled["status"], "completed", "{rescaled}");
    // The CLI's rollback goes back to version 1, which reads its `count` again.
    assert_eq!(cli(&server, &["rollback", &id]).trim(), "rolled back");
    let job = server.job(&id);
    let spec: toml::Table = job["spec"].as_str().unwrap().parse().unwrap();
    let count_table = spec["operator"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"].as_str() == Some("count"));
    assert_eq!(
        count_table.unwrap()["parallelism"].as_integer(),
        Some(3),
        "{job}"
    );
    let upgrades = job["upgrades"].as_array().unwrap();
    assert_eq!(upgrades.len(), 3, "{job}");
    assert_eq!(upgrades[2]["status"], "committed", "{job}");
    assert_eq!(upgrades[2]["rollback_of"], upgrades[1]["request_id"]);
    assert_eq!(
        upgrades[2]["operators"][0]["to"],
        upgrades[1]["operators"][0]["from"]
    );
    assert!(!job["spec"].as_str().unwrap().contains(&recount), "{job}");
    server.wait_status(&id, "finished", Duration::from_secs(120));
    // The rollback on probation restarted the job from the swap checkpoint, once.
    assert_eq!(server.job(&id)["restarts"], 1);

    let totals = totals(&reference(&ws, LINES));
    let by_word = counts(&committed(&out), "v2:");
    let (mut old_lines, mut new_lines) = (0, 0);
    for (word, (old, new)) in &by_word {
        // Version 1 counted before and after version 2 in `count`, without a gap: together
        // with version 2's own count from 1, every record of the word once.
        let expected: Vec<u64> = (1..=old.len() as u64).collect();
        assert_eq!(old, &expected, "version 1's counts of {word:?}");
        let expected: Vec<u64> = (1..=new.len() as u64).collect();
        assert_eq!(new, &expected, "version 2's counts of {word:?}");
        assert_eq!((old.len() + new.len()) as u64, totals[word], "{word:?}");
        old_lines += old.len();
        new_lines += new.len();
    }
    assert!(old_lines > 0 && new_lines > 0, "{old_lines} {new_lines}");
}

#[test]
fn a_server_killed_during_a_probation_resumes_the_job_on_the_old_code_exactly_once() {
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = running_word_count(&ws, &out, "");
    let recount = server.component("weir_test_recount");
    start_probation(&server, &id, "count", &recount, json!({}));
    std::thread::sleep(Duration::from_millis(300));
    server.kill();

    let server = Server::start(&ws, &ws.path("data"), &[]);
    let job = server.job(&id);
    let upgrade = &job["upgrades"][0];
    assert_eq!(upgrade["status"], "rolled_back", "{job}");
    assert!(
        upgrade["cause"]
            .as_str()
            .unwrap()
            .contains("the service stopped before the upgrade was committed"),
        "{upgrade}"
    );
    assert!(!job["spec"].as_str().unwrap().contains(&recount), "{job}");
    server.wait_status(&id, "finished", Duration::from_secs(120));
    // Nothing the new code wrote was committed; the old code counted every word once.
    assert!(
        committed(&out) == reference(&ws, LINES),
        "the output of a run without the upgrade"
    );
}

#[test]
fn a_server_stopped_during_a_probation_commits_the_upgrade_at_its_stop_checkpoint() {
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = running_word_count(&ws, &out, "");
    let recount = server.component("weir_test_recount");
    start_probation(&server, &id, "count", &recount, json!({ "prefix": "v2:" }));
    std::thread::sleep(Duration::from_millis(300));
    // Ctrl-C stops the job at a checkpoint, which the new code wrote and its sink commits:
    // the upgrade is committed there, and the job resumes on the new code.
    assert!(server.interrupt().success());

    let server = Server::start(&ws, &ws.path("data"), &[]);
    let job = server.job(&id);
    assert_eq!(job["upgrades"][0]["status"], "committed", "{job}");
    assert!(job["spec"].as_str().unwrap().contains(&recount), "{job}");
    server.wait_status(&id, "finished", Duration::from_secs(120));
    let totals = totals(&reference(&ws, LINES));
    assert_counts_go_on(&counts(&committed(&out), "v2:"), &totals);
}

#[test]
fn an_upgrade_of_two_operators_where_one_does_not_load_changes_nothing() {
    let ws = Workspace::new();
    let out = ws.path("out");
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let (split, count) = server.word_count_components();
    // The count may load components up to its own size; the split's new config is fine, the
    // count's new component is too large for it.
    let size = |name| std::fs::metadata(operator(name)).unwrap().len();
    let limit = size("wordcount_count");
    assert!(size("weir_test_hostile") > limit);
    let spec = word_count("two", LINES, Some(RATE), &split, &count, 2, &out).replace(
        "parallelism = 2\n\n[[sink]]",
        &format!("parallelism = 2\nlimits = {{ wasm_size = {limit} }}\n\n[[sink]]"),
    );
    let id = server.submit(json!({ "spec": spec }));
    server.wait_checkpoints(&id, 2);
    let large = server.component("weir_test_hostile");
    let request = json!({
        "operators": [
            { "uid": "split", "component": split, "config": { "lowercase": true } },
            { "uid": "count", "component": format!("sha256:{large}") },
        ],
    });
    let (status, error) = server.call(
        "POST",
        &format!("/v1/jobs/{id}/upgrade"),
        Some(TOKEN),
        Some(request),
    );
    assert_eq!(status, 400, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("\"count\"") && message.contains("wasm_size"),
        "{message}"
    );
    // Nor does one that names an operator twice, or one the job does not have.
    let recount = server.component("weir_test_recount");
    // Nor one whose new limits its new code does not fit.
    let component = format!("sha256:{recount}");
    let tight =
        json!({ "uid": "count", "component": component, "limits": { "wasm_size": "100KB" } });
    for (operators, status, says) in [
        (json!(["count", "count"]), 400, "named twice"),
        (
            json!(["count", "nope"]),
            404,
            "no operator with uid \"nope\"",
        ),
        (json!([tight]), 400, "wasm_size"),
    ] {
        let operators: Vec<Value> = operators
            .as_array()
            .unwrap()
            .iter()
            .map(|op| match op {
                Value::String(uid) => json!({ "uid": uid, "component": component }),
                op => op.clone(),
            })
            .collect();
        let (got, error) = server.call(
            "POST",
            &format!("/v1/jobs/{id}/upgrade"),
            Some(TOKEN),
            Some(json!({ "operators": operators })),
        );
        assert_eq!(got, status, "{error}");
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }
    let job = server.job(&id);
    assert_eq!(job["upgrades"], json!([]), "{job}");
    assert!(
        !job["spec"].as_str().unwrap().contains("lowercase"),
        "{job}"
    );
    server.wait_status(&id, "finished", Duration::from_secs(120));
    assert_not_restarted(&server, &id);
    assert!(
        committed(&out) == reference(&ws, LINES),
        "the output of a run without the upgrade"
    );
}

/// Sliding one-second windows, every 250 ms, of generated events (`count` of them, at `rate`
/// a second, if any) with a process-window function in component `function` (a path or a
/// reference) and `settings` (TOML lines of the window's operator), into a file sink in
/// `out`.
pub(crate) fn windowed(
    count: u64,
    rate: Option<u64>,
    function: &str,
    settings: &str,
    out: &Path,
) -> String {
    let rate = rate.map(|r| format!("rate = {r}\n")).unwrap_or_default();
    format!(
        r#"[job]
name = "windowed"
parallelism = 2

[checkpoint]
interval = "100ms"

[[source]]
name = "events"
type = "generator"
mode = "keyed_words"
vocabulary = 30
count = {count}
{rate}event_time = {{ start = 0, interval = "2ms", max_disorder = "100ms" }}
watermark = {{ max_out_of_orderness = "100ms" }}

[[operator]]
name = "windows"
uid = "windows"
wasm = {function}
{settings}input = "events"
edge = "key_by"
window = {{ type = "sliding", size = "1s", slide = "250ms", function = "process" }}

[[sink]]
name = "out"
type = "file"
input = "windows"
path = {out}
format = "key_value"
"#,
        function = toml_str(function),
        out = toml_path(out),
    )
}

/// Runs the windows over 100k events at 20k a second through `weir serve` and, after two
/// checkpoints, upgrades their function to test component `function` with `config` on a
/// probation of `probation_ms`; once the job finished: the upgrade's operation, the job's record, its committed lines, and those of
/// a run without the upgrade.
fn upgraded_windows(
    function: &str,
    config: Value,
    probation_ms: u64,
) -> (Value, Value, Vec<String>, Vec<String>) {
    const EVENTS: u64 = 100_000;
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = running_windows(&ws, EVENTS, 20_000, &out);
    let new = format!("sha256:{}", server.component(function));
    let request = json!({
        "operators": [{ "uid": "windows", "component": new, "config": config }],
        "probation_ms": probation_ms,
    });
    let op = operate(&server, &id, "upgrade", request);
    server.wait_status(&id, "finished", Duration::from_secs(120));
    let job = server.job(&id);
    (op, job, committed(&out), reference_windows(&ws, EVENTS))
}

/// The committed lines of [`windowed_spec`] over `count` events, run without an upgrade.
fn reference_windows(ws: &Workspace, count: u64) -> Vec<String> {
    let ran = weir(
        &["run", "--no-progress"],
        &windowed_spec(ws, count, "", "reference"),
    );
    assert!(ran.success(), "{ran}");
    committed(&ws.path("reference"))
}

/// `lines` without the `v2:` tag the upgraded window function puts before its results,
/// sorted.
fn untagged(lines: &[String]) -> Vec<String> {
    let mut untagged: Vec<String> = lines.iter().map(|l| l.replacen("\tv2:", "\t", 1)).collect();
    untagged.sort_unstable();
    untagged
}

/// A server running [`windowed`] over `count` events at `rate` a second into `out`, the
/// function the `weir_test_window_process` test component, after two checkpoints; the server
/// and the job's id.
fn running_windows(ws: &Workspace, count: u64, rate: u64, out: &Path) -> (Server, String) {
    let server = Server::start(ws, &ws.path("data"), &[]);
    let function = format!("sha256:{}", server.component("weir_test_window_process"));
    let spec = windowed(count, Some(rate), &function, "", out);
    let id = server.submit(json!({ "spec": spec }));
    server.wait_status(&id, "running", Duration::from_secs(60));
    server.wait_checkpoints(&id, 2);
    (server, id)
}

/// The job file of [`windowed`] over `count` events as fast as they go, for `weir run`:
/// the function is the `weir_test_window_process` test component, the checkpoints go to
/// directory `chk` of `ws`, the results to directory `out`.
pub(crate) fn windowed_spec(ws: &Workspace, count: u64, settings: &str, out: &str) -> PathBuf {
    windowed_spec_of(ws, "weir_test_window_process", count, settings, out)
}

/// [`windowed_spec`] with the test component `component` as the function.
pub(crate) fn windowed_spec_of(
    ws: &Workspace,
    component: &str,
    count: u64,
    settings: &str,
    out: &str,
) -> PathBuf {
    let function = operator(component);
    let chk = format!(
        "interval = \"100ms\"\ndir = {}\n",
        toml_path(&ws.path("chk"))
    );
    let spec = windowed(
        count,
        None,
        function.to_str().unwrap(),
        settings,
        &ws.path(out),
    )
    .replace("interval = \"100ms\"\n", &chk);
    ws.write(&format!("{out}.toml"), spec)
}

#[test]
fn a_window_function_gets_new_code_and_the_windows_open_at_the_swap_keep_their_records() {
    // The same component with a new config: each result tagged with the code that made it.
    let config = json!({ "prefix": "v2:" });
    let (op, job, lines, reference) = upgraded_windows("weir_test_window_process", config, 300);
    assert_eq!(op["status"], "completed", "{op}");
    let upgrade = &job["upgrades"][0];
    assert_eq!(upgrade["status"], "committed", "{job}");
    assert_eq!(upgrade["operators"][0]["from"]["config"], "{}", "{upgrade}");
    assert_eq!(
        upgrade["operators"][0]["to"]["config"], r#"{"prefix":"v2:"}"#,
        "{upgrade}"
    );
    assert_eq!(job["restarts"], 0, "{job}");
    // Every window fired once, with every one of its records: those the old code's instance
    // saw arrive and those after the swap.
    let new = lines.iter().filter(|l| l.contains("\tv2:")).count();
    assert!(
        new > 0 && new < lines.len(),
        "{new} of {} lines",
        lines.len()
    );
    assert!(
        untagged(&lines) == reference,
        "the windows of a run without the upgrade"
    );
}

#[test]
fn a_window_function_whose_new_code_traps_is_rolled_back_and_every_window_fires_once() {
    // The new code traps on its first window, on a probation too long to end before: the job
    // goes back to the swap checkpoint with the old code, and nothing the new code emitted is
    // committed.
    let config = json!({ "trap_after_ms": 0 });
    let (op, job, lines, reference) = upgraded_windows("weir_test_hostile", config, 600_000);
    assert_eq!(op["status"], "failed", "{op}");
    let error = op["error"].as_str().unwrap();
    assert!(
        error.contains("\"windows\"") && error.contains("trapped"),
        "{error}"
    );
    assert_eq!(job["upgrades"][0]["status"], "rolled_back", "{job}");
    assert!(
        lines == reference,
        "the windows of a run without the upgrade"
    );
}

/// Events of the window jobs stopped during a probation (at 10k a second: 20 s).
const PROBATION_EVENTS: u64 = 200_000;

/// A server running [`windowed`] into `out` whose window function is on probation with the
/// config `{"prefix": "v2:"}`; the server and the job's id.
fn windows_on_probation(ws: &Workspace, out: &Path) -> (Server, String) {
    let (server, id) = running_windows(ws, PROBATION_EVENTS, 10_000, out);
    let sha = server.component("weir_test_window_process");
    start_probation(&server, &id, "windows", &sha, json!({ "prefix": "v2:" }));
    std::thread::sleep(Duration::from_millis(300));
    (server, id)
}

#[test]
fn a_server_stopped_while_a_window_function_is_on_probation_commits_it_and_every_window_fires_once()
{
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = windows_on_probation(&ws, &out);
    // Ctrl-C stops the job at a checkpoint the new code's windows wrote: the upgrade is
    // committed there, and the job resumes with the new code and the open windows.
    assert!(server.interrupt().success());

    let server = Server::start(&ws, &ws.path("data"), &[]);
    let job = server.job(&id);
    assert_eq!(job["upgrades"][0]["status"], "committed", "{job}");
    assert!(job["spec"].as_str().unwrap().contains("v2:"), "{job}");
    server.wait_status(&id, "finished", Duration::from_secs(120));
    let lines = committed(&out);
    let new = lines.iter().filter(|l| l.contains("\tv2:")).count();
    assert!(new > 0 && new < lines.len(), "{new} of {}", lines.len());
    // The resumed job ran the new code: the last windows are its.
    let end = |l: &String| -> i64 { l.rsplit(',').nth(1).unwrap().parse().unwrap() };
    let last = lines.iter().max_by_key(|l| end(l)).unwrap();
    assert!(last.contains("\tv2:"), "{last}");
    assert!(
        untagged(&lines) == reference_windows(&ws, PROBATION_EVENTS),
        "the windows of a run without the upgrade"
    );
}

#[test]
fn a_server_killed_while_a_window_function_is_on_probation_resumes_on_the_old_code() {
    let ws = Workspace::new();
    let out = ws.path("out");
    let (server, id) = windows_on_probation(&ws, &out);
    server.kill();

    let server = Server::start(&ws, &ws.path("data"), &[]);
    let job = server.job(&id);
    assert_eq!(job["upgrades"][0]["status"], "rolled_back", "{job}");
    assert!(!job["spec"].as_str().unwrap().contains("v2:"), "{job}");
    server.wait_status(&id, "finished", Duration::from_secs(120));
    // Nothing the new code's windows emitted was committed, and no window is lost or twice.
    assert!(
        committed(&out) == reference_windows(&ws, PROBATION_EVENTS),
        "the windows of a run without the upgrade"
    );
}

#[test]
fn upgrades_and_savepoints_asked_for_as_a_job_finishes_are_all_answered() {
    // Asked for every 10 ms until the job has finished: some come just before its end,
    // when nothing takes them up any more; each must still get an answer.
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    let (split, count) = server.word_count_components();
    let recount = format!("sha256:{}", server.component("weir_test_recount"));
    for run in 0..4 {
        let out = ws.path(&format!("out-{run}"));
        let spec = word_count(
            &format!("short-{run}"),
            20_000,
            Some(10_000),
            &split,
            &count,
            2,
            &out,
        );
        let id = server.submit(json!({ "spec": spec }));
        let mut asked = Vec::new();
        for i in 0.. {
            if server.job(&id)["status"] == "finished" {
                break;
            }
            let (what, request) = match i % 3 {
                0 => ("savepoint", json!({})),
                _ => {
                    let config = json!({ "prefix": format!("v{i}:") });
                    let operator =
                        json!({ "uid": "count", "component": recount, "config": config });
                    (
                        "upgrade",
                        json!({ "operators": [operator], "probation_ms": 0 }),
                    )
                }
            };
            let path = format!("/v1/jobs/{id}/{what}");
            let (status, op) = server.call("POST", &path, Some(TOKEN), Some(request));
            if status == 202 {
                asked.push(op["request_id"].as_str().unwrap().to_string());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!asked.is_empty());
        for request_id in &asked {
            server.wait_operation(&id, request_id);
        }
        let job = server.job(&id);
        for upgrade in job["upgrades"].as_array().unwrap() {
            let status = upgrade["status"].as_str().unwrap();
            assert!(!["pending", "probation"].contains(&status), "{job}");
        }
    }
}

#[test]
fn a_job_cancelled_while_new_code_is_on_probation_records_its_upgrade_rolled_back() {
    let ws = Workspace::new();
    let (server, id) = running_word_count(&ws, &ws.path("out"), "");
    let recount = server.component("weir_test_recount");
    let upgrade = start_probation(&server, &id, "count", &recount, json!({}));
    server.ok("POST", &format!("/v1/jobs/{id}/cancel"), None, 202);
    let op = server.wait_operation(&id, upgrade["request_id"].as_str().unwrap());
    assert_eq!(op["status"], "failed", "{op}");
    let job = server.wait_status(&id, "cancelled", Duration::from_secs(60));
    // The new code ran: not refused, which says nothing changed.
    assert_eq!(job["upgrades"][0]["status"], "rolled_back", "{job}");
}

#[test]
fn of_two_upgrades_asked_for_at_once_one_is_taken_and_the_other_refused() {
    // Each opens its new code before it is asked of the job (a JavaScript or Python
    // component opens slowly): the second must not pass the same checks meanwhile.
    let ws = Workspace::new();
    let server = Server::start(&ws, &ws.path("data"), &[]);
    // Uploaded (compiled) before the job starts, which runs for seconds only.
    let upgrades = ["wordcount_count_js", "wordcount_count_py"].map(|name| {
        let sha = server.component(name);
        json!({ "operators": [{ "uid": "count", "component": format!("sha256:{sha}") }] })
    });
    let (split, count) = server.word_count_components();
    let spec = word_count(
        "deployed",
        LINES,
        Some(RATE),
        &split,
        &count,
        2,
        &ws.path("out"),
    );
    let id = server.submit(json!({ "spec": spec }));
    server.wait_status(&id, "running", Duration::from_secs(60));
    let path = format!("/v1/jobs/{id}/upgrade");
    let answers = std::thread::scope(|s| {
        let asked = upgrades
            .map(|request| s.spawn(|| server.call("POST", &path, Some(TOKEN), Some(request))));
        asked.map(|a| a.join().unwrap())
    });
    let mut statuses = answers.each_ref().map(|(status, _)| *status);
    statuses.sort_unstable();
    assert_eq!(statuses, [202, 409], "{answers:?}");
    let job = server.job(&id);
    assert_eq!(job["upgrades"].as_array().unwrap().len(), 1, "{job}");
}
