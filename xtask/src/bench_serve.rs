//! `cargo xtask bench-serve`: what the service costs and how fast its operations are, on a
//! real `weir serve` over HTTP:
//!
//! - submit-to-first-record: from `POST /v1/jobs` to the first record at the sink, with the
//!   components compiled and cached already (median of 5);
//! - savepoints: duration (request to completion) and size at each key count, memory and
//!   RocksDB, of a keyed count that holds that many keys;
//! - rescale downtime at the first key count: the longest pause in the sink's records from the
//!   rescale request to the job running at the new parallelism;
//! - the server's cost: a word count's time under `weir serve` against `weir run`, same spec.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::api::Served;
use crate::bench::{number, prepare, run_job, toml_str};
use crate::guests;

const TOKEN: &str = "bench-token-0123456789abcdef";
const MS: Duration = Duration::from_millis(1);

pub fn run(args: &[String]) -> Result<()> {
    let mut keys = vec![1_000_000, 10_000_000];
    let mut words = 20_000_000;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keys" => keys = vec![number(&mut args, "--keys")?],
            "--words" => words = number(&mut args, "--words")?,
            other => bail!("unknown option `{other}`; use --keys K, --words N"),
        }
    }
    let (weir, dir) = prepare("bench-serve")?;
    let _ = std::fs::remove_dir_all(dir.join("data"));
    let server = Server::start(&weir, &dir)?;
    let split = server.upload(&guests::operators_dir().join("wordcount_split.wasm"))?;
    let count = server.upload(&guests::operators_dir().join("wordcount_count.wasm"))?;

    // Submit to first record.
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let spec = words_spec("latency", 1_000_000, Some(100_000), &split, &count);
        let started = Instant::now();
        let id = server.submit(&spec)?;
        server.wait(&id, Duration::from_secs(60), MS, |job| sink_in(job) > 0)?;
        latencies.push(started.elapsed());
        server.post(&format!("/v1/jobs/{id}/cancel"), json!({}))?;
    }
    latencies.sort();

    // Savepoints of a keyed count holding `k` keys, on both backends.
    let mut savepoints = Vec::new();
    let mut rescale = None;
    for &k in &keys {
        for backend in ["memory", "rocksdb"] {
            let spec = keys_spec(k, backend, &count, "10s");
            let id = server.submit(&spec)?;
            server.wait(&id, Duration::from_secs(600), 100 * MS, |job| {
                sink_in(job) >= k
            })?;
            let op = server.post(&format!("/v1/jobs/{id}/savepoints"), json!({}))?;
            let op = server.operation(&id, &op)?;
            let size = dir_size(Path::new(op["savepoint"].as_str().unwrap_or_default()));
            let ms =
                op["ended_ms"].as_u64().unwrap_or(0) - op["requested_ms"].as_u64().unwrap_or(0);
            println!(
                "savepoint at {k} keys on {backend}: {ms} ms, {:.1} MB",
                size as f64 / 1e6
            );
            savepoints.push((k, backend, ms, size));
            if rescale.is_none() && backend == "memory" {
                rescale = Some(rescale_downtime(&server, &id)?);
            }
            server.post(&format!("/v1/jobs/{id}/cancel"), json!({}))?;
        }
    }

    // The server's cost on a running word count.
    let spec = words_spec("throughput", words, None, &split, &count);
    let started = Instant::now();
    let id = server.submit(&spec)?;
    // Polled rarely, so that the client costs the server nothing to speak of.
    server.wait(&id, Duration::from_secs(900), 100 * MS, |job| {
        job["status"] == "finished"
    })?;
    let served = started.elapsed().as_secs_f64();
    let local = words_spec(
        "throughput-run",
        words,
        None,
        &toml_str(&guests::operators_dir().join("wordcount_split.wasm")),
        &toml_str(&guests::operators_dir().join("wordcount_count.wasm")),
    );
    let local = local
        + &format!(
            "\n[checkpoint]\ninterval = \"10s\"\ndir = {}\n",
            toml_str(&dir.join("chk"))
        );
    let path = dir.join("throughput.toml");
    std::fs::write(&path, local)?;
    let started = Instant::now();
    run_job(&weir, &path, &dir.join("summary.json"), &[])?;
    let ran = started.elapsed().as_secs_f64();
    drop(server);

    println!();
    println!(
        "submit to first record (warm component cache): median {:.0} ms, min {:.0} ms, max {:.0} ms",
        ms(latencies[latencies.len() / 2]),
        ms(latencies[0]),
        ms(latencies[latencies.len() - 1])
    );
    println!(
        "  {:>10} {:>8} {:>14} {:>10}",
        "keys", "backend", "savepoint ms", "size MB"
    );
    for (k, backend, ms, size) in savepoints {
        println!(
            "  {k:>10} {backend:>8} {ms:>14} {:>10.1}",
            size as f64 / 1e6
        );
    }
    if let Some((downtime, total)) = rescale {
        println!(
            "rescale 2 -> 4 at {} keys: no sink record for {:.0} ms; request to running {:.0} ms",
            keys[0],
            ms(downtime),
            ms(total)
        );
    }
    println!(
        "word count, {words} lines, parallelism 2: weir serve {:.2} s ({:.2} M lines/s), \
         weir run {:.2} s ({:.2} M lines/s)",
        served,
        words as f64 / served / 1e6,
        ran,
        words as f64 / ran / 1e6
    );
    Ok(())
}

