//! Test guest: a command interpreter for checking state semantics, through the real host and
//! through the SDK's test harness: both run the script `tests/conformance/state.txt` (see
//! `src/conformance.rs` and `tests/e2e/state.rs`).
//!
//! Each record's key is the state key and its value a command; the guest emits one record
//! with the same key whose value is the result. State: `ValueState<String>` "v",
//! `ListState<String>` "l", `MapState<String, String>` "m".
//!
//! | command | result |
//! |---|---|
//! | `vset X`, `vclear` | `ok` |
//! | `vget` | the value or `none` |
//! | `ladd X`, `laddall X,Y`, `lupdate X,Y` (empty = empty list), `lclear` | `ok` |
//! | `lget` | `[a,b]` |
//! | `mput K V`, `mremove K`, `mclear` | `ok` |
//! | `mget K` | the value or `none` |
//! | `mcontains K`, `misempty` | `true` / `false` |
//! | `mentries` | `{k1=v1,k2=v2}` sorted by key |
//! | `mkeys` | `[k1,k2]` sorted |
//! | `mvalues` | `[v1,v2]` sorted |
//! | `mfill N LEN`, `mremovefill N` | `ok`: put (remove) `f0`..`f{N-1}`, value `i` after dots to LEN bytes |
//! | `mvlen K` | `LEN i` for a filled entry (its length, what is after the dots), or `none` |
//! | `msize` | the number of entries |
//! | `timer N` | `ok`; an event-time timer at N later emits `fired N` |
//! | `leak N` | `ok`, having allocated N bytes it never frees (a leaking guest) |
//! | `timerleak N` | `ok`; each of the key's timers then leaks N bytes as it fires |
//! | `tvset X`, `trset X`, `tladd X`, `tmput K V` | `ok` |
//! | `tvget`, `trget`, `tlget`, `tmentries` | as `vget`, `lget`, `mentries` |
//!
//! The `t` commands use states with an event-time TTL of 1 s (tests/e2e/state.rs): value
//! "tv", list "tl" and map "tm" restart it on writes, value "tr" on reads too.
//!
//! An unknown command fails the batch with an error naming it.

use std::time::Duration;

use weir_sdk::prelude::*;

#[derive(Default)]
struct StateProbe;

fn list(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

/// Elements of a comma-separated argument; empty means none.
fn elements(arg: &str) -> Vec<String> {
    if arg.is_empty() {
        Vec::new()
    } else {
        arg.split(',').map(str::to_owned).collect()
    }
}

/// The TTL of the `t` commands' states.
fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(1)).use_event_time()
}

fn entries(mut entries: Vec<(String, String)>) -> String {
    entries.sort();
    let parts: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", parts.join(","))
}

