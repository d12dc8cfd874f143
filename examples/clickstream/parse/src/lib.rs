//! Clickstream, step 1: parses `"<user> <page>"` lines into records with key = user and
//! value = page; a third field, the click's time in milliseconds since the Unix epoch,
//! becomes the record's event time (`sessions.toml` windows on it). Other lines go,
//! unchanged, to the side output `malformed` (read it in a job spec with
//! `input = "parse.malformed"`), as Flink jobs route bad or late records to a side output
//! instead of failing or dropping them silently.

use weir_sdk::prelude::*;

/// The operator; exported below.
#[derive(Default)]
pub struct ParseClicks;

/// The side output malformed lines go to.
pub const MALFORMED: &str = "malformed";

impl Operator for ParseClicks {
    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        let text = std::str::from_utf8(line.value()).unwrap_or("");
        let mut fields = text.split_ascii_whitespace();
        match (fields.next(), fields.next(), fields.next(), fields.next()) {
            (Some(user), Some(page), None, None) => ctx.emit(Some(user.as_bytes()), page),
            (Some(user), Some(page), Some(time), None) => match time.parse::<i64>() {
                Ok(ts) => ctx.emit_record(Kind::Insert, Some(user.as_bytes()), Some(ts), page),
                Err(_) => ctx.emit_to(MALFORMED, None, line.value()),
            },
            _ => ctx.emit_to(MALFORMED, None, line.value()),
        }
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
    fn a_third_field_is_the_clicks_event_time() {
        let mut h = Harness::<ParseClicks>::new();
        let out = h.process(["ann /home 1700000000000"]);
        assert_eq!(out[0].key_str(), Some("ann"));
        assert_eq!(out[0].value_str(), "/home");
        assert_eq!(out[0].timestamp, Some(1_700_000_000_000));
    }

    #[test]
    fn malformed_lines_go_to_the_side_output_unchanged() {
        let mut h = Harness::<ParseClicks>::new();
        let out = h.process([
            Input::new("ann"),
            Input::new("ann /home"),
            Input::new("a b c"),
            Input::new(""),
            Input::new(vec![0xff, b' ', b'x']),
        ]);
        let main: Vec<_> = out.iter().filter(|o| o.side_output.is_none()).collect();
        assert_eq!(main.len(), 1);
        assert_eq!(main[0].value_str(), "/home");
        let side: Vec<_> = out
            .iter()
            .filter(|o| o.side_output.as_deref() == Some(MALFORMED))
            .map(|o| o.value.clone())
            .collect();
        assert_eq!(
            side,
            [
                b"ann".to_vec(),
                b"a b c".to_vec(),
                Vec::new(),
                vec![0xff, b' ', b'x']
            ]
        );
        assert!(h.logs().is_empty());
    }

    #[test]
    fn keeps_the_event_time() {
        let mut h = Harness::<ParseClicks>::new();
        let out = h.process([Input::new("ann /home").with_timestamp(5)]);
        assert_eq!(out[0].timestamp, Some(5));
    }
}
