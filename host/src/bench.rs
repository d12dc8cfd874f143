//! The state-backend benchmark behind `cargo xtask bench-state` (`host/benches/state.rs`).
//!
//! For each number of keys, on one subtask that owns every key group: loads the keys into a
//! value state, then updates every key once more (read, add one, write) in batches of 4,096
//! distinct keys, as the WASM host does; then measures checkpoints after 1% of the keys
//! changed (full snapshot vs incremental RocksDB checkpoint: duration and bytes written) and
//! the time to restore from each. Then the cost of timers against value-state writes, and of
//! one read and write of a large map per key: loaded whole against point reads.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::checkpoint::storage::put_shared;
use crate::clock::Clock;
use crate::operator::SnapshotFormat;
use crate::state::{
    BackendKind, KeyedState, MAP_LOAD_LIMIT, Slots, StateConfig, StateId, StateKind, StateSetup,
};
use weir_wire::{MapLoad, MapOp, TimeDomain};

const BATCH: usize = 4096;
const MAX_PARALLELISM: u32 = 128;

/// Runs the benchmark for each of `keys` in `dir` and prints a table.
pub fn state(keys: &[u64], dir: &Path) -> Result<(), String> {
    println!(
        "{:>10} {:<8} {:>11} {:>11} | {:<22} {:>9} {:>11} {:>10}",
        "keys",
        "backend",
        "load k/s",
        "update k/s",
        "checkpoint, 1% changed",
        "ms",
        "MB written",
        "restore ms"
    );
    for &n in keys {
        for backend in [BackendKind::Memory, BackendKind::RocksDb] {
            let root = dir.join(format!("{n}-{backend:?}"));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
            let rows = one(n, backend, &root).map_err(|e| format!("{n} keys, {backend:?}: {e}"))?;
            for (i, r) in rows.iter().enumerate() {
                let (load, update) = if i == 0 {
                    (format!("{:.0}", r.load), format!("{:.0}", r.update))
                } else {
                    (String::new(), String::new())
                };
                println!(
                    "{:>10} {:<8} {:>11} {:>11} | {:<22} {:>9.0} {:>11.1} {:>10.0}",
                    n,
                    format!("{backend:?}").to_lowercase(),
                    load,
                    update,
                    r.kind,
                    ms(r.checkpoint),
                    r.written as f64 / 1e6,
                    ms(r.restore)
                );
            }
            let _ = std::fs::remove_dir_all(&root);
        }
    }
    println!(
        "\n{:>10} {:<8} | {:>12} {:>12} {:>16} | {:>10} {:>10}",
        "keys", "backend", "value ns/rec", "timer ns/rec", "replace ns/rec", "pending", "fire ns"
    );
    for &n in keys {
        for backend in [BackendKind::Memory, BackendKind::RocksDb] {
            timers(n.min(1_000_000), 2_000_000, backend)?;
        }
    }
    println!(
        "\n{:>10} {:<8} | {:>18} {:>18}",
        "map size", "backend", "whole load ns/key", "point read ns/key"
    );
    for entries in [100, 10_000, 100_000] {
        for backend in [BackendKind::Memory, BackendKind::RocksDb] {
            let root = dir.join(format!("map-{entries}-{backend:?}"));
            let _ = std::fs::remove_dir_all(&root);
            let (whole, point) = maps(entries, backend, &root)
                .map_err(|e| format!("maps of {entries}, {backend:?}: {e}"))?;
            let _ = std::fs::remove_dir_all(&root);
            println!(
                "{entries:>10} {:<8} | {whole:>18.0} {point:>18.0}",
                format!("{backend:?}").to_lowercase()
            );
        }
    }
    println!(
        "\n{:>10} {:<8} | {:>18}",
        "list size", "backend", "append ns/key"
    );
    for elements in [100, 10_000, 100_000] {
        for backend in [BackendKind::Memory, BackendKind::RocksDb] {
            let root = dir.join(format!("list-{elements}-{backend:?}"));
            let _ = std::fs::remove_dir_all(&root);
            let append = lists(elements, backend, &root)
                .map_err(|e| format!("lists of {elements}, {backend:?}: {e}"))?;
            let _ = std::fs::remove_dir_all(&root);
            println!(
                "{elements:>10} {:<8} | {append:>18.0}",
                format!("{backend:?}").to_lowercase()
            );
        }
    }
    Ok(())
}

