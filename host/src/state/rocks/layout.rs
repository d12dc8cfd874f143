//! The row layout of the database (see `rocks`): row keys, and the meta rows that hold state
//! declarations.

use crate::state::{StateKind, Ttl, TtlUpdate, TtlVisibility};

/// The first two bytes of every row that is not a key group's.
pub(super) const META: [u8; 2] = [0xFF, 0xFF];

/// `u16 group | u16 state | u32 key length | key`, appended to `buf`.
pub(super) fn put_prefix(buf: &mut Vec<u8>, st: usize, group: u32, key: &[u8]) {
    buf.extend_from_slice(&(group as u16).to_be_bytes());
    buf.extend_from_slice(&(st as u16).to_be_bytes());
    buf.extend_from_slice(&(key.len() as u32).to_be_bytes());
    buf.extend_from_slice(key);
}

/// The smallest key above every key that starts with `prefix` (`None`: there is none).
pub(super) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// What [`Rocks::declare`] stored.
pub(super) fn parse_declaration(v: &[u8]) -> Option<(String, StateKind, Option<Ttl>)> {
    let (&kind, rest) = v.split_first()?;
    let kind = match kind {
        0 => StateKind::Value,
        1 => StateKind::List,
        2 => StateKind::Map,
        _ => return None,
    };
    let (&has_ttl, rest) = rest.split_first()?;
    let (ttl, name) = if has_ttl == 1 {
        let (ms, rest) = rest.split_first_chunk::<8>()?;
        let (flags, name) = rest.split_first_chunk::<3>()?;
        let ttl = Ttl {
            ttl_ms: u64::from_le_bytes(*ms),
            update: match flags[0] {
                0 => TtlUpdate::OnCreateAndWrite,
                1 => TtlUpdate::OnReadAndWrite,
                _ => TtlUpdate::Disabled,
            },
            visibility: match flags[1] {
                0 => TtlVisibility::NeverReturnExpired,
                _ => TtlVisibility::ReturnExpiredIfNotCleanedUp,
            },
            event_time: flags[2] != 0,
        };
        (Some(ttl), name)
    } else {
        (None, rest)
    };
    Some((String::from_utf8(name.to_vec()).ok()?, kind, ttl))
}
