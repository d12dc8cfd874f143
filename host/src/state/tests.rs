//! The front over both backends: every state kind, every TTL option, snapshots between them.

use weir_wire::{
    ListWrite, MapLoad, MapOp, Reader, ValueOp, put_list_op, put_map_op, put_value_op,
    read_map_load,
};

use super::*;
use crate::key_group::key_group_range;
use crate::operator::SnapshotFormat;
use weir_wire::TimeDomain;

/// A store of `backend` for key groups `groups` of 128, on `clock`; the directory holds
/// RocksDB's files.
fn open(
    backend: BackendKind,
    groups: Range<u32>,
    clock: &Clock,
) -> (KeyedState, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let setup = StateSetup {
        config: StateConfig {
            backend,
            write_buffer: bytesize::ByteSize::mib(4),
            // Small, so that every test also goes through evictions.
            cache_entries: 8,
            ..StateConfig::default()
        },
        root: dir.path().to_path_buf(),
        clock: clock.clone(),
    };
    let state = KeyedState::open(&setup, "op", 0, 128, groups).unwrap();
    (state, dir)
}

/// A new store of `backend` restored from a full snapshot of `s`.
fn restored(
    s: &mut KeyedState,
    backend: BackendKind,
    clock: &Clock,
) -> (KeyedState, tempfile::TempDir) {
    let mut bytes = Vec::new();
    s.snapshot(&mut bytes).unwrap();
    let (mut back, dir) = open(backend, 0..128, clock);
    back.restore(&bytes).unwrap();
    (back, dir)
}

const BACKENDS: [BackendKind; 2] = [BackendKind::Memory, BackendKind::RocksDb];

fn slots(s: &KeyedState, keys: &[&str]) -> Slots {
    let mut slots = Slots::default();
    for k in keys {
        slots.push(k.as_bytes(), s.key_group(k.as_bytes()));
    }
    slots
}

fn set(s: &mut KeyedState, id: StateId, key: &str, v: &str) {
    let mut buf = Vec::new();
    put_value_op(&mut buf, 0, ValueOp::Set(v.as_bytes()));
    let slots = slots(s, &[key]);
    s.store(id, &slots, &buf, u64::MAX).unwrap();
}

fn clear(s: &mut KeyedState, id: StateId, key: &str) {
    let mut buf = Vec::new();
    match s.kind(id) {
        StateKind::Value => put_value_op(&mut buf, 0, ValueOp::Clear),
        StateKind::List => put_list_op(&mut buf, 0, ListWrite::Clear, std::iter::empty()),
        StateKind::Map => put_map_op(&mut buf, 0, MapOp::Clear),
    }
    let slots = slots(s, &[key]);
    s.store(id, &slots, &buf, u64::MAX).unwrap();
}

fn add(s: &mut KeyedState, id: StateId, key: &str, op: ListWrite, elems: &[&str]) {
    let mut buf = Vec::new();
    put_list_op(&mut buf, 0, op, elems.iter().map(|e| e.as_bytes()));
    let slots = slots(s, &[key]);
    s.store(id, &slots, &buf, u64::MAX).unwrap();
}

fn put(s: &mut KeyedState, id: StateId, key: &str, mk: &str, mv: Option<&str>) {
    let mut buf = Vec::new();
    let op = match mv {
        Some(v) => MapOp::Put(mk.as_bytes(), v.as_bytes()),
        None => MapOp::Remove(mk.as_bytes()),
    };
    put_map_op(&mut buf, 0, op);
    let slots = slots(s, &[key]);
    s.store(id, &slots, &buf, u64::MAX).unwrap();
}

/// What `load` returns for `key`, rendered: `None`, `a`, `[a, b]` or `{k=v, ...}`.
fn read(s: &mut KeyedState, id: StateId, key: &str) -> String {
    let slots = slots(s, &[key]);
    let mut buf = Vec::new();
    s.load(id, &slots, MAP_LOAD_LIMIT, &mut buf).unwrap();
    let mut r = Reader::new(&buf, "test");
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    let out = match s.kind(id) {
        StateKind::Value => r.opt_bytes().unwrap().map_or("None".into(), text),
        StateKind::List => {
            let n = r.u32().unwrap();
            let elems: Vec<String> = (0..n).map(|_| text(r.bytes().unwrap())).collect();
            format!("[{}]", elems.join(", "))
        }
        StateKind::Map => {
            // A large map is read with `map_entries`, as a guest reads it.
            let start = r;
            let large = matches!(read_map_load(&mut r).unwrap(), MapLoad::Large(n) if n > 0);
            let mut whole = Vec::new();
            let mut r = if large {
                s.map_entries(id, &slots, 0, &mut whole).unwrap();
                Reader::new(&whole, "test")
            } else {
                start
            };
            let n = r.u32().unwrap();
            let entries: Vec<String> = (0..n)
                .map(|_| format!("{}={}", text(r.bytes().unwrap()), text(r.bytes().unwrap())))
                .collect();
            assert!(r.is_empty());
            let bytes: usize = entries.iter().map(|e| e.len() - 1 + 8).sum();
            // (A map RocksDB knew large may be sent as large below the limit: it is read
            // entry by entry then, as correctly.)
            assert!(
                large || bytes <= MAP_LOAD_LIMIT,
                "a map over the limit sent whole"
            );
            return format!("{{{}}}", entries.join(", "));
        }
    };
    assert!(r.is_empty());
    out
}

/// What `key`'s map holds for map key `k` by a point read (`map_get`), rendered as `read`
/// renders a map of that entry alone; other kinds as `read` has them.
fn read_point(s: &mut KeyedState, id: StateId, key: &str) -> String {
    if s.kind(id) != StateKind::Map {
        return read(s, id, key);
    }
    let slots = slots(s, &[key]);
    match s.map_get(id, &slots, 0, b"k").unwrap() {
        Some(v) => format!("{{k={}}}", String::from_utf8(v).unwrap()),
        None => "{}".into(),
    }
}

/// Writes one entry of `key` whatever the state's kind.
fn write(s: &mut KeyedState, id: StateId, key: &str, v: &str) {
    match s.kind(id) {
        StateKind::Value => set(s, id, key, v),
        StateKind::List => add(s, id, key, ListWrite::Append, &[v]),
        StateKind::Map => put(s, id, key, "k", Some(v)),
    }
}

/// How `write(.., v)` reads back.
fn shown(kind: StateKind, v: &str) -> String {
    match kind {
        StateKind::Value => v.to_string(),
        StateKind::List => format!("[{v}]"),
        StateKind::Map => format!("{{k={v}}}"),
    }
}

