//! Windows in the host: keyed tumbling, sliding and session event-time windows with a built-in
//! aggregate or a guest's window function, allowed lateness and a side output for records
//! later than that, as Flink's `window(...).allowedLateness(...).sideOutputLateData(...)
//! .aggregate(...)`, so that a simple window needs no component.
//!
//! Each key's open windows are a map state (window start → end and accumulator) in the job's state
//! backend, read and written once per batch for the batch's keys, and its timers are in the
//! checkpoint with it, so RocksDB, checkpoints, restores and rescaling work as for any
//! operator. A window fires when the watermark passes its last millisecond (an event-time
//! timer there) and is dropped once the watermark passes that plus the allowed lateness (a
//! second timer); records that come in between update it and fire it again.
//!
//! A result is `<start>,<end>,<value>` (`end` exclusive, milliseconds) with the window's key
//! and its last millisecond as timestamp: an insert when the window fires, an update-after
//! for each batch of late records that changed it.
//!
//! A guest's function (`wasm` beside `window`, see `weir_sdk::window`) is called per batch,
//! with window calls (`weir_wire::WindowCall`) as records: an aggregate's accumulator is
//! opaque bytes the window keeps, updated once per batch for every window the batch touched
//! and asked for its result when the window fires. A process-window function's records wait
//! in a list state of their key (see `timed`) until the last window holding them is dropped.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_wire::{
    Kind, MapOp, Reader, TimeDomain, Window, put_bytes, put_map_op, put_process, put_result,
    put_update, read_window_call,
};

use super::timed::{self, Appends, Waiting};
use super::{failed, keyed_slots, restore_state, snapshot_state};
use crate::batch::Batch;
use crate::operator::{InstanceUsage, Operator, OperatorContext, OperatorError, Snapshot};
use crate::state::{KeyedState, Slots, StateId, StateKind, StateSetup};
use crate::wasm::{OperatorComponent, WasmOperator};

/// `window = { ... }` of an operator: a keyed window over event time.
///
/// ```toml
/// window = { type = "sliding", size = "10m", slide = "1m", aggregate = "sum",
///            allowed_lateness = "30s", late = "late" }
/// window = { type = "session", gap = "30m", aggregate = "count" }
/// ```
///
/// A session holds a key's records no more than `gap` apart, `[first, last + gap)`; a
/// record that overlaps or touches several sessions merges them (their timers are replaced
/// by the merged session's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    /// `tumbling`, `sliding` or `session`.
    #[serde(rename = "type")]
    pub kind: WindowKind,
    /// The length of a window (tumbling and sliding windows).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub size: Option<Duration>,
    /// How far apart sliding windows start (sliding windows only).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub slide: Option<Duration>,
    /// The gap that ends a session: a key's records closer than this to each other are in
    /// one session window (session windows only).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub gap: Option<Duration>,
    /// Shifts the windows' starts from multiples of the size (or slide) since the epoch.
    #[serde(default, with = "humantime_serde")]
    pub offset: Duration,
    /// How long after a window fired records may still update it (default 0).
    #[serde(default, with = "humantime_serde")]
    pub allowed_lateness: Duration,
    /// What a window computes over its records, with a built-in aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<Aggregate>,
    /// What a window computes over its records with user code, the operator's `wasm`
    /// component (see `weir_sdk::window`): an incremental `aggregate` or a `process`
    /// function over all of a window's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionKind>,
    /// The component of `function`, from the operator's `wasm`, `limits` and `grants`.
    #[serde(skip)]
    pub code: Option<Box<GuestCode>>,
    /// The side output that gets records later than the allowed lateness (default `late`).
    #[serde(default = "default_late")]
    pub late: String,
    /// Whose time places records in windows and fires them: the records' event time (the
    /// default) or the job's clock when a record arrives (`processing`).
    #[serde(default)]
    pub time: WindowTime,
}

/// The time windows are in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowTime {
    /// The records' timestamps; windows fire as the watermark passes their end.
    #[default]
    Event,
    /// The job's clock when a record arrives; windows fire when the clock passes their end,
    /// also with no records flowing. Windows still open when the input ends do not fire (as
    /// processing-time timers, in Flink too).
    Processing,
}

/// A window function in a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    /// An incremental aggregate (`weir_sdk::window::AggregateFunction`): called per batch
    /// with the records that came into each window, and for the result when it fires.
    Aggregate,
    /// A function over all of a window's records (`weir_sdk::window::ProcessWindowFunction`),
    /// called when it fires; the host keeps the records until then.
    Process,
}

/// Which windows a failed call of a window's function was handling, when the guest did not
/// say (the host cannot see which call of the batch the guest was at).
fn describe_calls(calls: &Batch) -> String {
    let Some(first) = calls.iter().next() else {
        return String::new();
    };
    let Ok((what, window, values)) = read_window_call(first.value).map(|c| c.what()) else {
        return String::new();
    };
    let key = first.key.map_or_else(String::new, |k| {
        format!(" of key {}", crate::wasm::describe_bytes(k))
    });
    let (start, end) = (window.start, window.end);
    match calls.len() {
        1 => format!("; it was {what} the window [{start}, {end}){key}{values}"),
        n => format!("; it was {what} {n} windows, the first [{start}, {end}){key}{values}"),
    }
}

/// The component of a window's function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCode {
    /// The component file.
    pub path: std::path::PathBuf,
    /// The limits of each instance.
    pub limits: crate::wasm::Limits,
    /// What it may reach outside its sandbox.
    pub grants: crate::wasm::Grants,
}

fn default_late() -> String {
    "late".into()
}

/// How windows are laid out in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// Windows of `size` one after the other.
    Tumbling,
    /// Windows of `size` starting every `slide`: a record is in `size / slide` of them.
    Sliding,
    /// A window per burst of a key's records, closed by `gap` without records; sessions
    /// that a record brings within the gap of each other merge.
    Session,
}

/// A built-in aggregate. All but `count` read each record's value as a decimal number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// How many records.
    Count,
    /// Their values added up.
    Sum,
    /// The least value.
    Min,
    /// The greatest value.
    Max,
    /// The mean of the values.
    Avg,
}

/// The most windows a record may fall into (`size / slide` of a sliding window).
const MAX_WINDOWS_PER_RECORD: u64 = 1_000;

