//! `cargo xtask bench-operators`: operators as users write them, not only the word count.
//!
//! - **Account scorer** (`bench/operators/scorer-*`): `account,merchant,amount,timestamp`
//!   lines, parsed (malformed ones to a side output), then keyed by account a map state of
//!   merchants, a list of the last five amounts, three value states (one with a processing-time
//!   TTL) and an event-time timer per record (the previous one deleted); alerts and, when the
//!   timers fire, a summary per account.
//! - **Top-N** (`bench/operators/topn`): the three largest amounts per account in a list state.
//!
//! Each at parallelism 2 on memory and RocksDB state, without checkpoints and with one every
//! second, aligned and unaligned (the jobs run under full backpressure: the keyed operator is
//! the bottleneck, so the checkpoints' durations show what the queued records cost them), in
//! weir and in Flink 2.3 (the same logic in `bench/flink`, on a local MiniCluster,
//! unless `--no-flink` or there is no `java`): records/s (median of `--runs`; Flink's from its
//! job's net runtime, without the MiniCluster's start), CPU seconds and peak RSS (GNU time, of
//! the whole process), and the checkpoints' median and longest duration (weir's from the
//! job's checkpoint history, Flink's from its checkpoint coordinator's log). The input is
//! generated here, one file per source subtask with the accounts split between them (so each
//! account's records keep their order), one account holding 27% of the records; the expected
//! output is computed here from the generated transactions, by a plain implementation of the
//! same logic, and every run's committed output is compared with it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench::{number, prepare, run_job_by, toml_str};
use crate::{callgrind, exec, guests};

/// Accounts besides the hot one.
const ACCOUNTS: u64 = 20_000;
/// Merchants.
const MERCHANTS: u64 = 300;
/// The share of records of account 0, in percent.
const HOT_PERCENT: u64 = 27;
/// Event time of the first record, Unix ms.
const START_MS: i64 = 1_700_000_000_000;

