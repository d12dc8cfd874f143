//! Hot deploy through the library API: new code swapped in at a barrier keeps the operator's
//! state (keyed and operator state), and new code that fails rolls the job back to the old
//! code from the swap checkpoint; either way the output is exactly that of a run without the
//! upgrade.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir::checkpoint::RestoreFrom;
use weir::{Job, JobSpec, Limits, OperatorUpgrade, Probation, Upgrade, UpgradeOutcome, WasmEngine};

use crate::service::{committed, word_count};
use crate::support::{Workspace, operator, tally_job};

/// A word count over `lines` generated lines (at `rate` lines/s, if any) into `out`.
fn spec(ws: &Workspace, name: &str, lines: u64, rate: Option<u64>, out: &Path) -> PathBuf {
    let (split, count) = (operator("wordcount_split"), operator("wordcount_count"));
    let (split, count) = (split.to_str().unwrap(), count.to_str().unwrap());
    ws.write(
        &format!("{name}.toml"),
        word_count(name, lines, rate, split, count, 2, out),
    )
}

/// What the word count over `lines` commits without an upgrade.
fn reference(ws: &Workspace, engine: &WasmEngine, lines: u64) -> Vec<String> {
    let out = ws.path("reference");
    let reference = JobSpec::from_file(&spec(ws, "reference", lines, None, &out)).unwrap();
    Job::new(reference, engine)
        .unwrap()
        .start()
        .unwrap()
        .wait()
        .unwrap();
    committed(&out)
}

/// Runs the word count over `lines` with an upgrade of `count` to `component` (with `config`)
/// once it has taken a few checkpoints; the upgrade's outcome and the committed output.
fn upgraded(
    ws: &Workspace,
    engine: &WasmEngine,
    lines: u64,
    component: &str,
    limits: Limits,
    config: Option<&str>,
) -> (UpgradeOutcome, Vec<String>) {
    let out = ws.path(&format!("out-{component}"));
    let spec = JobSpec::from_file(&spec(ws, component, lines, Some(20_000), &out)).unwrap();
    let job = Job::new(spec, engine).unwrap();
    let running = job.start_from(RestoreFrom::Fresh).unwrap();
    while running.metrics().checkpoint_status().completed < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let component = engine.load(&operator(component), &limits).unwrap();
    let handle = running.control().upgrade(Upgrade {
        operators: vec![OperatorUpgrade {
            uid: "count".into(),
            component,
            config: config.map(String::from),
        }],
        probation: Probation {
            time: Duration::from_millis(300),
            records: 1000,
        },
    });
    let outcome = handle.wait();
    running.wait().expect("the job finishes");
    (outcome, committed(&out))
}

#[test]
fn new_code_carries_on_with_the_state_of_the_old() {
    const LINES: u64 = 100_000;
    let ws = Workspace::new();
    let engine = WasmEngine::new(None).unwrap();
    let (outcome, lines) = upgraded(
        &ws,
        &engine,
        LINES,
        "wordcount_count",
        Limits::default(),
        None,
    );
    assert!(
        matches!(outcome, UpgradeOutcome::Committed { .. }),
        "{outcome:?}"
    );
    // Every word's counts go on across the swap without a gap or a repeat: the new instance
    // read the counts the old one wrote.
    assert!(
        lines == reference(&ws, &engine, LINES),
        "the output of a run without the upgrade"
    );
}

#[test]
fn new_code_that_fails_is_rolled_back_and_the_output_stays_exact() {
    const LINES: u64 = 100_000;
    let ws = Workspace::new();
    let engine = WasmEngine::new(None).unwrap();
    let limits = Limits {
        call_deadline: Duration::from_millis(300),
        ..Limits::default()
    };
    // Its `open` spins past its deadline.
    let (outcome, lines) = upgraded(
        &ws,
        &engine,
        LINES,
        "weir_test_hostile",
        limits,
        Some(r#"{"spin_in_open": true}"#),
    );
    let UpgradeOutcome::RolledBack { cause } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(cause.contains("count"), "{cause}");
    assert!(
        lines == reference(&ws, &engine, LINES),
        "the output of a run without the failed upgrade"
    );
}

/// What a tally run with an upgrade committed: its lines, and the numbers of each subtask's
/// lines of the old code and of the new code (tagged `v2:`), sorted.
struct Tallied {
    lines: Vec<String>,
    old: [Vec<u64>; 2],
    new: [Vec<u64>; 2],
}

/// Runs the tally over `count` numbers and upgrades it, once it has taken a few checkpoints,
/// to `component` with `config`, on probation for 500 ms and `probation_records` records.
fn tally_upgraded(
    count: u64,
    component: &str,
    config: &str,
    probation_records: u64,
) -> (UpgradeOutcome, Tallied) {
    let (mut outcomes, tallied) =
        tally_upgraded_in_turn(count, &[(component, config, probation_records)]);
    (outcomes.remove(0), tallied)
}

/// [`tally_upgraded`] with each of `upgrades` in turn, after the one before ended.
fn tally_upgraded_in_turn(
    count: u64,
    upgrades: &[(&str, &str, u64)],
) -> (Vec<UpgradeOutcome>, Tallied) {
    let ws = Workspace::new();
    let engine = WasmEngine::new(None).unwrap();
    let out = ws.path("out");
    let spec = JobSpec::from_file(&tally_job(&ws, 2, "{}", count, 50_000)).unwrap();
    let running = Job::new(spec, &engine).unwrap().start().unwrap();
    while running.metrics().checkpoint_status().completed < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut outcomes = Vec::new();
    for &(component, config, probation_records) in upgrades {
        let component = engine
            .load(&operator(component), &Limits::default())
            .unwrap();
        let outcome = running
            .control()
            .upgrade(Upgrade {
                operators: vec![OperatorUpgrade {
                    uid: "tally".into(),
                    component,
                    config: Some(config.into()),
                }],
                probation: Probation {
                    time: Duration::from_millis(500),
                    records: probation_records,
                },
            })
            .wait();
        outcomes.push(outcome);
    }
    running.wait().unwrap();
    let lines = committed(&out);
    let numbers = |prefix: String| -> Vec<u64> {
        let mut n: Vec<u64> = lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix)?.parse().ok())
            .collect();
        n.sort_unstable();
        n
    };
    let old = [numbers("s0 ".into()), numbers("s1 ".into())];
    let new = [numbers("v2:s0 ".into()), numbers("v2:s1 ".into())];
    (outcomes, Tallied { lines, old, new })
}