impl WindowSpec {
    /// Checks the settings; the error names the one at fault.
    pub fn validate(&self) -> Result<(), String> {
        let ms = |d: Duration| d.as_millis();
        let text = |d: Duration| humantime::format_duration(d).to_string();
        let positive = |what: &str, d: Option<Duration>| match d {
            Some(d) if ms(d) > 0 => Ok(d),
            Some(_) => Err(format!("{what} must be at least 1ms")),
            None => Err(format!(
                "a {} window needs {what} = \"...\"",
                self.kind.name()
            )),
        };
        let unused = |what: &str, set: bool| not_for(self.kind.name(), what, set);
        match self.kind {
            WindowKind::Tumbling => {
                positive("size", self.size)?;
                unused("slide", self.slide.is_some())?;
                unused("gap", self.gap.is_some())?;
            }
            WindowKind::Sliding => {
                let size = positive("size", self.size)?;
                let slide = positive("slide", self.slide)?;
                unused("gap", self.gap.is_some())?;
                if slide > size {
                    return Err(format!(
                        "slide {} must be at most the size {}",
                        text(slide),
                        text(size)
                    ));
                }
                if ms(size) / ms(slide) > u128::from(MAX_WINDOWS_PER_RECORD) {
                    return Err(format!(
                        "size / slide is {}: every record would be in that many windows; at \
                         most {MAX_WINDOWS_PER_RECORD} are supported",
                        ms(size) / ms(slide)
                    ));
                }
            }
            WindowKind::Session => {
                positive("gap", self.gap)?;
                unused("size", self.size.is_some())?;
                unused("slide", self.slide.is_some())?;
                unused("offset", !self.offset.is_zero())?;
            }
        }
        // Windows start every slide (a tumbling window's is its size), shifted by the offset.
        if self.kind != WindowKind::Session {
            let (what, step) = match self.slide {
                Some(slide) => ("slide", slide),
                None => ("size", self.size.unwrap_or_default()),
            };
            if self.offset >= step {
                return Err(format!(
                    "offset {} must be less than the {what} {}",
                    text(self.offset),
                    text(step)
                ));
            }
        }
        if self.late.is_empty() {
            return Err("late must name a side output".into());
        }
        match (self.aggregate, self.function) {
            (Some(_), Some(_)) => {
                return Err(
                    "aggregate (built in) and function (user code) are both set; keep one".into(),
                );
            }
            (None, None) => {
                return Err(
                    "a window needs aggregate = \"count\" (or sum, min, max, avg), or \
                     function = \"aggregate\" or \"process\" with the operator's wasm component"
                        .into(),
                );
            }
            _ => {}
        }
        if self.time == WindowTime::Processing && !self.allowed_lateness.is_zero() {
            return Err(
                "allowed_lateness applies to event time only: in processing time no \
                        record is late; remove it"
                    .into(),
            );
        }
        Ok(())
    }
}

/// The error for setting `what` (when `set`) on a window or join of type `kind`.
pub(super) fn not_for(kind: &str, what: &str, set: bool) -> Result<(), String> {
    match set {
        true => Err(format!(
            "{what} does not apply to type = \"{kind}\"; remove it"
        )),
        false => Ok(()),
    }
}

impl WindowKind {
    fn name(self) -> &'static str {
        match self {
            WindowKind::Tumbling => "tumbling",
            WindowKind::Sliding => "sliding",
            WindowKind::Session => "session",
        }
    }
}

/// What a window holds of its records: enough for every aggregate.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Acc {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

const ACC_BYTES: usize = 32;