fn absent(kind: StateKind) -> &'static str {
    match kind {
        StateKind::Value => "None",
        StateKind::List => "[]",
        StateKind::Map => "{}",
    }
}

fn ttl(ms: u64, update: TtlUpdate, visibility: TtlVisibility) -> Ttl {
    Ttl {
        ttl_ms: ms,
        update,
        visibility,
        event_time: false,
    }
}

const KINDS: [StateKind; 3] = [StateKind::Value, StateKind::List, StateKind::Map];

#[test]
fn value_list_and_map_entries() {
    for backend in BACKENDS {
        let clock = Clock::manual(0);
        let (mut s, _dir) = open(backend, 0..128, &clock);
        let v = s.declare("v", StateKind::Value, None).unwrap();
        let l = s.declare("l", StateKind::List, None).unwrap();
        let m = s.declare("m", StateKind::Map, None).unwrap();
        assert_eq!(read(&mut s, v, "k"), "None");
        set(&mut s, v, "k", "1");
        set(&mut s, v, "k", "22");
        assert_eq!(read(&mut s, v, "k"), "22", "{backend:?}");
        clear(&mut s, v, "k");
        assert_eq!(read(&mut s, v, "k"), "None");

        add(&mut s, l, "k", ListWrite::Append, &["a", "b"]);
        add(&mut s, l, "k", ListWrite::Append, &["c"]);
        assert_eq!(read(&mut s, l, "k"), "[a, b, c]", "{backend:?}");
        add(&mut s, l, "k", ListWrite::Replace, &["z"]);
        assert_eq!(read(&mut s, l, "k"), "[z]");
        add(&mut s, l, "k", ListWrite::Replace, &[]);
        assert_eq!(read(&mut s, l, "k"), "[]");

        put(&mut s, m, "k", "x", Some("1"));
        put(&mut s, m, "k", "a", Some("2"));
        assert_eq!(
            read(&mut s, m, "k"),
            "{a=2, x=1}",
            "map entries in key order"
        );
        put(&mut s, m, "k", "a", None);
        assert_eq!(read(&mut s, m, "k"), "{x=1}");
        clear(&mut s, m, "k");
        assert_eq!(read(&mut s, m, "k"), "{}");
        assert!(
            s.dump().is_empty(),
            "{backend:?}: emptied state leaves no row"
        );
    }
}

#[test]
fn changes_to_one_key_in_one_store_apply_in_order() {
    for backend in BACKENDS {
        let (mut s, _dir) = open(backend, 0..128, &Clock::manual(0));
        let l = s.declare("l", StateKind::List, None).unwrap();
        let m = s.declare("m", StateKind::Map, None).unwrap();
        add(&mut s, l, "k", ListWrite::Append, &["old"]);
        let mut buf = Vec::new();
        put_list_op(&mut buf, 0, ListWrite::Append, [&b"a"[..]].into_iter());
        put_list_op(&mut buf, 1, ListWrite::Append, [&b"other"[..]].into_iter());
        put_list_op(&mut buf, 0, ListWrite::Replace, [&b"b"[..]].into_iter());
        put_list_op(&mut buf, 0, ListWrite::Append, [&b"c"[..]].into_iter());
        let two = slots(&s, &["k", "j"]);
        s.store(l, &two, &buf, u64::MAX).unwrap();
        assert_eq!(read(&mut s, l, "k"), "[b, c]", "{backend:?}");
        assert_eq!(read(&mut s, l, "j"), "[other]");

        put(&mut s, m, "k", "gone", Some("1"));
        let mut buf = Vec::new();
        put_map_op(&mut buf, 0, MapOp::Put(b"x", b"1"));
        // Another key's op between: the clear after it still drops "x".
        put_map_op(&mut buf, 1, MapOp::Put(b"w", b"9"));
        put_map_op(&mut buf, 0, MapOp::Clear);
        put_map_op(&mut buf, 0, MapOp::Put(b"y", b"2"));
        put_map_op(&mut buf, 0, MapOp::Remove(b"y"));
        put_map_op(&mut buf, 0, MapOp::Put(b"z", b"3"));
        put_map_op(&mut buf, 0, MapOp::Put(b"a", b"4"));
        put_map_op(&mut buf, 0, MapOp::Put(b"z", b"5"));
        s.store(m, &two, &buf, u64::MAX).unwrap();
        assert_eq!(read(&mut s, m, "k"), "{a=4, z=5}", "{backend:?}");
        assert_eq!(read(&mut s, m, "j"), "{w=9}", "{backend:?}");
    }
}

/// Appends, replacements and clears of lists over more keys than the RocksDB cache holds,
/// several runs of one key in a store, some lists growing past what RocksDB caches, and after
/// a restore: both backends read what a plain model of the lists holds.
#[test]
fn lists_read_what_was_written_through_caches_and_restores() {
    let mut rng = fastrand::Rng::with_seed(9);
    for backend in BACKENDS {
        let (mut s, _dir) = open(backend, 0..128, &Clock::manual(0));
        let l = s.declare("l", StateKind::List, None).unwrap();
        let mut model: Vec<Vec<String>> = vec![Vec::new(); 20];
        let keys: Vec<String> = (0..model.len()).map(|k| format!("key{k}")).collect();
        let shown = |list: &[String]| format!("[{}]", list.join(", "));
        for step in 0..2_000 {
            // Two keys' ops interleaved in one store: a key's ops come in two runs.
            let (a, b) = (rng.usize(..model.len()), rng.usize(..model.len()));
            let mut buf = Vec::new();
            for (i, k) in [a, b, a].into_iter().enumerate() {
                let slot = if k == a { 0 } else { 1 };
                let pad = if rng.u8(..8) == 0 { 3_000 } else { 0 };
                let e = format!("{step}.{i:0>pad$}");
                let op = match rng.u8(..12) {
                    0 => ListWrite::Clear,
                    1 => ListWrite::Replace,
                    _ => ListWrite::Append,
                };
                match op {
                    ListWrite::Clear => model[k].clear(),
                    ListWrite::Replace => model[k] = vec![e.clone()],
                    ListWrite::Append => model[k].push(e.clone()),
                }
                let elems: Vec<&[u8]> = match op {
                    ListWrite::Clear => Vec::new(),
                    _ => vec![e.as_bytes()],
                };
                put_list_op(&mut buf, slot, op, elems.into_iter());
            }
            let slots = slots(&s, &[&keys[a], &keys[b]]);
            s.store(l, &slots, &buf, u64::MAX).unwrap();
            let k = rng.usize(..model.len());
            assert_eq!(
                read(&mut s, l, &keys[k]),
                shown(&model[k]),
                "{backend:?} step {step}"
            );
        }
        let (mut restored, _dir) = restored(&mut s, backend, &Clock::manual(0));
        for (k, list) in model.iter().enumerate() {
            assert_eq!(read(&mut restored, l, &keys[k]), shown(list), "{backend:?}");
        }
    }
}

