//! The HTTP API's document and its fuzzing:
//!
//! - `cargo xtask openapi` writes `docs/openapi.json` from the server's handlers (a unit test
//!   of the binary checks the committed one is current);
//! - `cargo xtask fuzz-api [--cases N]` starts `weir serve` with a token and runs schemathesis
//!   (installed into a virtualenv in the target directory) against its document: no answer may
//!   be a 5xx or break the document.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::{build_weir, exec, repo, target_dir};

/// The schemathesis release the CI runs (its checks and options change between majors).
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
const TOKEN: &str = "fuzz-token-0123456789abcdef";

pub fn openapi() -> Result<()> {
    let weir = build_weir()?;
    let out = Command::new(&weir)
        .arg("openapi")
        .output()
        .with_context(|| format!("cannot run {}", weir.display()))?;
    if !out.status.success() {
        bail!(
            "weir openapi failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = repo().join("docs").join("openapi.json");
    std::fs::create_dir_all(path.parent().expect("docs/"))?;
    std::fs::write(&path, &out.stdout)?;
    println!("wrote {}", path.display());
    Ok(())
}

pub fn fuzz(args: &[String]) -> Result<()> {
    let cases = match args {
        [] => 100,
        [flag, n] if flag == "--cases" => n.parse().context("--cases takes a number")?,
        _ => bail!("usage: cargo xtask fuzz-api [--cases N]"),
    };
    let weir = build_weir()?;
    let venv = target_dir()?.join("schemathesis-venv");
    let st = venv.join("bin").join("st");
    if !st.exists() {
        exec(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        exec(Command::new(venv.join("bin").join("pip")).args([
            "install",
            "--quiet",
            SCHEMATHESIS,
        ]))?;
    }
    let work = tempfile::tempdir()?;
    let server = Served::start(
        &weir,
        work.path(),
        TOKEN,
        &["--max-component-size", "1 MiB"],
    )?;
    let addr = &server.addr;
    let result = exec(
        Command::new(&st)
            .arg("run")
            .arg(format!("http://{addr}/openapi.json"))
            .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,\
                 response_schema_conformance",
            ])
            .args(["--max-examples", &cases.to_string()])
            .args(["--seed", "1"])
            .current_dir(work.path()),
    );
    drop(server);
    result
}

/// A `weir serve` on a free port of loopback, its data in `<dir>/data` and `token` its one
/// token; killed when dropped.
pub(crate) struct Served {
    child: Child,
    /// `host:port`.
    pub(crate) addr: String,
}

impl Served {
    pub(crate) fn start(weir: &Path, dir: &Path, token: &str, extra: &[&str]) -> Result<Served> {
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, format!("{token}\n"))?;
        let mut child = Command::new(weir)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"))
            .arg("--tokens")
            .arg(&tokens)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start weir serve")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string);
        let served = Served {
            child,
            addr: addr.unwrap_or_default(),
        };
        if served.addr.is_empty() {
            bail!("weir serve did not say where it listens: {line:?}");
        }
        Ok(served)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
