//! Tests of the runtime, through the same code path as the component export
//! (`testing::Harness` drives `runtime::Instance`): batching and the host calls per batch,
//! output buffering, timers, errors, side outputs, operator state, and malformed host
//! buffers.
//!
//! What value, list and map state answer to each read and write is not here: the conformance
//! script `tests/conformance/state.txt` checks it, through the harness (the state-probe
//! guest's unit test) and through the host (`tests/e2e/state.rs`).

use std::cell::RefCell;

use crate::backend::{Backend, StateKind};
use crate::prelude::*;
use crate::runtime::{Instance, OpenInfo};
use crate::testing::{Harness, HostCalls, Input, Output};

fn values(out: &[Output]) -> Vec<&str> {
    out.iter().map(Output::value_str).collect()
}

/// Answers each record with its key's previous value (`none` at first) and keeps the record's
/// value as the new one.
#[derive(Default)]
struct Remember;

impl Operator for Remember {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let v = ctx.value_state::<String>("v");
        let previous = v.get()?.unwrap_or_else(|| "none".into());
        v.set(rec.value_str()?)?;
        ctx.emit(rec.key(), previous)
    }
}

#[test]
fn many_keys_in_one_batch() {
    let mut h = Harness::<Remember>::new();
    let keys: Vec<String> = (0..2_000).map(|i| format!("key-{i}")).collect();
    let sets: Vec<String> = (0..2_000).map(|i| i.to_string()).collect();
    h.process(
        keys.iter()
            .zip(&sets)
            .map(|(k, v)| Input::keyed(k.as_str(), v.as_str())),
    );
    let out = h.process(keys.iter().rev().map(|k| Input::keyed(k.as_str(), "")));
    let expected: Vec<String> = (0..2_000).rev().map(|i| i.to_string()).collect();
    assert_eq!(values(&out), expected);
}

#[test]
fn a_record_without_key_cannot_use_keyed_state_or_timers() {
    /// Uses the keyed state a record names (`value`, `list` or `map`), else a timer.
    #[derive(Default)]
    struct UsesKeyed;
    impl Operator for UsesKeyed {
        fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
            // All three are declared before one is used: the error must name the one used.
            let v = ctx.value_state::<String>("v");
            let l = ctx.list_state::<String>("l");
            let m = ctx.map_state::<String, String>("m");
            match rec.value_str()? {
                "value" => v.get().map(drop),
                "list" => l.add("x"),
                "map" => m.put("a", "b"),
                _ => ctx.register_event_timer(5),
            }
        }
    }
    let mut h = Harness::<UsesKeyed>::new();
    for (command, state) in [("value", "v"), ("list", "l"), ("map", "m")] {
        let err = h
            .try_process([Input::new(command)])
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("state \"{state}\"")), "{err}");
        assert!(err.contains("no key"), "{err}");
        assert!(err.contains("record 0 of the batch (without key)"), "{err}");
    }
    let err = h
        .try_process([Input::new("timer")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("timers are keyed"), "{err}");
}

/// Sets value state "v" and registers and deletes timers on command: `set X`, `timer N`,
/// `deltimer N`, `ptimer N` (processing time); anything else fails. A fired timer reports its
/// domain, its time and the key's "v"; when "v" is `again`, it sets `done` and registers an
/// event-time timer 1 ms later.
#[derive(Default)]
struct Timers;

impl Operator for Timers {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let (command, arg) = rec.value_str()?.split_once(' ').unwrap_or_default();
        match command {
            "set" => ctx.value_state::<String>("v").set(arg),
            "timer" => ctx.register_event_timer(arg.parse()?),
            "deltimer" => ctx.delete_event_timer(arg.parse()?),
            "ptimer" => ctx.register_processing_time_timer(arg.parse()?),
            _ => Err(Error::msg("asked to fail")),
        }
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        let v = ctx.value_state::<String>("v");
        let value = v.get()?.unwrap_or_else(|| "none".into());
        if value == "again" {
            v.set("done")?;
            ctx.register_event_timer(timer.timestamp() + 1)?;
        }
        if let Some(at) = value.strip_prefix("cancel ") {
            ctx.delete_event_timer(at.parse()?)?;
        }
        let domain = match timer.domain() {
            TimeDomain::EventTime => "event",
            TimeDomain::ProcessingTime => "processing",
        };
        ctx.emit_display(
            Some(timer.key()),
            format_args!("fired {domain} {} v={value}", timer.timestamp()),
        )
    }
}

#[test]
fn a_failed_batch_changes_nothing() {
    let mut h = Harness::<Timers>::new();
    h.process([("k", "set before")]);
    let err = h
        .try_process([("k", "set after"), ("k", "timer 9"), ("k", "fail")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("asked to fail"), "{err}");
    assert!(err.contains("record 2 of the batch (key \"k\")"), "{err}");
    assert_eq!(h.value_state::<String>("v", "k").as_deref(), Some("before"));
    assert!(h.event_timers("k").is_empty());
}

#[test]
fn one_name_cannot_be_two_kinds_of_state() {
    #[derive(Default)]
    struct TwoKinds;
    impl Operator for TwoKinds {
        fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> {
            let _declared = ctx.value_state::<String>("v");
            ctx.list_state::<String>("v").add("x")
        }
    }
    let mut h = Harness::<TwoKinds>::new();
    let err = h.try_process([("k", "")]).unwrap_err().to_string();
    assert!(
        err.contains("state \"v\" is a value state but is used here as a list state"),
        "{err}"
    );
}

#[test]
fn a_handle_that_cannot_be_used_says_why_every_time() {
    // The operator ignores the error of its misused handle; every use still reports it, in
    // every batch, and the state of the name keeps working as what it was declared.
    #[derive(Default)]
    struct Ignores;
    impl Operator for Ignores {
        fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
            ctx.value_state::<String>("v").set(rec.value_str()?)?;
            let err = ctx.list_state::<String>("v").add("x").unwrap_err();
            ctx.emit(rec.key(), err.to_string())
        }
    }
    let mut h = Harness::<Ignores>::new();
    let want = "state \"v\" is a value state but is used here as a list state";
    for batch in [[("k", "1"), ("k", "2")], [("j", "3"), ("k", "4")]] {
        let out = h.process(batch);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|o| o.value_str().contains(want)), "{out:?}");
    }
    assert_eq!(h.value_state::<String>("v", "k").as_deref(), Some("4"));
}

