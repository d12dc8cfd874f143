//! Test guest: a window aggregate function. A window's result is `<count>:<sum>` of its
//! records' values (decimal integers); accumulators merge, so it serves session windows.

use weir_sdk::Result;
use weir_sdk::window::{Aggregate, AggregateFunction};

#[derive(Default)]
struct CountSum;

impl AggregateFunction for CountSum {
    type Acc = (u64, u64);
    type Output = String;

    fn create(&self) -> (u64, u64) {
        (0, 0)
    }

    fn add(&self, acc: &mut (u64, u64), value: &[u8]) -> Result<()> {
        let x: u64 = std::str::from_utf8(value)?.trim().parse()?;
        *acc = (acc.0 + 1, acc.1 + x);
        Ok(())
    }

    fn merge(&self, acc: &mut (u64, u64), other: (u64, u64)) -> Result<()> {
        *acc = (acc.0 + other.0, acc.1 + other.1);
        Ok(())
    }

    fn result(&self, acc: &(u64, u64)) -> Result<String> {
        Ok(format!("{}:{}", acc.0, acc.1))
    }
}

weir_sdk::export!(Aggregate<CountSum>);