fn run(ctx: &Context, command: &str) -> Result<String> {
    let (cmd, arg) = command.split_once(' ').unwrap_or((command, ""));
    let v = ctx.value_state::<String>("v");
    let l = ctx.list_state::<String>("l");
    let m = ctx.map_state::<String, String>("m");
    let ok = || Ok("ok".to_owned());
    match cmd {
        "vset" => v.set(arg).and_then(|()| ok()),
        "vget" => Ok(v.get()?.unwrap_or_else(|| "none".to_owned())),
        "vclear" => v.clear().and_then(|()| ok()),
        "ladd" => l.add(arg).and_then(|()| ok()),
        "laddall" => l.add_all(elements(arg)).and_then(|()| ok()),
        "lget" => Ok(list(&l.get()?)),
        "lupdate" => l.update(elements(arg)).and_then(|()| ok()),
        "lclear" => l.clear().and_then(|()| ok()),
        "mput" => {
            let (k, value) = arg.split_once(' ').unwrap_or((arg, ""));
            m.put(k, value).and_then(|()| ok())
        }
        "mget" => Ok(m.get(arg)?.unwrap_or_else(|| "none".to_owned())),
        "mremove" => m.remove(arg).and_then(|()| ok()),
        "mcontains" => Ok(m.contains(arg)?.to_string()),
        "mentries" => Ok(entries(m.entries()?)),
        "mkeys" => {
            let mut keys = m.keys()?;
            keys.sort();
            Ok(list(&keys))
        }
        "mvalues" => {
            let mut values = m.values()?;
            values.sort();
            Ok(list(&values))
        }
        "mfill" | "mremovefill" => {
            let (n, len) = arg.split_once(' ').unwrap_or((arg, "0"));
            let number = |s: &str| {
                s.parse::<usize>()
                    .map_err(|e| Error::new(e).context(format!("{cmd} {arg:?}")))
            };
            let (n, len) = (number(n)?, number(len)?);
            for i in 0..n {
                match cmd {
                    "mfill" => m.put(&format!("f{i}"), &format!("{i:.>len$}"))?,
                    _ => m.remove(&format!("f{i}"))?,
                }
            }
            ok()
        }
        "mvlen" => Ok(m.get(arg)?.map_or("none".to_owned(), |v| {
            format!("{} {}", v.len(), v.trim_start_matches('.'))
        })),
        "msize" => Ok(m.entries()?.len().to_string()),
        "misempty" => Ok(m.is_empty()?.to_string()),
        "mclear" => m.clear().and_then(|()| ok()),
        "timer" => {
            let at: i64 = arg
                .parse()
                .map_err(|e| Error::new(e).context(format!("timer {arg:?}")))?;
            ctx.register_event_timer(at).and_then(|()| ok())
        }
        "leak" => {
            let n: usize = arg
                .parse()
                .map_err(|e| Error::new(e).context(format!("leak {arg:?}")))?;
            std::mem::forget(vec![1_u8; n]);
            ok()
        }
        "timerleak" => {
            let n: u64 = arg
                .parse()
                .map_err(|e| Error::new(e).context(format!("timerleak {arg:?}")))?;
            ctx.value_state::<u64>("timerleak")
                .set(&n)
                .and_then(|()| ok())
        }
        "tvset" | "tvget" => {
            let tv = ctx.value_state_with_ttl::<String>("tv", ttl());
            match cmd {
                "tvset" => tv.set(arg).and_then(|()| ok()),
                _ => Ok(tv.get()?.unwrap_or_else(|| "none".to_owned())),
            }
        }
        "trset" | "trget" => {
            let tr = ctx.value_state_with_ttl::<String>("tr", ttl().update_ttl_on_read_and_write());
            match cmd {
                "trset" => tr.set(arg).and_then(|()| ok()),
                _ => Ok(tr.get()?.unwrap_or_else(|| "none".to_owned())),
            }
        }
        "tladd" => ctx
            .list_state_with_ttl::<String>("tl", ttl())
            .add(arg)
            .and_then(|()| ok()),
        "tlget" => Ok(list(&ctx.list_state_with_ttl::<String>("tl", ttl()).get()?)),
        "tmput" => {
            let (k, value) = arg.split_once(' ').unwrap_or((arg, ""));
            let tm = ctx.map_state_with_ttl::<String, String>("tm", ttl());
            tm.put(k, value).and_then(|()| ok())
        }
        "tmentries" => Ok(entries(
            ctx.map_state_with_ttl::<String, String>("tm", ttl())
                .entries()?,
        )),
        _ => Err(Error::msg(format!("unknown command {cmd:?}"))),
    }
}

impl Operator for StateProbe {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let result = run(ctx, rec.value_str()?)?;
        ctx.emit(rec.key(), result)
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        if let Some(n) = ctx.value_state::<u64>("timerleak").get()? {
            std::mem::forget(vec![1_u8; n as usize]);
        }
        ctx.emit_display(
            Some(timer.key()),
            format_args!("fired {}", timer.timestamp()),
        )
    }
}

weir_sdk::export!(StateProbe);

#[cfg(test)]
mod conformance;