pub fn run(args: &[String]) -> Result<()> {
    let mut records = 3_000_000;
    let mut runs = 3;
    let mut flink = true;
    let mut profile = false;
    let mut functions = None;
    let (mut jobs, mut backends) = (vec!["scorer", "topn"], vec!["memory", "rocksdb"]);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--records" => records = number(&mut args, "--records")?,
            "--runs" => runs = number(&mut args, "--runs")?,
            "--no-flink" => flink = false,
            "--callgrind" => profile = true,
            "--functions" => {
                profile = true;
                functions = Some(number(&mut args, "--functions")? as usize);
            }
            "--job" => jobs = vec![one_of(args.next(), "--job", &["scorer", "topn"])?],
            "--state" => backends = vec![one_of(args.next(), "--state", &["memory", "rocksdb"])?],
            other => bail!(
                "unknown option `{other}`; use --records N, --runs R, --job scorer|topn, \
                 --state memory|rocksdb, --no-flink, --callgrind, --functions N"
            ),
        }
    }
    if profile {
        let (weir, dir) = prepare("bench-operators")?;
        let input = dir.join(format!("transactions-{records}"));
        let expected = generate(&input, records)?;
        return callgrind_split(&weir, &dir, &input, records, &expected, functions);
    }
    ensure_gnu_time()?;
    let (weir, dir) = prepare("bench-operators")?;
    let flink = flink_if(flink, &dir)?;
    let input = dir.join(format!("transactions-{records}"));
    let expected = generate(&input, records)?;

    let operators = guests::operators_dir();
    let mut systems = vec!["weir"];
    systems.extend(flink.as_ref().map(|_| "flink"));
    let mut rows = Vec::new();
    for (job, expected) in [("scorer", &expected.scorer), ("topn", &expected.topn)] {
        if !jobs.contains(&job) {
            continue;
        }
        for &backend in &backends {
            for checkpoints in [
                Checkpoints::Off,
                Checkpoints::Aligned,
                Checkpoints::Unaligned,
            ] {
                for &system in &systems {
                    let mut measured = Vec::new();
                    for run in 1..=runs {
                        let out = dir.join("out");
                        for d in [&out, &dir.join("state"), &dir.join("checkpoints")] {
                            let _ = std::fs::remove_dir_all(d);
                        }
                        let m = match (system, &flink) {
                            ("flink", Some(classpath)) => {
                                let run = FlinkRun {
                                    job,
                                    backend,
                                    checkpoints,
                                };
                                measure_flink(classpath, &run, &input, &dir)?
                            }
                            _ => {
                                let spec = dir.join(format!("{job}.toml"));
                                std::fs::write(
                                    &spec,
                                    job_spec(&operators, job, &input, &dir, backend, checkpoints),
                                )?;
                                measure(&weir, &spec, &dir)?
                            }
                        };
                        let lines = committed(&out)?;
                        check(&lines, expected, &format!("{system} {job} on {backend}"))?;
                        println!(
                            "run {run}/{runs}: {system:<5} {job:<6} {backend:<7} checkpoints {:<9} \
                         {:.2} s, {:.0} k records/s, output checked ({} lines), checkpoints {}",
                            checkpoints.label(),
                            m.seconds,
                            records as f64 / m.seconds / 1e3,
                            lines.len(),
                            durations(&m)
                        );
                        measured.push(m);
                    }
                    measured.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
                    rows.push((
                        system,
                        job,
                        backend,
                        checkpoints,
                        measured.swap_remove(measured.len() / 2),
                    ));
                }
            }
        }
    }

    println!();
    println!(
        "{records} records, parallelism 2, median of {runs} runs (malformed lines: {})",
        expected.malformed
    );
    println!(
        "  {:<6} {:<7} {:<8} {:<12} {:>12} {:>8} {:>9}   checkpoint duration",
        "system", "job", "state", "checkpoints", "records/s", "CPU s", "peak RSS"
    );
    for (system, job, backend, checkpoints, m) in rows {
        println!(
            "  {system:<6} {job:<7} {backend:<8} {:<12} {:>10.0} k {:>8.1} {:>6.0} MB   {}",
            checkpoints.label(),
            records as f64 / m.seconds / 1e3,
            m.cpu_seconds,
            m.peak_rss_kb as f64 / 1024.0,
            durations(&m)
        );
    }
    Ok(())
}

/// The value of `option`, one of `allowed`.
pub(crate) fn one_of(
    value: Option<&String>,
    option: &str,
    allowed: &[&'static str],
) -> Result<&'static str> {
    value
        .and_then(|v| allowed.iter().find(|a| **a == v.as_str()).copied())
        .with_context(|| format!("{option} takes one of {}", allowed.join(", ")))
}

/// Fails unless a run's committed output `lines` is the `expected` one.
fn check(lines: &[String], expected: &[String], run: &str) -> Result<()> {
    if lines == expected {
        return Ok(());
    }
    let first = lines
        .iter()
        .zip(expected.iter())
        .find(|(a, b)| a != b)
        .map(|(a, b)| format!("first difference: {a:?} against {b:?}"))
        .unwrap_or_default();
    bail!(
        "{run}: {} output lines, {} expected; {first}",
        lines.len(),
        expected.len()
    )
}