/// What appending one element to each key's list costs per key and batch, as a guest's
/// `ListState::add` does (without reading the list), with lists of `elements` elements of 16
/// bytes over 64 keys in batches of all of them. Checks that every element is there after.
/// Returns nanoseconds per key.
fn lists(elements: u64, backend: BackendKind, root: &Path) -> Result<f64, String> {
    const KEYS: u64 = 64;
    let err = |e: crate::state::StateError| e.to_string();
    let mut s = open(backend, root)?;
    let id = s.declare("l", StateKind::List, None).map_err(err)?;
    let mut slots = Slots::default();
    for k in 0..KEYS {
        let key = format!("key-{k}");
        slots.push(key.as_bytes(), s.key_group(key.as_bytes()));
    }
    let element = [7u8; 16];
    let mut changes = Vec::new();
    let append = |changes: &mut Vec<u8>, n: usize| {
        changes.clear();
        for k in 0..KEYS as u32 {
            let elems = std::iter::repeat_n(&element[..], n);
            weir_wire::put_list_op(changes, k, weir_wire::ListWrite::Append, elems);
        }
    };
    let chunk = 1_000.min(elements);
    for _ in 0..elements / chunk {
        append(&mut changes, chunk as usize);
        s.store(id, &slots, &changes, u64::MAX).map_err(err)?;
    }
    let batches = (20_000_000 / elements.max(1_000)).clamp(20, 2_000);
    append(&mut changes, 1);
    let started = Instant::now();
    for _ in 0..batches {
        s.store(id, &slots, &changes, u64::MAX).map_err(err)?;
    }
    let took = started.elapsed().as_nanos() as f64 / (batches * KEYS) as f64;
    let mut buf = Vec::new();
    s.load(id, &slots, usize::MAX, &mut buf).map_err(err)?;
    let mut r = weir_wire::Reader::new(&buf, "bench");
    let want = elements / chunk * chunk + batches;
    for k in 0..KEYS {
        let n = r.count(4).map_err(|e| e.to_string())? as u64;
        if n != want {
            return Err(format!("key-{k} has {n} elements, not {want}"));
        }
        for _ in 0..n {
            r.bytes().map_err(|e| e.to_string())?;
        }
    }
    Ok(took)
}

/// What reading and writing one entry of each key's map costs per key and batch, with maps
/// of `entries` entries over 64 keys in batches of all of them: loaded whole (as the host's
/// own operators load maps) or as a guest reads them (whole up to `MAP_LOAD_LIMIT`, else one
/// point read). Returns nanoseconds per key for each.
fn maps(entries: u64, backend: BackendKind, root: &Path) -> Result<(f64, f64), String> {
    const KEYS: u64 = 64;
    let err = |e: crate::state::StateError| e.to_string();
    let mut s = open(backend, root)?;
    let id = s.declare("m", StateKind::Map, None).map_err(err)?;
    let mut slots = Slots::default();
    for k in 0..KEYS {
        let key = format!("key-{k}");
        slots.push(key.as_bytes(), s.key_group(key.as_bytes()));
    }
    let mut changes = Vec::new();
    for e in 0..entries {
        for k in 0..KEYS {
            let op = MapOp::Put(&e.to_le_bytes(), &[0; 8]);
            weir_wire::put_map_op(&mut changes, k as u32, op);
        }
        if changes.len() > 1 << 20 || e + 1 == entries {
            s.store(id, &slots, &changes, u64::MAX).map_err(err)?;
            changes.clear();
        }
    }
    let mut rng = fastrand::Rng::with_seed(7);
    let mut run = |s: &mut KeyedState, max_map: usize| -> Result<f64, String> {
        let batches = (2_000_000 / entries.max(1_000)).clamp(20, 2_000);
        let started = Instant::now();
        let mut buf = Vec::new();
        for _ in 0..batches {
            buf.clear();
            s.load(id, &slots, max_map, &mut buf).map_err(err)?;
            let mut r = weir_wire::Reader::new(&buf, "bench");
            changes.clear();
            for slot in 0..KEYS as u32 {
                let mk = rng.u64(..entries).to_le_bytes();
                let found = match weir_wire::read_map_load(&mut r).map_err(|e| e.to_string())? {
                    MapLoad::Large(_) => s.map_get(id, &slots, slot, &mk).map_err(err)?,
                    MapLoad::Whole(n) => {
                        let mut found = None;
                        for _ in 0..n {
                            let (k, v) = (r.bytes(), r.bytes());
                            if k == Ok(&mk[..]) {
                                found = v.ok().map(<[u8]>::to_vec);
                            }
                        }
                        found
                    }
                };
                let n = found.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or_default()));
                weir_wire::put_map_op(&mut changes, slot, MapOp::Put(&mk, &(n + 1).to_le_bytes()));
            }
            s.store(id, &slots, &changes, u64::MAX).map_err(err)?;
        }
        Ok(started.elapsed().as_nanos() as f64 / (batches * KEYS) as f64)
    };
    let whole = run(&mut s, usize::MAX)?;
    let point = run(&mut s, MAP_LOAD_LIMIT)?;
    Ok((whole, point))
}

