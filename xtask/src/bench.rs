//! `cargo xtask bench`: word count throughput at parallelism 2, WASM operators vs the native
//! built-ins that do the same work, over the input of `bench/gen_words.py`; the WASM
//! operators once more without epoch interruption, to show what enforcing call deadlines
//! costs; and once on the RocksDB state backend with checkpoints every 5 s (the setting of
//! the Flink 2.3 / RocksDB comparison in the README).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::{build_weir, callgrind, exec, guests, repo, target_dir};

const PARALLELISM: u32 = 2;
/// Small enough that both source subtasks get splits of the default input.
const SPLIT_SIZE: u64 = 4 << 20;

#[derive(Debug)]
pub struct Options {
    words: u64,
    runs: u32,
    /// Another `weir` binary (an earlier build) to run the WASM and native word counts with
    /// too, interleaved with this one's, for a before/after comparison in one invocation.
    compare: Option<PathBuf>,
    /// Instructions per word under callgrind instead of time (`--callgrind`), and the
    /// functions that run the most of them (`--functions N`).
    callgrind: bool,
    functions: Option<usize>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options> {
        let mut words = None;
        let mut options = Options {
            words: 0,
            runs: 3,
            compare: None,
            callgrind: false,
            functions: None,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| number(&mut args, name);
            match arg.as_str() {
                "--words" => words = Some(value("--words")?),
                "--runs" => options.runs = u32::try_from(value("--runs")?)?,
                "--compare" => {
                    let bin = args.next().context("--compare needs a weir binary")?;
                    options.compare = Some(PathBuf::from(bin));
                }
                "--callgrind" => options.callgrind = true,
                "--functions" => {
                    options.callgrind = true;
                    options.functions = Some(value("--functions")? as usize);
                }
                other => bail!(
                    "unknown bench option `{other}`; use --words N, --runs R, --compare BIN, \
                     --callgrind and --functions N"
                ),
            }
        }
        // Callgrind runs some fifty times slower.
        let default = if options.callgrind {
            1_000_000
        } else {
            5_000_000
        };
        options.words = words.unwrap_or(default);
        ensure!(
            options.words > 0 && options.words.is_multiple_of(10),
            "--words must be a positive multiple of 10 (the generator writes 10 words per line)"
        );
        ensure!(options.runs > 0, "--runs must be at least 1");
        Ok(options)
    }
}

/// The median of `times` (not empty): the mean of the middle two of an even number.
fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() % 2 {
        1 => sorted[mid],
        _ => (sorted[mid - 1] + sorted[mid]) / 2.0,
    }
}

/// The value of option `name`: the next argument, a whole number (`_` separators allowed).
pub(crate) fn number<'a>(args: &mut impl Iterator<Item = &'a String>, name: &str) -> Result<u64> {
    args.next()
        .with_context(|| format!("{name} needs a value"))?
        .replace('_', "")
        .parse::<u64>()
        .with_context(|| format!("{name} needs a whole number"))
}

/// One way of running the word count.
#[derive(Clone)]
struct Variant {
    name: String,
    /// The `weir` binary; `None`: the one just built.
    weir: Option<PathBuf>,
    split: String,
    count: String,
    /// Extra arguments of `weir`.
    flags: &'static [&'static str],
    /// Tables added to the job spec.
    tables: String,
}

/// Builds the guests and `weir` and creates `<target>/<name>/` for a benchmark's files;
/// returns the `weir` binary and that directory.
pub(crate) fn prepare(name: &str) -> Result<(PathBuf, PathBuf)> {
    guests::run()?;
    let weir = build_weir()?;
    let dir = target_dir()?.join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok((weir, dir))
}

