//! `cargo xtask bench-postgres [--rows N] [--runs R]`: rows per second into PostgreSQL through
//! the two-phase-commit sink in append and upsert mode (generator → sink, parallelism 2,
//! checkpoints every second), and the time from a row's write to its visibility.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use postgres::{Client, NoTls};

use crate::bench::{number, prepare, run_job, toml_str};
use crate::services;

const CONNECTION: &str = "host=127.0.0.1 user=postgres dbname=test";
const PARALLELISM: u32 = 2;
/// Distinct keys of the upsert run.
const KEYS: u64 = 100_000;
/// The rate and length of the latency run.
const LATENCY_RATE: u64 = 20_000;
const LATENCY_ROWS: u64 = 200_000;

#[derive(Debug)]
pub struct Options {
    rows: u64,
    runs: u32,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options> {
        let mut options = Options {
            rows: 2_000_000,
            runs: 3,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--rows" => options.rows = number(&mut args, "--rows")?,
                "--runs" => options.runs = u32::try_from(number(&mut args, "--runs")?)?,
                other => bail!("unknown bench-postgres option `{other}`; use --rows N, --runs R"),
            }
        }
        ensure!(
            options.rows > 0 && options.runs > 0,
            "--rows and --runs must be positive"
        );
        Ok(options)
    }
}

/// A job: a generator of `count` records (`rate` per second, or as fast as it can) into table
/// `table` in `mode`.
fn job_spec(mode: &str, table: &str, count: u64, rate: Option<u64>, chk: &Path) -> String {
    let (generator, sink) = match mode {
        "append" => (
            "mode = \"sequence\"".to_owned(),
            "mode = \"append\"\nformat = \"key_value\"\ncolumns = [\"k\", \"n\"]".to_owned(),
        ),
        _ => (
            format!("mode = \"keyed_cycle\"\nvocabulary = {KEYS}"),
            "mode = \"upsert\"\nkey = [\"word\"]\nformat = \"key_value\"\ncolumns = [\"word\", \"v\"]"
                .to_owned(),
        ),
    };
    let rate = rate.map(|r| format!("rate = {r}")).unwrap_or_default();
    format!(
        r#"[job]
name = "bench-postgres"
parallelism = {PARALLELISM}

[checkpoint]
interval = "1s"
dir = {chk}

[[source]]
name = "gen"
type = "generator"
{generator}
count = {count}
{rate}

[[sink]]
name = "{mode}"
type = "postgres"
input = "gen"
connection = "{CONNECTION}"
table = "{table}"
{sink}
"#,
        chk = toml_str(chk),
    )
}

fn create(db: &mut Client, table: &str, columns: &str) -> Result<()> {
    db.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} ({columns})"
    ))
    .with_context(|| format!("cannot create {table}"))
}

pub fn run(options: Options) -> Result<()> {
    let (weir, dir) = prepare("bench-postgres")?;
    services::run()?;
    let mut db = Client::connect(CONNECTION, NoTls).context("cannot connect to PostgreSQL")?;
    let chk = dir.join("chk");
    let spec = dir.join("job.toml");
    let summary = dir.join("summary.json");

    let mut results = Vec::new();
    for (mode, table, columns) in [
        ("append", "weir_bench_append", "k text, n bigint"),
        (
            "upsert",
            "weir_bench_upsert",
            "word text PRIMARY KEY, v text",
        ),
    ] {
        let mut best = f64::INFINITY;
        for run in 1..=options.runs {
            create(&mut db, table, columns)?;
            let _ = std::fs::remove_dir_all(&chk);
            std::fs::write(&spec, job_spec(mode, table, options.rows, None, &chk))?;
            let secs = run_job(&weir, &spec, &summary, &[])?;
            let rows: i64 = db
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])?
                .get(0);
            let want = if mode == "append" {
                options.rows
            } else {
                options.rows.min(KEYS)
            };
            ensure!(
                rows as u64 == want,
                "{table} holds {rows} rows, expected {want}"
            );
            println!("{mode}, run {run}/{}: {secs:.3} s", options.runs);
            best = best.min(secs);
        }
        db.batch_execute(&format!("DROP TABLE {table}"))?;
        results.push((mode, best));
    }

    // Latency: rows are stamped with the server's clock when written (into the open
    // transaction); a poller asks the same clock how long ago each newly visible row was written.
    let table = "weir_bench_latency";
    create(
        &mut db,
        table,
        "k text, n bigint, written timestamptz NOT NULL DEFAULT clock_timestamp()",
    )?;
    db.batch_execute(&format!("CREATE INDEX ON {table} (n)"))?;
    let _ = std::fs::remove_dir_all(&chk);
    std::fs::write(
        &spec,
        job_spec("append", table, LATENCY_ROWS, Some(LATENCY_RATE), &chk),
    )?;
    let mut child = Command::new(&weir)
        .args(["run", "--no-progress"])
        .arg(&spec)
        .stdout(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", weir.display()))?;
    // Each source subtask's numbers (one parity each) become visible in order.
    let mut latencies: Vec<f64> = Vec::new();
    let mut last = [-2i64, -1];
    let deadline = Instant::now() + Duration::from_secs(120);
    while (latencies.len() as u64) < LATENCY_ROWS && Instant::now() < deadline {
        let rows = db.query(
            &format!(
                "SELECT n, extract(epoch FROM clock_timestamp() - written)::float8 * 1000 \
                 FROM {table} WHERE (n % 2 = 0 AND n > $1) OR (n % 2 = 1 AND n > $2)"
            ),
            &[&last[0], &last[1]],
        )?;
        for row in &rows {
            let n: i64 = row.get(0);
            let slot = &mut last[(n % 2) as usize];
            *slot = (*slot).max(n);
            latencies.push(row.get(1));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait()?;
    ensure!(status.success(), "the latency job failed");
    db.batch_execute(&format!("DROP TABLE {table}"))?;
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];

    println!();
    println!(
        "PostgreSQL sink, parallelism {PARALLELISM}, checkpoints every 1 s, best of {} runs",
        options.runs
    );
    println!(
        "  {:<24} {:>10} {:>8} {:>12}",
        "mode", "rows", "best s", "rows/s"
    );
    for (mode, secs) in results {
        let label = if mode == "upsert" {
            format!("upsert ({KEYS} keys)")
        } else {
            mode.to_owned()
        };
        println!(
            "  {:<24} {:>10} {:>8.2} {:>12.0}",
            label,
            options.rows,
            secs,
            options.rows as f64 / secs
        );
    }
    println!(
        "  write to visibility at {LATENCY_RATE} rows/s ({} rows): median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    Ok(())
}
