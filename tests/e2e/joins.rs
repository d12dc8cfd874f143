//! Operators with two inputs: joins in the host (interval, tumbling, sliding and session
//! window joins) checked against pairs computed here, their late records, their exactly-once output
//! across SIGKILLs, and the orders-and-payments example, whose `unpaid` operator is a guest
//! that tells its two inputs apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::exactly_once::{checkpointed_job, crash_loop};
use crate::savepoint::stop_with_savepoint;
use crate::support::{Workspace, key_value, part_files, repo, toml_path, wasm, weir};

/// One side's records: `(key, timestamp, value)`.
type Side = Vec<(String, i64, String)>;

/// `lines` records `k<i>,<timestamp>,<tag><n>` over 20 keys, 10 ms apart and out of order by
/// up to `disorder` ms; each value names its record.
fn side(lines: usize, disorder: i64, seed: u64, tag: &str) -> (String, Side) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut text = String::new();
    let mut records = Vec::new();
    for i in 0..lines as i64 {
        let (key, ts) = (
            format!("k{}", rng.u32(..20)),
            i * 10 - rng.i64(0..=disorder),
        );
        let value = format!("{tag}{i}");
        text.push_str(&format!("{key},{ts},{value}\n"));
        records.push((key, ts, value));
    }
    (text, records)
}

/// The job: each side's file read and parsed (with event time) by `readers` subtasks with a
/// watermark strategy of `delay`, both keyed into the join `join` (a TOML table) at
/// `parallelism`; the pairs to `out/`, the late records to `late/`.
fn join_job(
    (left, right): (&Path, &Path),
    delay: &str,
    join: &str,
    (readers, parallelism): (u32, u32),
    ws: &Workspace,
    rest: &str,
) -> String {
    let parse = wasm("weir_test_windows");
    let mut spec = format!("{rest}\n");
    for (name, path) in [("left", left), ("right", right)] {
        spec += &format!(
            r#"
[[source]]
name = "{name}_lines"
type = "file"
path = {path}
split_size = 16384
parallelism = {readers}

[[operator]]
name = "{name}"
uid = "{name}"
{parse}
input = "{name}_lines"
parallelism = {readers}
config = {{ parse = true }}
watermark = {{ max_out_of_orderness = "{delay}" }}
"#,
            path = toml_path(path),
        );
    }
    spec + &join_of_left_and_right(join, parallelism, ws)
}

/// The join `join` (a TOML table) of operators `left` and `right`, keyed, at `parallelism`;
/// its pairs to `out/`, its late records to `late/`.
fn join_of_left_and_right(join: &str, parallelism: u32, ws: &Workspace) -> String {
    format!(
        r#"
[[operator]]
name = "join"
uid = "join"
input = "left"
second_input = "right"
edge = "key_by"
parallelism = {parallelism}
join = {join}

[[sink]]
name = "out"
type = "file"
input = "join"
parallelism = {parallelism}
path = {out}
format = "key_value"

[[sink]]
name = "late"
type = "file"
input = "join.late"
parallelism = {parallelism}
path = {late}
format = "key_value"
"#,
        out = toml_path(&ws.path("out")),
        late = toml_path(&ws.path("late")),
    )
}

