//! Windows in the host: keyed tumbling and sliding event-time windows with a built-in
//! aggregate, allowed lateness and a side output for records later than that, as Flink's
//! `window(...).allowedLateness(...).sideOutputLateData(...).aggregate(...)`, so that a simple
//! window needs no component.
//!
//! Each key's open windows are a map state (window start → accumulator) in the job's state
//! backend, read and written once per batch for the batch's keys, and its timers are in the
//! checkpoint with it, so RocksDB, checkpoints, restores and rescaling work as for any
//! operator. A window fires when the watermark passes its last millisecond (an event-time
//! timer there) and is dropped once the watermark passes that plus the allowed lateness (a
//! second timer); a record that comes in between updates it and fires it again.
//!
//! A result is `<start>,<end>,<value>` (`end` exclusive, milliseconds) with the window's key
//! and its last millisecond as timestamp: an insert when the window fires, an update-after
//! for each late record that changed it.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_wire::{Kind, MapOp, Reader, TimeDomain, put_map_op};

use crate::batch::Batch;
use crate::operator::{Operator, OperatorContext, OperatorError, Snapshot};
use crate::state::{FastMap, KeyedState, Slots, StateId, StateKind, StateSetup, Timers};

/// `window = { ... }` of an operator: a keyed window over event time.
///
/// ```toml
/// window = { type = "sliding", size = "10m", slide = "1m", aggregate = "sum",
///            allowed_lateness = "30s", late = "late" }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    /// `tumbling` or `sliding`.
    #[serde(rename = "type")]
    pub kind: WindowKind,
    /// The length of a window.
    #[serde(with = "humantime_serde")]
    pub size: Duration,
    /// How far apart sliding windows start (sliding windows only).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub slide: Option<Duration>,
    /// Shifts the windows' starts from multiples of the size (or slide) since the epoch.
    #[serde(default, with = "humantime_serde")]
    pub offset: Duration,
    /// How long after a window fired records may still update it (default 0).
    #[serde(default, with = "humantime_serde")]
    pub allowed_lateness: Duration,
    /// What a window computes over its records.
    pub aggregate: Aggregate,
    /// The side output that gets records later than the allowed lateness (default `late`).
    #[serde(default = "default_late")]
    pub late: String,
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
        if ms(self.size) == 0 {
            return Err("size must be at least 1ms".into());
        }
        match (self.kind, self.slide) {
            (WindowKind::Tumbling, Some(_)) => {
                return Err(
                    "slide applies to type = \"sliding\"; remove it, or make the \
                            window sliding"
                        .into(),
                );
            }
            (WindowKind::Sliding, None) => {
                return Err(
                    "a sliding window needs slide = \"...\" (how far apart windows \
                            start)"
                        .into(),
                );
            }
            (WindowKind::Sliding, Some(slide)) => {
                if ms(slide) == 0 || ms(slide) > ms(self.size) {
                    return Err(format!(
                        "slide {} must be at least 1ms and at most the size {}",
                        humantime::format_duration(slide),
                        humantime::format_duration(self.size)
                    ));
                }
                if ms(self.size) / ms(slide) > u128::from(MAX_WINDOWS_PER_RECORD) {
                    return Err(format!(
                        "size / slide is {}: every record would be in that many windows; at \
                         most {MAX_WINDOWS_PER_RECORD} are supported",
                        ms(self.size) / ms(slide)
                    ));
                }
            }
            (WindowKind::Tumbling, None) => {}
        }
        if ms(self.offset) >= ms(self.step()) {
            return Err(format!(
                "offset {} must be less than the {} {}",
                humantime::format_duration(self.offset),
                if self.kind == WindowKind::Sliding {
                    "slide"
                } else {
                    "size"
                },
                humantime::format_duration(self.step())
            ));
        }
        if self.late.is_empty() {
            return Err("late must name a side output".into());
        }
        Ok(())
    }

    /// How far apart windows start.
    fn step(&self) -> Duration {
        self.slide.unwrap_or(self.size)
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

    fn result(&self, aggregate: Aggregate) -> String {
        match aggregate {
            Aggregate::Count => self.count.to_string(),
            Aggregate::Sum => self.sum.to_string(),
            Aggregate::Min => self.min.to_string(),
            Aggregate::Max => self.max.to_string(),
            Aggregate::Avg => (self.sum / self.count as f64).to_string(),
        }
    }
}