impl Acc {
    fn new() -> Acc {
        Acc {
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    fn add(&mut self, x: f64) {
        self.count += 1;
        self.sum += x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
    }

    fn merge(&mut self, other: &Acc) {
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    fn encode(&self) -> [u8; ACC_BYTES] {
        let mut b = [0; ACC_BYTES];
        b[..8].copy_from_slice(&self.count.to_le_bytes());
        b[8..16].copy_from_slice(&self.sum.to_le_bytes());
        b[16..24].copy_from_slice(&self.min.to_le_bytes());
        b[24..].copy_from_slice(&self.max.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Acc> {
        let b: &[u8; ACC_BYTES] = b.try_into().ok()?;
        let f = |i: usize| f64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Acc {
            count: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            sum: f(8),
            min: f(16),
            max: f(24),
        })
    }

    /// Appends the aggregate's value to `out`.
    fn write_result(&self, aggregate: Aggregate, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = match aggregate {
            Aggregate::Count => write!(out, "{}", self.count),
            Aggregate::Sum => write!(out, "{}", self.sum),
            Aggregate::Min => write!(out, "{}", self.min),
            Aggregate::Max => write!(out, "{}", self.max),
            Aggregate::Avg => write!(out, "{}", self.sum / self.count as f64),
        };
    }
}

/// Byte strings as `n × bytes` (the values of a process-window function's records, or those
/// added to a guest aggregate since its last update).
#[derive(Debug, Clone, Default)]
struct Items {
    n: u32,
    bytes: Vec<u8>,
}

impl Items {
    fn push(&mut self, value: &[u8]) {
        put_bytes(&mut self.bytes, value);
        self.n += 1;
    }

    fn append(&mut self, other: Items) {
        self.bytes.extend_from_slice(&other.bytes);
        self.n += other.n;
    }

    /// The items of `bytes`, counted.
    fn decode(bytes: &[u8]) -> Option<Items> {
        let mut r = Reader::new(bytes, "window values");
        let mut n = 0;
        while !r.is_empty() {
            r.bytes().ok()?;
            n += 1;
        }
        Some(Items {
            n,
            bytes: bytes.to_vec(),
        })
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        let mut r = Reader::new(&self.bytes, "window values");
        (0..self.n as usize).map(move |_| r.bytes().unwrap_or_default())
    }
}

/// What a window holds of its records, by what makes its result.
#[derive(Debug, Clone)]
enum Contents {
    /// A built-in aggregate's accumulator.
    Builtin(Acc),
    /// A guest aggregate's accumulators (none for a new window, several once sessions merged;
    /// one after each update call) and the values added since.
    Guest { accs: Vec<Vec<u8>>, added: Items },
    /// A process-window function's values carried in the window, by checkpoints of an
    /// earlier layout; its records wait in the operator's `values` list state now.
    Values(Items),
}

impl Contents {
    fn merge(&mut self, other: Contents) {
        match (self, other) {
            (Contents::Builtin(a), Contents::Builtin(b)) => a.merge(&b),
            (Contents::Guest { accs, added }, Contents::Guest { accs: a, added: b }) => {
                accs.extend(a);
                added.append(b);
            }
            (Contents::Values(a), Contents::Values(b)) => a.append(b),
            _ => unreachable!("one window function per operator"),
        }
    }

    /// Whether a guest aggregate has values or accumulators to fold (an update call).
    fn needs_update(&self) -> bool {
        matches!(self, Contents::Guest { accs, added } if added.n > 0 || accs.len() > 1)
    }
}

/// An open window of a key.
#[derive(Debug, Clone)]
struct Win {
    start: i64,
    /// Exclusive.
    end: i64,
    contents: Contents,
    /// Whether the batch changed it.
    changed: bool,
}

impl Win {
    /// Its last millisecond, when it fires.
    fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    fn window(&self) -> Window {
        Window {
            start: self.start,
            end: self.end,
        }
    }
}

/// One key's open windows in the batch being handled.
type Open = Vec<Win>;

/// Whether the waiting record at `ts` lies in `w`.
fn holds(w: &Win, ts: i64) -> bool {
    w.start <= ts && ts < w.end
}

/// Windows by key slot and start.
type Starts = Vec<(u32, i64)>;

/// What makes a window's result.
enum Function {
    Builtin(Aggregate),
    /// A guest's window function (`process`: a process-window function).
    Guest {
        op: Box<WasmOperator>,
        process: bool,
    },
}

/// The window operator of one subtask.
pub(crate) struct WindowOperator {
    spec: WindowSpec,
    name: String,
    state: KeyedState,
    windows: StateId,
    /// A process-window function's records by key (see `timed`).
    values: Option<StateId>,
    function: Function,
    /// The timers' domain: of the spec's `time`.
    domain: TimeDomain,
    clock: crate::clock::Clock,
    /// How far windows have fired: the watermark, or the clock's time at the last firing.
    watermark: Option<i64>,
    size: i64,
    step: i64,
    offset: i64,
    gap: i64,
    lateness: i64,
    side: Vec<(String, Batch)>,
    /// The slot index of `process` and each record's slot, kept between batches (taken for
    /// a batch and put back after it).
    slots: Slots,
    record_slots: Vec<u32>,
}

/// The starts of the windows of `size` starting every `step` (from `offset`) that `ts` falls
/// into, latest first (Flink's `TimeWindow.getWindowStartWithOffset`).
pub(crate) fn window_starts(
    ts: i64,
    size: i64,
    step: i64,
    offset: i64,
) -> impl Iterator<Item = i64> {
    let last = ts - (ts - offset).rem_euclid(step);
    (0..)
        .map(move |i| last - i * step)
        .take_while(move |&start| start > ts - size)
}

/// The component and context of the instance that runs a window's function: without keyed
/// state or timers (the window is its state), under a uid of its own.
fn function_code(
    component: &OperatorComponent,
    mut ctx: OperatorContext,
) -> (OperatorComponent, OperatorContext) {
    let mut component = component.clone();
    component.limits.states = 0;
    component.limits.timers = 0;
    ctx.uid = format!("{}#function", ctx.uid);
    (component, ctx)
}

/// The window operator of `spec` for one subtask; `component` is its function's, if user code.
pub(crate) fn build(
    spec: &WindowSpec,
    ctx: &OperatorContext,
    setup: &StateSetup,
    component: Option<&OperatorComponent>,
) -> Result<Box<dyn Operator>, OperatorError> {
    let (mut state, windows) = super::keyed_state(ctx, setup, "windows", StateKind::Map)?;
    let function = match (spec.aggregate, component) {
        (Some(aggregate), _) => Function::Builtin(aggregate),
        (None, Some(component)) => {
            // It runs on memory state: it has none of its own.
            let memory = StateSetup {
                config: crate::state::StateConfig::default(),
                root: setup.root.clone(),
                clock: setup.clock.clone(),
            };
            let (component, ctx) = function_code(component, ctx.clone());
            Function::Guest {
                op: Box::new(WasmOperator::new(&component, ctx, &memory)?),
                process: spec.function == Some(FunctionKind::Process),
            }
        }
        (None, None) => {
            return Err(OperatorError::Contract(format!(
                "window \"{}\" has a function but no component",
                ctx.uid
            )));
        }
    };
    let values = match function {
        Function::Guest { process: true, .. } => Some(
            (state.declare("values", StateKind::List, None))
                .map_err(|e| OperatorError::Contract(e.to_string()))?,
        ),
        _ => None,
    };
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(Box::new(WindowOperator {
        name: ctx.uid.clone(),
        state,
        windows,
        values,
        function,
        domain: match spec.time {
            WindowTime::Event => TimeDomain::EventTime,
            WindowTime::Processing => TimeDomain::ProcessingTime,
        },
        clock: setup.clock.clone(),
        watermark: None,
        size: spec.size.map_or(0, ms),
        step: spec.slide.or(spec.size).map_or(0, ms),
        offset: ms(spec.offset),
        gap: spec.gap.map_or(0, ms),
        lateness: ms(spec.allowed_lateness),
        side: Vec::new(),
        slots: Slots::default(),
        record_slots: Vec::new(),
        spec: spec.clone(),
    }))
}

impl WindowOperator {
    /// Whether a window ending (exclusively) at `end` can no longer change.
    fn is_late(&self, end: i64) -> bool {
        let cleanup = (end - 1).saturating_add(self.lateness);
        self.watermark.is_some_and(|w| cleanup <= w)
    }

    /// Whether a window ending (exclusively) at `end` has fired.
    fn has_fired(&self, end: i64) -> bool {
        self.watermark.is_some_and(|w| end - 1 <= w)
    }

    /// A new window's contents.
    fn empty(&self) -> Contents {
        match &self.function {
            Function::Builtin(_) => Contents::Builtin(Acc::new()),
            Function::Guest { process: false, .. } => Contents::Guest {
                accs: Vec::new(),
                added: Items::default(),
            },
            Function::Guest { process: true, .. } => Contents::Values(Items::default()),
        }
    }

    /// Adds a record (its value, and that read as a number for a built-in aggregate).
    fn add_value(contents: &mut Contents, (x, value): (f64, &[u8])) {
        match contents {
            Contents::Builtin(acc) => acc.add(x),
            Contents::Guest { added, .. } => added.push(value),
            // Its records wait in the `values` list state (see `timed`).
            Contents::Values(_) => {}
        }
    }

    /// Registers the timers of `key`'s window ending (exclusively) at `end`: its firing
    /// unless it fired, its cleanup.
    fn register_timers(&mut self, end: i64, key: &[u8]) -> Result<(), OperatorError> {
        let [fire, cleanup] = self.timer_times(end);
        if !self.has_fired(end) {
            (self.state)
                .register_timer(self.domain, fire, key)
                .map_err(OperatorError::timers)?;
        }
        (self.state)
            .register_timer(self.domain, cleanup, key)
            .map_err(OperatorError::timers)
    }

    /// The times of the timers of a window ending (exclusively) at `end`: its firing and
    /// its cleanup.
    fn timer_times(&self, end: i64) -> [i64; 2] {
        [end - 1, (end - 1).saturating_add(self.lateness)]
    }

    /// Deletes the timers of `win` of `key`.
    fn delete_timers(&mut self, win: &Win, key: &[u8]) -> Result<(), OperatorError> {
        for ts in self.timer_times(win.end) {
            (self.state)
                .delete_timer(self.domain, ts, key)
                .map_err(OperatorError::timers)?;
        }
        Ok(())
    }

    /// Adds a record to window `[start, end)` of `slot`'s key, creating it if new; a window
    /// that fired already fires again (goes to `refire`).
    fn add(
        &mut self,
        windows: &mut Open,
        (start, end): (i64, i64),
        value: (f64, &[u8]),
        (slot, key): (u32, &[u8]),
        refire: &mut Vec<(u32, i64)>,
    ) -> Result<(), OperatorError> {
        let at = match windows.iter().position(|w| w.start == start) {
            // Restored from a checkpoint that kept no watermark (written by an earlier
            // version), before the first watermark, a window in the state may have fired:
            // its timers go in again, so that the next watermark fires it again with this
            // record, as a late record's firing would have (a dedup otherwise).
            Some(at) if self.watermark.is_none() => {
                self.register_timers(end, key)?;
                at
            }
            Some(at) => at,
            None => {
                // A new window: its timers (those of a window in the state are registered).
                self.register_timers(end, key)?;
                windows.push(Win {
                    start,
                    end,
                    contents: self.empty(),
                    changed: true,
                });
                windows.len() - 1
            }
        };
        let win = &mut windows[at];
        Self::add_value(&mut win.contents, value);
        win.changed = true;
        if self.has_fired(end) {
            refire.push((slot, start));
        }
        Ok(())
    }

    /// Adds a record at `ts` to `slot`'s sessions: its own session `[ts, ts + gap)`, merged
    /// with every session it overlaps or touches. Returns false (changing nothing) when the
    /// merged session is late; the starts of sessions merged away go to `dropped`.
    fn add_to_session(
        &mut self,
        windows: &mut Open,
        (ts, value): (i64, (f64, &[u8])),
        (slot, key): (u32, &[u8]),
        (dropped, refire): (&mut Starts, &mut Starts),
    ) -> Result<bool, OperatorError> {
        let mut merged = Win {
            start: ts,
            end: ts.saturating_add(self.gap),
            contents: self.empty(),
            changed: true,
        };
        Self::add_value(&mut merged.contents, value);
        let (mut start, mut end) = (merged.start, merged.end);
        for w in windows.iter() {
            if w.start <= merged.end && w.end >= merged.start {
                start = start.min(w.start);
                end = end.max(w.end);
            }
        }
        if self.is_late(end) {
            return Ok(false);
        }
        let mut gone = Vec::new();
        let mut i = 0;
        while i < windows.len() {
            let w = &windows[i];
            if w.start <= merged.end && w.end >= merged.start {
                let w = windows.remove(i);
                if w.start != start {
                    dropped.push((slot, w.start));
                }
                gone.push(w);
            } else {
                i += 1;
            }
        }
        let starts: Vec<i64> = gone.iter().map(|w| w.start).collect();
        let deleted: Vec<i64> = gone.iter().flat_map(|w| self.timer_times(w.end)).collect();
        // Their timers go; those of the merged session are registered below.
        for w in &gone {
            self.delete_timers(w, key)?;
        }
        // In start order, so that a process function sees the records in arrival order
        // within each merged session.
        // The earliest session's contents take the others' (most often: one session and
        // the new record), so that a session's values are not copied per record.
        gone.sort_by_key(|w| w.start);
        let mut gone = gone.into_iter();
        let mut contents = gone.next().map_or_else(|| self.empty(), |w| w.contents);
        for w in gone {
            contents.merge(w.contents);
        }
        contents.merge(merged.contents);
        merged.contents = contents;
        (merged.start, merged.end) = (start, end);
        dropped.retain(|&(s, st)| s != slot || st != start);
        refire.retain(|&(s, st)| s != slot || st != start && !starts.contains(&st));
        windows.push(merged);
        // A session that grew past the watermark fires at its new end (a new window, as in
        // Flink); one that fired already and took a late record fires again now.
        if self.has_fired(end) {
            refire.push((slot, start));
        }
        // A deleted timer may have been another session's too (a timer is a key and a time):
        // register the merged session's timers and those of sessions sharing a deleted
        // time, not every session's (that made each record cost as many timer writes as the
        // key had sessions open, which grow while the watermark lags).
        let ends: Vec<i64> = (windows.iter())
            .map(|w| w.end)
            .filter(|&e| e == end || self.timer_times(e).iter().any(|t| deleted.contains(t)))
            .collect();
        for end in ends {
            self.register_timers(end, key)?;
        }
        Ok(true)
    }

    /// The value of `rec` for a built-in aggregate (0 for the others).
    fn value(&self, value: &[u8], key: &[u8]) -> Result<f64, OperatorError> {
        let aggregate = match self.function {
            Function::Builtin(Aggregate::Count) | Function::Guest { .. } => return Ok(0.0),
            Function::Builtin(a) => a,
        };
        std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite())
            .ok_or_else(|| {
                OperatorError::Failed(format!(
                    "window \"{}\" ({aggregate:?}) needs numbers, but the record of key {} has \
                     value {}; emit the number as decimal text, or count instead",
                    self.name,
                    crate::wasm::describe_bytes(key),
                    crate::wasm::describe_bytes(value)
                ))
            })
    }

    /// The contents of a window as stored.
    fn decode(&self, stored: &[u8]) -> Option<Contents> {
        Some(match &self.function {
            Function::Builtin(_) => Contents::Builtin(Acc::decode(stored)?),
            Function::Guest { process: false, .. } => Contents::Guest {
                accs: vec![stored.to_vec()],
                added: Items::default(),
            },
            Function::Guest { process: true, .. } => Contents::Values(Items::decode(stored)?),
        })
    }

    /// Each slot's open windows, from the state.
    fn load(&mut self, slots: &Slots) -> Result<Vec<Open>, OperatorError> {
        let mut buf = Vec::new();
        self.state
            .load(self.windows, slots, usize::MAX, &mut buf)
            .map_err(failed)?;
        let bad = |e: weir_wire::DecodeError| OperatorError::Contract(e.to_string());
        let mut r = Reader::new(&buf, "window state");
        let mut open = Vec::with_capacity(slots.len());
        for _ in 0..slots.len() {
            let n = r.u32().map_err(bad)?;
            let mut windows = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let (start, value) = (r.bytes().map_err(bad)?, r.bytes().map_err(bad)?);
                let corrupt = || OperatorError::Contract("a window of another layout".into());
                let start = i64::from_le_bytes(start.try_into().map_err(|_| corrupt())?);
                let (end, contents) = value.split_at_checked(8).ok_or_else(corrupt)?;
                windows.push(Win {
                    start,
                    end: i64::from_le_bytes(end.try_into().map_err(|_| corrupt())?),
                    contents: self.decode(contents).ok_or_else(corrupt)?,
                    changed: false,
                });
            }
            open.push(windows);
        }
        Ok(open)
    }

    /// Writes back what changed: changed windows, and those `dropped`.
    fn store(
        &mut self,
        slots: &Slots,
        open: &[Open],
        dropped: &[(u32, i64)],
    ) -> Result<(), OperatorError> {
        let mut changes = Vec::new();
        let mut value = Vec::new();
        for (slot, windows) in open.iter().enumerate() {
            for w in windows.iter().filter(|w| w.changed) {
                value.clear();
                value.extend_from_slice(&w.end.to_le_bytes());
                match &w.contents {
                    Contents::Builtin(acc) => value.extend_from_slice(&acc.encode()),
                    Contents::Guest { accs, .. } => {
                        debug_assert!(!w.contents.needs_update(), "updated before it is stored");
                        value.extend_from_slice(accs.first().map_or(&[][..], Vec::as_slice));
                    }
                    Contents::Values(values) => value.extend_from_slice(&values.bytes),
                }
                put_map_op(
                    &mut changes,
                    slot as u32,
                    MapOp::Put(&w.start.to_le_bytes(), &value),
                );
            }
        }
        for &(slot, start) in dropped {
            put_map_op(&mut changes, slot, MapOp::Remove(&start.to_le_bytes()));
        }
        self.state
            .store(self.windows, slots, &changes, u64::MAX)
            .map_err(failed)
    }

    /// Each slot's records waiting for a process-window function (none for other functions).
    fn load_waiting<'b>(
        &mut self,
        slots: &Slots,
        buf: &'b mut Vec<u8>,
    ) -> Result<Vec<Waiting<'b>>, OperatorError> {
        match self.values {
            Some(id) => timed::load(&mut self.state, id, slots, buf),
            None => Ok(Vec::new()),
        }
    }

