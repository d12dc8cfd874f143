//! [`Harness`]: runs an operator through the component's runtime code against the in-memory
//! host, and fires timers when a test moves the watermark or the clock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use serde::de::DeserializeOwned;
use weir_wire::{BatchWriter, TimeDomain, WRITE_BACK, write_fired_timers};

use super::backend::{HostCalls, MemoryBackend, Store};
use super::{Input, Output};
use crate::operator::DEFAULT_STATE_CACHE_BYTES;
use crate::runtime::{Core, Instance, OpenInfo};
use crate::{Codec, Context, Level, OpenContext, Operator, Result};

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
            let backend = MemoryBackend::new(Rc::clone(&self.store));
            let mut instance = Instance::new(T::default(), Box::new(backend), self.info.clone());
            instance.open()?;
            self.instance = Some(instance);
        }
        Ok(self.instance.as_mut().expect("just set"))
    }

    fn take_output(&self) -> Vec<Output> {
        self.store.borrow_mut().take_output()
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
        self.run_batch(0, records)
    }

    /// Runs `records` as one batch from the operator's second input (`second_input` in the
    /// job spec: [`Record::input`](crate::Record::input) is 1) and returns what it emitted.
    ///
    /// # Panics
    /// When the operator returns an error; see [`try_process_second`](Self::try_process_second).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op { fn process(&mut self, ctx: &mut Context, r: Record<'_>) -> Result<()> { ctx.emit_display(r.key(), r.input()) } }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// assert_eq!(h.process([("k", "order")])[0].value_str(), "0");
    /// assert_eq!(h.process_second([("k", "payment")])[0].value_str(), "1");
    /// ```
    pub fn process_second<I>(&mut self, records: I) -> Vec<Output>
    where
        I: IntoIterator,
        I::Item: Into<Input>,
    {
        expect_ok("process", self.try_process_second(records))
    }

    /// Runs `records` as one batch from the operator's second input; the operator's error
    /// if it returns one.
    pub fn try_process_second<I>(&mut self, records: I) -> Result<Vec<Output>>
    where
        I: IntoIterator,
        I::Item: Into<Input>,
    {
        self.run_batch(1, records)
    }

    fn run_batch<I>(&mut self, input: u8, records: I) -> Result<Vec<Output>>
    where
        I: IntoIterator,
        I::Item: Into<Input>,
    {
        let inputs: Vec<Input> = records.into_iter().map(Into::into).collect();
        let mut writer = BatchWriter::new(Vec::new());
        writer.from_input(input);
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
        let result = self
            .instance()
            .and_then(|i| written_back(i, |i| i.process(&batch)));
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
        self.store.borrow_mut().advance_watermark(timestamp);
        self.fire(TimeDomain::EventTime, timestamp)
    }

    /// Sets the processing time the operator sees and fires every processing-time timer at or
    /// before it; returns what they emitted, as the host does when its clock reaches them
    /// (with no records flowing too).
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
        self.store.borrow_mut().set_processing_time(millis);
        self.fire(TimeDomain::ProcessingTime, millis)
    }

    fn fire(&mut self, domain: TimeDomain, up_to: i64) -> Result<Vec<Output>> {
        const MAX_ROUNDS: usize = 10_000;
        let mut outputs = Vec::new();
        for _ in 0..MAX_ROUNDS {
            let due = self.store.borrow_mut().take_due_timers(domain, up_to);
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
            let result = self
                .instance()
                .and_then(|i| written_back(i, |i| i.on_timers(&buf)));
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

    /// Sends the forget batch, as the host does when its key ids are too many: the instance
    /// writes back and forgets what it keeps from batch to batch, and the ids start over.
    #[cfg(test)]
    pub(crate) fn forget_key_ids(&mut self) {
        let result = self.instance().and_then(|i| i.process(&weir_wire::FORGET));
        expect_ok("the forget batch", result);
        self.store.borrow_mut().forget_key_ids();
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
        self.operator_list_state(name).into_iter().next()
    }

    /// The elements of operator list state `name` (empty if it has none).
    ///
    /// # Panics
    /// When the stored bytes do not decode as `V`.
    pub fn operator_list_state<V: DeserializeOwned>(&self, name: &str) -> Vec<V> {
        let store = self.store.borrow();
        store
            .operator_state(name)
            .iter()
            .map(|e| decode_or_panic(T::STATE_CODEC, name, e))
            .collect()
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
        store
            .value(name, key.as_ref())
            .map(|v| decode_or_panic(T::STATE_CODEC, name, v))
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
        store
            .list(name, key.as_ref())
            .iter()
            .map(|v| decode_or_panic(T::STATE_CODEC, name, v))
            .collect()
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
        store
            .map(name, key.as_ref())
            .iter()
            .map(|(k, v)| {
                (
                    decode_or_panic(T::STATE_CODEC, name, k),
                    decode_or_panic(T::STATE_CODEC, name, v),
                )
            })
            .collect()
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
        self.store.borrow().timers(domain, key)
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
        self.store.borrow().logs().to_vec()
    }

    /// Host calls made so far; the counters start over.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn take_calls(&self) -> HostCalls {
        self.store.borrow_mut().take_calls()
    }
}

/// Runs `call` on the instance and, if it succeeds, has the instance write back what its
/// value states keep from batch to batch, as the host does before every checkpoint: what
/// the harness holds is then all the operator wrote.
fn written_back<T: Operator>(
    instance: &mut Instance<T>,
    call: impl FnOnce(&mut Instance<T>) -> Result<()>,
) -> Result<()> {
    call(instance)?;
    instance.process(&WRITE_BACK)
}

fn decode_or_panic<V: DeserializeOwned>(codec: Codec, name: &str, bytes: &[u8]) -> V {
    match crate::state::codec::decode(codec, bytes) {
        Ok(v) => v,
        Err(e) => panic!("state \"{name}\" does not decode as the requested type: {e}"),
    }
}

/// Runs `f` with a [`Context`] that has no current key (for doc examples).
#[doc(hidden)]
pub fn doc_context<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    let core = RefCell::new(Core::new(
        Box::new(MemoryBackend::default()),
        Codec::default(),
        DEFAULT_STATE_CACHE_BYTES,
    ));
    let mut ctx = Context::new(&core, &[]);
    f(&mut ctx)
}

/// Runs `f` with the [`OpenContext`] a default [`Harness`] opens with (for doc examples).
#[doc(hidden)]
pub fn doc_open_context<R>(f: impl FnOnce(&mut OpenContext<'_>) -> R) -> R {
    let core = RefCell::new(Core::new(
        Box::new(MemoryBackend::default()),
        Codec::default(),
        DEFAULT_STATE_CACHE_BYTES,
    ));
    let info = default_info();
    let mut ctx = OpenContext::new(&info, &core);
    f(&mut ctx)
}
