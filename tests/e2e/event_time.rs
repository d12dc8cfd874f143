//! Event time: watermarks made at sources and operators, event-time timers that fire as the
//! watermark passes them, idleness, and processing-time timers on the job's clock. The
//! windows are user code (the `weir_test_windows` guest: a tumbling count in a map state
//! with an event-time timer per window), checked against a count computed here.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering::Relaxed;

use weir::checkpoint::RestoreFrom;
use weir::{Clock, Job, JobControl, JobSpec, RunningJob, WasmEngine};

use crate::exactly_once::{checkpointed_job, crash_loop};
use crate::support::{Workspace, key_value, part_files, toml_path, wasm};

const WINDOW_MS: i64 = 1_000;

/// `lines` records `k<i>,<timestamp>` over 20 keys, 10 ms apart and out of order by up to
/// `disorder` ms; also returns each key's count per window.
fn events(lines: usize, disorder: i64, seed: u64) -> (String, BTreeMap<(String, i64), u64>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut text = String::new();
    let mut windows = BTreeMap::new();
    for i in 0..lines as i64 {
        let key = format!("k{}", rng.u32(..20));
        let ts = i * 10 - rng.i64(0..=disorder);
        text.push_str(&format!("{key},{ts}\n"));
        *windows
            .entry((key, ts - ts.rem_euclid(WINDOW_MS)))
            .or_insert(0) += 1;
    }
    (text, windows)
}

/// The job of [`events_job`] with the guest's windows (a tumbling count in user code).
fn windows_job(input: &Path, delay: &str, parallelism: u32, ws: &Workspace, rest: &str) -> String {
    let windows = format!(
        "{}\nconfig = {{ window_ms = {WINDOW_MS} }}",
        wasm("weir_test_windows")
    );
    events_job(input, delay, &windows, (2, parallelism), ws, rest)
}

/// Window results in `dir` as `(key, start) -> count`; each window once.
fn results(dir: &Path) -> BTreeMap<(String, i64), u64> {
    let mut out = BTreeMap::new();
    for line in part_files(dir).into_values().flatten() {
        let (key, value) = key_value(&line);
        let (start, n) = value.split_once(',').expect("start,count");
        let window = (key.to_owned(), start.parse().expect("a start"));
        let old = out.insert(window.clone(), n.parse().expect("a count"));
        assert!(old.is_none(), "window {window:?} fired twice");
    }
    out
}

fn lines(dir: &Path) -> Vec<String> {
    part_files(dir).into_values().flatten().collect()
}

#[test]
fn windows_fire_as_the_watermark_passes_and_match_an_independent_count() {
    let (text, expected) = events(60_000, 400, 1);
    for parallelism in [1, 3] {
        for backend in ["memory", "rocksdb"] {
            let ws = Workspace::new();
            let input = ws.write("events.txt", &text);
            let state = format!("[state]\nbackend = \"{backend}\"\n");
            ws.run_ok(&windows_job(&input, "400ms", parallelism, &ws, &state));
            assert_eq!(
                results(&ws.path("out")),
                expected,
                "parallelism {parallelism}, {backend}"
            );
            assert_eq!(lines(&ws.path("late")), Vec::<String>::new());
        }
    }
}

#[test]
fn records_later_than_the_watermark_go_to_the_side_output_and_none_is_lost() {
    // Disorder of up to 2 s against a watermark that trails by 50 ms: windows fire while
    // records of theirs are still to come.
    let (text, expected) = events(60_000, 2_000, 2);
    let ws = Workspace::new();
    let input = ws.write("events.txt", &text);
    ws.run_ok(&windows_job(&input, "50ms", 2, &ws, ""));
    let got = results(&ws.path("out"));
    let late = lines(&ws.path("late"));
    assert!(!late.is_empty(), "no record came after its window fired");
    let mut counted = got.clone();
    for line in &late {
        let (key, ts) = key_value(line);
        let ts: i64 = ts.parse().expect("a timestamp");
        *counted
            .entry((key.to_owned(), ts - ts.rem_euclid(WINDOW_MS)))
            .or_insert(0) += 1;
    }
    assert_eq!(counted, expected, "a record was neither counted nor late");
    for (window, n) in &got {
        assert!(*n <= expected[window], "{window:?} counted {n}");
    }
}

