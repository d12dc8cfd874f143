//! Checkpoints and recovery: the `weir` process is killed with SIGKILL at random moments and
//! restarted, and the word counts still come out exactly right.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    Workspace, count_words, key_value, key_value_file_sink, keyed_probe_operators, part_files,
    part_text, toml_path, wasm, word_count_operators,
};

/// Deterministic text of `lines` lines over a skewed vocabulary of 2000 words.
pub(crate) fn text(lines: usize, seed: u64) -> String {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = String::new();
    for _ in 0..lines {
        for w in 0..1 + rng.usize(..12) {
            if w > 0 {
                out.push(' ');
            }
            // Skewed: low word numbers are much more frequent.
            let bound = 1 + rng.u32(..2000);
            out.push_str(&format!("w{}", rng.u32(..bound)));
        }
        out.push('\n');
    }
    out
}

/// Writes `job.toml`: job `name` at parallelism 2, checkpointed every `interval` into
/// `chk/<name>/`, followed by `rest` (more `[checkpoint]` keys, then the other tables).
pub(crate) fn checkpointed_job(ws: &Workspace, name: &str, interval: &str, rest: &str) -> PathBuf {
    let chk = toml_path(&ws.path("chk"));
    ws.write(
        "job.toml",
        format!(
            "[job]\nname = \"{name}\"\nparallelism = 2\n\n\
             [checkpoint]\ninterval = \"{interval}\"\ndir = {chk}\n{rest}"
        ),
    )
}

/// Word count at parallelism 2 with checkpoints every 100 ms: the input split over two file
/// source subtasks, rebalanced into the split operator, keyed into the count operator, whose
/// updates go to a file sink. `checkpoint` is more of the `[checkpoint]` table (`mode`, say),
/// `state` the `[state]` table's body.
fn spec(ws: &Workspace, input: &Path, checkpoint: &str, retained: u32, state: &str) -> PathBuf {
    let operators = (wasm("wordcount_split"), wasm("wordcount_count"));
    spec_of(ws, input, checkpoint, retained, state, operators)
}

/// [`spec`] with the word count's `split` and `count` operators as given (spec lines).
fn spec_of(
    ws: &Workspace,
    input: &Path,
    checkpoint: &str,
    retained: u32,
    state: &str,
    (split, count): (String, String),
) -> PathBuf {
    checkpointed_job(
        ws,
        "crashy",
        "100ms",
        &format!(
            r#"{checkpoint}
num_retained = {retained}

[state]
{state}

[[source]]
name = "lines"
type = "file"
path = {input}
split_size = 65536
{operators}{sink}"#,
            input = toml_path(input),
            operators = word_count_operators("lines", &split, &count),
            sink = key_value_file_sink("count", &ws.path("out")),
        ),
    )
}

fn start(ws: &Workspace, spec: &Path) -> Child {
    command(ws, spec)
        .env("WEIR_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir")
}

pub(crate) fn command(ws: &Workspace, spec: &Path) -> Command {
    let mut cmd = ws.summary_command(spec);
    cmd.stdout(Stdio::piped());
    cmd
}

/// The completed checkpoints in the job's checkpoint directory.
pub(crate) fn completed(ws: &Workspace) -> Vec<u64> {
    completed_in(ws, "chk")
}

/// The completed checkpoints of job `crashy` in the workspace's directory `dir`.
fn completed_in(ws: &Workspace, dir: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(ws.path(&format!("{dir}/crashy")))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("_metadata").exists())
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// Every count the sink wrote, per word, in order of appearance per part file.
fn sink_counts(ws: &Workspace) -> HashMap<String, Vec<u64>> {
    let mut counts: HashMap<String, Vec<u64>> = HashMap::new();
    for lines in part_files(&ws.path("out")).into_values() {
        for line in &lines {
            let (word, n) = key_value(line);
            counts
                .entry(word.to_string())
                .or_default()
                .push(n.parse().expect("a count"));
        }
    }
    counts
}

/// Asserts that the sink holds each word's updates 1..=n exactly once, as a run without
/// crashes writes them (in some order); returns how many lines it compared.
fn assert_exactly_once(ws: &Workspace, expected: &HashMap<String, u64>) -> usize {
    let counts = sink_counts(ws);
    assert_eq!(counts.len(), expected.len(), "every word reached the sink");
    for (word, n) in expected {
        let mut seen = counts[word].clone();
        seen.sort_unstable();
        if seen != (1..=*n).collect::<Vec<_>>() {
            let missing: Vec<u64> = (1..=*n)
                .filter(|c| seen.binary_search(c).is_err())
                .collect();
            let mut twice = seen.clone();
            twice.dedup();
            let twice: Vec<u64> = twice
                .into_iter()
                .filter(|c| seen.iter().filter(|s| *s == c).count() > 1 || c > n)
                .collect();
            panic!(
                "updates of {word:?}: expected 1..={n}, missing {} from {:?}, more than once \
                 or beyond: {} from {:?}",
                missing.len(),
                missing.first(),
                twice.len(),
                twice.first(),
            );
        }
    }
    counts.values().map(Vec::len).sum()
}

