//! Test guest: a second version of the word count's count operator, to upgrade it to. It
//! counts each word in the same `count` value state (so it carries on with the counts the
//! first version wrote) and writes them in another format: `<prefix><count>`.
//!
//! Config: `prefix` (default `"v2:"`); `state` names the value state it counts in (default
//! `count`: another name leaves `count` undeclared, kept for a later version); with
//! `kind = "map"` it declares `count` as a map state, which the first version wrote as a
//! value state: a failure of the new version when it is declared (in `process`, or in `open`
//! with `in_open = true`).

use serde::Deserialize;
use weir_sdk::prelude::*;

#[derive(Deserialize)]
#[serde(default)]
struct Config {
    prefix: String,
    state: String,
    kind: String,
    in_open: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prefix: "v2:".into(),
            state: "count".into(),
            kind: "value".into(),
            in_open: false,
        }
    }
}

#[derive(Default)]
struct Recount {
    config: Config,
}

impl Operator for Recount {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.config = ctx.config()?;
        if self.config.kind == "map" && self.config.in_open {
            ctx.map_state::<String, u64>(&self.config.state)?;
        }
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, word: Record<'_>) -> Result<()> {
        if self.config.kind == "map" {
            let map = ctx.map_state::<String, u64>(&self.config.state);
            map.get(&String::new())?;
        }
        let count = ctx.value_state::<u64>(&self.config.state);
        let n = count.get()?.unwrap_or(0) + 1;
        count.set(&n)?;
        let kind = if n == 1 {
            Kind::Insert
        } else {
            Kind::UpdateAfter
        };
        let value = format!("{}{n}", self.config.prefix);
        ctx.emit_record(kind, word.key(), word.timestamp(), value)
    }
}

weir_sdk::export!(Recount);