/// Keeps per key a count, the values seen (list) and how often each was seen (map), through
/// handles declared in `open`, and reads the count by name too: both reach one state. Each
/// record sets an event-time timer at 100 that reports its key's count and values.
#[derive(Default)]
struct Declared {
    count: ValueStateHandle<u64>,
    values: ListStateHandle<String>,
    times: MapStateHandle<String, u32>,
}

impl Operator for Declared {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.count = ctx.value_state("count")?;
        self.values = ctx.list_state("values")?;
        self.times =
            ctx.map_state_with_ttl("times", Ttl::new(std::time::Duration::from_secs(60)))?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let count = ctx.state(&self.count);
        let n = count.get()?.unwrap_or(0) + 1;
        count.set(&n)?;
        let by_name = ctx.value_state::<u64>("count").get()?;
        let value = rec.value_str()?;
        ctx.state(&self.values).add(value)?;
        let times = ctx.state(&self.times);
        let t = times.get(value)?.unwrap_or(0) + 1;
        times.put(value, &t)?;
        let all = ctx.state(&self.values).get()?.join(",");
        ctx.register_event_timer(100)?;
        ctx.emit_display(rec.key(), format_args!("{n} {by_name:?} {t} {all}"))
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        let n = ctx.state(&self.count).get()?.unwrap_or(0);
        let all = ctx.state(&self.values).get()?.join(",");
        ctx.emit_display(Some(timer.key()), format_args!("timer {n} {all}"))
    }
}

#[test]
fn handles_declared_in_open_reach_the_state_of_the_current_key() {
    let mut h = Harness::<Declared>::new();
    let out = h.process([("k", "a"), ("j", "a"), ("k", "b")]);
    assert_eq!(
        values(&out),
        ["1 Some(1) 1 a", "1 Some(1) 1 a", "2 Some(2) 1 a,b"]
    );
    // A restarted instance declares its handles again, in its own `open`.
    h.restart();
    let out = h.process([("k", "a")]);
    assert_eq!(values(&out), ["3 Some(3) 2 a,b,a"]);
    assert_eq!(h.value_state::<u64>("count", "k"), Some(3));
    assert_eq!(h.list_state::<String>("values", "j"), ["a"]);
    // Timers reach the state of their key through the same handles.
    let mut fired = values(&h.fire_event_timers_up_to(100))
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    fired.sort();
    assert_eq!(fired, ["timer 1 a", "timer 3 a,b,a"]);
}

#[test]
fn a_handle_open_did_not_declare_is_an_error_naming_the_fix() {
    #[derive(Default)]
    struct Forgets {
        count: ValueStateHandle<u64>,
    }
    impl Operator for Forgets {
        fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> {
            ctx.state(&self.count).set(&1)
        }
    }
    let err = Harness::<Forgets>::new()
        .try_process([("k", "")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("Operator::open did not declare"), "{err}");
    assert!(err.contains("ctx.value_state(\"count\")"), "{err}");
}

#[test]
fn open_cannot_declare_one_name_as_two_kinds_of_state() {
    #[derive(Default)]
    struct TwoKinds {
        list: ListStateHandle<String>,
    }
    impl Operator for TwoKinds {
        fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
            ctx.value_state::<String>("v")?;
            self.list = ctx.list_state("v")?;
            Ok(())
        }
        fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> {
            Ok(())
        }
    }
    let err = Harness::<TwoKinds>::new()
        .try_process([("k", "")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("state \"v\" is a value state but is used here as a list state"),
        "{err}"
    );
}

#[test]
fn state_used_from_a_display_the_context_is_running_is_an_error() {
    // `emit_display` formats its value with the context borrowed; a state handle made and
    // used inside that `Display` gets an error, not a panic.
    struct Sneaky<'c, 'a>(&'c Context<'a>, std::cell::RefCell<Option<String>>);
    impl std::fmt::Display for Sneaky<'_, '_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let got = self.0.value_state::<u64>("n").get();
            *self.1.borrow_mut() = got.err().map(|e| e.to_string());
            f.write_str("x")
        }
    }
    #[derive(Default)]
    struct Reenters;
    impl Operator for Reenters {
        fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
            let sneaky = Sneaky(ctx, std::cell::RefCell::new(None));
            ctx.emit_display(rec.key(), &sneaky)?;
            let err = sneaky.1.take().unwrap_or_default();
            ctx.emit(rec.key(), err)
        }
    }
    let out = Harness::<Reenters>::new().process([("k", "")]);
    assert_eq!(out[0].value_str(), "x");
    assert!(
        out[1]
            .value_str()
            .contains("from inside a Display or serde implementation"),
        "{out:?}"
    );
}

