//! The `Operator` trait an author implements, and what `open` gets.

use std::cell::RefCell;
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::backend::StateKind;
use crate::context::log_to;
use crate::runtime::{Core, OpenInfo};
use crate::{
    Context, Error, Level, ListStateHandle, MapStateHandle, OperatorListState, OperatorState,
    Record, Redistribution, Result, Timer, Ttl, ValueStateHandle,
};

/// A stream operator: one required method, [`process`](Self::process); the other hooks do
/// nothing by default.
///
/// The host creates one instance per parallel subtask (with `Default`, through
/// [`export!`](crate::export)), calls [`open`](Self::open) once, then
/// [`process`](Self::process) for each record of each batch (then
/// [`finish_batch`](Self::finish_batch)) and
/// [`on_timer`](Self::on_timer) for each timer that fires, and [`close`](Self::close) when
/// the input has ended. Keep anything that must survive a failure in keyed state: an instance
/// (and its fields) is dropped on failure, and on rescaling keys move to other instances.
///
/// An `Err` from a hook fails the task; the host reports it with the operator and the record
/// and restarts the job from its last checkpoint.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct Upper {
///     prefix: String,
/// }
///
/// #[derive(serde::Deserialize)]
/// struct Config {
///     prefix: String,
/// }
///
/// impl Operator for Upper {
///     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
///         self.prefix = ctx.config::<Config>()?.prefix;
///         Ok(())
///     }
///
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         let text = rec.value_str()?.to_uppercase();
///         ctx.emit_display(rec.key(), format_args!("{}{text}", self.prefix))
///     }
/// }
///
/// let mut h = weir_sdk::testing::Harness::<Upper>::new().with_config(r#"{"prefix": "> "}"#);
/// assert_eq!(h.process(["hi"])[0].value_str(), "> HI");
/// ```
pub trait Operator {
    /// How this operator's state values are encoded: CBOR, shared with the Python and
    /// JavaScript SDKs, unless the operator keeps state written by weir-sdk before 0.2 and
    /// sets [`Codec::Postcard`](crate::Codec::Postcard):
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Legacy;
    /// impl Operator for Legacy {
    ///     const STATE_CODEC: Codec = Codec::Postcard;
    ///     // ...
    /// #   fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) }
    /// }
    /// ```
    const STATE_CODEC: crate::Codec = crate::Codec::Cbor;

    /// How much of each value state (without a TTL) the instance keeps in its memory from
    /// batch to batch when the host's state is not in memory (RocksDB): 8 MiB by default. A
    /// batch then asks the host only for the values of keys it does not keep, and the
    /// changes go back to the host before each checkpoint or when the cache is over this
    /// budget (it then starts empty), not after every batch: the word count on RocksDB state
    /// runs a fifth to a third faster. With state in memory the host's answers cost no more
    /// than the cache's own lookups, so it keeps nothing there. Lower it for an operator with
    /// a small `limits.memory` and many value states; 0 loads and stores every batch's
    /// values.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Small;
    /// impl Operator for Small {
    ///     const STATE_CACHE_BYTES: usize = 1 << 20;
    ///     // ...
    /// #   fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) }
    /// }
    /// ```
    const STATE_CACHE_BYTES: usize = DEFAULT_STATE_CACHE_BYTES;

    /// Called once per instance before anything else: read the config here.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op { shard: u32 }
    /// # impl Operator for Op {
    /// fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
    ///     self.shard = ctx.subtask_index();
    ///     ctx.log(Level::Info, format_args!("shard {} of {}", ctx.subtask_index(), ctx.parallelism()));
    ///     Ok(())
    /// }
    /// # fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process(["x"]);
    /// ```
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Handles one record. State reached through `ctx` is of the record's key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     if !rec.value().is_empty() {
    ///         ctx.emit(rec.key(), rec.value())?;
    ///     }
    ///     Ok(())
    /// }
    /// # }
    /// # assert_eq!(weir_sdk::testing::Harness::<Op>::new().process(["", "x"]).len(), 1);
    /// ```
    fn process(&mut self, ctx: &mut Context<'_>, record: Record<'_>) -> Result<()>;

    /// What an error (`panic` false) or a panic in [`process`](Self::process) names as what
    /// the operator was handling: by default the record's index in the batch and its key,
    /// for a panic its value too ("at record 3 of the batch: key "a", value "x""); the
    /// window functions' operators name the window instead.
    #[doc(hidden)]
    fn describe_input(index: u32, key: Option<&[u8]>, value: &[u8], panic: bool) -> String
    where
        Self: Sized,
    {
        let key = crate::runtime::describe_key(key);
        if panic {
            let value = crate::runtime::describe_text(value);
            format!("at record {index} of the batch: {key}, value {value}")
        } else {
            format!("record {index} of the batch ({key})")
        }
    }

