//! Non-keyed operator state (Flink's operator list state): a typed list per name for the whole
//! subtask, with a redistribution mode for restores at another parallelism; and the
//! single-value [`OperatorState`] built on it.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec;
use crate::backend::Backend;
use crate::runtime::{Core, borrow_core};
use crate::{Error, Result};

/// How an operator state's list is spread over the subtasks when a restore changes the
/// operator's parallelism. At the same parallelism each subtask gets its own list back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Redistribution {
    /// The subtasks' lists are joined in subtask order and cut into even, contiguous parts,
    /// one per new subtask: every element goes to exactly one subtask (Flink's
    /// `getListState`). For work that can be handed over: offsets of splits, buffered records.
    #[default]
    Split,
    /// Every new subtask gets the elements of all old subtasks (Flink's `getUnionListState`):
    /// for what every subtask must know, such as the set of all splits.
    Union,
}

/// A list of this operator subtask that is not tied to a key (Flink's operator list state):
/// the host keeps it, checkpoints it with the subtask and hands it back after a restore, at
/// another parallelism spread as its [`Redistribution`] says.
///
/// Get one with [`Context::operator_list_state`](crate::Context::operator_list_state) (split)
/// or [`Context::union_list_state`](crate::Context::union_list_state), or the same on
/// [`OpenContext`](crate::OpenContext). Every `get` and `set` is a host call: read it in
/// `open`, keep a copy in the operator and write it back in `finish_batch`.
///
/// ```
/// use weir_sdk::prelude::*;
///
/// /// Counts records; after a rescale a subtask starts from the counts it was handed.
/// #[derive(Default)]
/// struct Count {
///     total: u64,
/// }
///
/// impl Operator for Count {
///     fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
///         self.total = ctx.operator_list_state::<u64>("totals").get()?.iter().sum();
///         Ok(())
///     }
///
///     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
///         self.total += 1;
///         ctx.emit_display(rec.key(), self.total)
///     }
///
///     fn finish_batch(&mut self, ctx: &mut Context) -> Result<()> {
///         ctx.operator_list_state("totals").set(&[self.total])
///     }
/// }
/// # let mut h = weir_sdk::testing::Harness::<Count>::new();
/// # h.process([("a", ""), ("b", "")]);
/// # assert_eq!(h.operator_list_state::<u64>("totals"), vec![2]);
/// ```
pub struct OperatorListState<'c, T> {
    core: &'c RefCell<Core>,
    name: String,
    mode: Redistribution,
    codec: codec::Codec,
    value: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for OperatorListState<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorListState")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<'c, T: Serialize + DeserializeOwned> OperatorListState<'c, T> {
    pub(crate) fn new(core: &'c RefCell<Core>, name: &str, mode: Redistribution) -> Self {
        OperatorListState {
            core,
            name: name.to_owned(),
            mode,
            // The operator's codec (the core is not borrowed while a hook makes a handle).
            codec: core.try_borrow().map(|c| c.codec).unwrap_or_default(),
            value: PhantomData,
        }
    }

    /// The elements, in order (empty if none were set).
    pub fn get(&self) -> Result<Vec<T>> {
        let elements = self.with_backend(|backend, handle| backend.get_operator_state(handle))?;
        elements
            .iter()
            .map(|e| {
                codec::decode(self.codec, e).map_err(|e| {
                    Error::msg(format!(
                        "operator state \"{}\" cannot be decoded as the type asked for: {e}",
                        self.name
                    ))
                })
            })
            .collect()
    }

    /// Replaces the elements.
    pub fn set(&self, elements: &[T]) -> Result<()> {
        let mut encoded = Vec::with_capacity(elements.len());
        for e in elements {
            let mut bytes = Vec::new();
            codec::encode(self.codec, e, &mut bytes).map_err(|e| {
                Error::msg(format!(
                    "operator state \"{}\" cannot be encoded: {e}",
                    self.name
                ))
            })?;
            encoded.push(bytes);
        }
        self.with_backend(|backend, handle| backend.set_operator_state(handle, &encoded))
    }

    /// Appends one element (two host calls: prefer [`OperatorListState::set`] per batch).
    pub fn add(&self, element: T) -> Result<()> {
        let mut elements = self.get()?;
        elements.push(element);
        self.set(&elements)
    }

    /// Removes every element.
    pub fn clear(&self) -> Result<()> {
        self.with_backend(|backend, handle| backend.set_operator_state(handle, &[]))
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
        let handle = match operator_states.iter().find(|(n, ..)| *n == self.name) {
            Some(&(_, mode, _)) if mode != self.mode => {
                return Err(Error::msg(format!(
                    "operator state \"{}\" is used with redistribution {mode:?} and {:?}; use \
                     one per name",
                    self.name, self.mode
                )));
            }
            Some(&(_, _, handle)) => handle,
            None => {
                let handle = backend.declare_operator_state(&self.name, self.mode);
                operator_states.push((self.name.clone(), self.mode, handle));
                handle
            }
        };
        Ok(f(&mut **backend, handle))
    }
}

/// One value of this operator subtask that is not tied to a key: an
/// [`OperatorListState`] of at most one element, split on a rescale (the value goes to one
/// of the new subtasks, the others start without). For counters, offsets or buffers of a
/// subtask.
///
/// Get one with [`Context::operator_state`](crate::Context::operator_state) or
/// [`OpenContext::operator_state`](crate::OpenContext::operator_state). Every `get` and `set`
/// is a host call: read it in `open`, keep a copy in the operator and write it back in
/// `finish_batch` rather than per record.
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
#[derive(Debug)]
pub struct OperatorState<'c, T> {
    list: OperatorListState<'c, T>,
}

impl<'c, T: Serialize + DeserializeOwned> OperatorState<'c, T> {
    pub(crate) fn new(core: &'c RefCell<Core>, name: &str) -> Self {
        OperatorState {
            list: OperatorListState::new(core, name, Redistribution::Split),
        }
    }

    /// The value, or `None` if it was never set (or was cleared). Should a rescale have
    /// joined several subtasks' values into this one, the first.
    pub fn get(&self) -> Result<Option<T>> {
        Ok(self.list.get()?.into_iter().next())
    }

    /// Replaces the value.
    pub fn set(&self, value: &T) -> Result<()> {
        self.list.set(std::slice::from_ref(value))
    }

    /// Removes the value.
    pub fn clear(&self) -> Result<()> {
        self.list.clear()
    }
}