#[test]
fn event_time_timers() {
    let mut h = Harness::<Timers>::new();
    h.process([
        ("a", "timer 20"),
        ("b", "timer 10"),
        ("a", "timer 20"),
        ("a", "timer 30"),
        ("a", "deltimer 30"),
        ("b", "set hello"),
    ]);
    assert_eq!(h.event_timers("a"), [20]);
    assert!(h.fire_event_timers_up_to(9).is_empty());
    let out = h.fire_event_timers_up_to(25);
    assert_eq!(
        values(&out),
        ["fired event 10 v=hello", "fired event 20 v=none"]
    );
    assert_eq!(out[0].key_str(), Some("b"));
    assert_eq!(out[0].timestamp, Some(10));
    assert!(h.fire_event_timers_up_to(100).is_empty());
    // A timer that registers a timer already due fires in the same advance, and may use state.
    h.process([("c", "set again"), ("c", "timer 200")]);
    let out = h.fire_event_timers_up_to(300);
    assert_eq!(
        values(&out),
        ["fired event 200 v=again", "fired event 201 v=done"]
    );
    assert_eq!(h.value_state::<String>("v", "c").as_deref(), Some("done"));
}

#[test]
fn a_timer_deleted_by_a_callback_of_the_same_firing_does_not_fire() {
    let mut h = Harness::<Timers>::new();
    h.process([
        ("k", "timer 100"),
        ("k", "timer 200"),
        ("k", "set cancel 200"),
        ("j", "timer 150"),
        ("j", "set cancel 150"),
    ]);
    // k's timer at 100 deletes its timer at 200, due in the same advance (and the same call
    // of the guest); j's at 150 deletes itself, which has fired.
    let out = h.fire_event_timers_up_to(300);
    assert_eq!(
        values(&out),
        [
            "fired event 100 v=cancel 200",
            "fired event 150 v=cancel 150"
        ]
    );
    assert!(h.event_timers("k").is_empty());
}

#[test]
fn the_last_change_of_a_timer_in_a_batch_decides_it() {
    let mut h = Harness::<Timers>::new();
    h.process([("k", "timer 50"), ("k", "timer 60")]);
    // The batch sends the host one change per key and timer, the last (see `Core::timer`).
    h.process([
        ("k", "timer 5"),
        ("k", "deltimer 5"),
        ("k", "timer 7"),
        ("k", "deltimer 3"),
        ("k", "timer 9"),
        ("k", "deltimer 9"),
        ("k", "timer 9"),
        ("k", "deltimer 50"),
        ("k", "timer 50"),
        ("k", "timer 60"),
        ("k", "deltimer 60"),
        ("j", "timer 7"),
    ]);
    assert_eq!(h.event_timers("k"), [7, 9, 50]);
    assert_eq!(h.event_timers("j"), [7]);
}

#[test]
fn processing_time_timers() {
    let mut h = Harness::<Timers>::new();
    h.process([("a", "ptimer 1000")]);
    assert_eq!(h.processing_time_timers("a"), [1000]);
    assert!(h.set_processing_time(999).is_empty());
    let out = h.set_processing_time(1000);
    assert_eq!(values(&out), ["fired processing 1000 v=none"]);
    assert_eq!(out[0].timestamp, None);
}

#[test]
fn side_outputs() {
    /// `side NAME` also emits to side output NAME; every record gets `main` on the main output.
    #[derive(Default)]
    struct Sides;
    impl Operator for Sides {
        fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
            if let Some(name) = rec.value_str()?.strip_prefix("side ") {
                ctx.emit_to(name, ctx.current_key(), "to the side")?;
            }
            ctx.emit(rec.key(), "main")
        }
    }
    let mut h = Harness::<Sides>::new();
    let out = h.process([
        Input::keyed("k", "side late").with_timestamp(3),
        Input::keyed("k", "plain"),
    ]);
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].side_output.as_deref(), Some("late"));
    assert_eq!(
        (out[0].key_str(), out[0].value_str()),
        (Some("k"), "to the side")
    );
    assert_eq!(out[0].timestamp, Some(3));
    assert_eq!(out[1].side_output, None);
    assert_eq!(out[2].side_output, None);
    assert_eq!(out[2].value_str(), "main");
}

/// Reads and writes three states for every record.
#[derive(Default)]
struct Busy;

impl Operator for Busy {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let n = ctx.value_state::<u64>("n");
        n.set(&(n.get()?.unwrap_or(0) + 1))?;
        ctx.list_state::<u64>("appended").add(&1)?;
        let m = ctx.map_state::<String, u64>("m");
        m.put("x", &(m.get("x")?.unwrap_or(0) + 1))?;
        ctx.register_event_timer(1)?;
        ctx.emit(rec.key(), rec.value())
    }
}

/// Per record, deletes the key's timer of the previous record and registers one at the
/// record's time (its value), as an operator with an inactivity timer does.
#[derive(Default)]
struct Inactivity;

impl Operator for Inactivity {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let last = ctx.value_state::<i64>("last");
        if let Some(previous) = last.get()? {
            ctx.delete_event_timer(previous)?;
        }
        let t = rec.value_str()?.parse()?;
        last.set(&t)?;
        ctx.register_event_timer(t)
    }
}

