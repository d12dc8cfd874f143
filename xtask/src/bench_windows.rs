//! `cargo xtask bench-windows`: a keyed tumbling-window count and a sliding-window (hop)
//! count over generated `key,timestamp` events at parallelism 2: weir's built-in count and
//! the same count as a WebAssembly aggregate function, on memory and RocksDB state, beside
//! Flink 2.3 running the same windows on the same input (`bench/flink/src/WindowJob.java`).
//! Every output is checked against counts computed here.
//!
//! Then the latency: the same jobs over events generated at a fixed rate (`--latency-rate`,
//! for `--latency-seconds`) and timestamped with the clock as they are made, windows of a
//! second; the event-time lag of the results (the time a result reaches the sink less the
//! window's end) as weir's summary and Flink's job report it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::bench::{number, prepare, toml_str};
use crate::bench_operators::{
    Measured, Rng, committed, ensure_gnu_time, flink_if, measure, one_of, run_flink,
};
use crate::guests;

/// Distinct keys.
const KEYS: u64 = 10_000;
/// Events per millisecond of event time.
const PER_MS: u64 = 10;
/// How much earlier than its place an event's time may be (ms); the watermark trails by it.
const DISORDER_MS: u64 = 1_000;

/// A file source's `split_size` above any generated file's size.
const ONE_SPLIT_PER_FILE: u64 = 1 << 40;
/// The tumbling windows' size, the sliding windows' size and slide (ms).
const TUMBLING_MS: i64 = 60_000;
const SLIDE_MS: i64 = 10_000;
/// The latency runs' disorder and windows (ms).
const LATENCY_DISORDER_MS: u64 = 100;
const LATENCY_LAYOUTS: [Layout; 2] = [
    Layout {
        name: "tumbling",
        size: 1_000,
        step: 1_000,
    },
    Layout {
        name: "sliding",
        size: 2_000,
        step: 500,
    },
];

/// A window layout.
#[derive(Clone, Copy, Debug)]
struct Layout {
    name: &'static str,
    size: i64,
    step: i64,
}

const LAYOUTS: [Layout; 2] = [
    Layout {
        name: "tumbling",
        size: TUMBLING_MS,
        step: TUMBLING_MS,
    },
    Layout {
        name: "sliding",
        size: TUMBLING_MS,
        step: SLIDE_MS,
    },
];

pub fn run(args: &[String]) -> Result<()> {
    let mut events = 50_000_000;
    let mut flink = true;
    let mut backends = vec!["memory", "rocksdb"];
    let (mut rate, mut seconds) = (200_000, 20);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--events" => events = number(&mut args, "--events")?,
            "--no-flink" => flink = false,
            "--state" => backends = vec![one_of(args.next(), "--state", &["memory", "rocksdb"])?],
            "--latency-rate" => rate = number(&mut args, "--latency-rate")?,
            "--latency-seconds" => seconds = number(&mut args, "--latency-seconds")?,
            other => bail!(
                "unknown option `{other}`; use --events N, --state memory|rocksdb, --no-flink, \
                 --latency-rate N (events/s; 0: no latency runs), --latency-seconds N"
            ),
        }
    }
    ensure_gnu_time()?;
    let (weir, dir) = prepare("bench-windows")?;
    let flink = flink_if(flink, &dir)?;
    let input = dir.join(format!("events-{events}"));
    generate(&input, events)?;

    let mut rows = Vec::new();
    for layout in LAYOUTS {
        let expected = expected(events, layout);
        for &backend in &backends {
            let mut systems = vec!["weir built-in", "weir wasm"];
            systems.extend(flink.as_ref().map(|_| "flink"));
            for system in systems {
                let out = dir.join("out");
                for d in [&out, &dir.join("state"), &dir.join("flink-state")] {
                    let _ = std::fs::remove_dir_all(d);
                }
                let m = match (system, &flink) {
                    ("flink", Some(classpath)) => {
                        let events = Events::File(&input);
                        flink_window_job(classpath, layout, backend, events, &dir)?.measured
                    }
                    _ => {
                        let spec = dir.join("windows.toml");
                        let wasm = system == "weir wasm";
                        let events = Events::File(&input);
                        std::fs::write(&spec, job_spec(layout, wasm, backend, events, &dir))?;
                        measure(&weir, &spec, &dir)?
                    }
                };
                let lines = committed(&out)?;
                if lines != expected {
                    let missing = expected.iter().filter(|l| lines.binary_search(l).is_err());
                    bail!(
                        "{system} {} on {backend}: {} results, {} expected; missing e.g. {:?}",
                        layout.name,
                        lines.len(),
                        expected.len(),
                        missing.take(3).collect::<Vec<_>>()
                    );
                }
                println!(
                    "{system:<13} {:<8} {backend:<7} {:.2} s, {:.2} M events/s, {} results checked",
                    layout.name,
                    m.seconds,
                    events as f64 / m.seconds / 1e6,
                    lines.len()
                );
                rows.push((system, layout.name, backend, m));
            }
        }
    }
    println!();
    println!(
        "{events} events over {KEYS} keys, out of order by up to {DISORDER_MS} ms, parallelism 2; \
         tumbling {TUMBLING_MS} ms, sliding {TUMBLING_MS} ms every {SLIDE_MS} ms; one run each"
    );
    println!(
        "  {:<14} {:<9} {:<8} {:>12} {:>8} {:>9}",
        "system", "window", "state", "events/s", "CPU s", "peak RSS"
    );
    for (system, layout, backend, m) in rows {
        println!(
            "  {system:<14} {layout:<9} {backend:<8} {:>10.2} M {:>8.1} {:>6.0} MB",
            events as f64 / m.seconds / 1e6,
            m.cpu_seconds,
            m.peak_rss_kb as f64 / 1024.0,
        );
    }
    if rate > 0 {
        latency(&weir, flink.as_deref(), &backends, (rate, seconds), &dir)?;
    }
    Ok(())
}

