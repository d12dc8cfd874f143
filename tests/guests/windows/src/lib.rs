//! Test guest: event time and processing time through user code, as a user writes a window
//! with timers and state. Every output keeps the record's (or timer's) key. Config:
//!
//! - `{ "window_ms": N }`: counts each key's records per tumbling event-time window of `N` ms
//!   (a map state from window start to count, and an event-time timer at the window's last
//!   millisecond) and emits `<start>,<count>` once the watermark passes the window. A record
//!   whose window has fired already goes to the side output `late` as `<timestamp>`.
//! - `{ "processing_ms": N }`: per record, a processing-time timer `N` ms after the current
//!   processing time; emits `pfired <timestamp>` when it fires.
//! - `{ "parse": true }`: a line `key,timestamp[,value]` becomes a record with that key and
//!   event time, and that value (`key` without one).
//! - `{ "number": { "keys": N, "tag": "L" } }`: a record whose value is a number `i` (of the
//!   generator's `sequence`) becomes one with key `k<i mod N>`, its event time `t`, and value
//!   `L<i>@<t>`: records of a few keys, each of them told apart.

use serde::Deserialize;
use weir_sdk::prelude::*;

#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    window_ms: Option<i64>,
    processing_ms: Option<i64>,
    parse: bool,
    number: Option<Number>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Number {
    keys: u64,
    tag: String,
}

#[derive(Default)]
struct Windows {
    config: Config,
}

impl Operator for Windows {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.config = ctx.config()?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        if self.config.parse {
            let line = rec.value_str()?;
            let mut fields = line.split(',');
            let (Some(key), Some(ts)) = (fields.next(), fields.next()) else {
                return Err(Error::msg(format!("not key,timestamp[,value]: {line:?}")));
            };
            let ts: i64 = ts.trim().parse().map_err(Error::new)?;
            let value = fields.next().unwrap_or(key);
            return ctx.emit_record(Kind::Insert, Some(key.as_bytes()), Some(ts), value);
        }
        if let Some(number) = &self.config.number {
            let i: u64 = rec.value_str()?.parse().map_err(Error::new)?;
            let ts = rec
                .timestamp()
                .ok_or_else(|| Error::msg("a record without event time"))?;
            let key = format!("k{}", i % number.keys);
            let value = format!("{}{i}@{ts}", number.tag);
            return ctx.emit_record(Kind::Insert, Some(key.as_bytes()), Some(ts), value);
        }
        if let Some(delay) = self.config.processing_ms {
            ctx.register_processing_time_timer(ctx.current_processing_time() + delay)?;
        }
        if let Some(size) = self.config.window_ms {
            let ts = rec
                .timestamp()
                .ok_or_else(|| Error::msg("a record without event time"))?;
            let start = ts - ts.rem_euclid(size);
            let end = start + size - 1;
            if ctx.current_watermark().is_some_and(|w| end <= w) {
                return ctx.emit_to("late", rec.key(), ts.to_string());
            }
            let counts = ctx.map_state::<i64, u64>("counts");
            let n = counts.get(&start)?.unwrap_or(0) + 1;
            counts.put(&start, &n)?;
            ctx.register_event_timer(end)?;
        }
        Ok(())
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        match timer.domain() {
            TimeDomain::ProcessingTime => ctx.emit_display(
                Some(timer.key()),
                format_args!("pfired {}", timer.timestamp()),
            ),
            TimeDomain::EventTime => {
                let size = self.config.window_ms.unwrap_or(1);
                let start = timer.timestamp() + 1 - size;
                let counts = ctx.map_state::<i64, u64>("counts");
                let n = counts.get(&start)?.unwrap_or(0);
                counts.remove(&start)?;
                ctx.emit_display(Some(timer.key()), format_args!("{start},{n}"))
            }
        }
    }
}

weir_sdk::export!(Windows);