/// A job of two sources into the windows: `events`, 4,000 records 10 ms apart in event time
/// at 2,000 a second, and `trickle`, one record at event time 0 and then nothing for a long
/// time, with `idleness` in its watermark strategy (or none).
fn two_sources(ws: &Workspace, idleness: &str) -> JobSpec {
    let spec = ws.write(
        "job.toml",
        format!(
            r#"[job]
name = "idle"

[[source]]
name = "events"
type = "generator"
mode = "keyed_words"
vocabulary = 20
count = 4000
rate = 2000
event_time = {{ start = 0, interval = "10ms" }}
watermark = {{ max_out_of_orderness = "0s" }}

[[source]]
name = "trickle"
type = "generator"
mode = "keyed_words"
rate = 0.001
event_time = {{ start = 0 }}
watermark = {{ max_out_of_orderness = "0s" {idleness} }}

[[operator]]
name = "windows"
uid = "windows"
{windows}
input = ["events", "trickle"]
edge = "key_by"
config = {{ window_ms = {WINDOW_MS} }}

[[sink]]
name = "out"
type = "file"
input = "windows"
path = {out}
format = "key_value"
"#,
            windows = wasm("weir_test_windows"),
            out = toml_path(&ws.path("out")),
        ),
    );
    JobSpec::from_file(&spec).expect("a valid spec")
}

