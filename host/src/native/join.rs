//! Joins in the host: an operator with two keyed inputs, `input` (the left side) and
//! `second_input` (the right side), that pairs records of the same key by event time, as
//! Flink's `intervalJoin(...).between(lower, upper)` and `join(...).window(...)`.
//!
//! - **Interval join**: a left record at `a` and a right one at `b` pair when
//!   `a + lower <= b <= a + upper`. Each side's records wait in a map state (timestamp →
//!   values) until the watermark passes the last time a record of the other side could still
//!   pair with them (`a + upper` for a left record, `b - lower` for a right one), where an
//!   event-time timer drops them. A pair is emitted as soon as its second record arrives,
//!   with the later of the two timestamps.
//! - **Window join** (tumbling or sliding windows): records of both sides wait in a list state
//!   of their key (see `timed`), once however many windows they are in, and when the
//!   watermark passes a window's end every left record in it is paired with every right one,
//!   with the window's last millisecond as timestamp; a record is dropped once the last
//!   window it is in has fired.
//! - **Session window join**: as a window join, over sessions of each key that records of
//!   either side open and extend (`[first, last + gap)`, merging when a record bridges two),
//!   kept in a map state (start → end) with a timer at each session's end; every left record
//!   of a session pairs with every right one of it when the watermark passes its end.
//!
//! A pair's value is `<left value>,<right value>` (window joins: `<start>,<end>,<left
//! value>,<right value>`) with the records' key. A record at or before the watermark when
//! it arrives is late (for a window join: when every window it falls into has fired): it
//! pairs with nothing and goes to the side output `late`, where it is counted if nothing reads
//! it. The records waiting and their timers live in the job's state backend, so RocksDB,
//! checkpoints, restores and rescaling work as for any operator.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use weir_wire::{Kind, MapLoad, MapOp, Reader, TimeDomain, put_bytes, put_map_op, read_map_load};

use super::timed::{self, Appends, Waiting};
use super::window::window_starts;
use super::{failed, keyed_slots, restore_state, snapshot_state};
use crate::batch::Batch;
use crate::operator::{Operator, OperatorContext, OperatorError, Snapshot};
use crate::state::{FastMap, KeyedState, Slots, StateId, StateKind, StateSetup};

/// `join = { ... }` of an operator with `input` and `second_input`, both keyed.
///
/// ```toml
/// join = { type = "interval", lower = "-5m", upper = "15m" }   # b - a in [-5m, 15m]
/// join = { type = "tumbling", size = "1m" }
/// join = { type = "sliding", size = "10m", slide = "1m", late = "too_late" }
/// join = { type = "session", gap = "30s" }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinSpec {
    /// `interval`, `tumbling`, `sliding` or `session`.
    #[serde(rename = "type")]
    pub kind: JoinKind,
    /// Interval joins: the least `b - a` of a pair (a signed duration, `"-15m"`), in ms.
    #[serde(default, deserialize_with = "signed_ms")]
    pub lower: Option<i64>,
    /// Interval joins: the greatest `b - a` of a pair, in ms.
    #[serde(default, deserialize_with = "signed_ms")]
    pub upper: Option<i64>,
    /// Window joins: the length of a window.
    #[serde(default, with = "humantime_serde")]
    pub size: Option<Duration>,
    /// Sliding window joins: how far apart windows start.
    #[serde(default, with = "humantime_serde")]
    pub slide: Option<Duration>,
    /// Window joins: shifts the windows' starts from multiples of the size (or slide).
    #[serde(default, with = "humantime_serde")]
    pub offset: Duration,
    /// Session window joins: records of a key no more than this apart share a session.
    #[serde(default, with = "humantime_serde")]
    pub gap: Option<Duration>,
    /// The side output that gets late records of either side (default `late`).
    #[serde(default = "default_late")]
    pub late: String,
}

/// How a join pairs records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinKind {
    /// Pairs whose timestamps are within `[lower, upper]` of each other.
    Interval,
    /// Pairs in the same tumbling window.
    Tumbling,
    /// Pairs in the same sliding window (a pair in several windows is emitted for each).
    Sliding,
    /// Pairs in the same session of their key.
    Session,
}