    /// Drops the waiting records that no open window of their key holds any more, for the
    /// keys that `dropped` windows.
    fn prune_waiting(
        &mut self,
        slots: &Slots,
        open: &[Open],
        dropped: &[(u32, i64)],
        waiting: &[Waiting<'_>],
    ) -> Result<(), OperatorError> {
        let Some(id) = self.values else {
            return Ok(());
        };
        let mut keys: Vec<u32> = dropped.iter().map(|&(slot, _)| slot).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut changes = Vec::new();
        for slot in keys {
            let windows = &open[slot as usize];
            timed::retain(&mut changes, slot, &waiting[slot as usize], |ts| {
                windows.iter().any(|w| holds(w, ts))
            });
        }
        timed::store_changes(&mut self.state, id, slots, &changes)
    }

    /// Calls the guest's function with `calls` (a batch of window calls) and returns what
    /// it emitted; an aggregate's answers are checked to be one per call.
    fn call_guest(&mut self, calls: &Batch, answers: bool) -> Result<Batch, OperatorError> {
        let Function::Guest { op, .. } = &mut self.function else {
            unreachable!("only guest functions are called");
        };
        let mut out = Batch::default();
        op.process_described(0, calls, &mut out, describe_calls)?;
        for (name, batch) in op.take_side_outputs() {
            self.side.push((name, batch));
        }
        if answers && out.len() != calls.len() {
            return Err(OperatorError::Contract(format!(
                "window \"{}\": its function answered {} of {} window calls with one record \
                 each; is the component a window function of the kind of `function` (export \
                 weir_sdk::window::Aggregate or ProcessWindow)?",
                self.name,
                out.len(),
                calls.len()
            )));
        }
        Ok(out)
    }

    /// Folds what batch added into the guest aggregate's windows (one call for all of them).
    fn update_guest(&mut self, slots: &Slots, open: &mut [Open]) -> Result<(), OperatorError> {
        let mut calls = Batch::default();
        for (slot, windows) in open.iter().enumerate() {
            for w in windows.iter().filter(|w| w.contents.needs_update()) {
                let Contents::Guest { accs, added } = &w.contents else {
                    unreachable!("only guest aggregates need updates");
                };
                let accs: Vec<&[u8]> = accs.iter().map(Vec::as_slice).collect();
                let key = slots.key(slot);
                calls.push_with(Kind::Insert, Some(key), Some(w.max_timestamp()), |b| {
                    put_update(b, w.window(), &accs, added.iter())
                });
            }
        }
        if calls.is_empty() {
            return Ok(());
        }
        let answers = self.call_guest(&calls, true)?;
        let mut answers = answers.iter();
        for windows in open.iter_mut() {
            for w in windows.iter_mut().filter(|w| w.contents.needs_update()) {
                let acc = answers
                    .next()
                    .expect("as many answers as calls")
                    .value
                    .to_vec();
                w.contents = Contents::Guest {
                    accs: vec![acc],
                    added: Items::default(),
                };
            }
        }
        Ok(())
    }

    /// Emits the results of `windows` (key, window, and for a process-window function the
    /// slot of the key's records in `waiting`) as records of `kind`.
    fn emit_results(
        &mut self,
        windows: &[(&[u8], &Win, u32)],
        waiting: &[Waiting<'_>],
        kind: Kind,
        out: &mut Batch,
    ) -> Result<(), OperatorError> {
        let process = match &self.function {
            Function::Builtin(aggregate) => {
                for (key, w, _) in windows {
                    let Contents::Builtin(acc) = &w.contents else {
                        unreachable!("a built-in's window")
                    };
                    emit(out, kind, key, w, |b| acc.write_result(*aggregate, b));
                }
                return Ok(());
            }
            Function::Guest { process, .. } => *process,
        };
        if windows.is_empty() {
            return Ok(());
        }
        let mut calls = Batch::default();
        for (key, w, slot) in windows {
            calls.push_with(
                Kind::Insert,
                Some(key),
                Some(w.max_timestamp()),
                |b| match &w.contents {
                    Contents::Guest { accs, .. } => {
                        put_result(b, w.window(), accs.first().map_or(&[][..], Vec::as_slice))
                    }
                    Contents::Values(carried) => {
                        // The values it carries, then its key's waiting records within it.
                        let within = || {
                            (waiting[*slot as usize].iter())
                                .filter(|&&(ts, _)| holds(w, ts))
                                .map(|&(_, e)| timed::value(e))
                        };
                        let n = carried.n + within().count() as u32;
                        put_process(b, w.window(), n, &carried.bytes);
                        within().for_each(|v| put_bytes(b, v));
                    }
                    Contents::Builtin(_) => unreachable!("a guest's window"),
                },
            );
        }
        let answers = self.call_guest(&calls, !process)?;
        if process {
            out.append(&answers);
            return Ok(());
        }
        for ((key, w, _), result) in windows.iter().zip(answers.iter()) {
            emit(out, kind, key, w, |b| b.extend_from_slice(result.value));
        }
        Ok(())
    }

    /// Fires and drops the windows whose timers are due at `upto`.
    fn fire(&mut self, upto: i64, out: &mut Batch) -> Result<(), OperatorError> {
        loop {
            let mut due: Vec<(i64, crate::state::Key)> = Vec::new();
            while due.len() < crate::batch::BATCH_RECORDS
                && let Some(timer) = (self.state)
                    .pop_timer(self.domain, upto)
                    .map_err(OperatorError::timers)?
            {
                due.push(timer);
            }
            if due.is_empty() {
                return Ok(());
            }
            let mut slots = Slots::default();
            let due_slots: Vec<u32> = (due.iter())
                .map(|(_, key)| slots.slot_of(key, || self.state.key_group(key)).0)
                .collect();
            let mut open = self.load(&slots)?;
            let mut buf = Vec::new();
            let waiting = self.load_waiting(&slots, &mut buf)?;
            let mut dropped = Vec::new();
            let mut firing = Vec::new();
            for ((t, key), &slot) in due.iter().zip(&due_slots) {
                for w in &open[slot as usize] {
                    if w.max_timestamp() == *t {
                        firing.push((&key[..], w, slot));
                    }
                    if w.max_timestamp().saturating_add(self.lateness) == *t {
                        dropped.push((slot, w.start));
                    }
                }
            }
            self.emit_results(&firing, &waiting, Kind::Insert, out)?;
            for &(slot, start) in &dropped {
                open[slot as usize].retain(|w| w.start != start);
            }
            self.prune_waiting(&slots, &open, &dropped, &waiting)?;
            self.store(&slots, &open, &dropped)?;
        }
    }
}

/// Appends the result of window `w` of `key`: `<start>,<end>,<result>` with its last
/// millisecond as timestamp.
fn emit(out: &mut Batch, kind: Kind, key: &[u8], w: &Win, result: impl FnOnce(&mut Vec<u8>)) {
    out.push_with(kind, Some(key), Some(w.max_timestamp()), |b| {
        use std::io::Write;
        let _ = write!(b, "{},{},", w.start, w.end);
        result(b);
    });
}

impl Operator for WindowOperator {
    fn open(&mut self) -> Result<(), OperatorError> {
        match &mut self.function {
            Function::Guest { op, .. } => op.open(),
            Function::Builtin(_) => Ok(()),
        }
    }

    /// Of the window's function: its instance's memory is watched, and renewed when it
    /// leaks, as an operator's.
    fn guest_usage(&self) -> Option<InstanceUsage> {
        match &self.function {
            Function::Guest { op, .. } => op.guest_usage(),
            Function::Builtin(_) => None,
        }
    }

    /// A new instance of the window's function, which keeps none of its own state: the
    /// window's records, aggregates and timers stay.
    fn with_code(
        self: Box<Self>,
        component: &OperatorComponent,
        ctx: OperatorContext,
        clock: crate::clock::Clock,
    ) -> Result<Box<dyn Operator>, OperatorError> {
        let mut window = *self;
        let Function::Guest { op, process } = window.function else {
            return Err(OperatorError::Contract(
                "this window has a built-in aggregate, no function to replace".into(),
            ));
        };
        let (component, ctx) = function_code(component, ctx);
        let op = Box::new(op.carry_on(&component, ctx, clock)?);
        window.function = Function::Guest { op, process };
        Ok(Box::new(window))
    }

    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        let (mut slots, mut record_slots) = (
            std::mem::take(&mut self.slots),
            std::mem::take(&mut self.record_slots),
        );
        keyed_slots(
            &self.state,
            input,
            &mut slots,
            &mut record_slots,
            ("window", &self.name),
        )?;
        let mut open = self.load(&slots)?;
        let mut late = Batch::default();
        let mut dropped = Vec::new();
        let mut refire = Vec::new();
        let mut appends = Appends::default();
        let now = self.clock.now_ms();
        for (rec, &slot) in input.iter().zip(&record_slots) {
            let key = rec.key.unwrap_or_default();
            let ts = match self.domain {
                // In processing time no record is late: one that comes in the millisecond
                // its window fired (or with a clock that went back) goes to the next one.
                TimeDomain::ProcessingTime => Some(
                    self.watermark
                        .map_or(now, |fired| now.max(fired.saturating_add(1))),
                ),
                TimeDomain::EventTime => rec.timestamp,
            };
            let ts = ts.ok_or_else(|| {
                OperatorError::Failed(format!(
                    "window \"{}\" got a record without event time (key {}); give records a \
                     timestamp at the source (event_time) or in an operator before the window",
                    self.name,
                    crate::wasm::describe_bytes(key)
                ))
            })?;
            let value = (self.value(rec.value, key)?, rec.value);
            let windows = &mut open[slot as usize];
            let counted = if self.spec.kind == WindowKind::Session {
                self.add_to_session(
                    windows,
                    (ts, value),
                    (slot, key),
                    (&mut dropped, &mut refire),
                )?
            } else {
                let mut counted = false;
                for start in window_starts(ts, self.size, self.step, self.offset) {
                    let end = start.saturating_add(self.size);
                    if !self.is_late(end) {
                        counted = true;
                        self.add(windows, (start, end), value, (slot, key), &mut refire)?;
                    }
                }
                counted
            };
            if !counted {
                late.push(&rec);
            } else if self.values.is_some() {
                appends.push(slot, ts, rec.value);
            }
        }
        self.update_guest(&slots, &mut open)?;
        if let Some(id) = self.values {
            appends.store(&mut self.state, id, &slots)?;
        }
        // Windows that fired already and took late records fire again, once each.
        refire.sort_unstable();
        refire.dedup();
        let mut again_slots = Slots::default();
        let again: Vec<(&[u8], &Win, u32)> = (refire.iter())
            .filter_map(|&(slot, start)| {
                let w = open[slot as usize].iter().find(|w| w.start == start)?;
                let (key, group) = (slots.key(slot as usize), slots.group(slot as usize));
                Some((key, w, again_slots.push(key, group)))
            })
            .collect();
        let mut buf = Vec::new();
        let waiting = match again.is_empty() {
            true => Vec::new(),
            false => self.load_waiting(&again_slots, &mut buf)?,
        };
        self.emit_results(&again, &waiting, Kind::UpdateAfter, out)?;
        self.store(&slots, &open, &dropped)?;
        if !late.is_empty() {
            self.side.push((self.spec.late.clone(), late));
        }
        (self.slots, self.record_slots) = (slots, record_slots);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Batch) -> Result<bool, OperatorError> {
        self.state.set_watermark(watermark);
        if let Function::Guest { op, .. } = &mut self.function {
            // It has no timers: this tells it the watermark.
            op.on_watermark(watermark, &mut Batch::default())?;
        }
        if self.domain != TimeDomain::EventTime {
            return Ok(false);
        }
        self.watermark = Some(watermark);
        self.fire(watermark, out).map(|()| false)
    }

    fn restore_watermark(&mut self, watermark: i64) {
        self.state.set_watermark(watermark);
        if let Function::Guest { op, .. } = &mut self.function {
            op.restore_watermark(watermark);
        }
        if self.domain == TimeDomain::EventTime {
            self.watermark = Some(watermark);
        }
    }

    fn on_processing_time(&mut self, now: i64, out: &mut Batch) -> Result<bool, OperatorError> {
        if self.domain != TimeDomain::ProcessingTime {
            return Ok(false);
        }
        self.watermark = Some(now);
        self.fire(now, out).map(|()| false)
    }

    fn next_processing_time(&mut self) -> Option<i64> {
        self.state.next_timer(TimeDomain::ProcessingTime)
    }

    fn close(&mut self, out: &mut Batch) -> Result<bool, OperatorError> {
        if self.domain == TimeDomain::EventTime {
            self.watermark = Some(i64::MAX);
            self.fire(i64::MAX, out)?;
        }
        match &mut self.function {
            Function::Guest { op, .. } => op.close(out),
            Function::Builtin(_) => Ok(false),
        }
    }

    fn snapshot(&mut self, n: u64, snapshot: &mut Snapshot) -> Result<(), OperatorError> {
        snapshot_state(&mut self.state, n, snapshot)
    }

    fn notify_complete(&mut self, n: u64) {
        self.state.notify_complete(n);
    }

    fn restore(&mut self, snapshot: &[u8], shared: &Path) -> Result<(), OperatorError> {
        restore_state(&mut self.state, snapshot, shared)
    }

    fn snapshot_operator_state(&mut self) -> Option<Vec<u8>> {
        match &mut self.function {
            Function::Guest { op, .. } => op.snapshot_operator_state(),
            Function::Builtin(_) => None,
        }
    }

    fn restore_operator_state(&mut self, snapshot: &[u8]) -> Result<(), OperatorError> {
        match &mut self.function {
            Function::Guest { op, .. } => op.restore_operator_state(snapshot),
            Function::Builtin(_) => Ok(()),
        }
    }

    fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        std::mem::take(&mut self.side)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WindowKind, size: u64, slide: Option<u64>, offset: u64) -> WindowSpec {
        WindowSpec {
            kind,
            size: Some(Duration::from_millis(size)),
            slide: slide.map(Duration::from_millis),
            gap: None,
            offset: Duration::from_millis(offset),
            allowed_lateness: Duration::ZERO,
            aggregate: Some(Aggregate::Count),
            function: None,
            code: None,
            late: "late".into(),
            time: WindowTime::Event,
        }
    }

