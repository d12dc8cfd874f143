//! Benchmark operator: a window aggregate function that counts its window's records (the
//! guest counterpart of the built-in `aggregate = "count"`).

use weir_sdk::Result;
use weir_sdk::window::{Aggregate, AggregateFunction};

#[derive(Default)]
struct Count;

impl AggregateFunction for Count {
    type Acc = u64;
    type Output = u64;

    fn create(&self) -> u64 {
        0
    }

    fn add(&self, acc: &mut u64, _value: &[u8]) -> Result<()> {
        *acc += 1;
        Ok(())
    }

    fn merge(&self, acc: &mut u64, other: u64) -> Result<()> {
        *acc += other;
        Ok(())
    }

    fn result(&self, acc: &u64) -> Result<u64> {
        Ok(*acc)
    }
}

weir_sdk::export!(Aggregate<Count>);