/// `cargo xtask bench-upgrade`: hot deploy on a keyed count holding `--keys` keys (default
/// 1M) at parallelism 2, `--backend` state (default memory), checkpoints every second:
///
/// - `--swaps` upgrades (default 100), alternating between the count and a second version
///   of it that counts in the same state, each committed at the checkpoint after it: the
///   pause of each subtask (barrier aligned to first records handed to the new code) at
///   p50/p99/max, and the time from the request to the commit;
/// - the sink's records/s in the second before a swap, the second of it and the one after;
/// - the same change as Flink makes it: a stop with a savepoint and a submit of the new code
///   from it, from the stop request to the first record at the new job's sink.
pub fn run_upgrade(args: &[String]) -> Result<()> {
    let mut keys = 1_000_000;
    let mut swaps = 100;
    let mut backend = "memory".to_string();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keys" => keys = number(&mut args, "--keys")?,
            "--swaps" => swaps = number(&mut args, "--swaps")?,
            "--backend" => match args.next().map(String::as_str) {
                Some(b @ ("memory" | "rocksdb")) => backend = b.into(),
                _ => bail!("--backend takes memory or rocksdb"),
            },
            other => bail!("unknown option `{other}`; use --keys K, --swaps N, --backend B"),
        }
    }
    let (weir, dir) = prepare("bench-upgrade")?;
    let _ = std::fs::remove_dir_all(dir.join("data"));
    let server = Server::start(&weir, &dir)?;
    let count = server.upload(&guests::operators_dir().join("wordcount_count.wasm"))?;
    let recount = server.upload(&guests::operators_dir().join("weir_test_recount.wasm"))?;
    let spec = keys_spec(keys, &backend, &count, "1s");
    let id = server.submit(&spec)?;
    server.wait(&id, Duration::from_secs(600), 100 * MS, |job| {
        sink_in(job) >= keys
    })?;
    println!("{keys} keys held; {swaps} swaps");

    // The throughput around one swap, sampled every 50 ms.
    let mut samples: Vec<(Instant, u64)> = Vec::new();
    let sample = |samples: &mut Vec<(Instant, u64)>, until: Instant| -> Result<()> {
        while Instant::now() < until {
            let n = sink_in(&server.get(&format!("/v1/jobs/{id}"))?);
            samples.push((Instant::now(), n));
            std::thread::sleep(50 * MS);
        }
        Ok(())
    };
    sample(&mut samples, Instant::now() + Duration::from_millis(1100))?;
    let swap_at = Instant::now();
    let op = server.post(&format!("/v1/jobs/{id}/upgrade"), upgrade(&recount))?;
    sample(&mut samples, Instant::now() + Duration::from_millis(2100))?;
    server.operation(&id, &op)?;
    let rate = |from: Instant| -> f64 {
        let at = |t: Instant| {
            samples
                .iter()
                .min_by_key(|(s, _)| if *s > t { *s - t } else { t - *s })
                .map_or(0, |(_, n)| *n)
        };
        at(from + Duration::from_secs(1)).saturating_sub(at(from)) as f64
    };
    let dip = [
        rate(swap_at - Duration::from_secs(1)),
        rate(swap_at),
        rate(swap_at + Duration::from_secs(1)),
    ];

    // Swaps back and forth.
    let (mut pauses, mut swaps_alone, mut commits) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..swaps {
        let to = if i % 2 == 1 { &count } else { &recount };
        let op = server.post(&format!("/v1/jobs/{id}/upgrade"), upgrade(to))?;
        server.operation(&id, &op)?;
    }
    let job = server.get(&format!("/v1/jobs/{id}"))?;
    for u in job["upgrades"].as_array().into_iter().flatten() {
        for p in u["pauses"].as_array().into_iter().flatten() {
            let (pause, snapshot) = (p["pause_us"].as_u64(), p["snapshot_us"].as_u64());
            if let (Some(pause), Some(snapshot)) = (pause, snapshot) {
                pauses.push(pause);
                swaps_alone.push(pause.saturating_sub(snapshot));
            }
        }
        commits.extend(u["time_to_commit_ms"].as_u64());
    }
    pauses.sort_unstable();
    swaps_alone.sort_unstable();
    commits.sort_unstable();
    if pauses.is_empty() || commits.is_empty() {
        bail!("no upgrade reported its pauses: {job}");
    }
    let at = |v: &[u64], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];

    // Flink's way: stop with a savepoint, submit the new code from it.
    let started = Instant::now();
    let op = server.post(&format!("/v1/jobs/{id}/stop"), json!({}))?;
    let op = server.operation(&id, &op)?;
    let stopped = started.elapsed();
    let savepoint = op["savepoint"].as_str().unwrap_or_default().to_string();
    let new_id = server.post(
        "/v1/jobs",
        json!({ "spec": keys_spec(keys, &backend, &recount, "1s"), "savepoint": savepoint }),
    )?["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    server.wait(&new_id, Duration::from_secs(600), MS, |job| {
        sink_in(job) > 0
    })?;
    let resubmitted = started.elapsed();
    server.post(&format!("/v1/jobs/{new_id}/cancel"), json!({}))?;
    drop(server);

    println!();
    println!(
        "hot deploy, {} swaps at {keys} keys on {backend}, parallelism 2 ({} subtask pauses):",
        commits.len(),
        pauses.len()
    );
    let quantiles = |v: &[u64]| {
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            at(v, 0.5) as f64 / 1e3,
            at(v, 0.99) as f64 / 1e3,
            *v.last().unwrap() as f64 / 1e3,
        )
    };
    println!(
        "  pause per subtask (barrier aligned -> first records handed to the new code): {}",
        quantiles(&pauses)
    );
    println!(
        "  of which not the checkpoint's synchronous snapshot (instantiate, open, next \
         record): {}",
        quantiles(&swaps_alone)
    );
    println!(
        "  request to committed (commit at the next 1 s checkpoint): p50 {} ms, p99 {} ms",
        at(&commits, 0.5),
        at(&commits, 0.99)
    );
    println!(
        "  sink records/s: second before the swap {:.0}, second of it {:.0}, second after {:.0}",
        dip[0], dip[1], dip[2]
    );
    println!(
        "stop with savepoint + resubmit: stop {:.0} ms, request to first record of the new job \
         {:.0} ms",
        ms(stopped),
        ms(resubmitted)
    );
    Ok(())
}

