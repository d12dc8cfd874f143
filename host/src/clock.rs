//! Processing time: the wall clock, or a clock that tests set by hand.
//!
//! Everything in weir that reads processing time (state TTL, the guest's
//! `current-processing-time`) reads it from the job's [`Clock`], so a test can make state
//! expire exactly when it says, without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Processing time in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// `None`: the system clock.
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that stands at `ms` until [`set`](Self::set) or [`advance`](Self::advance)
    /// moves it. Clones share the time.
    pub fn manual(ms: i64) -> Clock {
        Clock {
            manual: Some(Arc::new(AtomicI64::new(ms))),
        }
    }

    /// The time now, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }
    }

    /// Whether this is a manual clock: one that moves only when told, so that nothing can
    /// wait for it to reach a time.
    pub fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// Sets a manual clock to `ms`.
    ///
    /// # Panics
    /// On the system clock, which cannot be set.
    pub fn set(&self, ms: i64) {
        self.handle().store(ms, Ordering::SeqCst);
    }

    /// Moves a manual clock forward by `d`.
    ///
    /// # Panics
    /// On the system clock, which cannot be set.
    pub fn advance(&self, d: Duration) {
        self.handle()
            .fetch_add(d.as_millis() as i64, Ordering::SeqCst);
    }

    fn handle(&self) -> &AtomicI64 {
        self.manual
            .as_deref()
            .expect("only a manual clock (Clock::manual) can be set")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = Clock::manual(1_000);
        let other = clock.clone();
        assert_eq!(other.now_ms(), 1_000);
        clock.advance(Duration::from_millis(250));
        assert_eq!(other.now_ms(), 1_250);
        other.set(5);
        assert_eq!(clock.now_ms(), 5);
        assert!(Clock::system().now_ms() > 1_600_000_000_000);
    }
}
