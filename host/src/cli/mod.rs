//! The `weir` command line: `run` a job locally, `validate` a job spec, `serve` the HTTP API,
//! and the client commands that talk to a server.

mod build;
mod client;
mod serve;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use crossbeam_channel::RecvTimeoutError;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use weir::checkpoint::RestoreFrom;
use weir::{
    CheckpointStatus, EngineOptions, Job, JobControl, JobEnd, JobError, JobEvent, JobSpec,
    JobSummary, RunningJob, SavepointHandle, VertexKind, VertexSummary, WasmEngine,
};

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
    /// Run a job locally until its input is exhausted, or until Ctrl-C (or SIGTERM) stops it
    /// at a last checkpoint, from which the next run resumes. Exit codes: 0 finished, 1 failed,
    /// 3 stopped, 130 cancelled (a second Ctrl-C).
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
        #[arg(long, value_name = "PATH", conflicts_with_all = ["fresh", "from_savepoint"])]
        from_checkpoint: Option<PathBuf>,
        /// Start from this savepoint directory (of this job or another): its state, source
        /// positions and sink transactions, at any operator parallelism, on either state backend.
        #[arg(long, short = 's', value_name = "PATH", conflicts_with = "fresh")]
        from_savepoint: Option<PathBuf>,
        /// Let a restore drop the state of operators (by uid) the job no longer has, instead of
        /// refusing the checkpoint or savepoint.
        #[arg(long, short = 'n')]
        allow_non_restored_state: bool,
        /// Ignore the job's checkpoints and start from the beginning of the input.
        #[arg(long)]
        fresh: bool,
        /// On Ctrl-C or SIGTERM, stop with a savepoint into this directory (which must not
        /// exist yet) rather than at a plain checkpoint.
        #[arg(long, value_name = "DIR")]
        stop_savepoint: Option<PathBuf>,
    },
    /// Check a job spec without running it: load its components, open each operator with its
    /// config, and check that each sink can write where it is told to.
    Validate {
        /// The job spec (TOML).
        job: PathBuf,
    },
    /// Serve the HTTP API: upload components, run many jobs, savepoints, stop, cancel,
    /// rescale. Jobs that were running resume when it starts again. Ctrl-C stops every job at
    /// a checkpoint, to resume at the next start.
    Serve {
        /// Where to listen. Without --tokens only a loopback address is allowed.
        #[arg(long, default_value = "127.0.0.1:8086", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// Where the server keeps components, jobs, checkpoints and savepoints
        /// [default: $XDG_DATA_HOME/weir or ~/.local/share/weir].
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// A file of bearer tokens, one per line (`TOKEN` or `TOKEN read-only`).
        #[arg(long, value_name = "FILE")]
        tokens: Option<PathBuf>,
        /// The largest component an upload may be.
        #[arg(long, default_value = "100 MiB", value_name = "SIZE")]
        max_component_size: bytesize::ByteSize,
    },
    /// Upload a component to a server; prints its sha256.
    Upload {
        /// The .wasm file.
        wasm: PathBuf,
        /// A name a spec may refer to it by.
        #[arg(long)]
        name: Option<String>,
        /// Its version (`name@version` in a spec).
        #[arg(long, requires = "name")]
        version: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Submit a job spec to a server (local .wasm files it names are uploaded first).
    Submit {
        /// The job spec (TOML).
        job: PathBuf,
        /// Start from this savepoint directory (on the server's machine).
        #[arg(long, short = 's', value_name = "PATH")]
        from_savepoint: Option<PathBuf>,
        /// Let the savepoint's state of operators the job no longer has go.
        #[arg(long, short = 'n')]
        allow_non_restored_state: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List a server's jobs.
    List {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show a job's status: vertices, records, rates, checkpoints, operations.
    Status {
        /// The job's id.
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Take a savepoint of a job; waits for it and prints its directory.
    Savepoint {
        /// The job's id.
        id: String,
        /// An id for the request: asking again with it does not take a second savepoint.
        #[arg(long)]
        request_id: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stop a job with a savepoint (prints its directory); waits for the stop.
    Stop {
        /// The job's id.
        id: String,
        /// Stop at a checkpoint, without a savepoint.
        #[arg(long)]
        no_savepoint: bool,
        /// End the input first: the job processes what it read and finishes.
        #[arg(long)]
        drain: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Cancel a job: it ends at once, output after its last checkpoint is not committed.
    Cancel {
        /// The job's id.
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete a job that has ended: its record, checkpoints and state (its savepoints stay).
    Delete {
        /// The job's id.
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Change the parallelism of a job's operators (`count=4`); waits for the restart.
    Rescale {
        /// The job's id.
        id: String,
        /// `OPERATOR=PARALLELISM`, one or more.
        #[arg(required = true, value_parser = parse_parallelism)]
        parallelism: Vec<(String, u32)>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Replace the code (and config) of operators of a running job, keeping their state;
    /// waits until the upgrade is committed (or rolled back, which fails the command).
    Upgrade {
        /// The job's id.
        id: String,
        /// `UID=COMPONENT` (`sha256:<hex>`, `name@version` or `name` of an uploaded
        /// component, or a local .wasm file, uploaded first), one or more: all switch at the
        /// same barrier.
        #[arg(required = true, value_parser = parse_assignment)]
        operators: Vec<(String, String)>,
        /// `UID=JSON`: a new `config` for an operator.
        #[arg(long = "config", value_parser = parse_assignment)]
        configs: Vec<(String, String)>,
        /// How long the new code runs without failure before the upgrade is committed (no
        /// checkpoint is taken meanwhile).
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        probation: std::time::Duration,
        /// Records the new code handles before the upgrade is committed.
        #[arg(long, default_value_t = 0)]
        probation_records: u64,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Go back to a job's previous code: roll back the upgrade on probation, or undo the last
    /// committed one.
    Rollback {
        /// The job's id.
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show a job's failures.
    Exceptions {
        /// The job's id.
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List a server's components.
    Components {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Make a new operator project: the operator (a keyed count), its unit test and a job
    /// spec that runs it.
    New {
        /// The project's (and the operator's) name: letters, digits and _.
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum)]
        lang: build::Lang,
        /// Where to create the project's directory.
        #[arg(long, default_value = ".", value_name = "DIR")]
        dir: PathBuf,
    },
    /// Build an operator project (Rust: cargo; Python: componentize-py; JavaScript and
    /// TypeScript: esbuild and componentize-js; the tools are installed on first use) into a
    /// component, then check it loads and instantiates as a job would; prints its size and
    /// compile and instantiation times.
    Build {
        /// The project directory, or a Python (.py), JavaScript (.js) or TypeScript (.ts)
        /// module.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// The module that exports the operator (default: `module` under [tool.weir] in
        /// pyproject.toml, `weir.module` or `main` in package.json).
        #[arg(long)]
        module: Option<String>,
        /// Where to write the component [default: <project>/build/<name>.wasm].
        #[arg(long, short = 'o', value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print the API's OpenAPI document.
    #[command(hide = true)]
    Openapi,
}

/// Which server a client command talks to.
#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// The server's address.
    #[arg(long, env = "WEIR_SERVER", default_value = "http://127.0.0.1:8086")]
    server: String,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

impl ServerArgs {
    fn client(&self) -> client::Client {
        client::Client::new(&self.server, std::env::var("WEIR_TOKEN").ok())
    }
}

fn parse_parallelism(arg: &str) -> Result<(String, u32), String> {
    let (name, p) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not OPERATOR=PARALLELISM"))?;
    let p = p
        .parse()
        .map_err(|_| format!("{p:?} is not a parallelism (a positive integer)"))?;
    Ok((name.to_string(), p))
}

fn parse_assignment(arg: &str) -> Result<(String, String), String> {
    let (uid, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not UID=VALUE"))?;
    Ok((uid.to_string(), value.to_string()))
}

/// `$XDG_DATA_HOME/weir`, else `~/.local/share/weir`.
fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return Ok(PathBuf::from(dir).join("weir"));
    }
    match std::env::var_os("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/weir")),
        None => anyhow::bail!("no HOME or XDG_DATA_HOME to put the data in; give --data-dir"),
    }
}

/// Runs a client command.
fn client_command(command: Command) -> anyhow::Result<ExitCode> {
    use weir::service::api::{OperatorUpgradeRequest, RescaleRequest, StopRequest, UpgradeRequest};
    match command {
        Command::Upload {
            wasm,
            name,
            version,
            server,
        } => {
            let info = server
                .client()
                .upload(&wasm, name.as_deref(), version.as_deref())?;
            client::print(server.json, &info, |c| format!("sha256:{}\n", c.sha256));
        }
        Command::Submit {
            job,
            from_savepoint,
            allow_non_restored_state,
            server,
        } => {
            let job = server
                .client()
                .submit(&job, from_savepoint, allow_non_restored_state)?;
            client::print(server.json, &job, |j| format!("{}\n", j.id));
        }
        Command::List { server } => {
            let jobs = server.client().list()?;
            client::print(server.json, &jobs, client::jobs_table);
        }
        Command::Status { id, server } => {
            let details = server.client().status(&id)?;
            client::print(server.json, &details, client::details_table);
        }
        Command::Savepoint {
            id,
            request_id,
            server,
        } => {
            let op = server.client().savepoint(&id, request_id)?;
            client::print(server.json, &op, |o| {
                format!("{}\n", o.savepoint.clone().unwrap_or_default())
            });
        }
        Command::Stop {
            id,
            no_savepoint,
            drain,
            server,
        } => {
            let request = StopRequest {
                savepoint: !no_savepoint,
                drain,
                request_id: None,
            };
            let op = server.client().stop(&id, request)?;
            client::print(server.json, &op, |o| match &o.savepoint {
                Some(p) => format!("{p}\n"),
                None => "stopped\n".into(),
            });
        }
        Command::Cancel { id, server } => {
            let job = server.client().cancel(&id)?;
            client::print(server.json, &job, |j| {
                format!("job {} is cancelling\n", j.id)
            });
        }
        Command::Delete { id, server } => {
            server.client().delete_job(&id)?;
            client::print(server.json, &serde_json::json!({ "deleted": id }), |_| {
                format!("job {id} deleted\n")
            });
        }
        Command::Rescale {
            id,
            parallelism,
            server,
        } => {
            let request = RescaleRequest {
                parallelism: parallelism.into_iter().collect(),
                request_id: None,
            };
            let op = server.client().rescale(&id, request)?;
            client::print(server.json, &op, |_| "rescaled\n".into());
        }
        Command::Upgrade {
            id,
            operators,
            configs,
            probation,
            probation_records,
            server,
        } => {
            let mut configs: std::collections::BTreeMap<String, serde_json::Value> = configs
                .into_iter()
                .map(|(uid, json)| {
                    let config = serde_json::from_str(&json)
                        .with_context(|| format!("--config {uid}=...: not JSON"))?;
                    Ok((uid, config))
                })
                .collect::<anyhow::Result<_>>()?;
            let client = server.client();
            let here = std::env::current_dir()?;
            let request = UpgradeRequest {
                operators: operators
                    .into_iter()
                    .map(|(uid, component)| {
                        let component = (client.uploaded(&component, &here))
                            .with_context(|| format!("operator uid {uid:?}"))?
                            .unwrap_or(component);
                        Ok(OperatorUpgradeRequest {
                            config: configs.remove(&uid),
                            limits: None,
                            uid,
                            component,
                        })
                    })
                    .collect::<anyhow::Result<_>>()?,
                probation_ms: Some(probation.as_millis() as u64),
                probation_records: Some(probation_records),
                request_id: None,
            };
            if let Some(uid) = configs.keys().next() {
                anyhow::bail!("--config {uid}=...: the upgrade names no operator {uid}");
            }
            let op = client.upgrade(&id, request)?;
            client::print(server.json, &op, |_| "upgraded\n".into());
        }
        Command::Rollback { id, server } => {
            let op = server.client().roll_back(&id)?;
            client::print(server.json, &op, |_| "rolled back\n".into());
        }
        Command::Exceptions { id, server } => {
            let e = server.client().exceptions(&id)?;
            client::print(server.json, &e, client::exceptions_table);
        }
        Command::Components { server } => {
            let c = server.client().components()?;
            client::print(server.json, &c, client::components_table);
        }
        _ => unreachable!("not a client command"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Exit codes of `weir run` besides 0 (finished) and 1 (failed); clap uses 2 for bad usage.
const EXIT_STOPPED: u8 = 3;
/// As a process ended by SIGINT would report it.
const EXIT_CANCELLED: u8 = 130;

/// Entry point of the `weir` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes, each said once: a job's failure already quotes the error that caused it,
/// which is also its source.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
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

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    // Before anything slow (the engine, compiling components), so that Ctrl-C or SIGTERM at
    // almost any moment stops the job rather than killing the process. First: stop at a last
    // checkpoint; second: cancel.
    let control = JobControl::new();
    // The savepoint a stop takes, with `--stop-savepoint`.
    let stop_savepoint: Arc<Mutex<Option<SavepointHandle>>> = Arc::default();
    if let Command::Run {
        stop_savepoint: dir,
        ..
    } = &cli.command
    {
        let (handler, dir, handle) = (control.clone(), dir.clone(), Arc::clone(&stop_savepoint));
        ctrlc::set_handler(move || {
            if handler.is_stopping() {
                eprintln!("weir: cancelling");
                handler.cancel();
            } else if let Some(dir) = &dir {
                eprintln!(
                    "weir: stopping with a savepoint into {} (Ctrl-C again to cancel)",
                    dir.display()
                );
                let taken = handler.stop_with_savepoint(dir, false);
                *handle.lock().unwrap_or_else(|p| p.into_inner()) = Some(taken);
            } else {
                eprintln!("weir: stopping (Ctrl-C again to cancel)");
                handler.stop();
            }
        })
        .context("cannot install the Ctrl-C handler")?;
    }
    match cli.command {
        Command::Openapi => {
            println!("{}", serve::routes::document());
            return Ok(ExitCode::SUCCESS);
        }
        Command::Run { .. }
        | Command::Validate { .. }
        | Command::Serve { .. }
        | Command::New { .. }
        | Command::Build { .. } => {}
        command => return client_command(command),
    }
    // Where `weir build` keeps its tools, also with --no-cache.
    let tools_dir = cli.cache_dir.clone().or_else(WasmEngine::default_cache_dir);
    let tools_dir = || {
        tools_dir
            .clone()
            .context("no HOME, XDG_CACHE_HOME or WEIR_CACHE_DIR for weir's tools; give --cache-dir")
    };
    if let Command::New { name, lang, dir } = &cli.command {
        build::new_project(*lang, name, dir, &tools_dir()?)?;
        return Ok(ExitCode::SUCCESS);
    }
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
        Command::Build { path, module, out } => {
            build::build(
                &path,
                module.as_deref(),
                out.as_deref(),
                &tools_dir()?,
                &engine,
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            listen,
            data_dir,
            tokens,
            max_component_size,
        } => {
            let data_dir = match data_dir {
                Some(d) => d,
                None => default_data_dir()?,
            };
            serve::serve(
                serve::ServeOptions {
                    listen,
                    data_dir,
                    tokens,
                    max_component_size: max_component_size.as_u64(),
                },
                engine,
            )
        }
        Command::Validate { job: path } => {
            let job = load(&path, &engine)?;
            job.check()?;
            let spec = job.spec();
            println!(
                "{}: job \"{}\" is valid ({} vertices, max_parallelism {}); every operator \
                 opened with its config and every sink can write",
                path.display(),
                spec.name,
                spec.vertices.len(),
                spec.max_parallelism
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            job: path,
            no_progress,
            summary_json,
            from_checkpoint,
            from_savepoint,
            allow_non_restored_state,
            fresh,
            stop_savepoint: stop_dir,
        } => {
            let start = || -> anyhow::Result<Option<(Job, RunningJob)>> {
                let spec = JobSpec::from_file(&path)?;
                if let Some(dir) = &stop_dir {
                    check_stop_savepoint(dir, &spec)?;
                }
                let Some(job) = load_unless_stopped(spec, &engine, &control)? else {
                    return Ok(None);
                };
                let job = job.allow_non_restored_state(allow_non_restored_state);
                let from = match (from_checkpoint.or(from_savepoint), fresh) {
                    (Some(dir), _) => RestoreFrom::Path(dir),
                    (None, true) => RestoreFrom::Fresh,
                    (None, false) => RestoreFrom::Latest,
                };
                let running = job.start_controlled(from, control.clone())?;
                Ok(Some((job, running)))
            };
            let (job, running) = match start() {
                Ok(Some(started)) => started,
                Ok(None) => {
                    let savepoint = match stop_dir {
                        Some(_) => " (and no savepoint taken)",
                        None => "",
                    };
                    eprintln!("weir: stopped before the job started; nothing changed{savepoint}");
                    return Ok(ExitCode::from(EXIT_STOPPED));
                }
                Err(e) if matches!(e.downcast_ref(), Some(JobError::Cancelled)) => {
                    eprintln!("weir: cancelled before the job started; nothing changed");
                    return Ok(ExitCode::from(EXIT_CANCELLED));
                }
                Err(e) => {
                    if let Some(out) = &summary_json {
                        let json = serde_json::json!({
                            "status": "failed", "error": report(&e), "vertices": [],
                        });
                        std::fs::write(out, serde_json::to_vec_pretty(&json)?).with_context(
                            || format!("cannot write the summary to {}", out.display()),
                        )?;
                    }
                    return Err(e);
                }
            };
            let progress = !no_progress && std::io::stderr().is_terminal();
            let (vertices, result) = watch(running, job.spec(), progress)?;
            let taken = stop_savepoint
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(taken) = taken {
                match taken.wait() {
                    Ok(savepoint) => eprintln!(
                        "weir: savepoint {} taken ({} bytes); resume with `weir run -s {} {}`",
                        savepoint.path.display(),
                        savepoint.size_bytes,
                        savepoint.path.display(),
                        path.display()
                    ),
                    Err(e) => eprintln!("weir: the stop took no savepoint: {e}"),
                }
            }
            if let Some(out) = &summary_json {
                write_summary_json(out, &job, &vertices, &result)?;
            }
            match result {
                Ok(summary) => {
                    print_summary(&job, &path, &summary);
                    Ok(ExitCode::from(match summary.end {
                        JobEnd::Stopped { .. } => EXIT_STOPPED,
                        JobEnd::Finished | JobEnd::AlreadyFinished(_) => 0,
                    }))
                }
                Err(JobError::Cancelled) => {
                    eprintln!(
                        "weir: job \"{}\" cancelled; output after its last checkpoint is not \
                         committed, and `weir run {}` resumes from that checkpoint",
                        job.spec().name,
                        path.display()
                    );
                    Ok(ExitCode::from(EXIT_CANCELLED))
                }
                Err(e) => Err(e.into()),
            }
        }
        _ => unreachable!("client commands are dispatched above"),
    }
}

/// `--stop-savepoint DIR`, checked before the job starts rather than at the Ctrl-C that
/// takes it: the job must take checkpoints (a savepoint is one) and `DIR` must be new and
/// outside the job's checkpoints.
fn check_stop_savepoint(dir: &Path, spec: &JobSpec) -> anyhow::Result<()> {
    let Some(checkpoint) = &spec.checkpoint else {
        anyhow::bail!(
            "--stop-savepoint {}: job \"{}\" takes no checkpoints, and a savepoint is one; add \
             a [checkpoint] table with a dir to its spec, or run without --stop-savepoint",
            dir.display(),
            spec.name
        );
    };
    let checkpoints = spec.base_dir.join(&checkpoint.dir).join(&spec.name);
    if weir::checkpoint::is_inside(dir, &checkpoints) {
        anyhow::bail!(
            "--stop-savepoint {}: it is inside the job's checkpoint directory {}, whose \
             retention would delete it; name one outside it",
            dir.display(),
            checkpoints.display()
        );
    }
    let state = spec.base_dir.join(&spec.state.dir);
    if spec.state.backend == weir::BackendKind::RocksDb && weir::checkpoint::is_inside(dir, &state)
    {
        anyhow::bail!(
            "--stop-savepoint {}: it is inside the RocksDB state directory {}, which a start \
             of the job clears; name one outside it",
            dir.display(),
            state.display()
        );
    }
    let taken = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(_) => dir.exists() && !dir.is_dir(),
    };
    if taken {
        anyhow::bail!(
            "--stop-savepoint {}: it exists and is not an empty directory; name a new one",
            dir.display()
        );
    }
    weir::connectors::check_writable(dir).with_context(|| {
        format!(
            "--stop-savepoint {}: weir cannot create it or write into it; name a directory \
             it can write",
            dir.display()
        )
    })
}

fn load(path: &Path, engine: &WasmEngine) -> anyhow::Result<Job> {
    let spec = JobSpec::from_file(path)?;
    Ok(Job::new(spec, engine)?)
}

/// The job of `spec` for `weir run`: its components are compiled on a thread of their own
/// (seconds for a Python or JavaScript component the cache does not hold), so that a Ctrl-C
/// meanwhile ends weir at once, with nothing started (`None`), rather than when the compiling
/// is done. A load that takes longer than a second says what it is doing.
fn load_unless_stopped(
    spec: JobSpec,
    engine: &Arc<WasmEngine>,
    control: &JobControl,
) -> anyhow::Result<Option<Job>> {
    let name = spec.name.clone();
    let (done, loaded) = crossbeam_channel::bounded(1);
    let engine = Arc::clone(engine);
    std::thread::Builder::new()
        .name("load".into())
        .spawn(move || drop(done.send(Job::new(spec, &engine))))
        .context("cannot start a thread to load the job")?;
    let announce_at = Instant::now() + Duration::from_secs(1);
    let mut announced = false;
    loop {
        match loaded.recv_timeout(Duration::from_millis(20)) {
            Ok(job) => return Ok(Some(job?)),
            Err(RecvTimeoutError::Timeout) if control.is_stopping() => return Ok(None),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                anyhow::bail!("loading job \"{name}\" failed: its thread panicked")
            }
        }
        if !announced && Instant::now() >= announce_at {
            eprintln!("weir: compiling the WebAssembly components of job \"{name}\"");
            announced = true;
        }
    }
}

/// Waits for the job, printing what happens in its life and, on a terminal, one progress
/// line per vertex. Returns the vertices' final counts and how the job ended.
fn watch(
    running: RunningJob,
    spec: &JobSpec,
    progress: bool,
) -> anyhow::Result<(Vec<VertexSummary>, Result<JobSummary, JobError>)> {
    let multi = MultiProgress::with_draw_target(if progress {
        ProgressDrawTarget::stderr_with_hz(4)
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:>12} {msg}").context("progress style")?;
    let bar = |prefix: &str| {
        let bar = multi.add(ProgressBar::new_spinner());
        bar.set_style(style.clone());
        bar.set_prefix(prefix.to_owned());
        bar
    };
    let bars: Vec<ProgressBar> = running
        .metrics()
        .vertices
        .iter()
        .map(|v| bar(&v.name))
        .collect();
    let checkpoint_bar = running.checkpointing().then(|| bar("checkpoints"));
    let events = running.events();
    let mut last: Vec<(u64, u64)> = vec![(0, 0); bars.len()];
    let mut at = Instant::now();
    loop {
        match events.recv_timeout(Duration::from_millis(250)) {
            Ok(event) => {
                // A failure is told once: with the restart, or as the job's end.
                let Some(line) = describe_event(spec, &event) else {
                    continue;
                };
                if progress {
                    multi.println(line).ok();
                } else {
                    eprintln!("{line}");
                }
            }
            // The job has ended: its supervisor dropped the sending side.
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if !progress || at.elapsed() < Duration::from_millis(250) {
            continue;
        }
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
    let vertices = running.metrics().summaries();
    Ok((vertices, running.wait()))
}

/// One line about an event of the job's life, for stderr.
fn describe_event(spec: &JobSpec, event: &JobEvent) -> Option<String> {
    let job = &spec.name;
    Some(match event {
        JobEvent::Failing { .. } => return None,
        JobEvent::Starting {
            restored_from: None,
            restart: 0,
        } => format!("weir: job \"{job}\" starts from the beginning of its input"),
        JobEvent::Starting {
            restored_from: Some((id, dir)),
            restart: 0,
        } => format!(
            "weir: job \"{job}\" resumes from checkpoint {id} ({})",
            dir.display()
        ),
        JobEvent::Starting {
            restored_from,
            restart,
        } => match restored_from {
            Some((id, _)) => {
                format!("weir: job \"{job}\" restart {restart}: resumes from checkpoint {id}")
            }
            None => format!(
                "weir: job \"{job}\" restart {restart}: starts from the beginning of its input \
                 (no checkpoint had completed)"
            ),
        },
        JobEvent::Stopping {
            checkpoint: Some(id),
        } => format!(
            "weir: job \"{job}\" stops at checkpoint {id}: its sources stopped reading, and \
             the checkpoint commits what they read"
        ),
        JobEvent::Stopping { checkpoint: None } if spec.checkpoint.is_some() => format!(
            "weir: job \"{job}\" stops: its input is already read to the end, so it finishes"
        ),
        JobEvent::Stopping { checkpoint: None } => format!(
            "weir: job \"{job}\" stops: without [checkpoint] its sources end their input early \
             and it processes what they read"
        ),
        JobEvent::Restarting {
            failure,
            delay,
            restart,
        } => format!(
            "weir: job \"{job}\" failed: {failure}; restarting in {delay:.1?} (restart {restart})"
        ),
    })
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

/// How long a job ran, as precisely as a reader cares: "4.2 ms", "350 ms", "2.31 s".
fn took(d: Duration) -> String {
    match d.as_secs_f64() * 1e3 {
        ms if ms < 9.95 => format!("{ms:.1} ms"),
        ms if ms < 999.5 => format!("{ms:.0} ms"),
        ms => format!("{:.2} s", ms / 1e3),
    }
}

fn human(rate: f64) -> String {
    match rate {
        r if r >= 1e6 => format!("{:.2}M", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    }
}

/// Prints how the job ended and the summary table; a closed stdout (`weir run ... | head`)
/// is not an error.
fn print_summary(job: &Job, path: &Path, summary: &JobSummary) {
    use std::fmt::Write as _;
    let mut s = String::new();
    let spec = job.spec();
    let name = &spec.name;
    let took = took(summary.duration);
    let resume = format!("`weir run {}` resumes it", path.display());
    let _ = match &summary.end {
        JobEnd::Finished => writeln!(s, "job \"{name}\" finished in {took}"),
        JobEnd::AlreadyFinished(c) => writeln!(
            s,
            "job \"{name}\" finished earlier, at {} (checkpoint {}); nothing to do (`weir run \
             --fresh {}` runs it again from the beginning)",
            humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_millis(c.finished_ms)
            ),
            c.checkpoint,
            path.display()
        ),
        JobEnd::Stopped {
            checkpoint: Some(id),
            problem: None,
        } => writeln!(
            s,
            "job \"{name}\" stopped at checkpoint {id} after {took}; {resume}"
        ),
        JobEnd::Stopped {
            checkpoint,
            problem: Some(problem),
        } => {
            let at = match checkpoint {
                Some(id) => format!("at its last checkpoint, {id}"),
                None => "before its first checkpoint".to_owned(),
            };
            writeln!(
                s,
                "job \"{name}\" stopped {at}, after {took}, as it could not take a checkpoint \
                 to stop at ({problem}); output after that checkpoint is not committed; {resume}"
            )
        }
        JobEnd::Stopped {
            checkpoint: None,
            problem: None,
        } => writeln!(
            s,
            "job \"{name}\" stopped after {took}: its sources ended their input early and \
             what they read was processed (without [checkpoint] a stopped job cannot resume)"
        ),
    };
    if !matches!(summary.end, JobEnd::AlreadyFinished(_)) {
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
        if spec.checkpoint.is_some() || summary.checkpoints.restored_from.is_some() {
            let _ = writeln!(s, "  checkpoints: {}", describe(&summary.checkpoints));
        }
    }
    for v in &spec.vertices {
        if let VertexKind::Sink(config) = &v.kind
            && let Some(location) = config.location(&spec.base_dir)
        {
            let _ = writeln!(s, "  output of sink \"{}\": {}", v.name, location.display());
        }
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), s.as_bytes());
}

/// The run's summary as JSON: `status` is `finished`, `stopped`, `failed` or `cancelled`.
fn write_summary_json(
    path: &Path,
    job: &Job,
    vertices: &[VertexSummary],
    result: &Result<JobSummary, JobError>,
) -> anyhow::Result<()> {
    let vertices: Vec<_> = vertices
        .iter()
        .map(|v| {
            serde_json::json!({
                "name": v.name, "role": v.role,
                "records_in": v.records_in, "records_out": v.records_out,
                "watermark": v.watermark,
                "event_time_lag": v.event_time_lag,
                "guest": v.guest,
            })
        })
        .collect();
    let mut json = serde_json::json!({
        "job": job.spec().name,
        "vertices": vertices,
    });
    match result {
        Ok(summary) => {
            let c = &summary.checkpoints;
            json["duration_seconds"] = summary.duration.as_secs_f64().into();
            json["checkpoints"] = serde_json::json!({
                "completed": c.completed, "failed": c.failed,
                "restored_from": c.restored_from, "restarts": c.restarts,
            });
            match &summary.end {
                JobEnd::Finished => json["status"] = "finished".into(),
                JobEnd::AlreadyFinished(c) => {
                    json["status"] = "finished".into();
                    json["finished_earlier"] = serde_json::to_value(c)?;
                }
                JobEnd::Stopped {
                    checkpoint,
                    problem,
                } => {
                    json["status"] = "stopped".into();
                    json["stopped_at_checkpoint"] = (*checkpoint).into();
                    if let Some(p) = problem {
                        json["problem"] = p.as_str().into();
                    }
                }
            }
        }
        Err(JobError::Cancelled) => json["status"] = "cancelled".into(),
        Err(e) => {
            json["status"] = "failed".into();
            json["error"] = e.to_string().into();
        }
    }
    std::fs::write(path, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("cannot write the summary to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_time_reads_in_milliseconds_below_a_second() {
        let took = |ms: f64| took(Duration::from_secs_f64(ms / 1e3));
        assert_eq!(took(0.42), "0.4 ms");
        assert_eq!(took(4.24), "4.2 ms");
        assert_eq!(took(9.96), "10 ms");
        assert_eq!(took(350.0), "350 ms");
        assert_eq!(took(999.6), "1.00 s");
        assert_eq!(took(2314.0), "2.31 s");
    }
}
