//! The key table that opens batch and fired-timer buffers: each distinct key once, so that
//! records and timers refer to keys by slot and the guest's state calls carry each key once.

use crate::primitives::{DecodeError, Reader};

/// Reads a key table: `u32 n, n × bytes`.
pub fn read_key_table<'a>(r: &mut Reader<'a>, keys: &mut Vec<&'a [u8]>) -> Result<(), DecodeError> {
    keys.clear();
    let n = r.count(4)?;
    keys.reserve(n);
    for _ in 0..n {
        keys.push(r.bytes()?);
    }
    Ok(())
}
