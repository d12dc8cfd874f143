//! Unit-test operators natively with `cargo test`, no WebAssembly involved.
//!
//! [`Harness`] runs an operator through exactly the code the component export runs — the
//! batch is encoded with the wire format, decoded in place, state goes through the same
//! per-batch caches and `load`/`store` buffers — with an in-memory store standing in for the
//! host. It does not enforce state TTL (the host's state backends do) and does not partition
//! keys between subtasks.
//!
//! ```
//! use weir_sdk::prelude::*;
//! use weir_sdk::testing::{Harness, Input};
//!
//! #[derive(Default)]
//! struct CountWords;
//!
//! impl Operator for CountWords {
//!     fn process(&mut self, ctx: &mut Context, word: Record<'_>) -> Result<()> {
//!         let count = ctx.value_state::<u64>("count");
//!         let n = count.get()?.unwrap_or(0) + 1;
//!         count.set(&n)?;
//!         ctx.emit_display(word.key(), n)
//!     }
//! }
//!
//! let mut h = Harness::<CountWords>::new();
//! let out = h.process([("to", "to"), ("be", "be"), ("to", "to")]);
//! let counts: Vec<_> = out.iter().map(|o| (o.key_str().unwrap(), o.value_str())).collect();
//! assert_eq!(counts, [("to", "1"), ("be", "1"), ("to", "2")]);
//! assert_eq!(h.value_state::<u64>("count", "to"), Some(2));
//!
//! // A record without key cannot reach keyed state:
//! let err = h.try_process([Input::new("orphan")]).unwrap_err();
//! assert!(err.to_string().contains("state \"count\""));
//! ```

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::rc::Rc;

use serde::de::DeserializeOwned;
use weir_wire::{
    BatchWriter, Kind, ListOp, MapOp, OutputReader, TimeDomain, ValueOp, put_bytes, put_opt_bytes,
    put_u32, read_list_ops, read_map_ops, read_timer_ops, read_value_ops, write_fired_timers,
};

use crate::backend::{Backend, StateKind};
use crate::runtime::{Core, Instance, OpenInfo};
use crate::{Context, Level, OpenContext, Operator, Result, Ttl};

/// A record to feed to [`Harness::process`].
///
/// `&str`, `String` and byte vectors convert into a record without key; `(key, value)` pairs
/// of `&str` into a keyed one.
///
/// ```
/// use weir_sdk::Kind;
/// use weir_sdk::testing::Input;
///
/// let a: Input = ("alice", "home").into();
/// assert_eq!(a, Input::keyed("alice", "home"));
/// let b = Input::new("line").with_timestamp(10).with_kind(Kind::Delete);
/// assert_eq!((b.key, b.timestamp, b.kind), (None, Some(10), Kind::Delete));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// Event time in milliseconds.
    pub timestamp: Option<i64>,
    /// Changelog kind.
    pub kind: Kind,
}

impl Input {
    /// An [`Insert`](Kind::Insert) record without key or timestamp.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::new("x");
    /// assert_eq!(i.value, b"x");
    /// ```
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Input {
            key: None,
            value: value.into(),
            timestamp: None,
            kind: Kind::Insert,
        }
    }

    /// An [`Insert`](Kind::Insert) record with a key.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::keyed("k", "v");
    /// assert_eq!(i.key.as_deref(), Some(&b"k"[..]));
    /// ```
    pub fn keyed(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Input {
            key: Some(key.into()),
            ..Input::new(value)
        }
    }

    /// The same record with an event time.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::new("v").with_timestamp(3);
    /// assert_eq!(i.timestamp, Some(3));
    /// ```
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// The same record with another changelog kind.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::new("v").with_kind(weir_sdk::Kind::UpdateBefore);
    /// assert_eq!(i.kind, weir_sdk::Kind::UpdateBefore);
    /// ```
    #[must_use]
    pub fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }
}

impl From<&str> for Input {
    fn from(value: &str) -> Self {
        Input::new(value)
    }
}

impl From<String> for Input {
    fn from(value: String) -> Self {
        Input::new(value)
    }
}

