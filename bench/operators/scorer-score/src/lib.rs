//! Account scorer, step 2, keyed by account (records `merchant,<cents>` with event time), as
//! a user would write it. State per account:
//!
//! - `merchants`, a map of merchant to the account's transactions there;
//! - `recent`, a list of the last five amounts, oldest first;
//! - `count` and `total`, values; `last_seen`, a value with a one-hour processing-time TTL;
//! - an event-time timer an hour after the account's last transaction (the previous one is
//!   deleted when a new one is registered).
//!
//! Emits `ALERT high <account> <cents> mean=<mean>` when an amount exceeds three times the
//! mean of the recent ones (given three or more), `ALERT new-merchant <account> <merchant>
//! <cents>` when an account that has merchants sees a new one with 500.00 or more, and, when
//! its timer fires, `SUMMARY <account> count=<n> total=<cents> merchants=<k>`.

use std::time::Duration;

use weir_sdk::prelude::*;

/// Recent amounts kept.
const RECENT: usize = 5;
/// An amount a new merchant alerts at, in cents.
const LARGE: u64 = 50_000;
/// A timer fires this long after an account's last transaction.
const QUIET_MS: i64 = 3_600_000;

/// The operator; exported below. Its states are declared once, in `open` (as Flink's
/// descriptors are), and bound to the current key with `ctx.state`.
#[derive(Default)]
pub struct Score {
    merchants: MapStateHandle<String, u64>,
    recent: ListStateHandle<u64>,
    count: ValueStateHandle<u64>,
    total: ValueStateHandle<u64>,
    last_seen: ValueStateHandle<i64>,
}

impl Operator for Score {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.merchants = ctx.map_state("merchants")?;
        self.recent = ctx.list_state("recent")?;
        self.count = ctx.value_state("count")?;
        self.total = ctx.value_state("total")?;
        self.last_seen =
            ctx.value_state_with_ttl("last_seen", Ttl::new(Duration::from_secs(3600)))?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let account = rec.key_str()?.ok_or("records are keyed by account")?;
        let ts = rec.timestamp().ok_or("records carry their event time")?;
        let (merchant, cents) = rec
            .value_str()?
            .split_once(',')
            .ok_or("a record is merchant,cents")?;
        let cents: u64 = cents.parse()?;

        let merchants = ctx.state(&self.merchants);
        let seen = merchants.get(merchant)?;
        let known = !merchants.is_empty()?;
        let recent = ctx.state(&self.recent);
        let mut amounts = recent.get()?;
        if amounts.len() >= 3 {
            let mean = amounts.iter().sum::<u64>() / amounts.len() as u64;
            if cents > 3 * mean {
                ctx.emit_display(
                    rec.key(),
                    format_args!("ALERT high {account} {cents} mean={mean}"),
                )?;
            }
        }
        if seen.is_none() && known && cents >= LARGE {
            ctx.emit_display(
                rec.key(),
                format_args!("ALERT new-merchant {account} {merchant} {cents}"),
            )?;
        }
        merchants.put(merchant, &(seen.unwrap_or(0) + 1))?;
        amounts.push(cents);
        if amounts.len() > RECENT {
            amounts.drain(..amounts.len() - RECENT);
            recent.update(&amounts)?;
        } else {
            recent.add(&cents)?;
        }

        let count = ctx.state(&self.count);
        count.set(&(count.get()?.unwrap_or(0) + 1))?;
        let total = ctx.state(&self.total);
        total.set(&(total.get()?.unwrap_or(0) + cents))?;
        let last_seen = ctx.state(&self.last_seen);
        if let Some(previous) = last_seen.get()? {
            ctx.delete_event_timer(previous + QUIET_MS)?;
        }
        last_seen.set(&ts)?;
        ctx.register_event_timer(ts + QUIET_MS)
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        let account = timer.key_str()?;
        let count = ctx.state(&self.count).get()?.unwrap_or(0);
        let total = ctx.state(&self.total).get()?.unwrap_or(0);
        let merchants = ctx.state(&self.merchants).keys()?.len();
        ctx.emit_display(
            Some(timer.key()),
            format_args!("SUMMARY {account} count={count} total={total} merchants={merchants}"),
        )
    }
}

weir_sdk::export!(Score);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input};

    fn tx(account: &str, merchant: &str, cents: u64, ts: i64) -> Input {
        Input::keyed(account, format!("{merchant},{cents}")).with_timestamp(ts)
    }

    #[test]
    fn alerts_on_a_high_amount_and_a_large_one_at_a_new_merchant() {
        let mut h = Harness::<Score>::new();
        let out = h.process([
            tx("a", "m1", 1000, 1),
            tx("a", "m1", 1000, 2),
            tx("a", "m2", 1000, 3),
            tx("a", "m3", 60_000, 4),
        ]);
        let values: Vec<&str> = out.iter().map(|o| o.value_str()).collect();
        assert_eq!(
            values,
            [
                "ALERT high a 60000 mean=1000",
                "ALERT new-merchant a m3 60000"
            ]
        );
        let summary = h.fire_event_timers_up_to(4 + QUIET_MS);
        assert_eq!(
            summary[0].value_str(),
            "SUMMARY a count=4 total=63000 merchants=3"
        );
        assert_eq!(summary.len(), 1, "the earlier timers were deleted");
    }
}