/// Waits until `done` holds of the running job, for at most a minute.
fn wait_for(what: &str, job: &mut Option<RunningJob>, done: impl Fn(&RunningJob) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(job.as_ref().expect("running")) {
        if job.as_ref().is_some_and(RunningJob::is_finished) {
            let end = job.take().expect("running").wait();
            panic!("the job ended while waiting until {what}: {end:?}");
        }
        assert!(Instant::now() < deadline, "gave up waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_idle_source_holds_back_the_watermark_unless_its_strategy_says_idleness() {
    let home = Workspace::new();
    let engine = WasmEngine::new(Some(home.path("cache"))).expect("an engine");
    for idleness in [false, true] {
        let ws = Workspace::new();
        let setting = if idleness {
            ", idleness = \"200ms\""
        } else {
            ""
        };
        let job = Job::new(two_sources(&ws, setting), &engine).expect("a job");
        let control = JobControl::new();
        let mut running = Some(
            job.start_controlled(RestoreFrom::Fresh, control.clone())
                .expect("it starts"),
        );
        let windows = |r: &RunningJob| {
            let m = &r.metrics().vertices;
            let v = m.iter().find(|v| v.name == "windows").expect("windows");
            let (records_in, records_out) =
                (v.records_in.load(Relaxed), v.records_out.load(Relaxed));
            (records_in, records_out, v.watermark())
        };
        // The trickle's record and most events are in, while the events go on.
        wait_for("records reached the windows", &mut running, |r| {
            windows(r).0 >= 1_500
        });
        let (_, fired, watermark) = windows(running.as_ref().unwrap());
        if idleness {
            // The trickle went idle: the events alone move the watermark, windows fire.
            assert!(
                fired > 0 && watermark.is_some_and(|w| w >= WINDOW_MS),
                "{fired} {watermark:?}"
            );
        } else {
            // The trickle's watermark (its one record at 0) holds the job back, and the
            // status shows it.
            assert_eq!(fired, 0, "a window fired past the held-back watermark");
            assert_eq!(watermark, Some(-1));
        }
        control.stop();
        running.unwrap().wait().expect("it stops");
    }
}

/// Runs operator `name` (its spec lines in `operator`) over one generated record on a
/// manual clock that starts at `start`: nothing may come out until the clock has moved
/// `due_ms` (it is moved to one millisecond before first), then exactly one record, which
/// the job writes; returns that line.
fn one_record_on_a_manual_clock(name: &str, operator: &str, start: i64, due_ms: u64) -> String {
    let ws = Workspace::new();
    let engine = WasmEngine::new(Some(ws.path("cache"))).expect("an engine");
    let spec = ws.write(
        "job.toml",
        format!(
            r#"[job]
name = "manual-clock"

[[source]]
name = "trickle"
type = "generator"
mode = "keyed_words"
vocabulary = 1
rate = 0.001

[[operator]]
name = "{name}"
uid = "{name}"
{operator}
input = "trickle"
edge = "key_by"

[[sink]]
name = "out"
type = "file"
input = "{name}"
path = {out}
format = "key_value"
"#,
            out = toml_path(&ws.path("out")),
        ),
    );
    let clock = Clock::manual(start);
    let job = Job::new(JobSpec::from_file(&spec).unwrap(), &engine)
        .unwrap()
        .with_clock(clock.clone());
    let control = JobControl::new();
    let mut running = Some(
        job.start_controlled(RestoreFrom::Fresh, control.clone())
            .unwrap(),
    );
    let counts = |r: &RunningJob| {
        let v = &r.metrics().vertices;
        let v = v.iter().find(|v| v.name == name).unwrap();
        (v.records_in.load(Relaxed), v.records_out.load(Relaxed))
    };
    wait_for("the record came", &mut running, |r| counts(r).0 == 1);
    clock.advance(Duration::from_millis(due_ms - 1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counts(running.as_ref().unwrap()).1, 0, "{name} fired early");
    clock.advance(Duration::from_millis(1));
    wait_for("it fired", &mut running, |r| counts(r).1 == 1);
    control.stop();
    running.unwrap().wait().unwrap();
    let mut out = lines(&ws.path("out"));
    assert_eq!(out.len(), 1, "{out:?}");
    out.remove(0)
}

#[test]
fn processing_time_timers_fire_on_the_jobs_clock_with_no_records_flowing() {
    let operator = format!(
        "{}\nconfig = {{ processing_ms = 5000 }}",
        wasm("weir_test_windows")
    );
    let out = one_record_on_a_manual_clock("timers", &operator, 1_000_000, 5_000);
    assert!(out.ends_with("\tpfired 1005000"), "{out}");
}

#[test]
fn processing_time_windows_fire_on_the_jobs_clock_with_no_records_flowing() {
    // The record has no event time: the clock places it in [1,000,000, 1,001,000).
    let operator =
        r#"window = { type = "tumbling", size = "1s", aggregate = "count", time = "processing" }"#;
    let out = one_record_on_a_manual_clock("counts", operator, 1_000_500, 499);
    assert!(out.ends_with("\t1000000,1001000,1"), "{out}");
}

#[test]
fn windows_in_guests_and_in_the_host_are_emitted_exactly_once_across_sigkills() {
    // Generated events out of order by up to 300 ms, paced so that runs last long enough to
    // be killed; the watermark trails by 300 ms, so no record is late and the output must
    // equal an uninterrupted run's.
    let job = |ws: &Workspace, checkpoint: &str| {
        checkpointed_job(
            ws,
            "crashy",
            "100ms",
            &format!(
                r#"{checkpoint}
[[source]]
name = "events"
type = "generator"
mode = "keyed_words"
vocabulary = 30
count = 150_000
rate = 50_000
event_time = {{ start = 0, interval = "2ms", max_disorder = "300ms" }}
watermark = {{ max_out_of_orderness = "300ms" }}

[[operator]]
name = "windows"
uid = "windows"
{windows}
input = "events"
edge = "key_by"
config = {{ window_ms = {WINDOW_MS} }}

[[sink]]
name = "out"
type = "file"
input = "windows"
path = {out}
format = "key_value"

[[operator]]
name = "host_windows"
uid = "host_windows"
input = "events"
edge = "key_by"
window = {{ type = "sliding", size = "{WINDOW_MS}ms", slide = "250ms", aggregate = "count" }}

[[sink]]
name = "host_out"
type = "file"
input = "host_windows"
path = {host_out}
format = "key_value"

[[operator]]
name = "sessions"
uid = "sessions"
input = "events"
edge = "key_by"
window = {{ type = "session", gap = "40ms", aggregate = "count" }}

[[sink]]
name = "session_out"
type = "file"
input = "sessions"
path = {session_out}
format = "key_value"

[[operator]]
name = "process_windows"
uid = "process_windows"
{process}
input = "events"
edge = "key_by"
window = {{ type = "sliding", size = "{WINDOW_MS}ms", slide = "250ms", function = "process" }}

[[sink]]
name = "process_out"
type = "file"
input = "process_windows"
path = {process_out}
format = "key_value"
"#,
                windows = wasm("weir_test_windows"),
                process = wasm("weir_test_window_process"),
                process_out = toml_path(&ws.path("process_out")),
                out = toml_path(&ws.path("out")),
                host_out = toml_path(&ws.path("host_out")),
                session_out = toml_path(&ws.path("session_out")),
            ),
        )
    };
    let clean = Workspace::new();
    let spec = job(&clean, "");
    let run = crate::support::weir(&["run", "--no-progress"], &spec);
    assert!(run.success(), "{run}");
    let expected = results(&clean.path("out"));
    assert_eq!(expected.values().sum::<u64>(), 150_000);
    let (host_expected, again) = window_results(&clean.path("host_out"));
    assert_eq!(again, 0);
    let host_total: u64 = host_expected
        .values()
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        host_total,
        4 * 150_000,
        "each record is in four sliding windows"
    );
    let (sessions_expected, again) = window_results(&clean.path("session_out"));
    assert_eq!(again, 0);
    let sessions: u64 = (sessions_expected.values())
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(sessions, 150_000);
    // The process-window function got each window's records: as many as the host counted.
    let (process_expected, again) = window_results(&clean.path("process_out"));
    assert_eq!(again, 0);
    let counts: BTreeMap<_, _> = (process_expected.iter())
        .map(|(w, r)| (w.clone(), r.split_once(':').unwrap().0.to_owned()))
        .collect();
    assert_eq!(counts, host_expected);

    // Aligned checkpoints on memory state, and unaligned ones (whose records in flight come
    // back first) on RocksDB keeping 8 timers per domain in memory (the others in RocksDB).
    let rocksdb = "unaligned = true\n[state]\nbackend = \"rocksdb\"\ntimer_cache = 8";
    for checkpoint in ["", rocksdb] {
        let ws = Workspace::new();
        let spec = job(&ws, checkpoint);
        crash_loop(&ws, &spec, 3);
        assert_eq!(results(&ws.path("out")), expected, "{checkpoint}");
        let (host, again) = window_results(&ws.path("host_out"));
        assert_eq!((host, again), (host_expected.clone(), 0), "{checkpoint}");
        let (sessions, again) = window_results(&ws.path("session_out"));
        assert_eq!(
            (sessions, again),
            (sessions_expected.clone(), 0),
            "{checkpoint}"
        );
        let (process, again) = window_results(&ws.path("process_out"));
        assert_eq!(
            (process, again),
            (process_expected.clone(), 0),
            "{checkpoint}"
        );
    }
}

#[test]
fn a_file_source_stamping_its_lines_keeps_every_split_on_time() {
    // Two files, the second (by name) ten minutes earlier in event time than the first, each
    // cut into several splits, all read by one subtask. Stamped by an operator after the
    // source, the splits come one after the other and the earlier file's records find the
    // watermark past them: late. Stamped by the source (`event_time`), the splits are read
    // in turn and the watermark follows the one furthest behind: nothing is late.
    const LATER: i64 = 600_000;
    let (late_text, late_counts) = events(6_000, 50, 3);
    let (early_text, mut expected) = events(6_000, 50, 4);
    let mut shifted = String::new();
    for line in late_text.lines() {
        let (key, ts) = line.split_once(',').expect("key,timestamp");
        shifted.push_str(&format!("{key},{}\n", ts.parse::<i64>().unwrap() + LATER));
    }
    for ((key, start), n) in late_counts {
        expected.insert((key, start + LATER), n);
    }
    let ws = Workspace::new();
    std::fs::create_dir(ws.path("in")).unwrap();
    ws.write("in/a.txt", &shifted);
    ws.write("in/b.txt", &early_text);
    let job = |stamped_by_source: bool| {
        let (source_time, parse_watermark) = if stamped_by_source {
            (
                "event_time = { field = 1 }\nwatermark = { max_out_of_orderness = \"50ms\" }",
                "",
            )
        } else {
            ("", "watermark = { max_out_of_orderness = \"50ms\" }")
        };
        format!(
            r#"
[job]
name = "stamped"
parallelism = 2

[[source]]
name = "lines"
type = "file"
path = {input}
split_size = 16384
parallelism = 1
{source_time}

[[operator]]
name = "parse"
uid = "parse"
{parse}
input = "lines"
parallelism = 1
config = {{ parse = true }}
{parse_watermark}

[[operator]]
name = "windows"
uid = "windows"
{parse}
input = "parse"
edge = "key_by"
config = {{ window_ms = {WINDOW_MS} }}

[[sink]]
name = "out"
type = "file"
input = "windows"
path = {out}
format = "key_value"

[[sink]]
name = "late"
type = "file"
input = "windows.late"
path = {late}
format = "key_value"
"#,
            input = toml_path(&ws.path("in")),
            parse = wasm("weir_test_windows"),
            out = toml_path(&ws.path(if stamped_by_source { "out" } else { "out-op" })),
            late = toml_path(&ws.path(if stamped_by_source { "late" } else { "late-op" })),
        )
    };
    ws.run_ok(&job(false));
    assert!(
        lines(&ws.path("late-op")).len() > 1_000,
        "the input is meant to make records late when splits are read one after another"
    );
    ws.run_ok(&job(true));
    assert_eq!(lines(&ws.path("late")), Vec::<String>::new());
    assert_eq!(results(&ws.path("out")), expected);
}

/// `lines` records `k<i>,<timestamp>,<value>` over 20 keys, 10 ms apart, out of order by up
/// to `disorder` ms, with values 0..100.
fn valued_events(lines: usize, disorder: i64, seed: u64) -> (String, Vec<(String, i64, u64)>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut text = String::new();
    let mut records = Vec::new();
    for i in 0..lines as i64 {
        let (key, ts, value) = (
            format!("k{}", rng.u32(..20)),
            i * 10 - rng.i64(0..=disorder),
            rng.u64(..100),
        );
        text.push_str(&format!("{key},{ts},{value}\n"));
        records.push((key, ts, value));
    }
    (text, records)
}

/// The job: `input` read and parsed (with event time) by `readers` subtasks with a
/// watermark strategy of `delay`, keyed into the operator `windows` (the TOML of its code
/// and config) at `parallelism`; its results to `out/`, its late records to `late/`.
fn events_job(
    input: &Path,
    delay: &str,
    windows: &str,
    (readers, parallelism): (u32, u32),
    ws: &Workspace,
    rest: &str,
) -> String {
    format!(
        r#"{rest}
[[source]]
name = "lines"
type = "file"
path = {input}
split_size = 65536
parallelism = {readers}

[[operator]]
name = "parse"
uid = "parse"
{parse}
input = "lines"
parallelism = {readers}
config = {{ parse = true }}
watermark = {{ max_out_of_orderness = "{delay}" }}

[[operator]]
name = "windows"
uid = "windows"
input = "parse"
edge = "key_by"
parallelism = {parallelism}
{windows}

[[sink]]
name = "out"
type = "file"
input = "windows"
parallelism = {parallelism}
path = {out}
format = "key_value"

[[sink]]
name = "late"
type = "file"
input = "windows.late"
parallelism = {parallelism}
path = {late}
format = "key_value"
"#,
        input = toml_path(input),
        parse = wasm("weir_test_windows"),
        out = toml_path(&ws.path("out")),
        late = toml_path(&ws.path("late")),
    )
}

/// The job of [`events_job`] with the host window `window` (a TOML table).
fn host_window_job(
    input: &Path,
    delay: &str,
    window: &str,
    tasks: (u32, u32),
    ws: &Workspace,
    rest: &str,
) -> String {
    events_job(input, delay, &format!("window = {window}"), tasks, ws, rest)
}

/// The last result of each window in `dir` (a late record fires its window again), and how
/// many windows fired more than once.
fn window_results(dir: &Path) -> (BTreeMap<(String, i64, i64), String>, usize) {
    let mut last = BTreeMap::new();
    let mut again = 0;
    for line in lines(dir) {
        let (key, value) = key_value(&line);
        let mut fields = value.splitn(3, ',');
        let mut next = || fields.next().expect("start,end,result").to_owned();
        let (start, end, result) = (next().parse().unwrap(), next().parse().unwrap(), next());
        if last.insert((key.to_owned(), start, end), result).is_some() {
            again += 1;
        }
    }
    (last, again)
}

/// Windows computed here, as the tests expect them: `size` ms windows starting every `step`
/// ms, with `aggregate` ("count" or "sum") over the values.
fn expected_windows(
    records: &[(String, i64, u64)],
    size: i64,
    step: i64,
    aggregate: &str,
) -> BTreeMap<(String, i64, i64), String> {
    let mut acc: BTreeMap<(String, i64, i64), u64> = BTreeMap::new();
    for (key, ts, value) in records {
        let mut start = ts - ts.rem_euclid(step);
        while start > ts - size {
            let add = if aggregate == "count" { 1 } else { *value };
            *acc.entry((key.clone(), start, start + size)).or_insert(0) += add;
            start -= step;
        }
    }
    acc.into_iter().map(|(w, n)| (w, n.to_string())).collect()
}

/// Session windows computed here: a key's records no more than `gap` ms apart (in time
/// order) share a session `[first, last + gap)`; the count of each.
fn expected_sessions(
    records: &[(String, i64, u64)],
    gap: i64,
) -> BTreeMap<(String, i64, i64), String> {
    let mut by_key: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (key, ts, _) in records {
        by_key.entry(key).or_default().push(*ts);
    }
    let mut out = BTreeMap::new();
    for (key, mut times) in by_key {
        times.sort_unstable();
        let (mut first, mut n) = (times[0], 0);
        for (i, &t) in times.iter().enumerate() {
            if i > 0 && t - times[i - 1] > gap {
                out.insert((key.to_owned(), first, times[i - 1] + gap), n.to_string());
                (first, n) = (t, 0);
            }
            n += 1;
        }
        out.insert(
            (key.to_owned(), first, times[times.len() - 1] + gap),
            n.to_string(),
        );
    }
    out
}

#[test]
fn host_windows_tumbling_sliding_and_session_match_an_independent_computation() {
    let (text, records) = valued_events(30_000, 300, 4);
    let cases = [
        (
            r#"{ type = "tumbling", size = "1s", aggregate = "count" }"#,
            1_000,
            1_000,
            "count",
        ),
        (
            r#"{ type = "sliding", size = "2s", slide = "500ms", aggregate = "sum" }"#,
            2_000,
            500,
            "sum",
        ),
        // Each key's records are 200 ms apart on average: sessions of one to many records,
        // and records out of order that bridge two sessions.
        (
            r#"{ type = "session", gap = "150ms", aggregate = "count" }"#,
            150,
            0,
            "session",
        ),
    ];
    for (window, size, step, aggregate) in cases {
        let expected = match aggregate {
            "session" => expected_sessions(&records, size),
            _ => expected_windows(&records, size, step, aggregate),
        };
        for parallelism in [1, 3] {
            for backend in ["memory", "rocksdb"] {
                let ws = Workspace::new();
                let input = ws.write("events.txt", &text);
                // RocksDB keeps 4 timers per domain in memory, the others in RocksDB.
                let state = match backend {
                    "rocksdb" => "[state]\nbackend = \"rocksdb\"\ntimer_cache = 4\n",
                    _ => "",
                };
                ws.run_ok(&host_window_job(
                    &input,
                    "300ms",
                    window,
                    (2, parallelism),
                    &ws,
                    state,
                ));
                let (got, again) = window_results(&ws.path("out"));
                let case = format!("{window} at parallelism {parallelism} on {backend}");
                assert_eq!(got, expected, "{case}");
                assert_eq!(again, 0, "{case}: a window fired twice");
                assert_eq!(lines(&ws.path("late")), Vec::<String>::new(), "{case}");
            }
        }
    }
}

#[test]
fn host_windows_take_late_records_within_the_allowed_lateness_and_side_output_the_rest() {
    // Out of order by up to 2 s, a watermark 50 ms behind, 500 ms of allowed lateness, read
    // in order by one subtask. Each record's value is its timestamp, so that a late one
    // tells its window.
    let (_, records) = valued_events(30_000, 2_000, 5);
    let text: String = (records.iter())
        .map(|(key, ts, _)| format!("{key},{ts},{ts}\n"))
        .collect();
    let ws = Workspace::new();
    let input = ws.write("events.txt", &text);
    let window =
        r#"{ type = "tumbling", size = "1s", aggregate = "count", allowed_lateness = "500ms" }"#;
    ws.run_ok(&host_window_job(&input, "50ms", window, (1, 2), &ws, ""));
    let (got, again) = window_results(&ws.path("out"));
    assert!(again > 0, "no late record fired its window again");
    let late = lines(&ws.path("late"));
    assert!(
        !late.is_empty(),
        "no record came later than the allowed lateness"
    );
    // Every record is in its window's last result or in the side output, once.
    let mut counted: BTreeMap<(String, i64, i64), u64> = (got.iter())
        .map(|(w, n)| (w.clone(), n.parse().unwrap()))
        .collect();
    for line in &late {
        let (key, ts) = key_value(line);
        let ts: i64 = ts.parse().unwrap();
        let start = ts - ts.rem_euclid(1_000);
        *counted
            .entry((key.to_owned(), start, start + 1_000))
            .or_insert(0) += 1;
    }
    let expected: BTreeMap<_, u64> = expected_windows(&records, 1_000, 1_000, "count")
        .into_iter()
        .map(|(w, n)| (w, n.parse().unwrap()))
        .collect();
    assert_eq!(counted, expected);
}

/// Sessions computed here as [`expected_sessions`] does, with `<count>:<sum>` of the values.
fn expected_session_sums(
    records: &[(String, i64, u64)],
    gap: i64,
) -> BTreeMap<(String, i64, i64), String> {
    let counts = expected_sessions(records, gap);
    let mut sums: BTreeMap<(String, i64, i64), u64> = BTreeMap::new();
    for (key, ts, value) in records {
        let session = (counts.keys())
            .find(|(k, start, end)| k == key && start <= ts && ts < end)
            .expect("every record is in a session");
        *sums.entry(session.clone()).or_insert(0) += value;
    }
    (counts.into_iter())
        .map(|(w, n)| {
            let sum = sums[&w];
            (w, format!("{n}:{sum}"))
        })
        .collect()
}

#[test]
fn window_functions_in_guests_match_an_independent_computation() {
    let (text, records) = valued_events(20_000, 300, 6);
    let count_sum = |size, step| -> BTreeMap<(String, i64, i64), String> {
        let counts = expected_windows(&records, size, step, "count");
        let sums = expected_windows(&records, size, step, "sum");
        (counts.into_iter())
            .map(|(w, n)| {
                let sum = &sums[&w];
                (w, format!("{n}:{sum}"))
            })
            .collect()
    };
    let windows = [
        (r#"type = "tumbling", size = "1s""#, count_sum(1_000, 1_000)),
        (
            r#"type = "sliding", size = "2s", slide = "500ms""#,
            count_sum(2_000, 500),
        ),
        (
            r#"type = "session", gap = "150ms""#,
            expected_session_sums(&records, 150),
        ),
    ];
    // The Rust guests at parallelism 1 on memory and 3 on RocksDB; the same functions written
    // with the Python and JavaScript SDKs at 3 on RocksDB.
    let rust: &[(u32, &str)] = &[(1, "memory"), (3, "rocksdb")];
    let other: &[(u32, &str)] = &[(3, "rocksdb")];
    for (window, expected) in &windows {
        for (function, guest, runs) in [
            ("aggregate", "weir_test_window_aggregate", rust),
            ("process", "weir_test_window_process", rust),
            ("aggregate", "weir_test_window_aggregate_py", other),
            ("process", "weir_test_window_process_py", other),
            ("aggregate", "weir_test_window_aggregate_js", other),
            ("process", "weir_test_window_process_js", other),
        ] {
            for &(parallelism, backend) in runs {
                let ws = Workspace::new();
                let input = ws.write("events.txt", &text);
                let state = match backend {
                    "rocksdb" => "[state]\nbackend = \"rocksdb\"\ntimer_cache = 4\n",
                    _ => "",
                };
                let code = format!(
                    "{}\nwindow = {{ {window}, function = \"{function}\" }}",
                    wasm(guest)
                );
                ws.run_ok(&events_job(
                    &input,
                    "300ms",
                    &code,
                    (2, parallelism),
                    &ws,
                    state,
                ));
                let (got, again) = window_results(&ws.path("out"));
                let case = format!(
                    "{window}, {function} ({guest}) at parallelism {parallelism} on {backend}"
                );
                assert_eq!(&got, expected, "{case}");
                assert_eq!(again, 0, "{case}: a window fired twice");
            }
        }
    }
}

#[test]
fn guest_window_functions_fire_again_for_late_records_within_the_lateness() {
    // As the built-in case above: out of order by up to 2 s, a watermark 50 ms behind,
    // 500 ms of allowed lateness; each window's last result counts every record not in the
    // side output, whichever function makes it.
    let (text, records) = valued_events(30_000, 2_000, 7);
    for (function, guest) in [
        ("aggregate", "weir_test_window_aggregate"),
        ("process", "weir_test_window_process"),
    ] {
        let ws = Workspace::new();
        let input = ws.write("events.txt", &text);
        let code = format!(
            "{}\nwindow = {{ type = \"tumbling\", size = \"1s\", function = \"{function}\", \
             allowed_lateness = \"500ms\" }}",
            wasm(guest)
        );
        ws.run_ok(&events_job(&input, "50ms", &code, (1, 2), &ws, ""));
        let (got, again) = window_results(&ws.path("out"));
        assert!(
            again > 0,
            "{function}: no late record fired its window again"
        );
        let late = lines(&ws.path("late"));
        assert!(!late.is_empty(), "{function}: nothing was too late");
        let counted: u64 = (got.values())
            .map(|r| r.split_once(':').unwrap().0.parse::<u64>().unwrap())
            .sum();
        let total = counted + late.len() as u64;
        assert_eq!(total, records.len() as u64, "{function}: a record was lost");
    }
}