#[test]
fn replacing_a_timer_per_record_sends_one_change_per_timer() {
    let mut h = Harness::<Inactivity>::new();
    let inputs = (1..=100).flat_map(|t| [("a", t.to_string()), ("b", (t + 1000).to_string())]);
    let inputs: Vec<Input> = inputs.map(|(k, v)| Input::keyed(k, v)).collect();
    h.process(inputs);
    // Each record's register is replaced by the next record's delete of it: one change per
    // record (two per record, had both been sent), and the last timer of each key stands.
    assert_eq!(h.take_calls().timer_changes, 200);
    assert_eq!(h.event_timers("a"), [100]);
    assert_eq!(h.event_timers("b"), [1100]);
}

/// `timer N` registers timers 1..=N of the key, `delete N` deletes them, in one record.
#[derive(Default)]
struct ManyTimers;

impl Operator for ManyTimers {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let (what, n) = rec
            .value_str()?
            .split_once(' ')
            .ok_or("`timer N` or `delete N`")?;
        for t in 1..=n.parse::<i64>()? {
            match what {
                "timer" => ctx.register_event_timer(t)?,
                _ => ctx.delete_event_timer(t)?,
            }
        }
        Ok(())
    }
}

#[test]
fn timer_changes_beyond_the_lookback_apply_in_order() {
    let mut h = Harness::<ManyTimers>::new();
    // The deletes of the first timers come more than the SDK looks back after their
    // registers: both reach the host, which must end with exactly the timers left.
    h.process([
        Input::keyed("k", "timer 30"),
        Input::keyed("j", "timer 2"),
        Input::keyed("k", "delete 25"),
        Input::keyed("j", "delete 1"),
    ]);
    assert_eq!(h.event_timers("k"), [26, 27, 28, 29, 30]);
    assert_eq!(h.event_timers("j"), [2]);
    h.process([Input::keyed("k", "delete 30"), Input::keyed("k", "timer 1")]);
    assert_eq!(h.event_timers("k"), [1]);
}

#[test]
fn host_calls_per_batch_do_not_grow_with_records() {
    let mut h = Harness::<Busy>::new();
    let inputs: Vec<Input> = (0..1_000)
        .map(|i| Input::keyed(format!("k{}", i % 37), "v"))
        .collect();
    h.process(inputs.clone());
    let first = h.take_calls();
    assert_eq!(
        first,
        HostCalls {
            declare: 3,
            // the map is read; the list is only appended to and never loaded
            load: 1,
            store: 2,
            // the value state's keys, none of which its write-back cache holds yet, by the
            // ids of the batch's keys; the harness's write-back after the call
            load_slots: 1,
            key_ids: 1,
            store_ids: 1,
            emit: 1,
            timers: 1,
            // one timer per key, registered by each of its records
            timer_changes: 37,
            ..HostCalls::default()
        }
    );
    h.process(inputs);
    assert_eq!(
        h.take_calls(),
        HostCalls {
            declare: 0,
            // the value state's cache holds every key now
            load_slots: 0,
            ..first
        }
    );
    assert_eq!(h.value_state::<u64>("n", "k0"), Some(2 * 28));
    assert_eq!(h.list_state::<u64>("appended", "k1").len(), 2 * 27);
    assert_eq!(
        h.map_state::<String, u64>("m", "k36"),
        [("x".into(), 2 * 27)]
    );
}

/// Per record of `add N`, `name TEXT` or `drop`: adds to the key's count, sets its name, or
/// clears both; emits the key's count and name after it, read back. `BUDGET` is its state
/// cache's.
#[derive(Default)]
struct Tally<const BUDGET: usize>;

impl<const BUDGET: usize> Operator for Tally<BUDGET> {
    const STATE_CACHE_BYTES: usize = BUDGET;

    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let (count, name) = (
            ctx.value_state::<i64>("count"),
            ctx.value_state::<String>("name"),
        );
        match rec.value_str()?.split_once(' ') {
            Some(("add", n)) => count.set(&(count.get()?.unwrap_or(0) + n.parse::<i64>()?))?,
            Some(("name", text)) => name.set(text)?,
            _ => {
                count.clear()?;
                name.clear()?;
            }
        }
        let (c, n) = (count.get()?, name.get()?);
        ctx.emit_display(rec.key(), format_args!("{c:?} {n:?}"))
    }
}

/// Batches of `Tally` records over `keys` keys: counts up and down across zero, names that
/// grow and shrink, and drops.
fn tally_batches(keys: usize) -> Vec<Vec<Input>> {
    (0..6)
        .map(|b| {
            (0..300)
                .map(|i: usize| {
                    let key = format!("k{}", (i * 7 + b * 3) % keys);
                    let value = match (i + b) % 5 {
                        0 | 1 => format!("add {}", i as i64 - 100),
                        2 => format!("name {}", "n".repeat(i % 40)),
                        3 if i.is_multiple_of(3) => "drop".to_owned(),
                        _ => format!("add {}", b),
                    };
                    Input::keyed(key, value)
                })
                .collect()
        })
        .collect()
}

