//! Orders and payments, step 1: parses `"<order> <what> <amount> <time>"` lines (an order's
//! customer, or a payment's method) into records keyed by the order id, with value
//! `"<what> <amount>"` and the line's time (milliseconds since the Unix epoch) as event time.
//! Other lines go, unchanged, to the side output `malformed`.

use weir_sdk::prelude::*;

/// The operator; exported below.
#[derive(Default)]
pub struct ParseOrders;

/// The side output malformed lines go to.
pub const MALFORMED: &str = "malformed";

impl Operator for ParseOrders {
    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        let text = std::str::from_utf8(line.value()).unwrap_or("");
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        let &[order, what, amount, time] = fields.as_slice() else {
            return ctx.emit_to(MALFORMED, None, line.value());
        };
        let (Ok(ts), Ok(_)) = (time.parse::<i64>(), amount.parse::<f64>()) else {
            return ctx.emit_to(MALFORMED, None, line.value());
        };
        let value = format!("{what} {amount}");
        ctx.emit_record(Kind::Insert, Some(order.as_bytes()), Some(ts), value)
    }
}

weir_sdk::export!(ParseOrders);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::Harness;

    #[test]
    fn parses_order_what_amount_and_time() {
        let mut h = Harness::<ParseOrders>::new();
        let out = h.process(["o1 ann 30.00 1700000000000", "bad line", "o2 bob x 5"]);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].key_str(), Some("o1"));
        assert_eq!(out[0].value_str(), "ann 30.00");
        assert_eq!(out[0].timestamp, Some(1_700_000_000_000));
        assert_eq!(out[1].side_output.as_deref(), Some(MALFORMED));
        assert_eq!(out[2].value_str(), "o2 bob x 5");
    }
}
