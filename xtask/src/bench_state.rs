//! `cargo xtask bench-state [--keys N]...`: the state-backend benchmark (memory vs RocksDB:
//! throughput, full vs incremental checkpoints after 1% of the keys changed, restore time),
//! `host/benches/state.rs`, over 1M and 10M keys by default.

use anyhow::Result;

use crate::{cargo, exec, services, target_dir};

pub fn run(args: &[String]) -> Result<()> {
    services::build_deps()?;
    let dir = target_dir()?.join("bench-state");
    exec(
        cargo()
            .args(["bench", "-p", "weir", "--bench", "state", "--"])
            .args(args)
            .arg("--dir")
            .arg(&dir),
    )
}
