//! The `weir` command line: `run` a job locally, `validate` a job spec.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::checkpoint::RestoreFrom;
use crate::job::spec::VertexKind;
use crate::{CheckpointStatus, EngineOptions, Job, JobSpec, JobSummary, RunningJob, WasmEngine};

#[derive(Parser, Debug)]
#[command(
    name = "weir",
    version,
    about = "A stream processor whose operators are WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Where compiled components are cached [default: $WEIR_CACHE_DIR, $XDG_CACHE_HOME/weir or ~/.cache/weir].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile components on every run instead of caching them.
    #[arg(long, global = true)]
    no_cache: bool,
    /// Turn off epoch interruption, which enforces `limits.call_deadline`. Only to measure
    /// what it costs: a guest that loops forever is then never stopped.
    #[arg(long, global = true, hide = true)]
    no_epoch_interruption: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a job locally until its input is exhausted.
    Run {
        /// The job spec (TOML).
        job: PathBuf,
        /// Never draw live progress, even on a terminal.
        #[arg(long)]
        no_progress: bool,
        /// Also write the run's summary as JSON to this file.
        #[arg(long, value_name = "FILE")]
        summary_json: Option<PathBuf>,
        /// Start from this checkpoint directory (`.../<job>/chk-<n>`) instead of the newest one.
        #[arg(long, value_name = "PATH", conflicts_with = "fresh")]
        from_checkpoint: Option<PathBuf>,
        /// Ignore the job's checkpoints and start from the beginning of the input.
        #[arg(long)]
        fresh: bool,
    },
    /// Check a job spec and load its components without running it.
    Validate {
        /// The job spec (TOML).
        job: PathBuf,
    },
}

/// Entry point of the `weir` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let cache_dir = if cli.no_cache {
        None
    } else {
        cli.cache_dir.or_else(WasmEngine::default_cache_dir)
    };
    let engine = WasmEngine::with_options(
        cache_dir,
        EngineOptions {
            epoch_interruption: !cli.no_epoch_interruption,
        },
    )?;
    match cli.command {
        Command::Validate { job } => {
            let job = load(&job, &engine)?;
            let spec = job.spec();
            println!(
                "{}: job \"{}\" is valid ({} vertices, max_parallelism {})",
                spec.base_dir.display(),
                spec.name,
                spec.vertices.len(),
                spec.max_parallelism
            );
            Ok(())
        }
        Command::Run {
            job,
            no_progress,
            summary_json,
            from_checkpoint,
            fresh,
        } => {
            let job = load(&job, &engine)?;
            let from = match (from_checkpoint, fresh) {
                (Some(path), _) => RestoreFrom::Path(path),
                (None, true) => RestoreFrom::Fresh,
                (None, false) => RestoreFrom::Latest,
            };
            let running = job.start_from(from)?;
            // First Ctrl-C: stop the sources and let the job drain (sinks flush, summary
            // prints). Second: cancel.
            let control = running.control();
            ctrlc::set_handler(move || {
                if control.is_stopping() {
                    eprintln!("cancelling");
                    control.cancel();
                } else {
                    eprintln!("stopping: draining what is in flight (Ctrl-C again to cancel)");
                    control.stop();
                }
            })
            .context("cannot install the Ctrl-C handler")?;
            let progress = !no_progress && std::io::stderr().is_terminal();
            let summary = watch(running, progress)?;
            print_summary(&job, &summary);
            if let Some(path) = summary_json {
                write_summary_json(&path, &job, &summary)?;
            }
            Ok(())
        }
    }
}

fn load(path: &Path, engine: &WasmEngine) -> anyhow::Result<Job> {
    let spec = JobSpec::from_file(path)?;
    Ok(Job::new(spec, engine)?)
}

