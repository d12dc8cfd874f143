//! Window functions: user code for a window of the host (`wasm` and `window` on one
//! operator of the job spec), as Flink's `AggregateFunction` and `ProcessWindowFunction`.
//!
//! The host assigns records to windows, keeps the windows in its state backend (so
//! checkpoints, RocksDB and restores work as for its built-in aggregates) and fires them on
//! the watermark; it calls the function once per batch of records (or of fired windows),
//! never once per record:
//!
//! - an [`AggregateFunction`] folds records into an accumulator as they come (one call per
//!   input batch for all the windows it touches) and makes a result when the window fires
//!   (one call per batch of fired windows); the host emits `<start>,<end>,<result>` as for
//!   a built-in aggregate. Export it with `weir_sdk::export!(Aggregate<MyFunction>)`.
//! - a [`ProcessWindowFunction`] sees all of a window's records at once when it fires and
//!   emits what it likes. The host keeps the records until then. Export it with
//!   `weir_sdk::export!(ProcessWindow<MyFunction>)`.
//!
//! ```toml
//! [[operator]]
//! name = "spend"
//! uid = "spend"
//! wasm = "spend.wasm"           # exports Aggregate<Spend> (or ProcessWindow<...>)
//! input = "parse"
//! edge = "key_by"
//! window = { type = "tumbling", size = "1m", function = "aggregate" }  # or "process"
//! ```
//!
//! Window functions have no keyed state or timers of their own (the window is their state).

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_wire::{WindowCall, read_window_call};

use crate::state::codec;
use crate::{Context, Error, OpenContext, Operator, Record, Result};

pub use weir_wire::Window;

/// An incremental aggregate over a window's records (Flink's `AggregateFunction`).
///
/// ```
/// use weir_sdk::window::AggregateFunction;
/// use weir_sdk::Result;
///
/// /// The mean of the amounts, read as numbers.
/// #[derive(Default)]
/// struct MeanAmount;
///
/// impl AggregateFunction for MeanAmount {
///     type Acc = (f64, u64);
///     type Output = f64;
///
///     fn create(&self) -> (f64, u64) {
///         (0.0, 0)
///     }
///     fn add(&self, acc: &mut (f64, u64), value: &[u8]) -> Result<()> {
///         let x: f64 = std::str::from_utf8(value)?.trim().parse()?;
///         *acc = (acc.0 + x, acc.1 + 1);
///         Ok(())
///     }
///     fn merge(&self, acc: &mut (f64, u64), other: (f64, u64)) -> Result<()> {
///         *acc = (acc.0 + other.0, acc.1 + other.1);
///         Ok(())
///     }
///     fn result(&self, acc: &(f64, u64)) -> Result<f64> {
///         Ok(acc.0 / acc.1 as f64)
///     }
/// }
///
/// let f = MeanAmount;
/// let mut acc = f.create();
/// f.add(&mut acc, b"2")?;
/// f.add(&mut acc, b"4")?;
/// assert_eq!(f.result(&acc)?, 3.0);
/// # Ok::<(), weir_sdk::Error>(())
/// ```
pub trait AggregateFunction: Default + 'static {
    /// The accumulator, kept in the host's state between batches (encoded with the state
    /// codec, so it must stay readable by later versions of the code).
    type Acc: Serialize + DeserializeOwned;
    /// The result, written as text after the window's bounds.
    type Output: std::fmt::Display;

    /// A new window's accumulator.
    fn create(&self) -> Self::Acc;

    /// Adds a record's value to the accumulator.
    fn add(&self, acc: &mut Self::Acc, value: &[u8]) -> Result<()>;

    /// Merges `other` into `acc`: session windows merge when a record bridges them. The
    /// default fails, naming what needs it.
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc) -> Result<()> {
        let _ = (acc, other);
        Err(Error::msg(
            "this aggregate function cannot merge accumulators, which session windows \
             need; implement AggregateFunction::merge",
        ))
    }

    /// The window's result from its accumulator.
    fn result(&self, acc: &Self::Acc) -> Result<Self::Output>;

    /// Called once before the first call, as [`Operator::open`]: to read the operator's
    /// `config`, say.
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
}