/// A map that was large (read entry by entry), shrank until it was read whole and cached,
/// then lost every entry: its load says it is empty, not large (the SDK's `is_empty` trusts
/// a large map's lower bound of entries).
#[test]
fn a_large_map_that_shrank_and_emptied_loads_as_empty() {
    let load = |s: &mut KeyedState, m| {
        let mut buf = Vec::new();
        s.load(m, &slots(s, &["k"]), MAP_LOAD_LIMIT, &mut buf)
            .unwrap();
        read_map_load(&mut Reader::new(&buf, "test")).unwrap()
    };
    for backend in BACKENDS {
        let (mut s, _dir) = open(backend, 0..128, &Clock::manual(0));
        let m = s.declare("m", StateKind::Map, None).unwrap();
        let keys: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
        for k in &keys {
            put(&mut s, m, "k", k, Some(&"x".repeat(1000)));
        }
        assert!(matches!(load(&mut s, m), MapLoad::Large(n) if n > 0));
        for k in &keys {
            put(&mut s, m, "k", k, Some("2"));
        }
        assert_eq!(read(&mut s, m, "k").matches("=2").count(), 40);
        for k in &keys {
            put(&mut s, m, "k", k, None);
        }
        assert!(
            matches!(load(&mut s, m), MapLoad::Whole(0) | MapLoad::Large(0)),
            "{backend:?}"
        );
    }
}

/// Map reads, writes and clears over more keys than the RocksDB cache holds (8), in a
/// random order, some maps growing past what RocksDB caches whole, and after a restore: both
/// backends read what a plain model of the maps holds.
#[test]
fn maps_read_what_was_written_through_caches_and_restores() {
    let mut rng = fastrand::Rng::with_seed(5);
    for backend in BACKENDS {
        let (mut s, _dir) = open(backend, 0..128, &Clock::manual(0));
        let m = s.declare("m", StateKind::Map, None).unwrap();
        let mut model: Vec<std::collections::BTreeMap<String, String>> =
            vec![Default::default(); 20];
        let shown = |map: &std::collections::BTreeMap<String, String>| {
            let entries: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{{{}}}", entries.join(", "))
        };
        for step in 0..3_000 {
            let k = rng.usize(..model.len());
            let key = format!("key{k}");
            match rng.u8(..10) {
                0 => {
                    clear(&mut s, m, &key);
                    model[k].clear();
                }
                1..=3 => {
                    let mk = format!("m{}", rng.u8(..12));
                    put(&mut s, m, &key, &mk, None);
                    model[k].remove(&mk);
                }
                _ => {
                    // Some large values: a map over 16 KiB is not cached and not sent whole,
                    // then is again.
                    let pad = if rng.bool() { 3_000 } else { 0 };
                    let (mk, v) = (format!("m{}", rng.u8(..12)), format!("{step:0>pad$}"));
                    put(&mut s, m, &key, &mk, Some(&v));
                    model[k].insert(mk, v);
                }
            }
            let k = rng.usize(..model.len());
            assert_eq!(
                read(&mut s, m, &format!("key{k}")),
                shown(&model[k]),
                "{backend:?} step {step}"
            );
            let (k, mk) = (rng.usize(..model.len()), format!("m{}", rng.u8(..12)));
            let slots = slots(&s, &[&format!("key{k}")]);
            let point = s.map_get(m, &slots, 0, mk.as_bytes()).unwrap();
            assert_eq!(
                point.map(|v| String::from_utf8(v).unwrap()).as_ref(),
                model[k].get(&mk),
                "{backend:?} step {step}: point read"
            );
        }
        let (mut restored, _dir) = restored(&mut s, backend, &Clock::manual(0));
        for (k, map) in model.iter().enumerate() {
            assert_eq!(
                read(&mut restored, m, &format!("key{k}")),
                shown(map),
                "{backend:?}"
            );
        }
    }
}

/// A hot key's cached map takes many writes between checkpoints, of a few lasting entries
/// and of many short-lived ones: its changed entries reach RocksDB in pieces (each time the
/// distinct keys changed outgrow the map) and at the snapshot, and entries changed only before
/// the last piece are there too.
#[test]
fn a_hot_map_written_many_times_between_checkpoints_keeps_every_entry() {
    let mut rng = fastrand::Rng::with_seed(9);
    for backend in BACKENDS {
        let (mut s, _dir) = open(backend, 0..128, &Clock::manual(0));
        let m = s.declare("m", StateKind::Map, None).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for step in 0..20_000 {
            if step % 1_000 == 0 {
                // Read (as an operator loads before it writes): the map is cached.
                read(&mut s, m, "hot");
            }
            // The second half leaves m5..m9 alone: their last changes reach RocksDB in a
            // piece written before the snapshot.
            let mk = format!("m{}", rng.u8(..if step < 10_000 { 10 } else { 5 }));
            let (short, gone) = (format!("t{step}"), format!("t{}", step - 1));
            put(&mut s, m, "hot", &short, Some("short"));
            put(&mut s, m, "hot", &gone, None);
            model.insert(short, "short".to_string());
            model.remove(&gone);
            match rng.u8(..4) {
                0 => {
                    put(&mut s, m, "hot", &mk, None);
                    model.remove(&mk);
                }
                _ => {
                    put(&mut s, m, "hot", &mk, Some(&step.to_string()));
                    model.insert(mk, step.to_string());
                }
            }
        }
        let entries: Vec<String> = model.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let expected = format!("{{{}}}", entries.join(", "));
        assert_eq!(read(&mut s, m, "hot"), expected, "{backend:?}");
        let (mut restored, _dir) = restored(&mut s, backend, &Clock::manual(0));
        assert_eq!(
            read(&mut restored, m, "hot"),
            expected,
            "{backend:?} restored"
        );
    }
}

