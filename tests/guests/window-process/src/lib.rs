//! Test guest: a process-window function. A fired window of key `k` becomes the record
//! `k`, `<start>,<end>,<count>:<sum>` of its records' values (decimal integers), as the
//! `window-aggregate` guest's results read; a value that is not a decimal integer adds its
//! bytes to the sum, so that words make a sum that tells which records a window got.
//!
//! Config: `{ "prefix": "..." }` (default none) goes before each result, so that the output
//! tells which version of the code wrote it; `{ "leak": n }` leaks `n` bytes of linear memory
//! per window, as a function with a leak in its code would.

use weir_sdk::prelude::*;
use weir_sdk::window::{ProcessWindow, ProcessWindowFunction, Window};

#[derive(Default)]
struct CountSum {
    prefix: String,
    leak: usize,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    prefix: String,
    leak: usize,
}

impl ProcessWindowFunction for CountSum {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        let config = ctx.config::<Config>()?;
        (self.prefix, self.leak) = (config.prefix, config.leak);
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
