//! Window function calls (host to guest): what a window in the host asks of a guest's window
//! function. Each is the value of one record of a `process` batch, keyed by the window's key
//! with the window's last millisecond as timestamp:
//!
//! `u8 op, s64 start, s64 end` (the window, `end` exclusive), then
//! - op 0 update: `u32 n, n × bytes` accumulators to merge (none for a new window),
//!   `u32 m, m × bytes` record values to add; the guest emits the new accumulator;
//! - op 1 result: `bytes` accumulator; the guest emits the window's result;
//! - op 2 process: `u32 m, m × bytes` the window's record values; the guest emits what it
//!   makes of them.
//!
//! The guest answers an update or a result with exactly one record each, in request order.

use crate::primitives::{DecodeError, Reader, put_bytes, put_i64, put_u8, put_u32};

/// A window `[start, end)`, in milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// The first millisecond in the window.
    pub start: i64,
    /// The first millisecond after it.
    pub end: i64,
}

/// What a window asks of the guest's window function.
#[derive(Clone, Copy, Debug)]
pub enum WindowCall<'a> {
    /// Merge `accs` (none: start from a new accumulator), add `values`, emit the result.
    Update {
        /// The window.
        window: Window,
        /// Accumulators of the window (several when sessions merged).
        accs: Items<'a>,
        /// Values of the records that came into it.
        values: Items<'a>,
    },
    /// Emit the result of `acc`.
    Result {
        /// The window.
        window: Window,
        /// Its accumulator.
        acc: &'a [u8],
    },
    /// The window fired with these values.
    Process {
        /// The window.
        window: Window,
        /// Values of its records, in arrival order (a merged session's: session by session).
        values: Items<'a>,
    },
}

impl WindowCall<'_> {
    /// For an error message: what the call asks ("adding records to", "taking the result
    /// of", "firing"), its window, and the record values it carries (" with 2 records",
    /// empty for none).
    pub fn what(&self) -> (&'static str, Window, String) {
        let (what, window, n) = match self {
            WindowCall::Update { window, values, .. } => {
                ("adding records to", *window, values.len())
            }
            WindowCall::Result { window, .. } => ("taking the result of", *window, 0),
            WindowCall::Process { window, values } => ("firing", *window, values.len()),
        };
        let records = match n {
            0 => String::new(),
            1 => " with 1 record".to_owned(),
            n => format!(" with {n} records"),
        };
        (what, window, records)
    }
}

/// Byte strings of a window call, read in place.
#[derive(Clone, Copy, Debug)]
pub struct Items<'a> {
    left: u32,
    r: Reader<'a>,
}

impl<'a> Items<'a> {
    /// How many are left.
    pub fn len(&self) -> usize {
        self.left as usize
    }

    /// Whether none are left.
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl<'a> Iterator for Items<'a> {
    type Item = Result<&'a [u8], DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.r.bytes())
    }
}

const UPDATE: u8 = 0;
const RESULT: u8 = 1;
const PROCESS: u8 = 2;

fn head(buf: &mut Vec<u8>, op: u8, w: Window) {
    put_u8(buf, op);
    put_i64(buf, w.start);
    put_i64(buf, w.end);
}

/// Writes an update call: merge `accs`, then add `values`.
pub fn put_update<'v>(
    buf: &mut Vec<u8>,
    w: Window,
    accs: &[&[u8]],
    values: impl ExactSizeIterator<Item = &'v [u8]>,
) {
    head(buf, UPDATE, w);
    put_u32(buf, accs.len() as u32);
    for a in accs {
        put_bytes(buf, a);
    }
    put_u32(buf, values.len() as u32);
    for v in values {
        put_bytes(buf, v);
    }
}

/// Writes a result call for `acc`.
pub fn put_result(buf: &mut Vec<u8>, w: Window, acc: &[u8]) {
    head(buf, RESULT, w);
    put_bytes(buf, acc);
}

/// Writes a process call with `n` values already encoded as `n × bytes` in `values`.
pub fn put_process(buf: &mut Vec<u8>, w: Window, n: u32, values: &[u8]) {
    head(buf, PROCESS, w);
    put_u32(buf, n);
    buf.extend_from_slice(values);
}

/// Reads a window call.
pub fn read_window_call(buf: &[u8]) -> Result<WindowCall<'_>, DecodeError> {
    let mut r = Reader::new(buf, "window call");
    let op = r.u8()?;
    let window = Window {
        start: r.i64()?,
        end: r.i64()?,
    };
    match op {
        UPDATE => {
            let accs = items_of(&mut r)?;
            let values = items_of(&mut r)?;
            Ok(WindowCall::Update {
                window,
                accs,
                values,
            })
        }
        RESULT => Ok(WindowCall::Result {
            window,
            acc: r.bytes()?,
        }),
        PROCESS => Ok(WindowCall::Process {
            window,
            values: items_of(&mut r)?,
        }),
        _ => Err(r.error()),
    }
}

/// Reads `u32 n, n × bytes` as items, leaving `r` after them.
fn items_of<'a>(r: &mut Reader<'a>) -> Result<Items<'a>, DecodeError> {
    let left = r.count(4)? as u32;
    let start = *r;
    for _ in 0..left {
        r.bytes()?;
    }
    Ok(Items { left, r: start })
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Window = Window { start: 0, end: 10 };

    fn all(items: Items<'_>) -> Vec<&[u8]> {
        items.map(Result::unwrap).collect()
    }

    #[test]
    fn calls_round_trip() {
        let mut buf = Vec::new();
        put_update(&mut buf, W, &[b"a1", b"a2"], [&b"x"[..], b"yy"].into_iter());
        let WindowCall::Update {
            window,
            accs,
            values,
        } = read_window_call(&buf).unwrap()
        else {
            panic!("an update");
        };
        assert_eq!(window, W);
        assert_eq!(all(accs), [b"a1", b"a2"]);
        assert_eq!(all(values), [&b"x"[..], b"yy"]);

        buf.clear();
        put_result(&mut buf, W, b"acc");
        assert!(matches!(
            read_window_call(&buf),
            Ok(WindowCall::Result { acc: b"acc", .. })
        ));

        buf.clear();
        let mut values = Vec::new();
        put_bytes(&mut values, b"v1");
        put_bytes(&mut values, b"");
        put_process(&mut buf, W, 2, &values);
        let WindowCall::Process { values, .. } = read_window_call(&buf).unwrap() else {
            panic!("a process call");
        };
        assert_eq!(all(values), [&b"v1"[..], b""]);
    }

    #[test]
    fn truncated_and_unknown_calls_are_errors() {
        let mut buf = Vec::new();
        put_update(&mut buf, W, &[b"acc"], [&b"x"[..]].into_iter());
        for cut in 0..buf.len() {
            assert!(read_window_call(&buf[..cut]).is_err(), "cut at {cut}");
        }
        buf[0] = 9;
        assert!(read_window_call(&buf).is_err());
    }
}