/// One key's open windows in the batch being handled, by start.
type Open = Vec<(i64, Acc, bool)>;

/// The window operator of one subtask.
pub(crate) struct WindowOperator {
    spec: WindowSpec,
    name: String,
    state: KeyedState,
    windows: StateId,
    timers: Timers,
    watermark: Option<i64>,
    size: i64,
    step: i64,
    offset: i64,
    lateness: i64,
    side: Vec<(String, Batch)>,
}

/// The starts of the windows of `size` starting every `step` (from `offset`) that `ts` falls
/// into, latest first (Flink's `TimeWindow.getWindowStartWithOffset`).
fn window_starts(ts: i64, size: i64, step: i64, offset: i64) -> impl Iterator<Item = i64> {
    let last = ts - (ts - offset).rem_euclid(step);
    (0..)
        .map(move |i| last - i * step)
        .take_while(move |&start| start > ts - size)
}

pub(crate) fn build(
    spec: &WindowSpec,
    ctx: &OperatorContext,
    setup: &StateSetup,
) -> Result<Box<dyn Operator>, OperatorError> {
    let mut state = KeyedState::open(
        setup,
        &ctx.uid,
        ctx.subtask,
        ctx.max_parallelism,
        ctx.key_groups.clone(),
    )
    .map_err(|e| OperatorError::Failed(e.to_string()))?;
    let windows = state
        .declare("windows", StateKind::Map, None)
        .map_err(|e| OperatorError::Contract(e.to_string()))?;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(Box::new(WindowOperator {
        name: ctx.uid.clone(),
        state,
        windows,
        timers: Timers::default(),
        watermark: None,
        size: ms(spec.size),
        step: ms(spec.step()),
        offset: ms(spec.offset),
        lateness: ms(spec.allowed_lateness),
        side: Vec::new(),
        spec: spec.clone(),
    }))
}

impl WindowOperator {
    fn max_timestamp(&self, start: i64) -> i64 {
        start.saturating_add(self.size - 1)
    }

    fn is_late(&self, start: i64) -> bool {
        let cleanup = self.max_timestamp(start).saturating_add(self.lateness);
        self.watermark.is_some_and(|w| cleanup <= w)
    }

