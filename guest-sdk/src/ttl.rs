//! Time-to-live of keyed state, mirroring the WIT `ttl` record and Flink's `StateTtlConfig`.

use std::time::Duration;

/// When the time-to-live of a state entry restarts (Flink's `StateTtlConfig.UpdateType`).
///
/// ```
/// use weir_sdk::{Ttl, UpdateType};
/// let ttl = Ttl::new(std::time::Duration::from_secs(5)).set_update_type(UpdateType::OnReadAndWrite);
/// assert_eq!(ttl.update_type(), UpdateType::OnReadAndWrite);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UpdateType {
    /// TTL is off: entries never expire (Flink's meaning).
    Disabled,
    /// The TTL restarts when an entry is created or written (the default).
    #[default]
    OnCreateAndWrite,
    /// The TTL also restarts when an entry is read.
    OnReadAndWrite,
}

/// Whether an expired entry that was not cleaned up yet may still be read
/// (Flink's `StateTtlConfig.StateVisibility`).
///
/// ```
/// use weir_sdk::{StateVisibility, Ttl};
/// let ttl = Ttl::new(std::time::Duration::from_secs(5));
/// assert_eq!(ttl.state_visibility(), StateVisibility::NeverReturnExpired);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StateVisibility {
    /// An expired entry reads as absent (the default).
    #[default]
    NeverReturnExpired,
    /// An expired entry may be read until it is cleaned up.
    ReturnExpiredIfNotCleanedUp,
}

/// The clock a TTL is measured against (Flink's `TtlTimeCharacteristic`).
///
/// ```
/// use weir_sdk::{Ttl, TtlTimeCharacteristic};
/// let ttl = Ttl::new(std::time::Duration::from_secs(5)).use_event_time();
/// assert_eq!(ttl.time_characteristic(), TtlTimeCharacteristic::EventTime);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TtlTimeCharacteristic {
    /// The host's wall clock (the default).
    #[default]
    ProcessingTime,
    /// The task's event-time watermark.
    EventTime,
}

/// Time-to-live of a state's entries, declared with
/// [`Context::value_state_with_ttl`](crate::Context::value_state_with_ttl) and its list and
/// map siblings.
///
/// The host's state backends enforce it (expiry, cleanup on read, on snapshot and in
/// compaction; the README's "State backends and TTL" has the rules); the SDK declares it. [`testing::Harness`](crate::testing::Harness) does
/// not expire anything.
///
/// ```
/// use std::time::Duration;
/// use weir_sdk::{StateVisibility, Ttl, UpdateType};
///
/// let ttl = Ttl::new(Duration::from_secs(60));
/// assert_eq!(ttl.update_type(), UpdateType::OnCreateAndWrite);
/// assert_eq!(ttl.state_visibility(), StateVisibility::NeverReturnExpired);
///
/// let ttl = ttl.update_ttl_on_read_and_write().return_expired_if_not_cleaned_up();
/// assert_eq!(ttl.update_type(), UpdateType::OnReadAndWrite);
/// assert_eq!(ttl.ttl(), Duration::from_secs(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ttl {
    ttl: Duration,
    update_type: UpdateType,
    visibility: StateVisibility,
    time: TtlTimeCharacteristic,
}

impl Ttl {
    /// A TTL of `ttl`, restarted on create and write, never returning expired entries,
    /// measured in processing time.
    ///
    /// ```
    /// let ttl = weir_sdk::Ttl::new(std::time::Duration::from_millis(1500));
    /// assert_eq!(ttl.ttl().as_millis(), 1500);
    /// ```
    pub fn new(ttl: Duration) -> Self {
        Ttl {
            ttl,
            update_type: UpdateType::default(),
            visibility: StateVisibility::default(),
            time: TtlTimeCharacteristic::default(),
        }
    }

