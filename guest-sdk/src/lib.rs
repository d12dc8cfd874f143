//! Write weir stream operators in Rust.
//!
//! An operator is a type that implements [`Operator`] (one required method) and is exported
//! with [`export!`]; `cargo build --release --target wasm32-wasip2` turns the crate into a
//! WebAssembly component that the weir host runs sandboxed. This is a complete operator:
//!
//! ```
//! use weir_sdk::prelude::*;
//!
//! #[derive(Default)]
//! struct CountWords;
//!
//! impl Operator for CountWords {
//!     fn process(&mut self, ctx: &mut Context, word: Record<'_>) -> Result<()> {
//!         let count = ctx.value_state::<u64>("count");
//!         let n = count.get()?.unwrap_or(0) + 1;
//!         count.set(&n)?;
//!         ctx.emit_display(word.key(), n)   // value = n formatted with Display, no String allocated
//!     }
//! }
//!
//! weir_sdk::export!(CountWords);
//! # let mut h = weir_sdk::testing::Harness::<CountWords>::new();
//! # assert_eq!(h.process([("a", "a"), ("a", "a")])[1].value_str(), "2");
//! ```
//!
//! and this is its unit test, run natively by `cargo test` through the same runtime code the
//! component uses ([`testing::Harness`]):
//!
//! ```
//! # use weir_sdk::prelude::*;
//! # #[derive(Default)]
//! # struct CountWords;
//! # impl Operator for CountWords {
//! #     fn process(&mut self, ctx: &mut Context, word: Record<'_>) -> Result<()> {
//! #         let count = ctx.value_state::<u64>("count");
//! #         let n = count.get()?.unwrap_or(0) + 1;
//! #         count.set(&n)?;
//! #         ctx.emit_display(word.key(), n)
//! #     }
//! # }
//! use weir_sdk::testing::Harness;
//!
//! let mut h = Harness::<CountWords>::new();
//! h.process([("to", "to"), ("be", "be")]);
//! let out = h.process([("to", "to")]);
//! assert_eq!((out[0].key_str(), out[0].value_str()), (Some("to"), "2"));
//! ```
//!
//! # Two inputs, and window functions
//!
//! An operator with a `second_input` in its job spec (Flink's `connect`) gets the records of
//! both streams in [`Operator::process`]; [`Record::input`] says which (0 or 1), and both
//! share the key's state and timers. A window of the host can run user code for its result:
//! an [`window::AggregateFunction`] or a [`window::ProcessWindowFunction`], exported with
//! `weir_sdk::export!(weir_sdk::window::Aggregate<MyFunction>)`.
//!
//! # What crosses the boundary, and when
//!
//! Calls between the host and a component cost far more than an operator's work per record
//! (see `wit/stream.wit`), so the SDK makes a fixed number of them per batch, whatever the
//! number of records:
//!
//! - a batch arrives as one buffer that is decoded in place: [`Record`] borrows from it;
//! - state is of the current record's key. The first read of a state in a batch loads its
//!   values for every key of the batch in one call; reads and writes then hit a cache in the
//!   guest; at the end of the batch each changed state goes back in one call.
//!   [`ListState::add`] never loads. With RocksDB state, a value state without a TTL keeps
//!   its values from batch to batch ([`Operator::STATE_CACHE_BYTES`]): a batch loads only
//!   the keys it does not hold, and its changes go back when the host asks for them, before
//!   a checkpoint;
//! - output is buffered and sent per 64 KiB and at the end of the batch;
//! - timer changes are sent once per batch.
//!
//! State values are encoded with CBOR (see [`Codec`]), so any `serde` type can be stored, and
//! the Python and JavaScript SDKs read what this one writes.
//!
//! # Failures
//!
//! An `Err` from a hook fails the call with its message; a panic is logged (message and
//! location) at level error before the instance traps. Either way the host fails the task
//! and restarts the job from its last checkpoint; state lives in the host and survives.

#![warn(missing_docs)]

extern crate self as weir_sdk;