    /// The value of `rec` for the aggregate.
    fn value(&self, value: &[u8], key: &[u8]) -> Result<f64, OperatorError> {
        if self.spec.aggregate == Aggregate::Count {
            return Ok(0.0);
        }
        std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite())
            .ok_or_else(|| {
                OperatorError::Failed(format!(
                    "window \"{}\" ({:?}) needs numbers, but the record of key {} has value {}; \
                     emit the number as decimal text, or count instead",
                    self.name,
                    self.spec.aggregate,
                    crate::wasm::describe_bytes(key),
                    crate::wasm::describe_bytes(value)
                ))
            })
    }

    /// Each slot's open windows, from the state.
    fn load(&mut self, slots: &Slots) -> Result<Vec<Open>, OperatorError> {
        let mut buf = Vec::new();
        self.state
            .load(self.windows, slots, &mut buf)
            .map_err(|e| OperatorError::Failed(e.to_string()))?;
        let bad = |e: weir_wire::DecodeError| OperatorError::Contract(e.to_string());
        let mut r = Reader::new(&buf, "window state");
        let mut open = Vec::with_capacity(slots.len());
        for _ in 0..slots.len() {
            let n = r.u32().map_err(bad)?;
            let mut windows = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let (start, acc) = (r.bytes().map_err(bad)?, r.bytes().map_err(bad)?);
                let start = i64::from_le_bytes(start.try_into().map_err(|_| {
                    OperatorError::Contract("a window start of another size".into())
                })?);
                let acc = Acc::decode(acc).ok_or_else(|| {
                    OperatorError::Contract("a window accumulator of another size".into())
                })?;
                windows.push((start, acc, false));
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
        for (slot, windows) in open.iter().enumerate() {
            for (start, acc, changed) in windows {
                if *changed {
                    let op = MapOp::Put(&start.to_le_bytes(), &acc.encode());
                    put_map_op(&mut changes, slot as u32, op);
                }
            }
        }
        for &(slot, start) in dropped {
            put_map_op(&mut changes, slot, MapOp::Remove(&start.to_le_bytes()));
        }
        self.state
            .store(self.windows, slots, &changes, u64::MAX)
            .map_err(|e| OperatorError::Failed(e.to_string()))
    }

    fn emit(&self, out: &mut Batch, kind: Kind, key: &[u8], start: i64, acc: &Acc) {
        let end = start.saturating_add(self.size);
        let value = format!("{start},{end},{}", acc.result(self.spec.aggregate));
        out.push_with(kind, Some(key), Some(self.max_timestamp(start)), |b| {
            b.extend_from_slice(value.as_bytes())
        });
    }

    /// Fires and drops the windows whose timers are due at `upto`.
    fn fire(&mut self, upto: i64, out: &mut Batch) -> Result<(), OperatorError> {
        loop {
            let mut due: Vec<(i64, crate::state::Key)> = Vec::new();
            while due.len() < crate::batch::BATCH_RECORDS
                && let Some(timer) = self.timers.pop_due(TimeDomain::EventTime, upto)
            {
                due.push(timer);
            }
            if due.is_empty() {
                return Ok(());
            }
            let mut slots = Slots::default();
            let mut index: FastMap<&[u8], u32> = FastMap::default();
            for (_, key) in &due {
                let group = self.state.key_group(key);
                index
                    .entry(&key[..])
                    .or_insert_with(|| slots.push(key, group));
            }
            let mut open = self.load(&slots)?;
            let mut dropped = Vec::new();
            for (t, key) in &due {
                let slot = index[&key[..]];
                for (start, acc, _) in &open[slot as usize] {
                    let max = self.max_timestamp(*start);
                    if max == *t {
                        self.emit(out, Kind::Insert, key, *start, acc);
                    }
                    if max.saturating_add(self.lateness) == *t {
                        dropped.push((slot, *start));
                    }
                }
            }
            for &(slot, start) in &dropped {
                open[slot as usize].retain(|(s, _, _)| *s != start);
            }
            self.store(&slots, &open, &dropped)?;
        }
    }
}