/// The request that upgrades the count to component `reference`, committed at the next
/// checkpoint.
fn upgrade(reference: &str) -> Value {
    json!({
        "operators": [{ "uid": "count", "component": reference }],
        "probation_ms": 0,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The records the sink of `job` received in its current run.
fn sink_in(job: &Value) -> u64 {
    job["vertices"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["role"] == "sink"))
        .and_then(|v| v["records_in"].as_u64())
        .unwrap_or(0)
}

/// Rescales job `id`'s count from 2 to 4 subtasks, watching its sink: the longest time
/// without a new record, and the time from the request until records flow again.
fn rescale_downtime(server: &Server, id: &str) -> Result<(Duration, Duration)> {
    let started = Instant::now();
    let op = server.post(
        &format!("/v1/jobs/{id}/rescale"),
        json!({ "parallelism": { "count": 4 } }),
    )?;
    let request_id = op["request_id"].as_str().unwrap_or_default().to_string();
    let (mut last, mut last_change, mut longest) = (u64::MAX, Instant::now(), Duration::ZERO);
    loop {
        let job = server.get(&format!("/v1/jobs/{id}"))?;
        let n = sink_in(&job);
        if n != last {
            longest = longest.max(last_change.elapsed());
            last = n;
            last_change = Instant::now();
            let op = server.get(&format!("/v1/jobs/{id}/operations/{request_id}"))?;
            if op["status"] == "completed" && n > 0 && job["status"] == "running" {
                return Ok((longest, started.elapsed()));
            }
            if op["status"] == "failed" {
                bail!("the rescale failed: {op}");
            }
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the rescale did not finish within 300 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A word count over generated lines, components by reference.
fn words_spec(name: &str, lines: u64, rate: Option<u64>, split: &str, count: &str) -> String {
    let rate = rate.map(|r| format!("rate = {r}\n")).unwrap_or_default();
    format!(
        r#"[job]
name = "{name}"
parallelism = 2

[[source]]
name = "lines"
type = "generator"
mode = "words"
count = {lines}
{rate}
[[operator]]
name = "split"
uid = "split"
wasm = {split}
input = "lines"
edge = "rebalance"

[[operator]]
name = "count"
uid = "count"
wasm = {count}
input = "split"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
edge = "key_by"
"#,
        split = quote(split),
        count = quote(count),
    )
}

/// `s` as a TOML string, unless it is one already.
fn quote(s: &str) -> String {
    if s.starts_with('"') {
        s.to_string()
    } else {
        format!("\"{s}\"")
    }
}

/// A keyed count over `keys` keys, unbounded, checkpointed every `interval`.
fn keys_spec(keys: u64, backend: &str, count: &str, interval: &str) -> String {
    format!(
        r#"[job]
name = "keys-{keys}-{backend}"
parallelism = 2

[checkpoint]
interval = "{interval}"

[state]
backend = "{backend}"

[[source]]
name = "keys"
type = "generator"
mode = "keyed_cycle"
vocabulary = {keys}

[[operator]]
name = "count"
uid = "count"
wasm = "{count}"
input = "keys"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
edge = "key_by"
"#
    )
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// A `weir serve` of the benchmark, with a client.
struct Server {
    _served: Served,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(weir: &Path, dir: &Path) -> Result<Server> {
        let served = Served::start(weir, dir, TOKEN, &[])?;
        Ok(Server {
            base: format!("http://{}", served.addr),
            _served: served,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .new_agent(),
        })
    }

    fn answer(
        &self,
        what: &str,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value> {
        let mut response = response.with_context(|| what.to_string())?;
        let status = response.status();
        let value: Value = response.body_mut().read_json().unwrap_or(Value::Null);
        if !status.is_success() {
            bail!("{what}: HTTP {status}: {value}");
        }
        Ok(value)
    }

    fn get(&self, path: &str) -> Result<Value> {
        let r = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call();
        self.answer(path, r)
    }

    fn post(&self, path: &str, body: Value) -> Result<Value> {
        let r = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .send_json(body);
        self.answer(path, r)
    }

    /// Uploads a component; its reference for a spec.
    fn upload(&self, path: &Path) -> Result<String> {
        let bytes = std::fs::read(path)?;
        let r = self
            .agent
            .post(format!("{}/v1/components", self.base))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/wasm")
            .send(&bytes[..]);
        let info = self.answer("upload", r)?;
        Ok(format!(
            "sha256:{}",
            info["sha256"].as_str().unwrap_or_default()
        ))
    }

    fn submit(&self, spec: &str) -> Result<String> {
        let job = self.post("/v1/jobs", json!({ "spec": spec }))?;
        Ok(job["id"].as_str().unwrap_or_default().to_string())
    }

    /// Polls job `id` every `every` until `done` holds.
    fn wait(
        &self,
        id: &str,
        limit: Duration,
        every: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let job = self.get(&format!("/v1/jobs/{id}"))?;
            if done(&job) {
                return Ok(());
            }
            if job["status"] == "failed" {
                bail!("job {id} failed: {job}");
            }
            if Instant::now() > deadline {
                bail!("job {id} did not get there within {limit:?}: {job}");
            }
            std::thread::sleep(every);
        }
    }

    /// Polls operation `op` of job `id` until it is done.
    fn operation(&self, id: &str, op: &Value) -> Result<Value> {
        let request_id = op["request_id"].as_str().unwrap_or_default();
        loop {
            let op = self.get(&format!("/v1/jobs/{id}/operations/{request_id}"))?;
            match op["status"].as_str() {
                Some("completed") => return Ok(op),
                Some("failed") => bail!("operation failed: {op}"),
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}
