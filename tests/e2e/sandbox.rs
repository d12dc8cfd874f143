//! A guest that traps fails its job with an error naming the operator; the host survives.

use crate::support::{Workspace, toml_path, wasm};

fn poison_job(ws: &Workspace, lines: &str) -> String {
    let input = ws.write("input.txt", lines);
    format!(
        r#"
[job]
name = "poisoned"

[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "filter"
uid = "poison-filter"
{poison}
input = "lines"

[[sink]]
name = "out"
type = "file"
input = "filter"
path = {out}
"#,
        input = toml_path(&input),
        poison = wasm("weir_test_poison"),
        out = toml_path(&ws.path("out")),
    )
}

#[test]
fn a_trap_fails_the_job_and_names_the_operator() {
    let ws = Workspace::new();
    let run = ws.run(&poison_job(&ws, "apple\nbanana\npoison\ncherry\n"));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(stderr.contains("poison-filter"), "no operator uid:\n{run}");
    assert!(stderr.contains("poison record"), "no guest message:\n{run}");
    assert!(
        !run.stdout().contains("finished"),
        "reported as finished:\n{run}"
    );
}

#[test]
fn without_poison_the_same_guest_passes_records_through() {
    let ws = Workspace::new();
    ws.run_ok(&poison_job(&ws, "apple\nbanana\ncherry\n"));
    let out = std::fs::read_to_string(ws.path("out/part-0")).expect("the sink's part file");
    assert_eq!(out, "apple\nbanana\ncherry\n");
}

#[test]
fn records_without_keys_into_key_by_fail_the_job_naming_the_emitter() {
    // The poison guest passes lines through without keys; `count` reads them over key_by.
    // Only running the guest tells that its records have no key.
    let ws = Workspace::new();
    let input = ws.write("input.txt", "apple\nbanana\n");
    let run = ws.run(&format!(
        r#"
[[source]]
name = "lines"
type = "file"
path = {input}

[[operator]]
name = "filter"
uid = "poison-filter"
{poison}
input = "lines"

[[operator]]
name = "count"
uid = "count"
{count}
input = "filter"
edge = "key_by"

[[sink]]
name = "out"
type = "discard"
input = "count"
"#,
        input = toml_path(&input),
        poison = wasm("weir_test_poison"),
        count = wasm("wordcount_count"),
    ));
    run.assert_clean_failure();
    let stderr = run.stderr();
    assert!(
        stderr.contains("\"filter\" (uid poison-filter)")
            && stderr.contains("without a key into the key_by edge to \"count\""),
        "{run}"
    );
}
