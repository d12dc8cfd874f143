//! `cargo xtask guests`: build every guest component and copy it to `build/operators/`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::{cargo, exec, repo, target_dir};

/// The target guests are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The cargo profile guests are built with (see the root Cargo.toml).
const PROFILE: &str = "guest";

/// Every guest crate, by package name; its component is `<name with _ for ->.wasm`.
pub const PACKAGES: &[&str] = &[
    "wordcount-split",
    "wordcount-count",
    "clickstream-parse",
    "clickstream-profile",
    "orders-parse",
    "orders-unpaid",
    "bench-scorer-parse",
    "bench-scorer-score",
    "bench-topn",
    "bench-events-parse",
    "bench-window-count",
    "weir-test-state-probe",
    "weir-test-poison",
    "weir-test-other-world",
    "weir-test-wrong-version",
    "weir-test-keyer",
    "weir-test-tally",
    "weir-test-recount",
    "weir-test-hostile",
    "weir-test-unknown-import",
    "weir-test-windows",
    "weir-test-window-aggregate",
    "weir-test-window-process",
];

/// Where the components are copied to.
pub fn operators_dir() -> PathBuf {
    repo().join("build").join("operators")
}

pub fn run() -> Result<()> {
    ensure_target()?;
    let mut build = cargo();
    build.args(["build", "--profile", PROFILE, "--target", TARGET]);
    for package in PACKAGES {
        build.args(["-p", package]);
    }
    exec(&mut build)?;

    let built = target_dir()?.join(TARGET).join(PROFILE);
    let dest = operators_dir();
    std::fs::create_dir_all(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    for package in PACKAGES {
        let file = format!("{}.wasm", package.replace('-', "_"));
        let (from, to) = (built.join(&file), dest.join(&file));
        std::fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    println!("{} components in {}", PACKAGES.len(), dest.display());
    Ok(())
}

/// Installs the guest target with rustup unless it is there already.
fn ensure_target() -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("cannot run `rustup target list --installed`; is rustup installed?")?;
    let installed = String::from_utf8_lossy(&out.stdout);
    if !installed.lines().any(|l| l.trim() == TARGET) {
        println!("installing the {TARGET} target");
        exec(Command::new("rustup").args(["target", "add", TARGET]))?;
    }
    Ok(())
}
