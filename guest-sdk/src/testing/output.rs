//! What the operator emitted, as a test sees it: owned [`Output`] records.

use weir_wire::Kind;

/// A record the operator emitted.
///
/// ```
/// use weir_sdk::prelude::*;
/// # #[derive(Default)] struct Op;
/// # impl Operator for Op {
/// #     fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
/// #         ctx.emit_record(Kind::UpdateAfter, rec.key(), Some(9), rec.value())
/// #     }
/// # }
/// let out = weir_sdk::testing::Harness::<Op>::new().process([("k", "v")]);
/// assert_eq!(out[0].key_str(), Some("k"));
/// assert_eq!(out[0].value_str(), "v");
/// assert_eq!((out[0].kind, out[0].timestamp, out[0].side_output.as_deref()), (Kind::UpdateAfter, Some(9), None));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
    /// Changelog kind.
    pub kind: Kind,
    /// Event time in milliseconds.
    pub timestamp: Option<i64>,
    /// The side output it went to; `None` for the main output.
    pub side_output: Option<String>,
}

impl Output {
    /// The key as text.
    ///
    /// # Panics
    /// When the key is not UTF-8.
    ///
    /// ```
    /// # let out = weir_sdk::testing::Output { key: Some(b"k".to_vec()), value: vec![], kind: weir_sdk::Kind::Insert, timestamp: None, side_output: None };
    /// assert_eq!(out.key_str(), Some("k"));
    /// ```
    pub fn key_str(&self) -> Option<&str> {
        self.key
            .as_deref()
            .map(|k| std::str::from_utf8(k).expect("output key is not UTF-8"))
    }

    /// The value as text.
    ///
    /// # Panics
    /// When the value is not UTF-8.
    ///
    /// ```
    /// # let out = weir_sdk::testing::Output { key: None, value: b"v".to_vec(), kind: weir_sdk::Kind::Insert, timestamp: None, side_output: None };
    /// assert_eq!(out.value_str(), "v");
    /// ```
    pub fn value_str(&self) -> &str {
        std::str::from_utf8(&self.value).expect("output value is not UTF-8")
    }
}