pub fn run(options: Options) -> Result<()> {
    let (weir, dir) = prepare("bench")?;
    let input = generate(&dir, options.words)?;
    if options.callgrind {
        return callgrind_counts(&weir, &dir, &input, options.words, options.functions);
    }

    let [wasm, native] = wasm_and_native(&guests::operators_dir(), "");
    let renamed = |variant: &Variant, name: &str| Variant {
        name: name.into(),
        ..variant.clone()
    };
    let mut variants = vec![
        wasm.clone(),
        native.clone(),
        Variant {
            flags: &["--no-epoch-interruption"],
            ..renamed(&wasm, "wasm-no-epoch")
        },
        Variant {
            tables: format!(
                "\n[state]\nbackend = \"rocksdb\"\ndir = {}\n\n\
                 [checkpoint]\ninterval = \"5s\"\ndir = {}\n",
                toml_str(&dir.join("state")),
                toml_str(&dir.join("checkpoints"))
            ),
            ..renamed(&wasm, "wasm-rocksdb")
        },
    ];
    if let Some(other) = &options.compare {
        for (variant, name) in [(&wasm, "wasm-compare"), (&native, "native-compare")] {
            variants.push(Variant {
                weir: Some(other.clone()),
                ..renamed(variant, name)
            });
        }
    }
    let mut times = vec![Vec::new(); variants.len()];
    for run in 1..=options.runs {
        // Interleaved, so that drift of the machine's speed affects both variants alike.
        for (variant, times) in variants.iter().zip(&mut times) {
            let spec = dir.join(format!("wordcount-{}.toml", variant.name));
            std::fs::write(&spec, job_spec(variant, &input))
                .with_context(|| format!("cannot write {}", spec.display()))?;
            let bin = variant.weir.as_ref().unwrap_or(&weir);
            let secs = run_job(bin, &spec, &dir.join("summary.json"), variant.flags)?;
            println!(
                "run {run}/{}: {:<14} {secs:.3} s",
                options.runs, variant.name
            );
            times.push(secs);
        }
    }
    // The best run is the one the machine disturbed least; the median says how typical it is
    // (on a virtual machine whose speed drifts, the two can differ by a third).
    let best: Vec<f64> = times
        .iter()
        .map(|t| t.iter().copied().fold(f64::INFINITY, f64::min))
        .collect();
    let median: Vec<f64> = times.iter().map(|t| median(t)).collect();

    println!();
    println!(
        "word count, parallelism {PARALLELISM}, {} runs",
        options.runs
    );
    println!(
        "  {:<14} {:>12} {:>10} {:>12} {:>10} {:>12}",
        "variant", "words", "best s", "M words/s", "median s", "M words/s"
    );
    for ((variant, best), median) in variants.iter().zip(&best).zip(&median) {
        let rate = |secs: f64| options.words as f64 / secs / 1e6;
        println!(
            "  {:<14} {:>12} {best:>10.3} {:>12.2} {median:>10.3} {:>12.2}",
            variant.name,
            options.words,
            rate(*best),
            rate(*median)
        );
    }
    println!(
        "  wasm/native time ratio: {:.2} (best), {:.2} (median)",
        best[0] / best[1],
        median[0] / median[1]
    );
    println!(
        "  epoch interruption costs {:+.1}% (wasm vs wasm-no-epoch, medians)",
        (median[0] / median[2] - 1.0) * 100.0
    );
    println!(
        "  RocksDB with checkpoints every 5 s: {:.2}x the time of memory state (medians)",
        median[3] / median[0]
    );
    if let Some(other) = &options.compare {
        println!(
            "  against {}: wasm {:+.1}%, native {:+.1}% (median time of this build vs that one)",
            other.display(),
            (median[0] / median[4] - 1.0) * 100.0,
            (median[1] / median[5] - 1.0) * 100.0
        );
    }
    Ok(())
}

/// The word count with the guests of `operators` ("wasm") and with the native operators
/// ("native"), `tables` added to their job specs.
fn wasm_and_native(operators: &Path, tables: &str) -> [Variant; 2] {
    let wasm = |file: &str| format!("wasm = {}", toml_str(&operators.join(file)));
    let variant = |name: &str, split: String, count: String| Variant {
        name: name.into(),
        weir: None,
        split,
        count,
        flags: &[],
        tables: tables.into(),
    };
    [
        variant(
            "wasm",
            wasm("wordcount_split.wasm"),
            wasm("wordcount_count.wasm"),
        ),
        variant(
            "native",
            "native = \"split_words\"".into(),
            "native = \"count_words\"".into(),
        ),
    ]
}

/// The WASM and native word counts once each under callgrind (memory state, no checkpoints):
/// instructions per word, the WASM one's split by where they go (see `callgrind`), and with
/// `functions` the functions that run the most of them, the guests' by name.
fn callgrind_counts(
    weir: &Path,
    dir: &Path,
    input: &Path,
    words: u64,
    functions: Option<usize>,
) -> Result<()> {
    callgrind::ensure_valgrind()?;
    let (weir, operators) = match functions {
        Some(_) => callgrind::with_symbols(&["wordcount-split", "wordcount-count"])?,
        None => (weir.to_path_buf(), guests::operators_dir()),
    };
    // Under callgrind a batch runs some fifty times longer than a call's deadline allows.
    let [wasm, native] = wasm_and_native(&operators, "\n[limits]\ncall_deadline = \"1h\"\n");
    let measure = |variant: &Variant, functions: bool| -> Result<PathBuf> {
        let spec = dir.join(format!("callgrind-{}.toml", variant.name));
        std::fs::write(&spec, job_spec(variant, input))
            .with_context(|| format!("cannot write {}", spec.display()))?;
        let file = dir.join(format!("callgrind.{}.out", variant.name));
        println!("{}: {words} words under callgrind (slow)", variant.name);
        callgrind::run(
            &weir,
            &spec,
            &dir.join("summary.json"),
            &file,
            None,
            functions,
        )?;
        Ok(file)
    };
    let wasm_file = measure(&wasm, functions.is_some())?;
    // The native job runs no guest: nothing to split off, nothing for a perf map to name.
    let native_total = callgrind::total(&measure(&native, false)?)?;
    let split = callgrind::split(&wasm_file)?;

    println!();
    println!(
        "instructions per word, {words} words, parallelism {PARALLELISM}, memory state, no \
         checkpoints"
    );
    println!("  wasm: {} in all", split.total / words);
    for (part, n) in &split.parts {
        println!(
            "    {part:<24} {:>7} {:>5.1} %",
            n / words,
            *n as f64 * 100.0 / split.total as f64
        );
    }
    if let Some(n) = functions {
        let listed = callgrind::functions(&wasm_file, &std::env::temp_dir())?;
        callgrind::print_functions(&listed, n, words, split.total);
    }
    println!("  native: {} in all", native_total / words);
    println!(
        "  wasm/native instruction ratio: {:.2}",
        split.total as f64 / native_total as f64
    );
    Ok(())
}