#[test]
fn values_kept_from_batch_to_batch_are_what_loading_every_batch_reads() {
    // No cache, one that holds everything, and one over its budget after every batch (it
    // writes back and starts empty): the same output and the same state after every batch.
    let mut none = Harness::<Tally<0>>::new();
    let mut all = Harness::<Tally<{ 8 << 20 }>>::new();
    let mut tiny = Harness::<Tally<1>>::new();
    for batch in tally_batches(50) {
        let expected = none.process(batch.clone());
        assert_eq!(all.process(batch.clone()), expected);
        assert_eq!(tiny.process(batch), expected);
        for k in (0..50).map(|k| format!("k{k}")) {
            let state = (
                none.value_state::<i64>("count", &k),
                none.value_state::<String>("name", &k),
            );
            assert_eq!(
                (all.value_state("count", &k), all.value_state("name", &k)),
                state
            );
            assert_eq!(
                (tiny.value_state("count", &k), tiny.value_state("name", &k)),
                state
            );
        }
    }
    let (none, all, tiny) = (none.take_calls(), all.take_calls(), tiny.take_calls());
    assert_eq!((none.load_slots, none.key_ids, none.store_ids), (0, 0, 0));
    assert_eq!((all.load, all.store), (0, 0));
    // The full cache asked the host once per key, the first time: two states, 50 keys.
    assert_eq!(all.load_slots, 2);
    // Key ids once per batch; written back after each of the 6 calls, both states.
    assert_eq!((all.key_ids, all.store_ids), (6, 2 * 6));
    // Over its budget, the tiny one writes back at the end of every batch and loads again.
    assert_eq!((tiny.load_slots, tiny.load), (2 * 6, 0));
}

#[test]
fn the_forget_batch_writes_back_and_the_ids_start_over() {
    let mut h = Harness::<Tally<{ 8 << 20 }>>::new();
    let mut reference = Harness::<Tally<0>>::new();
    for (i, batch) in tally_batches(40).into_iter().enumerate() {
        let expected = reference.process(batch.clone());
        assert_eq!(h.process(batch), expected, "batch {i}");
        if i % 2 == 0 {
            h.forget_key_ids();
        }
    }
    for k in (0..40).map(|k| format!("k{k}")) {
        assert_eq!(
            h.value_state::<String>("name", &k),
            reference.value_state::<String>("name", &k)
        );
    }
}

#[test]
fn a_restart_loses_nothing_written_back() {
    // The harness writes back after every call, as the host does before a checkpoint; a new
    // instance starts with an empty cache and reads what was written back.
    let mut h = Harness::<Tally<{ 8 << 20 }>>::new();
    let batches = tally_batches(20);
    let mut reference = Harness::<Tally<0>>::new();
    for batch in batches {
        let expected = reference.process(batch.clone());
        assert_eq!(h.process(batch), expected);
        h.restart();
    }
}

#[test]
fn states_with_a_ttl_are_loaded_and_stored_every_batch() {
    #[derive(Default)]
    struct Expiring;
    impl Operator for Expiring {
        fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> {
            let n =
                ctx.value_state_with_ttl::<u64>("n", Ttl::new(std::time::Duration::from_secs(60)));
            n.set(&(n.get()?.unwrap_or(0) + 1))
        }
    }
    let mut h = Harness::<Expiring>::new();
    h.process([("a", ""), ("b", "")]);
    h.process([("a", "")]);
    let calls = h.take_calls();
    assert_eq!(
        (calls.load, calls.store, calls.load_slots, calls.store_ids),
        (2, 2, 0, 0)
    );
    assert_eq!(h.value_state::<u64>("n", "a"), Some(2));
}

/// Emits a 1 KiB value per record.
#[derive(Default)]
struct Big;

impl Operator for Big {
    fn process(&mut self, ctx: &mut Context, _rec: Record<'_>) -> Result<()> {
        ctx.emit(None, [b'x'; 1024])
    }
}

#[test]
fn output_is_sent_per_64_kib() {
    let mut h = Harness::<Big>::new();
    let out = h.process((0..200).map(|_| "r"));
    assert_eq!(out.len(), 200);
    // ~1 KiB per record: 200 KiB leave in 3 full buffers and the rest at the end.
    assert_eq!(h.take_calls().emit, 4);
    assert!(h.process(std::iter::empty::<&str>()).is_empty());
    assert_eq!(h.take_calls().emit, 0);
}

#[test]
fn reads_only_store_nothing() {
    #[derive(Default)]
    struct ReadsOnly;
    impl Operator for ReadsOnly {
        fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> {
            ctx.value_state::<String>("v").get()?;
            ctx.list_state::<String>("l").get()?;
            ctx.map_state::<String, String>("m").entries()?;
            // Appending nothing writes nothing either.
            ctx.list_state::<String>("l")
                .add_all(Vec::<String>::new())?;
            Ok(())
        }
    }
    let mut h = Harness::<ReadsOnly>::new();
    h.process([("k", ""), ("k", ""), ("j", "")]);
    let calls = h.take_calls();
    assert_eq!(
        (calls.load, calls.load_slots, calls.store, calls.store_ids),
        (2, 1, 0, 0)
    );
}

#[test]
fn a_list_read_has_room_for_the_next_element() {
    /// Keeps the last three values of each key: read, push, write back.
    #[derive(Default)]
    struct LastThree;
    impl Operator for LastThree {
        fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
            let last = ctx.list_state::<String>("last");
            let mut items = last.get()?;
            if items.capacity() == items.len() {
                return Err(format!("no room after {} items", items.len()).into());
            }
            items.push(rec.value_str()?.to_owned());
            let keep = items.len().saturating_sub(3);
            last.update(&items[keep..])
        }
    }
    let mut h = Harness::<LastThree>::new();
    // Empty, loaded, loaded and changed in the batch, replaced in the batch.
    h.process([("k", "a"), ("k", "b")]);
    h.process([("k", "c"), ("k", "d"), ("j", "e")]);
    h.process([("k", "f")]);
    assert_eq!(h.list_state::<String>("last", "k"), ["c", "d", "f"]);
    assert_eq!(h.list_state::<String>("last", "j"), ["e"]);
}

