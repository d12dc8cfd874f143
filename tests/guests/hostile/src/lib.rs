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
//!
//! With `config = { spin_in_open = true }` the guest loops forever in `open`.

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
struct Hostile;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Config {
    spin_in_open: bool,
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
        if ctx.config::<Config>()?.spin_in_open {
            spin();
        }
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
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
            _ => text.to_owned(),
        };
        ctx.emit(rec.key(), reply)
    }
}

weir_sdk::export!(Hostile);
