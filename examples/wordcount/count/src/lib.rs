//! Word count, step 2: counts each word (the record key) in a `ValueState<u64>` called
//! `count` and emits key = word, value = the new count as decimal text — a changelog:
//! `Insert` for a word's first occurrence, `UpdateAfter` afterwards.
//!
//! The count is formatted with `itoa` rather than `Display`: `core::fmt` machinery costs more
//! per record than everything else this operator does (measured in the word-count benchmark).

use weir_sdk::prelude::*;

/// The operator; exported below.
#[derive(Default)]
pub struct CountWords {
    count: ValueStateHandle<u64>,
}

impl Operator for CountWords {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.count = ctx.value_state("count")?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, word: Record<'_>) -> Result<()> {
        let count = ctx.state(&self.count);
        let n = count.get()?.unwrap_or(0) + 1;
        count.set(&n)?;
        let kind = if n == 1 {
            Kind::Insert
        } else {
            Kind::UpdateAfter
        };
        let mut text = itoa::Buffer::new();
        ctx.emit_record(kind, word.key(), word.timestamp(), text.format(n))
    }
}

weir_sdk::export!(CountWords);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input, Output};

    fn rows(out: &[Output]) -> Vec<(&str, &str, Kind)> {
        out.iter()
            .map(|o| (o.key_str().unwrap(), o.value_str(), o.kind))
            .collect()
    }

    #[test]
    fn counts_over_two_batches() {
        let mut h = Harness::<CountWords>::new();
        let out = h.process([("to", "to"), ("be", "be"), ("to", "to")]);
        assert_eq!(
            rows(&out),
            [
                ("to", "1", Kind::Insert),
                ("be", "1", Kind::Insert),
                ("to", "2", Kind::UpdateAfter)
            ]
        );
        let out = h.process([("be", "be"), ("or", "or"), ("to", "to")]);
        assert_eq!(
            rows(&out),
            [
                ("be", "2", Kind::UpdateAfter),
                ("or", "1", Kind::Insert),
                ("to", "3", Kind::UpdateAfter)
            ]
        );
        assert_eq!(h.value_state::<u64>("count", "to"), Some(3));
        assert_eq!(h.value_state::<u64>("count", "be"), Some(2));
    }

    #[test]
    fn counts_survive_a_restart() {
        let mut h = Harness::<CountWords>::new();
        h.process([("a", "a")]);
        h.restart();
        assert_eq!(h.process([("a", "a")])[0].value_str(), "2");
    }

    #[test]
    fn a_word_without_key_is_an_error_naming_the_state() {
        let mut h = Harness::<CountWords>::new();
        let err = h
            .try_process([Input::new("orphan")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("state \"count\""), "{err}");
        assert!(err.contains("no key"), "{err}");
    }

    #[test]
    fn output_keeps_the_event_time() {
        let mut h = Harness::<CountWords>::new();
        let out = h.process([Input::keyed("a", "a").with_timestamp(7)]);
        assert_eq!(out[0].timestamp, Some(7));
    }
}
