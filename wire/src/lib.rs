//! The buffer encodings that cross the weir host/guest boundary.
//!
//! `wit/stream.wit` explains why batches, output, state and timers cross the component
//! boundary as one `list<u8>` each and documents the byte layout; this crate is the one
//! implementation of that layout, used by the host (`weir`) and by the guest SDK (`weir-sdk`).
//! Decoding never copies: readers hand out slices of the buffer.
//!
//! ```
//! use weir_wire::{Kind, OutputReader, OutputWriter, RecordRef};
//!
//! let mut out = OutputWriter::default();
//! out.push(None, &RecordRef { kind: Kind::Insert, key: Some(b"k"), timestamp: None, value: b"v" });
//! let buf = out.take();
//! let (side, rec) = OutputReader::new(&buf).next().unwrap().unwrap();
//! assert_eq!((side, rec.key, rec.value), (None, Some(&b"k"[..]), &b"v"[..]));
//! ```

#![deny(missing_docs)]

mod batch;
mod key_table;
mod map_load;
mod output;
mod primitives;
mod record;
mod state_ops;
mod timers;
mod window;

pub use batch::{BatchReader, BatchRecord, BatchWriter, FORGET, WRITE_BACK};
pub use key_table::read_key_table;
pub use map_load::{LARGE_MAP, MAP_LOAD_LIMIT, MapLoad, read_map_load};
pub use output::{OutputReader, OutputWriter};
pub use primitives::{
    CheckedItems, DecodeError, NONE, Reader, cmp_bytes, eq_bytes, extend_bytes, put_bytes, put_i64,
    put_opt_bytes, put_u8, put_u32,
};
pub use record::{Kind, RecordRef};
pub use state_ops::{
    Elements, ListOp, ListWrite, MapOp, ValueOp, put_list_op, put_map_op, put_value_op,
    put_value_set_short, read_list_ops, read_map_ops, read_value_ops,
};
pub use timers::{
    FiredTimer, TimeDomain, TimerOp, put_timer_op, read_fired_timers, read_timer_ops,
    write_fired_timers,
};
pub use window::{
    Items, Window, WindowCall, put_process, put_result, put_update, read_window_call,
};
