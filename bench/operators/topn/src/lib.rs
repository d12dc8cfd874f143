//! Top-N per key: keyed by account (records `merchant,<cents>` from the account scorer's
//! parse step), keeps the account's three largest amounts in a list state, largest first, and
//! emits `<account> <a>,<b>,<c>` whenever a record changes them.

use weir_sdk::prelude::*;

/// Amounts kept per account.
const N: usize = 3;

/// The operator; exported below.
#[derive(Default)]
pub struct TopN;

impl Operator for TopN {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let account = rec.key_str()?.ok_or("records are keyed by account")?;
        let (_, cents) = rec
            .value_str()?
            .split_once(',')
            .ok_or("a record is merchant,cents")?;
        let cents: u64 = cents.parse()?;
        let top = ctx.list_state::<u64>("top");
        let mut amounts = top.get()?;
        if amounts.len() == N && amounts[N - 1] >= cents {
            return Ok(());
        }
        let at = amounts.partition_point(|&a| a >= cents);
        amounts.insert(at, cents);
        amounts.truncate(N);
        top.update(&amounts)?;
        let list: Vec<String> = amounts.iter().map(u64::to_string).collect();
        ctx.emit_display(rec.key(), format_args!("{account} {}", list.join(",")))
    }
}

weir_sdk::export!(TopN);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input};

    #[test]
    fn keeps_the_three_largest() {
        let mut h = Harness::<TopN>::new();
        let rec = |c: u64| Input::keyed("a", format!("m,{c}"));
        let out = h.process([rec(5), rec(9), rec(1), rec(7), rec(2), rec(9)]);
        let values: Vec<&str> = out.iter().map(|o| o.value_str()).collect();
        assert_eq!(values, ["a 5", "a 9,5", "a 9,5,1", "a 9,7,5", "a 9,9,7"]);
    }
}
