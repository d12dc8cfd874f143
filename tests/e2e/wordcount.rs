//! The word count: WASM operators at several parallelisms, on RocksDB state over more words
//! than the count keeps in the guest, and the native built-ins, checked against counts
//! computed here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::support::{
    Workspace, count_words, key_value, key_value_file_sink, part_files, repo, toml_path, wasm,
    word_count_operators,
};

/// Deterministic text: several thousand lines of words with a skewed distribution (so some
/// words occur far more often than a batch holds), mixed case, non-ASCII letters, tabs, runs
/// of spaces, blank lines and CRLF line ends.
fn generated_text() -> String {
    const SYLLABLES: &[&str] = &["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "Ü", "ß"];
    let mut seed: u64 = 0x5eed_cafe;
    let mut next = move |n: u64| {
        // xorshift64*
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n
    };
    let vocab: Vec<String> = (0..400)
        .map(|i| {
            let mut word: String = (0..1 + next(3))
                .map(|_| SYLLABLES[next(SYLLABLES.len() as u64) as usize])
                .collect();
            if i % 7 == 0 {
                word = word.to_uppercase();
            } else if i % 5 == 0 {
                word.push(',');
            }
            word
        })
        .collect();
    let mut text = String::new();
    for line in 0..6000 {
        let words = next(14);
        for w in 0..words {
            // Skewed: low indexes are picked much more often.
            let bound = next(vocab.len() as u64) + 1;
            let index = next(bound) as usize;
            text.push_str(&vocab[index]);
            if w + 1 < words {
                text.push_str(match next(10) {
                    0 => "\t",
                    1 => "   ",
                    _ => " ",
                });
            }
        }
        text.push_str(if line % 11 == 0 { "\r\n" } else { "\n" });
    }
    text
}

/// A word count job over `inputs` into the directory `out`.
fn spec(inputs: &[PathBuf], out: &Path, parallelism: u32, split: &str, count: &str) -> String {
    let paths: Vec<String> = inputs.iter().map(|p| toml_path(p)).collect();
    format!(
        r#"
[job]
name = "wordcount"
parallelism = {parallelism}

[[source]]
name = "lines"
type = "file"
paths = [{paths}]
split_size = 32768
{operators}{sink}"#,
        paths = paths.join(", "),
        operators = word_count_operators("lines", split, count),
        sink = key_value_file_sink("count", out),
    )
}

/// Checks the count operator's changelog in `out` and returns the final count per word.
///
/// Each word must be owned by exactly one subtask (key_by), and its updates must count up
/// 1, 2, ... n in that subtask's part file.
fn final_counts(out: &Path, parallelism: usize) -> HashMap<String, u64> {
    let parts = part_files(out);
    assert_eq!(
        parts.keys().copied().collect::<Vec<_>>(),
        (0..parallelism).collect::<Vec<_>>(),
        "one part file per sink subtask"
    );
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for (&part, lines) in &parts {
        for line in lines {
            let (word, n) = key_value(line);
            let n: u64 = n
                .parse()
                .unwrap_or_else(|_| panic!("part-{part}: count of {word:?} is {n:?}"));
            let first = *owner.entry(word.to_owned()).or_insert(part);
            assert_eq!(first, part, "{word:?} is counted by two subtasks");
            let last = counts.entry(word.to_owned()).or_insert(0);
            assert_eq!(
                n,
                *last + 1,
                "part-{part}: {word:?} jumps from {last} to {n}"
            );
            *last = n;
        }
    }
    counts
}

/// Sorted, for readable assertion failures.
fn sorted(counts: &HashMap<String, u64>) -> Vec<(&str, u64)> {
    let mut v: Vec<_> = counts.iter().map(|(w, &n)| (w.as_str(), n)).collect();
    v.sort();
    v
}

fn wasm_wordcount(parallelism: u32) {
    let ws = Workspace::new();
    let text = generated_text();
    let example = repo().join("examples/wordcount/input.txt");
    let inputs = [ws.write("generated.txt", &text), example.clone()];
    let example_text = std::fs::read_to_string(&example).expect("the example's input.txt");
    let out = ws.path("out");
    let split = format!(
        "{}\nconfig = {{ lowercase = true }}",
        wasm("wordcount_split")
    );
    ws.run_ok(&spec(
        &inputs,
        &out,
        parallelism,
        &split,
        &wasm("wordcount_count"),
    ));

    let expected = count_words([text.as_str(), example_text.as_str()], true);
    assert!(
        expected.values().any(|&n| n > 2048),
        "some word spans batches"
    );
    let got = final_counts(&out, parallelism as usize);
    assert_eq!(sorted(&got), sorted(&expected));
}

#[test]
fn wasm_wordcount_at_parallelism_1() {
    wasm_wordcount(1);
}

#[test]
fn wasm_wordcount_at_parallelism_4() {
    wasm_wordcount(4);
}

#[test]
fn a_count_on_rocksdb_over_more_keys_than_the_guest_keeps_counts_every_word() {
    // With RocksDB state the count keeps its counts in the guest by the host's key ids; past
    // 131,072 ids the host has it write back and forget them (the forget batch) and starts
    // its ids over. 200,000 words, each three times in three rounds, at parallelism 1: the
    // one count subtask meets every word, and a word's later counts come after the ids of
    // its first one were forgotten.
    const WORDS: u64 = 200_000;
    let ws = Workspace::new();
    let mut text = String::new();
    for round in 0..3 {
        for i in 0..WORDS {
            // Each round in another order (multiplication by a unit mod WORDS).
            let word = (i * [1, 7_919, 104_729][round] + round as u64) % WORDS;
            text.push_str(&format!("w{word}"));
            text.push(if i % 16 == 15 { '\n' } else { ' ' });
        }
    }
    let inputs = [ws.write("words.txt", &text)];
    let out = ws.path("out");
    let job = spec(
        &inputs,
        &out,
        1,
        &wasm("wordcount_split"),
        &wasm("wordcount_count"),
    ) + "\n[state]\nbackend = \"rocksdb\"\n";
    ws.run_ok(&job);
    // Every word counted 1, 2, 3 in order (`final_counts` checks the steps).
    let got = final_counts(&out, 1);
    assert_eq!(got.len() as u64, WORDS);
    assert!(got.values().all(|&n| n == 3), "every word three times");
}

#[test]
fn native_operators_count_like_the_wasm_ones() {
    let ws = Workspace::new();
    let text = generated_text();
    let inputs = [ws.write("generated.txt", &text)];
    let expected = count_words([text.as_str()], false);

    let native_out = ws.path("native");
    ws.run_ok(&spec(
        &inputs,
        &native_out,
        2,
        "native = \"split_words\"",
        "native = \"count_words\"",
    ));
    let native = final_counts(&native_out, 2);
    assert_eq!(sorted(&native), sorted(&expected));

    let wasm_out = ws.path("wasm");
    let (split, count) = (wasm("wordcount_split"), wasm("wordcount_count"));
    ws.run_ok(&spec(&inputs, &wasm_out, 2, &split, &count));
    assert_eq!(sorted(&final_counts(&wasm_out, 2)), sorted(&native));
}

#[test]
fn the_python_operators_write_what_the_rust_ones_write() {
    // examples/wordcount/python, built by `weir build`.
    same_output_as_rust("wordcount_split_py", "wordcount_count_py");
}

#[test]
fn the_javascript_operators_write_what_the_rust_ones_write() {
    // examples/wordcount/js, built by `weir build`.
    same_output_as_rust("wordcount_split_js", "wordcount_count_js");
}

#[test]
fn the_typescript_operators_write_what_the_rust_ones_write() {
    // examples/wordcount/ts, built by `weir build` from the .ts modules.
    same_output_as_rust("wordcount_split_ts", "wordcount_count_ts");
}

/// The word count with components `split` and `count` at parallelism 2 with checkpoints:
/// each sink subtask gets the same updates as with the Rust operators.
fn same_output_as_rust(split: &str, count: &str) {
    let ws = Workspace::new();
    let text = generated_text();
    let inputs = [ws.write("generated.txt", &text)];
    let run = |name: &str, split: &str, count: &str| {
        let out = ws.path(name);
        let split = format!("{split}\nconfig = {{ lowercase = true }}");
        let checkpoint = format!(
            "\n[checkpoint]\ninterval = \"100ms\"\ndir = {}\n",
            toml_path(&ws.path(&format!("{name}-chk")))
        );
        ws.run_ok(&(spec(&inputs, &out, 2, &split, count) + &checkpoint));
        let mut parts = part_files(&out);
        for lines in parts.values_mut() {
            lines.sort();
        }
        parts
    };
    let rust = run("rust", &wasm("wordcount_split"), &wasm("wordcount_count"));
    let other = run("other", &wasm(split), &wasm(count));
    let expected = count_words([text.as_str()], true);
    assert_eq!(
        sorted(&final_counts(&ws.path("rust"), 2)),
        sorted(&expected)
    );
    assert_eq!(rust.len(), 2);
    for (part, lines) in &rust {
        assert!(
            other[part] == *lines,
            "{split}, {count}: part {part} differs"
        );
    }
}