#[test]
fn redeclaring_checks_kind_and_ttl() {
    let mut s = KeyedState::new(128, 0..128);
    let a = s.declare("a", StateKind::Value, None).unwrap();
    assert_eq!(s.declare("a", StateKind::Value, None), Ok(a));
    assert!(matches!(
        s.declare("a", StateKind::List, None),
        Err(StateError::KindMismatch { .. })
    ));
    let t = ttl(
        5,
        TtlUpdate::OnCreateAndWrite,
        TtlVisibility::NeverReturnExpired,
    );
    let err = s.declare("a", StateKind::Value, Some(t)).unwrap_err();
    assert!(err.to_string().contains("declared with TTL"), "{err}");
}

#[test]
fn keys_of_other_subtasks_are_refused() {
    let mut s = KeyedState::new(128, key_group_range(128, 2, 0));
    let v = s.declare("count", StateKind::Value, None).unwrap();
    let foreign = (0..1000u32)
        .map(|i| i.to_string())
        .find(|k| key_group(k.as_bytes(), 128) >= 64)
        .unwrap();
    let slots = slots(&s, &[&foreign]);
    let err = s
        .load(v, &slots, MAP_LOAD_LIMIT, &mut Vec::new())
        .unwrap_err();
    assert!(err.to_string().contains("key_by edge"), "{err}");
}

/// Every TTL option on every state kind and backend, on a clock the test moves: written at
/// 0, read at 50 (which restarts the TTL with `on_read_and_write`), then read at 120 and 150
/// with a TTL of 100; map entries both by loads and by point reads.
#[test]
fn every_ttl_option_on_every_state_kind_and_backend() {
    use TtlUpdate::*;
    use TtlVisibility::*;
    type Read = fn(&mut KeyedState, StateId, &str) -> String;
    for (backend, (read, how)) in BACKENDS.into_iter().flat_map(|b| {
        [
            (b, (read as Read, "load")),
            (b, (read_point as Read, "point read")),
        ]
    }) {
        for kind in KINDS {
            for update in [OnCreateAndWrite, OnReadAndWrite, Disabled] {
                for visibility in [NeverReturnExpired, ReturnExpiredIfNotCleanedUp] {
                    let case = format!("{backend:?} {kind} {update:?} {visibility:?} {how}");
                    let clock = Clock::manual(0);
                    let (mut s, _dir) = open(backend, 0..128, &clock);
                    let id = s
                        .declare("s", kind, Some(ttl(100, update, visibility)))
                        .unwrap();
                    write(&mut s, id, "k", "v");
                    clock.set(50);
                    assert_eq!(read(&mut s, id, "k"), shown(kind, "v"), "{case} at 50");
                    clock.set(120);
                    let at_120 = read(&mut s, id, "k");
                    let at_120_again = read(&mut s, id, "k");
                    clock.set(150);
                    let at_150 = read(&mut s, id, "k");
                    let (v, none) = (shown(kind, "v"), absent(kind).to_string());
                    let expected = match (update, visibility) {
                        (Disabled, _) => [&v, &v, &v],
                        // Expired at 100; the first read after that cleans it up.
                        (OnCreateAndWrite, NeverReturnExpired) => [&none, &none, &none],
                        (OnCreateAndWrite, ReturnExpiredIfNotCleanedUp) => [&v, &none, &none],
                        // The read at 50 restarted it: expires at 150, but the reads at 120
                        // restart it again, to 220.
                        (OnReadAndWrite, _) => [&v, &v, &v],
                    };
                    assert_eq!([&at_120, &at_120_again, &at_150], expected, "{case}");
                    if update == OnReadAndWrite {
                        clock.set(250);
                        assert_eq!(
                            read(&mut s, id, "k"),
                            if visibility == NeverReturnExpired {
                                none.clone()
                            } else {
                                v.clone()
                            },
                            "{case} at 250"
                        );
                        assert_eq!(read(&mut s, id, "k"), none, "{case}: cleaned up");
                    }
                }
            }
        }
    }
}

/// List elements and map entries expire one by one.
#[test]
fn list_elements_and_map_entries_expire_individually() {
    for backend in BACKENDS {
        let clock = Clock::manual(0);
        let (mut s, _dir) = open(backend, 0..128, &clock);
        let t = ttl(
            100,
            TtlUpdate::OnCreateAndWrite,
            TtlVisibility::NeverReturnExpired,
        );
        let l = s.declare("l", StateKind::List, Some(t)).unwrap();
        let m = s.declare("m", StateKind::Map, Some(t)).unwrap();
        add(&mut s, l, "k", ListWrite::Append, &["early"]);
        put(&mut s, m, "k", "early", Some("1"));
        put(&mut s, m, "k", "rewritten", Some("1"));
        clock.set(60);
        add(&mut s, l, "k", ListWrite::Append, &["late"]);
        put(&mut s, m, "k", "late", Some("2"));
        put(&mut s, m, "k", "rewritten", Some("2"));
        clock.set(120);
        assert_eq!(read(&mut s, l, "k"), "[late]", "{backend:?}");
        assert_eq!(read(&mut s, m, "k"), "{late=2, rewritten=2}", "{backend:?}");
        clock.set(160);
        assert_eq!(read(&mut s, l, "k"), "[]");
        assert_eq!(read(&mut s, m, "k"), "{}");
        assert!(
            s.dump().is_empty(),
            "{backend:?}: expired rows were removed on read"
        );
    }
}

/// Event-time TTL: entries are stamped with the latest record time of their key (or the
/// watermark) and expire against the watermark.
#[test]
fn event_time_ttl_expires_against_the_watermark() {
    for backend in BACKENDS {
        // The processing-time clock is far ahead: it must not matter.
        let (mut s, _dir) = open(backend, 0..128, &Clock::manual(1_000_000));
        let t = Ttl {
            event_time: true,
            ..ttl(
                100,
                TtlUpdate::OnCreateAndWrite,
                TtlVisibility::NeverReturnExpired,
            )
        };
        let v = s.declare("v", StateKind::Value, Some(t)).unwrap();
        let mut buf = Vec::new();
        put_value_op(&mut buf, 0, ValueOp::Set(b"a"));
        put_value_op(&mut buf, 1, ValueOp::Set(b"b"));
        put_value_op(&mut buf, 2, ValueOp::Set(b"untimed"));
        let mut batch = slots(&s, &["a", "b", "untimed"]);
        batch.note_time(0, 10);
        batch.note_time(1, 40);
        batch.note_time(1, 30);
        s.store(v, &batch, &buf, u64::MAX).unwrap();
        assert_eq!(
            read(&mut s, v, "a"),
            "a",
            "{backend:?}: no watermark, nothing expires"
        );
        s.set_watermark(110);
        assert_eq!(read(&mut s, v, "a"), "None", "{backend:?}: 10 + 100 <= 110");
        assert_eq!(
            read(&mut s, v, "b"),
            "b",
            "stamped with its latest record, 40"
        );
        s.set_watermark(140);
        assert_eq!(read(&mut s, v, "b"), "None");
        // Written before any watermark and without a record time: never expires...
        s.set_watermark(i64::MAX - 1);
        assert_eq!(read(&mut s, v, "untimed"), "untimed");
        // ... while a write after a watermark is stamped with it.
        s.set_watermark(1_000);
        set(&mut s, v, "w", "w");
        s.set_watermark(1_099);
        assert_eq!(read(&mut s, v, "w"), "w");
        s.set_watermark(1_100);
        assert_eq!(read(&mut s, v, "w"), "None");
    }
}

