//! The PostgreSQL sink against the real server on 127.0.0.1:5432 (`cargo xtask services`
//! makes it ready): `weir` is killed with SIGKILL at random moments, or its connections are
//! terminated, and the committed table still equals the output of a run without crashes.

use std::collections::HashMap;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use crate::exactly_once::{
    checkpointed_job, command, completed, crash_loop, crash_loop_checked, crash_tally, text,
};
use crate::support::{Workspace, count_words, toml_path, toml_str, wasm, word_count_operators};

pub(crate) const CONNECTION: &str = "host=127.0.0.1 user=postgres dbname=test";

/// A client of the test database, which must allow prepared transactions.
pub(crate) fn client() -> Client {
    let mut client = Client::connect(CONNECTION, NoTls).unwrap_or_else(|e| {
        panic!(
            "PostgreSQL does not answer on 127.0.0.1:5432 as user postgres, database test ({e}); \
             run `cargo xtask services`, which installs, starts and configures it"
        )
    });
    let prepared: String = client
        .query_one("SHOW max_prepared_transactions", &[])
        .unwrap()
        .get(0);
    assert!(
        prepared.parse::<u32>().unwrap() >= 16,
        "PostgreSQL has max_prepared_transactions = {prepared}; run `cargo xtask services`"
    );
    client
}

/// A fresh table `weir_e2e_<what>_<random>` made by `columns`, and its name.
pub(crate) fn table(client: &mut Client, what: &str, columns: &str) -> String {
    let name = format!("weir_e2e_{what}_{}", fastrand::u32(..));
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}; CREATE TABLE {name} ({columns})"
        ))
        .unwrap();
    name
}

/// The prepared transactions of sink `sink` of job `crashy` left in the server.
fn prepared(client: &mut Client, sink: &str) -> Vec<String> {
    client
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1)",
            &[&format!("weir/crashy/{sink}/")],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A sequence of `count` numbers at `rate` per second into an append-mode table through sink
/// `sink` (tests running at once must not share a sink name: it names their transactions), with
/// `job_extra` and `sink_extra` added to the job and the sink's tables, and a
/// checkpoint every 20 ms, so that a random kill often falls between a barrier and the
/// checkpoint's completion.
fn sequence_job(
    ws: &Workspace,
    sink: &str,
    table: &str,
    count: u64,
    rate: u64,
    job_extra: &str,
    sink_extra: &str,
) -> PathBuf {
    checkpointed_job(
        ws,
        "crashy",
        "20ms",
        &format!(
            r#"
{job_extra}
[[source]]
name = "seq"
type = "generator"
mode = "sequence"
count = {count}
rate = {rate}
parallelism = 2

[[sink]]
name = "{sink}"
type = "postgres"
input = "seq"
connection = {connection}
table = "{table}"
mode = "append"
format = "key_value"
columns = ["k", "n"]
kind_column = "kind"
{sink_extra}
"#,
            connection = toml_str(CONNECTION),
        ),
    )
}

/// The word count of `input` (the file source configured by `source`) at parallelism 2,
/// checkpointed every `interval`, into `table` (`word`, `count`) through upsert sink `sink`
/// (with `sink_extra` added to its table).
fn word_count_job(
    ws: &Workspace,
    input: &Path,
    sink: &str,
    table: &str,
    interval: &str,
    source: &str,
    sink_extra: &str,
) -> PathBuf {
    checkpointed_job(
        ws,
        "crashy",
        interval,
        &format!(
            r#"num_retained = 3

[[source]]
name = "lines"
type = "file"
path = {input}
{source}
{operators}
[[sink]]
name = "{sink}"
type = "postgres"
input = "count"
connection = {connection}
table = "{table}"
mode = "upsert"
key = ["word"]
format = "key_value"
columns = ["word", "count"]
{sink_extra}
"#,
            input = toml_path(input),
            operators =
                word_count_operators("lines", &wasm("wordcount_split"), &wasm("wordcount_count")),
            connection = toml_str(CONNECTION),
        ),
    )
}

/// The first place where `numbers` (sorted) differs from `expected`, for a message.
fn first_difference(numbers: &[i64], mut expected: impl Iterator<Item = i64>) -> Option<String> {
    for (i, &n) in numbers.iter().enumerate() {
        match expected.next() {
            Some(e) if e == n => {}
            Some(e) => return Some(format!("at row {i}: {n} where {e} belongs")),
            None => return Some(format!("at row {i}: {n} is one too many")),
        }
    }
    expected
        .next()
        .map(|e| format!("{e} and after are missing"))
}

