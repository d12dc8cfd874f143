//! The compiled-component cache: one `.cwasm` per component content, reused across runs, and
//! a damaged entry is compiled again rather than trusted.

use std::path::Path;
use std::process::Command;

use crate::support::{Workspace, wasm, weir_bin};

fn validate(cache: &Path, spec: &Path) {
    let out = Command::new(weir_bin())
        .arg("--cache-dir")
        .arg(cache)
        .arg("validate")
        .arg(spec)
        .output()
        .expect("cannot start the weir binary");
    assert!(
        out.status.success(),
        "weir validate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn entries(cache: &Path) -> Vec<(String, std::time::SystemTime, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(cache)
        .expect("the cache directory exists")
        .map(|e| {
            let e = e.expect("a directory entry");
            let meta = e.metadata().expect("metadata");
            (
                e.file_name().to_string_lossy().into_owned(),
                meta.modified().expect("mtime"),
                meta.len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn components_are_compiled_once_per_content_and_damaged_entries_are_replaced() {
    let ws = Workspace::new();
    let cache = ws.path("cache");
    // Two operators with the same component: one cache entry.
    let spec = ws.write(
        "job.toml",
        format!(
            r#"
[[source]]
name = "gen"
type = "generator"
mode = "keyed_words"
count = 10

[[operator]]
name = "a"
uid = "a"
{count}
input = "gen"
edge = "key_by"

[[operator]]
name = "b"
uid = "b"
{count}
input = "a"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "b"
"#,
            count = wasm("wordcount_count"),
        ),
    );
    validate(&cache, &spec);
    let first = entries(&cache);
    assert_eq!(first.len(), 1, "one entry per component content: {first:?}");
    assert!(
        first[0].0.ends_with(".cwasm") && first[0].2 > 0,
        "{first:?}"
    );

    validate(&cache, &spec);
    assert_eq!(
        entries(&cache),
        first,
        "a second run reuses the entry untouched"
    );

    // A truncated entry is not loaded; the component is compiled and cached again.
    let file = cache.join(&first[0].0);
    std::fs::write(&file, b"not a compiled component").expect("damage the entry");
    validate(&cache, &spec);
    let again = entries(&cache);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].2, first[0].2, "the entry was rewritten whole");
}

#[test]
fn a_file_that_is_no_weir_operator_is_refused_before_it_is_compiled() {
    let ws = Workspace::new();
    let cache = ws.path("cache");
    let spec = ws.write(
        "job.toml",
        format!(
            "[[source]]\nname = \"gen\"\ntype = \"generator\"\ncount = 10\n\n\
             [[operator]]\nname = \"other\"\nuid = \"other\"\n{}\ninput = \"gen\"\n\n\
             [[sink]]\nname = \"out\"\ntype = \"discard\"\ninput = \"other\"\n",
            wasm("weir_test_other_world")
        ),
    );
    let out = Command::new(weir_bin())
        .arg("--cache-dir")
        .arg(&cache)
        .arg("validate")
        .arg(&spec)
        .output()
        .expect("cannot start the weir binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("weir:stream/operator"), "{stderr}");
    let cached: Vec<_> = std::fs::read_dir(&cache)
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(cached.is_empty(), "it was compiled and cached: {cached:?}");
}