/// Prints what a crash test checked, for `cargo xtask soak` to add up (it runs the tests with
/// `--nocapture`).
pub(crate) fn crash_tally(kills: usize, rows: usize) {
    tally(kills, 0, rows);
}

/// Prints what a crash or stop test checked: its SIGKILLs, its stops (Ctrl-C or SIGTERM,
/// then a resume) and the rows it compared with a run without them.
pub(crate) fn tally(kills: usize, stops: usize, rows: usize) {
    eprintln!("crash tally: kills {kills} stops {stops} rows {rows}");
}

/// Asserts that every part file a reader of the file sink's output saw before is still there,
/// unchanged: committed output is never taken back or rewritten, so nothing visible was ever
/// uncommitted. Then adds what is visible now.
pub(crate) fn assert_visible_output_stays(ws: &Workspace, seen: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(ws.path("out")) else {
        return;
    };
    let now: BTreeMap<String, String> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("part-")
        })
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                std::fs::read_to_string(&p).expect("a readable part file"),
            )
        })
        .collect();
    for (name, text) in seen.iter() {
        match now.get(name) {
            Some(t) if t == text => {}
            Some(_) => panic!("visible part file {name} was rewritten"),
            None => panic!("visible part file {name} disappeared"),
        }
    }
    *seen = now;
}

/// How long a run of [`crash_loop`] may take to complete a checkpoint of its own.
const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// Kills `weir` with SIGKILL `kills` times, each at a random moment (0-200 ms) after the run
/// completed a checkpoint, then lets the last run finish. After every kill, the part files
/// of the file sink visible before must be unchanged. Returns the log (at level info) of every
/// run.
pub(crate) fn crash_loop(ws: &Workspace, spec: &Path, kills: usize) -> Vec<String> {
    crash_loop_checked(ws, spec, kills, &mut |_| {})
}

