//! Clickstream, step 1: parses `"<user> <page>"` lines into records with key = user and
//! value = page. Lines that do not have exactly two fields are dropped, with at most one
//! warning per batch (counting them and quoting the first).

use weir_sdk::prelude::*;

/// The operator; exported below.
#[derive(Default)]
pub struct ParseClicks {
    /// Malformed lines in the current batch.
    dropped: u64,
    /// The first of them.
    first_dropped: String,
}

impl Operator for ParseClicks {
    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        let text = std::str::from_utf8(line.value()).unwrap_or("");
        let mut fields = text.split_ascii_whitespace();
        if let (Some(user), Some(page), None) = (fields.next(), fields.next(), fields.next()) {
            return ctx.emit(Some(user.as_bytes()), page);
        }
        if self.dropped == 0 {
            self.first_dropped = String::from_utf8_lossy(line.value()).into_owned();
        }
        self.dropped += 1;
        Ok(())
    }

    fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
        if self.dropped > 0 {
            ctx.warn(format_args!(
                "dropped {} malformed click line(s) in this batch (expected \"<user> <page>\"), \
                 the first was {:?}",
                self.dropped, self.first_dropped
            ));
            self.dropped = 0;
            self.first_dropped.clear();
        }
        Ok(())
    }
}

weir_sdk::export!(ParseClicks);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input};

    #[test]
    fn parses_user_and_page() {
        let mut h = Harness::<ParseClicks>::new();
        let out = h.process(["ann /home", "  bob\t/cart  "]);
        let clicks: Vec<_> = out
            .iter()
            .map(|o| (o.key_str().unwrap(), o.value_str()))
            .collect();
        assert_eq!(clicks, [("ann", "/home"), ("bob", "/cart")]);
        assert!(h.logs().is_empty());
    }

    #[test]
    fn drops_malformed_lines_with_one_warning_per_batch() {
        let mut h = Harness::<ParseClicks>::new();
        let out = h.process([
            Input::new("ann"),
            Input::new("ann /home"),
            Input::new("a b c"),
            Input::new(""),
            Input::new(vec![0xff, b' ', b'x']),
        ]);
        assert_eq!(out.len(), 1);
        let logs = h.logs();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].0, Level::Warn);
        assert!(logs[0].1.contains("dropped 4 malformed"), "{}", logs[0].1);
        assert!(logs[0].1.contains("\"ann\""), "{}", logs[0].1);

        h.process(["x"]);
        assert_eq!(h.logs().len(), 2, "the next batch warns again");
        h.process(["ok line"]);
        assert_eq!(h.logs().len(), 2, "a clean batch does not warn");
    }

    #[test]
    fn keeps_the_event_time() {
        let mut h = Harness::<ParseClicks>::new();
        let out = h.process([Input::new("ann /home").with_timestamp(5)]);
        assert_eq!(out[0].timestamp, Some(5));
    }
}
