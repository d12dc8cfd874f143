//! `cargo xtask soak [--iterations N]`: runs the crash and stop tests over and over (SIGKILL,
//! Ctrl-C or SIGTERM of `weir` at random moments, restarts, exact comparison of what the sinks
//! committed) and prints a tally: runs, kills, stops, rows compared and mismatches. Not part of
//! CI; for long runs by hand.

use std::process::Stdio;

use anyhow::{Context, Result, bail};

use crate::bench::number;
use crate::{build_weir, cargo, guests, services};

/// The crash and stop tests: exactly-once word count into files (memory and RocksDB state,
/// aligned and unaligned checkpoints), PostgreSQL in append, upsert and write-ahead delivery,
/// `weir run` stopped and resumed, and `weir serve` killed and stopped with a job running.
const TESTS: &[&str] = &[
    "exactly_once::exactly_once_state_and_file_output_survive_sigkill",
    "exactly_once::exactly_once_on_rocksdb_survives_sigkill",
    "exactly_once::unaligned_checkpoints_survive_sigkill",
    "exactly_once::unaligned_checkpoints_on_rocksdb_survive_sigkill",
    "postgres::append_mode_commits_every_row_exactly_once_across_sigkills",
    "postgres::upsert_mode_holds_the_batch_query_result_across_sigkills",
    "postgres::write_ahead_delivery_holds_the_batch_query_result_across_sigkills",
    "lifecycle::stops_at_random_moments_and_resumes_give_the_output_of_an_uninterrupted_run",
    "lifecycle::stops_at_random_moments_with_unaligned_checkpoints_give_the_output_of_an_uninterrupted_run",
    "lifecycle::stops_at_random_moments_on_rocksdb_state_give_the_output_of_an_uninterrupted_run",
    "service::a_server_killed_or_stopped_at_random_moments_keeps_its_job_exactly_once",
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
    let (mut runs, mut mismatches, mut short) = (0u64, 0, 0);
    let mut total = Tally::default();
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
                .and_then(Tally::parse);
            match (out.status.success(), tally) {
                (true, Some(t)) => {
                    println!(
                        "iteration {i}/{iterations}: {test}: ok, {} kills, {} stops, {} rows",
                        t.kills, t.stops, t.rows
                    );
                    total.kills += t.kills;
                    total.stops += t.stops;
                    total.rows += t.rows;
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
        "soak: {runs} runs, {} kills, {} stops, {} rows compared, {mismatches} mismatches \
         ({short} runs cut short: a run ended by itself before its kill)",
        total.kills, total.stops, total.rows
    );
    if mismatches > 0 {
        bail!("{mismatches} of {runs} runs failed");
    }
    Ok(())
}

/// What one test checked, from its `crash tally: kills K stops S rows R` line.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    kills: u64,
    stops: u64,
    rows: u64,
}

impl Tally {
    fn parse(line: &str) -> Option<Tally> {
        let mut tally = Tally::default();
        let mut words = line.split_whitespace();
        while let (Some(label), Some(n)) = (words.next(), words.next()) {
            let n = n.parse().ok()?;
            match label {
                "kills" => tally.kills = n,
                "stops" => tally.stops = n,
                "rows" => tally.rows = n,
                _ => return None,
            }
        }
        Some(tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_are_read_by_their_labels() {
        let t = Tally::parse("kills 5 stops 1 rows 900000").unwrap();
        assert_eq!(
            t,
            Tally {
                kills: 5,
                stops: 1,
                rows: 900_000
            }
        );
        assert_eq!(Tally::parse("kills x rows 3"), None);
        assert_eq!(Tally::parse("spins 1"), None);
    }
}