    /// A new operator of `spec` (its state in `dir`) restored from a snapshot of `op`.
    fn restored(
        op: &mut Box<dyn Operator>,
        spec: &WindowSpec,
        setup: &StateSetup,
        dir: &Path,
    ) -> Box<dyn Operator> {
        let mut snapshot = Snapshot {
            format: crate::operator::SnapshotFormat::Canonical,
            bytes: Vec::new(),
            key_groups: 0..128,
            shared: None,
        };
        op.snapshot(1, &mut snapshot).unwrap();
        let setup = StateSetup {
            root: dir.to_path_buf(),
            ..setup.clone()
        };
        let mut restored = build(spec, &super::super::test_context(), &setup, None).unwrap();
        restored.restore(&snapshot.bytes, dir).unwrap();
        restored
    }

    #[test]
    fn a_failed_call_of_a_window_function_names_its_windows() {
        let w = |start| Window {
            start,
            end: start + 1_000,
        };
        let call = |b: &mut Vec<u8>, start, n: u32| {
            let values: Vec<u8> = (0..n).flat_map(|_| [1, 0, 0, 0, b'x']).collect();
            put_process(b, w(start), n, &values)
        };
        let mut calls = Batch::default();
        calls.push_with(Kind::Insert, Some(b"bi"), Some(999), |b| call(b, 0, 12));
        assert_eq!(
            describe_calls(&calls),
            "; it was firing the window [0, 1000) of key \"bi\" with 12 records"
        );
        calls.push_with(Kind::Insert, Some(b"ba"), Some(1_999), |b| {
            call(b, 1_000, 1)
        });
        assert_eq!(
            describe_calls(&calls),
            "; it was firing 2 windows, the first [0, 1000) of key \"bi\" with 12 records"
        );
        let mut calls = Batch::default();
        calls.push_with(Kind::Insert, Some(b"bi"), Some(999), |b| {
            put_result(b, w(0), b"acc")
        });
        assert_eq!(
            describe_calls(&calls),
            "; it was taking the result of the window [0, 1000) of key \"bi\""
        );
        assert_eq!(describe_calls(&Batch::default()), "");
    }

