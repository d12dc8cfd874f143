//! What an operator receives: records of a batch and fired timers, borrowed from the buffer
//! the host sent.

use weir_wire::{Kind, RecordRef, TimeDomain};

use crate::{Error, Result};

/// A record of the current batch, borrowed from the batch buffer (nothing is copied).
///
/// ```
/// use weir_sdk::{Kind, Record};
///
/// let rec = Record::new(Some(b"alice"), b"home").with_timestamp(Some(1_000));
/// assert_eq!(rec.key_str().unwrap(), Some("alice"));
/// assert_eq!(rec.value_str().unwrap(), "home");
/// assert_eq!(rec.timestamp(), Some(1_000));
/// assert_eq!(rec.kind(), Kind::Insert);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    inner: RecordRef<'a>,
    input: u8,
}

impl<'a> Record<'a> {
    /// A record of kind [`Kind::Insert`] without timestamp, e.g. to unit-test a helper that
    /// takes a `Record`.
    ///
    /// ```
    /// let rec = weir_sdk::Record::new(None, b"line");
    /// assert_eq!(rec.key(), None);
    /// ```
    pub fn new(key: Option<&'a [u8]>, value: &'a [u8]) -> Self {
        Record {
            inner: RecordRef {
                kind: Kind::Insert,
                key,
                timestamp: None,
                value,
            },
            input: 0,
        }
    }

    /// The same record with this event time.
    ///
    /// ```
    /// let rec = weir_sdk::Record::new(None, b"x").with_timestamp(Some(5));
    /// assert_eq!(rec.timestamp(), Some(5));
    /// ```
    #[must_use]
    pub fn with_timestamp(mut self, timestamp: Option<i64>) -> Self {
        self.inner.timestamp = timestamp;
        self
    }

    /// The same record with this changelog kind.
    ///
    /// ```
    /// use weir_sdk::{Kind, Record};
    /// let rec = Record::new(None, b"x").with_kind(Kind::Delete);
    /// assert_eq!(rec.kind(), Kind::Delete);
    /// ```
    #[must_use]
    pub fn with_kind(mut self, kind: Kind) -> Self {
        self.inner.kind = kind;
        self
    }

    /// The same record as if it came from the operator's input `input` (0 or 1, see
    /// [`Record::input`]).
    ///
    /// ```
    /// let rec = weir_sdk::Record::new(None, b"x").with_input(1);
    /// assert_eq!(rec.input(), 1);
    /// ```
    #[must_use]
    pub fn with_input(mut self, input: u8) -> Self {
        self.input = input;
        self
    }

    pub(crate) fn from_ref(inner: RecordRef<'a>, input: u8) -> Self {
        Record { inner, input }
    }

    /// Which of the operator's inputs the record came from: 0 for the job spec's `input`
    /// (all of them, when it lists several: a union), 1 for `second_input` (Flink's
    /// `connect`: `processElement1` and `processElement2` of a `KeyedCoProcessFunction`).
    /// Both inputs share the operator's keyed state and timers.
    ///
    /// ```
    /// # use weir_sdk::prelude::*;
    /// # fn handle(ctx: &mut Context, rec: Record<'_>) -> Result<()> {
    /// match rec.input() {
    ///     0 => ctx.value_state::<String>("order").set(&rec.value_str()?.to_string()),
    ///     _ => ctx.value_state::<bool>("paid").set(&true),
    /// }
    /// # }
    /// ```
    pub fn input(&self) -> u8 {
        self.input
    }

