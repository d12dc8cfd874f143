//! Test guest: passes records through, and misbehaves on command. The host's sandbox must stop
//! each misbehaviour with an error naming what happened, or deny the access inside the guest.
//!
//! | record | what the guest does |
//! |---|---|
//! | `spin` | loops forever |
//! | `hog` | allocates 16 MiB after 16 MiB without end |
//! | `recurse` | recurses until its stack overflows |
//! | `flood N` | emits N records in this one call |
//! | `big-state N` | writes a value of N bytes into state "big": keyed value state for a keyed record, else operator state |
//! | `trap-until T` | panics while the processing time is before `T` (Unix ms) |
//! | `read-file P` | emits `ok <first line>` or `err <error>` |
//! | `write-file P` | creates `P`; emits `ok` or `err <error>` |
//! | `connect A` | opens a TCP connection to `A`; emits `ok` or `err <error>` |
//! | `env N` | emits `ok <value>` of environment variable `N` or `err <error>` |
//! | `print T` | writes `T` to stdout and to stderr, then passes the record through |
//! | `kind K V` | emits `V` with changelog kind `K` (`+I`, `-U`, `+U`, `-D`) and the record's key |
//! | `keyvalue K` | calls `wasi:keyvalue/store`, which the host does not provide |
//! | `sleep MS` | sleeps `MS` milliseconds (a WASI clock subscription), then passes it through |
//! | `side-names N` | emits one record to each of `N` side outputs `s0`, `s1`, ... |
//! | `side-flood N` | emits `N` records to side output `late` |
//! | `op-units N` | sets operator list state `units` to `N` elements of one byte |
//! | `leak-side N` | leaks `N` bytes of linear memory and emits `leaked N` to side output `late` |
//! | `states N` | declares `N` value states `s0`, `s1`, ... and reads each |
//! | `timers N` | registers `N` event-time timers, at 1, 2, ..., for the record's key |
//! | `rearm` | registers an event-time timer at 0 whose callback registers it again, forever |
//! | `fill N` | adds `N` elements of 1 KiB to list state `fill` of the record's key |
//! | `forge` | logs, prints and fails with text that would forge log lines and terminal colours |
//! | `err-big N` | fails with an error text of `N` bytes |
//! | `write-back S` | writes back a value of the record's key into value state `S` through the raw `key-ids` and `store-ids` imports, and one of a key id the host never gave (`S` = `ttl`: a state with a TTL) |
//!
//! With `config = { spin_in_open = true }` the guest loops forever in `open`; with
//! `sleep_in_open = true` it sleeps forever there. With `timer_bytes = N` each timer that fires
//! emits a value of `N` bytes rather than `fired T`.

/// Text that, printed raw, would start a line of its own that looks like one of weir's, and
/// colour the terminal red.
const FORGED: &str =
    "ok\n2026-01-01T00:00:00.000000Z ERROR forged line\x1b[31m red \u{202e}desrever";

use std::hint::black_box;
use std::io::{BufRead, Write};

use serde::Deserialize;
use weir_sdk::prelude::*;

// `wasi:keyvalue`, one of the standard WASI packages weir knows but does not provide (as
// `wasi:http`, which JavaScript guests import by default): the host must load the component
// and fail only a call of the import.
#[allow(unsafe_code, missing_docs, clippy::all)]
mod keyvalue {
    wit_bindgen::generate!({
        inline: "package wasi:keyvalue@0.2.0-draft;
                 interface store { get: func(key: string) -> string; }
                 world client { import store; }",
        world: "client",
    });
}