/// [`crash_loop`], calling `check` with the run's number after each SIGKILL, before the next
/// run starts.
pub(crate) fn crash_loop_checked(
    ws: &Workspace,
    spec: &Path,
    kills: usize,
    check: &mut dyn FnMut(usize),
) -> Vec<String> {
    let seed = fastrand::u64(..);
    eprintln!("crash loop seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let log = |run: usize| ws.path(&format!("run-{run}.log"));
    let spawn = |run: usize| {
        let file = std::fs::File::create(log(run)).expect("a log file");
        command(ws, spec)
            .env("WEIR_LOG", "info")
            .stderr(file)
            .spawn()
            .expect("start weir")
    };
    let mut visible = BTreeMap::new();
    for kill in 0..kills {
        // Kill at a random moment after this run completed a checkpoint of its own, so that
        // every run makes progress and the next one has something to resume from.
        let before = completed(ws).last().copied();
        let mut child = spawn(kill);
        // A guard against a run that hangs, not a time limit: under the load of the whole
        // suite, the PostgreSQL sink's first checkpoint after a restore took 68 s.
        let deadline = Instant::now() + RUN_DEADLINE;
        while completed(ws).last().copied() <= before {
            if let Some(status) = child.try_wait().expect("poll weir") {
                panic!(
                    "run {kill} ended by itself ({status}) before its SIGKILL; make the input \
                     larger\n{}",
                    std::fs::read_to_string(log(kill)).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "run {kill} completed no checkpoint in {RUN_DEADLINE:?}:\n{}",
                std::fs::read_to_string(log(kill)).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Twice the longest checkpoint interval of these tests (100 ms): every
        // moment between two checkpoints is reached. A longer wait only lets each run get
        // further: with up to 400 ms, five runs got through most of the 20.8M-word input and
        // one in 21 soak runs finished before its kill.
        std::thread::sleep(Duration::from_millis(rng.u64(..200)));
        child.kill().expect("SIGKILL weir");
        let status = child.wait().expect("reap weir");
        assert_eq!(
            status.signal(),
            Some(9),
            "run {kill} finished ({status}) just before its SIGKILL; make the input larger"
        );
        assert_visible_output_stays(ws, &mut visible);
        check(kill);
    }
    let status = spawn(kills).wait().expect("weir exits");
    assert_visible_output_stays(ws, &mut visible);
    let logs: Vec<String> = (0..=kills)
        .map(|run| std::fs::read_to_string(log(run)).expect("the run's log"))
        .collect();
    assert!(status.success(), "weir failed:\n{}", logs[kills]);
    logs
}

fn input(ws: &Workspace) -> (PathBuf, HashMap<String, u64>) {
    let text = text(3_200_000, 7);
    let expected = count_words([text.as_str()], false);
    (ws.write("input.txt", &text), expected)
}

#[test]
fn exactly_once_state_and_file_output_survive_sigkill() {
    exactly_once_survives_sigkill("");
}

#[test]
fn exactly_once_on_rocksdb_survives_sigkill() {
    // Incremental checkpoints: each shares the unchanged SST files of the one before.
    let ws = exactly_once_survives_sigkill("backend = \"rocksdb\"");
    for dir in ["state/crashy", "chk/crashy/shared"] {
        let left: Vec<_> = std::fs::read_dir(ws.path(dir))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "files left behind in {dir}: {left:?}");
    }
}

#[test]
fn python_operators_are_exactly_once_across_sigkills() {
    // The word count's operators written in Python (examples/wordcount/python), on RocksDB.
    other_languages_exactly_once("py", "backend = \"rocksdb\"");
}

#[test]
fn javascript_operators_are_exactly_once_across_sigkills() {
    // The word count's operators written in JavaScript (examples/wordcount/js), in memory.
    other_languages_exactly_once("js", "");
}

/// The word count's operators `wordcount_*_<suffix>` on `state`, three SIGKILLs.
fn other_languages_exactly_once(suffix: &str, state: &str) {
    let ws = Workspace::new();
    // About 2M words: far more than three runs of these guests get through before their
    // SIGKILLs, while the last run, which counts the rest, takes a minute or two (with 1M
    // lines the JavaScript test took eleven).
    let text = text(300_000, 11);
    let expected = count_words([text.as_str()], false);
    let input = ws.write("input.txt", &text);
    let operators = (
        wasm(&format!("wordcount_split_{suffix}")),
        wasm(&format!("wordcount_count_{suffix}")),
    );
    let spec = spec_of(&ws, &input, "mode = \"exactly_once\"", 1, state, operators);
    // These guests split and count 10 to 100 times slower than Rust ones: without debloating,
    // the records queued between tasks take a minute to work off, and each checkpoint's
    // barrier waits behind them.
    let text = std::fs::read_to_string(&spec).unwrap();
    let spec = ws.write(
        "job.toml",
        text.replacen(
            "parallelism = 2\n",
            "parallelism = 2\nbuffer_debloat_target = \"200ms\"\n",
            1,
        ),
    );
    let logs = crash_loop(&ws, &spec, 3);
    assert!(
        logs.iter().any(|l| l.contains("restoring checkpoint")),
        "no run resumed from a checkpoint:\n{}",
        logs.join("\n")
    );
    crash_tally(3, assert_exactly_once(&ws, &expected));
}

/// The job's checkpoint history (`history.json`).
fn history(ws: &Workspace) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(ws.path("chk/crashy/history.json")).unwrap()).unwrap()
}

#[test]
fn unaligned_checkpoints_survive_sigkill() {
    unaligned_checkpoints_survive_sigkill_on("");
}

#[test]
fn unaligned_checkpoints_on_rocksdb_survive_sigkill() {
    unaligned_checkpoints_survive_sigkill_on("backend = \"rocksdb\"");
}

/// Kills the word count with unaligned checkpoints 5 times and checks its output; `state` is
/// its `[state]` table.
fn unaligned_checkpoints_survive_sigkill_on(state: &str) {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "unaligned = true", 1, state);
    let logs = crash_loop(&ws, &spec, 5);
    assert!(
        logs.iter().any(|l| l.contains("replaying")),
        "no run replayed records in flight:\n{}",
        logs.join("\n")
    );
    crash_tally(5, assert_exactly_once(&ws, &expected));
    let stored: Vec<u64> = history(&ws)["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["status"] == "completed")
        .map(|e| e["in_flight_bytes"].as_u64().unwrap())
        .collect();
    assert!(
        stored.iter().any(|&b| b > 0),
        "the checkpoints of a job under backpressure stored records in flight: {stored:?}"
    );
}

/// The vertices whose records in flight the `_metadata` of checkpoint `id` holds.
fn in_flight_vertices(ws: &Workspace, id: u64) -> Vec<String> {
    let meta = std::fs::read(ws.path(&format!("chk/crashy/chk-{id}/_metadata"))).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    meta["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["in_flight"].as_array().is_some_and(|f| !f.is_empty()))
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_unaligned_checkpoint_restores_its_records_in_flight_at_another_parallelism() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let job = |p: u32| {
        let spec = spec(&ws, &input, "unaligned = true", 1, "");
        // The sink keeps its parallelism; the operators go from 2 to `p`.
        let text = std::fs::read_to_string(&spec)
            .unwrap()
            .replace(
                "uid = \"split\"\n",
                &format!("uid = \"split\"\nparallelism = {p}\n"),
            )
            .replace(
                "uid = \"count\"\n",
                &format!("uid = \"count\"\nparallelism = {p}\n"),
            )
            .replace("name = \"out\"\n", "name = \"out\"\nedge = \"rebalance\"\n")
            // Batches of a few hundred records: debloating at work under the same checks.
            .replace("[job]\n", "[job]\nbuffer_debloat_target = \"10ms\"\n");
        std::fs::write(&spec, text).unwrap();
        spec
    };
    let spec = job(2);
    let mut child = start(&ws, &spec);
    let deadline = Instant::now() + Duration::from_secs(60);
    let with_records = loop {
        if let Some(&id) = completed(&ws).last()
            && !in_flight_vertices(&ws, id).is_empty()
        {
            break id;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint stored records in flight in 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before its SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    child.kill().expect("SIGKILL weir");
    child.wait().unwrap();
    let restored = *completed(&ws).last().unwrap();
    let vertices = in_flight_vertices(&ws, restored);
    assert!(
        !vertices.is_empty(),
        "checkpoint {restored}, completed after {with_records} before the kill, holds records \
         in flight too"
    );

    let spec = job(3);
    let out = command(&ws, &spec)
        .env("WEIR_LOG", "info")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!("restoring checkpoint {restored} from")),
        "{log}"
    );
    for v in &vertices {
        assert!(
            log.contains(&format!("in flight to \"{v}\" from checkpoint {restored}")),
            "the records in flight to {v} were replayed:\n{log}"
        );
    }
    crash_tally(1, assert_exactly_once(&ws, &expected));
}

/// Kills the word count job 5 times and checks its output; `state` is its `[state]` table.
fn exactly_once_survives_sigkill(state: &str) -> Workspace {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 1, state);
    let logs = crash_loop(&ws, &spec, 5);
    let restores = logs
        .iter()
        .filter(|l| l.contains("restoring checkpoint"))
        .count();
    assert!(
        restores > 0,
        "no run resumed from a checkpoint:\n{}",
        logs.join("\n")
    );

    // Exactly once: state restored, and the file sink cut back to each checkpoint.
    crash_tally(5, assert_exactly_once(&ws, &expected));
    assert!(
        completed(&ws).is_empty(),
        "a finished job discards its checkpoints"
    );
    let history = history(&ws);
    let entries = history["checkpoints"].as_array().unwrap();
    assert!(
        entries.iter().any(|e| e["status"] == "completed"
            && e["size_bytes"].as_u64() > Some(0)
            && e["operators"].as_array().unwrap().len() == 4),
        "the history records completed checkpoints with sizes per vertex: {history}"
    );
    ws
}

#[test]
fn at_least_once_loses_nothing_after_sigkill() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"at_least_once\"", 1, "");
    let logs = crash_loop(&ws, &spec, 5);
    assert!(logs.iter().any(|l| l.contains("restoring checkpoint")));
    let counts = sink_counts(&ws);
    for (word, n) in &expected {
        let max = counts[word].iter().max().copied().unwrap_or(0);
        assert!(max >= *n, "{word:?}: counted {max}, expected at least {n}");
    }
}