    /// Called after the last record of each batch given to [`process`](Self::process), with
    /// no current key (keyed state and timers are not available; emitting is). Use it to
    /// emit or log what was gathered over the batch, e.g. one warning per batch instead of
    /// one per bad record.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op { bad: u32 }
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     match rec.value_str() {
    ///         Ok(text) => ctx.emit(rec.key(), text),
    ///         Err(_) => Ok(self.bad += 1),
    ///     }
    /// }
    ///
    /// fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
    ///     if self.bad > 0 {
    ///         ctx.warn(format_args!("dropped {} records that are not UTF-8", self.bad));
    ///         self.bad = 0;
    ///     }
    ///     Ok(())
    /// }
    /// # }
    /// # use weir_sdk::testing::Input;
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([Input::new(vec![0xff]), Input::new(vec![0xfe])]);
    /// # assert_eq!(h.logs().len(), 1);
    /// ```
    fn finish_batch(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Handles a timer registered with
    /// [`Context::register_event_timer`](crate::Context::register_event_timer) or
    /// [`Context::register_processing_time_timer`](crate::Context::register_processing_time_timer).
    /// State reached through `ctx` is of the timer's key.
    ///
    /// What the host fires today: event-time timers, at the end of input (there are no
    /// watermarks yet); processing-time timers not at all. The test harness fires both when a
    /// test advances its watermark or its clock.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// # fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    /// #     ctx.list_state::<String>("window").add(rec.value_str()?)?;
    /// #     ctx.register_event_timer(100)
    /// # }
    /// fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
    ///     let window = ctx.list_state::<String>("window");
    ///     ctx.emit(Some(timer.key()), window.get()?.join(" "))?;
    ///     window.clear()
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("k", "a"), ("k", "b")]);
    /// # assert_eq!(h.fire_event_timers_up_to(100)[0].value_str(), "a b");
    /// ```
    fn on_timer(&mut self, ctx: &mut Context<'_>, timer: Timer<'_>) -> Result<()> {
        let _ = (ctx, timer);
        Ok(())
    }

    /// Called once when the input has ended. It may emit, but there is no current key, so
    /// keyed state and timers are not available.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op { seen: u64 }
    /// # impl Operator for Op {
    /// # fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { self.seen += 1; Ok(()) }
    /// fn close(&mut self, ctx: &mut Context) -> Result<()> {
    ///     ctx.emit_display(None, format_args!("this instance saw {} records", self.seen))
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process(["a", "b"]);
    /// # assert_eq!(h.close()[0].value_str(), "this instance saw 2 records");
    /// ```
    fn close(&mut self, ctx: &mut Context<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
}

/// What [`Operator::open`] learns about its instance, and its config.
///
/// ```
/// # use weir_sdk::prelude::*;
/// # #[derive(Default)] struct Op;
/// # impl Operator for Op {
/// fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
///     assert_eq!(ctx.operator_uid(), "test-operator");
///     assert!(ctx.subtask_index() < ctx.parallelism());
///     Ok(())
/// }
/// # fn process(&mut self, _: &mut Context, _: Record<'_>) -> Result<()> { Ok(()) }
/// # }
/// # weir_sdk::testing::Harness::<Op>::new().with_parallelism(4).process(["x"]);
/// ```
pub struct OpenContext<'a> {
    info: &'a OpenInfo,
    core: &'a RefCell<Core>,
}

impl fmt::Debug for OpenContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenContext")
            .field("operator_uid", &self.info.operator_uid)
            .field("subtask_index", &self.info.subtask_index)
            .field("parallelism", &self.info.parallelism)
            .field("config", &self.info.config)
            .finish()
    }
}

impl<'a> OpenContext<'a> {
    pub(crate) fn new(info: &'a OpenInfo, core: &'a RefCell<Core>) -> Self {
        OpenContext { info, core }
    }

    /// The operator's `uid` in the job spec (what ties state to code across upgrades).
    ///
    /// ```
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// assert_eq!(ctx.operator_uid(), "test-operator");
    /// # });
    /// ```
    pub fn operator_uid(&self) -> &str {
        &self.info.operator_uid
    }

    /// Index of this parallel instance, `0 <= subtask_index < parallelism`.
    ///
    /// ```
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// assert_eq!(ctx.subtask_index(), 0);
    /// # });
    /// ```
    pub fn subtask_index(&self) -> u32 {
        self.info.subtask_index
    }

    /// How many parallel instances the operator has.
    ///
    /// ```
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// assert_eq!(ctx.parallelism(), 1);
    /// # });
    /// ```
    pub fn parallelism(&self) -> u32 {
        self.info.parallelism
    }

