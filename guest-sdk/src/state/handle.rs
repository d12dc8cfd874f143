//! Keyed-state handles declared once in [`Operator::open`](crate::Operator::open), as Flink's
//! state descriptors are: [`Context::state`] binds one to the current key without looking the
//! state up by name.

use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::StateId;
use crate::{Context, ListState, MapState, ValueState};

/// The index of a handle that `open` did not declare (the handle's `Default`).
const UNDECLARED: usize = usize::MAX;

const UNDECLARED_MESSAGE: &str = "weir-sdk: a state handle was used that Operator::open did \
    not declare; declare it in open, e.g. `self.count = ctx.value_state(\"count\")?`";

/// A keyed state declared in [`Operator::open`](crate::Operator::open):
/// [`ValueStateHandle`], [`ListStateHandle`] or [`MapStateHandle`]. [`Context::state`] gives
/// the state of the current key.
pub trait StateHandle: sealed::Sealed {
    /// The state of the current key: [`ValueState`], [`ListState`] or [`MapState`].
    type State<'c>;

    #[doc(hidden)]
    fn bind<'c>(&self, ctx: &'c Context<'c>) -> Self::State<'c>;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident<$($t:ident),+> => $state:ident) => {
        $(#[$doc])*
        ///
        /// Its `Default` is a handle not declared yet: using it is an error naming the fix.
        pub struct $name<$($t),+> {
            index: usize,
            _type: PhantomData<fn() -> ($($t,)+)>,
        }

        impl<$($t),+> $name<$($t),+> {
            pub(crate) fn new(index: usize) -> Self {
                $name {
                    index,
                    _type: PhantomData,
                }
            }
        }

        impl<$($t),+> Default for $name<$($t),+> {
            fn default() -> Self {
                Self::new(UNDECLARED)
            }
        }

        impl<$($t),+> Clone for $name<$($t),+> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<$($t),+> Copy for $name<$($t),+> {}

        impl<$($t),+> fmt::Debug for $name<$($t),+> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut d = f.debug_struct(stringify!($name));
                match self.index {
                    UNDECLARED => d.field("declared", &false),
                    index => d.field("index", &index),
                }
                .finish()
            }
        }

        impl<$($t),+> sealed::Sealed for $name<$($t),+> {}

        impl<$($t: Serialize + DeserializeOwned),+> StateHandle for $name<$($t),+> {
            type State<'c> = $state<'c, $($t),+>;

            #[inline(always)]
            fn bind<'c>(&self, ctx: &'c Context<'c>) -> Self::State<'c> {
                $state::new(ctx, id(self.index))
            }
        }
    };
}

#[inline(always)]
fn id(index: usize) -> StateId {
    StateId(match index {
        UNDECLARED => Err(UNDECLARED_MESSAGE.to_owned()),
        index => Ok(index),
    })
}

handle! {
    /// A [`ValueState`] declared in `open` with
    /// [`OpenContext::value_state`](crate::OpenContext::value_state).
    ValueStateHandle<T> => ValueState
}

handle! {
    /// A [`ListState`] declared in `open` with
    /// [`OpenContext::list_state`](crate::OpenContext::list_state).
    ListStateHandle<T> => ListState
}

handle! {
    /// A [`MapState`] declared in `open` with
    /// [`OpenContext::map_state`](crate::OpenContext::map_state).
    MapStateHandle<K, V> => MapState
}