#[test]
fn close_may_emit_but_has_no_key() {
    #[derive(Default)]
    struct Closer;
    impl Operator for Closer {
        fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> {
            Ok(())
        }
        fn close(&mut self, ctx: &mut Context) -> Result<()> {
            assert_eq!(ctx.current_key(), None);
            let err = ctx.value_state::<u8>("s").get().unwrap_err();
            ctx.emit(None, err.to_string())
        }
    }
    let out = Harness::<Closer>::new().close();
    assert!(
        out[0].value_str().contains("state \"s\""),
        "{}",
        out[0].value_str()
    );
}

/// A host that answers `load` with garbage.
struct BadHost;

impl Backend for BadHost {
    fn declare_state(&mut self, _: StateKind, _: &str, _: Option<&Ttl>) -> usize {
        0
    }
    fn load(&mut self, _: usize, _: &[&[u8]]) -> Vec<u8> {
        vec![1, 2, 3]
    }
    fn map_get(&mut self, _: usize, _: &[&[u8]], _: u32, _: &[u8]) -> Option<Vec<u8>> {
        Some(vec![0xff; 3])
    }
    fn map_entries(&mut self, _: usize, _: &[&[u8]], _: u32) -> Vec<u8> {
        vec![1, 2, 3]
    }
    fn store(&mut self, _: usize, _: &[&[u8]], _: &[u8]) {}
    fn load_slots(&mut self, _: usize, _: &[&[u8]], _: &[u32]) -> Vec<u8> {
        vec![1, 2, 3]
    }
    fn write_back_advised(&mut self) -> bool {
        true
    }
    fn key_ids(&mut self, keys: &[&[u8]]) -> Vec<u32> {
        (0..keys.len() as u32).collect()
    }
    fn store_ids(&mut self, _: usize, _: &[u8]) {}
    fn emit(&mut self, _: &[u8]) {}
    fn update_timers(&mut self, _: &[&[u8]], _: &[u8]) {}
    fn current_watermark(&mut self) -> Option<i64> {
        None
    }
    fn current_processing_time(&mut self) -> i64 {
        0
    }
    fn log(&mut self, _: Level, _: &str) {}
    fn declare_operator_state(&mut self, _: &str, _: Redistribution) -> usize {
        0
    }
    fn get_operator_state(&mut self, _: usize) -> Vec<Vec<u8>> {
        vec![vec![0xff; 11]]
    }
    fn set_operator_state(&mut self, _: usize, _: &[Vec<u8>]) {}
}

/// Restores a running total from operator state in `open`, saves it after every batch.
#[derive(Default)]
struct Total(u64);

impl Operator for Total {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.0 = ctx.operator_state::<u64>("total").get()?.unwrap_or(0);
        Ok(())
    }
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        self.0 += 1;
        ctx.emit_display(rec.key(), self.0)
    }
    fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
        ctx.operator_state("total").set(&self.0)
    }
}

/// Keeps every value in a split list and the last in a union list; `mix` uses the split
/// list's name with the other mode.
#[derive(Default)]
struct Lists;

impl Operator for Lists {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let v = rec.value_str()?.to_owned();
        if v == "mix" {
            ctx.union_list_state::<String>("split").get()?;
        }
        ctx.operator_list_state::<String>("split").add(v.clone())?;
        ctx.union_list_state::<String>("union").set(&[v])
    }
}

#[test]
fn operator_list_states_keep_lists_with_one_mode_per_name() {
    let mut h = Harness::<Lists>::new();
    h.process([("k", "a"), ("j", "b")]);
    assert_eq!(h.operator_list_state::<String>("split"), ["a", "b"]);
    assert_eq!(h.operator_list_state::<String>("union"), ["b"]);
    h.restart();
    h.process([("k", "c")]);
    assert_eq!(h.operator_list_state::<String>("split"), ["a", "b", "c"]);
    let err = h.try_process([("k", "mix")]).unwrap_err().to_string();
    assert!(err.contains("redistribution"), "{err}");
}

#[test]
fn operator_state_outlives_batches_and_keys() {
    let mut h = Harness::<Total>::new();
    h.process([("a", ""), ("b", "")]);
    assert_eq!(h.operator_state::<u64>("total"), Some(2));
    // A new instance (as after a restore) reads it back in `open`.
    h.restart();
    let out = h.process([("c", "")]);
    assert_eq!(out[0].value_str(), "3");
    assert_eq!(h.operator_state::<u64>("total"), Some(3));
}

#[test]
fn undecodable_operator_state_is_an_error_naming_it() {
    let info = OpenInfo {
        operator_uid: "u".into(),
        subtask_index: 0,
        parallelism: 1,
        config: String::new(),
    };
    let mut instance = Instance::new(Total::default(), Box::new(BadHost), info);
    let err = instance.open().unwrap_err().to_string();
    assert!(
        err.contains("operator state \"total\" cannot be decoded"),
        "{err}"
    );
}