impl From<Vec<u8>> for Input {
    fn from(value: Vec<u8>) -> Self {
        Input::new(value)
    }
}

impl From<(&str, &str)> for Input {
    fn from((key, value): (&str, &str)) -> Self {
        Input::keyed(key, value)
    }
}

impl From<(&[u8], &[u8])> for Input {
    fn from((key, value): (&[u8], &[u8])) -> Self {
        Input::keyed(key, value)
    }
}

/// A record the operator emitted.
///
/// ```
/// use weir_sdk::prelude::*;
/// # #[derive(Default)] struct Op;
/// # impl Operator for Op {
/// #     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
/// #         ctx.emit_record(Kind::UpdateAfter, rec.key(), Some(9), rec.value())
/// #     }
/// # }
/// let out = weir_sdk::testing::Harness::<Op>::new().process([("k", "v")]);
/// assert_eq!(out[0].key_str(), Some("k"));
/// assert_eq!(out[0].value_str(), "v");
/// assert_eq!((out[0].kind, out[0].timestamp, out[0].side_output.as_deref()), (Kind::UpdateAfter, Some(9), None));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// Changelog kind.
    pub kind: Kind,
    /// Event time in milliseconds.
    pub timestamp: Option<i64>,
    /// The side output it went to; `None` for the main output.
    pub side_output: Option<String>,
}

impl Output {
    /// The key as text.
    ///
    /// # Panics
    /// When the key is not UTF-8.
    ///
    /// ```
    /// # let out = weir_sdk::testing::Output { key: Some(b"k".to_vec()), value: vec![], kind: weir_sdk::Kind::Insert, timestamp: None, side_output: None };
    /// assert_eq!(out.key_str(), Some("k"));
    /// ```
    pub fn key_str(&self) -> Option<&str> {
        self.key
            .as_deref()
            .map(|k| std::str::from_utf8(k).expect("output key is not UTF-8"))
    }

    /// The value as text.
    ///
    /// # Panics
    /// When the value is not UTF-8.
    ///
    /// ```
    /// # let out = weir_sdk::testing::Output { key: None, value: b"v".to_vec(), kind: weir_sdk::Kind::Insert, timestamp: None, side_output: None };
    /// assert_eq!(out.value_str(), "v");
    /// ```
    pub fn value_str(&self) -> &str {
        std::str::from_utf8(&self.value).expect("output value is not UTF-8")
    }
}

// ---------------------------------------------------------------------------------------------
// The in-memory host

enum Stored {
    Value(Vec<u8>),
    List(Vec<Vec<u8>>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

struct MemState {
    name: String,
    kind: StateKind,
    data: BTreeMap<Vec<u8>, Stored>,
}

#[derive(Default)]
struct Store {
    states: Vec<MemState>,
    /// `(domain, time, key)`: iteration is in firing order within a domain.
    timers: BTreeSet<(TimeDomain, i64, Vec<u8>)>,
    watermark: Option<i64>,
    processing_time: i64,
    output: Vec<Output>,
    logs: Vec<(Level, String)>,
    calls: HostCalls,
    /// Operator states by name; the index of a name is its handle.
    operator_states: Vec<(String, Option<Vec<u8>>)>,
}

/// How often the runtime called each host import (for tests of the boundary cost).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct HostCalls {
    pub(crate) declare: usize,
    pub(crate) load: usize,
    pub(crate) store: usize,
    pub(crate) emit: usize,
    pub(crate) timers: usize,
}

impl Store {
    fn state(&self, name: &str) -> Option<&MemState> {
        self.states.iter().find(|s| s.name == name)
    }
}

#[derive(Default)]
struct MemoryBackend(Rc<RefCell<Store>>);

fn key_at<'k>(keys: &[&'k [u8]], slot: u32) -> &'k [u8] {
    match keys.get(slot as usize) {
        Some(k) => k,
        None => panic!(
            "weir-sdk bug: change for key slot {slot} of a batch with {} keys",
            keys.len()
        ),
    }
}

