//! The output of a chain: partitions records to the subtasks of downstream chains over
//! bounded channels.
//!
//! Records are collected per downstream subtask and sent as full batches; a full channel
//! blocks the sender, which is how backpressure reaches the sources.

use std::sync::atomic::Ordering;

use crossbeam_channel::Sender;

use super::debloat::Budget;

use crate::batch::Batch;
use crate::checkpoint::Barrier;
use crate::job::spec::EdgeKind;
use crate::key_group::{key_group, subtask_for_key_group};
use crate::watermark::Watermark;

/// What travels on a channel.
#[derive(Debug)]
pub enum Message {
    Data(Batch),
    /// A checkpoint barrier: every record sent before it belongs to its checkpoint.
    Barrier(Barrier),
    /// Event time: what the sender says after the records before it (see
    /// [`crate::watermark`]).
    Watermark(Watermark),
    /// The sender has no more records.
    End,
}

/// The receiving side went away: its task failed or the job is being cancelled.
#[derive(Debug)]
pub struct Disconnected;

/// Why records could not be pushed.
#[derive(Debug)]
pub enum PushError {
    Disconnected,
    /// A record without a key was headed for a `key_by` edge into the named vertex.
    MissingKey {
        to: String,
    },
}

impl From<Disconnected> for PushError {
    fn from(_: Disconnected) -> Self {
        PushError::Disconnected
    }
}

/// One downstream chain.
pub(crate) struct Target {
    /// The downstream vertex, for errors.
    to: String,
    /// The side output this target receives, or the main output.
    side_output: Option<String>,
    edge: EdgeKind,
    /// One sender per downstream subtask (one in total for a forward edge).
    senders: Vec<Sender<Message>>,
    /// Each channel's debloating budget, and its value read at the start of a push.
    budgets: Vec<Budget>,
    limits: Vec<usize>,
    pending: Vec<Batch>,
    next: usize,
    max_parallelism: u32,
}

impl Target {
    pub(crate) fn new(
        to: String,
        side_output: Option<String>,
        edge: EdgeKind,
        channels: Vec<(Sender<Message>, Budget)>,
        max_parallelism: u32,
    ) -> Self {
        let (senders, budgets): (Vec<_>, Vec<_>) = channels.into_iter().unzip();
        Target {
            to,
            side_output,
            edge,
            pending: senders.iter().map(|_| Batch::default()).collect(),
            limits: budgets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            budgets,
            senders,
            next: 0,
            max_parallelism,
        }
    }

    /// Whether the pending batch of channel `i` is as large as it may get.
    fn is_full(&self, i: usize) -> bool {
        self.pending[i].is_full() || self.pending[i].len() >= self.limits[i]
    }

    fn send(&mut self, i: usize) -> Result<(), Disconnected> {
        let batch = self.pending[i].take_keeping_room();
        self.senders[i]
            .send(Message::Data(batch))
            .map_err(|_| Disconnected)
    }
}

/// Sends a chain's output to every downstream chain.
pub(crate) struct Output {
    targets: Vec<Target>,
}

impl Output {
    pub(crate) fn new(targets: Vec<Target>) -> Self {
        Output { targets }
    }

    /// Partitions `batch`, of the main output (`side_output` None) or of a side output, into
    /// the pending batches of the targets that read it, sending those that fill up. Returns
    /// whether any target reads it.
    // Out of line (a call per batch): `cargo xtask bench --callgrind` counts the channels'
    // instructions by this function's name, which inlining into the task loop removed from
    // the plain release build.
    #[inline(never)]
    pub(crate) fn push(
        &mut self,
        side_output: Option<&str>,
        batch: &Batch,
    ) -> Result<bool, PushError> {
        let mut read = false;
        for t in &mut self.targets {
            if t.side_output.as_deref() != side_output {
                continue;
            }
            read = true;
            for (limit, budget) in t.limits.iter_mut().zip(&t.budgets) {
                *limit = budget.load(Ordering::Relaxed);
            }
            match t.edge {
                EdgeKind::KeyBy => {
                    let p = t.senders.len() as u32;
                    for rec in batch.iter() {
                        let Some(key) = rec.key else {
                            return Err(PushError::MissingKey { to: t.to.clone() });
                        };
                        let g = key_group(key, t.max_parallelism);
                        let i = subtask_for_key_group(g, t.max_parallelism, p) as usize;
                        t.pending[i].push(&rec);
                        if t.is_full(i) {
                            t.send(i)?;
                        }
                    }
                }
                // Forward has a single sender; rebalance deals whole batches round-robin.
                EdgeKind::Forward | EdgeKind::Rebalance => {
                    for rec in batch.iter() {
                        let i = t.next;
                        t.pending[i].push(&rec);
                        if t.is_full(i) {
                            t.send(i)?;
                            t.next = (t.next + 1) % t.senders.len();
                        }
                    }
                }
            }
        }
        Ok(read)
    }