/// The cached input of `words` words, generated on first use.
pub(crate) fn generate(dir: &Path, words: u64) -> Result<PathBuf> {
    let path = dir.join(format!("words-{words}.txt"));
    if path.exists() {
        return Ok(path);
    }
    println!("generating {words} words into {}", path.display());
    let partial = dir.join(format!("words-{words}.txt.partial"));
    exec(
        Command::new("python3")
            .arg(repo().join("bench").join("gen_words.py"))
            .args(["--words", &words.to_string(), "--out"])
            .arg(&partial),
    )?;
    std::fs::rename(&partial, &path)
        .with_context(|| format!("cannot rename {} to {}", partial.display(), path.display()))?;
    Ok(path)
}

fn job_spec(variant: &Variant, input: &Path) -> String {
    format!(
        r#"[job]
name = "bench-wordcount-{name}"
parallelism = {PARALLELISM}

[[source]]
name = "lines"
type = "file"
path = {input}
split_size = {SPLIT_SIZE}

[[operator]]
name = "split"
uid = "split"
{split}
input = "lines"
edge = "rebalance"

[[operator]]
name = "count"
uid = "count"
{count}
input = "split"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
{tables}"#,
        tables = variant.tables,
        name = variant.name,
        input = toml_str(input),
        split = variant.split,
        count = variant.count,
    )
}

/// Runs the job and returns its duration in seconds, as its summary reports it.
pub(crate) fn run_job(weir: &Path, spec: &Path, summary: &Path, flags: &[&str]) -> Result<f64> {
    run_job_by(Command::new(weir), spec, summary, flags)
}

/// [`run_job`] with `command` for the `weir` to run: the binary, or a wrapper (GNU time) that
/// is given it as its first argument.
pub(crate) fn run_job_by(
    mut command: Command,
    spec: &Path,
    summary: &Path,
    flags: &[&str],
) -> Result<f64> {
    let out = command
        .args(flags)
        .arg("run")
        .arg(spec)
        // A checkpointed job that finished would otherwise not run again.
        .arg("--fresh")
        .arg("--no-progress")
        .arg("--summary-json")
        .arg(summary)
        .output()
        .with_context(|| format!("cannot start {}", command.get_program().to_string_lossy()))?;
    if !out.status.success() {
        bail!(
            "weir run {} failed ({}):\n{}",
            spec.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let json = std::fs::read_to_string(summary)
        .with_context(|| format!("cannot read {}", summary.display()))?;
    duration_seconds(&json).with_context(|| format!("no duration_seconds in {}", summary.display()))
}

/// The job's duration from the JSON summary `weir run --summary-json` writes.
fn duration_seconds(json: &str) -> Option<f64> {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()?
        .get("duration_seconds")?
        .as_f64()
}

/// `path` as a TOML basic string.
pub(crate) fn toml_str(path: &Path) -> String {
    let mut out = String::from("\"");
    for c in path.to_string_lossy().chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_run_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
    }

    #[test]
    fn reads_the_duration_from_a_summary() {
        let json = "{\n  \"job\": \"x\",\n  \"duration_seconds\": 1.25,\n  \"vertices\": []\n}";
        assert_eq!(duration_seconds(json), Some(1.25));
        assert_eq!(duration_seconds("{\"duration_seconds\":3e-2}"), Some(0.03));
        assert_eq!(duration_seconds("{}"), None);
    }

    #[test]
    fn options_have_defaults_and_check_values() {
        let o = Options::parse(&[]).unwrap();
        assert_eq!((o.words, o.runs, o.compare), (5_000_000, 3, None));
        let args = ["--words", "1_000", "--runs", "1"].map(String::from);
        let o = Options::parse(&args).unwrap();
        assert_eq!((o.words, o.runs), (1000, 1));
        assert!(Options::parse(&["--words".into(), "15".into()]).is_err());
        assert!(Options::parse(&["--words".into(), "0".into()]).is_err());
        let o = Options::parse(&["--functions".into(), "20".into()]).unwrap();
        assert_eq!(
            (o.callgrind, o.functions, o.words),
            (true, Some(20), 1_000_000)
        );
        assert!(Options::parse(&["--fast".into()]).is_err());
    }
}
