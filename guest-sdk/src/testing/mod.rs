//! Unit-test operators natively with `cargo test`, no WebAssembly involved.
//!
//! [`Harness`] runs an operator through exactly the code the component export runs — the
//! batch is encoded with the wire format, decoded in place, state goes through the same
//! per-batch caches and `load`/`store` buffers — with an in-memory store standing in for the
//! host. It does not enforce state TTL (the host's state backends do) and does not partition
//! keys between subtasks. It fires timers when a test moves its watermark or its clock, which
//! the host does not do yet: the host fires event-time timers at the end of input, and
//! processing-time timers not at all.
//!
//! ```
//! use weir_sdk::prelude::*;
//! use weir_sdk::testing::{Harness, Input};
//!
//! #[derive(Default)]
//! struct CountWords;
//!
//! impl Operator for CountWords {
//!     fn process(&mut self, ctx: &mut Context, word: Record<'_>) -> Result<()> {
//!         let count = ctx.value_state::<u64>("count");
//!         let n = count.get()?.unwrap_or(0) + 1;
//!         count.set(&n)?;
//!         ctx.emit_display(word.key(), n)
//!     }
//! }
//!
//! let mut h = Harness::<CountWords>::new();
//! let out = h.process([("to", "to"), ("be", "be"), ("to", "to")]);
//! let counts: Vec<_> = out.iter().map(|o| (o.key_str().unwrap(), o.value_str())).collect();
//! assert_eq!(counts, [("to", "1"), ("be", "1"), ("to", "2")]);
//! assert_eq!(h.value_state::<u64>("count", "to"), Some(2));
//!
//! // A record without key cannot reach keyed state:
//! let err = h.try_process([Input::new("orphan")]).unwrap_err();
//! assert!(err.to_string().contains("state \"count\""));
//! ```

mod backend;
mod harness;
mod input;
mod output;

#[cfg(test)]
pub(crate) use backend::HostCalls;
pub use harness::Harness;
#[doc(hidden)]
pub use harness::{doc_context, doc_open_context};
pub use input::Input;
pub use output::Output;
