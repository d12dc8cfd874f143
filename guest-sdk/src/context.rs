//! `Context`: what `process`, `on_timer` and `close` reach — keyed state, output, timers,
//! time and the log.

use std::cell::{RefCell, RefMut};
use std::fmt::{self, Write as _};

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_wire::{Kind, RecordRef, TimeDomain, TimerOp};

use crate::backend::StateKind;
use crate::runtime::{Core, borrow_core};
use crate::state::{Access, StateEntry, StateHandle, StateId, declare};
use crate::{
    Codec, Error, Level, ListState, MapState, OperatorListState, OperatorState, Redistribution,
    Result, Ttl, ValueState,
};

/// The operator's view of the runtime while it handles a record or a timer.
///
/// State handles ([`value_state`](Self::value_state) and friends) are of the current key: the
/// key of the record being processed, or of the timer that fired. Output buffers in the guest
/// and leaves in one host call per 64 KiB; everything else also crosses the boundary once per
/// batch.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct Echo;
///
/// impl Operator for Echo {
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         ctx.emit(rec.key(), rec.value())
///     }
/// }
/// # let mut h = weir_sdk::testing::Harness::<Echo>::new();
/// # assert_eq!(h.process([("k", "v")])[0].value_str(), "v");
/// ```
pub struct Context<'a> {
    core: &'a RefCell<Core>,
    keys: &'a [&'a [u8]],
    pub(crate) slot: Option<u32>,
    pub(crate) timestamp: Option<i64>,
    /// The buffer of this call, the batch or the fired timers (empty in `close`): keys and
    /// values emitted from it are copied with fixed-size moves (`OutputWriter::push_within`).
    pub(crate) input: &'a [u8],
    /// The codec of states declared now, when [`Context::with_codec`] overrides the
    /// operator's.
    codec: std::cell::Cell<Option<Codec>>,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("current_key", &self.current_key())
            .field("timestamp", &self.timestamp)
            .finish_non_exhaustive()
    }
}

/// Writes `fmt::Write` output into a byte buffer.
struct Bytes<'b>(&'b mut Vec<u8>);

impl fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl<'a> Context<'a> {
    pub(crate) fn new(core: &'a RefCell<Core>, keys: &'a [&'a [u8]]) -> Self {
        Context {
            core,
            keys,
            slot: None,
            timestamp: None,
            input: &[],
            codec: std::cell::Cell::new(None),
        }
    }

    // The helpers on the per-record path are `#[inline(always)]`: in a guest, a call between
    // wasm functions costs more than their bodies, and LLVM's inliner does not know it. Forcing
    // them inline cut the word-count guest's instructions per record by a fifth and its time
    // by a third (measured with callgrind and `cargo xtask bench`).
    #[inline(always)]
    fn core(&self) -> Result<RefMut<'a, Core>> {
        borrow_core(self.core)
    }