struct Row {
    load: f64,
    update: f64,
    kind: &'static str,
    checkpoint: Duration,
    written: u64,
    restore: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn open(backend: BackendKind, root: &Path) -> Result<KeyedState, String> {
    let setup = StateSetup {
        config: StateConfig {
            backend,
            ..StateConfig::default()
        },
        root: root.join("work"),
        clock: Clock::system(),
    };
    KeyedState::open(&setup, "bench", 0, MAX_PARALLELISM, 0..MAX_PARALLELISM)
        .map_err(|e| e.to_string())
}

/// Adds `delta` to the count of each key of `keys`, in batches.
fn update(
    s: &mut KeyedState,
    id: StateId,
    keys: impl Iterator<Item = u64>,
    delta: u64,
) -> Result<(), String> {
    let mut slots = Slots::default();
    let mut counts: Vec<u64> = Vec::with_capacity(BATCH);
    let mut values: Vec<[u8; 8]> = Vec::with_capacity(BATCH);
    let mut key = String::new();
    let mut flush = |s: &mut KeyedState, slots: &mut Slots| -> Result<(), String> {
        counts.clear();
        s.read_values(id, slots, |_, v| {
            counts.push(v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or_default())))
        })
        .map_err(|e| e.to_string())?;
        values.clear();
        values.extend(counts.iter().map(|c| (c + delta).to_le_bytes()));
        let changes = values.iter().enumerate().map(|(i, v)| (i, Some(&v[..])));
        s.write_values(id, slots, changes)
            .map_err(|e| e.to_string())?;
        slots.clear();
        Ok(())
    };
    for k in keys {
        key.clear();
        key.push_str("key-");
        key.push_str(itoa::Buffer::new().format(k));
        let group = s.key_group(key.as_bytes());
        slots.push(key.as_bytes(), group);
        if slots.len() == BATCH {
            flush(s, &mut slots)?;
        }
    }
    if slots.len() > 0 {
        flush(s, &mut slots)?;
    }
    Ok(())
}

fn one(n: u64, backend: BackendKind, root: &Path) -> Result<Vec<Row>, String> {
    let mut s = open(backend, root)?;
    let id = s
        .declare("count", StateKind::Value, None)
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    update(&mut s, id, 0..n, 1)?;
    let load = n as f64 / started.elapsed().as_secs_f64() / 1e3;
    // Updates in a shuffled order, so that the cache in front of RocksDB does not help.
    let mut order: Vec<u64> = (0..n).collect();
    fastrand::Rng::with_seed(1).shuffle(&mut order);
    let started = Instant::now();
    update(&mut s, id, order.iter().copied(), 1)?;
    let update_rate = n as f64 / started.elapsed().as_secs_f64() / 1e3;

    let shared = root.join("shared");
    let mut rows = Vec::new();
    let mut first = true;
    let mut checkpoint_row = |kind: &'static str, checkpoint: Duration, written: u64, restore| {
        rows.push(Row {
            load: if first { load } else { 0.0 },
            update: update_rate,
            kind,
            checkpoint,
            written,
            restore,
        });
        first = false;
    };

    if backend == BackendKind::RocksDb {
        // A first checkpoint holds everything; after 1% of the keys changed, the second
        // one uploads only the files written since.
        let mut manifest = Vec::new();
        let started = Instant::now();
        let uploads = s
            .checkpoint(1, SnapshotFormat::Native, &mut manifest)
            .map_err(|e| e.to_string())?
            .ok_or("no incremental checkpoint")?;
        let written = put_shared(&uploads, &shared).map_err(|e| e.to_string())?;
        checkpoint_row(
            "incremental, first",
            started.elapsed(),
            written,
            Duration::ZERO,
        );
        s.notify_complete(1);
        update(
            &mut s,
            id,
            order.iter().copied().take((n / 100) as usize),
            1,
        )?;
        manifest.clear();
        let started = Instant::now();
        let uploads = s
            .checkpoint(2, SnapshotFormat::Native, &mut manifest)
            .map_err(|e| e.to_string())?
            .ok_or("no incremental checkpoint")?;
        let written =
            put_shared(&uploads, &shared).map_err(|e| e.to_string())? + manifest.len() as u64;
        let took = started.elapsed();
        let restore = restore(backend, root, &manifest, &shared, n)?;
        checkpoint_row("incremental, 1% changed", took, written, restore);
    } else {
        update(
            &mut s,
            id,
            order.iter().copied().take((n / 100) as usize),
            1,
        )?;
    }
    // A full snapshot, written and synced as a checkpoint's state file is.
    let started = Instant::now();
    let mut full = Vec::new();
    s.snapshot(&mut full).map_err(|e| e.to_string())?;
    let file = root.join("full");
    std::fs::write(&file, &full)
        .and_then(|()| std::fs::File::open(&file)?.sync_all())
        .map_err(|e| e.to_string())?;
    let took = started.elapsed();
    drop(s);
    let restore = restore(backend, root, &full, &shared, n)?;
    checkpoint_row("full, 1% changed", took, full.len() as u64, restore);
    Ok(rows)
}