impl Backend for MemoryBackend {
    fn declare_state(&mut self, kind: StateKind, name: &str, _ttl: Option<&Ttl>) -> usize {
        let mut store = self.0.borrow_mut();
        store.calls.declare += 1;
        if let Some(i) = store.states.iter().position(|s| s.name == name) {
            let declared = store.states[i].kind;
            assert!(
                declared == kind,
                "state \"{name}\" was declared as a {declared} state and now as a {kind} state \
                 (the host traps here)"
            );
            return i;
        }
        store.states.push(MemState {
            name: name.to_owned(),
            kind,
            data: BTreeMap::new(),
        });
        store.states.len() - 1
    }

    fn load(&mut self, state: usize, keys: &[&[u8]]) -> Vec<u8> {
        self.0.borrow_mut().calls.load += 1;
        let store = self.0.borrow();
        let state = &store.states[state];
        let mut buf = Vec::new();
        for key in keys {
            let stored = state.data.get(*key);
            match state.kind {
                StateKind::Value => put_opt_bytes(
                    &mut buf,
                    match stored {
                        Some(Stored::Value(v)) => Some(v),
                        _ => None,
                    },
                ),
                StateKind::List => {
                    let items: &[Vec<u8>] = match stored {
                        Some(Stored::List(l)) => l,
                        _ => &[],
                    };
                    put_u32(&mut buf, items.len() as u32);
                    for item in items {
                        put_bytes(&mut buf, item);
                    }
                }
                StateKind::Map => {
                    let empty = BTreeMap::new();
                    let map = match stored {
                        Some(Stored::Map(m)) => m,
                        _ => &empty,
                    };
                    put_u32(&mut buf, map.len() as u32);
                    for (k, v) in map {
                        put_bytes(&mut buf, k);
                        put_bytes(&mut buf, v);
                    }
                }
            }
        }
        buf
    }

    fn store(&mut self, state: usize, keys: &[&[u8]], changes: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.store += 1;
        let state = &mut store.states[state];
        let data = &mut state.data;
        match state.kind {
            StateKind::Value => {
                for op in read_value_ops(changes) {
                    let (slot, op) = op.expect("weir-sdk bug: malformed value-state changes");
                    let key = key_at(keys, slot).to_vec();
                    match op {
                        ValueOp::Set(v) => data.insert(key, Stored::Value(v.to_vec())),
                        ValueOp::Clear => data.remove(&key),
                    };
                }
            }
            StateKind::List => {
                for op in read_list_ops(changes) {
                    let (slot, op) = op.expect("weir-sdk bug: malformed list-state changes");
                    let key = key_at(keys, slot).to_vec();
                    let mut list = match data.remove(&key) {
                        Some(Stored::List(l)) => l,
                        _ => Vec::new(),
                    };
                    match op {
                        ListOp::Clear => list.clear(),
                        ListOp::Replace(items) => {
                            list = items.into_iter().map(<[u8]>::to_vec).collect()
                        }
                        ListOp::Append(items) => list.extend(items.into_iter().map(<[u8]>::to_vec)),
                    }
                    if !list.is_empty() {
                        data.insert(key, Stored::List(list));
                    }
                }
            }
            StateKind::Map => {
                for op in read_map_ops(changes) {
                    let (slot, op) = op.expect("weir-sdk bug: malformed map-state changes");
                    let key = key_at(keys, slot).to_vec();
                    let mut map = match data.remove(&key) {
                        Some(Stored::Map(m)) => m,
                        _ => BTreeMap::new(),
                    };
                    match op {
                        MapOp::Clear => map.clear(),
                        MapOp::Put(k, v) => {
                            map.insert(k.to_vec(), v.to_vec());
                        }
                        MapOp::Remove(k) => {
                            map.remove(k);
                        }
                    }
                    if !map.is_empty() {
                        data.insert(key, Stored::Map(map));
                    }
                }
            }
        }
    }

    fn emit(&mut self, records: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.emit += 1;
        for item in OutputReader::new(records) {
            let (side, rec) = item.expect("weir-sdk bug: malformed output buffer");
            store.output.push(Output {
                key: rec.key.map(<[u8]>::to_vec),
                value: rec.value.to_vec(),
                kind: rec.kind,
                timestamp: rec.timestamp,
                side_output: side.map(|s| String::from_utf8_lossy(s).into_owned()),
            });
        }
    }

