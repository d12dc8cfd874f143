//! `cargo xtask bench-checkpoints`: what checkpointing costs. A keyed count (generator →
//! key_by → WASM count → discard, parallelism 2) over 100k and 1M keys, with checkpointing off
//! and every second; prints throughput, and the checkpoints' duration and size from the
//! job's checkpoint history.

use std::path::Path;

use anyhow::{Context, Result, bail, ensure};

use crate::bench::{number, prepare, run_job, toml_str};
use crate::guests;

const PARALLELISM: u32 = 2;
/// Keys of the state, by default.
const KEYS: [u64; 2] = [100_000, 1_000_000];

#[derive(Debug)]
pub struct Options {
    records: u64,
    runs: u32,
    keys: Vec<u64>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options> {
        let mut options = Options {
            records: 40_000_000,
            runs: 3,
            keys: KEYS.to_vec(),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| number(&mut args, name);
            match arg.as_str() {
                "--records" => options.records = value("--records")?,
                "--runs" => options.runs = u32::try_from(value("--runs")?)?,
                "--keys" => options.keys = vec![value("--keys")?],
                other => bail!("unknown option `{other}`; use --records N, --runs R, --keys K"),
            }
        }
        let most = options.keys.iter().copied().max().unwrap_or(0);
        ensure!(
            options.records >= 2 * most && most > 0,
            "--records must be at least {} so that every key is counted twice",
            2 * most
        );
        ensure!(options.runs > 0, "--runs must be at least 1");
        Ok(options)
    }
}

/// What one checkpointed run reported.
#[derive(Debug, Default)]
struct Checkpoints {
    count: usize,
    durations_ms: Vec<u64>,
    sizes: Vec<u64>,
    sync_ms: u64,
}

pub fn run(options: Options) -> Result<()> {
    let (weir, dir) = prepare("bench-checkpoints")?;
    let count = toml_str(&guests::operators_dir().join("wordcount_count.wasm"));

    let mut rows = Vec::new();
    for &keys in &options.keys {
        let mut best = [f64::INFINITY; 2];
        let mut stats = Checkpoints::default();
        for run in 1..=options.runs {
            for (i, interval) in [None, Some("1s")].into_iter().enumerate() {
                let chk = dir.join("chk");
                let _ = std::fs::remove_dir_all(&chk);
                let spec = dir.join("job.toml");
                std::fs::write(
                    &spec,
                    job_spec(keys, options.records, &count, &chk, interval),
                )
                .with_context(|| format!("cannot write {}", spec.display()))?;
                let secs = run_job(&weir, &spec, &dir.join("summary.json"), &[])?;
                let label = interval.map_or("off".to_string(), |i| format!("every {i}"));
                println!(
                    "{keys} keys, run {run}/{}: checkpoints {label:<9} {secs:.3} s",
                    options.runs
                );
                if secs < best[i] {
                    best[i] = secs;
                    if interval.is_some() {
                        stats = read_history(&chk.join("bench-checkpoints/history.json"))?;
                    }
                }
            }
        }
        rows.push((keys, best, stats));
    }

    println!();
    println!(
        "keyed count, {} records, parallelism {PARALLELISM}, best of {} runs; checkpoints every 1 s",
        options.records, options.runs
    );
    println!(
        "  {:>9} {:>11} {:>11} {:>7} {:>6} {:>13} {:>13} {:>10} {:>8}",
        "keys",
        "off M rec/s",
        "on M rec/s",
        "cost",
        "chkpts",
        "median ms",
        "max ms",
        "size MB",
        "sync ms"
    );
    for (keys, best, c) in rows {
        let rate = |secs: f64| options.records as f64 / secs / 1e6;
        let mut d = c.durations_ms.clone();
        d.sort_unstable();
        let median = d.get(d.len() / 2).copied().unwrap_or(0);
        let max = d.last().copied().unwrap_or(0);
        let size = c.sizes.iter().copied().max().unwrap_or(0) as f64 / 1e6;
        println!(
            "  {:>9} {:>11.2} {:>11.2} {:>6.1}% {:>6} {:>13} {:>13} {:>10.1} {:>8}",
            keys,
            rate(best[0]),
            rate(best[1]),
            (best[1] / best[0] - 1.0) * 100.0,
            c.count,
            median,
            max,
            size,
            c.sync_ms
        );
    }
    Ok(())
}

fn read_history(path: &Path) -> Result<Checkpoints> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)?;
    let mut c = Checkpoints::default();
    for e in json["checkpoints"].as_array().into_iter().flatten() {
        if e["status"] != "completed" {
            continue;
        }
        c.count += 1;
        c.durations_ms.push(e["duration_ms"].as_u64().unwrap_or(0));
        c.sizes.push(e["size_bytes"].as_u64().unwrap_or(0));
        for op in e["operators"].as_array().into_iter().flatten() {
            c.sync_ms = c.sync_ms.max(op["sync_ms"].as_u64().unwrap_or(0));
        }
    }
    Ok(c)
}

fn job_spec(keys: u64, records: u64, count: &str, chk: &Path, interval: Option<&str>) -> String {
    let checkpoint = match interval {
        Some(i) => format!(
            "[checkpoint]\ninterval = \"{i}\"\ndir = {}\n",
            toml_str(chk)
        ),
        None => String::new(),
    };
    format!(
        r#"[job]
name = "bench-checkpoints"
parallelism = {PARALLELISM}

{checkpoint}
[[source]]
name = "keys"
type = "generator"
mode = "keyed_cycle"
vocabulary = {keys}
count = {records}

[[operator]]
name = "count"
uid = "count"
wasm = {count}
input = "keys"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
"#
    )
}