/// Restores `file` into a new store and checks the key count; returns how long it took.
fn restore(
    backend: BackendKind,
    root: &Path,
    file: &[u8],
    shared: &Path,
    n: u64,
) -> Result<Duration, String> {
    let started = Instant::now();
    let mut back = open(backend, root)?;
    back.restore_file(file, shared).map_err(|e| e.to_string())?;
    let took = started.elapsed();
    // Every key is there with count 2 or 3.
    let id = back
        .declare("count", StateKind::Value, None)
        .map_err(|e| e.to_string())?;
    let mut slots = Slots::default();
    for k in [0, n / 2, n - 1] {
        let key = format!("key-{k}");
        slots.push(key.as_bytes(), back.key_group(key.as_bytes()));
    }
    let mut found = 0;
    back.read_values(id, &slots, |_, v| {
        found += usize::from(v.is_some_and(|v| matches!(v[0], 2 | 3)))
    })
    .map_err(|e| e.to_string())?;
    if found != 3 {
        return Err(format!("the restore lost keys: {found} of 3 sampled found"));
    }
    Ok(took)
}

/// The cost per record of what an operator does with one timer per key, against a value-state
/// write: for `records` records over `keys` keys in random order (timestamps rising), on
/// `backend` (RocksDB keeps the earliest 65,536 timers in memory). Prints nanoseconds per
/// record.
pub fn timers(keys: u64, records: u64, backend: BackendKind) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(3);
    let stream: Vec<u64> = (0..records).map(|_| rng.u64(0..keys)).collect();
    let name = |k: u64| format!("key-{k}");
    let names: Vec<String> = (0..keys).map(name).collect();
    let dir = std::env::temp_dir().join(format!("weir-bench-timers-{}", std::process::id()));
    let fail = |e: crate::state::StateError| e.to_string();
    // Each opens a database of its own under `dir`.
    let open_declared = || -> Result<(KeyedState, StateId), String> {
        let mut s = open(backend, &dir)?;
        let id = s.declare("count", StateKind::Value, None).map_err(fail)?;
        Ok((s, id))
    };
    let (mut s, id) = open_declared()?;
    let per_record = |started: Instant| started.elapsed().as_nanos() as f64 / records as f64;

    // A value-state write per record, as the WASM host stores a batch's changes.
    let started = Instant::now();
    update(&mut s, id, stream.iter().copied(), 1)?;
    let value = per_record(started);

    // Timers: register one per record, then the same with the key's previous timer deleted
    // first, then fire them all.
    const DELAY: i64 = 60_000;
    let (mut s, _) = open_declared()?;
    let started = Instant::now();
    for (i, &k) in stream.iter().enumerate() {
        let key = names[k as usize].as_bytes();
        (s.register_timer(TimeDomain::EventTime, i as i64 + DELAY, key)).map_err(fail)?;
    }
    let register = per_record(started);
    let (mut s, _) = open_declared()?;
    let mut previous: Vec<Option<i64>> = vec![None; keys as usize];
    let started = Instant::now();
    for (i, &k) in stream.iter().enumerate() {
        let key = names[k as usize].as_bytes();
        if let Some(at) = previous[k as usize] {
            s.delete_timer(TimeDomain::EventTime, at, key)
                .map_err(fail)?;
        }
        let at = i as i64 + DELAY;
        s.register_timer(TimeDomain::EventTime, at, key)
            .map_err(fail)?;
        previous[k as usize] = Some(at);
    }
    let replace = per_record(started);
    let pending = previous.iter().flatten().count();
    let started = Instant::now();
    let mut fired = 0;
    while (s.pop_timer(TimeDomain::EventTime, i64::MAX).map_err(fail)?).is_some() {
        fired += 1;
    }
    if fired != pending {
        return Err(format!("{fired} timers fired of {pending} pending"));
    }
    let fire = started.elapsed().as_nanos() as f64 / fired.max(1) as f64;
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{keys:>10} {:<8} | {value:>12.0} {register:>12.0} {replace:>16.0} | {pending:>10} {fire:>10.0}",
        format!("{backend:?}")
    );
    Ok(())
}