/// Keys written at 0 and 50 with a TTL of 100, the snapshot taken at 60.
fn ttl_sample(backend: BackendKind, clock: &Clock) -> (KeyedState, tempfile::TempDir) {
    let (mut s, dir) = open(backend, 0..128, clock);
    let t = ttl(
        100,
        TtlUpdate::OnCreateAndWrite,
        TtlVisibility::NeverReturnExpired,
    );
    let v = s.declare("v", StateKind::Value, Some(t)).unwrap();
    let l = s.declare("l", StateKind::List, Some(t)).unwrap();
    clock.set(0);
    set(&mut s, v, "old", "1");
    add(&mut s, l, "k", ListWrite::Append, &["old"]);
    clock.set(50);
    set(&mut s, v, "new", "2");
    add(&mut s, l, "k", ListWrite::Append, &["new"]);
    clock.set(60);
    (s, dir)
}

#[test]
fn a_restore_keeps_expiry_times_in_either_backend() {
    for from in BACKENDS {
        for to in BACKENDS {
            let clock = Clock::manual(0);
            let (mut s, _d) = ttl_sample(from, &clock);
            let (mut back, _d2) = restored(&mut s, to, &clock);
            let (v, l) = (StateId(0), StateId(1));
            assert_eq!(back.dump(), s.dump(), "{from:?} -> {to:?}");
            clock.set(100);
            assert_eq!(read(&mut back, v, "old"), "None", "{from:?} -> {to:?}");
            assert_eq!(read(&mut back, v, "new"), "2");
            assert_eq!(read(&mut back, l, "k"), "[new]");
            clock.set(150);
            assert_eq!(read(&mut back, v, "new"), "None");
        }
    }
}

#[test]
fn a_full_snapshot_leaves_out_expired_entries() {
    for backend in BACKENDS {
        let clock = Clock::manual(0);
        let (mut s, _d) = ttl_sample(backend, &clock);
        clock.set(120);
        let (mut back, _d2) = restored(&mut s, BackendKind::Memory, &clock);
        let rows: Vec<Vec<u8>> = back.dump().into_iter().map(|(_, k, _)| k).collect();
        assert_eq!(rows, vec![b"k".to_vec(), b"new".to_vec()], "{backend:?}");
    }
}

/// The memory backend drops expired entries a key group at a time, as states are read.
#[test]
fn the_memory_backend_cleans_up_expired_entries_incrementally() {
    let clock = Clock::manual(0);
    let (mut s, _d) = open(BackendKind::Memory, 0..128, &clock);
    let t = ttl(
        100,
        TtlUpdate::OnCreateAndWrite,
        TtlVisibility::ReturnExpiredIfNotCleanedUp,
    );
    let v = s.declare("v", StateKind::Value, Some(t)).unwrap();
    for i in 0..1000 {
        set(&mut s, v, &format!("key-{i}"), "x");
    }
    clock.set(100);
    assert_eq!(s.dump().len(), 1000, "expired but not cleaned up yet");
    for _ in 0..64 {
        read(&mut s, v, "unrelated");
    }
    let left = s.dump().len();
    assert!(
        (300..700).contains(&left),
        "half the groups visited: {left} left"
    );
    for _ in 0..64 {
        read(&mut s, v, "unrelated");
    }
    assert_eq!(s.dump().len(), 0);
}

/// RocksDB's compaction filter removes expired rows from the files, not only from reads.
#[test]
fn rocksdb_compaction_drops_expired_rows_from_disk() {
    let clock = Clock::manual(0);
    let (mut s, _d) = open(BackendKind::RocksDb, 0..128, &clock);
    let t = ttl(
        100,
        TtlUpdate::OnCreateAndWrite,
        TtlVisibility::NeverReturnExpired,
    );
    let v = s.declare("v", StateKind::Value, Some(t)).unwrap();
    let m = s.declare("m", StateKind::Map, Some(t)).unwrap();
    let l = s.declare("l", StateKind::List, Some(t)).unwrap();
    let keep = s.declare("keep", StateKind::Value, None).unwrap();
    let value = "x".repeat(100);
    for i in 0..20_000 {
        let key = format!("key-{i}");
        set(&mut s, v, &key, &value);
        put(&mut s, m, &key, "e", Some(&value));
        add(&mut s, l, &key, ListWrite::Append, &[&value, &value]);
        if i % 10 == 0 {
            set(&mut s, keep, &key, "kept");
        }
    }
    let Backend::Rocks(r) = &mut s.backend else {
        unreachable!()
    };
    r.compact().unwrap();
    let (rows, bytes) = r.disk_usage().unwrap();
    assert_eq!(rows, 62_000, "before expiry: every row (a list is one)");
    clock.set(100);
    r.compact().unwrap();
    let (rows_after, bytes_after) = r.disk_usage().unwrap();
    assert_eq!(rows_after, 2_000, "only the rows without a TTL remain");
    assert!(
        bytes_after * 10 < bytes,
        "{bytes} -> {bytes_after} bytes of SST files"
    );
    assert_eq!(read(&mut s, keep, "key-10"), "kept");
}

