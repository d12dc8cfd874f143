//! What a test feeds the operator: [`Input`] records and the conversions that let a test
//! write `("key", "value")` or `"line"` instead.

use weir_wire::Kind;

/// A record to feed to [`Harness::process`](super::Harness::process).
///
/// `&str`, `String` and byte vectors convert into a record without key; `(key, value)` pairs
/// of `&str` into a keyed one.
///
/// ```
/// use weir_sdk::Kind;
/// use weir_sdk::testing::Input;
///
/// let a: Input = ("alice", "home").into();
/// assert_eq!(a, Input::keyed("alice", "home"));
/// let b = Input::new("line").with_timestamp(10).with_kind(Kind::Delete);
/// assert_eq!((b.key, b.timestamp, b.kind), (None, Some(10), Kind::Delete));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// Event time in milliseconds.
    pub timestamp: Option<i64>,
    /// Changelog kind.
    pub kind: Kind,
}

impl Input {
    /// An [`Insert`](Kind::Insert) record without key or timestamp.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::new("x");
    /// assert_eq!(i.value, b"x");
    /// ```
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Input {
            key: None,
            value: value.into(),
            timestamp: None,
            kind: Kind::Insert,
        }
    }

    /// An [`Insert`](Kind::Insert) record with a key.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::keyed("k", "v");
    /// assert_eq!(i.key.as_deref(), Some(&b"k"[..]));
    /// ```
    pub fn keyed(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Input {
            key: Some(key.into()),
            ..Input::new(value)
        }
    }

    /// The same record with an event time.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::new("v").with_timestamp(3);
    /// assert_eq!(i.timestamp, Some(3));
    /// ```
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// The same record with another changelog kind.
    ///
    /// ```
    /// let i = weir_sdk::testing::Input::new("v").with_kind(weir_sdk::Kind::UpdateBefore);
    /// assert_eq!(i.kind, weir_sdk::Kind::UpdateBefore);
    /// ```
    #[must_use]
    pub fn with_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }
}

impl From<&str> for Input {
    fn from(value: &str) -> Self {
        Input::new(value)
    }
}

impl From<String> for Input {
    fn from(value: String) -> Self {
        Input::new(value)
    }
}

impl From<Vec<u8>> for Input {
    fn from(value: Vec<u8>) -> Self {
        Input::new(value)
    }
}

impl From<(&str, &str)> for Input {
    fn from((key, value): (&str, &str)) -> Self {
        Input::keyed(key, value)
    }
}

impl From<(&[u8], &[u8])> for Input {
    fn from((key, value): (&[u8], &[u8])) -> Self {
        Input::keyed(key, value)
    }
}
