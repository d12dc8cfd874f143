//! The state conformance script, `state.txt` next to this file: its parser, and the input
//! that both of its runs feed the state-probe guest.
//!
//! Two crates compile this file with `#[path]` (they share no dependency that could hold
//! it): the state-probe guest's unit test, which runs the script through
//! `weir_sdk::testing::Harness`, and the end-to-end test `tests/e2e/state.rs`, which runs it
//! through the `weir` binary. So both parse the same format and build the same input.

use std::collections::BTreeMap;

/// One command and the result the probe must answer with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub key: String,
    pub command: String,
    pub expect: String,
}

fn step(key: &str, command: &str, expect: &str) -> Step {
    Step {
        key: key.into(),
        command: command.into(),
        expect: expect.into(),
    }
}

/// What `state.txt` holds.
#[derive(Debug, Default)]
pub struct Conformance {
    /// The scripts in file order, each a list of steps in order; no key is in two scripts.
    pub scripts: Vec<Vec<Step>>,
    /// `(key, result)` that the probe emits after the input has ended (fired event-time
    /// timers), in order.
    pub at_end: Vec<(String, String)>,
}

/// The COMMAND of a line that is checked after the end of input instead of being sent.
const AT_END: &str = "@end";

/// Keys starting with this are the fillers' of [`interleave`].
const FILLER_KEY: &str = "fill";

/// Parses the format documented at the top of `state.txt`; an error names the line.
pub fn parse(text: &str) -> Result<Conformance, String> {
    let mut conformance = Conformance::default();
    let mut script: Vec<Step> = Vec::new();
    // The script of each key, to refuse a key in two scripts.
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            if !script.is_empty() {
                conformance.scripts.push(std::mem::take(&mut script));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.splitn(3, '\t').collect();
        let [key, command, expect] = fields[..] else {
            return Err(format!(
                "line {n}: expected KEY<TAB>COMMAND<TAB>EXPECTED, found {line:?}"
            ));
        };
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!(
                "line {n}: the key {key:?} must be non-empty and without spaces (the \
                 end-to-end run sends `KEY COMMAND` lines)"
            ));
        }
        if key.starts_with(FILLER_KEY) {
            return Err(format!(
                "line {n}: keys starting with {FILLER_KEY:?} are taken by the filler commands; \
                 rename {key:?}"
            ));
        }
        if command.is_empty() || command.trim() != command {
            return Err(format!(
                "line {n}: the command {command:?} must be non-empty, without leading or \
                 trailing spaces"
            ));
        }
        if command == AT_END {
            conformance.at_end.push((key.into(), expect.into()));
            continue;
        }
        let index = conformance.scripts.len();
        if let Some(&other) = owner.get(key)
            && other != index
        {
            return Err(format!(
                "line {n}: key {key:?} is in script {} already; a key belongs to one script \
                 (scripts are interleaved, which keeps only the order within a script)",
                other + 1
            ));
        }
        owner.insert(key.into(), index);
        script.push(step(key, command, expect));
    }
    if !script.is_empty() {
        conformance.scripts.push(script);
    }
    Ok(conformance)
}

/// The input of both runs: [`interleave`] with 4,000 filler commands after every second
/// round, so that each key's commands spread over several batches (of up to 4,096 records)
/// and its state must survive between them.
pub fn input(scripts: &[Vec<Step>]) -> Vec<Step> {
    let steps = interleave(scripts, 4_000);
    assert!(steps.len() > 3 * 1024, "the input spans several batches");
    steps
}

/// The scripts' steps round-robin, one step of each script per round, with a block of
/// `filler` commands after every second round. The fillers append to the lists of five keys
/// `fill0`..`fill4`, which are read back (with the expected lists) at the end.
pub fn interleave(scripts: &[Vec<Step>], filler: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut filled = 0;
    let longest = scripts.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..longest {
        steps.extend(scripts.iter().filter_map(|s| s.get(round)).cloned());
        if round % 2 == 1 {
            for _ in 0..filler {
                let key = format!("{FILLER_KEY}{}", filled % 5);
                steps.push(step(&key, &format!("ladd {filled}"), "ok"));
                lists.entry(key).or_default().push(filled.to_string());
                filled += 1;
            }
        }
    }
    for (key, items) in &lists {
        steps.push(step(key, "lget", &format!("[{}]", items.join(","))));
    }
    steps
}
