//! Account scorer, step 1: parses `account,merchant,amount,timestamp` lines (amount with two
//! decimals, timestamp in Unix milliseconds) into records keyed by account, valued
//! `merchant,<amount in cents>`, with the timestamp as event time. A line that does not parse
//! goes to the side output `malformed`.

use weir_sdk::prelude::*;

/// The operator; exported below.
#[derive(Default)]
pub struct Parse;

/// `(account, merchant, cents, timestamp)` of a line, if it is one.
fn parse(line: &str) -> Option<(&str, &str, u64, i64)> {
    let mut fields = line.split(',');
    let (account, merchant, amount, ts) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    if fields.next().is_some() || account.is_empty() || merchant.is_empty() {
        return None;
    }
    let (units, cents) = amount.split_once('.')?;
    if cents.len() != 2 {
        return None;
    }
    let cents = units.parse::<u64>().ok()? * 100 + cents.parse::<u64>().ok()?;
    Some((account, merchant, cents, ts.parse().ok()?))
}

impl Operator for Parse {
    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        let text = line.value_str()?;
        match parse(text) {
            Some((account, merchant, cents, ts)) => {
                let mut value = String::with_capacity(merchant.len() + 12);
                value.push_str(merchant);
                value.push(',');
                value.push_str(itoa::Buffer::new().format(cents));
                ctx.emit_record(Kind::Insert, Some(account.as_bytes()), Some(ts), value)
            }
            None => ctx.emit_to("malformed", None, text),
        }
    }
}

weir_sdk::export!(Parse);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::Harness;

    #[test]
    fn parses_and_sets_aside_what_does_not_parse() {
        let mut h = Harness::<Parse>::new();
        let out = h.process([
            weir_sdk::testing::Input::new("a1,m7,12.34,1700000000000"),
            weir_sdk::testing::Input::new("a1,m7,12.3,1700000000000"),
            weir_sdk::testing::Input::new("garbage"),
        ]);
        assert_eq!(out[0].key_str(), Some("a1"));
        assert_eq!(out[0].value_str(), "m7,1234");
        assert_eq!(out[0].timestamp, Some(1_700_000_000_000));
        assert_eq!(out[1].side_output.as_deref(), Some("malformed"));
        assert_eq!(out[2].side_output.as_deref(), Some("malformed"));
    }
}
