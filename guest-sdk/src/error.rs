//! The SDK's error type: what an operator hook returns and what the host reports.

use std::error::Error as StdError;
use std::fmt;

/// `Result` with the SDK's [`Error`] as the default error type.
///
/// ```
/// use weir_sdk::Result;
///
/// fn parse(text: &str) -> Result<u64> {
///     Ok(text.parse()?)
/// }
/// assert_eq!(parse("42").unwrap(), 42);
/// assert!(parse("x").is_err());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error returned by an operator hook or by the SDK.
///
/// An `Err` returned from [`Operator::process`](crate::Operator::process) or another hook fails
/// the call; the host reports the message (with the operator and the record) and restarts the
/// job from its last checkpoint. Codec errors convert with `?`; build your own with
/// [`Error::msg`].
///
/// ```
/// use weir_sdk::Error;
///
/// let e = Error::msg("unknown command \"frobnicate\"");
/// assert_eq!(e.to_string(), "unknown command \"frobnicate\"");
/// let e = e.context("record 3");
/// assert_eq!(e.to_string(), "record 3: unknown command \"frobnicate\"");
/// ```
// One pointer, so that a `Result<(), Error>` is one word: in a guest, the hooks' and the
// SDK's results are then returned in a register rather than through the stack in memory.
pub struct Error(Box<Inner>);

struct Inner {
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

const _: () = assert!(std::mem::size_of::<Result<()>>() == std::mem::size_of::<usize>());

impl Error {
    fn of(message: String, source: Option<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Error(Box::new(Inner { message, source }))
    }
}

impl Error {
    /// An error with this message.
    ///
    /// ```
    /// let e = weir_sdk::Error::msg(format_args!("bad line {}", 7));
    /// assert_eq!(e.to_string(), "bad line 7");
    /// ```
    pub fn msg(message: impl fmt::Display) -> Self {
        Error::of(message.to_string(), None)
    }

    /// Wraps an error value, keeping it as the [`source`](StdError::source).
    ///
    /// ```
    /// let io = std::io::Error::other("disk on fire");
    /// let e = weir_sdk::Error::new(io);
    /// assert_eq!(e.to_string(), "disk on fire");
    /// assert!(std::error::Error::source(&e).is_some());
    /// ```
    pub fn new(error: impl StdError + Send + Sync + 'static) -> Self {
        Error::of(error.to_string(), Some(Box::new(error)))
    }

    /// Prefixes the message with what was being done: `"{context}: {message}"`.
    ///
    /// ```
    /// let e = weir_sdk::Error::msg("not a number").context("field \"age\"");
    /// assert_eq!(e.to_string(), "field \"age\": not a number");
    /// ```
    #[must_use]
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.0.message = format!("{context}: {}", self.0.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Debug` is what `unwrap()` and `fn main() -> Result` print: keep it readable.
        write!(f, "{:?}", self.0.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

macro_rules! from_error {
    ($($ty:ty),* $(,)?) => {$(
        impl From<$ty> for Error {
            fn from(e: $ty) -> Self {
                Error::new(e)
            }
        }
    )*};
}

from_error!(
    crate::CodecError,
    serde_json::Error,
    weir_wire::DecodeError,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::fmt::Error,
);

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::msg(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::msg(message)
    }
}

impl From<Box<dyn StdError + Send + Sync + 'static>> for Error {
    fn from(e: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        Error::of(e.to_string(), Some(e))
    }
}