/// The event-time lag of window results over events generated at `rate` per second for
/// `seconds`, per system, layout and backend.
fn latency(
    weir: &Path,
    flink: Option<&str>,
    backends: &[&str],
    (rate, seconds): (u64, u64),
    dir: &Path,
) -> Result<()> {
    let mut rows = Vec::new();
    for layout in LATENCY_LAYOUTS {
        for &backend in backends {
            let mut systems = vec!["weir built-in", "weir wasm"];
            systems.extend(flink.map(|_| "flink"));
            for system in systems {
                for d in [
                    &dir.join("out"),
                    &dir.join("state"),
                    &dir.join("flink-state"),
                ] {
                    let _ = std::fs::remove_dir_all(d);
                }
                let lag = match (system, flink) {
                    ("flink", Some(classpath)) => {
                        let events = Events::Clocked { rate, seconds };
                        let run = flink_window_job(classpath, layout, backend, events, dir)?;
                        run.lag
                            .context("Flink's WindowJob printed no event_time_lag")?
                    }
                    _ => {
                        let spec = dir.join("windows.toml");
                        let wasm = system == "weir wasm";
                        let events = Events::Clocked { rate, seconds };
                        std::fs::write(&spec, job_spec(layout, wasm, backend, events, dir))?;
                        measure(weir, &spec, dir)?;
                        sink_lag(&dir.join("summary.json"))?
                    }
                };
                println!(
                    "{system:<13} {:<8} {backend:<7} event-time lag p50 {} ms, p99 {} ms, max {} ms \
                     over {} results",
                    layout.name, lag.p50, lag.p99, lag.max, lag.records
                );
                rows.push((system, layout.name, backend, lag));
            }
        }
    }
    println!();
    println!(
        "{rate} events/s for {seconds} s over {KEYS} keys, out of order by up to \
         {LATENCY_DISORDER_MS} ms (the watermark's delay), parallelism 2; tumbling 1 s, \
         sliding 2 s every 0.5 s; event-time lag = when a result reaches the sink less its \
         window's end"
    );
    println!(
        "  {:<14} {:<9} {:<8} {:>8} {:>8} {:>8}",
        "system", "window", "state", "p50 ms", "p99 ms", "max ms"
    );
    for (system, layout, backend, lag) in rows {
        println!(
            "  {system:<14} {layout:<9} {backend:<8} {:>8} {:>8} {:>8}",
            lag.p50, lag.p99, lag.max
        );
    }
    Ok(())
}