/// Asserts that `table` holds the numbers 0..count once each, all inserts.
pub(crate) fn assert_sequence(client: &mut Client, table: &str, count: u64) {
    let rows = client
        .query(&format!("SELECT n, kind FROM {table} ORDER BY n"), &[])
        .unwrap();
    let numbers: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    if let Some(diff) = first_difference(&numbers, 0..count as i64) {
        panic!(
            "{table} does not hold 0..{count} once each ({} rows): {diff}",
            numbers.len()
        );
    }
    assert!(rows.iter().all(|r| r.get::<_, String>(1) == "+I"));
}

#[test]
fn append_mode_commits_every_row_exactly_once_across_sigkills() {
    let mut db = client();
    let table = table(&mut db, "append", "k text, n bigint, kind text");
    let ws = Workspace::new();
    let spec = sequence_job(&ws, "append", &table, 900_000, 100_000, "", "");
    // After each kill, what is committed of each source subtask's numbers must be a prefix of
    // them (no gaps) that ends before the newest completed checkpoint's barrier: nothing after
    // it is visible. (A kill between a checkpoint's completion and its commit leaves less.)
    let mut check = |run: usize| {
        let id = *completed(&ws).last().expect("a completed checkpoint");
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(ws.path(&format!("chk/crashy/chk-{id}/_metadata"))).unwrap(),
        )
        .unwrap();
        let seq = meta["vertices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "seq")
            .unwrap();
        let committed: Vec<i64> = db
            .query(&format!("SELECT n FROM {table} ORDER BY n"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for (s, subtask) in seq["subtasks"].as_array().unwrap().iter().enumerate() {
            let next = subtask["position"]["next"].as_i64().unwrap();
            let mine: Vec<i64> = committed
                .iter()
                .copied()
                .filter(|n| n % 2 == s as i64)
                .collect();
            let prefix = (s as i64..).step_by(2).take(mine.len());
            if let Some(diff) = first_difference(&mine, prefix) {
                panic!("after kill {run}: subtask {s}'s committed rows have a gap: {diff}");
            }
            assert!(
                mine.last().is_none_or(|&last| last < next),
                "after kill {run}: subtask {s} has rows up to {:?} committed, past checkpoint \
                 {id}'s barrier at {next}",
                mine.last()
            );
        }
    };
    let logs = crash_loop_checked(&ws, &spec, 8, &mut check);
    assert!(logs.iter().any(|l| l.contains("restoring checkpoint")));
    assert_sequence(&mut db, &table, 900_000);
    crash_tally(8, 900_000);
    assert_eq!(prepared(&mut db, "append"), Vec::<String>::new());
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

/// The word count of `lines` lines into an upsert table through sink `sink` (its table plus
/// `sink_extra`), with 5 SIGKILLs: the table must equal the batch count, with no transaction
/// left prepared.
fn upsert_word_count_survives_sigkills(sink: &str, lines: usize, seed: u64, sink_extra: &str) {
    let mut db = client();
    let table = table(
        &mut db,
        sink,
        "word text PRIMARY KEY, count bigint NOT NULL",
    );
    let ws = Workspace::new();
    let input_text = text(lines, seed);
    let input = ws.write("input.txt", &input_text);
    let spec = word_count_job(
        &ws,
        &input,
        sink,
        &table,
        "100ms",
        "split_size = 65536",
        sink_extra,
    );
    let logs = crash_loop(&ws, &spec, 5);
    assert!(logs.iter().any(|l| l.contains("restoring checkpoint")));
    let expected = count_words([input_text.as_str()], false);
    assert!(wait_for_table(&mut db, &table, &expected, |_| true));
    crash_tally(5, expected.len());
    assert_eq!(prepared(&mut db, sink), Vec::<String>::new());
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn upsert_mode_holds_the_batch_query_result_across_sigkills() {
    upsert_word_count_survives_sigkills("counts", 900_000, 11, "");
}

#[test]
fn a_terminated_connection_restarts_the_job_from_its_last_checkpoint() {
    let mut db = client();
    let table = table(&mut db, "terminated", "k text, n bigint, kind text");
    let ws = Workspace::new();
    let restart = "[restart]\nstrategy = \"fixed_delay\"\nattempts = 10\ndelay = \"100ms\"\n";
    let spec = sequence_job(&ws, "terminated", &table, 600_000, 100_000, restart, "");
    let child = command(&ws, &spec)
        .env("WEIR_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weir");
    // Once rows are committed, cut the sink's connections from the server side, twice.
    let deadline = Instant::now() + Duration::from_secs(60);
    for _ in 0..2 {
        let before: i64 = db
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get(0);
        loop {
            let now: i64 = db
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .unwrap()
                .get(0);
            if now > before {
                break;
            }
            assert!(Instant::now() < deadline, "no rows were committed");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The sink's connections are named weir/<job>/<sink>/<subtask>; after a cut they are
        // back once the job has restarted.
        loop {
            let cut: i64 = db
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE application_name LIKE 'weir/crashy/terminated/%'",
                    &[],
                )
                .unwrap()
                .get(0);
            if cut > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sink has no connections to cut"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let out = child.wait_with_output().expect("weir exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("restarting in") && stderr.contains("restoring checkpoint"),
        "the job restarted from a checkpoint: {stderr}"
    );
    assert_sequence(&mut db, &table, 600_000);
    assert_eq!(prepared(&mut db, "terminated"), Vec::<String>::new());
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

/// A TCP proxy to the PostgreSQL server that refuses new connections while `open` is false.
struct Proxy {
    port: u16,
    open: Arc<AtomicBool>,
}

impl Proxy {
    fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let accepting = Arc::clone(&open);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                // Refused: dropped at once.
                if !accepting.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect("127.0.0.1:5432") else {
                    continue;
                };
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, open }
    }
}

#[test]
fn a_restore_whose_commit_finds_the_database_down_retries_until_it_is_back() {
    let mut db = client();
    let table = table(&mut db, "outage", "k text, n bigint, kind text");
    let ws = Workspace::new();
    let proxy = Proxy::start();
    let restart = "[restart]\nstrategy = \"fixed_delay\"\nattempts = 1000\ndelay = \"100ms\"\n";
    let spec = sequence_job(&ws, "outage", &table, 300_000, 100_000, restart, "");
    let proxied = format!("{CONNECTION} port={}", proxy.port);
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, text.replace(CONNECTION, &proxied)).unwrap();

    // A crash once rows are committed.
    let mut child = command(&ws, &spec).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows: i64 = db
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .unwrap()
            .get(0);
        if rows > 0 && !completed(&ws).is_empty() {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "ended before a commit");
        assert!(Instant::now() < deadline, "nothing committed within 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // The restart's first step, committing what the checkpoint recorded, finds the database
    // down for six seconds, longer than the commit's own retries (about three): the job
    // restarts under its strategy rather than fail for good.
    proxy.open.store(false, Ordering::SeqCst);
    let child = command(&ws, &spec)
        .env("WEIR_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(6));
    proxy.open.store(true, Ordering::SeqCst);
    let out = child.wait_with_output().expect("weir exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("restarting in"), "{stderr}");
    assert_sequence(&mut db, &table, 300_000);
    assert_eq!(prepared(&mut db, "outage"), Vec::<String>::new());
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn a_missing_table_fails_the_job_naming_it() {
    let ws = Workspace::new();
    let spec = sequence_job(
        &ws,
        "missing",
        "weir_e2e_missing_table",
        10,
        1000,
        "[restart]\nstrategy = \"none\"\n",
        "",
    );
    let out = command(&ws, &spec)
        .env("WEIR_LOG", "warn")
        .stderr(Stdio::piped())
        .output()
        .expect("weir runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("sink \"missing\"")
            && stderr.contains("weir_e2e_missing_table")
            && stderr.contains("does not exist"),
        "{stderr}"
    );
}

#[test]
fn an_upsert_into_a_table_without_a_unique_key_is_refused_by_validate_naming_the_fix() {
    let ws = Workspace::new();
    let mut client = client();
    let table = table(&mut client, "no_key", "word text, count text");
    let input = ws.write("input.txt", "a b a\n");
    let spec = word_count_job(&ws, &input, "keyless", &table, "1s", "", "");
    let run = crate::support::weir(&["validate"], &spec);
    assert!(!run.success(), "{}", run.stdout());
    let err = run.stderr();
    assert!(
        err.contains(&table) && err.contains("unique index on exactly the `key` columns"),
        "{err}"
    );
    client
        .batch_execute(&format!("DROP TABLE {table}"))
        .unwrap();
}

/// Polls until `table`'s rows equal `expected`; false if `give_up`, shown each read, says so
/// first.
fn wait_for_table(
    db: &mut Client,
    table: &str,
    expected: &HashMap<String, u64>,
    mut give_up: impl FnMut(&HashMap<String, u64>) -> bool,
) -> bool {
    loop {
        let got: HashMap<String, u64> = db
            .query(&format!("SELECT word, count FROM {table}"), &[])
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
            .collect();
        if &got == expected {
            return true;
        }
        if give_up(&got) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn the_changelog_example_keeps_its_table_equal_to_the_batch_count() {
    let mut db = client();
    let example = crate::support::repo().join("examples/changelog");
    db.batch_execute(
        "DROP TABLE IF EXISTS word_counts; \
         CREATE TABLE word_counts (word text PRIMARY KEY, count bigint NOT NULL)",
    )
    .unwrap();
    let ws = Workspace::new();
    let out = command(&ws, &example.join("job.toml"))
        .arg("--fresh")
        .stderr(Stdio::piped())
        .output()
        .expect("weir runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let input = std::fs::read_to_string(example.join("../wordcount/input.txt")).unwrap();
    let expected = count_words([input.as_str()], true);
    assert!(wait_for_table(&mut db, "word_counts", &expected, |_| true));
}

#[test]
fn after_every_completed_checkpoint_the_upsert_table_equals_the_batch_count_of_the_input_read() {
    let mut db = client();
    let table = table(
        &mut db,
        "changelog",
        "word text PRIMARY KEY, count bigint NOT NULL",
    );
    let ws = Workspace::new();
    let input_text = text(600_000, 5);
    let input = ws.write("input.txt", &input_text);
    let spec = word_count_job(
        &ws,
        &input,
        "changelog",
        &table,
        "50ms",
        "parallelism = 1",
        "",
    );
    let mut child = command(&ws, &spec).spawn().expect("start weir");
    // For each checkpoint as it completes: the input it covers is the file up to the source's
    // offset, and the table must come to equal the count of exactly that input (the commit
    // follows the checkpoint), unless the next checkpoint completes first.
    let offset_of = |id: u64| -> Option<usize> {
        let meta = std::fs::read(ws.path(&format!("chk/crashy/chk-{id}/_metadata"))).ok()?;
        let meta: serde_json::Value = serde_json::from_slice(&meta).ok()?;
        let lines = meta["vertices"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == "lines")?;
        lines["subtasks"][0]["position"]["offset"]
            .as_u64()
            .map(|o| o as usize)
    };
    // Words in the input up to the end of each line, to tell what a checkpoint covers.
    let mut line_ends = vec![(0usize, 0u64)];
    for line in input_text.split_inclusive('\n') {
        let &(at, words) = line_ends.last().unwrap();
        line_ends.push((
            at + line.len(),
            words + line.split_ascii_whitespace().count() as u64,
        ));
    }
    let covered = |offset: Option<usize>| match offset {
        Some(o) => line_ends[line_ends.partition_point(|&(at, _)| at < o)].1,
        None => line_ends.last().unwrap().1, // the source had finished
    };
    let (mut matched, mut seen, mut last) = (0, 0, 0);
    while child.try_wait().expect("poll weir").is_none() {
        let Some(&id) = completed(&ws).last() else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        if id == last {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        last = id;
        let Some(offset) = offset_of(id) else {
            continue;
        };
        seen += 1;
        let expected = count_words([&input_text[..offset]], false);
        let reached = wait_for_table(&mut db, &table, &expected, |got| {
            // Never more than the newest completed checkpoint covers (read after the table:
            // a checkpoint completes before its commit).
            let newest = *completed(&ws).last().unwrap();
            let visible: u64 = got.values().sum();
            assert!(
                visible <= covered(offset_of(newest)),
                "the table counts {visible} words, more than checkpoint {newest} covers"
            );
            newest != id
        });
        matched += usize::from(reached);
    }
    eprintln!("the table matched the batch count at {matched} of {seen} checkpoints");
    assert!(child.wait().expect("weir exits").success());
    assert!(
        matched >= 3 && matched + 1 >= seen,
        "the table matched the batch count at only {matched} of {seen} checkpoints"
    );
    let total = count_words([input_text.as_str()], false);
    assert!(wait_for_table(&mut db, &table, &total, |_| true));
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn at_least_once_delivery_loses_no_row_across_sigkills() {
    let mut db = client();
    let table = table(&mut db, "at_least_once", "k text, n bigint, kind text");
    let ws = Workspace::new();
    let spec = sequence_job(
        &ws,
        "at_least_once",
        &table,
        600_000,
        100_000,
        "",
        "delivery = \"at_least_once\"",
    );
    crash_loop(&ws, &spec, 5);
    let missing: i64 = db
        .query_one(
            &format!(
                "SELECT count(*) FROM generate_series(0, 599999) AS s(n) \
                 WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.n = s.n)"
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(missing, 0, "rows lost");
    assert_eq!(
        prepared(&mut db, "at_least_once"),
        Vec::<String>::new(),
        "no transactions"
    );
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn upsert_mode_applies_every_changelog_kind() {
    let mut db = client();
    let table = table(
        &mut db,
        "kinds",
        "word text PRIMARY KEY, count bigint NOT NULL",
    );
    let ws = Workspace::new();
    // Keyed lines `KEY kind K V` become records with key KEY, kind K and value V.
    let input = ws.write(
        "input.txt",
        "a kind +I 1\nb kind +I 2\na kind -U 1\na kind +U 3\nb kind -D 2\nc kind +I 4\n\
         d kind +I 5\nd kind -D 5\nd kind +I 6\n",
    );
    let spec = ws.write(
        "job.toml",
        format!(
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
name = "changes"
uid = "changes"
{hostile}
input = "keys"
edge = "key_by"

[[sink]]
name = "kinds"
type = "postgres"
input = "changes"
connection = {connection}
table = "{table}"
mode = "upsert"
key = ["word"]
format = "key_value"
columns = ["word", "count"]
"#,
            input = toml_path(&input),
            keyer = wasm("weir_test_keyer"),
            hostile = wasm("weir_test_hostile"),
            connection = toml_str(CONNECTION),
        ),
    );
    let out = command(&ws, &spec)
        .stderr(Stdio::piped())
        .output()
        .expect("weir runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(String, i64)> = db
        .query(
            &format!("SELECT word, count FROM {table} ORDER BY word"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    // a: updated to 3 (the update-before is skipped); b: deleted; c: inserted; d: deleted and
    // inserted again within one batch, the last change wins.
    let want = [("a", 3), ("c", 4), ("d", 6)].map(|(w, n)| (w.to_owned(), n));
    assert_eq!(rows, want);
    db.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

#[test]
fn write_ahead_delivery_holds_the_batch_query_result_across_sigkills() {
    // Write-ahead writes little while it runs: a larger input keeps each run busy to its kill.
    upsert_word_count_survives_sigkills("ahead", 2_400_000, 13, "delivery = \"write_ahead\"");
}

#[test]
fn a_cancel_ends_a_job_whose_upsert_waits_on_the_row_its_checkpoint_in_flight_holds() {
    // The sink upserts one key over and over. A guest asleep in another branch holds the
    // first checkpoint in flight, whose prepared transaction holds that row: the sink's next
    // write waits for a commit that, once the job is cancelled, nothing makes.
    let mut client = client();
    let table = table(&mut client, "waits", "k TEXT PRIMARY KEY, v TEXT");
    let ws = Workspace::new();
    let sleepy = ws.write("sleepy.txt", "a\nsleep 3600000\nb\n");
    let spec = checkpointed_job(
        &ws,
        "crashy",
        "100ms",
        &format!(
            r#"
[[source]]
name = "hot"
type = "generator"
mode = "keyed_words"
vocabulary = 1
count = 10_000_000
rate = 2_000
parallelism = 1

[[sink]]
name = "waiting"
type = "postgres"
input = "hot"
parallelism = 1
connection = {connection}
table = "{table}"
mode = "upsert"
key = ["k"]
format = "key_value"
columns = ["k", "v"]

[[source]]
name = "lines"
type = "file"
path = {sleepy}
parallelism = 1

[[operator]]
name = "sleeper"
uid = "sleeper"
{hostile}
input = "lines"
parallelism = 1
limits = {{ call_deadline = "1h" }}

[[sink]]
name = "out"
type = "discard"
input = "sleeper"
parallelism = 1
"#,
            connection = toml_str(CONNECTION),
            sleepy = toml_path(&sleepy),
            hostile = wasm("weir_test_hostile"),
        ),
    );
    let child = command(&ws, &spec).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while prepared(&mut client, "waiting").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the sink prepared no transaction"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its next batch, a moment later, waits on the row.
    std::thread::sleep(Duration::from_millis(500));
    crate::lifecycle::signal(&child, "INT");
    std::thread::sleep(Duration::from_millis(200));
    crate::lifecycle::signal(&child, "INT");
    let out = crate::lifecycle::finish(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    // What the checkpoint that never completed prepared is rolled back, not left holding the
    // row until a next run of the job (a service never runs a cancelled job again).
    let left = prepared(&mut client, "waiting");
    for gid in &left {
        client
            .batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
            .unwrap();
    }
    assert_eq!(left, Vec::<String>::new());
}