#[test]
fn a_corrupt_newest_checkpoint_is_skipped_for_the_one_before() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 2, "");
    let mut child = start(&ws, &spec);
    let deadline = Instant::now() + Duration::from_secs(60);
    while completed(&ws).len() < 2 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before two checkpoints completed"
        );
        assert!(Instant::now() < deadline, "no two checkpoints within 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let ids = completed(&ws);
    let (older, newest) = (ids[ids.len() - 2], ids[ids.len() - 1]);
    // Flip one bit in a state file of the newest checkpoint.
    let dir = ws.path(&format!("chk/crashy/chk-{newest}"));
    let state = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().contains("count"))
        .expect("a state file of the count operator");
    let mut bytes = std::fs::read(&state).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x04;
    std::fs::write(&state, bytes).unwrap();

    let out = start(&ws, &spec).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("skipping checkpoint {newest}")) && stderr.contains("CRC-32"),
        "the damaged checkpoint is skipped with the reason: {stderr}"
    );
    let summary = ws.summary();
    assert_eq!(summary["checkpoints"]["restored_from"], older);
    assert_exactly_once(&ws, &expected);
    // The last checkpoint, which records the finish, is counted in the history like any.
    let read = |file: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(ws.path(&format!("chk/crashy/{file}"))).unwrap())
            .unwrap()
    };
    let last = read("finished.json")["checkpoint"].clone();
    let completed: Vec<serde_json::Value> = (read("history.json")["checkpoints"].as_array())
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "completed")
        .map(|c| c["id"].clone())
        .collect();
    assert!(
        completed.contains(&last),
        "checkpoint {last} is not among the completed {completed:?}"
    );
}