/// Waits for the job, drawing one progress line per vertex on a terminal.
fn watch(running: RunningJob, progress: bool) -> anyhow::Result<JobSummary> {
    if progress {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        let style = ProgressStyle::with_template("{prefix:>12} {msg}").context("progress style")?;
        let bars: Vec<ProgressBar> = running
            .metrics()
            .vertices
            .iter()
            .map(|v| {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(v.name.clone());
                bar
            })
            .collect();
        let checkpoints = running.metrics().checkpoint_status();
        let checkpoint_bar =
            (running.checkpointing() || checkpoints.restored_from.is_some()).then(|| {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix("checkpoints");
                bar
            });
        let mut last: Vec<(u64, u64)> = vec![(0, 0); bars.len()];
        let mut at = Instant::now();
        while !running.is_finished() {
            std::thread::sleep(Duration::from_millis(250));
            let dt = at.elapsed().as_secs_f64().max(1e-3);
            at = Instant::now();
            for ((bar, v), prev) in bars.iter().zip(&running.metrics().vertices).zip(&mut last) {
                let (i, o) = (
                    v.records_in.load(Ordering::Relaxed),
                    v.records_out.load(Ordering::Relaxed),
                );
                bar.set_message(format!(
                    "in {:>12} ({:>9}/s)  out {:>12} ({:>9}/s)",
                    i,
                    human((i - prev.0) as f64 / dt),
                    o,
                    human((o - prev.1) as f64 / dt)
                ));
                *prev = (i, o);
            }
            if let Some(bar) = &checkpoint_bar {
                bar.set_message(describe(&running.metrics().checkpoint_status()));
            }
        }
        multi.clear().ok();
    }
    Ok(running.wait()?)
}

/// One line about checkpoints and restarts.
fn describe(c: &CheckpointStatus) -> String {
    let mut s = format!("{} completed", c.completed);
    if c.failed > 0 {
        s += &format!(", {} failed", c.failed);
    }
    if let Some(last) = &c.last {
        s += &format!(
            "; last #{} took {} ms, {} bytes, alignment {} ms",
            last.id, last.duration_ms, last.size_bytes, last.alignment_ms
        );
    }
    if let Some(id) = c.restored_from {
        s += &format!("; restored from #{id}");
    }
    if c.restarts > 0 {
        s += &format!("; {} restart(s)", c.restarts);
    }
    s
}

fn human(rate: f64) -> String {
    match rate {
        r if r >= 1e6 => format!("{:.2}M", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// Prints the summary table; a closed stdout (`weir run ... | head`) is not an error.
fn print_summary(job: &Job, summary: &JobSummary) {
    use std::fmt::Write as _;
    let mut s = String::new();
    let secs = summary.duration.as_secs_f64();
    let _ = writeln!(s, "job \"{}\" finished in {secs:.2} s", job.spec().name);
    let _ = writeln!(
        s,
        "  {:<16} {:>8} {:>14} {:>14}",
        "vertex", "role", "records in", "records out"
    );
    for v in &summary.vertices {
        let _ = writeln!(
            s,
            "  {:<16} {:>8} {:>14} {:>14}",
            v.name, v.role, v.records_in, v.records_out
        );
    }
    if job.spec().checkpoint.is_some() || summary.checkpoints.restored_from.is_some() {
        let _ = writeln!(s, "  checkpoints: {}", describe(&summary.checkpoints));
    }
    for v in &job.spec().vertices {
        if let VertexKind::Sink(config) = &v.kind
            && let Some(location) = config.location(&job.spec().base_dir)
        {
            let _ = writeln!(s, "  output of sink \"{}\": {}", v.name, location.display());
        }
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), s.as_bytes());
}

fn write_summary_json(path: &Path, job: &Job, summary: &JobSummary) -> anyhow::Result<()> {
    let vertices: Vec<_> = summary
        .vertices
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v.name, "role": v.role,
                "records_in": v.records_in, "records_out": v.records_out,
            })
        })
        .collect();
    let c = &summary.checkpoints;
    let json = serde_json::json!({
        "job": job.spec().name,
        "duration_seconds": summary.duration.as_secs_f64(),
        "vertices": vertices,
        "checkpoints": {
            "completed": c.completed, "failed": c.failed,
            "restored_from": c.restored_from, "restarts": c.restarts,
        },
    });
    std::fs::write(path, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("cannot write the summary to {}", path.display()))
}