    #[test]
    fn processing_time_windows_place_records_by_the_clock_and_fire_when_it_passes_their_end() {
        let mut spec = spec(WindowKind::Tumbling, 1_000, None, 0);
        spec.time = WindowTime::Processing;
        let clock = crate::clock::Clock::manual(1_000_500);
        let dir = tempfile::tempdir().unwrap();
        let setup = StateSetup {
            config: crate::state::StateConfig::default(),
            root: dir.path().to_path_buf(),
            clock: clock.clone(),
        };
        let mut op = build(&spec, &super::super::test_context(), &setup, None).unwrap();
        let batch = |keys: &[&str]| {
            let mut b = Batch::default();
            for k in keys {
                // Event times are ignored: the clock places the records.
                b.push_with(Kind::Insert, Some(k.as_bytes()), Some(5), |_| {});
            }
            b
        };
        let text = |out: &Batch| -> Vec<String> {
            let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            out.iter()
                .map(|r| format!("{} {} @{:?}", s(r.key.unwrap()), s(r.value), r.timestamp))
                .collect()
        };
        let mut out = Batch::default();
        op.process(&batch(&["a", "b", "a"]), &mut out).unwrap();
        op.on_watermark(i64::MAX - 1, &mut out).unwrap();
        assert!(
            out.is_empty(),
            "a watermark fires no processing-time window"
        );
        assert_eq!(op.next_processing_time(), Some(1_000_999));
        op.on_processing_time(1_000_998, &mut out).unwrap();
        assert!(out.is_empty());
        clock.set(1_000_999);
        op.on_processing_time(1_000_999, &mut out).unwrap();
        assert_eq!(
            text(&out),
            [
                "a 1000000,1001000,2 @Some(1000999)",
                "b 1000000,1001000,1 @Some(1000999)"
            ]
        );
        assert_eq!(op.next_processing_time(), None, "fired and cleaned up");
        // A record that comes in the millisecond its window fired is not late: it goes to
        // the next window.
        op.process(&batch(&["b"]), &mut out).unwrap();
        assert!(op.take_side_outputs().is_empty(), "a record went late");
        clock.set(1_001_200);
        op.process(&batch(&["a"]), &mut out).unwrap();
        assert_eq!(op.next_processing_time(), Some(1_001_999));
        // A restore keeps the open window and its processing-time timer.
        let dir2 = tempfile::tempdir().unwrap();
        let mut restored = restored(&mut op, &spec, &setup, dir2.path());
        let mut last = Batch::default();
        op.close(&mut last).unwrap();
        assert!(
            last.is_empty(),
            "an open window does not fire at the end of input"
        );
        assert_eq!(restored.next_processing_time(), Some(1_001_999));
        let mut fired = Batch::default();
        restored.on_processing_time(1_001_999, &mut fired).unwrap();
        assert_eq!(
            text(&fired),
            [
                "a 1001000,1002000,1 @Some(1001999)",
                "b 1001000,1002000,1 @Some(1001999)"
            ]
        );
        spec.allowed_lateness = Duration::from_millis(1);
        assert!(spec.validate().unwrap_err().contains("allowed_lateness"));
    }