pub mod allocator;
mod backend;
mod context;
mod error;
mod fxhash;
mod level;
mod operator;
mod record;
mod runtime;
mod state;
pub mod testing;
#[cfg(test)]
mod tests;
mod ttl;
pub mod window;
#[cfg(target_arch = "wasm32")]
mod wit;

/// See [`allocator`]: in a component, freed small blocks are reused before `dlmalloc` is asked.
#[cfg(all(
    feature = "allocator",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
#[global_allocator]
static ALLOCATOR: allocator::Cached = allocator::Cached::new(std::alloc::System);

pub use context::Context;
pub use error::{Error, Result};
pub use level::Level;
pub use operator::{OpenContext, Operator};
pub use record::{Record, Timer};
pub use state::{
    Codec, CodecError, ListState, ListStateHandle, MapState, MapStateHandle, OperatorListState,
    OperatorState, Redistribution, StateHandle, ValueState, ValueStateHandle,
};
pub use ttl::{StateVisibility, Ttl, TtlTimeCharacteristic, UpdateType};
pub use weir_wire::{Kind, TimeDomain};

/// The README's code blocks, compiled and run as doctests (its operator example is Rust guest
/// code, so they run here).
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// Everything an operator author needs: `use weir_sdk::prelude::*;`.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct Noop;
///
/// impl Operator for Noop {
///     fn process(&mut self, _ctx: &mut Context, _rec: Record<'_>) -> Result<()> {
///         Ok(())
///     }
/// }
/// ```
pub mod prelude {
    pub use crate::{
        Codec, Context, Error, Kind, Level, ListState, ListStateHandle, MapState, MapStateHandle,
        OpenContext, Operator, OperatorListState, OperatorState, Record, Redistribution, Result,
        StateHandle, TimeDomain, Timer, Ttl, ValueState, ValueStateHandle,
    };
}

/// Exports an operator type as the component's `weir:stream/operator` implementation.
///
/// The type must implement [`Operator`] and `Default`; the host's `open` creates one instance
/// with `Default` and keeps it for the life of the component instance. Use it once per crate,
/// at the top level. When not compiling for `wasm32` it only checks the type, so the crate
/// still builds and tests natively.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct PassThrough;
///
/// impl Operator for PassThrough {
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         ctx.emit_record(rec.kind(), rec.key(), rec.timestamp(), rec.value())
///     }
/// }
///
/// weir_sdk::export!(PassThrough);
/// ```
#[macro_export]
macro_rules! export {
    ($operator:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __WeirOperator;

            impl $crate::__private::Guest for __WeirOperator {
                fn open(
                    ctx: $crate::__private::WitOpenContext,
                ) -> ::core::result::Result<(), $crate::__private::String> {
                    $crate::__private::open::<$operator>(ctx)
                }

                fn process(
                    batch: $crate::__private::Vec<u8>,
                ) -> ::core::result::Result<(), $crate::__private::String> {
                    $crate::__private::process(batch)
                }

                fn on_timers(
                    timers: $crate::__private::Vec<u8>,
                ) -> ::core::result::Result<(), $crate::__private::String> {
                    $crate::__private::on_timers(timers)
                }

                fn close() -> ::core::result::Result<(), $crate::__private::String> {
                    $crate::__private::close()
                }
            }

            $crate::__private::bindings::__export_processor!(
                __WeirOperator with_types_in $crate::__private::bindings
            );
        };

        #[cfg(not(target_arch = "wasm32"))]
        const _: () = $crate::__private::assert_operator::<$operator>();
    };
}

#[doc(hidden)]
pub mod __private {
    pub use std::string::String;
    pub use std::vec::Vec;

    #[cfg(target_arch = "wasm32")]
    pub use crate::wit::{Guest, WitOpenContext, bindings, close, on_timers, open, process};
    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen::rt as wit_bindgen_rt;

    /// Fails to compile unless `T` can be exported.
    pub const fn assert_operator<T: crate::Operator + Default + 'static>() {}
}