fn default_late() -> String {
    "late".into()
}

/// A duration with an optional sign, `"-15m"`, in milliseconds.
fn signed_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    let text = String::deserialize(d)?;
    let (negative, magnitude) = match text.trim().strip_prefix('-') {
        Some(rest) => (true, rest.trim()),
        None => (false, text.trim()),
    };
    let ms = humantime::parse_duration(magnitude)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .ok_or_else(|| {
            D::Error::custom(format!(
                "\"{text}\" is not a duration; write one such as \"-15m\", \"0s\" or \"30s\""
            ))
        })?;
    Ok(Some(if negative { -ms } else { ms }))
}

impl JoinSpec {
    /// Checks the settings; the error names the one at fault.
    pub fn validate(&self) -> Result<(), String> {
        let unused = |what: &str, set: bool| super::window::not_for(self.kind.name(), what, set);
        match self.kind {
            JoinKind::Interval => {
                unused("size", self.size.is_some())?;
                unused("slide", self.slide.is_some())?;
                unused("offset", !self.offset.is_zero())?;
                unused("gap", self.gap.is_some())?;
                let (Some(lower), Some(upper)) = (self.lower, self.upper) else {
                    return Err(
                        "an interval join needs lower = \"...\" and upper = \"...\": \
                         a right record at b pairs with a left one at a when \
                         a + lower <= b <= a + upper (e.g. lower = \"-5m\", upper = \"15m\")"
                            .into(),
                    );
                };
                if lower > upper {
                    return Err(format!(
                        "lower ({lower} ms) is above upper ({upper} ms): no pair would match"
                    ));
                }
            }
            JoinKind::Tumbling | JoinKind::Sliding | JoinKind::Session => {
                unused("lower", self.lower.is_some())?;
                unused("upper", self.upper.is_some())?;
                // The same rules as a window of the same layout.
                super::window::WindowSpec {
                    kind: match self.kind {
                        JoinKind::Tumbling => super::window::WindowKind::Tumbling,
                        JoinKind::Sliding => super::window::WindowKind::Sliding,
                        _ => super::window::WindowKind::Session,
                    },
                    size: self.size,
                    slide: self.slide,
                    gap: self.gap,
                    offset: self.offset,
                    allowed_lateness: Duration::ZERO,
                    aggregate: Some(super::window::Aggregate::Count),
                    function: None,
                    code: None,
                    late: self.late.clone(),
                    time: super::window::WindowTime::Event,
                }
                .validate()?;
            }
        }
        if self.late.is_empty() {
            return Err("late must name a side output".into());
        }
        Ok(())
    }
}

impl JoinKind {
    fn name(self) -> &'static str {
        match self {
            JoinKind::Interval => "interval",
            JoinKind::Tumbling => "tumbling",
            JoinKind::Sliding => "sliding",
            JoinKind::Session => "session",
        }
    }
}

/// A map key of the join's states: a time (a record's timestamp, a window's start) whose
/// bytes sort as the numbers do.
fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn key_time(b: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// The values of one map entry: `bytes` one after another.
fn values(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut r = Reader::new(list, "join state");
    std::iter::from_fn(move || (!r.is_empty()).then(|| r.bytes().ok()).flatten())
}

/// One key's entries of one side, by time, borrowed from a load.
type Entries<'b> = Vec<(i64, &'b [u8])>;

/// The join operator of one subtask.
pub(crate) struct JoinOperator {
    spec: JoinSpec,
    name: String,
    state: KeyedState,
    /// Each side's waiting records of an interval join, by timestamp (a window join's, by
    /// window start, in checkpoints of an earlier layout).
    sides: [StateId; 2],
    /// Each side's waiting records of a window join.
    records: Option<[StateId; 2]>,
    /// A session window join's sessions: start → end (exclusive), by key.
    sessions: Option<StateId>,
    watermark: Option<i64>,
    lower: i64,
    upper: i64,
    size: i64,
    step: i64,
    offset: i64,
    gap: i64,
    side: Vec<(String, Batch)>,
    /// The slot index of `process` and each record's slot, kept between batches (taken for
    /// a batch and put back after it).
    slots: Slots,
    record_slots: Vec<u32>,
}

