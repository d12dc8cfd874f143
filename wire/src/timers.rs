//! Timers: the changes a guest sends (timers update, guest to host) and the timers that fire
//! (the key table, then the timers; host to guest).

use crate::key_table::read_key_table;
use crate::primitives::{DecodeError, Reader, put_bytes, put_i64, put_u8, put_u32, read_entries};

/// Time domain of a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeDomain {
    /// Event time: the timer is due once the watermark reaches its time.
    EventTime = 0,
    /// Processing time: the timer is due once the host's clock reaches its time (the host
    /// does not fire these yet).
    ProcessingTime = 1,
}

/// One timer change sent by the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerOp {
    /// `true` registers the timer, `false` deletes it.
    pub register: bool,
    /// Which clock the timer follows.
    pub domain: TimeDomain,
    /// The slot of the timer's key in the batch's key table.
    pub slot: u32,
    /// When the timer fires, in milliseconds.
    pub timestamp: i64,
}

/// Writes a timer change: op 0 registers an event-time timer, 1 deletes one, 2 and 3 the same
/// for processing time.
pub fn put_timer_op(buf: &mut Vec<u8>, op: TimerOp) {
    let code = match (op.domain, op.register) {
        (TimeDomain::EventTime, true) => 0,
        (TimeDomain::EventTime, false) => 1,
        (TimeDomain::ProcessingTime, true) => 2,
        (TimeDomain::ProcessingTime, false) => 3,
    };
    // One growth of `buf` rather than one per field.
    let mut bytes = [code; 13];
    bytes[1..5].copy_from_slice(&op.slot.to_le_bytes());
    bytes[5..].copy_from_slice(&op.timestamp.to_le_bytes());
    buf.extend_from_slice(&bytes);
}

/// Iterates the changes of a timers-update buffer written with [`put_timer_op`].
pub fn read_timer_ops(buf: &[u8]) -> impl Iterator<Item = Result<TimerOp, DecodeError>> + '_ {
    read_entries(buf, "timer changes", |r| {
        let (domain, register) = match r.u8()? {
            0 => (TimeDomain::EventTime, true),
            1 => (TimeDomain::EventTime, false),
            2 => (TimeDomain::ProcessingTime, true),
            3 => (TimeDomain::ProcessingTime, false),
            _ => return Err(r.error()),
        };
        Ok(TimerOp {
            register,
            domain,
            slot: r.u32()?,
            timestamp: r.i64()?,
        })
    })
}

/// A fired timer as the guest sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiredTimer<'a> {
    /// Which clock the timer followed.
    pub domain: TimeDomain,
    /// The slot of its key in the buffer's key table.
    pub slot: u32,
    /// The key it was registered for.
    pub key: &'a [u8],
    /// The time it was registered for, in milliseconds.
    pub timestamp: i64,
}

/// Writes the fired-timers buffer: the key table then the timers.
pub fn write_fired_timers(
    buf: &mut Vec<u8>,
    keys: &[&[u8]],
    timers: impl ExactSizeIterator<Item = (TimeDomain, u32, i64)>,
) {
    buf.clear();
    put_u32(buf, keys.len() as u32);
    for k in keys {
        put_bytes(buf, k);
    }
    put_u32(buf, timers.len() as u32);
    for (domain, slot, ts) in timers {
        put_u8(buf, domain as u8);
        put_u32(buf, slot);
        put_i64(buf, ts);
    }
}

/// Reads a fired-timers buffer; `keys` receives the key table.
pub fn read_fired_timers<'a>(
    buf: &'a [u8],
    keys: &mut Vec<&'a [u8]>,
    out: &mut Vec<FiredTimer<'a>>,
) -> Result<(), DecodeError> {
    let mut r = Reader::new(buf, "timers");
    read_key_table(&mut r, keys)?;
    let n = r.count(13)?;
    out.clear();
    for _ in 0..n {
        let domain = match r.u8()? {
            0 => TimeDomain::EventTime,
            1 => TimeDomain::ProcessingTime,
            _ => return Err(r.error()),
        };
        let slot = r.u32()?;
        let key = *keys.get(slot as usize).ok_or_else(|| r.error())?;
        out.push(FiredTimer {
            domain,
            slot,
            key,
            timestamp: r.i64()?,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_round_trip() {
        let mut b = Vec::new();
        let op = TimerOp {
            register: false,
            domain: TimeDomain::ProcessingTime,
            slot: 2,
            timestamp: 99,
        };
        put_timer_op(&mut b, op);
        assert_eq!(read_timer_ops(&b).next().unwrap().unwrap(), op);

        let mut buf = Vec::new();
        write_fired_timers(
            &mut buf,
            &[b"a", b"b"],
            [(TimeDomain::EventTime, 1, 10)].into_iter(),
        );
        let (mut keys, mut fired) = (Vec::new(), Vec::new());
        read_fired_timers(&buf, &mut keys, &mut fired).unwrap();
        assert_eq!(
            fired,
            vec![FiredTimer {
                domain: TimeDomain::EventTime,
                slot: 1,
                key: b"b",
                timestamp: 10
            }]
        );
    }
}