/// Runs the job `spec` until a checkpoint completed, then kills it; returns the newest.
fn killed_after_a_checkpoint(ws: &Workspace, spec: &Path) -> u64 {
    kill_after_a_checkpoint(ws, start(ws, spec), "chk")
}

/// Kills `child` once a checkpoint completed in the workspace's directory `dir`; returns the
/// newest.
fn kill_after_a_checkpoint(ws: &Workspace, mut child: Child, dir: &str) -> u64 {
    while completed_in(ws, dir).is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before a checkpoint"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    *completed_in(ws, dir).last().unwrap()
}

#[test]
fn a_job_whose_checkpoints_cannot_be_restored_does_not_start_over() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 1, "");
    let newest = killed_after_a_checkpoint(&ws, &spec);
    let output = part_files(&ws.path("out"));

    // The count's uid changed: its state has nowhere to go. The run refuses, rather than
    // start from the beginning and write the committed output again.
    // So does a renamed sink, which would replace the part files in its directory, and a
    // renamed source, which would read its input again.
    let text = std::fs::read_to_string(&spec).unwrap();
    for (what, from, to, needle) in [
        (
            "uid",
            "uid = \"count\"",
            "uid = \"count-2\"",
            "operator uid \"count\"",
        ),
        (
            "sink",
            "name = \"out\"",
            "name = \"results\"",
            "of sink \"out\"",
        ),
        ("source", "\"lines\"", "\"input\"", "of source \"lines\""),
    ] {
        let renamed = ws.write("renamed.toml", text.replace(from, to));
        let run = crate::support::weir(&["run", "--no-progress"], &renamed);
        run.assert_clean_failure();
        for needle in [needle, "--allow-non-restored-state", "--fresh"] {
            assert!(run.stderr().contains(needle), "{what}: {needle}: {run}");
        }
        assert_eq!(
            part_files(&ws.path("out")),
            output,
            "{what}: the output is as it was"
        );
    }
    let renamed = ws.write(
        "renamed.toml",
        text.replace("uid = \"count\"", "uid = \"count-2\""),
    );
    // With --allow-non-restored-state it resumes from that checkpoint, without the state.
    let run = crate::support::weir(
        &["run", "--no-progress", "--allow-non-restored-state"],
        &renamed,
    );
    assert!(run.success(), "{run}");
    assert!(
        run.stdout().contains(&format!("restored from #{newest}")),
        "{run}"
    );

    // A damaged checkpoint, the only one: refused too; --fresh starts over.
    let ws = Workspace::new();
    let input = ws.write("input.txt", std::fs::read(&input).unwrap());
    let spec = self::spec(&ws, &input, "mode = \"exactly_once\"", 1, "");
    killed_after_a_checkpoint(&ws, &spec);
    for id in completed(&ws) {
        let metadata = ws.path(&format!("chk/crashy/chk-{id}/_metadata"));
        std::fs::write(&metadata, b"{ not json").unwrap();
    }
    let run = crate::support::weir(&["run", "--no-progress"], &spec);
    run.assert_clean_failure();
    assert!(
        run.stderr().contains("_metadata is not valid") && run.stderr().contains("--fresh"),
        "{run}"
    );
    let run = crate::support::weir(&["run", "--no-progress", "--fresh"], &spec);
    assert!(run.success(), "{run}");
    assert_exactly_once(&ws, &expected);
}

#[test]
fn from_checkpoint_and_fresh_choose_where_a_job_starts() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 3, "");
    killed_after_a_checkpoint(&ws, &spec);
    let first = completed(&ws)[0];

    // A checkpoint of another job is refused, naming the reason.
    let other = ws.write(
        "other.toml",
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("name = \"crashy\"", "name = \"other\""),
    );
    let chk = ws.path(&format!("chk/crashy/chk-{first}"));
    let from = |spec: &Path| {
        let chk = chk.to_str().unwrap();
        crate::support::weir(&["run", "--no-progress", "--from-checkpoint", chk], spec)
    };
    let run = from(&other);
    run.assert_clean_failure();
    assert!(
        run.stderr()
            .contains("belongs to job \"crashy\", not \"other\""),
        "{run}"
    );

    let run = from(&spec);
    assert!(run.success(), "{run}");
    assert!(
        run.stdout().contains(&format!("restored from #{first}")),
        "{run}"
    );
    assert_exactly_once(&ws, &expected);

    // --fresh ignores checkpoints: the output is that of a plain run.
    let run = crate::support::weir(&["run", "--no-progress", "--fresh"], &spec);
    assert!(run.success(), "{run}");
    assert!(!run.stdout().contains("restored from"), "{run}");
    assert_exactly_once(&ws, &expected);
}