#[test]
fn malformed_host_buffers_are_errors() {
    let info = OpenInfo {
        operator_uid: "u".into(),
        subtask_index: 0,
        parallelism: 1,
        config: String::new(),
    };
    let mut instance = Instance::new(Remember, Box::new(BadHost), info);
    instance.open().unwrap();
    let mut w = weir_wire::BatchWriter::new(Vec::new());
    let slot = w.key(b"k");
    w.record(Some(slot), Kind::Insert, None, b"x");
    let err = instance.process(&w.finish()).unwrap_err().to_string();
    assert!(
        err.contains("state \"v\": the host's load() answer"),
        "{err}"
    );
    let err = instance.process(&[9, 9]).unwrap_err().to_string();
    assert!(err.contains("malformed"), "{err}");
    let err = instance
        .on_timers(&[0, 0, 0, 0, 1])
        .unwrap_err()
        .to_string();
    assert!(err.contains("malformed"), "{err}");
}

#[test]
fn config_and_open_context() {
    #[derive(Default)]
    struct Configured(RefCell<String>);
    #[derive(serde::Deserialize)]
    struct Config {
        greeting: String,
    }
    impl Operator for Configured {
        fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
            let c: Config = ctx.config()?;
            *self.0.borrow_mut() = format!(
                "{} from {} {}/{}",
                c.greeting,
                ctx.operator_uid(),
                ctx.subtask_index(),
                ctx.parallelism()
            );
            Ok(())
        }
        fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> {
            ctx.emit(None, self.0.borrow().as_str())
        }
    }
    let mut h = Harness::<Configured>::new()
        .with_config(serde_json::json!({"greeting": "hi"}))
        .with_operator_uid("op")
        .with_parallelism(3)
        .with_subtask_index(2);
    assert_eq!(values(&h.process(["x"])), ["hi from op 2/3"]);
    let mut h = Harness::<Configured>::new();
    let err = h.try_process(["x"]).unwrap_err().to_string();
    assert!(
        err.contains("operator \"test-operator\": its config {}"),
        "{err}"
    );
}

/// Runs a script line per record on a map of strings per key (`put k v`, `remove k`, `clear`,
/// `get k`, `contains k`, `empty`, `entries`; `bump k` reads `k` and puts it back with an `x`
/// appended, `take k` reads and removes it) and emits what the reads return.
#[derive(Default)]
struct MapScript;

impl Operator for MapScript {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let m = ctx.map_state::<String, String>("m");
        let line = rec.value_str()?;
        let mut words = line.split(' ');
        let out = match (words.next(), words.next(), words.next()) {
            (Some("put"), Some(k), Some(v)) => return m.put(k, v),
            (Some("remove"), Some(k), _) => return m.remove(k),
            (Some("clear"), ..) => return m.clear(),
            (Some("get"), Some(k), _) => format!("{:?}", m.get(k)?),
            (Some("bump"), Some(k), _) => {
                let v = m.get(k)?.unwrap_or_default() + "x";
                return m.put(k, &v);
            }
            (Some("take"), Some(k), _) => {
                let v = m.get(k)?;
                m.remove(k)?;
                format!("{v:?}")
            }
            (Some("contains"), Some(k), _) => m.contains(k)?.to_string(),
            (Some("empty"), ..) => m.is_empty()?.to_string(),
            (Some("entries"), ..) => format!("{:?}", m.entries()?),
            _ => return Err(format!("bad script line {line:?}").into()),
        };
        ctx.emit(rec.key(), out)
    }
}

/// What [`MapScript`] emits for `line` on `map`, which the line changes: computed here, not
/// by the SDK. Entries are in the order of their encoded keys (shorter strings first).
fn map_script_model(
    map: &mut std::collections::BTreeMap<String, String>,
    line: &str,
) -> Option<String> {
    let w: Vec<&str> = line.split(' ').collect();
    match w[0] {
        "put" => drop(map.insert(w[1].into(), w[2].into())),
        "remove" => drop(map.remove(w[1])),
        "clear" => map.clear(),
        "get" => return Some(format!("{:?}", map.get(w[1]))),
        "bump" => map.entry(w[1].into()).or_default().push('x'),
        "take" => return Some(format!("{:?}", map.remove(w[1]))),
        "contains" => return Some(map.contains_key(w[1]).to_string()),
        "empty" => return Some(map.is_empty().to_string()),
        _ => {
            let mut entries: Vec<(String, String)> = map.clone().into_iter().collect();
            entries.sort_by(|a, b| (a.0.len(), &a.0).cmp(&(b.0.len(), &b.0)));
            return Some(format!("{entries:?}"));
        }
    }
    None
}

/// Runs one batch of [`MapScript`] lines (key index, line) and checks what it emits against
/// the models of the keys' maps (`key0`, `key1`, ...), which the lines change.
fn run_map_script(
    h: &mut Harness<MapScript>,
    model: &mut [std::collections::BTreeMap<String, String>],
    lines: Vec<(usize, String)>,
    batch: usize,
) {
    let mut expected = Vec::new();
    let mut inputs = Vec::new();
    for (k, line) in lines {
        expected.extend(map_script_model(&mut model[k], &line));
        inputs.push(Input::keyed(format!("key{k}"), line));
    }
    assert_eq!(values(&h.process(inputs)), expected, "batch {batch}");
}