    /// The key of the record or timer being handled, `None` for a record without key (and in
    /// `close`).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     assert_eq!(ctx.current_key(), rec.key());
    ///     Ok(())
    /// }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process([("k", "v")]);
    /// ```
    pub fn current_key(&self) -> Option<&'a [u8]> {
        self.slot.and_then(|s| self.keys.get(s as usize).copied())
    }

    // ----------------------------------------------------------------------------------------
    // State

    #[inline(always)]
    fn state_id(&self, name: &str, kind: StateKind, ttl: Option<Ttl>) -> StateId {
        // Every record after the first: a state already declared the same way.
        if let Ok(core) = self.core.try_borrow() {
            let codec = self.codec.get().unwrap_or(core.codec);
            let same = |s: &StateEntry| s.is(name, kind, ttl, codec);
            // An operator uses its states in the same order for every record: the state
            // after the last one looked up is tried first, the others scanned for.
            let next = core.next_state.get();
            let found = match core.states.get(next) {
                Some(s) if same(s) => Some(next),
                _ => core.states.iter().position(same),
            };
            if let Some(i) = found {
                core.next_state.set(i + 1);
                return StateId(Ok(i));
            }
        }
        StateId(declare(self.core, name, kind, ttl, self.codec.get()))
    }

    /// Runs `f` with states declared in it encoded with `codec` rather than the operator's
    /// [`STATE_CODEC`](crate::Operator::STATE_CODEC). To move a state to another codec (say,
    /// state written by weir-sdk before 0.2, in postcard, to CBOR so that a Python rewrite of
    /// the operator can read it), read it under its old codec and write it under a new name:
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let old = ctx.with_codec(Codec::Postcard, |ctx| ctx.value_state::<u64>("count"));
    ///     let count = ctx.value_state::<u64>("count-v2");
    ///     let mut n = count.get()?.unwrap_or(0);
    ///     if let Some(before) = old.get()? {
    ///         n += before;
    ///         old.clear()?;
    ///     }
    ///     count.set(&(n + 1))?;
    ///     ctx.emit_display(rec.key(), n + 1)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("k", "x"), ("k", "y")])[1].value_str(), "2");
    /// ```
    pub fn with_codec<'s, R>(&'s self, codec: Codec, f: impl FnOnce(&'s Self) -> R) -> R {
        let before = self.codec.replace(Some(codec));
        let result = f(self);
        self.codec.set(before);
        result
    }

    /// The state of the current key that `handle` names, declared in
    /// [`Operator::open`](crate::Operator::open): as [`value_state`](Self::value_state) and
    /// its kin, without looking the state up by its name on every use: in the word count's
    /// counter, 66 of the 737 instructions it ran per record.
    ///
    /// ```
    /// use weir_sdk::prelude::*;
    ///
    /// #[derive(Default)]
    /// struct Count {
    ///     count: ValueStateHandle<u64>,
    ///     seen: MapStateHandle<String, u32>,
    /// }
    ///
    /// impl Operator for Count {
    ///     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
    ///         self.count = ctx.value_state("count")?;
    ///         self.seen = ctx.map_state("seen")?;
    ///         Ok(())
    ///     }
    ///
    ///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///         let count = ctx.state(&self.count);
    ///         let n = count.get()?.unwrap_or(0) + 1;
    ///         count.set(&n)?;
    ///         let seen = ctx.state(&self.seen);
    ///         let times = seen.get(rec.value_str()?)?.unwrap_or(0) + 1;
    ///         seen.put(rec.value_str()?, &times)?;
    ///         ctx.emit_display(rec.key(), format_args!("{n} {times}"))
    ///     }
    /// }
    /// # let mut h = weir_sdk::testing::Harness::<Count>::new();
    /// # let out = h.process([("k", "a"), ("k", "a"), ("k", "b")]);
    /// # let values: Vec<_> = out.iter().map(|o| o.value_str()).collect();
    /// # assert_eq!(values, ["1 1", "2 2", "3 1"]);
    /// ```
    #[inline(always)]
    pub fn state<'c, H: StateHandle>(&'c self, handle: &H) -> H::State<'c> {
        handle.bind(self)
    }

    /// Runs `f` on state `id` at the current key slot.
    #[inline(always)]
    pub(crate) fn with_state<R>(
        &self,
        id: &StateId,
        f: impl FnOnce(&mut Access<'_>) -> Result<R>,
    ) -> Result<R> {
        let index = id.0.as_ref().map_err(Error::msg)?;
        let mut core = self.core()?;
        let Core {
            backend,
            states,
            epoch,
            key_ids,
            ..
        } = &mut *core;
        // An index of this instance's states: handles are made by its own `open` or by name.
        let entry = &mut states[*index];
        let mut access = Access::new(entry, *epoch, self.slot, &mut **backend, self.keys, key_ids)?;
        f(&mut access)
    }

    /// The non-keyed [`OperatorState`] called `name`, of this subtask.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let last = ctx.operator_state::<String>("last");
    ///     let previous = last.get()?;
    ///     last.set(&rec.value_str()?.to_owned())?;
    ///     ctx.emit(rec.key(), previous.unwrap_or_default())
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("k", "a"), ("k", "b")])[1].value_str(), "a");
    /// ```
    pub fn operator_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> OperatorState<'_, T> {
        OperatorState::new(self.core, name)
    }

    /// The non-keyed [`OperatorListState`] called `name`, of this subtask, split over the new
    /// subtasks on a rescale ([`Redistribution::Split`]).
    pub fn operator_list_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> OperatorListState<'_, T> {
        OperatorListState::new(self.core, name, Redistribution::Split)
    }

    /// The non-keyed [`OperatorListState`] called `name`, of this subtask, whose elements
    /// every subtask gets on a rescale ([`Redistribution::Union`]).
    pub fn union_list_state<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
    ) -> OperatorListState<'_, T> {
        OperatorListState::new(self.core, name, Redistribution::Union)
    }

    /// The [`ValueState`] called `name`, of the current key.
    ///
    /// A state is declared with the host the first time it is used and looked up by name
    /// afterwards; using one name for two kinds of state is an error. A state declared once
    /// in [`Operator::open`](crate::Operator::open) is not looked up: see [`state`](Self::state).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let count = ctx.value_state::<u64>("count");
    ///     let n = count.get()?.unwrap_or(0) + 1;
    ///     count.set(&n)?;
    ///     ctx.emit_display(rec.key(), n)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # assert_eq!(h.process([("a", ""), ("a", "")])[1].value_str(), "2");
    /// ```
    pub fn value_state<T: Serialize + DeserializeOwned>(&self, name: &str) -> ValueState<'_, T> {
        ValueState::new(self, self.state_id(name, StateKind::Value, None))
    }

    /// [`value_state`](Self::value_state) with a time-to-live (enforced by the host).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let ttl = Ttl::new(std::time::Duration::from_secs(3600));
    ///     ctx.value_state_with_ttl::<String>("session", ttl).set(rec.value_str()?)
    /// }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process([("a", "s1")]);
    /// ```
    pub fn value_state_with_ttl<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        ttl: Ttl,
    ) -> ValueState<'_, T> {
        ValueState::new(self, self.state_id(name, StateKind::Value, Some(ttl)))
    }

    /// The [`ListState`] called `name`, of the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.list_state::<i64>("times").add(&rec.timestamp().unwrap_or(0))
    /// }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process([("a", "")]);
    /// ```
    pub fn list_state<T: Serialize + DeserializeOwned>(&self, name: &str) -> ListState<'_, T> {
        ListState::new(self, self.state_id(name, StateKind::List, None))
    }

    /// [`list_state`](Self::list_state) with a time-to-live (enforced by the host).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let ttl = Ttl::new(std::time::Duration::from_secs(60)).update_ttl_on_read_and_write();
    ///     ctx.list_state_with_ttl::<String>("recent", ttl).add(rec.value_str()?)
    /// }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process([("a", "x")]);
    /// ```
    pub fn list_state_with_ttl<T: Serialize + DeserializeOwned>(
        &self,
        name: &str,
        ttl: Ttl,
    ) -> ListState<'_, T> {
        ListState::new(self, self.state_id(name, StateKind::List, Some(ttl)))
    }

    /// The [`MapState`] called `name`, of the current key.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.map_state::<String, i64>("last-seen").put(rec.value_str()?, &rec.timestamp().unwrap_or(0))
    /// }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process([("a", "x")]);
    /// ```
    pub fn map_state<K, V>(&self, name: &str) -> MapState<'_, K, V>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        MapState::new(self, self.state_id(name, StateKind::Map, None))
    }

    /// [`map_state`](Self::map_state) with a time-to-live (enforced by the host).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let ttl = Ttl::new(std::time::Duration::from_secs(86_400));
    ///     ctx.map_state_with_ttl::<String, u32>("daily", ttl).put(rec.value_str()?, &1)
    /// }
    /// # }
    /// # weir_sdk::testing::Harness::<Op>::new().process([("a", "x")]);
    /// ```
    pub fn map_state_with_ttl<K, V>(&self, name: &str, ttl: Ttl) -> MapState<'_, K, V>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        MapState::new(self, self.state_id(name, StateKind::Map, Some(ttl)))
    }

    // ----------------------------------------------------------------------------------------
    // Output

    #[inline(always)]
    fn push(
        &self,
        side_output: Option<&str>,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        value: &[u8],
    ) -> Result<()> {
        let mut core = self.core()?;
        let rec = RecordRef {
            kind,
            key,
            timestamp,
            value,
        };
        core.output.push_within(side_output, &rec, self.input);
        core.flush_output_if_full();
        Ok(())
    }

    fn push_display(
        &self,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        value: &dyn fmt::Display,
    ) -> Result<()> {
        let mut core = self.core()?;
        let mut written = Ok(());
        core.output.push_with(None, kind, key, timestamp, |buf| {
            written = write!(Bytes(buf), "{value}");
        });
        core.flush_output_if_full();
        written.map_err(|e| Error::new(e).context("emit_display: the value's Display failed"))
    }

    /// Emits an [`Insert`](Kind::Insert) record to the main output. It carries the current
    /// record's timestamp (an event-time timer's time in `on_timer`), as Flink does.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.emit(Some(b"all"), rec.value())
    /// }
    /// # }
    /// # let out = weir_sdk::testing::Harness::<Op>::new().process(["v"]);
    /// # assert_eq!(out[0].key_str(), Some("all"));
    /// ```
    pub fn emit(&self, key: Option<&[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.push(None, Kind::Insert, key, self.timestamp, value.as_ref())
    }

    /// Emits an [`Insert`](Kind::Insert) record whose value is `value` formatted with
    /// `Display` into a buffer the context keeps (no `String` per record).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.emit_display(rec.key(), format_args!("{} bytes", rec.value().len()))
    /// }
    /// # }
    /// # let out = weir_sdk::testing::Harness::<Op>::new().process(["abc"]);
    /// # assert_eq!(out[0].value_str(), "3 bytes");
    /// ```
    pub fn emit_display(&self, key: Option<&[u8]>, value: impl fmt::Display) -> Result<()> {
        self.push_display(Kind::Insert, key, self.timestamp, &value)
    }

    /// Emits a record with an explicit changelog kind and timestamp.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.emit_record(Kind::Delete, rec.key(), Some(0), rec.value())
    /// }
    /// # }
    /// # let out = weir_sdk::testing::Harness::<Op>::new().process(["x"]);
    /// # assert_eq!((out[0].kind, out[0].timestamp), (Kind::Delete, Some(0)));
    /// ```
    pub fn emit_record(
        &self,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.push(None, kind, key, timestamp, value.as_ref())
    }

    /// [`emit_record`](Self::emit_record) with a `Display` value, as
    /// [`emit_display`](Self::emit_display).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.emit_record_display(Kind::UpdateAfter, rec.key(), rec.timestamp(), 42)
    /// }
    /// # }
    /// # let out = weir_sdk::testing::Harness::<Op>::new().process(["x"]);
    /// # assert_eq!((out[0].kind, out[0].value_str()), (Kind::UpdateAfter, "42"));
    /// ```
    pub fn emit_record_display(
        &self,
        kind: Kind,
        key: Option<&[u8]>,
        timestamp: Option<i64>,
        value: impl fmt::Display,
    ) -> Result<()> {
        self.push_display(kind, key, timestamp, &value)
    }

    /// Emits an [`Insert`](Kind::Insert) record to the side output `side_output` (e.g. late
    /// or malformed records); the job spec routes side outputs by name.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     match rec.value_str() {
    ///         Ok(text) => ctx.emit(rec.key(), text),
    ///         Err(_) => ctx.emit_to("not-utf8", rec.key(), rec.value()),
    ///     }
    /// }
    /// # }
    /// # let out = weir_sdk::testing::Harness::<Op>::new().process([weir_sdk::testing::Input::new(vec![0xff])]);
    /// # assert_eq!(out[0].side_output.as_deref(), Some("not-utf8"));
    /// ```
    pub fn emit_to(
        &self,
        side_output: &str,
        key: Option<&[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.push(
            Some(side_output),
            Kind::Insert,
            key,
            self.timestamp,
            value.as_ref(),
        )
    }

    // ----------------------------------------------------------------------------------------
    // Timers and time

    fn timer(&self, register: bool, domain: TimeDomain, timestamp: i64) -> Result<()> {
        let Some(slot) = self.slot else {
            return Err(Error::msg(
                "timers are keyed, but the current record has no key; key the stream (key_by) \
                 before this operator",
            ));
        };
        let op = TimerOp {
            register,
            domain,
            slot,
            timestamp,
        };
        self.core()?.timer(op, self.keys.len());
        Ok(())
    }

    /// Registers an event-time timer for the current key: [`Operator::on_timer`](crate::Operator::on_timer)
    /// runs once the watermark reaches `timestamp`. Registering the same time twice fires once.
    ///
    /// The host fires event-time timers in timestamp order as the task's watermark passes
    /// them (watermarks come from a `watermark` strategy on a source or an operator upstream;
    /// without one they fire when the input ends, where the watermark jumps to the end of
    /// time). Timers are part of the checkpoint: after a restore those not fired yet fire
    /// once. The test harness fires them when a test advances its watermark
    /// ([`Harness::fire_event_timers_up_to`](crate::testing::Harness::fire_event_timers_up_to)).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let ts = rec.timestamp().ok_or("records need event time")?;
    ///     ctx.register_event_timer(ts - ts % 60_000 + 60_000) // end of the minute
    /// }
    /// fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
    ///     ctx.emit_display(Some(timer.key()), timer.timestamp())
    /// }
    /// # }
    /// # use weir_sdk::testing::{Harness, Input};
    /// # let mut h = Harness::<Op>::new();
    /// # h.process([Input::keyed("k", "").with_timestamp(61_000)]);
    /// # assert_eq!(h.fire_event_timers_up_to(120_000)[0].value_str(), "120000");
    /// ```
    pub fn register_event_timer(&self, timestamp: i64) -> Result<()> {
        self.timer(true, TimeDomain::EventTime, timestamp)
    }

    /// Deletes the current key's event-time timer at `timestamp`, if any.
    ///
    /// "Delete my previous timer, register a new one" per record is cheap: both are noted in
    /// the SDK, a change of a timer that one of the key's last eight changes in the batch
    /// names takes that change's place (so one change per timer reaches the host, not two
    /// per record), the batch's timer changes go in one call, and the host finds a timer by
    /// hash and orders timers in a heap that a delete does not search (deleted timers leave
    /// the heap later, in bulk). Measured in the host (`cargo xtask bench-state`, 2M records
    /// over 10k keys): about 95 ns per record for the delete and the register, against about
    /// 45 ns for a value-state write; over 1M keys, where every access misses the CPU caches,
    /// about 650 against 200. On the account scorer, which does it for every record (`cargo
    /// xtask bench-operators --callgrind`), timers are about 820 instructions per record (220
    /// in the SDK, 620 in the host, firing included) of its 15,300. With RocksDB state the
    /// host keeps the earliest timers in memory (`[state] timer_cache`, 65,536 per time
    /// domain) at the same cost; beyond, a timer is a RocksDB row, and registering or
    /// deleting one costs less than a value-state write to RocksDB (1M keys: about 3.2 µs
    /// for the pair, against 5.2 µs for the write).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let deadline = ctx.value_state::<i64>("deadline");
    ///     if let Some(old) = deadline.get()? {
    ///         ctx.delete_event_timer(old)?;
    ///     }
    ///     let new = rec.timestamp().unwrap_or(0) + 30_000;
    ///     deadline.set(&new)?;
    ///     ctx.register_event_timer(new)
    /// }
    /// # }
    /// # use weir_sdk::testing::{Harness, Input};
    /// # let mut h = Harness::<Op>::new();
    /// # h.process([Input::keyed("k", "").with_timestamp(0), Input::keyed("k", "").with_timestamp(10)]);
    /// # assert_eq!(h.event_timers("k"), [30_010]);
    /// ```
    pub fn delete_event_timer(&self, timestamp: i64) -> Result<()> {
        self.timer(false, TimeDomain::EventTime, timestamp)
    }

    /// Registers a processing-time timer for the current key (milliseconds since the Unix
    /// epoch on the host's clock).
    ///
    /// The host fires it once its clock reaches `timestamp`, whether records arrive or not,
    /// and keeps it in checkpoints (after a restore, one that came due while the job was down
    /// fires at once). Those pending when the input ends do not fire, as in Flink. The test
    /// harness fires them when a test advances its clock
    /// ([`Harness::set_processing_time`](crate::testing::Harness::set_processing_time)).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, _rec: Record<'_>) -> Result<()> {
    ///     ctx.register_processing_time_timer(ctx.current_processing_time() + 5_000)
    /// }
    /// fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
    ///     ctx.emit(Some(timer.key()), "idle")
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("k", "")]);
    /// # assert_eq!(h.set_processing_time(5_000).len(), 1);
    /// ```
    pub fn register_processing_time_timer(&self, timestamp: i64) -> Result<()> {
        self.timer(true, TimeDomain::ProcessingTime, timestamp)
    }

    /// Deletes the current key's processing-time timer at `timestamp`, if any.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, _rec: Record<'_>) -> Result<()> {
    ///     ctx.register_processing_time_timer(1_000)?;
    ///     ctx.delete_processing_time_timer(1_000)
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process([("k", "")]);
    /// # assert!(h.set_processing_time(5_000).is_empty());
    /// ```
    pub fn delete_processing_time_timer(&self, timestamp: i64) -> Result<()> {
        self.timer(false, TimeDomain::ProcessingTime, timestamp)
    }

    /// The task's current event-time watermark, `None` before the first one arrived.
    ///
    /// From the host: the least of the watermarks of the task's inputs (see the README's
    /// "Event time"), `None` in a job without watermarks until the input ends, where it
    /// becomes the end of time (`i64::MAX`) to fire the event-time timers left.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     let late = match (rec.timestamp(), ctx.current_watermark()) {
    ///         (Some(ts), Some(wm)) => ts <= wm,
    ///         _ => false,
    ///     };
    ///     if late {
    ///         return ctx.emit_to("late", rec.key(), rec.value());
    ///     }
    ///     ctx.emit(rec.key(), rec.value())
    /// }
    /// # }
    /// # use weir_sdk::testing::{Harness, Input};
    /// # let mut h = Harness::<Op>::new();
    /// # h.fire_event_timers_up_to(100);
    /// # let out = h.process([Input::new("x").with_timestamp(50)]);
    /// # assert_eq!(out[0].side_output.as_deref(), Some("late"));
    /// ```
    pub fn current_watermark(&self) -> Option<i64> {
        self.core().ok()?.backend.current_watermark()
    }

    /// The host's processing time, milliseconds since the Unix epoch.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.emit_display(rec.key(), ctx.current_processing_time())
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.set_processing_time(7);
    /// # assert_eq!(h.process(["x"])[0].value_str(), "7");
    /// ```
    pub fn current_processing_time(&self) -> i64 {
        self.core()
            .map(|mut c| c.backend.current_processing_time())
            .unwrap_or_default()
    }

    // ----------------------------------------------------------------------------------------
    // Log

    /// Sends a line to the operator's log on the host (tagged with job and operator there).
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # #[derive(Default)] struct Op;
    /// # impl Operator for Op {
    /// fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    ///     ctx.log(Level::Debug, format_args!("got {} bytes", rec.value().len()));
    ///     Ok(())
    /// }
    /// # }
    /// # let mut h = weir_sdk::testing::Harness::<Op>::new();
    /// # h.process(["abc"]);
    /// # assert_eq!(h.logs(), [(Level::Debug, "got 3 bytes".to_string())]);
    /// ```
    pub fn log(&self, level: Level, message: impl fmt::Display) {
        log_to(self.core, level, &message);
    }

    /// [`log`](Self::log) at [`Level::Trace`].
    ///
    /// ```
    /// # weir_sdk::testing::doc_context(|ctx| {
    /// ctx.trace("entering the slow path");
    /// # });
    /// ```
    pub fn trace(&self, message: impl fmt::Display) {
        self.log(Level::Trace, message);
    }

    /// [`log`](Self::log) at [`Level::Debug`].
    ///
    /// ```
    /// # weir_sdk::testing::doc_context(|ctx| {
    /// ctx.debug(format_args!("cache size {}", 12));
    /// # });
    /// ```
    pub fn debug(&self, message: impl fmt::Display) {
        self.log(Level::Debug, message);
    }

    /// [`log`](Self::log) at [`Level::Info`].
    ///
    /// ```
    /// # weir_sdk::testing::doc_context(|ctx| {
    /// ctx.info("model reloaded");
    /// # });
    /// ```
    pub fn info(&self, message: impl fmt::Display) {
        self.log(Level::Info, message);
    }

    /// [`log`](Self::log) at [`Level::Warn`].
    ///
    /// ```
    /// # weir_sdk::testing::doc_context(|ctx| {
    /// ctx.warn(format_args!("dropped a malformed line: {:?}", "x y z"));
    /// # });
    /// ```
    pub fn warn(&self, message: impl fmt::Display) {
        self.log(Level::Warn, message);
    }

    /// [`log`](Self::log) at [`Level::Error`].
    ///
    /// ```
    /// # weir_sdk::testing::doc_context(|ctx| {
    /// ctx.error("lookup table is empty");
    /// # });
    /// ```
    pub fn error(&self, message: impl fmt::Display) {
        self.log(Level::Error, message);
    }
}

/// Formats and sends one log line; a re-entrant use (from inside a `Display` the runtime is
/// running) is dropped rather than failing the operator.
pub(crate) fn log_to(core: &RefCell<Core>, level: Level, message: &dyn fmt::Display) {
    let text = message.to_string();
    if let Ok(mut core) = core.try_borrow_mut() {
        core.backend.log(level, &text);
    }
}
