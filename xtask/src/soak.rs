//! `cargo xtask soak [--iterations N]`: runs the crash tests over and over (SIGKILL of `weir` at
//! random moments, restarts, exact comparison of what the sinks committed) and prints a tally:
//! runs, kills, rows compared and mismatches. Not part of CI; for long runs by hand.

use std::process::Stdio;

use anyhow::{Context, Result, bail};

use crate::bench::number;
use crate::{build_weir, cargo, guests, services};

/// The crash tests: exactly-once word count into files (memory and RocksDB state, aligned and
/// unaligned checkpoints), and PostgreSQL in append, upsert and write-ahead delivery.
const TESTS: &[&str] = &[
    "exactly_once::exactly_once_state_and_file_output_survive_sigkill",
    "exactly_once::exactly_once_on_rocksdb_survives_sigkill",
    "exactly_once::unaligned_checkpoints_survive_sigkill",
    "exactly_once::unaligned_checkpoints_on_rocksdb_survive_sigkill",
    "postgres::append_mode_commits_every_row_exactly_once_across_sigkills",
    "postgres::upsert_mode_holds_the_batch_query_result_across_sigkills",
    "postgres::write_ahead_delivery_holds_the_batch_query_result_across_sigkills",
];

pub fn run(args: &[String]) -> Result<()> {
    let mut iterations = 3;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--iterations" => iterations = number(&mut args, "--iterations")?,
            other => bail!("unknown soak option `{other}`; use --iterations N"),
        }
    }
    guests::run()?;
    build_weir()?;
    services::run()?;
    let (mut runs, mut kills, mut rows, mut mismatches, mut short) = (0u64, 0, 0, 0, 0);
    for i in 1..=iterations {
        for test in TESTS {
            let out = cargo()
                .args([
                    "test",
                    "--release",
                    "-p",
                    "weir-e2e",
                    "--test",
                    "e2e",
                    "--",
                    "--exact",
                ])
                .arg(test)
                .arg("--nocapture")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output()
                .with_context(|| format!("cannot run {test}"))?;
            let text = String::from_utf8_lossy(&out.stderr);
            runs += 1;
            let tally = text
                .lines()
                .find_map(|l| l.strip_prefix("crash tally: "))
                .and_then(|t| {
                    let v: Vec<u64> = t
                        .split_whitespace()
                        .filter_map(|w| w.parse().ok())
                        .collect();
                    Some((*v.first()?, *v.get(1)?))
                });
            match (out.status.success(), tally) {
                (true, Some((k, r))) => {
                    kills += k;
                    rows += r;
                    println!("iteration {i}/{iterations}: {test}: ok, {k} kills, {r} rows");
                }
                _ if text.contains("make the input larger") => {
                    short += 1;
                    println!("iteration {i}/{iterations}: {test}: a run ended before its kill");
                }
                _ => {
                    mismatches += 1;
                    println!("iteration {i}/{iterations}: {test}: FAILED");
                    let failure: Vec<&str> = text
                        .lines()
                        .filter(|l| l.contains("panicked") || l.contains("assertion"))
                        .take(6)
                        .collect();
                    println!("  {}", failure.join("\n  "));
                }
            }
        }
    }
    println!();
    println!(
        "soak: {runs} runs, {kills} kills, {rows} rows compared, {mismatches} mismatches \
         ({short} runs cut short: a run ended by itself before its kill)"
    );
    if mismatches > 0 {
        bail!("{mismatches} of {runs} runs failed");
    }
    Ok(())
}