    /// Sends every non-empty pending batch.
    // Out of line for the same reason as `push`.
    #[inline(never)]
    pub(crate) fn flush(&mut self) -> Result<(), Disconnected> {
        for t in &mut self.targets {
            for i in 0..t.senders.len() {
                if !t.pending[i].is_empty() {
                    t.send(i)?;
                }
            }
            if t.edge == EdgeKind::Rebalance {
                t.next = (t.next + 1) % t.senders.len();
            }
        }
        Ok(())
    }

    /// Flushes and sends `barrier` to every downstream subtask, after the records before it.
    pub(crate) fn barrier(&mut self, barrier: Barrier) -> Result<(), Disconnected> {
        self.broadcast(|| Message::Barrier(barrier))
    }

    /// Flushes and sends `w` to every downstream subtask, after the records before it. (A
    /// watermark does cut the pending batches short, so that event time moves on at once
    /// downstream: a generator makes at most one per batch it sees.)
    pub(crate) fn watermark(&mut self, w: Watermark) -> Result<(), Disconnected> {
        self.broadcast(|| Message::Watermark(w))
    }

    /// Flushes and tells every downstream subtask that this one is done.
    pub(crate) fn end(&mut self) -> Result<(), Disconnected> {
        self.broadcast(|| Message::End)
    }