    /// The time-to-live.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(weir_sdk::Ttl::new(Duration::from_secs(1)).ttl(), Duration::from_secs(1));
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the TTL restarts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, UpdateType};
    /// assert_eq!(Ttl::new(Duration::from_secs(1)).update_type(), UpdateType::OnCreateAndWrite);
    /// ```
    pub fn update_type(&self) -> UpdateType {
        self.update_type
    }

    /// Whether expired entries may be read.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{StateVisibility, Ttl};
    /// let ttl = Ttl::new(Duration::from_secs(1));
    /// assert_eq!(ttl.state_visibility(), StateVisibility::NeverReturnExpired);
    /// ```
    pub fn state_visibility(&self) -> StateVisibility {
        self.visibility
    }

    /// The clock the TTL is measured against.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, TtlTimeCharacteristic};
    /// let ttl = Ttl::new(Duration::from_secs(1)).use_event_time();
    /// assert_eq!(ttl.time_characteristic(), TtlTimeCharacteristic::EventTime);
    /// ```
    pub fn time_characteristic(&self) -> TtlTimeCharacteristic {
        self.time
    }

    /// Sets when the TTL restarts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, UpdateType};
    /// let ttl = Ttl::new(Duration::from_secs(1)).set_update_type(UpdateType::Disabled);
    /// assert_eq!(ttl.update_type(), UpdateType::Disabled);
    /// ```
    #[must_use]
    pub fn set_update_type(mut self, update_type: UpdateType) -> Self {
        self.update_type = update_type;
        self
    }

    /// Restart the TTL when an entry is created or written (the default).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, UpdateType};
    /// let ttl = Ttl::new(Duration::from_secs(1)).update_ttl_on_create_and_write();
    /// assert_eq!(ttl.update_type(), UpdateType::OnCreateAndWrite);
    /// ```
    #[must_use]
    pub fn update_ttl_on_create_and_write(self) -> Self {
        self.set_update_type(UpdateType::OnCreateAndWrite)
    }

    /// Restart the TTL on reads too.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, UpdateType};
    /// let ttl = Ttl::new(Duration::from_secs(1)).update_ttl_on_read_and_write();
    /// assert_eq!(ttl.update_type(), UpdateType::OnReadAndWrite);
    /// ```
    #[must_use]
    pub fn update_ttl_on_read_and_write(self) -> Self {
        self.set_update_type(UpdateType::OnReadAndWrite)
    }

    /// Sets whether expired entries may be read.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{StateVisibility, Ttl};
    /// let ttl = Ttl::new(Duration::from_secs(1))
    ///     .set_state_visibility(StateVisibility::ReturnExpiredIfNotCleanedUp);
    /// assert_eq!(ttl.state_visibility(), StateVisibility::ReturnExpiredIfNotCleanedUp);
    /// ```
    #[must_use]
    pub fn set_state_visibility(mut self, visibility: StateVisibility) -> Self {
        self.visibility = visibility;
        self
    }

    /// Expired entries read as absent (the default).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{StateVisibility, Ttl};
    /// let ttl = Ttl::new(Duration::from_secs(1)).never_return_expired();
    /// assert_eq!(ttl.state_visibility(), StateVisibility::NeverReturnExpired);
    /// ```
    #[must_use]
    pub fn never_return_expired(self) -> Self {
        self.set_state_visibility(StateVisibility::NeverReturnExpired)
    }

    /// Expired entries may be read until they are cleaned up.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{StateVisibility, Ttl};
    /// let ttl = Ttl::new(Duration::from_secs(1)).return_expired_if_not_cleaned_up();
    /// assert_eq!(ttl.state_visibility(), StateVisibility::ReturnExpiredIfNotCleanedUp);
    /// ```
    #[must_use]
    pub fn return_expired_if_not_cleaned_up(self) -> Self {
        self.set_state_visibility(StateVisibility::ReturnExpiredIfNotCleanedUp)
    }

    /// Sets the clock the TTL is measured against.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, TtlTimeCharacteristic};
    /// let ttl = Ttl::new(Duration::from_secs(1))
    ///     .set_ttl_time_characteristic(TtlTimeCharacteristic::EventTime);
    /// assert_eq!(ttl.time_characteristic(), TtlTimeCharacteristic::EventTime);
    /// ```
    #[must_use]
    pub fn set_ttl_time_characteristic(mut self, time: TtlTimeCharacteristic) -> Self {
        self.time = time;
        self
    }

    /// Measure the TTL in processing time (the default).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, TtlTimeCharacteristic};
    /// let ttl = Ttl::new(Duration::from_secs(1)).use_processing_time();
    /// assert_eq!(ttl.time_characteristic(), TtlTimeCharacteristic::ProcessingTime);
    /// ```
    #[must_use]
    pub fn use_processing_time(self) -> Self {
        self.set_ttl_time_characteristic(TtlTimeCharacteristic::ProcessingTime)
    }

    /// Measure the TTL against the task's watermark (in a job without watermarks, entries
    /// do not expire before the input ends).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_sdk::{Ttl, TtlTimeCharacteristic};
    /// let ttl = Ttl::new(Duration::from_secs(1)).use_event_time();
    /// assert_eq!(ttl.time_characteristic(), TtlTimeCharacteristic::EventTime);
    /// ```
    #[must_use]
    pub fn use_event_time(self) -> Self {
        self.set_ttl_time_characteristic(TtlTimeCharacteristic::EventTime)
    }

    /// The TTL in whole milliseconds, saturating, as the WIT `ttl-ms` field.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }
}
