//! The state conformance script `tests/conformance/state.txt`, run through
//! `weir_sdk::testing::Harness` with this crate's operator. `tests/e2e/state.rs` runs the same
//! script through the host, so the harness's in-memory state and the host's state backends
//! must give the same answer to every command.
//!
//! The answers must not depend on where batches end, as the SDK caches state per batch: the
//! script runs as the end-to-end test feeds it (interleaved with fillers, over several
//! batches), and interleaved without fillers at every batch size, from one record per batch
//! to the whole script in one.

use weir_sdk::testing::{Harness, Input, Output};

use super::StateProbe;

#[path = "../../../conformance/script.rs"]
mod script;

use script::{Conformance, Step};

fn conformance() -> Conformance {
    script::parse(include_str!("../../../conformance/state.txt"))
        .unwrap_or_else(|e| panic!("tests/conformance/state.txt: {e}"))
}

/// Feeds `steps` to a new harness in batches of `batch` records, ends the input as the host
/// does (the watermark jumps to the end of time, so every event-time timer fires) and checks
/// every answer, then what the end of input emitted.
fn run(steps: &[Step], at_end: &[(String, String)], batch: usize) {
    let mut h = Harness::<StateProbe>::new();
    let mut got: Vec<Output> = Vec::new();
    for chunk in steps.chunks(batch) {
        let records = chunk
            .iter()
            .map(|s| Input::keyed(s.key.as_str(), s.command.as_str()));
        got.extend(h.process(records));
    }
    got.extend(h.fire_event_timers_up_to(i64::MAX));
    let got: Vec<(&str, &str)> = got
        .iter()
        .map(|o| (o.key_str().unwrap_or("(no key)"), o.value_str()))
        .collect();
    let want: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| (s.key.as_str(), s.expect.as_str()))
        .chain(at_end.iter().map(|(k, r)| (k.as_str(), r.as_str())))
        .collect();
    // The first difference rather than hundreds of lines.
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let command = steps
            .get(i)
            .map_or("(end of input)", |s| s.command.as_str());
        assert_eq!(
            g,
            w,
            "batches of {batch}: answer {} (command {command:?})",
            i + 1
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "batches of {batch}: number of answers"
    );
}

#[test]
fn the_script_as_the_end_to_end_test_feeds_it() {
    let c = conformance();
    let steps = script::input(&c.scripts);
    run(&steps, &c.at_end, 1024);
}

#[test]
fn answers_do_not_depend_on_where_batches_end() {
    let c = conformance();
    let steps = script::interleave(&c.scripts, 0);
    for batch in 1..=steps.len() {
        run(&steps, &c.at_end, batch);
    }
}

#[test]
fn the_script_has_every_kind_of_step() {
    let c = conformance();
    let commands: Vec<&str> = c
        .scripts
        .iter()
        .flatten()
        .map(|s| s.command.split(' ').next().unwrap_or(""))
        .collect();
    for command in [
        "vset",
        "vget",
        "vclear",
        "ladd",
        "laddall",
        "lget",
        "lupdate",
        "lclear",
        "mput",
        "mget",
        "mremove",
        "mcontains",
        "mentries",
        "mkeys",
        "mvalues",
        "misempty",
        "mclear",
        "timer",
    ] {
        assert!(commands.contains(&command), "no step runs {command:?}");
    }
    assert!(!c.at_end.is_empty(), "no step checks the end of input");
}

#[test]
fn an_unknown_command_fails_the_batch_naming_it() {
    let mut h = Harness::<StateProbe>::new();
    let err = h
        .try_process([("k", "frobnicate")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown command \"frobnicate\""), "{err}");
}

#[test]
fn malformed_lines_are_errors_naming_the_line() {
    for (text, error) in [
        ("k\tvget", "line 1: expected KEY<TAB>COMMAND<TAB>EXPECTED"),
        ("# c\n\nk k\tvget\tnone", "line 3: the key \"k k\""),
        ("fill1\tvget\tnone", "line 1: keys starting with \"fill\""),
        ("k\tvget \tnone", "line 1: the command \"vget \""),
        (
            "k\tvget\tnone\n\nk\tvget\tnone",
            "line 3: key \"k\" is in script 1",
        ),
    ] {
        let err = script::parse(text).unwrap_err();
        assert!(err.starts_with(error), "{text:?}: {err}");
    }
    let c = script::parse("a\tvget\tnone\nb\t@end\tx\n\n\n# c\nc\tlget\t[]\n").unwrap();
    assert_eq!(c.scripts.len(), 2);
    assert_eq!(c.at_end, [("b".to_string(), "x".to_string())]);
}