/// A snapshot of either backend restores into either backend, whole or split by key group.
#[test]
fn snapshots_move_between_backends_and_parallelisms() {
    for from in BACKENDS {
        let clock = Clock::manual(0);
        let (mut s, _d) = open(from, 0..128, &clock);
        let v = s.declare("v", StateKind::Value, None).unwrap();
        let l = s.declare("l", StateKind::List, None).unwrap();
        let t = Ttl {
            event_time: true,
            ..ttl(
                60_000,
                TtlUpdate::OnReadAndWrite,
                TtlVisibility::ReturnExpiredIfNotCleanedUp,
            )
        };
        let m = s.declare("m", StateKind::Map, Some(t)).unwrap();
        // A second value state, on half the keys, some of which lose their `v`: the memory
        // backend keeps a key's values of all value states together.
        let w = s.declare("w", StateKind::Value, None).unwrap();
        for i in 0..300 {
            let key = format!("key-{i}");
            set(&mut s, v, &key, &i.to_string());
            add(&mut s, l, &key, ListWrite::Append, &["a", &key]);
            put(&mut s, m, &key, "x", Some(&key));
            if i % 2 == 0 {
                set(&mut s, w, &key, &format!("w{i}"));
            }
            if i % 3 == 0 {
                clear(&mut s, v, &key);
            }
        }
        let timers = vec![
            (TimeDomain::EventTime, 10, b"key-1".to_vec()),
            (TimeDomain::ProcessingTime, -5, b"key-2".to_vec()),
        ];
        for (d, ts, k) in &timers {
            s.register_timer(*d, *ts, k).unwrap();
        }
        let mut bytes = Vec::new();
        s.snapshot(&mut bytes).unwrap();
        let whole = s.dump();
        assert_eq!(whole.len(), 200 + 150 + 300 + 300);
        for to in BACKENDS {
            let (mut back, _d) = open(to, 0..128, &clock);
            back.restore(&bytes).unwrap();
            assert_eq!(back.dump(), whole, "{from:?} -> {to:?}");
            assert_eq!(back.all_timers(), timers);
            let mut halves = Vec::new();
            for sub in 0..2 {
                let (mut part, _d) = open(to, key_group_range(128, 2, sub), &clock);
                part.restore(&bytes).unwrap();
                halves.extend(part.dump());
            }
            halves.sort();
            assert_eq!(halves, whole, "{from:?} -> {to:?} at parallelism 2");
        }
    }
}

