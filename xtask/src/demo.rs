//! `cargo xtask demo`: build everything, run the word count example, show its top words.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::{build_weir, exec, guests, repo};

/// How many words to show.
const TOP: usize = 10;

pub fn run() -> Result<()> {
    guests::rust()?;
    let weir = build_weir()?;
    let example = repo().join("examples").join("wordcount");
    exec(Command::new(&weir).arg("run").arg(example.join("job.toml")))?;

    let output = example.join("output");
    let counts = final_counts(&output)?;
    let mut top: Vec<(&str, u64)> = counts.iter().map(|(w, &n)| (w.as_str(), n)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    println!();
    println!("top {TOP} of {} distinct words:", counts.len());
    for (word, n) in top.iter().take(TOP) {
        println!("  {n:>6}  {word}");
    }
    println!(
        "full output (one `word<TAB>count` line per update): {}",
        output.display()
    );
    Ok(())
}

/// The final count per word: the count operator emits every update, so it is the largest
/// value seen for the word across the part files of `dir`.
fn final_counts(dir: &Path) -> Result<HashMap<String, u64>> {
    let mut counts = HashMap::new();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let parsed = line
                .split_once('\t')
                .and_then(|(word, n)| Some((word, n.parse::<u64>().ok()?)));
            let (word, n) = parsed.with_context(|| {
                format!(
                    "{}:{}: expected `word<TAB>count`, got {line:?}",
                    path.display(),
                    i + 1
                )
            })?;
            let best = counts.entry(word.to_owned()).or_insert(0);
            *best = n.max(*best);
        }
    }
    Ok(counts)
}
