//! The map-state load answer's one exception: a map too large to send whole.

use crate::primitives::{DecodeError, Reader};

/// The largest map, in bytes of the load encoding (`bytes map-key, bytes map-value` per
/// entry), that a map-state load answer sends whole; a larger one is sent as [`LARGE_MAP`].
pub const MAP_LOAD_LIMIT: usize = 16 << 10;

/// In a map-state load answer, in place of a slot's entry count: the map is larger than
/// [`MAP_LOAD_LIMIT`] and its entries were not sent; a `u32` follows, a lower bound of its
/// number of entries.
pub const LARGE_MAP: u32 = u32::MAX - 1;

/// What a map-state load answer holds for one key slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapLoad {
    /// The map's entries follow, this many.
    Whole(usize),
    /// The map is larger than [`MAP_LOAD_LIMIT`] and has at least this many entries: read it
    /// entry by entry.
    Large(u32),
}

/// Reads the head of one slot's entry of a map-state load answer.
pub fn read_map_load(r: &mut Reader<'_>) -> Result<MapLoad, DecodeError> {
    if r.peek_u32() == Some(LARGE_MAP) {
        r.u32()?;
        return r.u32().map(MapLoad::Large);
    }
    // A key and a value are a length each at least.
    r.count(8).map(MapLoad::Whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{put_bytes, put_u32};

    #[test]
    fn a_large_map_is_told_apart_from_a_count() {
        let mut buf = Vec::new();
        put_u32(&mut buf, LARGE_MAP);
        put_u32(&mut buf, 700);
        put_u32(&mut buf, 1);
        put_bytes(&mut buf, b"k");
        put_bytes(&mut buf, b"v");
        let mut r = Reader::new(&buf, "map-state load");
        assert_eq!(read_map_load(&mut r), Ok(MapLoad::Large(700)));
        assert_eq!(read_map_load(&mut r), Ok(MapLoad::Whole(1)));
        assert_eq!((r.bytes(), r.bytes()), (Ok(&b"k"[..]), Ok(&b"v"[..])));
        assert!(r.is_empty());
    }
}
