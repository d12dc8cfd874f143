//! Test guest: passes records through, except that the record `spin` makes it loop forever
//! and the record `hog` makes it allocate 16 MiB after 16 MiB without end (the host's limits
//! must stop both and name the limit), and `trap-until T` panics while the processing time
//! is before `T` (Unix ms): a transient failure that a restart gets past.

use std::hint::black_box;

use weir_sdk::prelude::*;

#[derive(Default)]
struct Hostile;

impl Operator for Hostile {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        match rec.value() {
            b"spin" => loop {
                black_box(());
            },
            b"hog" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 16 << 20]);
                    black_box(&hoard);
                }
            }
            value => {
                if let Some(until) = value.strip_prefix(b"trap-until ") {
                    let until: i64 = std::str::from_utf8(until)?.parse()?;
                    if ctx.current_processing_time() < until {
                        panic!("transient failure until {until}");
                    }
                }
                ctx.emit(rec.key(), value)
            }
        }
    }
}

weir_sdk::export!(Hostile);