pub(crate) fn build(
    spec: &JoinSpec,
    ctx: &OperatorContext,
    setup: &StateSetup,
) -> Result<Box<dyn Operator>, OperatorError> {
    let (mut state, left) = super::keyed_state(ctx, setup, "left", StateKind::Map)?;
    let mut declare = |name, kind| {
        (state.declare(name, kind, None)).map_err(|e| OperatorError::Contract(e.to_string()))
    };
    let right = declare("right", StateKind::Map)?;
    let records = match spec.kind {
        JoinKind::Interval => None,
        _ => Some([
            declare("left_records", StateKind::List)?,
            declare("right_records", StateKind::List)?,
        ]),
    };
    let sessions = match spec.kind {
        JoinKind::Session => Some(declare("sessions", StateKind::Map)?),
        _ => None,
    };
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(Box::new(JoinOperator {
        name: ctx.uid.clone(),
        state,
        sides: [left, right],
        records,
        sessions,
        watermark: None,
        lower: spec.lower.unwrap_or(0),
        upper: spec.upper.unwrap_or(0),
        size: spec.size.map_or(0, ms),
        step: spec.slide.or(spec.size).map_or(0, ms),
        offset: ms(spec.offset),
        gap: spec.gap.map_or(0, ms),
        side: Vec::new(),
        slots: Slots::default(),
        record_slots: Vec::new(),
        spec: spec.clone(),
    }))
}

impl JoinOperator {
    fn is_late(&self, t: i64) -> bool {
        self.watermark.is_some_and(|w| t <= w)
    }