/// Asserts that `got` and `want` (sorted lines) are equal, naming a few lines that differ.
fn assert_same(got: &[String], want: &[String], case: &str) {
    if got == want {
        return;
    }
    fn count(lines: &[String]) -> BTreeMap<&str, i64> {
        let mut n = BTreeMap::new();
        for l in lines {
            *n.entry(l.as_str()).or_insert(0) += 1;
        }
        n
    }
    let (g, w) = (count(got), count(want));
    let differ: Vec<String> = (g.keys().chain(w.keys()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter_map(|l| {
            let d = g.get(l).copied().unwrap_or(0) - w.get(l).copied().unwrap_or(0);
            (d != 0).then(|| format!("{l:?} {d:+}"))
        })
        .take(8)
        .collect();
    panic!(
        "{case}: {} lines, {} expected; lines that differ (count more than expected): {differ:?}",
        got.len(),
        want.len()
    );
}

/// Every line in the part files of `dir`, sorted.
fn sorted_lines(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = part_files(dir).into_values().flatten().collect();
    lines.sort();
    lines
}

/// The pairs of an interval join computed here: `a + lower <= b <= a + upper`.
fn expected_interval(left: &Side, right: &Side, lower: i64, upper: i64) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<&(String, i64, String)>> = BTreeMap::new();
    for r in right {
        by_key.entry(&r.0).or_default().push(r);
    }
    let mut out = Vec::new();
    for (key, a, lv) in left {
        for (_, b, rv) in by_key.get(key.as_str()).into_iter().flatten() {
            if a + lower <= *b && *b <= a + upper {
                out.push(format!("{key}\t{lv},{rv}"));
            }
        }
    }
    out.sort();
    out
}

/// The pairs of a window join computed here: windows of `size` ms starting every `step` ms
/// from `offset`.
fn expected_windowed(
    (left, right): (&Side, &Side),
    size: i64,
    step: i64,
    offset: i64,
) -> Vec<String> {
    let windows = |side: &Side| {
        let mut w: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
        for (key, ts, value) in side {
            let mut start = ts - (ts - offset).rem_euclid(step);
            while start > ts - size {
                w.entry((key.clone(), start))
                    .or_default()
                    .push(value.clone());
                start -= step;
            }
        }
        w
    };
    let (l, r) = (windows(left), windows(right));
    let mut out = Vec::new();
    for ((key, start), lvs) in &l {
        for rv in r.get(&(key.clone(), *start)).into_iter().flatten() {
            for lv in lvs {
                out.push(format!("{key}\t{start},{},{lv},{rv}", start + size));
            }
        }
    }
    out.sort();
    out
}

/// The pairs of a session window join computed here: a key's records of both sides, in time
/// order, share a session while each is at most `gap` ms after the one before it; a session
/// is `[first, last + gap)`.
fn expected_sessions((left, right): (&Side, &Side), gap: i64) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<(i64, usize, &str)>> = BTreeMap::new();
    for (s, side) in [left, right].into_iter().enumerate() {
        for (key, ts, value) in side {
            by_key.entry(key).or_default().push((*ts, s, value));
        }
    }
    let mut out = Vec::new();
    for (key, mut records) in by_key {
        records.sort();
        let mut sessions: Vec<Vec<(i64, usize, &str)>> = Vec::new();
        for r in records {
            match sessions.last_mut() {
                Some(session) if r.0 - session.last().unwrap().0 <= gap => session.push(r),
                _ => sessions.push(vec![r]),
            }
        }
        for session in &sessions {
            let (start, end) = (session[0].0, session.last().unwrap().0 + gap);
            for (_, _, lv) in session.iter().filter(|r| r.1 == 0) {
                for (_, _, rv) in session.iter().filter(|r| r.1 == 1) {
                    out.push(format!("{key}\t{start},{end},{lv},{rv}"));
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn interval_and_window_joins_match_pairs_computed_independently() {
    let (left_text, left) = side(4_000, 300, 11, "L");
    let (right_text, right) = side(4_000, 300, 12, "R");
    let cases = [
        (
            r#"{ type = "interval", lower = "-150ms", upper = "250ms" }"#,
            expected_interval(&left, &right, -150, 250),
        ),
        (
            r#"{ type = "tumbling", size = "500ms" }"#,
            expected_windowed((&left, &right), 500, 500, 0),
        ),
        (
            r#"{ type = "sliding", size = "400ms", slide = "200ms", offset = "50ms" }"#,
            expected_windowed((&left, &right), 400, 200, 50),
        ),
        (
            r#"{ type = "session", gap = "150ms" }"#,
            expected_sessions((&left, &right), 150),
        ),
    ];
    for (join, expected) in cases {
        assert!(expected.len() > 1_000, "{join}: too few pairs to tell");
        for parallelism in [1, 3] {
            for backend in ["memory", "rocksdb"] {
                let ws = Workspace::new();
                let inputs = (
                    ws.write("left.txt", &left_text),
                    ws.write("right.txt", &right_text),
                );
                // RocksDB keeps 4 timers per domain in memory, the others in RocksDB.
                let state = match backend {
                    "rocksdb" => "[state]\nbackend = \"rocksdb\"\ntimer_cache = 4\n",
                    _ => "",
                };
                ws.run_ok(&join_job(
                    (&inputs.0, &inputs.1),
                    "300ms",
                    join,
                    (2, parallelism),
                    &ws,
                    state,
                ));
                let case = format!("{join} at parallelism {parallelism} on {backend}");
                assert_same(&sorted_lines(&ws.path("out")), &expected, &case);
                assert_eq!(
                    sorted_lines(&ws.path("late")),
                    Vec::<String>::new(),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn join_records_behind_the_watermark_go_to_the_side_output_and_none_is_lost() {
    // Out of order by up to 2 s with a watermark 50 ms behind, each side read in order by
    // one subtask: many records arrive behind the watermark. Every record either pairs as
    // the rule says or is in the side output; a late one pairs with nothing.
    let (left_text, left) = side(30_000, 2_000, 21, "L");
    let (right_text, right) = side(30_000, 2_000, 22, "R");
    let ws = Workspace::new();
    let (l, r) = (
        ws.write("left.txt", &left_text),
        ws.write("right.txt", &right_text),
    );
    ws.run_ok(&join_job(
        (&l, &r),
        "50ms",
        r#"{ type = "interval", lower = "-200ms", upper = "200ms" }"#,
        (1, 2),
        &ws,
        "",
    ));
    let late: Vec<String> = sorted_lines(&ws.path("late"));
    assert!(late.len() > 100, "only {} late records", late.len());
    let is_late: std::collections::HashSet<&str> = late.iter().map(|l| key_value(l).1).collect();
    // A record on time waits for its pairs until no record on time can pair with it.
    let on_time = |s: &Side| -> Side {
        s.iter()
            .filter(|(_, _, v)| !is_late.contains(v.as_str()))
            .cloned()
            .collect()
    };
    let out = sorted_lines(&ws.path("out"));
    let all = expected_interval(&left, &right, -200, 200);
    for pair in &out {
        assert!(all.binary_search(pair).is_ok(), "{pair} is not a pair");
        let (_, values) = key_value(pair);
        let (lv, rv) = values.split_once(',').unwrap();
        assert!(
            !is_late.contains(lv) && !is_late.contains(rv),
            "{pair}: a late record paired"
        );
    }
    assert_same(
        &out,
        &expected_interval(&on_time(&left), &on_time(&right), -200, 200),
        "every pair of records on time, once",
    );
    // The side output holds each late record as it came, with its key.
    let mut records: Vec<String> = (left.iter().chain(&right))
        .filter(|(_, _, v)| is_late.contains(v.as_str()))
        .map(|(k, _, v)| format!("{k}\t{v}"))
        .collect();
    records.sort();
    assert_same(&late, &records, "the side output");
}

/// Sources `left` and `right`: 60,000 generated records each over the same 30 keys, at `rate`
/// a second if any, 5 ms apart in event time and out of order by up to 200 ms, which their
/// watermarks trail by: the same records at any rate.
fn generated_sides(rate: Option<u64>) -> String {
    let rate = rate.map(|r| format!("rate = {r}\n")).unwrap_or_default();
    let mut spec = String::new();
    for (name, seed) in [("left", 1), ("right", 2)] {
        spec += &format!(
            r#"
[[source]]
name = "{name}"
type = "generator"
mode = "keyed_words"
seed = {seed}
vocabulary = 30
count = 60_000
{rate}event_time = {{ start = 0, interval = "5ms", max_disorder = "200ms" }}
watermark = {{ max_out_of_orderness = "200ms" }}
"#
        );
    }
    spec
}

#[test]
fn joins_emit_each_pair_once_across_sigkills() {
    // Two generated streams of the same 30 keys, out of order by up to 200 ms, paced so that
    // runs last long enough to be killed; the watermarks trail by 200 ms, so no record is
    // late and the output must equal an uninterrupted run's.
    let job = |ws: &Workspace, checkpoint: &str| {
        let mut spec = format!("{checkpoint}\n{}", generated_sides(Some(20_000)));
        for (name, join) in [
            (
                "interval",
                r#"{ type = "interval", lower = "-10ms", upper = "10ms" }"#,
            ),
            ("tumbling", r#"{ type = "tumbling", size = "50ms" }"#),
            ("session", r#"{ type = "session", gap = "10ms" }"#),
        ] {
            spec += &format!(
                r#"
[[operator]]
name = "{name}"
uid = "{name}"
input = "left"
second_input = "right"
edge = "key_by"
join = {join}

[[sink]]
name = "{name}_out"
type = "file"
input = "{name}"
path = {out}
format = "key_value"
"#,
                out = toml_path(&ws.path(name)),
            );
        }
        checkpointed_job(ws, "crashy", "100ms", &spec)
    };
    let clean = Workspace::new();
    let run = weir(&["run", "--no-progress"], &job(&clean, ""));
    assert!(run.success(), "{run}");
    let expected: Vec<Vec<String>> = ["interval", "tumbling", "session"]
        .map(|name| sorted_lines(&clean.path(name)))
        .into();
    assert!(expected.iter().all(|pairs| pairs.len() > 1_000));

    // Aligned checkpoints on memory state, and unaligned ones (whose records in flight to
    // both inputs come back first) on RocksDB keeping 8 timers per domain in memory.
    let rocksdb = "unaligned = true\n[state]\nbackend = \"rocksdb\"\ntimer_cache = 8";
    for checkpoint in ["", rocksdb] {
        let ws = Workspace::new();
        let spec = job(&ws, checkpoint);
        crash_loop(&ws, &spec, 3);
        for (name, expected) in ["interval", "tumbling", "session"].iter().zip(&expected) {
            assert_same(
                &sorted_lines(&ws.path(name)),
                expected,
                &format!("{name} join, {checkpoint}"),
            );
        }
    }
}

#[test]
fn late_records_after_a_restore_pair_no_window_twice() {
    // Out of order by up to 1 s with watermarks 20 ms behind: many records come after some
    // of their sliding windows fired. A restored join must take them for late as before the
    // crash; one that had no watermark until its inputs sent one again took them for on
    // time and fired those windows, with every pair in them, a second time.
    let job = |ws: &Workspace, state: &str| {
        let mut spec = format!("{state}\n");
        for (name, seed, tag) in [("left", 1, "L"), ("right", 2, "R")] {
            spec += &format!(
                r#"
[[source]]
name = "{name}_numbers"
type = "generator"
mode = "sequence"
seed = {seed}
count = 60_000
rate = 20_000
event_time = {{ start = 0, interval = "5ms", max_disorder = "1s" }}
watermark = {{ max_out_of_orderness = "20ms" }}

[[operator]]
name = "{name}"
uid = "{name}"
{windows}
input = "{name}_numbers"
config = {{ number = {{ keys = 20, tag = "{tag}" }} }}
"#,
                windows = wasm("weir_test_windows"),
            );
        }
        spec += &join_of_left_and_right(
            r#"{ type = "sliding", size = "400ms", slide = "200ms" }"#,
            2,
            ws,
        );
        checkpointed_job(ws, "crashy", "100ms", &spec)
    };
    // `L<i>@<t>` (or `R...`): the record's key and event time.
    let record = |value: &str| -> (String, i64) {
        let (i, t) = value[1..].split_once('@').unwrap();
        (
            format!("k{}", i.parse::<u64>().unwrap() % 20),
            t.parse().unwrap(),
        )
    };
    for state in ["", "[state]\nbackend = \"rocksdb\"\n"] {
        let ws = Workspace::new();
        crash_loop(&ws, &job(&ws, state), 3);
        let out = sorted_lines(&ws.path("out"));
        assert!(out.len() > 10_000, "{state}: only {} pairs", out.len());
        let twice: Vec<_> = (out.windows(2).filter(|w| w[0] == w[1]))
            .map(|w| &w[0])
            .take(5)
            .collect();
        assert!(twice.is_empty(), "{state}: pairs emitted twice: {twice:?}");
        for pair in &out {
            let (key, value) = key_value(pair);
            let [start, end, left, right] = value.split(',').collect::<Vec<_>>()[..] else {
                panic!("{pair}")
            };
            let (start, end): (i64, i64) = (start.parse().unwrap(), end.parse().unwrap());
            assert!(start % 200 == 0 && end == start + 400, "{state}: {pair}");
            for (k, t) in [record(left), record(right)] {
                assert!(k == key && (start..end).contains(&t), "{state}: {pair}");
            }
        }
        let late = sorted_lines(&ws.path("late"));
        assert!(!late.is_empty(), "{state}: no record came late");
        for (i, line) in late.iter().enumerate() {
            let (key, value) = key_value(line);
            assert_eq!(record(value).0, key, "{state}: {line}");
            assert!(i == 0 || late[i - 1] != *line, "{state}: {line} twice");
        }
    }
}

/// The four operators that keep records, sessions and timers per key — a session join, a
/// sliding window join, a process-window function in a guest and a session window in the host —
/// over two generated streams (at `rate` records a second, if any), as job `name` at
/// `parallelism` on `backend`; sources and sinks stay at parallelism 2, whose positions and
/// transactions the savepoints carry.
fn keeping_job(
    ws: &Workspace,
    name: &str,
    (parallelism, backend): (u32, &str),
    rate: Option<u64>,
) -> PathBuf {
    let mut spec = format!(
        "[job]\nname = \"{name}\"\nparallelism = 2\n\n[checkpoint]\ninterval = \"50ms\"\n\
         dir = {chk}\n\n[state]\nbackend = \"{backend}\"\ndir = {state}\n",
        chk = toml_path(&ws.path(&format!("chk-{name}"))),
        state = toml_path(&ws.path(&format!("state-{name}"))),
    );
    spec += &generated_sides(rate);
    let operators = [
        (
            "session_join",
            r#"second_input = "right"
join = { type = "session", gap = "10ms" }"#
                .to_owned(),
        ),
        (
            "sliding_join",
            r#"second_input = "right"
join = { type = "sliding", size = "100ms", slide = "50ms" }"#
                .to_owned(),
        ),
        (
            "process_window",
            format!(
                "{}\nwindow = {{ type = \"sliding\", size = \"200ms\", slide = \"50ms\", \
                 function = \"process\" }}",
                wasm("weir_test_window_process")
            ),
        ),
        (
            "session_window",
            r#"window = { type = "session", gap = "20ms", aggregate = "count" }"#.to_owned(),
        ),
    ];
    for (op, what) in operators {
        spec += &format!(
            r#"
[[operator]]
name = "{op}"
uid = "{op}"
input = "left"
edge = "key_by"
parallelism = {parallelism}
{what}

[[sink]]
name = "{op}_out"
type = "file"
input = "{op}"
edge = "rebalance"
path = {out}
format = "key_value"
"#,
            out = toml_path(&ws.path(op)),
        );
    }
    ws.write(&format!("{name}.toml"), spec)
}

#[test]
fn windows_and_joins_move_their_waiting_records_to_other_parallelisms_through_savepoints() {
    // Stopped with a savepoint while sessions and windows are open, restored at another
    // parallelism and on the other backend twice: their records, sessions and timers move with
    // their key groups, and every sink holds what an uninterrupted run's does.
    let ops = [
        "session_join",
        "sliding_join",
        "process_window",
        "session_window",
    ];
    let clean = Workspace::new();
    let run = weir(
        &["run", "--no-progress"],
        &keeping_job(&clean, "clean", (2, "memory"), None),
    );
    assert!(run.success(), "{run}");
    let expected = ops.map(|op| sorted_lines(&clean.path(op)));
    assert!(expected.iter().all(|lines| lines.len() > 1_000));

    let ws = Workspace::new();
    let (sp1, sp2) = (ws.path("savepoints/one"), ws.path("savepoints/two"));
    // The runs to stop read slowly (30 s of input), so that they are stopped before their
    // input ends even when their checkpoints take seconds on a loaded machine; the last one
    // reads as fast as it goes.
    let slow = Some(2_000);
    let first = keeping_job(&ws, "first", (2, "memory"), slow);
    stop_with_savepoint(&ws, &first, &[], &sp1, "first");
    let second = keeping_job(&ws, "second", (3, "rocksdb"), slow);
    let from = ["--from-savepoint", sp1.to_str().unwrap()];
    stop_with_savepoint(&ws, &second, &from, &sp2, "second");
    let third = keeping_job(&ws, "third", (1, "memory"), None);
    let run = weir(
        &["run", "--no-progress", "-s", sp2.to_str().unwrap()],
        &third,
    );
    assert!(run.success(), "{run}");
    for (op, expected) in ops.iter().zip(&expected) {
        assert_same(&sorted_lines(&ws.path(op)), expected, op);
    }
}

#[test]
fn the_orders_example_pairs_payments_and_finds_the_unpaid_orders() {
    let example = repo().join("examples/orders");
    // `<order> <what> <amount> <time>`; other lines are malformed.
    let read = |file: &str| -> Vec<(String, String, i64)> {
        let text = std::fs::read_to_string(example.join(file)).expect("the sample input");
        (text.lines())
            .filter_map(|line| {
                let f: Vec<&str> = line.split_ascii_whitespace().collect();
                let &[order, what, amount, time] = f.as_slice() else {
                    return None;
                };
                Some((order.into(), format!("{what} {amount}"), time.parse().ok()?))
            })
            .collect()
    };
    let (orders, payments) = (read("orders.txt"), read("payments.txt"));
    const WITHIN: i64 = 15 * 60 * 1000;
    let pays = |o: &(String, String, i64), p: &(String, String, i64)| {
        o.0 == p.0 && o.2 <= p.2 && p.2 <= o.2 + WITHIN
    };
    let mut paid = Vec::new();
    let mut unpaid = Vec::new();
    for o in &orders {
        let mine: Vec<_> = payments.iter().filter(|p| pays(o, p)).collect();
        for p in &mine {
            paid.push(format!("{}\t{},{}", o.0, o.1, p.1));
        }
        if mine.is_empty() {
            unpaid.push(format!("{}\t{}", o.0, o.1));
        }
    }
    paid.sort();
    unpaid.sort();
    assert!(paid.len() > 20 && unpaid.len() > 5);

    let expected = |file: &str| -> Vec<String> {
        let text = std::fs::read_to_string(example.join(file)).expect("the expected output");
        text.lines().map(str::to_owned).collect()
    };
    assert_eq!(expected("paid.expected"), paid, "paid.expected is stale");
    assert_eq!(
        expected("unpaid.expected"),
        unpaid,
        "unpaid.expected is stale"
    );

    // The example writes to output/ next to its spec: run a copy elsewhere.
    let ws = Workspace::new();
    let spec = std::fs::read_to_string(example.join("job.toml"))
        .unwrap()
        .replace(
            "../../build",
            &toml_path(&repo().join("build")).replace('"', ""),
        )
        .replace(
            "orders.txt",
            &toml_path(&example.join("orders.txt")).replace('"', ""),
        )
        .replace(
            "payments.txt",
            &toml_path(&example.join("payments.txt")).replace('"', ""),
        );
    let run = ws.run_ok(&spec);
    assert_eq!(sorted_lines(&ws.path("output/paid")), paid);
    assert_eq!(sorted_lines(&ws.path("output/unpaid")), unpaid);
    assert!(
        run.stdout().contains("o99 broken line"),
        "the malformed line is printed: {}",
        run.stdout()
    );
}