    /// The operator's `config` table from the job spec, parsed from JSON into `C`; absent
    /// config reads as `{}`, so a `C` whose fields all have `#[serde(default)]` always parses.
    ///
    /// ```
    /// #[derive(serde::Deserialize, Default)]
    /// #[serde(default)]
    /// struct Config {
    ///     lowercase: bool,
    /// }
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// let config: Config = ctx.config()?;
    /// assert!(!config.lowercase);
    /// # Ok::<(), weir_sdk::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn config<C: DeserializeOwned>(&self) -> Result<C> {
        let text = self.config_json();
        serde_json::from_str(text).map_err(|e| {
            Error::new(e).context(format!(
                "operator \"{}\": its config {text} does not fit the operator's config type",
                self.info.operator_uid
            ))
        })
    }

    /// The config as JSON text (`{}` when absent).
    ///
    /// ```
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// assert_eq!(ctx.config_json(), "{}");
    /// # });
    /// ```
    pub fn config_json(&self) -> &str {
        match self.info.config.trim() {
            "" => "{}",
            text => text,
        }
    }

    /// Declares the keyed [`ValueState`](crate::ValueState) called `name`: a handle that
    /// [`Context::state`] binds to the current key in `process` and `on_timer`, without
    /// looking the state up by name as [`Context::value_state`] does. Flink's
    /// `getState(new ValueStateDescriptor<>(name, ...))` in `open`.
    ///
    /// The state is in the operator's [`STATE_CODEC`](Operator::STATE_CODEC) (a state in
    /// another codec is reached by name, with [`Context::with_codec`]). An error if `name` is
    /// declared already as another kind of state, with another TTL or in another codec.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// #[derive(Default)]
    /// struct Op {
    ///     count: ValueStateHandle<u64>,
    /// }
    ///
    /// impl Operator for Op {
    ///     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
    ///         self.count = ctx.value_state("count")?;
    ///         Ok(())
    ///     }
    ///
    ///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///         let count = ctx.state(&self.count);
    ///         count.set(&(count.get()?.unwrap_or(0) + 1))
    ///     }
    /// }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("k", ""), ("k", "")]);
    /// # assert_eq!(h.value_state::<u64>("count", "k"), Some(2));
    /// ```
    pub fn value_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<ValueStateHandle<T>> {
        self.declare(name, StateKind::Value, None)
            .map(ValueStateHandle::new)
    }

    /// [`value_state`](Self::value_state) with a time-to-live (enforced by the host).
    pub fn value_state_with_ttl<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        ttl: Ttl,
    ) -> Result<ValueStateHandle<T>> {
        self.declare(name, StateKind::Value, Some(ttl))
            .map(ValueStateHandle::new)
    }

    /// Declares the keyed [`ListState`](crate::ListState) called `name`, as
    /// [`value_state`](Self::value_state).
    pub fn list_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<ListStateHandle<T>> {
        self.declare(name, StateKind::List, None)
            .map(ListStateHandle::new)
    }

    /// [`list_state`](Self::list_state) with a time-to-live (enforced by the host).
    pub fn list_state_with_ttl<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        ttl: Ttl,
    ) -> Result<ListStateHandle<T>> {
        self.declare(name, StateKind::List, Some(ttl))
            .map(ListStateHandle::new)
    }

    /// Declares the keyed [`MapState`](crate::MapState) called `name`, as
    /// [`value_state`](Self::value_state).
    pub fn map_state<K, V>(&self, name: &str) -> Result<MapStateHandle<K, V>>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        self.declare(name, StateKind::Map, None)
            .map(MapStateHandle::new)
    }

    /// [`map_state`](Self::map_state) with a time-to-live (enforced by the host).
    pub fn map_state_with_ttl<K, V>(&self, name: &str, ttl: Ttl) -> Result<MapStateHandle<K, V>>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        self.declare(name, StateKind::Map, Some(ttl))
            .map(MapStateHandle::new)
    }

    fn declare(&self, name: &str, kind: StateKind, ttl: Option<Ttl>) -> Result<usize> {
        crate::state::declare(self.core, name, kind, ttl, None).map_err(Error::msg)
    }

    /// The non-keyed [`OperatorState`] called `name`, as [`Context::operator_state`]: in
    /// `open` it holds what the subtask had at the checkpoint the job restored from.
    ///
    /// ```
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// let seen = ctx.operator_state::<u64>("seen").get()?.unwrap_or(0);
    /// assert_eq!(seen, 0);
    /// # Ok::<(), weir_sdk::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn operator_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> OperatorState<'a, T> {
        OperatorState::new(self.core, name)
    }

    /// The split [`OperatorListState`] called `name`, as [`Context::operator_list_state`]:
    /// in `open` it holds this subtask's share of what the job restored.
    pub fn operator_list_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> OperatorListState<'a, T> {
        OperatorListState::new(self.core, name, Redistribution::Split)
    }

    /// The union [`OperatorListState`] called `name`, as [`Context::union_list_state`]: in
    /// `open` it holds every element of every subtask the job restored from.
    pub fn union_list_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> OperatorListState<'a, T> {
        OperatorListState::new(self.core, name, Redistribution::Union)
    }

    /// Sends a line to the operator's log, as [`Context::log`].
    ///
    /// ```
    /// # weir_sdk::testing::doc_open_context(|ctx| {
    /// ctx.log(weir_sdk::Level::Info, "opened");
    /// # });
    /// ```
    pub fn log(&self, level: Level, message: impl fmt::Display) {
        log_to(self.core, level, &message);
    }
}

/// The default of [`Operator::STATE_CACHE_BYTES`].
pub(crate) const DEFAULT_STATE_CACHE_BYTES: usize = 8 << 20;
