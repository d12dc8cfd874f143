//! `cargo xtask test`: everything CI runs, in order, stopping at the first failure.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::{api, build_weir, cargo, exec, guests, services};

pub fn run() -> Result<()> {
    let steps: [(&str, &dyn Fn() -> Result<()>); 10] = [
        ("deps", &services::build_deps),
        ("fmt", &|| exec(cargo().args(["fmt", "--all", "--check"]))),
        ("clippy", &|| {
            exec(cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))
        }),
        ("guests", &guests::run),
        ("pytest", &guests::pytest),
        ("node-test", &guests::node_test),
        ("build", &|| build_weir().map(drop)),
        ("services", &services::run),
        ("test", &|| {
            exec(cargo().args(["test", "--release", "--workspace"]))
        }),
        ("fuzz-api", &|| api::fuzz(&[])),
    ];
    let mut times: Vec<(&str, Duration)> = Vec::new();
    for (name, step) in steps {
        println!("==> {name}");
        let start = Instant::now();
        let result = step();
        let took = start.elapsed();
        println!(
            "<== {name}: {} in {}",
            if result.is_ok() { "ok" } else { "FAILED" },
            secs(took)
        );
        result.with_context(|| format!("step `{name}` failed"))?;
        times.push((name, took));
    }
    println!();
    for (name, took) in &times {
        println!("  {name:<8} {:>9}", secs(*took));
    }
    let total: Duration = times.iter().map(|(_, t)| *t).sum();
    println!("  {:<8} {:>9}", "total", secs(total));
    Ok(())
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