impl Operator for WindowOperator {
    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        let mut slots = Slots::default();
        let mut index: FastMap<&[u8], u32> =
            FastMap::with_capacity_and_hasher(input.len(), Default::default());
        for rec in input.iter() {
            let key = rec.key.ok_or_else(|| {
                OperatorError::Contract(format!(
                    "window \"{}\" got a record without a key; key its input (edge = \"key_by\")",
                    self.name
                ))
            })?;
            let state = &self.state;
            index
                .entry(key)
                .or_insert_with(|| slots.push(key, state.key_group(key)));
        }
        let mut open = self.load(&slots)?;
        let mut late = Batch::default();
        for rec in input.iter() {
            let key = rec.key.unwrap_or_default();
            let ts = rec.timestamp.ok_or_else(|| {
                OperatorError::Failed(format!(
                    "window \"{}\" got a record without event time (key {}); give records a \
                     timestamp at the source (event_time) or in an operator before the window",
                    self.name,
                    crate::wasm::describe_bytes(key)
                ))
            })?;
            let x = self.value(rec.value, key)?;
            let slot = index[key];
            let mut counted = false;
            for start in window_starts(ts, self.size, self.step, self.offset) {
                if self.is_late(start) {
                    continue;
                }
                counted = true;
                let windows = &mut open[slot as usize];
                let at = match windows.iter().position(|(s, _, _)| *s == start) {
                    Some(at) => at,
                    None => {
                        windows.push((start, Acc::new(), true));
                        windows.len() - 1
                    }
                };
                let (_, acc, changed) = &mut windows[at];
                acc.add(x);
                *changed = true;
                let acc = *acc;
                let max = self.max_timestamp(start);
                if self.watermark.is_some_and(|w| max <= w) {
                    // It fired already: fire again with this record.
                    self.emit(out, Kind::UpdateAfter, key, start, &acc);
                } else {
                    self.timers.register(TimeDomain::EventTime, max, key);
                }
                let cleanup = max.saturating_add(self.lateness);
                self.timers.register(TimeDomain::EventTime, cleanup, key);
            }
            if !counted {
                late.push(&rec);
            }
        }
        self.store(&slots, &open, &[])?;
        if !late.is_empty() {
            self.side.push((self.spec.late.clone(), late));
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Batch) -> Result<(), OperatorError> {
        self.watermark = Some(watermark);
        self.state.set_watermark(watermark);
        self.fire(watermark, out)
    }

    fn close(&mut self, out: &mut Batch) -> Result<(), OperatorError> {
        self.watermark = Some(i64::MAX);
        self.fire(i64::MAX, out)
    }

    fn snapshot(&mut self, n: u64, snapshot: &mut Snapshot) -> Result<(), OperatorError> {
        snapshot.shared = self
            .state
            .checkpoint(n, snapshot.format, self.timers.iter(), &mut snapshot.bytes)
            .map_err(|e| OperatorError::Failed(format!("snapshot of its state failed: {e}")))?;
        Ok(())
    }

    fn notify_complete(&mut self, n: u64) {
        self.state.notify_complete(n);
    }

    fn restore(&mut self, snapshot: &[u8], shared: &Path) -> Result<(), OperatorError> {
        let timers = &mut self.timers;
        self.state
            .restore_file(snapshot, shared, |(domain, ts, key)| {
                timers.register(domain, ts, key)
            })
            .map_err(|e| OperatorError::Contract(e.to_string()))
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
            size: Duration::from_millis(size),
            slide: slide.map(Duration::from_millis),
            offset: Duration::from_millis(offset),
            allowed_lateness: Duration::ZERO,
            aggregate: Aggregate::Count,
            late: "late".into(),
        }
    }

    fn starts(spec: &WindowSpec, ts: i64) -> Vec<i64> {
        let ms = |d: Duration| d.as_millis() as i64;
        window_starts(ts, ms(spec.size), ms(spec.step()), ms(spec.offset)).collect()
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
    fn bad_windows_are_refused_naming_the_setting() {
        let mut s = spec(WindowKind::Sliding, 1_000, None, 0);
        assert!(s.validate().unwrap_err().contains("needs slide"));
        s.slide = Some(Duration::from_millis(2_000));
        assert!(s.validate().unwrap_err().contains("at most the size"));
        s.size = Duration::from_secs(10);
        s.slide = Some(Duration::from_millis(1));
        assert!(s.validate().unwrap_err().contains("size / slide is 10000"));
        let mut t = spec(WindowKind::Tumbling, 1_000, None, 1_000);
        assert!(t.validate().unwrap_err().contains("offset"));
        t.offset = Duration::ZERO;
        t.slide = Some(Duration::from_secs(1));
        assert!(t.validate().unwrap_err().contains("slide applies"));
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
        .map(|&a| acc.result(a))
        .collect();
        assert_eq!(results, ["3", "9", "1.5", "4.5", "3"]);
    }
}