/// Percentiles of an event-time lag, in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Lag {
    records: u64,
    p50: u64,
    p99: u64,
    max: u64,
}

/// The event-time lag of sink `out` in the summary `weir run --summary-json` wrote.
fn sink_lag(summary: &Path) -> Result<Lag> {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(summary)?)?;
    let lag = (json["vertices"].as_array().into_iter().flatten())
        .find(|v| v["name"] == "out")
        .map(|v| &v["event_time_lag"])
        .with_context(|| format!("no event_time_lag of sink out in {}", summary.display()))?;
    let ms = |name: &str| {
        lag[name]
            .as_u64()
            .with_context(|| format!("no {name} in the event_time_lag of {}", summary.display()))
    };
    Ok(Lag {
        records: ms("records")?,
        p50: ms("p50_ms")?,
        p99: ms("p99_ms")?,
        max: ms("max_ms")?,
    })
}

/// Parses the `event_time_lag records=N p50=MS p99=MS max=MS` line Flink's `WindowJob` prints.
fn flink_lag(stdout: &str) -> Option<Lag> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("event_time_lag "))?;
    let field = |name: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some(Lag {
        records: field("records")?,
        p50: field("p50")?,
        p99: field("p99")?,
        max: field("max")?,
    })
}

/// Where a benchmark job's events come from.
#[derive(Clone, Copy)]
enum Events<'a> {
    /// The generated files in this directory, parsed by a WebAssembly operator; results to
    /// files.
    File(&'a Path),
    /// weir's generator, `rate` a second for `seconds`, over the keys in turn, timestamped
    /// with the clock; results discarded.
    Clocked { rate: u64, seconds: u64 },
}

/// Event `i`: its key and time, `PER_MS` events per millisecond, each up to `DISORDER_MS`
/// earlier than its place.
fn event(rng: &mut Rng, i: u64) -> (u64, i64) {
    let key = rng.below(KEYS);
    let ts = (i / PER_MS) as i64 - rng.below(DISORDER_MS + 1) as i64;
    (key, ts)
}

/// Writes `events` events into `dir/part-0.txt` and `part-1.txt` (unless there already),
/// alternating, as `k<key>,<timestamp>` lines.
fn generate(dir: &Path, events: u64) -> Result<()> {
    if dir.join("part-1.txt").exists() {
        return Ok(());
    }
    println!("generating {events} events into {}", dir.display());
    std::fs::create_dir_all(dir)?;
    let partial = |i: usize| dir.join(format!(".part-{i}.txt.partial"));
    let mut files = Vec::new();
    for i in 0..2 {
        files.push(std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(partial(i))?,
        ));
    }
    let mut rng = Rng(11);
    let mut line = String::new();
    for i in 0..events {
        let (key, ts) = event(&mut rng, i);
        line.clear();
        let _ = writeln!(line, "k{key},{ts}");
        files[(i % 2) as usize].write_all(line.as_bytes())?;
    }
    for (i, mut f) in files.into_iter().enumerate() {
        f.flush()?;
        std::fs::rename(partial(i), dir.join(format!("part-{i}.txt")))?;
    }
    Ok(())
}

/// The window counts the jobs must output for the generated events, sorted:
/// `k<key>\t<start>,<end>,<count>`.
fn expected(events: u64, layout: Layout) -> Vec<String> {
    let mut counts: HashMap<(u64, i64), u64> = HashMap::new();
    let mut rng = Rng(11);
    for i in 0..events {
        let (key, ts) = event(&mut rng, i);
        let mut start = ts - ts.rem_euclid(layout.step);
        while start > ts - layout.size {
            *counts.entry((key, start)).or_insert(0) += 1;
            start -= layout.step;
        }
    }
    let mut lines: Vec<String> = (counts.into_iter())
        .map(|((key, start), n)| format!("k{key}\t{start},{},{n}", start + layout.size))
        .collect();
    lines.sort_unstable();
    lines
}

