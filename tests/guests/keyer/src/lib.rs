//! Test guest: gives keys to lines, so that a file source can feed keyed operators (such as
//! the state probe) through a `key_by` edge. A line `KEY REST` becomes a record with key `KEY`
//! and value `REST` (everything after the first space, which may be empty or contain more
//! spaces); a line without a space becomes key = the line, value empty.

use weir_sdk::prelude::*;

#[derive(Default)]
struct Keyer;

impl Operator for Keyer {
    fn process(&mut self, ctx: &mut Context, line: Record<'_>) -> Result<()> {
        let line = line.value();
        let (key, value) = match line.iter().position(|&b| b == b' ') {
            Some(space) => (&line[..space], &line[space + 1..]),
            None => (line, &line[line.len()..]),
        };
        ctx.emit(Some(key), value)
    }
}

weir_sdk::export!(Keyer);
