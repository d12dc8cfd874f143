//! Test guest: a process-window function. A fired window of key `k` becomes the record
//! `k`, `<start>,<end>,<count>:<sum>` of its records' values (decimal integers), as the
//! `window-aggregate` guest's results read; a value that is not a decimal integer adds its
//! bytes to the sum, so that words make a sum that tells which records a window got.
//!
//! Config: `{ "prefix": "..." }` (default none) goes before each result, so that the output
//! tells which version of the code wrote it; `{ "leak": n }` leaks `n` bytes of linear memory
//! per window, as a function with a leak in its code would; `{ "fail": "error" }` (or
//! `"panic"`) fails every window it fires that way, as a function with a bug would.

use weir_sdk::prelude::*;
use weir_sdk::window::{ProcessWindow, ProcessWindowFunction, Window};

#[derive(Default)]
struct CountSum {
    prefix: String,
    leak: usize,
    fail: Option<Fail>,
}

#[derive(serde::Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Fail {
    Error,
    Panic,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    prefix: String,
    leak: usize,
    fail: Option<Fail>,
}

impl ProcessWindowFunction for CountSum {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        let config = ctx.config::<Config>()?;
        (self.prefix, self.leak, self.fail) = (config.prefix, config.leak, config.fail);
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut Context,
        key: &[u8],
        window: Window,
        values: &[&[u8]],
    ) -> Result<()> {
        std::mem::forget(vec![1u8; self.leak]);
        match self.fail {
            Some(Fail::Error) => return Err(Error::msg("this window function fails")),
            Some(Fail::Panic) => panic!("this window function panics"),
            None => {}
        }
        let mut sum = 0u64;
        for v in values {
            sum += match std::str::from_utf8(v).map(|v| v.trim().parse::<u64>()) {
                Ok(Ok(n)) => n,
                _ => v.iter().map(|&b| u64::from(b)).sum(),
            };
        }
        let (prefix, start, end, n) = (&self.prefix, window.start, window.end, values.len());
        ctx.emit_display(Some(key), format_args!("{prefix}{start},{end},{n}:{sum}"))
    }
}

weir_sdk::export!(ProcessWindow<CountSum>);