    fn broadcast(&mut self, message: impl Fn() -> Message) -> Result<(), Disconnected> {
        self.flush()?;
        for t in &self.targets {
            for s in &t.senders {
                s.send(message()).map_err(|_| Disconnected)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::debloat::new_budget;
    use crossbeam_channel::bounded;
    use weir_wire::Kind;

    fn drain(rx: &crossbeam_channel::Receiver<Message>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            match m {
                Message::Data(b) => out.extend(b.iter().map(|r| r.value.to_vec())),
                Message::Barrier(b) => out.push(format!("<barrier {}>", b.id).into_bytes()),
                Message::Watermark(w) => out.push(format!("<{w:?}>").into_bytes()),
                Message::End => out.push(b"<end>".to_vec()),
            }
        }
        out
    }

    #[test]
    fn key_by_sends_each_key_to_its_owner() {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..3).map(|_| bounded(100)).unzip();
        let mut out = Output::new(vec![Target::new(
            "c".into(),
            None,
            EdgeKind::KeyBy,
            txs.into_iter().map(|tx| (tx, new_budget(false))).collect(),
            128,
        )]);
        let mut b = Batch::default();
        for i in 0..100 {
            let k = format!("k{i}");
            b.push_with(Kind::Insert, Some(k.as_bytes()), None, |v| {
                v.extend_from_slice(k.as_bytes())
            });
        }
        out.push(None, &b).unwrap();
        out.end().unwrap();
        let mut total = 0;
        for (i, rx) in rxs.iter().enumerate() {
            let got = drain(rx);
            assert_eq!(got.last().unwrap(), b"<end>");
            for v in &got[..got.len() - 1] {
                let g = key_group(v, 128);
                assert_eq!(subtask_for_key_group(g, 128, 3) as usize, i);
                total += 1;
            }
        }
        assert_eq!(total, 100);
    }

    #[test]
    fn a_record_without_key_on_key_by_is_an_error() {
        let (tx, _rx) = bounded(1);
        let mut out = Output::new(vec![Target::new(
            "count".into(),
            None,
            EdgeKind::KeyBy,
            vec![(tx, new_budget(false))],
            128,
        )]);
        let mut b = Batch::default();
        b.push_with(Kind::Insert, None, None, |v| v.extend_from_slice(b"x"));
        assert!(matches!(out.push(None, &b), Err(PushError::MissingKey { to }) if to == "count"));
    }

    #[test]
    fn side_outputs_reach_only_their_readers() {
        let (main_tx, main_rx) = bounded(10);
        let (late_tx, late_rx) = bounded(10);
        let mut out = Output::new(vec![
            Target::new(
                "main".into(),
                None,
                EdgeKind::Forward,
                vec![(main_tx, new_budget(false))],
                128,
            ),
            Target::new(
                "late".into(),
                Some("late".into()),
                EdgeKind::Forward,
                vec![(late_tx, new_budget(false))],
                128,
            ),
        ]);
        let batch = |v: &[u8]| {
            let mut b = Batch::default();
            b.push_with(Kind::Insert, None, None, |buf| buf.extend_from_slice(v));
            b
        };
        assert!(out.push(None, &batch(b"m")).unwrap());
        assert!(out.push(Some("late"), &batch(b"l")).unwrap());
        assert!(
            !out.push(Some("other"), &batch(b"o")).unwrap(),
            "nobody reads it"
        );
        out.end().unwrap();
        assert_eq!(drain(&main_rx), vec![b"m".to_vec(), b"<end>".to_vec()]);
        assert_eq!(drain(&late_rx), vec![b"l".to_vec(), b"<end>".to_vec()]);
    }

    #[test]
    fn a_watermark_follows_the_records_before_it_on_every_channel() {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..2).map(|_| bounded(100)).unzip();
        let mut out = Output::new(vec![Target::new(
            "c".into(),
            None,
            EdgeKind::KeyBy,
            txs.into_iter().map(|tx| (tx, new_budget(false))).collect(),
            128,
        )]);
        // Keys of subtask 0 only: subtask 1's channel has nothing pending.
        let keys: Vec<String> = (0..)
            .map(|i| format!("k{i}"))
            .filter(|k| subtask_for_key_group(key_group(k.as_bytes(), 128), 128, 2) == 0)
            .take(2)
            .collect();
        let mut b = Batch::default();
        for k in &keys {
            b.push_with(Kind::Insert, Some(k.as_bytes()), None, |v| {
                v.extend_from_slice(k.as_bytes())
            });
        }
        out.push(None, &b).unwrap();
        out.watermark(Watermark::At(5)).unwrap();
        out.end().unwrap();
        let k = |i: usize| keys[i].as_bytes().to_vec();
        assert_eq!(
            drain(&rxs[0]),
            [k(0), k(1), b"<At(5)>".to_vec(), b"<end>".to_vec()]
        );
        assert_eq!(drain(&rxs[1]), [b"<At(5)>".to_vec(), b"<end>".to_vec()]);
    }

    #[test]
    fn a_dropped_receiver_is_reported() {
        let (tx, rx) = bounded(1);
        drop(rx);
        let mut out = Output::new(vec![Target::new(
            "c".into(),
            None,
            EdgeKind::Forward,
            vec![(tx, new_budget(false))],
            128,
        )]);
        assert!(out.end().is_err());
    }

    #[test]
    fn a_smaller_budget_cuts_smaller_batches_on_every_edge() {
        for edge in [EdgeKind::Forward, EdgeKind::Rebalance, EdgeKind::KeyBy] {
            let (tx, rx) = bounded(100);
            let budget = new_budget(false);
            let mut out = Output::new(vec![Target::new(
                "c".into(),
                None,
                edge,
                vec![(tx, std::sync::Arc::clone(&budget))],
                128,
            )]);
            budget.store(100, Ordering::Relaxed);
            let mut b = Batch::default();
            for i in 0..250 {
                let k = format!("k{i}");
                b.push_with(Kind::Insert, Some(k.as_bytes()), None, |v| {
                    v.extend_from_slice(k.as_bytes())
                });
            }
            out.push(None, &b).unwrap();
            out.end().unwrap();
            let sizes: Vec<usize> = rx
                .try_iter()
                .filter_map(|m| match m {
                    Message::Data(b) => Some(b.len()),
                    _ => None,
                })
                .collect();
            assert_eq!(sizes, [100, 100, 50], "{edge:?}");
        }
    }
}
