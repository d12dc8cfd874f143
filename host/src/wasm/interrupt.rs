//! The deadline of a guest call and the cancellation of its job, enforced wherever the guest
//! is: running its own code, or waiting in a host call.
//!
//! - While guest code runs, wasmtime checks the engine's epoch at function entries and loop
//!   back-edges; every tick (see `limits::EPOCH_TICK`) past the store's epoch deadline calls
//!   [`on_epoch`], which traps the call once its wall-clock deadline has passed or its job is
//!   being cancelled. Time the guest spent in host calls counts, since the deadline is a point
//!   in time.
//! - The one way a guest waits in the host is a subscription to the monotonic clock (`sleep`,
//!   `poll` with a timeout): every other pollable a sandboxed guest can make is ready at once.
//!   [`add_to_linker`] replaces wasmtime-wasi's clock subscriptions with ones that wake up at
//!   the call's deadline or when the job is cancelled, whichever comes first; the guest's next
//!   epoch check then traps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::UpdateDeadline;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::HostMonotonicClock;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::host::HostState;

/// The WASI package version of wasmtime-wasi's monotonic clock, which this module shadows.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// How long a waiting guest sleeps between looks at its deadline and its job's cancellation.
const SLICE: Duration = Duration::from_millis(10);

/// The call clock of one operator instance: when its current call must end, and whether its
/// job is being cancelled. Shared with the instance's clock subscriptions.
#[derive(Debug)]
pub(crate) struct CallClock {
    /// The instance's monotonic clock counts from here.
    origin: Instant,
    /// Nanoseconds after `origin` at which the current call must end; `u64::MAX`: never.
    deadline: AtomicU64,
    cancelled: Arc<AtomicBool>,
}

/// The guest call was stopped because its job is being cancelled.
#[derive(Debug, thiserror::Error)]
#[error("the job is being cancelled")]
pub(crate) struct Cancelled;

impl CallClock {
    /// A clock whose calls are cancelled once `cancelled` is set.
    pub(crate) fn new(cancelled: Arc<AtomicBool>) -> Arc<CallClock> {
        Arc::new(CallClock {
            origin: Instant::now(),
            deadline: AtomicU64::new(u64::MAX),
            cancelled,
        })
    }

    /// A call starts that must end within `limit` (`None`: no deadline).
    pub(crate) fn arm(&self, limit: Option<Duration>) {
        let deadline = limit.map_or(u64::MAX, |limit| {
            nanos(self.origin.elapsed().saturating_add(limit))
        });
        self.deadline.store(deadline, Ordering::Relaxed);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    fn past_deadline(&self) -> bool {
        nanos(self.origin.elapsed()) >= self.deadline.load(Ordering::Relaxed)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// wasmtime's epoch-deadline callback: traps a call past its deadline (as an interrupt) or of
/// a job being cancelled ([`Cancelled`]); otherwise looks again at the next tick.
pub(crate) fn on_epoch(clock: &CallClock) -> wasmtime::Result<UpdateDeadline> {
    if clock.is_cancelled() {
        return Err(Cancelled.into());
    }
    if clock.past_deadline() {
        return Ok(UpdateDeadline::Interrupt);
    }
    Ok(UpdateDeadline::Continue(1))
}

/// The guest's monotonic clock: nanoseconds since its [`CallClock`]'s origin, so that the
/// instants it subscribes to can be compared with the call's deadline.
pub(crate) struct MonotonicClock(pub(crate) Arc<CallClock>);

impl HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        nanos(self.0.origin.elapsed())
    }
}

/// Replaces the clock subscriptions of `wasi:clocks/monotonic-clock` (after wasmtime-wasi has
/// defined them) with [`Wait`]s.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store, (duration,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            let now = Instant::now();
            let wake = now.checked_add(Duration::from_nanos(duration));
            Ok((subscribe_wait(store.data_mut(), wake)?,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store, (when,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            let origin = store.data().call_clock().origin;
            let wake = origin.checked_add(Duration::from_nanos(when));
            Ok((subscribe_wait(store.data_mut(), wake)?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn subscribe_wait(
    data: &mut HostState,
    wake: Option<Instant>,
) -> wasmtime::Result<Resource<DynPollable>> {
    let wait = Wait {
        // A time too far to represent is never.
        wake: wake.map(tokio::time::Instant::from_std),
        clock: Arc::clone(data.call_clock()),
    };
    let table = data.table();
    let resource = table.push(wait)?;
    subscribe(table, resource)
}

/// A clock subscription that is ready at its time, or earlier when the call's deadline has
/// passed or the job is being cancelled.
struct Wait {
    wake: Option<tokio::time::Instant>,
    clock: Arc<CallClock>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for Wait {
    async fn ready(&mut self) {
        loop {
            let now = tokio::time::Instant::now();
            if self.wake.is_some_and(|wake| now >= wake)
                || self.clock.is_cancelled()
                || self.clock.past_deadline()
            {
                return;
            }
            let slice = now + SLICE;
            tokio::time::sleep_until(self.wake.map_or(slice, |wake| wake.min(slice))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_callback_traps_past_the_deadline_or_on_cancel() {
        let cancelled = Arc::new(AtomicBool::new(false));
        let clock = CallClock::new(Arc::clone(&cancelled));
        clock.arm(None);
        assert!(matches!(on_epoch(&clock), Ok(UpdateDeadline::Continue(1))));
        clock.arm(Some(Duration::from_secs(3600)));
        assert!(matches!(on_epoch(&clock), Ok(UpdateDeadline::Continue(1))));
        clock.arm(Some(Duration::ZERO));
        assert!(matches!(on_epoch(&clock), Ok(UpdateDeadline::Interrupt)));
        cancelled.store(true, Ordering::Relaxed);
        let Err(err) = on_epoch(&clock) else {
            panic!("a cancelled call goes on");
        };
        assert!(err.downcast_ref::<Cancelled>().is_some());
    }
}
