//! Built-in operators written in Rust, run behind the same [`Operator`] trait as WebAssembly
//! components. They serve as building blocks and as the baseline of the WASM-vs-native
//! benchmark: `split_words` and `count_words` do exactly what the word count example's
//! guests do, on the same batches and the same keyed state store.

pub(crate) mod join;
mod timed;
pub(crate) mod window;

use weir_wire::Kind;

use crate::batch::Batch;
use crate::operator::{Operator, OperatorContext, OperatorError, Snapshot};
use std::path::Path;

use crate::state::{KeyedState, Slots, StateId, StateKind, StateSetup};

/// Names of the built-in operators, for `native = "..."` in a job spec.
pub const NAMES: &[&str] = &["split_words", "count_words"];

pub fn exists(name: &str) -> bool {
    NAMES.contains(&name)
}

/// Whether the operator's records have keys (`None`: depends on its input).
pub fn emits_keys(name: &str, _inputs: impl Iterator<Item = Option<bool>>) -> Option<bool> {
    match name {
        "split_words" | "count_words" => Some(true),
        _ => None,
    }
}

pub fn build(
    name: &str,
    ctx: &OperatorContext,
    state: &StateSetup,
) -> Result<Box<dyn Operator>, OperatorError> {
    match name {
        "split_words" => Ok(Box::new(SplitWords)),
        "count_words" => {
            let (state, count) = keyed_state(ctx, state, "count", StateKind::Value)?;
            Ok(Box::new(CountWords {
                state,
                count,
                slots: Slots::default(),
                counts: Vec::new(),
                record_slots: Vec::new(),
            }))
        }
        other => Err(OperatorError::Contract(format!(
            "unknown native operator \"{other}\""
        ))),
    }
}

/// What a native operator's unit test runs as: the only subtask, every key group.
#[cfg(test)]
pub(crate) fn test_context() -> OperatorContext {
    OperatorContext {
        job: "j".into(),
        uid: "u".into(),
        subtask: 0,
        parallelism: 1,
        max_parallelism: 128,
        key_groups: 0..128,
        config: "{}".into(),
        cancelled: Default::default(),
    }
}

/// A failed read or write of a native operator's keyed state.
fn failed(e: crate::state::StateError) -> OperatorError {
    OperatorError::Failed(e.to_string())
}

/// The operator's keyed state as `setup` says, with the one state it declares.
fn keyed_state(
    ctx: &OperatorContext,
    setup: &StateSetup,
    name: &str,
    kind: StateKind,
) -> Result<(KeyedState, StateId), OperatorError> {
    let mut state = KeyedState::open(
        setup,
        &ctx.uid,
        ctx.subtask,
        ctx.max_parallelism,
        ctx.key_groups.clone(),
    )
    .map_err(failed)?;
    let id = state
        .declare(name, kind, None)
        .map_err(|e| OperatorError::Contract(e.to_string()))?;
    Ok((state, id))
}

/// The distinct keys of `input` into `slots` and each record's slot into `record_slots`
/// (both emptied first; one hash per record); a record without a key is an error naming the
/// operator (`what` `name`) and the fix.
fn keyed_slots(
    state: &KeyedState,
    input: &Batch,
    slots: &mut Slots,
    record_slots: &mut Vec<u32>,
    (what, name): (&str, &str),
) -> Result<(), OperatorError> {
    slots.clear();
    record_slots.clear();
    for rec in input.iter() {
        let key = rec.key.ok_or_else(|| {
            OperatorError::Contract(format!(
                "{what} \"{name}\" got a record without a key; key its input (edge = \"key_by\")"
            ))
        })?;
        record_slots.push(slots.slot_of(key, || state.key_group(key)).0);
    }
    Ok(())
}

/// Checkpoint `n` of a native operator's keyed state into `snapshot`.
fn snapshot_state(
    state: &mut KeyedState,
    n: u64,
    snapshot: &mut Snapshot,
) -> Result<(), OperatorError> {
    snapshot.shared = state
        .checkpoint(n, snapshot.format, &mut snapshot.bytes)
        .map_err(|e| OperatorError::Failed(format!("snapshot of its state failed: {e}")))?;
    Ok(())
}

/// Restores a native operator's keyed state from a checkpoint's `snapshot`.
fn restore_state(
    state: &mut KeyedState,
    snapshot: &[u8],
    shared: &Path,
) -> Result<(), OperatorError> {
    state
        .restore_file(snapshot, shared)
        .map_err(|e| OperatorError::Contract(e.to_string()))
}

/// Splits each line on ASCII whitespace; emits every word with key = value = the word.
struct SplitWords;

impl Operator for SplitWords {
    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        for rec in input.iter() {
            for word in rec.value.split(u8::is_ascii_whitespace) {
                if !word.is_empty() {
                    out.push_with(Kind::Insert, Some(word), rec.timestamp, |b| {
                        b.extend_from_slice(word)
                    });
                }
            }
        }
        Ok(())
    }
}

/// Counts records per key in a value state; emits key = word, value = the new count.
struct CountWords {
    state: KeyedState,
    count: StateId,
    slots: Slots,
    counts: Vec<u64>,
    /// The slot of each record's key in `slots` (one hash per record).
    record_slots: Vec<u32>,
}

impl Operator for CountWords {
    fn snapshot(&mut self, n: u64, snapshot: &mut Snapshot) -> Result<(), OperatorError> {
        snapshot_state(&mut self.state, n, snapshot)
    }

    fn notify_complete(&mut self, n: u64) {
        self.state.notify_complete(n);
    }

