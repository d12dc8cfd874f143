//! `cargo xtask bench-languages`: the word count with its operators in Rust, Python and
//! JavaScript (examples/wordcount, built by `cargo xtask guests`) at parallelism 2 over the
//! input of `bench/gen_words.py`, beside PyFlink's Python DataStream API doing the same keyed
//! count with a `ValueState` (`bench/pyflink/wordcount.py`, installed into a virtual
//! environment on first use). Every output is checked equal to the Rust one's.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench::{generate, number, prepare, toml_str};
use crate::bench_operators::{Measured, committed, ensure_gnu_time, gnu_time, measure};
use crate::{exec, guests, repo, target_dir};

/// The PyFlink that runs the Python word count (the Flink of bench/flink).
const PYFLINK: &str = "apache-flink==2.3.0";

pub fn run(args: &[String]) -> Result<()> {
    let mut words = 2_000_000;
    let mut pyflink = true;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--words" => words = number(&mut args, "--words")?,
            "--no-pyflink" => pyflink = false,
            other => bail!("unknown option `{other}`; use --words N, --no-pyflink"),
        }
    }
    ensure_gnu_time()?;
    let (weir, dir) = prepare("bench-languages")?;
    let input = generate(&dir, words)?;
    let operators = guests::operators_dir();
    let mut rows: Vec<(String, Measured, Option<u64>)> = Vec::new();
    let mut expected: Option<Vec<String>> = None;
    for (language, suffix) in [("Rust", ""), ("Python", "_py"), ("JavaScript", "_js")] {
        let out = dir.join("out");
        let _ = std::fs::remove_dir_all(&out);
        let split = operators.join(format!("wordcount_split{suffix}.wasm"));
        let count = operators.join(format!("wordcount_count{suffix}.wasm"));
        let spec = dir.join("wordcount.toml");
        std::fs::write(&spec, job_spec(&input, &split, &count, &out))?;
        let m = measure(&weir, &spec, &dir)?;
        check(language, &out, &mut expected)?;
        println!(
            "{language:<10} {:.2} s, {:.0} k words/s, output checked",
            m.seconds,
            words as f64 / m.seconds / 1e3
        );
        let size = std::fs::metadata(&count)?.len();
        rows.push((language.to_owned(), m, Some(size)));
    }
    if pyflink {
        let out = dir.join("out");
        let _ = std::fs::remove_dir_all(&out);
        let m = run_pyflink(&input, &out, &dir)?;
        check("PyFlink", &out, &mut expected)?;
        println!(
            "PyFlink    {:.2} s, {:.0} k words/s, output checked",
            m.seconds,
            words as f64 / m.seconds / 1e3
        );
        rows.push(("PyFlink 2.3".to_owned(), m, None));
    }
    println!();
    println!(
        "word count, {words} words (bench/gen_words.py), parallelism 2, memory state, one run each"
    );
    println!(
        "  {:<12} {:>12} {:>8} {:>9} {:>12}",
        "operators", "words/s", "CPU s", "peak RSS", "component"
    );
    for (name, m, size) in rows {
        println!(
            "  {name:<12} {:>10.0} k {:>8.1} {:>6.0} MB {:>12}",
            words as f64 / m.seconds / 1e3,
            m.cpu_seconds,
            m.peak_rss_kb as f64 / 1024.0,
            size.map_or("-".to_owned(), |s| format!("{:.1} MB", s as f64 / 1e6)),
        );
    }
    Ok(())
}

/// Checks that the lines in `out` are the first run's (which become the expectation).
fn check(name: &str, out: &Path, expected: &mut Option<Vec<String>>) -> Result<()> {
    let lines = committed(out)?;
    match expected {
        None => *expected = Some(lines),
        Some(want) if *want == lines => {}
        Some(want) => bail!(
            "{name}: {} output lines, the Rust operators wrote {}; first difference: {:?}",
            lines.len(),
            want.len(),
            lines.iter().zip(want.iter()).find(|(a, b)| a != b)
        ),
    }
    Ok(())
}

fn job_spec(input: &Path, split: &Path, count: &Path, out: &Path) -> String {
    format!(
        r#"[job]
name = "bench-languages"
parallelism = 2

[[source]]
name = "lines"
type = "file"
path = {input}
split_size = 4194304

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
type = "file"
input = "count"
path = {out}
format = "key_value"
"#,
        input = toml_str(input),
        split = toml_str(split),
        count = toml_str(count),
        out = toml_str(out),
    )
}

/// The virtual environment with PyFlink, made on first use.
fn pyflink_python() -> Result<PathBuf> {
    let venv = target_dir()?.join("pyflink-venv");
    let python = venv.join("bin").join("python");
    let marker = venv.join("pyflink-installed");
    if !marker.exists() {
        println!("installing {PYFLINK} into {} (once)", venv.display());
        exec(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        exec(Command::new(&python).args(["-m", "pip", "install", "--quiet", PYFLINK]))?;
        std::fs::write(&marker, PYFLINK)?;
    }
    Ok(python)
}

/// Runs `bench/pyflink/wordcount.py` under GNU time.
fn run_pyflink(input: &Path, out: &Path, dir: &Path) -> Result<Measured> {
    let python = pyflink_python()?;
    let times = dir.join("time.txt");
    let output = Command::new("/usr/bin/time")
        .args(["-f", "%U %S %M", "-o"])
        .arg(&times)
        .arg(&python)
        .arg(repo().join("bench").join("pyflink").join("wordcount.py"))
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(out)
        .output()
        .context("cannot start PyFlink")?;
    if !output.status.success() {
        bail!(
            "PyFlink's word count failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let seconds = stdout
        .lines()
        .find_map(|l| l.strip_prefix("net_runtime_seconds="))
        .and_then(|s| s.trim().parse().ok())
        .context("PyFlink's job printed no net_runtime_seconds")?;
    let (cpu_seconds, peak_rss_kb) = gnu_time(&times)?;
    Ok(Measured {
        seconds,
        cpu_seconds,
        peak_rss_kb,
        checkpoint_ms: Vec::new(),
        sync_ms: None,
    })
}