    fn starts(spec: &WindowSpec, ts: i64) -> Vec<i64> {
        let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis() as i64);
        let (size, step) = (ms(spec.size), ms(spec.slide.or(spec.size)));
        window_starts(ts, size, step, ms(Some(spec.offset))).collect()
    }

    #[test]
    fn records_fall_into_the_windows_flink_assigns() {
        let tumbling = spec(WindowKind::Tumbling, 1_000, None, 0);
        assert_eq!(starts(&tumbling, 0), [0]);
        assert_eq!(starts(&tumbling, 999), [0]);
        assert_eq!(starts(&tumbling, 1_000), [1_000]);
        assert_eq!(starts(&tumbling, -1), [-1_000]);
        let offset = spec(WindowKind::Tumbling, 1_000, None, 300);
        assert_eq!(starts(&offset, 299), [-700]);
        assert_eq!(starts(&offset, 300), [300]);
        let sliding = spec(WindowKind::Sliding, 1_000, Some(250), 0);
        assert_eq!(starts(&sliding, 1_100), [1_000, 750, 500, 250]);
        assert_eq!(starts(&sliding, 1_000), [1_000, 750, 500, 250]);
        assert_eq!(starts(&sliding, 999), [750, 500, 250, 0]);
    }

    #[test]
    fn a_late_record_restored_before_the_first_watermark_fires_its_window_again() {
        let mut spec = spec(WindowKind::Tumbling, 1_000, None, 0);
        spec.allowed_lateness = Duration::from_secs(5);
        let dir = tempfile::tempdir().unwrap();
        let setup = StateSetup {
            config: crate::state::StateConfig::default(),
            root: dir.path().to_path_buf(),
            clock: crate::clock::Clock::system(),
        };
        let ctx = super::super::test_context();
        let record = |ts| {
            let mut b = Batch::default();
            b.push_with(Kind::Insert, Some(b"k"), Some(ts), |_| {});
            b
        };
        let counts = |out: &Batch| -> Vec<String> {
            (out.iter())
                .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
                .collect()
        };
        let mut op = build(&spec, &ctx, &setup, None).unwrap();
        let mut out = Batch::default();
        op.process(&record(500), &mut out).unwrap();
        op.on_watermark(999, &mut out).unwrap();
        assert_eq!(counts(&out), ["0,1000,1"]);
        // Restored from a checkpoint without the watermark, it gets a record of the fired
        // window before any watermark: late.
        let dir2 = tempfile::tempdir().unwrap();
        let mut restored = restored(&mut op, &spec, &setup, dir2.path());
        let mut out = Batch::default();
        restored.process(&record(600), &mut out).unwrap();
        restored.on_watermark(1_500, &mut out).unwrap();
        restored.on_watermark(7_000, &mut out).unwrap();
        assert_eq!(counts(&out), ["0,1000,2"]);
        // With the watermark the checkpoint kept, it fires at once, as it would have without
        // the restore, and the watermarks made again up to it fire nothing.
        let dir3 = tempfile::tempdir().unwrap();
        let mut restored = self::restored(&mut op, &spec, &setup, dir3.path());
        restored.restore_watermark(999);
        let mut out = Batch::default();
        restored.process(&record(600), &mut out).unwrap();
        assert_eq!(counts(&out), ["0,1000,2"]);
        restored.on_watermark(7_000, &mut out).unwrap();
        assert_eq!(counts(&out), ["0,1000,2"]);
    }

    #[test]
    fn bad_windows_are_refused_naming_the_setting() {
        let mut s = spec(WindowKind::Sliding, 1_000, None, 0);
        assert_eq!(
            s.validate().unwrap_err(),
            "a sliding window needs slide = \"...\""
        );
        s.slide = Some(Duration::from_millis(2_000));
        assert!(s.validate().unwrap_err().contains("at most the size"));
        s.size = Some(Duration::from_secs(10));
        s.slide = Some(Duration::from_millis(1));
        assert!(s.validate().unwrap_err().contains("size / slide is 10000"));
        s.slide = Some(Duration::from_secs(1));
        s.offset = Duration::from_secs(1);
        assert_eq!(
            s.validate().unwrap_err(),
            "offset 1s must be less than the slide 1s"
        );
        let mut t = spec(WindowKind::Tumbling, 1_000, None, 1_000);
        assert_eq!(
            t.validate().unwrap_err(),
            "offset 1s must be less than the size 1s"
        );
        t.offset = Duration::ZERO;
        t.slide = Some(Duration::from_secs(1));
        assert!(t.validate().unwrap_err().contains("slide does not apply"));
        let mut session = spec(WindowKind::Session, 1_000, None, 0);
        assert!(session.validate().unwrap_err().contains("needs gap"));
        session.gap = Some(Duration::from_secs(1));
        assert!(
            session
                .validate()
                .unwrap_err()
                .contains("size does not apply")
        );
        session.size = None;
        assert_eq!(session.validate(), Ok(()));
    }

    /// Drives a session window operator through records and watermarks; returns what it
    /// emitted as `(kind, key, value)`.
    fn sessions(lateness: u64, steps: &[(&str, i64)]) -> Vec<(Kind, String, String)> {
        let mut spec = spec(WindowKind::Session, 1, None, 0);
        spec.size = None;
        spec.gap = Some(Duration::from_millis(100));
        spec.allowed_lateness = Duration::from_millis(lateness);
        spec.aggregate = Some(Aggregate::Sum);
        let ctx = super::super::test_context();
        let dir = tempfile::tempdir().unwrap();
        let setup = StateSetup {
            config: crate::state::StateConfig::default(),
            root: dir.path().to_path_buf(),
            clock: crate::clock::Clock::system(),
        };
        let mut op = build(&spec, &ctx, &setup, None).unwrap();
        let mut out = Batch::default();
        for &(what, t) in steps {
            match what {
                "watermark" => assert!(!op.on_watermark(t, &mut out).unwrap()),
                "close" => assert!(!op.close(&mut out).unwrap()),
                key => {
                    let mut batch = Batch::default();
                    batch.push_with(Kind::Insert, Some(key.as_bytes()), Some(t), |b| {
                        b.extend_from_slice(b"1")
                    });
                    op.process(&batch, &mut out).unwrap();
                }
            }
        }
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        (out.iter())
            .map(|r| (r.kind, text(r.key.unwrap()), text(r.value)))
            .collect()
    }

    #[test]
    fn sessions_merge_fire_at_their_end_and_take_late_records_within_the_lateness() {
        use Kind::{Insert, UpdateAfter};
        let s = |k: Kind, key: &str, v: &str| (k, key.to_string(), v.to_string());
        // a: 0, 50 and 120 chain into one session [0, 220); 400 starts another. A record at
        // 150 bridges nothing new. b: alone.
        let out = sessions(
            0,
            &[
                ("a", 0),
                ("a", 120),
                ("b", 10),
                ("a", 50),
                ("watermark", 219),
                ("a", 400),
                ("watermark", 220),
                ("close", 0),
            ],
        );
        assert_eq!(
            out,
            [
                s(Insert, "b", "10,110,1"),
                s(Insert, "a", "0,220,3"),
                s(Insert, "a", "400,500,1")
            ]
        );
        // With 100 ms of lateness: a record at 120 after [0, 150) fired merges it into
        // [0, 220), which fires at its own end; one at 60 after the lateness passed is late
        // (nothing emitted for it); one at 1000 after [1000, 1100) fired updates it and
        // fires it again; one at 1050 grows it into [1000, 1150), which fires at its end.
        let out = sessions(
            100,
            &[
                ("a", 0),
                ("a", 50),
                ("watermark", 150),
                ("a", 120),
                ("watermark", 400),
                ("a", 60),
                ("a", 1_000),
                ("watermark", 1_100),
                ("a", 1_000),
                ("a", 1_050),
                ("close", 0),
            ],
        );
        assert_eq!(
            out,
            [
                s(Insert, "a", "0,150,2"),
                s(Insert, "a", "0,220,3"),
                s(Insert, "a", "1000,1100,1"),
                s(UpdateAfter, "a", "1000,1100,2"),
                s(Insert, "a", "1000,1150,3")
            ]
        );
    }

    #[test]
    fn a_merge_keeps_the_timer_another_session_shares() {
        // Gap 100, lateness 150: [0, 100) cleans up at 249, when [150, 250) fires. A record
        // at 10 grows the first into [0, 110), deleting its timers at 99 and 249; the second
        // must still fire at 249.
        let out = sessions(
            150,
            &[
                ("a", 0),
                ("a", 150),
                ("a", 10),
                ("watermark", 249),
                ("close", 0),
            ],
        );
        let s = |v: &str| (Kind::Insert, "a".to_string(), v.to_string());
        assert_eq!(out, [s("0,110,2"), s("150,250,1")]);
    }

    #[test]
    fn an_accumulator_gives_every_aggregate() {
        let mut acc = Acc::new();
        for x in [3.0, 1.5, 4.5] {
            acc.add(x);
        }
        let acc = Acc::decode(&acc.encode()).unwrap();
        let results: Vec<String> = [
            Aggregate::Count,
            Aggregate::Sum,
            Aggregate::Min,
            Aggregate::Max,
            Aggregate::Avg,
        ]
        .iter()
        .map(|&a| {
            let mut text = Vec::new();
            acc.write_result(a, &mut text);
            String::from_utf8(text).unwrap()
        })
        .collect();
        assert_eq!(results, ["3", "9", "1.5", "4.5", "3"]);
    }
}