#[test]
fn lines_before_the_swap_are_the_old_codes_and_after_it_the_new_codes() {
    const COUNT: u64 = 200_000;
    let (outcome, Tallied { old, new, .. }) =
        tally_upgraded(COUNT, "weir_test_tally", r#"{"tag": "v2:"}"#, 0);
    let UpgradeOutcome::Committed { report, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    // Not before its probation of 500 ms ended, however long its swap checkpoint took.
    assert!(
        report.committed_after >= Duration::from_millis(500),
        "{report:?}"
    );
    // Per subtask: the old code numbered 1..k, the new code (tagged) k+1..n, each once.
    let mut total = 0;
    for s in 0..2 {
        assert!(!old[s].is_empty() && !new[s].is_empty(), "subtask {s}");
        let all: Vec<u64> = old[s].iter().chain(&new[s]).copied().collect();
        let expected: Vec<u64> = (1..=all.len() as u64).collect();
        assert_eq!(
            all, expected,
            "subtask {s}: no gap, no repeat, old before new"
        );
        total += all.len() as u64;
    }
    assert_eq!(total, COUNT);
}

#[test]
fn new_code_that_fails_on_probation_is_rolled_back_from_the_swap_checkpoint() {
    const COUNT: u64 = 200_000;
    // The new code passes records through and traps 200 ms after its first record, after its
    // swap checkpoint completed, while checkpoints wait for its probation: a probation of
    // more records than the job has, so that on a loaded machine it cannot end (and commit
    // the upgrade) before the trap.
    let (outcome, Tallied { lines, old, new }) = tally_upgraded(
        COUNT,
        "weir_test_hostile",
        r#"{"trap_after_ms": 200}"#,
        COUNT,
    );
    let UpgradeOutcome::RolledBack { cause } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(cause.contains("trapping"), "{cause}");
    // Nothing the new code wrote was committed, and the old code numbered every record once.
    assert!(new.iter().all(Vec::is_empty));
    assert!(
        lines.iter().all(|l| l.starts_with('s')),
        "only the old code's lines"
    );
    let mut total = 0;
    for numbers in &old {
        let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
        assert_eq!(numbers, &expected);
        total += numbers.len() as u64;
    }
    assert_eq!(total, COUNT);
}

#[test]
fn new_code_that_fails_after_an_upgrade_committed_rolls_back_to_that_upgrades_code() {
    const COUNT: u64 = 300_000;
    // The first upgrade tags the lines and is committed; the second traps on probation and
    // is rolled back, in the same run: back to the tagging code, not to the code the job
    // started with.
    let (outcomes, Tallied { old, new, .. }) = tally_upgraded_in_turn(
        COUNT,
        &[
            ("weir_test_tally", r#"{"tag": "v2:"}"#, 0),
            ("weir_test_hostile", r#"{"trap_after_ms": 200}"#, COUNT),
        ],
    );
    assert!(
        matches!(outcomes[0], UpgradeOutcome::Committed { .. }),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], UpgradeOutcome::RolledBack { .. }),
        "{outcomes:?}"
    );
    // Per subtask: the first code numbered 1..k, the tagging code k+1..n, each once.
    let mut total = 0;
    for s in 0..2 {
        let all: Vec<u64> = old[s].iter().chain(&new[s]).copied().collect();
        let misplaced = (all.iter().zip(1..)).find(|&(&n, i)| n != i);
        assert!(
            misplaced.is_none(),
            "subtask {s}: {} numbers of the first code, {} tagged; the first out of place \
             (number, place): {misplaced:?}",
            old[s].len(),
            new[s].len()
        );
        total += all.len() as u64;
    }
    assert_eq!(total, COUNT);
}