    fn update_timers(&mut self, keys: &[&[u8]], changes: &[u8]) {
        let mut store = self.0.borrow_mut();
        store.calls.timers += 1;
        for op in read_timer_ops(changes) {
            let op = op.expect("weir-sdk bug: malformed timer changes");
            let timer = (op.domain, op.timestamp, key_at(keys, op.slot).to_vec());
            if op.register {
                store.timers.insert(timer);
            } else {
                store.timers.remove(&timer);
            }
        }
    }

    fn current_watermark(&mut self) -> Option<i64> {
        self.0.borrow().watermark
    }

    fn current_processing_time(&mut self) -> i64 {
        self.0.borrow().processing_time
    }

    fn log(&mut self, level: Level, message: &str) {
        eprintln!("[operator {level}] {message}");
        self.0.borrow_mut().logs.push((level, message.to_owned()));
    }

    fn declare_operator_state(&mut self, name: &str) -> usize {
        let states = &mut self.0.borrow_mut().operator_states;
        match states.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                states.push((name.to_owned(), None));
                states.len() - 1
            }
        }
    }

    fn get_operator_state(&mut self, state: usize) -> Option<Vec<u8>> {
        self.0.borrow().operator_states[state].1.clone()
    }

    fn set_operator_state(&mut self, state: usize, value: Option<&[u8]>) {
        self.0.borrow_mut().operator_states[state].1 = value.map(<[u8]>::to_vec);
    }
}

// ---------------------------------------------------------------------------------------------
// The harness

/// Runs an operator natively, one batch per call, against an in-memory host.
///
/// The operator is created with `Default` and opened on first use. Calls that return
/// `Vec<Output>` panic when the operator returns an error (convenient in tests); their
/// `try_` variants return it.
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::testing::{Harness, Input};
///
/// #[derive(Default)]
/// struct Sessions;
///
/// impl Operator for Sessions {
///     fn process(&mut self, ctx: &mut Context, click: Record<'_>) -> Result<()> {
///         let ts = click.timestamp().ok_or("clicks need event time")?;
///         ctx.list_state::<String>("pages").add(click.value_str()?)?;
///         ctx.register_event_timer(ts + 1_000)
///     }
///
///     fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
///         let pages = ctx.list_state::<String>("pages");
///         ctx.emit(Some(timer.key()), pages.get()?.join(" > "))?;
///         pages.clear()
///     }
/// }
///
/// let mut h = Harness::<Sessions>::new();
/// h.process([
///     Input::keyed("ann", "/home").with_timestamp(0),
///     Input::keyed("ann", "/cart").with_timestamp(500),
/// ]);
/// assert!(h.fire_event_timers_up_to(999).is_empty());
/// let out = h.fire_event_timers_up_to(1_000);
/// assert_eq!(out[0].value_str(), "/home > /cart");
/// assert_eq!(out[0].timestamp, Some(1_000));
/// ```
pub struct Harness<T> {
    instance: Option<Instance<T>>,
    store: Rc<RefCell<Store>>,
    info: OpenInfo,
}

impl<T> fmt::Debug for Harness<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("info", &self.info)
            .field("opened", &self.instance.is_some())
            .finish_non_exhaustive()
    }
}

impl<T: Operator + Default> Default for Harness<T> {
    fn default() -> Self {
        Self::new()
    }
}

fn default_info() -> OpenInfo {
    OpenInfo {
        operator_uid: "test-operator".to_owned(),
        subtask_index: 0,
        parallelism: 1,
        config: "{}".to_owned(),
    }
}

/// Unwraps a harness call, panicking with the operator's error message.
fn expect_ok<R>(what: &str, result: Result<R>) -> R {
    match result {
        Ok(r) => r,
        Err(e) => panic!("the operator failed in {what}: {e}"),
    }
}