    /// Every slot's entries of side `s`, by time, borrowed from `buf`.
    fn load<'b>(
        &mut self,
        id: StateId,
        slots: &Slots,
        buf: &'b mut Vec<u8>,
    ) -> Result<Vec<Entries<'b>>, OperatorError> {
        self.state
            .load(id, slots, usize::MAX, buf)
            .map_err(failed)?;
        let bad = |e: weir_wire::DecodeError| OperatorError::Contract(e.to_string());
        let mut r = Reader::new(buf, "join state");
        let mut all = Vec::with_capacity(slots.len());
        for _ in 0..slots.len() {
            let MapLoad::Whole(n) = read_map_load(&mut r).map_err(bad)? else {
                return Err(OperatorError::Contract("a map sent in parts".into()));
            };
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let (k, v) = (r.bytes().map_err(bad)?, r.bytes().map_err(bad)?);
                let t = key_time(k).ok_or_else(|| {
                    OperatorError::Contract("a join entry of another layout".into())
                })?;
                entries.push((t, v));
            }
            entries.sort_unstable_by_key(|&(t, _)| t);
            all.push(entries);
        }
        Ok(all)
    }

    /// Adds `value` to the waiting values of side `s` at time `t` of `slot`'s key, as the
    /// batch left them; a new entry gets its timer at `timer`.
    fn wait(
        &mut self,
        pending: &mut FastMap<(u32, i64), Vec<u8>>,
        (s, slots): (usize, &Slots),
        (slot, t): (u32, i64),
        (value, timer): (&[u8], i64),
    ) -> Result<(), OperatorError> {
        let values = match pending.entry((slot, t)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let stored = (self.state)
                    .map_get(self.sides[s], slots, slot, &time_key(t))
                    .map_err(failed)?;
                if stored.is_none() {
                    (self.state)
                        .register_timer(TimeDomain::EventTime, timer, slots.key(slot as usize))
                        .map_err(OperatorError::timers)?;
                }
                e.insert(stored.unwrap_or_default())
            }
        };
        put_bytes(values, value);
        Ok(())
    }

    fn emit_pair(
        &self,
        out: &mut Batch,
        key: &[u8],
        ts: i64,
        window: Option<(i64, i64)>,
        left: &[u8],
        right: &[u8],
    ) {
        out.push_with(Kind::Insert, Some(key), Some(ts), |b| {
            if let Some((start, end)) = window {
                use std::io::Write;
                let _ = write!(b, "{start},{end},");
            }
            b.extend_from_slice(left);
            b.push(b',');
            b.extend_from_slice(right);
        });
    }

    /// Pops the timers due at `upto`, at most a batch's worth, into `slots`.
    fn due(&mut self, upto: i64, slots: &mut Slots) -> Result<Vec<(i64, u32)>, OperatorError> {
        let mut due = Vec::new();
        while due.len() < crate::batch::BATCH_RECORDS
            && let Some((t, key)) = (self.state)
                .pop_timer(TimeDomain::EventTime, upto)
                .map_err(OperatorError::timers)?
        {
            let state = &self.state;
            due.push((t, slots.slot_of(&key, || state.key_group(&key)).0));
        }
        Ok(due)
    }

    /// Fires the timers due at `upto`: drops the records no later record can pair with, and
    /// (window joins) emits the pairs of the windows that end.
    fn fire(&mut self, upto: i64, out: &mut Batch) -> Result<(), OperatorError> {
        loop {
            let mut slots = Slots::default();
            let due = self.due(upto, &mut slots)?;
            if due.is_empty() {
                return Ok(());
            }
            let mut bufs: [Vec<u8>; 2] = Default::default();
            let waiting: [Vec<Waiting>; 2] = match self.records {
                Some(ids) => {
                    let [l, r] = &mut bufs;
                    [
                        timed::load(&mut self.state, ids[0], &slots, l)?,
                        timed::load(&mut self.state, ids[1], &slots, r)?,
                    ]
                }
                None => Default::default(),
            };
            let mut sessions = match self.sessions {
                Some(id) => Some(self.load_sessions(id, &slots)?),
                None => None,
            };
            // The latest window end fired per key (window joins).
            let mut fired: FastMap<u32, i64> = FastMap::default();
            let mut removed: [Vec<u8>; 2] = Default::default();
            for &(t, slot) in &due {
                if self.spec.kind == JoinKind::Interval {
                    // Left records at t - upper and right ones at t + lower are done.
                    let times = [t.saturating_sub(self.upper), t.saturating_add(self.lower)];
                    for (s, time) in times.into_iter().enumerate() {
                        put_map_op(&mut removed[s], slot, MapOp::Remove(&time_key(time)));
                    }
                    continue;
                }
                let start = match &mut sessions {
                    Some(sessions) => {
                        let open = &mut sessions[slot as usize];
                        match open.iter().position(|&(_, end)| end - 1 == t) {
                            Some(at) => open.remove(at).0,
                            None => continue,
                        }
                    }
                    None => t + 1 - self.size,
                };
                // A window's records its map entry keeps, from a checkpoint of an earlier
                // layout (tumbling and sliding windows).
                let mut entries: [Vec<u8>; 2] = Default::default();
                if sessions.is_none() {
                    for (s, entry) in entries.iter_mut().enumerate() {
                        let k = time_key(start);
                        if let Some(v) = (self.state)
                            .map_get(self.sides[s], &slots, slot, &k)
                            .map_err(failed)?
                        {
                            *entry = v;
                            put_map_op(&mut removed[s], slot, MapOp::Remove(&k));
                        }
                    }
                }
                let side = |s: usize| {
                    let records = &waiting[s][slot as usize];
                    (values(&entries[s])).chain(
                        (records.iter())
                            .filter(move |&&(ts, _)| start <= ts && ts <= t)
                            .map(|&(_, e)| timed::value(e)),
                    )
                };
                let key = slots.key(slot as usize);
                for l in side(0) {
                    for r in side(1) {
                        self.emit_pair(out, key, t, Some((start, t + 1)), l, r);
                    }
                }
                let last = fired.entry(slot).or_insert(t);
                *last = (*last).max(t);
            }
            if let Some(ids) = self.records {
                // A record whose last window fired waits no more.
                let waits = |slot: u32, ts: i64| match &sessions {
                    Some(sessions) => {
                        (sessions[slot as usize].iter()).any(|&(a, b)| a <= ts && ts < b)
                    }
                    None => self.last_window_end(ts) > fired[&slot],
                };
                let mut changes: [Vec<u8>; 2] = Default::default();
                for (s, changes) in changes.iter_mut().enumerate() {
                    for &slot in fired.keys() {
                        timed::retain(changes, slot, &waiting[s][slot as usize], |ts| {
                            waits(slot, ts)
                        });
                    }
                }
                for (id, changes) in ids.into_iter().zip(&changes) {
                    timed::store_changes(&mut self.state, id, &slots, changes)?;
                }
            }
            if let (Some(id), Some(sessions)) = (self.sessions, &sessions) {
                self.store_sessions(id, &slots, sessions, fired.keys().copied())?;
            }
            for (s, changes) in removed.iter().enumerate() {
                if !changes.is_empty() {
                    (self.state)
                        .store(self.sides[s], &slots, changes, u64::MAX)
                        .map_err(failed)?;
                }
            }
        }
    }

    /// The last millisecond of the last window a record at `ts` is in (window joins).
    fn last_window_end(&self, ts: i64) -> i64 {
        (window_starts(ts, self.size, self.step, self.offset).next())
            .map_or(i64::MIN, |start| start.saturating_add(self.size) - 1)
    }

    /// Each slot's sessions, `(start, end)` with `end` exclusive, in start order.
    fn load_sessions(
        &mut self,
        id: StateId,
        slots: &Slots,
    ) -> Result<Vec<Vec<(i64, i64)>>, OperatorError> {
        let mut buf = Vec::new();
        let corrupt = || OperatorError::Contract("a session of another layout".into());
        (self.load(id, slots, &mut buf)?.into_iter())
            .map(|entries| {
                (entries.into_iter())
                    .map(|(start, end)| {
                        let end = end.try_into().map_err(|_| corrupt())?;
                        Ok((start, i64::from_le_bytes(end)))
                    })
                    .collect()
            })
            .collect()
    }

    /// Writes the sessions of the slots `touched` whole.
    fn store_sessions(
        &mut self,
        id: StateId,
        slots: &Slots,
        sessions: &[Vec<(i64, i64)>],
        touched: impl Iterator<Item = u32>,
    ) -> Result<(), OperatorError> {
        let mut changes = Vec::new();
        for slot in touched {
            put_map_op(&mut changes, slot, MapOp::Clear);
            for &(start, end) in &sessions[slot as usize] {
                let op = MapOp::Put(&time_key(start), &end.to_le_bytes());
                put_map_op(&mut changes, slot, op);
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        (self.state)
            .store(id, slots, &changes, u64::MAX)
            .map_err(failed)
    }

    /// Adds a record at `ts` of `key` to `open`, its key's sessions: its own `[ts, ts + gap)`
    /// merged with every session it overlaps or touches, whose timers make way for the merged
    /// session's. Returns whether the sessions changed (not for a record inside one), or
    /// `None` (changing nothing) when the merged session has fired: the record is late.
    fn add_to_session(
        &mut self,
        open: &mut Vec<(i64, i64)>,
        ts: i64,
        key: &[u8],
    ) -> Result<Option<bool>, OperatorError> {
        let own = (ts, ts.saturating_add(self.gap));
        let touches = |&(a, b): &(i64, i64)| a <= own.1 && b >= own.0;
        let (mut start, mut end) = own;
        for &(a, b) in open.iter().filter(|s| touches(s)) {
            (start, end) = (start.min(a), end.max(b));
        }
        if self.is_late(end - 1) {
            return Ok(None);
        }
        // Sessions neither overlap nor touch: only the session it lies in can equal the merge.
        if open.contains(&(start, end)) {
            return Ok(Some(false));
        }
        for &(_, b) in open.iter().filter(|s| touches(s)) {
            (self.state)
                .delete_timer(TimeDomain::EventTime, b - 1, key)
                .map_err(OperatorError::timers)?;
        }
        open.retain(|s| !touches(s));
        open.push((start, end));
        open.sort_unstable();
        (self.state)
            .register_timer(TimeDomain::EventTime, end - 1, key)
            .map_err(OperatorError::timers)?;
        Ok(Some(true))
    }
}

impl Operator for JoinOperator {
    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        self.process_input(0, input, out)
    }

    fn process_input(
        &mut self,
        which: u8,
        input: &Batch,
        out: &mut Batch,
    ) -> Result<(), OperatorError> {
        let s = usize::from(which.min(1));
        let (mut slots, mut record_slots) = (
            std::mem::take(&mut self.slots),
            std::mem::take(&mut self.record_slots),
        );
        keyed_slots(
            &self.state,
            input,
            &mut slots,
            &mut record_slots,
            ("join", &self.name),
        )?;
        // An interval join pairs with the other side's records as they are.
        let mut buf = Vec::new();
        let others = match self.spec.kind {
            JoinKind::Interval => self.load(self.sides[1 - s], &slots, &mut buf)?,
            _ => Vec::new(),
        };
        let mut pending: FastMap<(u32, i64), Vec<u8>> = FastMap::default();
        // Window joins: the records to wait, and the windows whose timers are registered.
        let mut appends = Appends::default();
        let mut timers: FastMap<(u32, i64), ()> = FastMap::default();
        let mut sessions = match self.sessions {
            Some(id) => Some(self.load_sessions(id, &slots)?),
            None => None,
        };
        let mut touched = vec![false; slots.len()];
        let mut late = Batch::default();
        for (rec, &slot) in input.iter().zip(&record_slots) {
            let key = rec.key.unwrap_or_default();
            let ts = rec.timestamp.ok_or_else(|| {
                OperatorError::Failed(format!(
                    "join \"{}\" got a record without event time (key {}); give records a \
                     timestamp at the source (event_time) or in an operator before the join",
                    self.name,
                    crate::wasm::describe_bytes(key)
                ))
            })?;
            let mut kept = false;
            if self.spec.kind == JoinKind::Interval {
                if self.is_late(ts) {
                    late.push(&rec);
                    continue;
                }
                // A left record pairs with right ones in [a + lower, a + upper]; a right one
                // with left ones in [b - upper, b - lower].
                let (from, to) = match s {
                    0 => (ts.saturating_add(self.lower), ts.saturating_add(self.upper)),
                    _ => (ts.saturating_sub(self.upper), ts.saturating_sub(self.lower)),
                };
                let other = &others[slot as usize];
                let first = other.partition_point(|&(t, _)| t < from);
                for &(t, list) in other[first..].iter().take_while(|&&(t, _)| t <= to) {
                    for v in values(list) {
                        let (l, r) = if s == 0 {
                            (rec.value, v)
                        } else {
                            (v, rec.value)
                        };
                        self.emit_pair(out, key, ts.max(t), None, l, r);
                    }
                }
                // It waits for the other side's records until the watermark passes the last
                // time one could pair with it.
                let until = match s {
                    0 => ts.saturating_add(self.upper),
                    _ => ts.saturating_sub(self.lower),
                };
                if !self.is_late(until) {
                    self.wait(&mut pending, (s, &slots), (slot, ts), (rec.value, until))?;
                }
                continue;
            }
            if let Some(sessions) = &mut sessions {
                match self.add_to_session(&mut sessions[slot as usize], ts, key)? {
                    Some(changed) => {
                        touched[slot as usize] |= changed;
                        appends.push(slot, ts, rec.value);
                    }
                    None => late.push(&rec),
                }
                continue;
            }
            for start in window_starts(ts, self.size, self.step, self.offset) {
                let last = start.saturating_add(self.size) - 1;
                if self.is_late(last) {
                    continue;
                }
                kept = true;
                // Once per window and batch (registering a timer again changes nothing).
                if timers.insert((slot, last), ()).is_none() {
                    (self.state)
                        .register_timer(TimeDomain::EventTime, last, key)
                        .map_err(OperatorError::timers)?;
                }
            }
            match kept {
                true => appends.push(slot, ts, rec.value),
                false => late.push(&rec),
            }
        }
        if let Some(ids) = self.records {
            appends.store(&mut self.state, ids[s], &slots)?;
        }
        if let (Some(id), Some(sessions)) = (self.sessions, &sessions) {
            let written = (0..slots.len() as u32).filter(|&slot| touched[slot as usize]);
            self.store_sessions(id, &slots, sessions, written)?;
        }
        let mut changes = Vec::new();
        for ((slot, t), list) in &pending {
            put_map_op(&mut changes, *slot, MapOp::Put(&time_key(*t), list));
        }
        if !changes.is_empty() {
            (self.state)
                .store(self.sides[s], &slots, &changes, u64::MAX)
                .map_err(failed)?;
        }
        if !late.is_empty() {
            self.side.push((self.spec.late.clone(), late));
        }
        (self.slots, self.record_slots) = (slots, record_slots);
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Batch) -> Result<bool, OperatorError> {
        self.state.set_watermark(watermark);
        self.watermark = Some(watermark);
        self.fire(watermark, out).map(|()| false)
    }

    fn restore_watermark(&mut self, watermark: i64) {
        self.state.set_watermark(watermark);
        self.watermark = Some(watermark);
    }

    fn close(&mut self, out: &mut Batch) -> Result<bool, OperatorError> {
        self.watermark = Some(i64::MAX);
        self.fire(i64::MAX, out).map(|()| false)
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

    fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        std::mem::take(&mut self.side)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::SnapshotFormat;

    fn setup(dir: &Path) -> StateSetup {
        StateSetup {
            config: crate::state::StateConfig::default(),
            root: dir.to_path_buf(),
            clock: crate::clock::Clock::system(),
        }
    }

    fn join(spec: &str, dir: &Path) -> Box<dyn Operator> {
        let spec: JoinSpec = toml::from_str(spec).unwrap();
        build(&spec, &super::super::test_context(), &setup(dir)).unwrap()
    }

    fn batch(records: &[(&str, i64, &str)]) -> Batch {
        let mut b = Batch::default();
        for (key, ts, value) in records {
            b.push_with(Kind::Insert, Some(key.as_bytes()), Some(*ts), |b| {
                b.extend_from_slice(value.as_bytes())
            });
        }
        b
    }

    /// `key @timestamp value` of each record, sorted.
    fn text(out: &Batch) -> Vec<String> {
        let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let mut lines: Vec<String> = (out.iter())
            .map(|r| {
                format!(
                    "{} @{} {}",
                    s(r.key.unwrap()),
                    r.timestamp.unwrap(),
                    s(r.value)
                )
            })
            .collect();
        lines.sort();
        lines
    }

    /// A waiting record's element as [`stored`] shows it.
    fn element(ts: i64, value: &str) -> String {
        format!("{:?}", [&ts.to_le_bytes()[..], value.as_bytes()].concat())
    }

    /// The join's keyed state as a snapshot of it restores: `(state, key, entries)`.
    fn stored(op: &mut dyn Operator, dir: &Path) -> Vec<(String, String, String)> {
        let mut snapshot = Snapshot {
            format: SnapshotFormat::Canonical,
            bytes: Vec::new(),
            key_groups: 0..128,
            shared: None,
        };
        op.snapshot(1, &mut snapshot).unwrap();
        let ctx = super::super::test_context();
        let (mut state, _) =
            super::super::keyed_state(&ctx, &setup(dir), "left", StateKind::Map).unwrap();
        for (name, kind) in [
            ("right", StateKind::Map),
            ("left_records", StateKind::List),
            ("right_records", StateKind::List),
            ("sessions", StateKind::Map),
        ] {
            state.declare(name, kind, None).unwrap();
        }
        restore_state(&mut state, &snapshot.bytes, dir).unwrap();
        (state.dump().into_iter())
            .map(|(name, key, rows)| (name, String::from_utf8(key).unwrap(), rows))
            .collect()
    }

    #[test]
    fn a_window_join_pairs_each_windows_records_and_keeps_none_past_its_last_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut op = join(
            "type = \"sliding\"\nsize = \"200ms\"\nslide = \"100ms\"",
            dir.path(),
        );
        let mut out = Batch::default();
        let left = batch(&[("a", 50, "l1"), ("a", 150, "l2")]);
        op.process_input(0, &left, &mut out).unwrap();
        let right = batch(&[("a", 120, "r1"), ("b", 60, "rb")]);
        op.process_input(1, &right, &mut out).unwrap();
        op.on_watermark(199, &mut out).unwrap();
        assert_eq!(text(&out), ["a @199 0,200,l1,r1", "a @199 0,200,l2,r1"]);
        // l1 and rb were in no window still open; l2 and r1 are in [100, 300).
        let row = |name: &str, e| (name.to_string(), "a".to_string(), e);
        assert_eq!(
            stored(op.as_mut(), dir.path()),
            [
                row("left_records", element(150, "l2")),
                row("right_records", element(120, "r1"))
            ]
        );
        let mut out = Batch::default();
        op.on_watermark(299, &mut out).unwrap();
        assert_eq!(text(&out), ["a @299 100,300,l2,r1"]);
        assert_eq!(stored(op.as_mut(), dir.path()), []);
    }

    #[test]
    fn a_session_join_pairs_the_records_of_each_session_either_side_opens() {
        let dir = tempfile::tempdir().unwrap();
        let mut op = join("type = \"session\"\ngap = \"100ms\"", dir.path());
        let mut out = Batch::default();
        // a: l1 and l2 open two sessions, [0, 100) and [150, 250); r1 bridges them into
        // [0, 250). r2 opens [400, 500); b's session has no left record.
        let left = batch(&[("a", 0, "l1"), ("a", 150, "l2")]);
        op.process_input(0, &left, &mut out).unwrap();
        let right = batch(&[("a", 80, "r1"), ("a", 400, "r2"), ("b", 10, "rb")]);
        op.process_input(1, &right, &mut out).unwrap();
        op.on_watermark(249, &mut out).unwrap();
        assert_eq!(text(&out), ["a @249 0,250,l1,r1", "a @249 0,250,l2,r1"]);
        let session =
            |start: i64, end: i64| format!("{:?}={:?}", time_key(start), end.to_le_bytes());
        let row = |name: &str, key: &str, e| (name.to_string(), key.to_string(), e);
        assert_eq!(
            stored(op.as_mut(), dir.path()),
            [
                row("right_records", "a", element(400, "r2")),
                row("sessions", "a", session(400, 500))
            ]
        );
        // l3's session [300, 400) touches r2's and has not fired; one at 100 has.
        let mut out = Batch::default();
        let left = batch(&[("a", 300, "l3"), ("a", 100, "too late")]);
        op.process_input(0, &left, &mut out).unwrap();
        op.on_watermark(499, &mut out).unwrap();
        assert_eq!(text(&out), ["a @499 300,500,l3,r2"]);
        let late: Vec<String> = (op.take_side_outputs().iter())
            .flat_map(|(name, b)| text(b).into_iter().map(move |r| format!("{name}: {r}")))
            .collect();
        assert_eq!(late, ["late: a @100 too late"]);
        assert_eq!(stored(op.as_mut(), dir.path()), []);
    }

    #[test]
    fn a_window_joins_records_in_a_checkpoint_of_the_earlier_layout_still_pair() {
        // That layout kept a window's records in a map entry under its start, with the
        // window's timer.
        let dir = tempfile::tempdir().unwrap();
        let ctx = super::super::test_context();
        let (mut state, left) =
            super::super::keyed_state(&ctx, &setup(dir.path()), "left", StateKind::Map).unwrap();
        let right = state.declare("right", StateKind::Map, None).unwrap();
        let mut slots = Slots::default();
        slots.push(b"a", state.key_group(b"a"));
        for (id, value) in [(left, "old-l"), (right, "old-r")] {
            let (mut entry, mut changes) = (Vec::new(), Vec::new());
            put_bytes(&mut entry, value.as_bytes());
            put_map_op(&mut changes, 0, MapOp::Put(&time_key(0), &entry));
            state.store(id, &slots, &changes, u64::MAX).unwrap();
        }
        state
            .register_timer(TimeDomain::EventTime, 99, b"a")
            .unwrap();
        let mut snapshot = Snapshot {
            format: SnapshotFormat::Canonical,
            bytes: Vec::new(),
            key_groups: 0..128,
            shared: None,
        };
        snapshot_state(&mut state, 1, &mut snapshot).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let mut op = join("type = \"tumbling\"\nsize = \"100ms\"", dir.path());
        op.restore(&snapshot.bytes, dir.path()).unwrap();
        let mut out = Batch::default();
        let right = batch(&[("a", 20, "new-r")]);
        op.process_input(1, &right, &mut out).unwrap();
        op.on_watermark(99, &mut out).unwrap();
        assert_eq!(
            text(&out),
            ["a @99 0,100,old-l,new-r", "a @99 0,100,old-l,old-r"]
        );
        assert_eq!(stored(op.as_mut(), dir.path()), []);
    }
}
