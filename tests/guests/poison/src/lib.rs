//! Test guest: passes records through unchanged, but panics with `poison record: <value>` when
//! a value is exactly `poison` — for testing how the host reports and recovers from a trap.

use weir_sdk::prelude::*;

#[derive(Default)]
struct Poison;

impl Operator for Poison {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        if rec.value() == b"poison" {
            panic!("poison record: {}", String::from_utf8_lossy(rec.value()));
        }
        ctx.emit_record(rec.kind(), rec.key(), rec.timestamp(), rec.value())
    }
}

weir_sdk::export!(Poison);