/// `--callgrind`: each job once, on memory state without checkpoints, under callgrind; its
/// instructions per record, split by where they go (see `callgrind`), and with `--functions N`
/// the N functions that run the most of them.
fn callgrind_split(
    weir: &Path,
    dir: &Path,
    input: &Path,
    records: u64,
    expected: &Expected,
    functions: Option<usize>,
) -> Result<()> {
    callgrind::ensure_valgrind()?;
    let (weir, operators) = match functions {
        Some(_) => {
            callgrind::with_symbols(&["bench-scorer-parse", "bench-scorer-score", "bench-topn"])?
        }
        None => (weir.to_path_buf(), guests::operators_dir()),
    };
    let mut rows = Vec::new();
    for (job, expected) in [("scorer", &expected.scorer), ("topn", &expected.topn)] {
        let out = dir.join("out");
        for d in [&out, &dir.join("state")] {
            let _ = std::fs::remove_dir_all(d);
        }
        let spec = dir.join(format!("{job}.toml"));
        // Under callgrind a batch runs some fifty times longer than a call's deadline allows.
        let limits = "\n[limits]\ncall_deadline = \"1h\"\n";
        let text = job_spec(&operators, job, input, dir, "memory", Checkpoints::Off) + limits;
        std::fs::write(&spec, text)?;
        let file = dir.join(format!("callgrind.{job}.out"));
        println!("{job}: {records} records under callgrind (slow)");
        let summary = dir.join("summary.json");
        callgrind::run(
            &weir,
            &spec,
            &summary,
            &file,
            Some(&out),
            functions.is_some(),
        )?;
        check(
            &committed(&out)?,
            expected,
            &format!("{job} under callgrind"),
        )?;
        let listed = match functions {
            Some(_) => callgrind::functions(&file, &std::env::temp_dir())?,
            None => Vec::new(),
        };
        rows.push((job, callgrind::split(&file)?, listed));
    }
    println!();
    println!(
        "instructions per record, {records} records, parallelism 2, memory state, no checkpoints"
    );
    for (job, split, listed) in rows {
        let startup = match split.startup {
            0 => "not counted".to_string(),
            n => format!("{:.2} G more", n as f64 / 1e9),
        };
        println!(
            "  {job}: {} in all ({:.2} G; loading the components {startup})",
            split.total / records,
            split.total as f64 / 1e9,
        );
        for (part, n) in &split.parts {
            println!(
                "    {part:<24} {:>7} {:>5.1} %",
                n / records,
                *n as f64 * 100.0 / split.total as f64
            );
        }
        if let Some(n) = functions {
            callgrind::print_functions(&listed, n, records, split.total);
        }
    }
    Ok(())
}

/// Checkpointing of a run: every second, aligned or unaligned, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checkpoints {
    Off,
    Aligned,
    Unaligned,
}

impl Checkpoints {
    fn label(self) -> &'static str {
        match self {
            Checkpoints::Off => "none",
            Checkpoints::Aligned => "1 s aligned",
            Checkpoints::Unaligned => "1 s unalgn.",
        }
    }
}

/// `median / longest ms (count)` of checkpoint durations, with the longest synchronous part
/// where known, or `-`.
fn durations(m: &Measured) -> String {
    let mut sorted = m.checkpoint_ms.clone();
    sorted.sort_unstable();
    let sync = m
        .sync_ms
        .map(|s| format!(", sync <= {s} ms"))
        .unwrap_or_default();
    match (sorted.get(sorted.len() / 2), sorted.last()) {
        (Some(median), Some(max)) => format!("{median} / {max} ms ({}){sync}", sorted.len()),
        _ => "-".into(),
    }
}

/// GNU time measures CPU and peak RSS; installed with apt where it is missing.
pub(crate) fn ensure_gnu_time() -> Result<()> {
    if Path::new("/usr/bin/time").is_file() {
        return Ok(());
    }
    println!("installing GNU time");
    exec(Command::new("apt-get").args(["install", "-y", "time"]))
        .context("cannot install GNU time (package `time`); install it yourself")
}

#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_kb: u64,
    /// The durations of the completed checkpoints.
    pub checkpoint_ms: Vec<u64>,
    /// The longest synchronous part of any of them (weir's history has it).
    pub sync_ms: Option<u64>,
}

/// Runs `spec` under GNU time: the job's duration, the process's CPU time and peak RSS.
pub(crate) fn measure(weir: &Path, spec: &Path, dir: &Path) -> Result<Measured> {
    let times = dir.join("time.txt");
    let mut command = Command::new("/usr/bin/time");
    command.args(["-f", "%U %S %M", "-o"]).arg(&times).arg(weir);
    let seconds = run_job_by(command, spec, &dir.join("summary.json"), &[])?;
    let (cpu_seconds, peak_rss_kb) = gnu_time(&times)?;
    let (checkpoint_ms, sync_ms) = checkpoint_history(&dir.join("checkpoints"))?;
    Ok(Measured {
        seconds,
        cpu_seconds,
        peak_rss_kb,
        checkpoint_ms,
        sync_ms,
    })
}