/// Mounts a tmpfs of `size` at `dir` for the life of the guard.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` when this process may not mount (not root).
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_fails_the_checkpoint_with_a_clear_error() {
    let ws = Workspace::new();
    let Some(_disk) = Tmpfs::mount(&ws.path("chk"), "128k") else {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    };
    // 200k keys of count state do not fit in 128 KiB.
    let spec = checkpointed_job(
        &ws,
        "full",
        "100ms",
        &format!(
            r#"
[restart]
strategy = "none"

[[source]]
name = "keys"
type = "generator"
mode = "keyed_cycle"
vocabulary = 200000
count = 100000000

[[operator]]
name = "count"
uid = "count"
{count}
input = "keys"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
            count = wasm("wordcount_count"),
        ),
    );
    let run = crate::support::weir(&["run", "--no-progress"], &spec);
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("No space left on device")
            && stderr.contains("tolerable_failures is 0")
            && stderr.contains("checkpoint 1 failed"),
        "{run}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(ws.path("chk/full"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with("chk-"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "the failed checkpoint is deleted: {leftovers:?}"
    );
}

#[test]
fn operator_state_survives_sigkill() {
    let ws = Workspace::new();
    // 2 x 120k records at 80k records/s: a few seconds of work, so that the kills land.
    let spec = checkpointed_job(
        &ws,
        "crashy",
        "100ms",
        &format!(
            r#"
[[source]]
name = "seq"
type = "generator"
count = 240000
rate = 80000

[[operator]]
name = "tally"
uid = "tally"
{tally}
input = "seq"

[[sink]]
name = "out"
type = "file"
input = "tally"
path = {out}
"#,
            tally = wasm("weir_test_tally"),
            out = toml_path(&ws.path("out")),
        ),
    );
    let logs = crash_loop(&ws, &spec, 3);
    assert!(logs.iter().any(|l| l.contains("restoring checkpoint")));
    // Each subtask numbered its 120k records 1, 2, ... exactly once: the total came back
    // from operator state after every restore.
    for (subtask, lines) in part_files(&ws.path("out")) {
        let prefix = format!("s{subtask} ");
        let numbers: Vec<u64> = lines
            .iter()
            .map(|l| {
                l.strip_prefix(&prefix)
                    .unwrap_or_else(|| panic!("{l:?} in part-{subtask}"))
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(numbers, (1..=120_000).collect::<Vec<_>>(), "part-{subtask}");
    }
}

#[test]
fn timers_survive_sigkill() {
    let ws = Workspace::new();
    // One event-time timer registered by the first line; the rest keeps the job busy. The
    // killed run never reaches the end of input, where the timer fires, so the output holds
    // `fired 5` only if the timer came back from the checkpoint.
    // Enough that the killed run cannot finish before its kill, even on a loaded machine.
    const LINES: usize = 8_000_000;
    let mut lines = String::from("t timer 5\n");
    for i in 0..LINES {
        lines.push_str(&format!("k{} vget\n", i % 1000));
    }
    let input = ws.write("input.txt", lines);
    let spec = checkpointed_job(
        &ws,
        "crashy",
        "20ms",
        &format!(
            r#"
[[source]]
name = "lines"
type = "file"
path = {input}
{operators}{sink}"#,
            input = toml_path(&input),
            operators = keyed_probe_operators("lines", ""),
            sink = key_value_file_sink("probe", &ws.path("out")),
        ),
    );
    let logs = crash_loop(&ws, &spec, 1);
    assert!(logs[1].contains("restoring checkpoint"), "{}", logs[1]);
    let lines: Vec<String> = part_files(&ws.path("out"))
        .into_values()
        .flatten()
        .collect();
    let fired: Vec<&String> = lines.iter().filter(|l| l.contains("fired")).collect();
    assert_eq!(fired, [&"t\tfired 5".to_string()]);
    assert_eq!(
        lines.len(),
        LINES + 2,
        "every command answered once, plus the timer"
    );
}

#[test]
fn a_failed_task_restarts_the_job_from_the_newest_checkpoint() {
    // A record in the middle traps for the next few seconds: the job fails, restarts from its
    // newest checkpoint (after a checkpoint has completed) until the failure has passed, and
    // the sink, cut back at each restore, holds every line once and in order. On a machine
    // so loaded that the job reaches the record only after the failure has passed, the test
    // runs again with a longer one.
    for window_ms in [2_000, 10_000, 40_000] {
        if fails_for_a_while_then_restarts_from_the_newest_checkpoint(window_ms) {
            return;
        }
    }
    panic!("the job reached the trapping record only after 40 s of failures had passed");
}

/// [`a_failed_task_restarts_the_job_from_the_newest_checkpoint`] with a failure lasting
/// `window_ms`; `false` if the job never failed (it reached the record too late).
fn fails_for_a_while_then_restarts_from_the_newest_checkpoint(window_ms: u128) -> bool {
    let ws = Workspace::new();
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + window_ms;
    let mut text = String::new();
    for i in 0..1_000_000 {
        text.push_str(&format!("line {i}\n"));
        if i == 500_000 {
            text.push_str(&format!("trap-until {until}\n"));
        }
    }
    let input = ws.write("input.txt", &text);
    let spec = checkpointed_job(
        &ws,
        "crashy",
        "20ms",
        &format!(
            r#"
[restart]
strategy = "fixed_delay"
attempts = 1000
delay = "100ms"
# The same failure again and again from one checkpoint, which is what this test is about.
identical_failures = 0

[[source]]
name = "lines"
type = "file"
path = {input}
parallelism = 1

[[operator]]
name = "flaky"
uid = "flaky"
{hostile}
input = "lines"
parallelism = 1

[[sink]]
name = "out"
type = "file"
input = "flaky"
path = {out}
parallelism = 1
"#,
            input = toml_path(&input),
            hostile = wasm("weir_test_hostile"),
            out = toml_path(&ws.path("out")),
        ),
    );
    let out = command(&ws, &spec)
        .env("WEIR_LOG", "info")
        .stderr(Stdio::piped())
        .output()
        .expect("weir runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    if !stderr.contains("transient failure until") {
        return false;
    }
    assert!(
        stderr.contains("restarting in"),
        "the task failed and the job restarted: {stderr}"
    );
    let restored = stderr.matches("restoring checkpoint").count();
    assert!(restored > 0, "restarts resumed from a checkpoint: {stderr}");
    let written = part_text(&ws.path("out"), 0);
    assert!(written == text, "the sink holds every line once, in order");
    true
}

#[test]
fn a_sink_that_finished_before_a_crash_is_committed_once_and_not_run_again() {
    let ws = Workspace::new();
    // Two pipelines: `small` ends at once, `gen` runs for about three seconds. A checkpoint
    // taken after `small`'s sink finished records its last output as pre-committed; its
    // completion commits it. After a SIGKILL the job resumes from that checkpoint without
    // running `small` again, and both outputs are exact.
    let small: String = (0..1000).map(|i| format!("small {i}\n")).collect();
    let input = ws.write("small.txt", &small);
    let spec = checkpointed_job(
        &ws,
        "crashy",
        "100ms",
        &format!(
            r#"
[[source]]
name = "small"
type = "file"
path = {input}
parallelism = 1

[[sink]]
name = "a"
type = "file"
input = "small"
path = {a}
parallelism = 1

[[source]]
name = "gen"
type = "generator"
mode = "sequence"
count = 300000
rate = 100000
parallelism = 1

[[sink]]
name = "b"
type = "file"
input = "gen"
path = {b}
parallelism = 1
"#,
            input = toml_path(&input),
            a = toml_path(&ws.path("out-a")),
            b = toml_path(&ws.path("out-b")),
        ),
    );
    let mut child = start(&ws, &spec);
    let recorded = |id: &u64| {
        std::fs::read_to_string(ws.path(&format!("chk/crashy/chk-{id}/_metadata")))
            .is_ok_and(|m| m.contains("finished_sink"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !completed(&ws).iter().any(recorded) {
        assert!(
            child.try_wait().expect("poll weir").is_none(),
            "the job ended before a checkpoint recorded the finished sink"
        );
        assert!(
            Instant::now() < deadline,
            "no checkpoint recorded the finished sink"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The commit follows the checkpoint's metadata.
    let committed = Instant::now() + Duration::from_secs(10);
    while part_text(&ws.path("out-a"), 0) != small {
        assert!(
            Instant::now() < committed,
            "the checkpoint's completion did not commit the finished sink's output"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL weir");
    assert_eq!(child.wait().expect("reap weir").signal(), Some(9), "killed");

    let out = command(&ws, &spec)
        .env("WEIR_LOG", "info")
        .stderr(Stdio::piped())
        .output()
        .expect("weir runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("restoring checkpoint"), "{stderr}");
    assert!(part_text(&ws.path("out-a"), 0) == small, "committed once");
    let summary = ws.summary();
    let a = summary["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "a")
        .unwrap();
    assert_eq!(a["records_in"], 0, "the finished sink did not run again");
    let numbers: Vec<u64> = part_text(&ws.path("out-b"), 0)
        .lines()
        .map(|l| l.parse().expect("a sequence number"))
        .collect();
    assert_eq!(numbers, (0..300_000).collect::<Vec<_>>());
}

/// Starts `spec` with its checkpoints (every `interval`) in `chk2/` from its checkpoint
/// `first` in `chk/`; the spec (`moved.toml`) and the run.
fn started_elsewhere(ws: &Workspace, spec: &Path, first: u64, interval: &str) -> (PathBuf, Child) {
    let moved = ws.write(
        "moved.toml",
        std::fs::read_to_string(spec)
            .unwrap()
            .replace(&toml_path(&ws.path("chk")), &toml_path(&ws.path("chk2")))
            .replace(
                "interval = \"100ms\"",
                &format!("interval = \"{interval}\""),
            ),
    );
    let from = ws.path(&format!("chk/crashy/chk-{first}"));
    let args = [
        "run",
        "--no-progress",
        "--from-checkpoint",
        from.to_str().unwrap(),
    ];
    let child = crate::support::weir_command(&args, &moved)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (moved, child)
}

#[test]
fn a_job_started_from_another_directorys_checkpoint_keeps_what_its_own_refer_to() {
    // Incremental RocksDB checkpoints refer to the files of the one restored; when that one
    // is in another directory, the job's own checkpoints must not depend on it.
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(
        &ws,
        &input,
        "mode = \"exactly_once\"",
        3,
        "backend = \"rocksdb\"",
    );
    let first = killed_after_a_checkpoint(&ws, &spec);
    let (moved, child) = started_elsewhere(&ws, &spec, first, "100ms");
    kill_after_a_checkpoint(&ws, child, "chk2");
    std::fs::remove_dir_all(ws.path("chk")).unwrap();
    let run = crate::support::weir(&["run", "--no-progress"], &moved);
    assert!(run.success(), "{run}");
    assert!(run.stdout().contains("restored from #"), "{run}");
    assert_exactly_once(&ws, &expected);
}

#[test]
fn a_start_from_elsewhere_killed_before_its_first_checkpoint_resumes_from_there() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 3, "");
    let first = killed_after_a_checkpoint(&ws, &spec);
    // The job with its checkpoints elsewhere, taking none, started from that checkpoint and
    // killed: the next plain `weir run` starts from there again, not from the beginning.
    let (moved, mut child) = started_elsewhere(&ws, &spec, first, "1h");
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let run = crate::support::weir(&["run", "--no-progress"], &moved);
    assert!(run.success(), "{run}");
    assert!(
        run.stdout().contains(&format!("restored from #{first}")),
        "{run}"
    );
    assert_exactly_once(&ws, &expected);
    // --fresh forgets it.
    let run = crate::support::weir(&["run", "--no-progress", "--fresh"], &moved);
    assert!(
        run.success() && !run.stdout().contains("restored from"),
        "{run}"
    );
}

/// Kills the job once it has completed two checkpoints; returns the older one.
fn killed_after_two_checkpoints(ws: &Workspace, spec: &Path) -> u64 {
    let mut child = start(ws, spec);
    while completed(ws).len() < 2 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before two checkpoints"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    completed(ws)[0]
}

#[test]
fn a_start_from_a_checkpoint_named_by_a_relative_path_resumes_from_it() {
    // The path as typed in the job's directory, relative and through `..`: the checkpoint is
    // the job's own (the newer ones are dropped), not one from elsewhere (which once dropped
    // all of them, the one named included).
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 3, "");
    let older = killed_after_two_checkpoints(&ws, &spec);
    let from = format!("out/../chk/crashy/chk-{older}");
    let out =
        crate::support::weir_command(&["run", "--no-progress", "--from-checkpoint", &from], &spec)
            .current_dir(ws.path("."))
            .output()
            .unwrap();
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains(&format!("restored from #{older}")),
        "{report}"
    );
    assert_exactly_once(&ws, &expected);
    assert!(
        !ws.path("chk/crashy/origin").exists(),
        "the job's own checkpoint is not recorded as a start from elsewhere"
    );
}

#[test]
fn a_start_from_an_older_checkpoint_killed_before_its_next_resumes_from_that_one() {
    let ws = Workspace::new();
    let (input, expected) = input(&ws);
    let spec = spec(&ws, &input, "mode = \"exactly_once\"", 3, "");
    let older = killed_after_two_checkpoints(&ws, &spec);
    // Started from the older checkpoint, taking none of its own, and killed: its output
    // after that checkpoint is rolled back, and so are the newer checkpoints, which the next
    // plain `weir run` must not resume (their output is gone).
    let slow = ws.write(
        "slow.toml",
        std::fs::read_to_string(&spec)
            .unwrap()
            .replace("interval = \"100ms\"", "interval = \"1h\""),
    );
    let from = ws.path(&format!("chk/crashy/chk-{older}"));
    let args = [
        "run",
        "--no-progress",
        "--from-checkpoint",
        from.to_str().unwrap(),
    ];
    let mut child = crate::support::weir_command(&args, &slow)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while completed(&ws) != [older] {
        assert!(
            Instant::now() < deadline,
            "the newer checkpoints are left: {:?}",
            completed(&ws)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    let run = crate::support::weir(&["run", "--no-progress"], &spec);
    assert!(run.success(), "{run}");
    assert!(
        run.stdout().contains(&format!("restored from #{older}")),
        "{run}"
    );
    assert_exactly_once(&ws, &expected);
}
