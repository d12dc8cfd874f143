//! Word count, step 1: splits each line (the record value) on ASCII whitespace and emits every
//! word with key = word and value = word, so that `key_by` can route words to their counter.
//!
//! Config: `{ "lowercase": bool }` (default `false`) lowercases the words first.

use serde::Deserialize;
use weir_sdk::prelude::*;

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Config {
    lowercase: bool,
}

/// The operator; exported below.
#[derive(Default)]
pub struct Split {
    lowercase: bool,
    /// Reused buffer for lowercased words.
    lower: String,
}

impl Operator for Split {
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.lowercase = ctx.config::<Config>()?.lowercase;
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        for word in line.value_str()?.split_ascii_whitespace() {
            let word = if self.lowercase {
                self.lower.clear();
                self.lower.extend(word.chars().flat_map(char::to_lowercase));
                self.lower.as_str()
            } else {
                word
            };
            ctx.emit(Some(word.as_bytes()), word)?;
        }
        Ok(())
    }
}

weir_sdk::export!(Split);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input};

    fn words(out: &[weir_sdk::testing::Output]) -> Vec<(&str, &str)> {
        out.iter()
            .map(|o| (o.key_str().unwrap(), o.value_str()))
            .collect()
    }

    #[test]
    fn splits_on_ascii_whitespace() {
        let mut h = Harness::<Split>::new();
        let out = h.process(["To be,\tor  not\n", "", "   ", "to BE"]);
        assert_eq!(
            words(&out),
            [
                ("To", "To"),
                ("be,", "be,"),
                ("or", "or"),
                ("not", "not"),
                ("to", "to"),
                ("BE", "BE")
            ]
        );
    }

    #[test]
    fn lowercase_config() {
        let mut h = Harness::<Split>::new().with_config(r#"{"lowercase": true}"#);
        let out = h.process(["Hello WORLD Straße"]);
        assert_eq!(
            words(&out),
            [("hello", "hello"), ("world", "world"), ("straße", "straße")]
        );
    }

    #[test]
    fn keeps_the_line_timestamp() {
        let mut h = Harness::<Split>::new();
        let out = h.process([Input::new("a b").with_timestamp(42)]);
        assert!(out.iter().all(|o| o.timestamp == Some(42)));
    }

    #[test]
    fn rejects_bad_config_and_non_utf8() {
        let mut h = Harness::<Split>::new().with_config(r#"{"lowercase": "yes"}"#);
        let err = h.try_process(["x"]).unwrap_err().to_string();
        assert!(err.contains("config"), "{err}");
        let mut h = Harness::<Split>::new();
        assert!(h.try_process([Input::new(vec![0xff, b' '])]).is_err());
    }
}