    /// The key, if the record has one. Keyed state and timers need it.
    ///
    /// ```
    /// let rec = weir_sdk::Record::new(Some(b"k"), b"v");
    /// assert_eq!(rec.key(), Some(&b"k"[..]));
    /// ```
    pub fn key(&self) -> Option<&'a [u8]> {
        self.inner.key
    }

    /// The key as UTF-8 text; an error if it is not UTF-8.
    ///
    /// ```
    /// let rec = weir_sdk::Record::new(Some(b"k"), b"v");
    /// assert_eq!(rec.key_str().unwrap(), Some("k"));
    /// assert!(weir_sdk::Record::new(Some(&[0xff]), b"v").key_str().is_err());
    /// ```
    pub fn key_str(&self) -> Result<Option<&'a str>> {
        self.inner
            .key
            .map(|k| std::str::from_utf8(k).map_err(|e| Error::new(e).context("record key")))
            .transpose()
    }

    /// The value.
    ///
    /// ```
    /// assert_eq!(weir_sdk::Record::new(None, b"v").value(), b"v");
    /// ```
    pub fn value(&self) -> &'a [u8] {
        self.inner.value
    }

    /// The value as UTF-8 text; an error if it is not UTF-8.
    ///
    /// ```
    /// assert_eq!(weir_sdk::Record::new(None, b"v").value_str().unwrap(), "v");
    /// ```
    pub fn value_str(&self) -> Result<&'a str> {
        std::str::from_utf8(self.inner.value).map_err(|e| Error::new(e).context("record value"))
    }

    /// Event time in milliseconds since the Unix epoch, if the record has one.
    ///
    /// ```
    /// assert_eq!(weir_sdk::Record::new(None, b"v").timestamp(), None);
    /// ```
    pub fn timestamp(&self) -> Option<i64> {
        self.inner.timestamp
    }

    /// The changelog kind.
    ///
    /// ```
    /// assert_eq!(weir_sdk::Record::new(None, b"v").kind(), weir_sdk::Kind::Insert);
    /// ```
    pub fn kind(&self) -> Kind {
        self.inner.kind
    }
}

/// A timer that fired, handed to [`Operator::on_timer`](crate::Operator::on_timer).
///
/// Timers are keyed: while the hook runs, state is that of [`Timer::key`].
///
/// ```
/// use weir_sdk::{TimeDomain, Timer};
///
/// let t = Timer::new(TimeDomain::EventTime, b"alice", 60_000);
/// assert_eq!((t.key(), t.timestamp()), (&b"alice"[..], 60_000));
/// assert_eq!(t.domain(), TimeDomain::EventTime);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer<'a> {
    domain: TimeDomain,
    key: &'a [u8],
    timestamp: i64,
}

impl<'a> Timer<'a> {
    /// A timer value, e.g. to unit-test a helper that takes a `Timer`.
    ///
    /// ```
    /// let t = weir_sdk::Timer::new(weir_sdk::TimeDomain::ProcessingTime, b"k", 1);
    /// assert_eq!(t.timestamp(), 1);
    /// ```
    pub fn new(domain: TimeDomain, key: &'a [u8], timestamp: i64) -> Self {
        Timer {
            domain,
            key,
            timestamp,
        }
    }

    /// Event time or processing time.
    ///
    /// ```
    /// let t = weir_sdk::Timer::new(weir_sdk::TimeDomain::EventTime, b"k", 1);
    /// assert_eq!(t.domain(), weir_sdk::TimeDomain::EventTime);
    /// ```
    pub fn domain(&self) -> TimeDomain {
        self.domain
    }

    /// The key the timer was registered for.
    ///
    /// ```
    /// let t = weir_sdk::Timer::new(weir_sdk::TimeDomain::EventTime, b"k", 1);
    /// assert_eq!(t.key(), b"k");
    /// ```
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The key as UTF-8 text; an error if it is not UTF-8.
    ///
    /// ```
    /// let t = weir_sdk::Timer::new(weir_sdk::TimeDomain::EventTime, b"k", 1);
    /// assert_eq!(t.key_str().unwrap(), "k");
    /// ```
    pub fn key_str(&self) -> Result<&'a str> {
        std::str::from_utf8(self.key).map_err(|e| Error::new(e).context("timer key"))
    }

    /// The time the timer was registered for, in milliseconds.
    ///
    /// ```
    /// let t = weir_sdk::Timer::new(weir_sdk::TimeDomain::EventTime, b"k", 7);
    /// assert_eq!(t.timestamp(), 7);
    /// ```
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }
}
