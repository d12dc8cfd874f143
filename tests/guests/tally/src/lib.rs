//! Test guest: numbers the records each subtask sees. The running total lives in the
//! operator's (non-keyed) split list state: read (summed) in `open`, written after each batch,
//! so after a restore the numbering continues where the checkpoint left it, and after a
//! rescale the subtasks together continue from the old subtasks' totals. A record becomes
//! `<tag>s<subtask> <n>`, without key.
//!
//! With config `{ union = true }` every subtask also keeps its index in a union list state;
//! its first record after `open` is preceded by `<tag>u<subtask> <indices it restored>`.

use serde::Deserialize;
use weir_sdk::prelude::*;

#[derive(Default, Deserialize)]
#[serde(default)]
struct Config {
    union: bool,
    tag: String,
}

#[derive(Default)]
struct Tally {
    config: Config,
    subtask: u32,
    total: u64,
    /// The union list's elements restored in `open`, until the first record reports them.
    restored: Option<Vec<u32>>,
}

impl Operator for Tally {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.config = ctx.config()?;
        self.subtask = ctx.subtask_index();
        self.total = ctx.operator_list_state::<u64>("totals").get()?.iter().sum();
        if self.config.union {
            let mut seen = ctx.union_list_state::<u32>("subtasks").get()?;
            seen.sort_unstable();
            seen.dedup();
            self.restored = Some(seen);
        }
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, _record: Record<'_>) -> Result<()> {
        let tag = &self.config.tag;
        if let Some(seen) = self.restored.take() {
            let seen: Vec<String> = seen.iter().map(u32::to_string).collect();
            ctx.emit(None, format!("{tag}u{} {}", self.subtask, seen.join(",")))?;
        }
        self.total += 1;
        ctx.emit(None, format!("{tag}s{} {}", self.subtask, self.total))
    }

    fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
        ctx.operator_list_state("totals").set(&[self.total])?;
        if self.config.union {
            ctx.union_list_state("subtasks").set(&[self.subtask])?;
        }
        Ok(())
    }
}

weir_sdk::export!(Tally);
