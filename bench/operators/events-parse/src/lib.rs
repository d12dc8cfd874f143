//! Benchmark operator: parses `key,timestamp` lines (the window benchmark's input) into
//! records with that key, the timestamp as event time and an empty value. Other lines go to
//! the side output `malformed`.

use weir_sdk::prelude::*;

#[derive(Default)]
struct ParseEvents;

impl Operator for ParseEvents {
    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        let text = line.value();
        let parsed = text.iter().position(|&b| b == b',').and_then(|comma| {
            let ts = std::str::from_utf8(&text[comma + 1..]).ok()?;
            Some((&text[..comma], ts.trim().parse::<i64>().ok()?))
        });
        match parsed {
            Some((key, ts)) => ctx.emit_record(Kind::Insert, Some(key), Some(ts), b""),
            None => ctx.emit_to("malformed", None, text),
        }
    }
}

weir_sdk::export!(ParseEvents);