fn job_spec(layout: Layout, wasm: bool, backend: &str, events: Events, dir: &Path) -> String {
    let operators = guests::operators_dir();
    let component = |name: &str| toml_str(&operators.join(format!("{name}.wasm")));
    let shape = match layout.name {
        "tumbling" => format!("type = \"tumbling\", size = \"{}ms\"", layout.size),
        _ => format!(
            "type = \"sliding\", size = \"{}ms\", slide = \"{}ms\"",
            layout.size, layout.step
        ),
    };
    let window = match wasm {
        true => format!(
            "wasm = {}\nwindow = {{ {shape}, function = \"aggregate\" }}",
            component("bench_window_count")
        ),
        false => format!("window = {{ {shape}, aggregate = \"count\" }}"),
    };
    let (input, sink) = match events {
        Events::File(path) => (
            format!(
                r#"[[source]]
name = "lines"
type = "file"
path = {path}
# Each line `key,timestamp` is stamped by the source, which makes watermarks per split.
event_time = {{ field = 1 }}
# One split per file, as Flink's TextLineInputFormat reads them: the two files, one per
# subtask, are at the same event time as they are read.
split_size = {ONE_SPLIT_PER_FILE}
watermark = {{ max_out_of_orderness = "{DISORDER_MS}ms" }}

[[operator]]
name = "parse"
uid = "parse"
wasm = {parse}
input = "lines"

[[sink]]
name = "malformed"
type = "discard"
input = "parse.malformed"
"#,
                path = toml_str(path),
                parse = component("bench_events_parse"),
            ),
            format!(
                "type = \"file\"\npath = {}\nformat = \"key_value\"",
                toml_str(&dir.join("out"))
            ),
        ),
        Events::Clocked { rate, seconds } => (
            format!(
                r#"[[source]]
name = "parse"
type = "generator"
mode = "keyed_cycle"
vocabulary = {KEYS}
rate = {rate}
count = {count}
event_time = {{ clock = true, max_disorder = "{LATENCY_DISORDER_MS}ms" }}
watermark = {{ max_out_of_orderness = "{LATENCY_DISORDER_MS}ms" }}
"#,
                count = rate * seconds,
            ),
            "type = \"discard\"".to_string(),
        ),
    };
    format!(
        r#"[job]
name = "bench-windows"
parallelism = 2

[state]
backend = "{backend}"
dir = {state}

{input}
[[operator]]
name = "windows"
uid = "windows"
input = "parse"
edge = "key_by"
{window}

[[sink]]
name = "out"
input = "windows"
{sink}
"#,
        state = toml_str(&dir.join("state")),
    )
}

/// A Flink run: its measurements, and the event-time lag it printed (when generating).
struct FlinkRun {
    measured: Measured,
    lag: Option<Lag>,
}

/// Runs Flink's `WindowJob` under GNU time: over the files in `dir/events-*` (`input`), its
/// output into `dir/out`, or over `rate` generated events a second for some seconds.
fn flink_window_job(
    classpath: &str,
    layout: Layout,
    backend: &str,
    events: Events,
    dir: &Path,
) -> Result<FlinkRun> {
    let mut window = format!("{}:{}", layout.name, layout.size);
    if layout.name == "sliding" {
        let _ = write!(window, ":{}", layout.step);
    }
    let mut args: Vec<std::ffi::OsString> = vec!["--window".into(), window.into()];
    match events {
        Events::File(input) => {
            args.extend(["--delay".into(), DISORDER_MS.to_string().into()]);
            args.extend(["--input".into(), input.into()]);
        }
        Events::Clocked { rate, seconds } => {
            args.extend(["--delay".into(), LATENCY_DISORDER_MS.to_string().into()]);
            args.extend(["--rate".into(), rate.to_string().into()]);
            args.extend(["--seconds".into(), seconds.to_string().into()]);
            args.extend(["--keys".into(), KEYS.to_string().into()]);
        }
    }
    args.extend(["--output".into(), dir.join("out").into()]);
    args.extend(["--parallelism", "2", "--backend"].map(Into::into));
    args.push(
        if backend == "memory" {
            "heap"
        } else {
            "rocksdb"
        }
        .into(),
    );
    args.extend(["--state-dir".into(), dir.join("flink-state").into()]);
    let (measured, stdout) = run_flink(classpath, ("-Xmx4g", "WindowJob"), &args, dir)?;
    Ok(FlinkRun {
        measured,
        lag: flink_lag(&stdout),
    })
}