#[test]
fn damaged_snapshots_fail_cleanly() {
    let clock = Clock::manual(0);
    let (mut s, _d) = ttl_sample(BackendKind::Memory, &clock);
    let mut bytes = Vec::new();
    s.snapshot(&mut bytes).unwrap();
    let mut fresh = KeyedState::new(128, 0..128);
    assert!(matches!(
        fresh.restore(b"nonsense"),
        Err(snapshot::SnapshotError::Magic)
    ));
    for cut in [9, 20, bytes.len() / 2, bytes.len() - 1] {
        let mut fresh = KeyedState::new(128, 0..128);
        assert!(fresh.restore(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut evil = b"WEIRKS02".to_vec();
    evil.extend_from_slice(&[0, 0, 0, 0, 128, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]);
    assert!(fresh.restore(&evil).is_err());
    let err = fresh.restore(b"WEIRKS01....").unwrap_err();
    assert!(err.to_string().contains("--fresh"), "{err}");
    // A restored state keeps its kind.
    let mut back = KeyedState::new(128, 0..128);
    back.restore(&bytes).unwrap();
    let err = back.declare("v", StateKind::List, None).unwrap_err();
    assert!(matches!(
        err,
        StateError::KindMismatch { restored: true, .. }
    ));
    assert!(
        err.to_string()
            .contains("written by its code before an upgrade) is value state"),
        "{err}"
    );
}

#[test]
fn values_over_the_limit_are_refused_naming_the_slot() {
    for backend in BACKENDS {
        let (mut s, _d) = open(backend, 0..128, &Clock::manual(0));
        let l = s.declare("l", StateKind::List, None).unwrap();
        let mut buf = Vec::new();
        put_list_op(&mut buf, 0, ListWrite::Append, [&[0u8; 11][..]].into_iter());
        let err = s.store(l, &slots(&s, &["k"]), &buf, 10).unwrap_err();
        assert!(
            matches!(
                err,
                StateError::TooLarge {
                    slot: 0,
                    len: 11,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            read(&mut s, l, "k"),
            "[]",
            "nothing of the refused store was written"
        );
    }
}

/// A store of `backend` for `groups` whose RocksDB checkpoints are incremental.
fn open_incremental(groups: Range<u32>, clock: &Clock, dir: &std::path::Path) -> KeyedState {
    let setup = StateSetup {
        config: StateConfig {
            backend: BackendKind::RocksDb,
            write_buffer: bytesize::ByteSize::mib(4),
            // Small, so that every test also goes through evictions.
            cache_entries: 8,
            ..StateConfig::default()
        },
        root: dir.to_path_buf(),
        clock: clock.clone(),
    };
    KeyedState::open(&setup, "op", 0, 128, groups).unwrap()
}

/// Takes checkpoint `n` as the runtime does: the manifest, then the uploads into `shared`.
/// Returns the manifest and the bytes uploaded.
fn checkpoint(s: &mut KeyedState, n: u64, shared: &std::path::Path) -> (Vec<u8>, u64) {
    let mut manifest = Vec::new();
    let files = s
        .checkpoint(n, SnapshotFormat::Native, &mut manifest)
        .unwrap()
        .expect("an incremental checkpoint");
    std::fs::create_dir_all(shared).unwrap();
    let mut uploaded = 0;
    for (from, name, size) in &files.files {
        super::link_or_copy(from, &shared.join(name)).unwrap();
        uploaded += size;
    }
    (manifest, uploaded)
}

#[test]
fn incremental_checkpoints_upload_only_new_files_and_restore_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let clock = Clock::manual(0);
    let mut s = open_incremental(0..128, &clock, dir.path());
    let v = s.declare("v", StateKind::Value, None).unwrap();
    let l = s.declare("l", StateKind::List, None).unwrap();
    let value = "x".repeat(50);
    let keys: Vec<String> = (0..20_000).map(|i| format!("key-{i}")).collect();
    let all: Vec<&str> = keys.iter().map(String::as_str).collect();
    for chunk in all.chunks(1000) {
        let batch = slots(&s, chunk);
        let ops = (0..batch.len()).map(|i| (i, Some(value.as_bytes())));
        s.write_values(v, &batch, ops).unwrap();
    }
    add(&mut s, l, "key-1", ListWrite::Append, &["a", "b"]);
    s.register_timer(TimeDomain::EventTime, 7, b"key-7")
        .unwrap();
    let (_, first) = checkpoint(&mut s, 1, &shared);
    s.notify_complete(1);

    // 1% of the keys change.
    for key in all.iter().step_by(100) {
        set(&mut s, v, key, "changed");
    }
    let (manifest, second) = checkpoint(&mut s, 2, &shared);
    assert!(
        second * 10 < first,
        "the second checkpoint uploads a small part: {second} of {first} bytes"
    );
    let whole = s.dump();
    drop(s);

    // Into RocksDB at the same key groups (the checkpoint's database is taken over), into
    // memory, and split over two subtasks.
    let restore = |state: &mut KeyedState| {
        state.restore_file(&manifest, &shared).unwrap();
        state.all_timers()
    };
    let timer = vec![(TimeDomain::EventTime, 7, b"key-7".to_vec())];
    let mut back = open_incremental(0..128, &clock, dir.path());
    assert_eq!(restore(&mut back), timer, "the timer comes back");
    assert_eq!(back.dump(), whole);
    assert_eq!(read(&mut back, StateId(1), "key-1"), "[a, b]");
    // The restored database goes on: new list elements after the old ones.
    add(&mut back, StateId(1), "key-1", ListWrite::Append, &["c"]);
    assert_eq!(read(&mut back, StateId(1), "key-1"), "[a, b, c]");
    let (_, third) = checkpoint(&mut back, 3, &shared);
    assert!(
        third * 10 < first,
        "a restored database shares the restored files"
    );

    let (mut mem, _d) = open(BackendKind::Memory, 0..128, &clock);
    assert_eq!(restore(&mut mem), timer);
    assert_eq!(mem.dump(), whole);
    let (mut halves, mut timers) = (Vec::new(), Vec::new());
    for sub in 0..2 {
        let mut part = open_incremental(key_group_range(128, 2, sub), &clock, dir.path());
        timers.extend(restore(&mut part));
        halves.extend(part.dump());
    }
    halves.sort();
    assert_eq!(halves, whole);
    assert_eq!(timers, timer);

    // A missing shared file is named.
    for f in std::fs::read_dir(&shared).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let mut broken = open_incremental(0..128, &clock, dir.path());
    let err = broken.restore_file(&manifest, &shared).unwrap_err();
    assert!(err.to_string().contains("missing or damaged"), "{err}");
}

#[test]
fn a_checkpoint_in_the_row_per_element_list_layout_is_refused_with_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let clock = Clock::manual(0);
    let mut s = open_incremental(0..128, &clock, dir.path());
    let l = s.declare("l", StateKind::List, None).unwrap();
    add(&mut s, l, "k", ListWrite::Append, &["a"]);
    // The list sequence number that weir kept before a list was one row.
    let Backend::Rocks(r) = &mut s.backend else {
        unreachable!()
    };
    r.put_meta(b"seq", &7u64.to_be_bytes()).unwrap();
    let (manifest, _) = checkpoint(&mut s, 1, &shared);
    let mut restored = open_incremental(0..128, &clock, dir.path());
    let err = restored
        .restore_file(&manifest, &shared)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("older weir") && err.contains("savepoint"),
        "{err}"
    );
}

#[test]
fn an_incremental_checkpoint_keeps_expiry_times() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let clock = Clock::manual(0);
    let mut s = open_incremental(0..128, &clock, dir.path());
    let t = ttl(
        100,
        TtlUpdate::OnCreateAndWrite,
        TtlVisibility::NeverReturnExpired,
    );
    let v = s.declare("v", StateKind::Value, Some(t)).unwrap();
    set(&mut s, v, "old", "1");
    clock.set(50);
    set(&mut s, v, "new", "2");
    clock.set(60);
    let (manifest, _) = checkpoint(&mut s, 1, &shared);
    drop(s);
    for backend in BACKENDS {
        clock.set(60);
        let (mut back, _d) = match backend {
            BackendKind::RocksDb => (open_incremental(0..128, &clock, dir.path()), None),
            BackendKind::Memory => {
                let (s, d) = open(backend, 0..128, &clock);
                (s, Some(d))
            }
        };
        back.restore_file(&manifest, &shared).unwrap();
        assert_eq!(read(&mut back, v, "old"), "1", "{backend:?}");
        clock.set(100);
        assert_eq!(read(&mut back, v, "old"), "None", "{backend:?}");
        assert_eq!(read(&mut back, v, "new"), "2");
        clock.set(150);
        assert_eq!(read(&mut back, v, "new"), "None", "{backend:?}");
    }
}

#[test]
fn only_state_outside_memory_advises_guests_to_keep_values() {
    // What the host answers `state.write-back-advised`: the guests' write-back cache pays
    // with RocksDB state and not with state in memory (see `guest-sdk/src/state/held.rs`).
    for backend in BACKENDS {
        let (s, _dir) = open(backend, 0..128, &Clock::manual(0));
        assert_eq!(s.in_memory(), backend == BackendKind::Memory, "{backend:?}");
    }
}

#[test]
fn rocksdb_opens_only_for_an_operator_with_state() {
    let (mut s, dir) = open(BackendKind::RocksDb, 0..128, &Clock::manual(0));
    let databases = || std::fs::read_dir(dir.path()).map_or(0, |d| d.count());
    assert_eq!(databases(), 0, "no state, no database");
    s.declare("v", StateKind::Value, None).unwrap();
    assert_eq!(databases(), 1);
    drop(s);
    assert_eq!(databases(), 0, "its directory goes with it");
}

/// A store of `backend` whose RocksDB keeps 16 timers per domain in memory, the others in
/// RocksDB.
fn open_spilling(backend: BackendKind, groups: Range<u32>, dir: &std::path::Path) -> KeyedState {
    let setup = StateSetup {
        config: StateConfig {
            backend,
            write_buffer: bytesize::ByteSize::mib(4),
            cache_entries: 8,
            timer_cache: 16,
            ..StateConfig::default()
        },
        root: dir.to_path_buf(),
        clock: Clock::manual(0),
    };
    KeyedState::open(&setup, "op", 0, 128, groups).unwrap()
}

/// Timers against a sorted set per domain, on both backends, RocksDB keeping 16 per domain
/// in memory (so they move to RocksDB and back many times): random registrations, deletes
/// and replacements over keys of many key groups and timestamps with ties, firing up to
/// random times, and restores from checkpoints along the way (RocksDB's taken over, and every
/// checkpoint also restored split over two subtasks).
#[test]
fn timers_fire_in_order_exactly_once_wherever_they_are_kept() {
    use std::collections::BTreeSet;
    const DOMAINS: [TimeDomain; 2] = [TimeDomain::EventTime, TimeDomain::ProcessingTime];
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir_all(&shared).unwrap();
        let mut s = open_spilling(backend, 0..128, dir.path());
        s.declare("v", StateKind::Value, None).unwrap();
        let mut model: [BTreeSet<(i64, Vec<u8>)>; 2] = Default::default();
        let mut rng = fastrand::Rng::with_seed(11);
        let mut spilled = false;
        for round in 0..8_000u64 {
            let d = rng.usize(0..2);
            let (domain, key) = (DOMAINS[d], format!("k{}", rng.u32(0..200)).into_bytes());
            let ts = rng.i64(0..3_000);
            match rng.u8(0..5) {
                0..=2 => {
                    s.register_timer(domain, ts, &key).unwrap();
                    model[d].insert((ts, key));
                }
                3 => {
                    s.delete_timer(domain, ts, &key).unwrap();
                    model[d].remove(&(ts, key));
                }
                _ => {
                    // Replace a pending timer by a later one of its key.
                    let n = model[d].len();
                    if let Some((ts, key)) = model[d].iter().nth(rng.usize(0..n.max(1))).cloned() {
                        s.delete_timer(domain, ts, &key).unwrap();
                        s.register_timer(domain, ts + 100, &key).unwrap();
                        model[d].remove(&(ts, key.clone()));
                        model[d].insert((ts + 100, key));
                    }
                }
            }
            spilled |= s.timers_in_memory().0 < model[0].len() + model[1].len();
            if round % 400 == 399 {
                let upto = rng.i64(0..3_000);
                for (d, domain) in DOMAINS.into_iter().enumerate() {
                    while let Some((ts, key)) = s.pop_timer(domain, upto).unwrap() {
                        assert_eq!(
                            model[d].pop_first(),
                            Some((ts, key.to_vec())),
                            "{backend:?}"
                        );
                    }
                    assert!(model[d].first().is_none_or(|(ts, _)| *ts > upto));
                    assert!(s.next_timer(domain).is_none_or(|t| t > upto));
                    if let Some((first, _)) = model[d].first() {
                        assert!(s.next_timer(domain).is_some_and(|t| t <= *first));
                        assert!(s.timer_count(domain) >= model[d].len() as u64);
                    }
                }
            }
            if round % 1_000 == 999 {
                let n = round / 1_000 + 1;
                let mut bytes = Vec::new();
                let files = s.checkpoint(n, SnapshotFormat::Native, &mut bytes).unwrap();
                for (from, name, _) in files.iter().flat_map(|f| &f.files) {
                    super::link_or_copy(from, &shared.join(name)).unwrap();
                }
                s.notify_complete(n);
                let expected: Vec<_> = DOMAINS
                    .into_iter()
                    .zip(&model)
                    .flat_map(|(d, m)| m.iter().map(move |(ts, k)| (d, *ts, k.clone())))
                    .collect();
                let mut halves = Vec::new();
                for sub in 0..2 {
                    let mut part = open_spilling(backend, key_group_range(128, 2, sub), dir.path());
                    part.restore_file(&bytes, &shared).unwrap();
                    halves.extend(part.all_timers());
                }
                halves.sort();
                assert_eq!(halves, expected, "{backend:?}, split over two subtasks");
                s = open_spilling(backend, 0..128, dir.path());
                s.restore_file(&bytes, &shared).unwrap();
                assert_eq!(s.all_timers(), expected, "{backend:?}, restored");
            }
        }
        assert_eq!(spilled, backend == BackendKind::RocksDb);
        for (d, domain) in DOMAINS.into_iter().enumerate() {
            while let Some((ts, key)) = s.pop_timer(domain, i64::MAX).unwrap() {
                assert_eq!(
                    model[d].pop_first(),
                    Some((ts, key.to_vec())),
                    "{backend:?}"
                );
            }
            assert!(model[d].is_empty());
            assert_eq!((s.next_timer(domain), s.timer_count(domain)), (None, 0));
        }
    }
}