/// A function over all of a window's records, called when it fires (Flink's
/// `ProcessWindowFunction`).
///
/// ```
/// use weir_sdk::prelude::*;
/// use weir_sdk::window::{ProcessWindowFunction, Window};
///
/// /// The distinct pages of each session.
/// #[derive(Default)]
/// struct Pages;
///
/// impl ProcessWindowFunction for Pages {
///     fn process(&mut self, ctx: &mut Context, key: &[u8], window: Window, values: &[&[u8]]) -> Result<()> {
///         let mut pages: Vec<&[u8]> = values.to_vec();
///         pages.sort();
///         pages.dedup();
///         ctx.emit_display(Some(key), format_args!("{}..{}: {} pages", window.start, window.end, pages.len()))
///     }
/// }
/// ```
pub trait ProcessWindowFunction: Default + 'static {
    /// The window of `key` fired with the values of its records, in arrival order (a
    /// session merged from several: session by session, earliest first); what this emits
    /// goes out with the window's last millisecond as timestamp.
    fn process(
        &mut self,
        ctx: &mut Context<'_>,
        key: &[u8],
        window: Window,
        values: &[&[u8]],
    ) -> Result<()>;

    /// Called once before the first window, as [`Operator::open`]: to read the operator's
    /// `config`, say.
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }
}

/// The operator that runs an [`AggregateFunction`] for a window of the host; export it with
/// `weir_sdk::export!(Aggregate<MyFunction>)`.
pub struct Aggregate<F> {
    function: F,
    buf: Vec<u8>,
}

impl<F: Default> Default for Aggregate<F> {
    fn default() -> Self {
        Aggregate {
            function: F::default(),
            buf: Vec::new(),
        }
    }
}

fn contract(what: impl std::fmt::Display) -> Error {
    Error::msg(format!(
        "{what}: this component is a window function, which only a window of the host \
         calls (wasm and window on one operator)"
    ))
}

/// A window call of the host, for an error message: "firing the window [0, 1000) of key "k"
/// with 4 records" (the host sends one call per record of a batch, so the record's index
/// would say nothing to the function's author).
fn describe_call(index: u32, key: Option<&[u8]>, value: &[u8]) -> String {
    let Ok((what, window, values)) = read_window_call(value).map(|c| c.what()) else {
        return format!("window call {index} of the batch");
    };
    let key = key.map_or_else(String::new, |k| {
        format!(" of key {}", crate::runtime::describe_text(k))
    });
    let Window { start, end } = window;
    format!("{what} the window [{start}, {end}){key}{values}")
}

impl<F: AggregateFunction> Operator for Aggregate<F> {
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> Result<()> {
        self.function.open(ctx)
    }

    fn describe_input(index: u32, key: Option<&[u8]>, value: &[u8], _panic: bool) -> String {
        describe_call(index, key, value)
    }

    fn process(&mut self, ctx: &mut Context<'_>, record: Record<'_>) -> Result<()> {
        let call = read_window_call(record.value()).map_err(contract)?;
        let f = &self.function;
        match call {
            WindowCall::Update { accs, values, .. } => {
                let mut acc: Option<F::Acc> = None;
                for a in accs {
                    let a = codec::decode(Self::STATE_CODEC, a.map_err(contract)?)
                        .map_err(|e| Error::new(e).context("a window's accumulator"))?;
                    match &mut acc {
                        None => acc = Some(a),
                        Some(acc) => f.merge(acc, a)?,
                    }
                }
                let mut acc = acc.unwrap_or_else(|| f.create());
                for v in values {
                    f.add(&mut acc, v.map_err(contract)?)?;
                }
                self.buf.clear();
                codec::encode(Self::STATE_CODEC, &acc, &mut self.buf)
                    .map_err(|e| Error::new(e).context("a window's accumulator"))?;
                ctx.emit(None, &self.buf)
            }
            WindowCall::Result { acc, .. } => {
                let acc: F::Acc = codec::decode(Self::STATE_CODEC, acc)
                    .map_err(|e| Error::new(e).context("a window's accumulator"))?;
                ctx.emit_display(None, f.result(&acc)?)
            }
            WindowCall::Process { .. } => Err(contract(
                "the window asked for a process-window function (function = \"process\"), \
                 but this component exports an aggregate",
            )),
        }
    }
}