/// A reproducible generator: `rand(n)` is below `n`.
fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// Read, modify, write of a few map keys, many times per key and batch (so that a key's
/// changes are indexed), mixed with the other operations, against a model.
#[test]
fn maps_read_modified_and_written_in_one_batch_keep_every_change() {
    let mut h = Harness::<MapScript>::new();
    let mut model: Vec<std::collections::BTreeMap<String, String>> = vec![Default::default(); 2];
    let mut rand = xorshift(0x2545_f491_4f6c_dd1d);
    for batch in 0..100 {
        let mut lines = Vec::new();
        for _ in 0..120 {
            let k = rand(2) as usize;
            let mk = format!("m{}", rand(12));
            let line = match rand(16) {
                0 if rand(4) == 0 => "clear".to_string(),
                0..=5 => format!("bump {mk}"),
                6 | 7 => format!("take {mk}"),
                8 | 9 => format!("put {mk} v"),
                10 => format!("remove {mk}"),
                11 | 12 => format!("get {mk}"),
                13 => format!("contains {mk}"),
                14 => "empty".to_string(),
                _ => "entries".to_string(),
            };
            lines.push((k, line));
        }
        run_map_script(&mut h, &mut model, lines, batch);
    }
    for (k, m) in model.iter().enumerate() {
        let stored = h.map_state::<String, String>("m", format!("key{k}"));
        assert_eq!(stored, m.clone().into_iter().collect::<Vec<_>>());
    }
}

/// Maps that grow past what the host sends whole (16 KiB) and shrink again, read by point
/// reads and whole, against a model, batch after batch.
#[test]
fn large_maps_read_what_was_written() {
    let mut h = Harness::<MapScript>::new();
    let mut model: Vec<std::collections::BTreeMap<String, String>> = vec![Default::default(); 3];
    let mut rand = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut large_seen = 0;
    for batch in 0..300 {
        let mut lines = Vec::new();
        for _ in 0..40 {
            let k = rand(3) as usize;
            let mk = format!("m{}", rand(60));
            let line = match rand(20) {
                0 if rand(8) == 0 => "clear".to_string(),
                0..=4 => format!("remove {mk}"),
                5..=11 => format!("put {mk} {}", "v".repeat(rand(1_200) as usize + 1)),
                12..=15 => format!("get {mk}"),
                16 | 17 => format!("contains {mk}"),
                18 => "empty".to_string(),
                _ => "entries".to_string(),
            };
            lines.push((k, line));
        }
        run_map_script(&mut h, &mut model, lines, batch);
        let large = |m: &std::collections::BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| 8 + 1 + k.len() + 2 + v.len())
                .sum::<usize>()
                > 16 << 10
        };
        large_seen += model.iter().filter(|m| large(m)).count();
    }
    assert!(
        large_seen > 100,
        "the maps were large in {large_seen} key-batches only"
    );
    // Every entry of a large map removed in one batch: empty then, and after.
    let keys: Vec<String> = model[0].keys().cloned().collect();
    let mut inputs: Vec<Input> = (0..40)
        .map(|i| Input::keyed("key0", format!("put p{i} {}", "x".repeat(600))))
        .collect();
    h.process(inputs.drain(..));
    let removes = keys.iter().cloned().chain((0..40).map(|i| format!("p{i}")));
    inputs.extend(removes.map(|k| Input::keyed("key0", format!("remove {k}"))));
    inputs.push(Input::keyed("key0", "empty"));
    assert_eq!(values(&h.process(inputs)), ["true"]);
    assert_eq!(
        values(&h.process([Input::keyed("key0", "empty")])),
        ["true"]
    );
}

/// Reading entries of a large map costs one host call per distinct map key read in a batch,
/// and the map is not sent whole.
#[test]
fn point_reads_of_a_large_map_cost_what_is_read() {
    let mut h = Harness::<MapScript>::new();
    let fill: Vec<Input> = (0..1_000)
        .map(|i| Input::keyed("big", format!("put m{i} {i:0>40}")))
        .collect();
    h.process(fill);
    h.take_calls();
    let reads: Vec<Input> = (0..300)
        .map(|i| Input::keyed("big", format!("get m{}", i % 3)))
        .chain([
            Input::keyed("big", "contains m1"),
            Input::keyed("big", "empty"),
        ])
        .collect();
    let out = h.process(reads);
    assert_eq!(
        out[0].value_str(),
        format!("Some({:?})", format!("{:0>40}", 0))
    );
    assert_eq!(values(&out[300..]), ["true", "false"]);
    assert_eq!(
        h.take_calls(),
        HostCalls {
            load: 1,
            map_get: 3,
            emit: 1,
            ..HostCalls::default()
        }
    );
}

#[test]
fn states_used_in_any_order_each_keep_their_own_values() {
    /// Adds one to each state the record's value names, in that order; emits the sums.
    #[derive(Default)]
    struct Tally;
    impl Operator for Tally {
        fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
            let mut sums = Vec::new();
            for name in rec.value_str()?.split(' ') {
                // A name inside the record: its bytes, not its address, name the state.
                let state = ctx.value_state::<u64>(name);
                let n = state.get()?.unwrap_or(0) + 1;
                state.set(&n)?;
                sums.push(format!("{name}={n}"));
            }
            ctx.emit(rec.key(), sums.join(" "))
        }
    }
    let mut h = Harness::<Tally>::new();
    let out = h.process([
        ("k", "a b c"),
        ("k", "a b c"),
        ("k", "c a"),
        ("j", "b"),
        ("k", "b b c"),
        ("k", "count total"),
        ("k", "total count a"),
    ]);
    assert_eq!(
        values(&out),
        [
            "a=1 b=1 c=1",
            "a=2 b=2 c=2",
            "c=3 a=3",
            "b=1",
            "b=3 b=4 c=4",
            "count=1 total=1",
            "total=2 count=2 a=4",
        ]
    );
    assert_eq!(h.value_state::<u64>("c", "k"), Some(4));
}