/// An operator with timers and no state runs no database until its timers spill; then its
/// checkpoint carries them, and a restore fires every one in order.
#[test]
fn timers_without_state_open_rocksdb_when_they_spill_and_come_back_from_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let databases = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != "shared")
            .count()
    };
    let mut s = open_spilling(BackendKind::RocksDb, 0..128, dir.path());
    let key = |i: i64| format!("k{}", i % 37).into_bytes();
    for i in 0..16 {
        s.register_timer(TimeDomain::EventTime, i, &key(i)).unwrap();
    }
    assert_eq!(databases(), 0, "16 timers fit the timer cache");
    for i in 16..100 {
        s.register_timer(TimeDomain::EventTime, i, &key(i)).unwrap();
    }
    assert_eq!(databases(), 1, "the timers spilled");
    assert!(s.timers_in_memory().0 < 100);
    let mut bytes = Vec::new();
    let files = s.checkpoint(1, SnapshotFormat::Native, &mut bytes).unwrap();
    for (from, name, _) in files.iter().flat_map(|f| &f.files) {
        super::link_or_copy(from, &shared.join(name)).unwrap();
    }
    drop(s);
    let mut back = open_spilling(BackendKind::RocksDb, 0..128, dir.path());
    back.restore_file(&bytes, &shared).unwrap();
    for i in 0..100 {
        let fired = back.pop_timer(TimeDomain::EventTime, i64::MAX).unwrap();
        assert_eq!(fired, Some((i, Key::from_slice(&key(i)))));
    }
    assert_eq!(
        back.pop_timer(TimeDomain::EventTime, i64::MAX).unwrap(),
        None
    );
}

#[test]
fn slots_number_distinct_keys_in_order_and_start_over_when_cleared() {
    let mut slots = Slots::default();
    for batch in 0..3 {
        slots.clear();
        // Enough keys that the index grows several times within a batch.
        let keys: Vec<String> = (0..2_000)
            .map(|i| format!("k{}", (i * 7 + batch) % 1_500))
            .collect();
        let mut first = Vec::new();
        for key in &keys {
            let mut asked = false;
            let (slot, new) = slots.slot_of(key.as_bytes(), || {
                asked = true;
                key.len() as u32
            });
            let at = first.iter().position(|k| k == key);
            assert_eq!(new, at.is_none(), "{key}");
            assert_eq!(
                asked, new,
                "the key group is asked for new keys only: {key}"
            );
            if new {
                first.push(key.clone());
            }
            assert_eq!(slot as usize, at.unwrap_or(first.len() - 1), "{key}");
        }
        assert_eq!(slots.len(), 1_500);
        for (slot, key) in first.iter().enumerate() {
            assert_eq!(slots.key(slot), key.as_bytes());
            assert_eq!(slots.group(slot), key.len() as u32);
        }
        // `push` of a key the batch has already gives its slot.
        assert_eq!(slots.push(first[3].as_bytes(), 0), 3);
        assert_eq!(slots.len(), 1_500);
    }
}