/// The operator that runs a [`ProcessWindowFunction`] for a window of the host; export it
/// with `weir_sdk::export!(ProcessWindow<MyFunction>)`.
#[derive(Default)]
pub struct ProcessWindow<F> {
    function: F,
}

impl<F: ProcessWindowFunction> Operator for ProcessWindow<F> {
    fn open(&mut self, ctx: &mut OpenContext<'_>) -> Result<()> {
        self.function.open(ctx)
    }

    fn describe_input(index: u32, key: Option<&[u8]>, value: &[u8], _panic: bool) -> String {
        describe_call(index, key, value)
    }

    fn process(&mut self, ctx: &mut Context<'_>, record: Record<'_>) -> Result<()> {
        let WindowCall::Process { window, values } =
            read_window_call(record.value()).map_err(contract)?
        else {
            return Err(contract(
                "the window asked for an aggregate function (function = \"aggregate\"), but \
                 this component exports a process-window function",
            ));
        };
        let values: Vec<&[u8]> = values
            .collect::<std::result::Result<_, _>>()
            .map_err(contract)?;
        let key = record.key().unwrap_or_default();
        self.function.process(ctx, key, window, &values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Harness, Input};
    use weir_wire::{put_process, put_result, put_update};

    /// Fails on every call, as a function with a bug would.
    #[derive(Default)]
    struct Failing;

    impl AggregateFunction for Failing {
        type Acc = u64;
        type Output = u64;
        fn create(&self) -> u64 {
            0
        }
        fn add(&self, _: &mut u64, _: &[u8]) -> Result<()> {
            Err(Error::msg("no adding today"))
        }
        fn result(&self, _: &u64) -> Result<u64> {
            Err(Error::msg("no results today"))
        }
    }

    impl ProcessWindowFunction for Failing {
        fn process(&mut self, _: &mut Context, _: &[u8], _: Window, _: &[&[u8]]) -> Result<()> {
            Err(Error::msg("no firing today"))
        }
    }

    const W: Window = Window {
        start: -1000,
        end: 0,
    };

    fn call(write: impl FnOnce(&mut Vec<u8>)) -> Input {
        let mut value = Vec::new();
        write(&mut value);
        Input::keyed("bi", value)
    }

    fn error<T: Operator + Default>(input: Input) -> String {
        let mut h = Harness::<T>::new();
        h.try_process([input]).unwrap_err().to_string()
    }

    #[test]
    fn a_failed_call_names_the_window_not_the_record() {
        let values: [&[u8]; 2] = [b"1", b"2"];
        let update = call(|b| put_update(b, W, &[], values.into_iter()));
        assert_eq!(
            error::<Aggregate<Failing>>(update),
            "adding records to the window [-1000, 0) of key \"bi\" with 2 records: \
             no adding today"
        );
        let result = call(|b| put_result(b, W, &[0]));
        assert_eq!(
            error::<Aggregate<Failing>>(result),
            "taking the result of the window [-1000, 0) of key \"bi\": no results today"
        );
        let mut encoded = Vec::new();
        values
            .iter()
            .for_each(|v| weir_wire::put_bytes(&mut encoded, v));
        let process = call(|b| put_process(b, W, 2, &encoded));
        assert_eq!(
            error::<ProcessWindow<Failing>>(process),
            "firing the window [-1000, 0) of key \"bi\" with 2 records: no firing today"
        );
    }
}