/// The durations of the completed checkpoints in the history of the one job under `dir`
/// (none without checkpoints), and their longest synchronous part.
fn checkpoint_history(dir: &Path) -> Result<(Vec<u64>, Option<u64>)> {
    let Ok(jobs) = std::fs::read_dir(dir) else {
        return Ok((Vec::new(), None));
    };
    let (mut ms, mut sync) = (Vec::new(), None);
    for job in jobs {
        let path = job?.path().join("history.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let history: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        for e in history["checkpoints"].as_array().into_iter().flatten() {
            if e["status"] != "completed" {
                continue;
            }
            ms.extend(e["duration_ms"].as_u64());
            for op in e["operators"].as_array().into_iter().flatten() {
                sync = sync.max(op["sync_ms"].as_u64());
            }
        }
    }
    Ok((ms, sync))
}

/// Builds the Flink jobs of `bench/flink` (fetching Flink's jars into `work` once); their
/// classpath.
fn flink_classpath(work: &Path) -> Result<String> {
    let out = Command::new(crate::repo().join("bench").join("flink").join("build.sh"))
        .arg(work)
        .output()
        .context("cannot run bench/flink/build.sh")?;
    if !out.status.success() {
        bail!(
            "bench/flink/build.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// The classpath of the Flink jobs (built into `dir/flink`) when `wanted` and Java is
/// installed; `None` (with a word why) otherwise.
pub(crate) fn flink_if(wanted: bool, dir: &Path) -> Result<Option<String>> {
    match wanted {
        true if Command::new("java").arg("-version").output().is_ok() => {
            flink_classpath(&dir.join("flink")).map(Some)
        }
        true => {
            println!("no `java`: Flink is left out (install Java 17 to compare)");
            Ok(None)
        }
        false => Ok(None),
    }
}

/// One run of a Flink job.
struct FlinkRun<'a> {
    job: &'a str,
    backend: &'a str,
    checkpoints: Checkpoints,
}

/// Runs a Flink job under GNU time, its output into `dir/out`: its net runtime, the JVM's CPU
/// time and peak RSS.
fn measure_flink(
    classpath: &str,
    run: &FlinkRun<'_>,
    input: &Path,
    dir: &Path,
) -> Result<Measured> {
    let state = dir.join("flink-state");
    let _ = std::fs::remove_dir_all(&state);
    let class = if run.job == "scorer" {
        "ScorerJob"
    } else {
        "TopNJob"
    };
    let mut args: Vec<std::ffi::OsString> = vec!["--input".into(), input.into()];
    args.extend(["--output".into(), dir.join("out").into()]);
    args.extend(["--parallelism", "2", "--backend"].map(Into::into));
    args.push(
        if run.backend == "memory" {
            "heap"
        } else {
            "rocksdb"
        }
        .into(),
    );
    args.extend(["--state-dir".into(), state.into()]);
    if run.checkpoints != Checkpoints::Off {
        args.extend(["--checkpoint-ms", "1000"].map(Into::into));
    }
    if run.checkpoints == Checkpoints::Unaligned {
        args.extend(["--unaligned", "true"].map(Into::into));
    }
    Ok(run_flink(classpath, ("-Xmx2g", class), &args, dir)?.0)
}

/// Runs Flink job `class` of `bench/flink` with `args` in a JVM of `heap` (`-Xmx..`) under
/// GNU time: its net runtime, the JVM's CPU time and peak RSS, the checkpoints it completed;
/// and what it printed.
pub(crate) fn run_flink(
    classpath: &str,
    (heap, class): (&str, &str),
    args: &[std::ffi::OsString],
    dir: &Path,
) -> Result<(Measured, String)> {
    let times = dir.join("time.txt");
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%U %S %M", "-o"])
        .arg(&times)
        .args(["java", heap, "-cp", classpath, class])
        .args(args)
        .output()
        .context("cannot start java")?;
    if !out.status.success() {
        bail!(
            "Flink {class} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seconds = stdout
        .lines()
        .find_map(|l| l.strip_prefix("net_runtime_seconds="))
        .and_then(|s| s.trim().parse().ok())
        .context("Flink's job printed no net_runtime_seconds")?;
    let (cpu_seconds, peak_rss_kb) = gnu_time(&times)?;
    // "Completed checkpoint 3 for job … (… bytes, checkpointDuration=45 ms, …)."
    let checkpoint_ms = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("Completed checkpoint"))
        .filter_map(|l| {
            let (_, rest) = l.split_once("checkpointDuration=")?;
            rest.split(' ').next()?.parse().ok()
        })
        .collect();
    let measured = Measured {
        seconds,
        cpu_seconds,
        peak_rss_kb,
        checkpoint_ms,
        sync_ms: None,
    };
    Ok((measured, stdout.into_owned()))
}

/// The CPU seconds and peak RSS (KB) GNU time wrote to `path`.
pub(crate) fn gnu_time(path: &Path) -> Result<(f64, u64)> {
    let text = std::fs::read_to_string(path)?;
    let fields: Vec<&str> = text
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let [user, sys, rss] = fields[..] else {
        bail!("GNU time wrote {text:?}");
    };
    Ok((user.parse::<f64>()? + sys.parse::<f64>()?, rss.parse()?))
}

/// The committed lines of the file sink in `dir`, sorted.
pub(crate) fn committed(dir: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("no output in {}", dir.display()))?
    {
        let path = entry?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if path.is_file() && !hidden {
            lines.extend(std::fs::read_to_string(&path)?.lines().map(String::from));
        }
    }
    lines.sort_unstable();
    Ok(lines)
}

fn job_spec(
    operators: &Path,
    job: &str,
    input: &Path,
    dir: &Path,
    backend: &str,
    checkpoints: Checkpoints,
) -> String {
    let wasm = |name: &str| toml_str(&operators.join(format!("{name}.wasm")));
    let keyed = match job {
        "scorer" => wasm("bench_scorer_score"),
        _ => wasm("bench_topn"),
    };
    let mut tables = format!(
        "[state]\nbackend = \"{backend}\"\ndir = {}\n",
        toml_str(&dir.join("state"))
    );
    if checkpoints != Checkpoints::Off {
        let _ = write!(
            tables,
            "\n[checkpoint]\ninterval = \"1s\"\ndir = {}\nunaligned = {}\n",
            toml_str(&dir.join("checkpoints")),
            checkpoints == Checkpoints::Unaligned
        );
    }
    format!(
        r#"[job]
name = "bench-{job}"
parallelism = 2

{tables}
[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "parse"
uid = "parse"
wasm = {parse}
input = "lines"

[[operator]]
name = "{job}"
uid = "{job}"
wasm = {keyed}
input = "parse"
edge = "key_by"

[[sink]]
name = "out"
type = "file"
input = "{job}"
path = {out}

[[sink]]
name = "malformed"
type = "discard"
input = "parse.malformed"
"#,
        input = toml_str(input),
        parse = wasm("bench_scorer_parse"),
        out = toml_str(&dir.join("out")),
    )
}

/// What the jobs must output, sorted, and how many lines were malformed.
struct Expected {
    scorer: Vec<String>,
    topn: Vec<String>,
    malformed: u64,
}

/// splitmix64: a small, good, deterministic generator.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The scorer's state of one account.
#[derive(Default)]
struct Account {
    merchants: HashMap<u64, u64>,
    recent: Vec<u64>,
    count: u64,
    total: u64,
}

/// Writes `records` transactions into `dir/part-0.txt` and `part-1.txt` (unless there
/// already) and computes what the jobs must output for them.
fn generate(dir: &Path, records: u64) -> Result<Expected> {
    let cached = dir.join("part-1.txt").exists();
    if !cached {
        println!("generating {records} transactions into {}", dir.display());
        std::fs::create_dir_all(dir)?;
    }
    let mut files = Vec::new();
    let partial = |i: usize| dir.join(format!(".part-{i}.txt.partial"));
    if !cached {
        for i in 0..2 {
            files.push(std::io::BufWriter::new(std::fs::File::create(partial(i))?));
        }
    }
    let mut rng = Rng(7);
    let (mut accounts, mut top): (HashMap<u64, Account>, HashMap<u64, Vec<u64>>) =
        Default::default();
    let (mut scorer, mut topn, mut malformed) = (Vec::new(), Vec::new(), 0);
    let mut line = String::new();
    for i in 0..records {
        line.clear();
        let ts = START_MS + i as i64 * 7;
        if rng.below(1000) == 0 {
            malformed += 1;
            line.push_str(if i % 2 == 0 {
                "oops"
            } else {
                "acct1,m1,12.5,x"
            });
            if !cached {
                writeln!(files[(i % 2) as usize], "{line}")?;
            }
            continue;
        }
        let account = if rng.below(100) < HOT_PERCENT {
            0
        } else {
            1 + rng.below(ACCOUNTS)
        };
        let merchant = if account == 0 || rng.below(50) == 0 {
            rng.below(MERCHANTS)
        } else {
            (account * 7 + rng.below(8)) % MERCHANTS
        };
        let base = 1000 + (account * 7919) % 19_000;
        let mut cents = base / 5 + rng.below(base * 8 / 5);
        if rng.below(200) == 0 {
            cents *= 10;
        }
        if !cached {
            writeln!(
                files[(account % 2) as usize],
                "acct{account},m{merchant},{}.{:02},{ts}",
                cents / 100,
                cents % 100
            )?;
        }
        score(&mut accounts, &mut scorer, account, merchant, cents);
        top_n(&mut top, &mut topn, account, cents);
    }
    if !cached {
        for (i, f) in files.into_iter().enumerate() {
            f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            std::fs::rename(partial(i), dir.join(format!("part-{i}.txt")))?;
        }
    }
    for (account, a) in &accounts {
        scorer.push(format!(
            "SUMMARY acct{account} count={} total={} merchants={}",
            a.count,
            a.total,
            a.merchants.len()
        ));
    }
    scorer.sort_unstable();
    topn.sort_unstable();
    Ok(Expected {
        scorer,
        topn,
        malformed,
    })
}

/// The account scorer's logic for one transaction, plainly (see `bench/operators/scorer-score`).
fn score(
    accounts: &mut HashMap<u64, Account>,
    out: &mut Vec<String>,
    account: u64,
    merchant: u64,
    cents: u64,
) {
    let a = accounts.entry(account).or_default();
    if a.recent.len() >= 3 {
        let mean = a.recent.iter().sum::<u64>() / a.recent.len() as u64;
        if cents > 3 * mean {
            out.push(format!("ALERT high acct{account} {cents} mean={mean}"));
        }
    }
    let seen = a.merchants.contains_key(&merchant);
    if !seen && !a.merchants.is_empty() && cents >= 50_000 {
        out.push(format!(
            "ALERT new-merchant acct{account} m{merchant} {cents}"
        ));
    }
    *a.merchants.entry(merchant).or_default() += 1;
    a.recent.push(cents);
    if a.recent.len() > 5 {
        a.recent.remove(0);
    }
    a.count += 1;
    a.total += cents;
}

/// The top-N's logic for one transaction (see `bench/operators/topn`).
fn top_n(top: &mut HashMap<u64, Vec<u64>>, out: &mut Vec<String>, account: u64, cents: u64) {
    let amounts = top.entry(account).or_default();
    if amounts.len() == 3 && amounts[2] >= cents {
        return;
    }
    amounts.push(cents);
    amounts.sort_unstable_by(|a, b| b.cmp(a));
    amounts.truncate(3);
    let list: Vec<String> = amounts.iter().map(u64::to_string).collect();
    out.push(format!("acct{account} {}", list.join(",")));
}
