//! Test guest: numbers the records each subtask sees. The running total lives in the
//! operator's (non-keyed) state: read in `open`, written after each batch, so after a restore
//! from a checkpoint the numbering continues where the checkpoint left it. A record becomes
//! `s<subtask> <n>`, without key.

use weir_sdk::prelude::*;

#[derive(Default)]
struct Tally {
    subtask: u32,
    total: u64,
}

impl Operator for Tally {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.subtask = ctx.subtask_index();
        self.total = ctx.operator_state::<u64>("total").get()?.unwrap_or(0);
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, _record: Record<'_>) -> Result<()> {
        self.total += 1;
        ctx.emit(None, format!("s{} {}", self.subtask, self.total))
    }

    fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
        ctx.operator_state("total").set(&self.total)
    }
}

weir_sdk::export!(Tally);
