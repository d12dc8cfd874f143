//! `cargo xtask services`: makes the services the tests talk to ready, installing and
//! starting them where needed. Also [`build_deps`]: the system libraries weir builds with.
//!
//! PostgreSQL on 127.0.0.1:5432 (user `postgres`, trust auth, database `test`), with
//! `max_prepared_transactions` of at least 64: the PostgreSQL sink commits in two phases
//! (`PREPARE TRANSACTION`), which PostgreSQL refuses while that setting is 0, its default.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::exec;

/// What the two-phase-commit tests need at least.
const PREPARED_TRANSACTIONS: u32 = 64;

pub fn run() -> Result<()> {
    if which("psql").is_none() {
        apt_install("postgresql-client")?;
    }
    if psql("select 1").is_err() {
        start_postgres()?;
    }
    let current: u32 = psql("show max_prepared_transactions")?
        .parse()
        .context("max_prepared_transactions is not a number")?;
    if current < PREPARED_TRANSACTIONS {
        println!(
            "PostgreSQL: max_prepared_transactions is {current}; setting it to \
             {PREPARED_TRANSACTIONS} and restarting the server"
        );
        psql(&format!(
            "ALTER SYSTEM SET max_prepared_transactions = {PREPARED_TRANSACTIONS}"
        ))?;
        exec(Command::new("service").args(["postgresql", "restart"]))
            .context("cannot restart PostgreSQL (run as root, or restart it yourself)")?;
        wait_for_postgres()?;
    }
    println!("PostgreSQL: ready (max_prepared_transactions >= {PREPARED_TRANSACTIONS})");
    Ok(())
}

/// Runs `sql` with `psql` against the test database; its output, trimmed.
fn psql(sql: &str) -> Result<String> {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "test",
            "-Atqc",
            sql,
        ])
        .output()
        .context("cannot run psql")?;
    if !out.status.success() {
        bail!(
            "psql -c {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn start_postgres() -> Result<()> {
    if which("pg_ctlcluster").is_none() {
        apt_install("postgresql")?;
    }
    println!("PostgreSQL: not answering on 127.0.0.1:5432; starting it");
    exec(Command::new("service").args(["postgresql", "start"])).context(
        "cannot start PostgreSQL; start it yourself (it must accept user postgres without a \
         password on 127.0.0.1:5432 and have a database `test`)",
    )?;
    wait_for_postgres()
}

fn wait_for_postgres() -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if psql("select 1").is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "PostgreSQL did not answer on 127.0.0.1:5432 within 60 s: the tests need user \
                 postgres without a password (trust auth for host 127.0.0.1 in pg_hba.conf) \
                 and a database `test`"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Installs what building weir needs from the system, unless it is there: Debian's RocksDB
/// (`librocksdb-dev`, linked instead of compiling RocksDB's C++, see `.cargo/config.toml`)
/// and libclang, with which the `librocksdb-sys` crate generates its bindings.
pub fn build_deps() -> Result<()> {
    let rocksdb = std::path::Path::new("/usr/include/rocksdb/c.h").is_file();
    let libclang = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
        .any(|e| {
            std::fs::read_dir(e.path().join("lib"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|f| f.file_name().to_string_lossy().starts_with("libclang.so"))
        });
    if !rocksdb {
        apt_install("librocksdb-dev")?;
    }
    if !libclang {
        apt_install("libclang-dev")?;
    }
    Ok(())
}

fn apt_install(package: &str) -> Result<()> {
    println!("installing {package}");
    exec(Command::new("apt-get").args(["install", "-y", package]))
        .with_context(|| format!("cannot install {package}; install it yourself"))
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|p| p.is_file())
}