#[derive(Default)]
struct Hostile {
    /// With `trap_after_ms`: the processing time of the first record.
    first: Option<i64>,
    trap_after_ms: Option<i64>,
    timer_bytes: usize,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Config {
    spin_in_open: bool,
    sleep_in_open: bool,
    /// Panics on the first record this long after the first record it processed.
    trap_after_ms: Option<i64>,
    timer_bytes: usize,
}

fn spin() -> ! {
    loop {
        black_box(());
    }
}

/// Recurses on the wasm stack (two calls per frame, so that it cannot become a loop) until
/// the stack overflows; `depth` never reaches the end.
fn recurse(depth: u64) -> u64 {
    if depth == u64::MAX {
        return depth;
    }
    recurse(depth + 1) ^ recurse(depth + 2).rotate_left(1)
}

/// `ok <what>` or `err <error>`.
fn outcome<T: std::fmt::Display, E: std::fmt::Display>(result: Result<T, E>) -> String {
    match result {
        Ok(v) => format!("ok {v}"),
        Err(e) => format!("err {e}"),
    }
}

impl Operator for Hostile {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        let config = ctx.config::<Config>()?;
        self.trap_after_ms = config.trap_after_ms;
        self.timer_bytes = config.timer_bytes;
        if config.spin_in_open {
            spin();
        }
        if config.sleep_in_open {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        if let Some(after) = self.trap_after_ms {
            let now = ctx.current_processing_time();
            if now - *self.first.get_or_insert(now) >= after {
                panic!("trapping {after} ms after the first record");
            }
        }
        let text = std::str::from_utf8(rec.value())?;
        let (command, arg) = text.split_once(' ').unwrap_or((text, ""));
        let reply = match command {
            "spin" => spin(),
            "hog" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 16 << 20]);
                    black_box(&hoard);
                }
            }
            "recurse" => format!("depth {}", recurse(black_box(0))),
            "flood" => {
                for i in 0..arg.parse::<u64>()? {
                    ctx.emit_display(rec.key(), i)?;
                }
                return Ok(());
            }
            "big-state" => {
                let value = "x".repeat(arg.parse()?);
                match rec.key() {
                    Some(_) => ctx.value_state::<String>("big").set(&value)?,
                    None => ctx.operator_state::<String>("big").set(&value)?,
                }
                "ok".to_owned()
            }
            "trap-until" => {
                let until: i64 = arg.parse()?;
                if ctx.current_processing_time() < until {
                    panic!("transient failure until {until}");
                }
                text.to_owned()
            }
            "read-file" => outcome(std::fs::File::open(arg).and_then(|f| {
                let mut line = String::new();
                std::io::BufReader::new(f).read_line(&mut line)?;
                Ok(line.trim_end().to_owned())
            })),
            "write-file" => outcome(
                std::fs::File::create(arg)
                    .and_then(|mut f| f.write_all(b"written by a guest"))
                    .map(|()| ""),
            ),
            "connect" => outcome(std::net::TcpStream::connect(arg).map(|_| "")),
            "env" => outcome(std::env::var(arg)),
            "kind" => {
                // `kind K V`: V with changelog kind K (+I, -U, +U, -D), keeping the key.
                let (kind, value) = arg.split_once(' ').unwrap_or((arg, ""));
                let kind = match kind {
                    "+I" => Kind::Insert,
                    "-U" => Kind::UpdateBefore,
                    "+U" => Kind::UpdateAfter,
                    "-D" => Kind::Delete,
                    other => return Err(Error::msg(format!("unknown kind {other}"))),
                };
                return ctx.emit_record(kind, rec.key(), None, value);
            }
            "keyvalue" => keyvalue::wasi::keyvalue::store::get(arg),
            "print" => {
                println!("{arg}");
                eprintln!("{arg}");
                text.to_owned()
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_millis(arg.parse()?));
                text.to_owned()
            }
            "side-names" => {
                for i in 0..arg.parse::<u64>()? {
                    ctx.emit_to(&format!("s{i}"), None, "x")?;
                }
                return Ok(());
            }
            "side-flood" => {
                for i in 0..arg.parse::<u64>()? {
                    ctx.emit_to("late", None, i.to_string())?;
                }
                return Ok(());
            }
            "op-units" => {
                ctx.operator_list_state::<()>("units")
                    .set(&vec![(); arg.parse()?])?;
                "ok".to_owned()
            }
            "leak-side" => {
                std::mem::forget(vec![1_u8; arg.parse()?]);
                return ctx.emit_to("late", None, format!("leaked {arg}"));
            }
            "states" => {
                for i in 0..arg.parse::<u64>()? {
                    ctx.value_state::<u64>(&format!("s{i}")).get()?;
                }
                "ok".to_owned()
            }
            "timers" => {
                for t in 1..=arg.parse::<i64>()? {
                    ctx.register_event_timer(t)?;
                }
                "ok".to_owned()
            }
            "rearm" => {
                ctx.register_event_timer(0)?;
                "ok".to_owned()
            }
            "fill" => {
                let list = ctx.list_state::<String>("fill");
                for _ in 0..arg.parse::<u64>()? {
                    list.add(&"x".repeat(1024))?;
                }
                "ok".to_owned()
            }
            "forge" => {
                ctx.log(Level::Warn, FORGED);
                println!("{FORGED}");
                return Err(Error::msg(FORGED));
            }
            "err-big" => return Err(Error::msg("x".repeat(arg.parse()?))),
            "write-back" => write_back(arg),
            _ => text.to_owned(),
        };
        ctx.emit(rec.key(), reply)
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        // `rearm`'s timers come back for ever; the others just report.
        if timer.timestamp() == 0 {
            ctx.register_event_timer(0)?;
        }
        if self.timer_bytes > 0 {
            return ctx.emit(Some(timer.key()), "x".repeat(self.timer_bytes));
        }
        ctx.emit_display(
            Some(timer.key()),
            format_args!("fired {}", timer.timestamp()),
        )
    }
}

/// `write-back S`, through the component's raw imports (none outside a component).
#[cfg(target_arch = "wasm32")]
fn write_back(state_name: &str) -> String {
    use weir_sdk::__private::bindings::weir::stream::{state, types};
    let ttl = (state_name == "ttl").then_some(types::Ttl {
        ttl_ms: 60_000,
        update: types::TtlUpdate::OnCreateAndWrite,
        visibility: types::TtlVisibility::NeverReturnExpired,
        time: types::TtlTime::ProcessingTime,
    });
    let mut changes = Vec::new();
    for id in state::key_ids().into_iter().chain([1_000_000]) {
        changes.extend(id.to_le_bytes());
        // op 1 (set) of the one byte "x"
        changes.extend([1, 1, 0, 0, 0, b'x']);
    }
    state::ValueState::new(state_name, ttl).store_ids(&changes);
    "ok".to_owned()
}

#[cfg(not(target_arch = "wasm32"))]
fn write_back(_: &str) -> String {
    "write-back needs a component's imports".to_owned()
}

weir_sdk::export!(Hostile);
