//! Orders and payments, step 2: the orders that no payment followed within 15 minutes, an
//! operator with two inputs (Flink's `connect` and `KeyedCoProcessFunction`): `input` is
//! the orders, `second_input` the payments, both keyed by order id, and they share the
//! order's state and timers.
//!
//! An order waits in a value state with an event-time timer 15 minutes after it; a payment
//! at or after the order and within those 15 minutes clears it and deletes the timer. A
//! payment that arrives before its order (the streams are out of order) waits in a list
//! until the watermark passes it, when no order it could pay can still come. When an
//! order's timer fires it was not paid: `"<customer> <amount>"` goes out, with the timer's
//! time as timestamp.

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;

/// How long after an order its payment may come, in milliseconds.
pub const PAY_WITHIN_MS: i64 = 15 * 60 * 1000;

/// The operator; exported below.
#[derive(Default)]
pub struct Unpaid;

/// An order waiting for its payment.
#[derive(Serialize, Deserialize)]
struct Order {
    time: i64,
    value: String,
}

fn pays(order: i64, payment: i64) -> bool {
    (order..=order + PAY_WITHIN_MS).contains(&payment)
}

impl Operator for Unpaid {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let time = rec
            .timestamp()
            .ok_or_else(|| Error::msg("a record without event time"))?;
        let order = ctx.value_state::<Order>("order");
        let payments = ctx.list_state::<i64>("early_payments");
        if rec.input() == 0 {
            if payments.get()?.iter().any(|&p| pays(time, p)) {
                return Ok(());
            }
            order.set(&Order {
                time,
                value: rec.value_str()?.to_owned(),
            })?;
            return ctx.register_event_timer(time + PAY_WITHIN_MS);
        }
        match order.get()? {
            Some(o) if pays(o.time, time) => {
                order.clear()?;
                ctx.delete_event_timer(o.time + PAY_WITHIN_MS)
            }
            _ => {
                // Its order may still come: keep it until the watermark passes it.
                payments.add(&time)?;
                ctx.register_event_timer(time)
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut Context, timer: Timer<'_>) -> Result<()> {
        let order = ctx.value_state::<Order>("order");
        if let Some(o) = order.get()?
            && o.time + PAY_WITHIN_MS == timer.timestamp()
        {
            order.clear()?;
            ctx.emit(Some(timer.key()), o.value)?;
        }
        // Payments at or before the watermark pay no order that can still come.
        let payments = ctx.list_state::<i64>("early_payments");
        let kept: Vec<i64> = (payments.get()?.into_iter())
            .filter(|&p| p > timer.timestamp())
            .collect();
        payments.update(kept)
    }
}

weir_sdk::export!(Unpaid);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input};

    const MIN: i64 = 60_000;

    fn at(key: &str, value: &str, time: i64) -> Input {
        Input::keyed(key, value).with_timestamp(time)
    }

    #[test]
    fn an_order_without_a_payment_in_15_minutes_is_unpaid() {
        let mut h = Harness::<Unpaid>::new();
        h.process([
            at("o1", "ann 30", 0),
            at("o2", "bob 5", 0),
            at("o3", "cid 7", 0),
        ]);
        // o1 paid in time, o2 too late, o3 not at all.
        h.process_second([
            at("o1", "card 30", 15 * MIN),
            at("o2", "card 5", 15 * MIN + 1),
        ]);
        let out = h.fire_event_timers_up_to(i64::MAX);
        let unpaid: Vec<_> = out.iter().map(|o| (o.key_str(), o.value_str())).collect();
        assert_eq!(unpaid, [(Some("o2"), "bob 5"), (Some("o3"), "cid 7")]);
        assert_eq!(out[0].timestamp, Some(15 * MIN));
    }

    #[test]
    fn a_payment_before_its_order_in_the_stream_still_pays_it() {
        let mut h = Harness::<Unpaid>::new();
        h.process_second([at("o1", "card 30", 10 * MIN)]);
        h.process([at("o1", "ann 30", 0)]);
        assert!(h.fire_event_timers_up_to(i64::MAX).is_empty());
        assert!(h.list_state::<i64>("early_payments", "o1").is_empty());
    }

    #[test]
    fn a_payment_before_its_order_in_time_does_not_pay_it() {
        let mut h = Harness::<Unpaid>::new();
        h.process_second([at("o1", "card 30", 0)]);
        h.process([at("o1", "ann 30", 1)]);
        let out = h.fire_event_timers_up_to(i64::MAX);
        assert_eq!(out.len(), 1, "{out:?}");
    }
}
