//! Non-keyed operator state: one typed value per name for the whole subtask.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec;
use crate::backend::Backend;
use crate::runtime::{Core, borrow_core};
use crate::{Error, Result};

/// A value of this operator subtask that is not tied to a key (Flink's operator state): the
/// host keeps it, checkpoints it with the subtask and hands it back after a restore, so an
/// operator can keep counters, buffers or offsets across failures without a key.
///
/// Get one with [`Context::operator_state`](crate::Context::operator_state) or
/// [`OpenContext::operator_state`](crate::OpenContext::operator_state). Every `get` and `set`
/// is a host call: read it in `open`, keep a copy in the operator and write it back in
/// `finish_batch` rather than per record. It restores into the subtask of the same index, so a
/// job that uses it keeps its parallelism.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct Seen {
///     total: u64,
/// }
///
/// impl Operator for Seen {
///     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
///         self.total = ctx.operator_state::<u64>("total").get()?.unwrap_or(0);
///         Ok(())
///     }
///
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         self.total += 1;
///         ctx.emit_display(rec.key(), self.total)
///     }
///
///     fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
///         ctx.operator_state("total").set(&self.total)
///     }
/// }
/// # let mut h = weir_sdk::testing::Harness::<Seen>::new();
/// # h.process([("a", ""), ("b", "")]);
/// # assert_eq!(h.process([("c", "")])[0].value_str(), "3");
/// ```
pub struct OperatorState<'c, T> {
    core: &'c RefCell<Core>,
    name: String,
    value: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for OperatorState<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorState")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<'c, T: Serialize + DeserializeOwned> OperatorState<'c, T> {
    pub(crate) fn new(core: &'c RefCell<Core>, name: &str) -> Self {
        OperatorState {
            core,
            name: name.to_owned(),
            value: PhantomData,
        }
    }

    /// The value, or `None` if it was never set (or was cleared).
    pub fn get(&self) -> Result<Option<T>> {
        let bytes = self.with_backend(|backend, handle| backend.get_operator_state(handle))?;
        bytes
            .map(|b| {
                codec::decode(&b).map_err(|e| {
                    Error::msg(format!(
                        "operator state \"{}\" cannot be decoded as the type asked for: {e}",
                        self.name
                    ))
                })
            })
            .transpose()
    }

    /// Replaces the value.
    pub fn set(&self, value: &T) -> Result<()> {
        let mut bytes = Vec::new();
        codec::encode(value, &mut bytes).map_err(|e| {
            Error::msg(format!(
                "operator state \"{}\" cannot be encoded: {e}",
                self.name
            ))
        })?;
        self.with_backend(|backend, handle| backend.set_operator_state(handle, Some(&bytes)))
    }

    /// Removes the value.
    pub fn clear(&self) -> Result<()> {
        self.with_backend(|backend, handle| backend.set_operator_state(handle, None))
    }

    /// Runs `f` with the backend and the state's handle, declaring the state with the host on
    /// first use.
    fn with_backend<R>(&self, f: impl FnOnce(&mut dyn Backend, usize) -> R) -> Result<R> {
        let mut core = borrow_core(self.core)?;
        let Core {
            backend,
            operator_states,
            ..
        } = &mut *core;
        let handle = match operator_states.iter().find(|(n, _)| *n == self.name) {
            Some(&(_, handle)) => handle,
            None => {
                let handle = backend.declare_operator_state(&self.name);
                operator_states.push((self.name.clone(), handle));
                handle
            }
        };
        Ok(f(&mut **backend, handle))
    }
}
