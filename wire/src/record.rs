//! Records as batches and output carry them, and the header byte that says which of their
//! optional fields follow.

/// A record's changelog kind in the low two bits of its header byte.
const KIND_MASK: u8 = 0b11;
pub(crate) const HAS_KEY: u8 = 1 << 2;
pub(crate) const HAS_TIMESTAMP: u8 = 1 << 3;
/// Output only: a side-output name follows the header.
pub(crate) const TO_SIDE_OUTPUT: u8 = 1 << 4;
/// Batch only: the record came from the operator's second input (`second_input`).
pub(crate) const SECOND_INPUT: u8 = 1 << 5;

/// Changelog kind of a record, as Flink's RowKind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A new row (the kind of every record of an append-only stream).
    #[default]
    Insert = 0,
    /// The old content of an updated row, retracted.
    UpdateBefore = 1,
    /// The new content of an updated row.
    UpdateAfter = 2,
    /// A row removed.
    Delete = 3,
}

impl Kind {
    /// The kind in a header byte.
    #[inline]
    pub(crate) fn from_bits(bits: u8) -> Kind {
        match bits & KIND_MASK {
            0 => Kind::Insert,
            1 => Kind::UpdateBefore,
            2 => Kind::UpdateAfter,
            _ => Kind::Delete,
        }
    }
}

/// A record borrowed from a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Changelog kind.
    pub kind: Kind,
    /// The key, if the record has one (keyed state and timers need it).
    pub key: Option<&'a [u8]>,
    /// Event time in milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// The value, opaque to weir.
    pub value: &'a [u8],
}

/// The header byte of a record: its kind and which optional fields follow.
#[inline]
pub(crate) fn header(kind: Kind, key: bool, timestamp: bool, side: bool) -> u8 {
    // Arithmetic rather than branches: a guest compiles each `if` to a select.
    kind as u8
        | (u8::from(key) * HAS_KEY)
        | (u8::from(timestamp) * HAS_TIMESTAMP)
        | (u8::from(side) * TO_SIDE_OUTPUT)
}