    fn restore(&mut self, snapshot: &[u8], shared: &Path) -> Result<(), OperatorError> {
        restore_state(&mut self.state, snapshot, shared)
    }

    fn process(&mut self, input: &Batch, out: &mut Batch) -> Result<(), OperatorError> {
        // As a guest does: the batch's distinct keys, their counts read in one call and
        // written back in one.
        keyed_slots(
            &self.state,
            input,
            &mut self.slots,
            &mut self.record_slots,
            ("operator", "count_words"),
        )?;
        let counts = &mut self.counts;
        counts.clear();
        self.state
            .read_values(self.count, &self.slots, |_, v| {
                counts.push(v.map_or(0, |v| decode_cbor_u64(v).0))
            })
            .map_err(|e| OperatorError::Contract(e.to_string()))?;
        for (rec, &slot) in input.iter().zip(&self.record_slots) {
            let key = rec.key.unwrap_or_default();
            let n = &mut counts[slot as usize];
            *n += 1;
            let kind = if *n == 1 {
                Kind::Insert
            } else {
                Kind::UpdateAfter
            };
            let mut text = itoa::Buffer::new();
            let text = text.format(*n).as_bytes();
            out.push_with(kind, Some(key), rec.timestamp, |b| {
                b.extend_from_slice(text)
            });
        }
        let mut encoded = Vec::with_capacity(counts.len() * 9);
        for &n in counts.iter() {
            let mut buf = [0u8; 9];
            let len = encode_cbor_u64(n, &mut buf);
            encoded.extend_from_slice(&buf[..len]);
        }
        let mut rest = &encoded[..];
        let values = counts.iter().enumerate().map(|(slot, &n)| {
            let (v, tail) = rest.split_at(cbor_u64_len(n));
            rest = tail;
            (slot, Some(v))
        });
        self.state
            .write_values(self.count, &self.slots, values)
            .map_err(|e| OperatorError::Contract(e.to_string()))
    }
}

/// Bytes of `n` as a CBOR unsigned integer.
fn cbor_u64_len(n: u64) -> usize {
    match n {
        0..24 => 1,
        24..0x100 => 2,
        0x100..0x1_0000 => 3,
        0x1_0000..0x1_0000_0000 => 5,
        _ => 9,
    }
}

/// `n` as a CBOR unsigned integer (shortest form), the encoding the guest SDKs' codec gives
/// a `u64`, so that this operator and a guest's count read each other's state.
fn encode_cbor_u64(n: u64, buf: &mut [u8; 9]) -> usize {
    let len = cbor_u64_len(n);
    match len {
        1 => buf[0] = n as u8,
        2 => buf[..2].copy_from_slice(&[0x18, n as u8]),
        3 => {
            buf[0] = 0x19;
            buf[1..3].copy_from_slice(&(n as u16).to_be_bytes());
        }
        5 => {
            buf[0] = 0x1a;
            buf[1..5].copy_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            buf[0] = 0x1b;
            buf[1..9].copy_from_slice(&n.to_be_bytes());
        }
    }
    len
}

/// A CBOR unsigned integer at the start of `b`, and its length (0 for what is not one).
fn decode_cbor_u64(b: &[u8]) -> (u64, usize) {
    let arg = |n: usize| -> Option<u64> {
        let bytes = b.get(1..1 + n)?;
        Some(bytes.iter().fold(0, |acc, &x| acc << 8 | u64::from(x)))
    };
    let decoded = match b.first() {
        Some(&x) if x < 24 => Some((u64::from(x), 1)),
        Some(0x18) => arg(1).map(|n| (n, 2)),
        Some(0x19) => arg(2).map(|n| (n, 3)),
        Some(0x1a) => arg(4).map(|n| (n, 5)),
        Some(0x1b) => arg(8).map(|n| (n, 9)),
        _ => None,
    };
    decoded.unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_then_count() {
        let mut lines = Batch::default();
        lines.push_with(Kind::Insert, None, None, |b| {
            b.extend_from_slice(b" a b  a\t")
        });
        let mut words = Batch::default();
        build("split_words", &test_context(), &StateSetup::memory())
            .unwrap()
            .process(&lines, &mut words)
            .unwrap();
        let mut counts = Batch::default();
        build("count_words", &test_context(), &StateSetup::memory())
            .unwrap()
            .process(&words, &mut counts)
            .unwrap();
        let got: Vec<_> = counts
            .iter()
            .map(|r| (r.key.unwrap().to_vec(), r.value.to_vec(), r.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), b"1".to_vec(), Kind::Insert),
                (b"b".to_vec(), b"1".to_vec(), Kind::Insert),
                (b"a".to_vec(), b"2".to_vec(), Kind::UpdateAfter),
            ]
        );
    }

    #[test]
    fn cbor_u64_round_trip() {
        // The bytes of RFC 8949's examples (appendix A).
        let cases: [(u64, &[u8]); 7] = [
            (0, &[0x00]),
            (23, &[0x17]),
            (24, &[0x18, 0x18]),
            (1000, &[0x19, 0x03, 0xe8]),
            (1_000_000, &[0x1a, 0x00, 0x0f, 0x42, 0x40]),
            (
                1_000_000_000_000,
                &[0x1b, 0, 0, 0, 0xe8, 0xd4, 0xa5, 0x10, 0],
            ),
            (
                u64::MAX,
                &[0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ];
        for (n, bytes) in cases {
            let mut buf = [0; 9];
            let len = encode_cbor_u64(n, &mut buf);
            assert_eq!(&buf[..len], bytes);
            assert_eq!(decode_cbor_u64(&buf[..len]), (n, len));
            assert_eq!(cbor_u64_len(n), len);
        }
    }
}