impl<T: Operator + Default> Harness<T> {
    /// A harness for `T` with operator uid `test-operator`, subtask 0 of 1, config `{}`.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) } }
    /// let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// assert!(h.process(["x"]).is_empty());
    /// ```
    pub fn new() -> Self {
        Harness {
            instance: None,
            store: Rc::default(),
            info: default_info(),
        }
    }

    /// Sets the config JSON that [`OpenContext::config`] parses (a `&str` or a
    /// `serde_json::Value`).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op(String);
    /// # impl Operator for Op {
    /// #     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> { self.0 = ctx.config_json().into(); Ok(()) }
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.emit(None, &self.0) }
    /// # }
    /// let mut h = weir_sdk::testing::Harness::<Op>::new().with_config(r#"{"n":1}"#);
    /// assert_eq!(h.process(["x"])[0].value_str(), r#"{"n":1}"#);
    /// ```
    #[must_use]
    pub fn with_config(mut self, config: impl fmt::Display) -> Self {
        self.info.config = config.to_string();
        self
    }

    /// Sets the parallelism [`OpenContext::parallelism`] reports (keys are not partitioned).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op(u32);
    /// # impl Operator for Op {
    /// #     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> { self.0 = ctx.parallelism(); Ok(()) }
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.emit_display(None, self.0) }
    /// # }
    /// let mut h = weir_sdk::testing::Harness::<Op>::new().with_parallelism(8);
    /// assert_eq!(h.process(["x"])[0].value_str(), "8");
    /// ```
    #[must_use]
    pub fn with_parallelism(mut self, parallelism: u32) -> Self {
        self.info.parallelism = parallelism;
        self
    }

    /// Sets the subtask index [`OpenContext::subtask_index`] reports.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op(u32);
    /// # impl Operator for Op {
    /// #     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> { self.0 = ctx.subtask_index(); Ok(()) }
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.emit_display(None, self.0) }
    /// # }
    /// let mut h = weir_sdk::testing::Harness::<Op>::new().with_parallelism(4).with_subtask_index(3);
    /// assert_eq!(h.process(["x"])[0].value_str(), "3");
    /// ```
    #[must_use]
    pub fn with_subtask_index(mut self, subtask_index: u32) -> Self {
        self.info.subtask_index = subtask_index;
        self
    }

    /// Sets the operator uid [`OpenContext::operator_uid`] reports.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op(String);
    /// # impl Operator for Op {
    /// #     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> { self.0 = ctx.operator_uid().into(); Ok(()) }
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.emit(None, &self.0) }
    /// # }
    /// let mut h = weir_sdk::testing::Harness::<Op>::new().with_operator_uid("count-v2");
    /// assert_eq!(h.process(["x"])[0].value_str(), "count-v2");
    /// ```
    #[must_use]
    pub fn with_operator_uid(mut self, uid: &str) -> Self {
        self.info.operator_uid = uid.to_owned();
        self
    }

    fn instance(&mut self) -> Result<&mut Instance<T>> {
        if self.instance.is_none() {
            let backend = MemoryBackend(Rc::clone(&self.store));
            let mut instance = Instance::new(T::default(), Box::new(backend), self.info.clone());
            instance.open()?;
            self.instance = Some(instance);
        }
        Ok(self.instance.as_mut().expect("just set"))
    }

    fn take_output(&self) -> Vec<Output> {
        std::mem::take(&mut self.store.borrow_mut().output)
    }

    /// Runs `records` as one batch and returns what the operator emitted.
    ///
    /// # Panics
    /// When the operator returns an error; see [`try_process`](Self::try_process).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> { ctx.emit(r.key(), r.value()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// let out = h.process([("k", "a"), ("k", "b")]);
    /// assert_eq!(out.len(), 2);
    /// ```
    pub fn process<I>(&mut self, records: I) -> Vec<Output>
    where
        I: IntoIterator,
        I::Item: Into<Input>,
    {
        expect_ok("process", self.try_process(records))
    }

    /// Runs `records` as one batch; the operator's error if it returns one.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, _: &mut Context, r: Record<'_>) -> Result<()> { r.value_str()?; Ok(()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// let err = h.try_process([weir_sdk::testing::Input::new(vec![0xff])]).unwrap_err();
    /// assert!(err.to_string().contains("record value"));
    /// ```
    pub fn try_process<I>(&mut self, records: I) -> Result<Vec<Output>>
    where
        I: IntoIterator,
        I::Item: Into<Input>,
    {
        let inputs: Vec<Input> = records.into_iter().map(Into::into).collect();
        let mut writer = BatchWriter::new(Vec::new());
        let mut slots: HashMap<&[u8], u32> = HashMap::new();
        for input in &inputs {
            if let Some(key) = &input.key {
                slots.entry(key).or_insert_with(|| writer.key(key));
            }
        }
        for input in &inputs {
            let slot = input.key.as_deref().map(|k| slots[k]);
            writer.record(slot, input.kind, input.timestamp, &input.value);
        }
        let batch = writer.finish();
        let result = self.instance().and_then(|i| i.process(&batch));
        let output = self.take_output();
        result.map(|()| output)
    }

    /// Advances the watermark to `timestamp` and fires every event-time timer at or before
    /// it (including timers those timers register), in time order; returns what they emitted.
    ///
    /// # Panics
    /// When the operator returns an error.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.register_event_timer(10) }
    /// #     fn on_timer(&mut self, ctx: &mut Context, t: Timer<'_>) -> Result<()> { ctx.emit_display(Some(t.key()), t.timestamp()) }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "")]);
    /// assert!(h.fire_event_timers_up_to(9).is_empty());
    /// assert_eq!(h.fire_event_timers_up_to(10)[0].value_str(), "10");
    /// ```
    pub fn fire_event_timers_up_to(&mut self, timestamp: i64) -> Vec<Output> {
        expect_ok("on_timer", self.try_fire_event_timers_up_to(timestamp))
    }

    /// [`fire_event_timers_up_to`](Self::fire_event_timers_up_to), returning the operator's
    /// error if it returns one.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.register_event_timer(10) }
    /// #     fn on_timer(&mut self, _: &mut Context, _: Timer<'_>) -> Result<()> { Err(Error::msg("boom")) }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "")]);
    /// assert!(h.try_fire_event_timers_up_to(10).unwrap_err().to_string().ends_with("boom"));
    /// ```
    pub fn try_fire_event_timers_up_to(&mut self, timestamp: i64) -> Result<Vec<Output>> {
        {
            let mut store = self.store.borrow_mut();
            store.watermark = Some(store.watermark.map_or(timestamp, |w| w.max(timestamp)));
        }
        self.fire(TimeDomain::EventTime, timestamp)
    }

    /// Sets the processing time the operator sees and fires every processing-time timer at or
    /// before it; returns what they emitted.
    ///
    /// # Panics
    /// When the operator returns an error.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// #     fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> {
    /// #         ctx.register_processing_time_timer(ctx.current_processing_time() + 100)
    /// #     }
    /// #     fn on_timer(&mut self, ctx: &mut Context, _: Timer<'_>) -> Result<()> { ctx.emit(None, "tick") }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.set_processing_time(1_000);
    /// h.process([("k", "")]);
    /// assert!(h.set_processing_time(1_050).is_empty());
    /// assert_eq!(h.set_processing_time(1_100).len(), 1);
    /// ```
    pub fn set_processing_time(&mut self, millis: i64) -> Vec<Output> {
        expect_ok("on_timer", self.try_set_processing_time(millis))
    }

    /// [`set_processing_time`](Self::set_processing_time), returning the operator's error if
    /// it returns one.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// assert!(h.try_set_processing_time(5).unwrap().is_empty());
    /// ```
    pub fn try_set_processing_time(&mut self, millis: i64) -> Result<Vec<Output>> {
        self.store.borrow_mut().processing_time = millis;
        self.fire(TimeDomain::ProcessingTime, millis)
    }

    fn fire(&mut self, domain: TimeDomain, up_to: i64) -> Result<Vec<Output>> {
        const MAX_ROUNDS: usize = 10_000;
        let mut outputs = Vec::new();
        for _ in 0..MAX_ROUNDS {
            let due: Vec<(TimeDomain, i64, Vec<u8>)> = {
                let mut store = self.store.borrow_mut();
                let due: Vec<_> = store
                    .timers
                    .iter()
                    .filter(|(d, ts, _)| *d == domain && *ts <= up_to)
                    .cloned()
                    .collect();
                for t in &due {
                    store.timers.remove(t);
                }
                due
            };
            if due.is_empty() {
                return Ok(outputs);
            }
            let mut keys: Vec<&[u8]> = Vec::new();
            let mut slots: HashMap<&[u8], u32> = HashMap::new();
            let mut fired = Vec::with_capacity(due.len());
            for (d, ts, key) in &due {
                let slot = *slots.entry(key).or_insert_with(|| {
                    keys.push(key);
                    keys.len() as u32 - 1
                });
                fired.push((*d, slot, *ts));
            }
            let mut buf = Vec::new();
            write_fired_timers(&mut buf, &keys, fired.into_iter());
            let result = self.instance().and_then(|i| i.on_timers(&buf));
            outputs.extend(self.take_output());
            result?;
        }
        panic!(
            "timers keep registering timers at or before {up_to}: stopped after {MAX_ROUNDS} rounds"
        )
    }

    /// Calls the operator's `close` hook and returns what it emitted. The next call opens a
    /// new instance.
    ///
    /// # Panics
    /// When the operator returns an error.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// #     fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) }
    /// #     fn close(&mut self, ctx: &mut Context) -> Result<()> { ctx.emit(None, "bye") }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// assert_eq!(h.close()[0].value_str(), "bye");
    /// ```
    pub fn close(&mut self) -> Vec<Output> {
        expect_ok("close", self.try_close())
    }

    /// [`close`](Self::close), returning the operator's error if it returns one.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// assert!(h.try_close().unwrap().is_empty());
    /// ```
    pub fn try_close(&mut self) -> Result<Vec<Output>> {
        let result = self.instance().and_then(|i| i.close());
        self.instance = None;
        let output = self.take_output();
        result.map(|()| output)
    }

    /// Drops the operator instance as a failure would; state and timers stay. The next call
    /// opens a fresh instance — a test that the operator keeps nothing it needs in fields.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// #     fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> {
    /// #         let c = ctx.value_state::<u32>("c"); let n = c.get()?.unwrap_or(0) + 1; c.set(&n)?; ctx.emit_display(r.key(), n)
    /// #     }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "")]);
    /// h.restart();
    /// assert_eq!(h.process([("k", "")])[0].value_str(), "2");
    /// ```
    pub fn restart(&mut self) {
        self.instance = None;
    }

    /// The value of operator state `name`, `None` if it has none.
    ///
    /// # Panics
    /// When the stored bytes do not decode as `V`.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> { ctx.operator_state::<String>("last").set(&r.value_str()?.to_owned()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "x"), ("j", "y")]);
    /// assert_eq!(h.operator_state::<String>("last").as_deref(), Some("y"));
    /// ```
    pub fn operator_state<V: DeserializeOwned>(&self, name: &str) -> Option<V> {
        let store = self.store.borrow();
        let (_, value) = store.operator_states.iter().find(|(n, _)| n == name)?;
        value.as_deref().map(|v| decode_or_panic(name, v))
    }

    /// The value of value state `name` for `key`, `None` if it has none.
    ///
    /// # Panics
    /// When the stored bytes do not decode as `V`.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> { ctx.value_state::<String>("v").set(r.value_str()?) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "x")]);
    /// assert_eq!(h.value_state::<String>("v", "k").as_deref(), Some("x"));
    /// assert_eq!(h.value_state::<String>("v", "other"), None);
    /// ```
    pub fn value_state<V: DeserializeOwned>(&self, name: &str, key: impl AsRef<[u8]>) -> Option<V> {
        let store = self.store.borrow();
        match store.state(name)?.data.get(key.as_ref())? {
            Stored::Value(v) => Some(decode_or_panic(name, v)),
            _ => None,
        }
    }

    /// The list of list state `name` for `key` (empty if it has none).
    ///
    /// # Panics
    /// When the stored bytes do not decode as `V`.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> { ctx.list_state::<String>("l").add(r.value_str()?) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "x"), ("k", "y")]);
    /// assert_eq!(h.list_state::<String>("l", "k"), ["x", "y"]);
    /// ```
    pub fn list_state<V: DeserializeOwned>(&self, name: &str, key: impl AsRef<[u8]>) -> Vec<V> {
        let store = self.store.borrow();
        let Some(state) = store.state(name) else {
            return Vec::new();
        };
        match state.data.get(key.as_ref()) {
            Some(Stored::List(items)) => items.iter().map(|v| decode_or_panic(name, v)).collect(),
            _ => Vec::new(),
        }
    }

    /// The entries of map state `name` for `key`, ordered by encoded map key.
    ///
    /// # Panics
    /// When the stored bytes do not decode as `K` and `V`.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> { ctx.map_state::<String, u8>("m").put(r.value_str()?, &1) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "x")]);
    /// assert_eq!(h.map_state::<String, u8>("m", "k"), [("x".to_string(), 1)]);
    /// ```
    pub fn map_state<K, V>(&self, name: &str, key: impl AsRef<[u8]>) -> Vec<(K, V)>
    where
        K: DeserializeOwned,
        V: DeserializeOwned,
    {
        let store = self.store.borrow();
        let Some(state) = store.state(name) else {
            return Vec::new();
        };
        match state.data.get(key.as_ref()) {
            Some(Stored::Map(m)) => m
                .iter()
                .map(|(k, v)| (decode_or_panic(name, k), decode_or_panic(name, v)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The registered event-time timers of `key`, in time order.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.register_event_timer(5) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "")]);
    /// assert_eq!(h.event_timers("k"), [5]);
    /// ```
    pub fn event_timers(&self, key: impl AsRef<[u8]>) -> Vec<i64> {
        self.timers(TimeDomain::EventTime, key.as_ref())
    }

    /// The registered processing-time timers of `key`, in time order.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.register_processing_time_timer(5) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process([("k", "")]);
    /// assert_eq!(h.processing_time_timers("k"), [5]);
    /// ```
    pub fn processing_time_timers(&self, key: impl AsRef<[u8]>) -> Vec<i64> {
        self.timers(TimeDomain::ProcessingTime, key.as_ref())
    }

    fn timers(&self, domain: TimeDomain, key: &[u8]) -> Vec<i64> {
        let store = self.store.borrow();
        store
            .timers
            .iter()
            .filter(|(d, _, k)| *d == domain && k == key)
            .map(|(_, ts, _)| *ts)
            .collect()
    }

    /// Every line the operator logged so far.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, _: Record<'_>) -> Result<()> { ctx.warn("hm"); Ok(()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// h.process(["x"]);
    /// assert_eq!(h.logs(), [(Level::Warn, "hm".to_string())]);
    /// ```
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.store.borrow().logs.clone()
    }

    /// Host calls made so far; the counters start over.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn take_calls(&self) -> HostCalls {
        std::mem::take(&mut self.store.borrow_mut().calls)
    }
}

fn decode_or_panic<V: DeserializeOwned>(name: &str, bytes: &[u8]) -> V {
    match postcard::from_bytes(bytes) {
        Ok(v) => v,
        Err(e) => panic!("state \"{name}\" does not decode as the requested type: {e}"),
    }
}

/// Runs `f` with a [`Context`] that has no current key (for doc examples).
#[doc(hidden)]
pub fn doc_context<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let core = RefCell::new(Core::new(Box::new(MemoryBackend::default())));
    let mut ctx = Context::new(&core, &[]);
    f(&mut ctx)
}

/// Runs `f` with the [`OpenContext`] a default [`Harness`] opens with (for doc examples).
#[doc(hidden)]
pub fn doc_open_context<R>(f: impl FnOnce(&mut OpenContext<'_>) -> R) -> R {
    let core = RefCell::new(Core::new(Box::new(MemoryBackend::default())));
    let info = default_info();
    let mut ctx = OpenContext::new(&info, &core);
    f(&mut ctx)
}
