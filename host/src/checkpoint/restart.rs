//! The restart strategy of a job: whether, when and how often a failed job restarts.
//!
//! When a task fails (a guest trap, an I/O error), the job restarts from its newest checkpoint
//! after a delay, and fails for good with the last cause once the strategy allows no more
//! restarts. This module owns the `[restart]` table of the job spec ([`RestartStrategy`]) and the
//! decision after each failure ([`Restarts`]). It does not sleep, read a clock or draw random
//! numbers: the caller passes times and randomness in, so every decision is reproducible.
//!
//! Names and defaults are Flink's (`restart-strategy.*`), with `-` spelled `_`, so Flink users
//! can carry their settings over:
//!
//! ```toml
//! [restart]
//! strategy = "exponential_delay"   # or "fixed_delay" or "none"
//! initial_backoff = "1s"           # delay before the first restart
//! max_backoff = "1min"             # the delay never exceeds this, jitter included
//! backoff_multiplier = 1.5         # each consecutive restart waits this much longer
//! jitter_factor = 0.1              # ± this fraction of the delay, at random
//! reset_backoff_threshold = "1h"   # a run this long starts the backoff over
//! attempts = 10                    # restarts before failing for good; absent = unlimited
//! identical_failures = 3           # the same guest failure this often in a row: fail for good
//!
//! # strategy = "fixed_delay"
//! # attempts = 1                   # restarts before failing for good
//! # delay = "1s"                   # delay before every restart
//! ```
//!
//! Without a `[restart]` table, or without `strategy` in it, [`RestartStrategy::default_for`]
//! picks Flink's default.
//!
//! Beyond Flink: a failure of guest code that repeats identically, each time from the same
//! checkpoint and before another completed, is deterministic (a poison record, a bug): after
//! `identical_failures` of them the job fails for good instead of restarting without end.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a job reacts to a failure: the job spec's `[restart]` table, tagged by `strategy`.
///
/// Deserialization rejects unknown keys, also for `strategy = "none"` (which has no keys), so a
/// misspelled or misplaced setting is an error rather than silently ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case", from = "TaggedStrategy")]
pub enum RestartStrategy {
    /// Never restart: the first failure fails the job (Flink's `none`).
    None,
    /// Restart up to `attempts` times with a constant delay (Flink's `fixed-delay`).
    FixedDelay(FixedDelay),
    /// Restart with a delay that grows after each consecutive failure (Flink's
    /// `exponential-delay`).
    ExponentialDelay(ExponentialDelay),
}

/// The deserialization form of [`RestartStrategy`]. A unit variant of an internally tagged enum
/// accepts and drops any other keys, even with `deny_unknown_fields`; an empty struct variant
/// rejects them, so `strategy = "none"` with a stray `attempts = 3` is an error.
#[derive(Deserialize)]
#[serde(tag = "strategy", rename_all = "snake_case", deny_unknown_fields)]
enum TaggedStrategy {
    None {},
    FixedDelay(FixedDelay),
    ExponentialDelay(ExponentialDelay),
}

impl From<TaggedStrategy> for RestartStrategy {
    fn from(tagged: TaggedStrategy) -> Self {
        match tagged {
            TaggedStrategy::None {} => RestartStrategy::None,
            TaggedStrategy::FixedDelay(fixed) => RestartStrategy::FixedDelay(fixed),
            TaggedStrategy::ExponentialDelay(exponential) => {
                RestartStrategy::ExponentialDelay(exponential)
            }
        }
    }
}

/// Settings of `strategy = "fixed_delay"`; absent keys take Flink's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FixedDelay {
    /// Restarts before the job fails for good (`restart-strategy.fixed-delay.attempts`,
    /// default 1). Zero never restarts.
    pub attempts: u32,
    /// Delay before every restart (`restart-strategy.fixed-delay.delay`, default 1 s).
    #[serde(with = "humantime_serde")]
    pub delay: Duration,
    /// See [`ExponentialDelay::identical_failures`].
    pub identical_failures: u32,
}

impl Default for FixedDelay {
    /// Flink's defaults: one restart after 1 s.
    fn default() -> Self {
        FixedDelay {
            attempts: 1,
            delay: Duration::from_secs(1),
            identical_failures: DEFAULT_IDENTICAL_FAILURES,
        }
    }
}

/// See [`ExponentialDelay::identical_failures`].
const DEFAULT_IDENTICAL_FAILURES: u32 = 3;

/// Settings of `strategy = "exponential_delay"`; absent keys take Flink's defaults.
///
/// The `k`-th consecutive restart (from 0) waits `min(initial_backoff * backoff_multiplier^k,
/// max_backoff)`, moved by up to `± jitter_factor` of itself and kept within `max_backoff`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExponentialDelay {
    /// Delay before the first restart (`restart-strategy.exponential-delay.initial-backoff`,
    /// default 1 s).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// The longest delay, jitter included (`restart-strategy.exponential-delay.max-backoff`,
    /// default 1 min).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Factor by which the delay grows per consecutive restart
    /// (`restart-strategy.exponential-delay.backoff-multiplier`, default 1.5).
    pub backoff_multiplier: f64,
    /// Fraction of the delay added or subtracted at random, so jobs that failed together do not
    /// restart together (`restart-strategy.exponential-delay.jitter-factor`, default 0.1).
    pub jitter_factor: f64,
    /// A run that lasted this long before failing starts the backoff, and the `attempts` count,
    /// over (`restart-strategy.exponential-delay.reset-backoff-threshold`, default 1 h).
    #[serde(with = "humantime_serde")]
    pub reset_backoff_threshold: Duration,
    /// Consecutive restarts before the job fails for good; `None` (the default) is unlimited
    /// (`restart-strategy.exponential-delay.attempts-before-reset-backoff`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Failures of guest code (a trap, an error, a limit) that are identical — same operator,
    /// subtask and message, each from the same checkpoint with none completed in between —
    /// after which the job fails for good: restarting cannot get past a deterministic failure
    /// such as a poison record. Default 3; 0 restarts them like any other failure.
    pub identical_failures: u32,
}

impl Default for ExponentialDelay {
    /// Flink 2.x's defaults (since 1.19: max backoff 1 min, multiplier 1.5).
    fn default() -> Self {
        ExponentialDelay {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            backoff_multiplier: 1.5,
            jitter_factor: 0.1,
            reset_backoff_threshold: Duration::from_secs(60 * 60),
            attempts: None,
            identical_failures: DEFAULT_IDENTICAL_FAILURES,
        }
    }
}

impl RestartStrategy {
    /// Flink's default: exponential delay when checkpointing is enabled, none otherwise.
    ///
    /// Without checkpoints a restart would start over from the beginning of the input, so it is
    /// not done unless asked for.
    pub fn default_for(checkpointing: bool) -> Self {
        if checkpointing {
            RestartStrategy::ExponentialDelay(ExponentialDelay::default())
        } else {
            RestartStrategy::None
        }
    }

    /// The `identical_failures` setting (0 for `none`, which never restarts anyway).
    fn identical_failures(&self) -> u32 {
        match self {
            RestartStrategy::None => 0,
            RestartStrategy::FixedDelay(f) => f.identical_failures,
            RestartStrategy::ExponentialDelay(e) => e.identical_failures,
        }
    }

    /// The `strategy` value that selects this variant in the job spec.
    pub fn name(&self) -> &'static str {
        match self {
            RestartStrategy::None => "none",
            RestartStrategy::FixedDelay(_) => "fixed_delay",
            RestartStrategy::ExponentialDelay(_) => "exponential_delay",
        }
    }

    /// Checks that the settings are in range: for `exponential_delay`, `initial_backoff > 0`,
    /// `initial_backoff <= max_backoff`, `backoff_multiplier >= 1`, `0 <= jitter_factor <= 1`,
    /// `reset_backoff_threshold > 0` and `attempts >= 1`. The error names the setting and the fix.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            // Every u32 and Duration is meaningful: zero attempts never restarts, as in Flink.
            RestartStrategy::None | RestartStrategy::FixedDelay(_) => Ok(()),
            RestartStrategy::ExponentialDelay(e) => e.validate(),
        }
    }
}

impl ExponentialDelay {
    fn validate(&self) -> Result<(), String> {
        if self.initial_backoff.is_zero() {
            return Err(
                "[restart] initial_backoff must be positive; set it to a delay such as \
                 \"1s\", or remove it for the default of 1 s"
                    .into(),
            );
        }
        if self.max_backoff < self.initial_backoff {
            return Err(format!(
                "[restart] max_backoff = {:?} is below initial_backoff = {:?}; raise max_backoff \
                 or lower initial_backoff",
                self.max_backoff, self.initial_backoff
            ));
        }
        // Written so that NaN fails too.
        if !(self.backoff_multiplier >= 1.0 && self.backoff_multiplier.is_finite()) {
            return Err(format!(
                "[restart] backoff_multiplier = {} must be a number of at least 1 (1 keeps the \
                 delay constant); remove it for the default of 1.5",
                self.backoff_multiplier
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter_factor) {
            return Err(format!(
                "[restart] jitter_factor = {} must be between 0 and 1 (a fraction of the \
                 delay); remove it for the default of 0.1",
                self.jitter_factor
            ));
        }
        if self.reset_backoff_threshold.is_zero() {
            return Err(
                "[restart] reset_backoff_threshold must be positive; set it to how long \
                 a run must last to start the backoff over, such as \"1h\", or remove it for the \
                 default of 1 h"
                    .into(),
            );
        }
        if self.attempts == Some(0) {
            return Err(
                "[restart] attempts = 0 would never restart; remove attempts for \
                 unlimited restarts, or set strategy = \"none\""
                    .into(),
            );
        }
        Ok(())
    }

    /// The delay of the `k`-th consecutive restart (from 0), without jitter.
    fn backoff(&self, k: u32) -> Duration {
        // powi saturates to infinity for a long streak; `scale` then caps at max_backoff.
        let exponent = i32::try_from(k).unwrap_or(i32::MAX);
        scale(
            self.initial_backoff,
            self.backoff_multiplier.powi(exponent),
            self.max_backoff,
        )
    }

    /// `backoff` moved by `jitter_factor * (2 * random - 1)` of itself, so within `± jitter`.
    fn jittered(&self, backoff: Duration, random: f64) -> Duration {
        // Out-of-range randomness is clamped and NaN means "no jitter": a caller's mistake must
        // not produce a negative or endless delay.
        let random = if random.is_nan() {
            0.5
        } else {
            random.clamp(0.0, 1.0)
        };
        let factor = 1.0 + self.jitter_factor * (2.0 * random - 1.0);
        // As in Flink, max_backoff is the longest delay there is, jitter included: at the cap
        // the jitter only shortens the delay.
        scale(backoff, factor, self.max_backoff)
    }
}

/// `d * factor`, rounded to the nanosecond and clamped to `[0, cap]`; NaN or infinity give
/// `cap`.
fn scale(d: Duration, factor: f64, cap: Duration) -> Duration {
    // In nanoseconds so that exact products (1 s * 1.5^k) stay exact, instead of being truncated
    // as `Duration::mul_f64` may.
    let nanos = d.as_nanos() as f64 * factor;
    if nanos.is_nan() || nanos >= cap.as_nanos() as f64 {
        cap
    } else if nanos <= 0.0 {
        Duration::ZERO
    } else {
        // Below cap, so it fits a u64 unless cap is centuries long; `as` saturates then.
        Duration::from_nanos(nanos.round() as u64)
    }
}

/// What a job does after a failure.
#[derive(Debug, Clone, PartialEq)]
pub enum RestartDecision {
    /// Restart from the newest checkpoint after `delay`. `attempt` counts from 1 the restarts
    /// that the strategy's `attempts` limits: for `exponential_delay` it starts over when the
    /// backoff resets.
    Restart {
        /// Which restart this is, from 1.
        attempt: u32,
        /// How long to wait first.
        delay: Duration,
    },
    /// Fail the job for good with the failure's cause (see [`Restarts::exhausted`]).
    Fail,
}

/// Tracks restarts of one job under a strategy.
#[derive(Debug, Clone)]
pub struct Restarts {
    strategy: RestartStrategy,
    /// Restarts since the backoff last reset: the exponent `k` of the next delay, and what
    /// `attempts` limits.
    consecutive: u32,
    /// Restarts since the job started, never reset.
    total: u32,
    /// Set by the first `Fail`: a job that failed for good stays failed.
    failed: bool,
    /// The last failure of guest code and the checkpoint its run started from, with how many
    /// times in a row it happened.
    last: Option<(String, Option<u64>, u32)>,
    /// Set when that streak reached `identical_failures`.
    deterministic: bool,
}

impl Restarts {
    /// Starts tracking a job that has not restarted yet. The strategy should have passed
    /// [`RestartStrategy::validate`]; out-of-range settings do not panic but give odd delays.
    pub fn new(strategy: RestartStrategy) -> Self {
        Restarts {
            strategy,
            consecutive: 0,
            total: 0,
            failed: false,
            last: None,
            deterministic: false,
        }
    }

    /// Notes a failure of guest code described by `cause` (equal descriptions for equal
    /// failures) in a run that started from checkpoint `restored_from`. Returns whether it
    /// repeated identically `identical_failures` times in a row, so is deterministic: the job
    /// must then fail for good ([`Restarts::exhausted`] says why). A failure of anything else
    /// (a connection, a disk) breaks the streak; call [`Restarts::on_failure`] for every
    /// failure either way.
    pub fn is_deterministic(&mut self, cause: Option<&str>, restored_from: Option<u64>) -> bool {
        let limit = self.strategy.identical_failures();
        let Some(cause) = cause else {
            self.last = None;
            return false;
        };
        let count = match &self.last {
            Some((last, from, count)) if last == cause && *from == restored_from => count + 1,
            _ => 1,
        };
        self.last = Some((cause.to_owned(), restored_from, count));
        self.deterministic = limit > 0 && count >= limit;
        self.failed |= self.deterministic;
        self.deterministic
    }

    /// The strategy being applied.
    pub fn strategy(&self) -> &RestartStrategy {
        &self.strategy
    }

    /// A run that started at `run_started` failed at `now` (both Durations since an origin);
    /// `random` in [0,1) is the caller's randomness for jitter.
    ///
    /// Once this returns [`RestartDecision::Fail`] it always does.
    pub fn on_failure(
        &mut self,
        run_started: Duration,
        now: Duration,
        random: f64,
    ) -> RestartDecision {
        if self.failed {
            return RestartDecision::Fail;
        }
        let decision = match &self.strategy {
            RestartStrategy::None => RestartDecision::Fail,
            RestartStrategy::FixedDelay(fixed) => {
                if self.consecutive < fixed.attempts {
                    RestartDecision::Restart {
                        attempt: self.consecutive + 1,
                        delay: fixed.delay,
                    }
                } else {
                    RestartDecision::Fail
                }
            }
            RestartStrategy::ExponentialDelay(exponential) => {
                // A long healthy run means the cause was transient: start over from a short
                // delay and a fresh attempt budget, as Flink does.
                if now.saturating_sub(run_started) >= exponential.reset_backoff_threshold {
                    self.consecutive = 0;
                }
                if exponential
                    .attempts
                    .is_some_and(|limit| self.consecutive >= limit)
                {
                    RestartDecision::Fail
                } else {
                    let backoff = exponential.backoff(self.consecutive);
                    RestartDecision::Restart {
                        attempt: self.consecutive.saturating_add(1),
                        delay: exponential.jittered(backoff, random),
                    }
                }
            }
        };
        match decision {
            RestartDecision::Restart { .. } => {
                // Saturating: unlimited restarts must not overflow, and the delay is capped by
                // then anyway.
                self.consecutive = self.consecutive.saturating_add(1);
                self.total = self.total.saturating_add(1);
            }
            RestartDecision::Fail => self.failed = true,
        }
        decision
    }

    /// Number of restarts so far, since the job started (not reset with the backoff).
    pub fn attempts(&self) -> u32 {
        self.total
    }

    /// The error to fail the job with after [`RestartDecision::Fail`]: the last failure's
    /// `cause`, and the `[restart]` setting that ended the restarts.
    pub fn exhausted<E>(&self, cause: E) -> RestartsExhausted<E> {
        let limit = match &self.strategy {
            _ if self.deterministic => Limit::Identical {
                identical_failures: self.strategy.identical_failures(),
            },
            RestartStrategy::None => Limit::NoRestarts,
            RestartStrategy::FixedDelay(fixed) => Limit::FixedDelay {
                attempts: fixed.attempts,
            },
            RestartStrategy::ExponentialDelay(exponential) => Limit::ExponentialDelay {
                attempts: exponential.attempts.unwrap_or(u32::MAX),
                reset_backoff_threshold: exponential.reset_backoff_threshold,
            },
        };
        RestartsExhausted {
            restarts: self.total,
            limit,
            cause,
        }
    }
}

/// A job failed for good: its restart strategy allows no further restart. Carries the last
/// failure.
#[derive(Debug, thiserror::Error)]
#[error("job failed for good after {restarts} restart(s): {cause}; {limit}")]
pub struct RestartsExhausted<E> {
    /// Restarts since the job started.
    pub restarts: u32,
    limit: Limit,
    /// The failure that ended the job (in the message, so not also a `source`: error
    /// reports that print the chain would show it twice).
    pub cause: E,
}

/// Which setting ended the restarts, for the message.
#[derive(Debug)]
enum Limit {
    NoRestarts,
    Identical {
        identical_failures: u32,
    },
    FixedDelay {
        attempts: u32,
    },
    ExponentialDelay {
        attempts: u32,
        reset_backoff_threshold: Duration,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::NoRestarts => write!(
                f,
                "[restart] strategy = \"none\" never restarts; set strategy = \
                 \"exponential_delay\" or \"fixed_delay\" to restart from the newest checkpoint"
            ),
            Limit::Identical { identical_failures } => write!(
                f,
                "it failed the same way {identical_failures} times in a row from the same \
                 checkpoint, so a restart will not get past it (a poison record or a bug); fix \
                 the operator or its input, or set [restart] identical_failures = 0 to keep \
                 restarting"
            ),
            Limit::FixedDelay { attempts } => write!(
                f,
                "[restart] strategy = \"fixed_delay\" allows attempts = {attempts}; raise \
                 attempts, or fix the cause"
            ),
            Limit::ExponentialDelay {
                attempts,
                reset_backoff_threshold,
            } => write!(
                f,
                "[restart] strategy = \"exponential_delay\" allows attempts = {attempts} \
                 consecutive restarts (a run of reset_backoff_threshold = \
                 {reset_backoff_threshold:?} starts the count over); raise or remove attempts, \
                 or fix the cause"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// Parses a job spec holding only a `[restart]` table.
    fn parse(toml_text: &str) -> Result<RestartStrategy, String> {
        #[derive(Deserialize)]
        struct Spec {
            restart: RestartStrategy,
        }
        toml::from_str::<Spec>(toml_text)
            .map(|spec| spec.restart)
            .map_err(|e| e.to_string())
    }

    fn exponential(strategy: &RestartStrategy) -> &ExponentialDelay {
        match strategy {
            RestartStrategy::ExponentialDelay(e) => e,
            other => panic!("expected exponential_delay, got {other:?}"),
        }
    }

    fn restart_delay(decision: RestartDecision) -> Duration {
        match decision {
            RestartDecision::Restart { delay, .. } => delay,
            RestartDecision::Fail => panic!("expected a restart, got Fail"),
        }
    }

    /// Fails a run that lasted one second at a time `t`, with no jitter effect.
    fn fail_quickly(restarts: &mut Restarts, t: u64) -> RestartDecision {
        restarts.on_failure(Duration::from_secs(t), Duration::from_secs(t + 1), 0.5)
    }

    #[test]
    fn exponential_delay_parses_every_key() {
        let strategy = parse(
            r#"
            [restart]
            strategy = "exponential_delay"
            initial_backoff = "250ms"
            max_backoff = "2min"
            backoff_multiplier = 2      # a TOML integer is fine for a float setting
            jitter_factor = 0.25
            reset_backoff_threshold = "30m"
            attempts = 10
            "#,
        )
        .unwrap();
        assert_eq!(
            strategy,
            RestartStrategy::ExponentialDelay(ExponentialDelay {
                initial_backoff: Duration::from_millis(250),
                max_backoff: Duration::from_secs(120),
                backoff_multiplier: 2.0,
                jitter_factor: 0.25,
                reset_backoff_threshold: Duration::from_secs(30 * 60),
                attempts: Some(10),
                identical_failures: 3,
            })
        );
        assert_eq!(strategy.validate(), Ok(()));
    }

    #[test]
    fn exponential_delay_defaults_are_flinks() {
        let strategy = parse("[restart]\nstrategy = \"exponential_delay\"").unwrap();
        let e = exponential(&strategy);
        assert_eq!(e.initial_backoff, Duration::from_secs(1));
        assert_eq!(e.max_backoff, Duration::from_secs(60));
        assert_eq!(e.backoff_multiplier, 1.5);
        assert_eq!(e.jitter_factor, 0.1);
        assert_eq!(e.reset_backoff_threshold, Duration::from_secs(3600));
        assert_eq!(e.attempts, None);
        assert_eq!(strategy.validate(), Ok(()));
    }

    #[test]
    fn fixed_delay_parses_every_key() {
        let strategy =
            parse("[restart]\nstrategy = \"fixed_delay\"\nattempts = 3\ndelay = \"10s\"").unwrap();
        assert_eq!(
            strategy,
            RestartStrategy::FixedDelay(FixedDelay {
                attempts: 3,
                delay: Duration::from_secs(10),
                ..FixedDelay::default()
            })
        );
    }

    #[test]
    fn fixed_delay_defaults_are_flinks() {
        let strategy = parse("[restart]\nstrategy = \"fixed_delay\"").unwrap();
        assert_eq!(
            strategy,
            RestartStrategy::FixedDelay(FixedDelay {
                attempts: 1,
                delay: Duration::from_secs(1),
                ..FixedDelay::default()
            })
        );
        // Only one key given: the other keeps its default.
        let strategy = parse("[restart]\nstrategy = \"fixed_delay\"\nattempts = 5").unwrap();
        assert_eq!(
            strategy,
            RestartStrategy::FixedDelay(FixedDelay {
                attempts: 5,
                delay: Duration::from_secs(1),
                ..FixedDelay::default()
            })
        );
    }

    #[test]
    fn none_parses() {
        assert_eq!(
            parse("[restart]\nstrategy = \"none\""),
            Ok(RestartStrategy::None)
        );
    }

    #[test]
    fn misspelled_key_is_rejected_naming_it() {
        for (text, key) in [
            (
                "[restart]\nstrategy = \"exponential_delay\"\ninital_backoff = \"1s\"",
                "inital_backoff",
            ),
            // A Flink spelling is not silently ignored either.
            (
                "[restart]\nstrategy = \"exponential_delay\"\nattempts-before-reset-backoff = 3",
                "attempts-before-reset-backoff",
            ),
            (
                "[restart]\nstrategy = \"fixed_delay\"\ndelays = \"1s\"",
                "delays",
            ),
            // `none` has no settings; a leftover one is a mistake worth reporting.
            ("[restart]\nstrategy = \"none\"\nattempts = 3", "attempts"),
            // A key of the other strategy.
            (
                "[restart]\nstrategy = \"fixed_delay\"\nmax_backoff = \"1m\"",
                "max_backoff",
            ),
        ] {
            let message = parse(text).expect_err(text);
            assert!(
                message.contains(&format!("unknown field `{key}`")),
                "{text}: {message}"
            );
        }
    }

    #[test]
    fn unknown_or_missing_strategy_is_rejected() {
        let message = parse("[restart]\nstrategy = \"exponential\"").unwrap_err();
        assert!(
            message.contains("unknown variant `exponential`"),
            "{message}"
        );
        assert!(message.contains("exponential_delay"), "{message}");
        // Flink's kebab-case spelling is not ours.
        assert!(parse("[restart]\nstrategy = \"fixed-delay\"").is_err());
        // The job spec fills in the default strategy (see `job::spec`); the type alone needs it.
        let message = parse("[restart]\nattempts = 3").unwrap_err();
        assert!(message.contains("missing field `strategy`"), "{message}");
    }

    #[test]
    fn identical_guest_failures_from_one_checkpoint_are_deterministic() {
        let mut restarts = Restarts::new(RestartStrategy::default_for(true));
        assert!(!restarts.is_deterministic(Some("trap on x"), Some(4)));
        assert!(!restarts.is_deterministic(Some("trap on x"), Some(4)));
        assert!(
            restarts.is_deterministic(Some("trap on x"), Some(4)),
            "the third identical failure"
        );
        let message = restarts.exhausted("trap on x").to_string();
        assert!(message.contains("3 times in a row"), "{message}");
        assert!(message.contains("identical_failures = 0"), "{message}");
        assert_eq!(fail_quickly(&mut restarts, 10), RestartDecision::Fail);

        // Progress (another checkpoint), another cause, or a failure outside guest code
        // starts the count over.
        let mut restarts = Restarts::new(RestartStrategy::default_for(true));
        for (cause, from) in [
            (Some("a"), Some(1)),
            (Some("a"), Some(1)),
            (Some("a"), Some(2)),
            (Some("a"), Some(2)),
            (Some("b"), Some(2)),
            (Some("b"), Some(2)),
            (None, Some(2)),
            (Some("b"), Some(2)),
            (Some("b"), Some(2)),
        ] {
            assert!(
                !restarts.is_deterministic(cause, from),
                "{cause:?} {from:?}"
            );
        }

        let mut restarts = Restarts::new(
            parse("[restart]\nstrategy = \"fixed_delay\"\nidentical_failures = 0").unwrap(),
        );
        for _ in 0..10 {
            assert!(
                !restarts.is_deterministic(Some("a"), None),
                "0 turns it off"
            );
        }
    }

    #[test]
    fn malformed_values_are_rejected() {
        let message = parse("[restart]\nstrategy = \"fixed_delay\"\ndelay = \"soon\"").unwrap_err();
        assert!(
            message.contains("soon") || message.contains("delay"),
            "{message}"
        );
        assert!(parse("[restart]\nstrategy = \"fixed_delay\"\nattempts = -1").is_err());
    }

    #[test]
    fn serialization_round_trips() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Spec {
            restart: RestartStrategy,
        }
        for restart in [
            RestartStrategy::None,
            RestartStrategy::FixedDelay(FixedDelay::default()),
            RestartStrategy::default_for(true),
            RestartStrategy::ExponentialDelay(ExponentialDelay {
                attempts: Some(4),
                ..ExponentialDelay::default()
            }),
        ] {
            let spec = Spec { restart };
            let text = toml::to_string(&spec).unwrap();
            assert!(text.contains("strategy = "), "{text}");
            assert_eq!(toml::from_str::<Spec>(&text).unwrap(), spec, "{text}");
        }
    }

    #[test]
    fn validate_accepts_the_defaults() {
        for strategy in [
            RestartStrategy::None,
            RestartStrategy::FixedDelay(FixedDelay::default()),
            RestartStrategy::FixedDelay(FixedDelay {
                attempts: 0,
                delay: Duration::ZERO,
                ..FixedDelay::default()
            }),
            RestartStrategy::default_for(true),
            // A multiplier of exactly 1 is a constant delay; jitter may span 0..=1.
            RestartStrategy::ExponentialDelay(ExponentialDelay {
                backoff_multiplier: 1.0,
                jitter_factor: 1.0,
                initial_backoff: Duration::from_secs(60),
                ..ExponentialDelay::default()
            }),
        ] {
            assert_eq!(strategy.validate(), Ok(()), "{strategy:?}");
        }
    }

    #[test]
    fn validate_names_the_bad_setting() {
        let d = ExponentialDelay::default;
        for (settings, setting) in [
            (
                ExponentialDelay {
                    initial_backoff: Duration::ZERO,
                    ..d()
                },
                "initial_backoff",
            ),
            (
                ExponentialDelay {
                    max_backoff: Duration::from_millis(500),
                    ..d()
                },
                "max_backoff = 500ms",
            ),
            (
                ExponentialDelay {
                    backoff_multiplier: 0.5,
                    ..d()
                },
                "backoff_multiplier = 0.5",
            ),
            (
                ExponentialDelay {
                    backoff_multiplier: f64::NAN,
                    ..d()
                },
                "backoff_multiplier",
            ),
            (
                ExponentialDelay {
                    backoff_multiplier: f64::INFINITY,
                    ..d()
                },
                "backoff_multiplier",
            ),
            (
                ExponentialDelay {
                    jitter_factor: 1.5,
                    ..d()
                },
                "jitter_factor = 1.5",
            ),
            (
                ExponentialDelay {
                    jitter_factor: -0.1,
                    ..d()
                },
                "jitter_factor = -0.1",
            ),
            (
                ExponentialDelay {
                    jitter_factor: f64::NAN,
                    ..d()
                },
                "jitter_factor",
            ),
            (
                ExponentialDelay {
                    reset_backoff_threshold: Duration::ZERO,
                    ..d()
                },
                "reset_backoff_threshold",
            ),
            (
                ExponentialDelay {
                    attempts: Some(0),
                    ..d()
                },
                "attempts = 0",
            ),
        ] {
            let message = RestartStrategy::ExponentialDelay(settings)
                .validate()
                .unwrap_err();
            assert!(message.starts_with("[restart] "), "{message}");
            assert!(message.contains(setting), "{setting}: {message}");
            // Every message says what to do about it.
            assert!(
                message.contains("remove") || message.contains("raise") || message.contains("set"),
                "{message}"
            );
        }
    }

    #[test]
    fn exponential_delays_grow_by_the_multiplier_up_to_the_max() {
        let mut restarts = Restarts::new(RestartStrategy::default_for(true));
        let mut expected = 1.0;
        // 1.5^k is exact in binary up to here, so the delays are exact.
        for attempt in 1..=10 {
            assert_eq!(
                fail_quickly(&mut restarts, attempt.into()),
                RestartDecision::Restart {
                    attempt,
                    delay: secs(expected),
                },
            );
            expected *= 1.5;
        }
        // 57.665 s, then capped at 60 s for good.
        let delay = restart_delay(fail_quickly(&mut restarts, 11));
        assert!(delay.abs_diff(secs(57.6650390625)) <= Duration::from_nanos(1));
        for t in 12..20 {
            assert_eq!(restart_delay(fail_quickly(&mut restarts, t)), secs(60.0));
        }
        assert_eq!(restarts.attempts(), 19);
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let strategy = RestartStrategy::default_for(true);
        // The first delay is 1 s; jitter 0.1 moves it within [0.9 s, 1.1 s].
        let first =
            |random| Restarts::new(strategy.clone()).on_failure(secs(0.0), secs(1.0), random);
        assert_eq!(restart_delay(first(0.0)), Duration::from_millis(900));
        let top = restart_delay(first(1.0 - f64::EPSILON));
        assert!(top <= Duration::from_millis(1100), "{top:?}");
        assert!(
            top > Duration::from_millis(1100) - Duration::from_micros(1),
            "{top:?}"
        );
        assert_eq!(restart_delay(first(0.5)), Duration::from_secs(1));
        // Out-of-range randomness is clamped rather than trusted.
        assert_eq!(restart_delay(first(-3.0)), Duration::from_millis(900));
        assert_eq!(restart_delay(first(7.0)), Duration::from_millis(1100));
        assert_eq!(restart_delay(first(f64::NAN)), Duration::from_secs(1));

        // At the cap, jitter only shortens: max_backoff is the longest delay there is.
        let mut restarts = Restarts::new(strategy);
        for t in 0..20 {
            fail_quickly(&mut restarts, t);
        }
        let capped = restart_delay(restarts.on_failure(secs(20.0), secs(21.0), 1.0 - f64::EPSILON));
        assert_eq!(capped, secs(60.0));
        let low = restart_delay(restarts.on_failure(secs(22.0), secs(23.0), 0.0));
        assert_eq!(low, secs(54.0));
    }

    #[test]
    fn a_long_run_resets_the_backoff_and_the_attempts() {
        let mut restarts = Restarts::new(RestartStrategy::ExponentialDelay(ExponentialDelay {
            attempts: Some(3),
            ..ExponentialDelay::default()
        }));
        for t in 0..3 {
            assert!(matches!(
                fail_quickly(&mut restarts, t),
                RestartDecision::Restart { .. }
            ));
        }
        // One second short of the threshold: no reset, and the attempts are used up...
        let mut probe = restarts.clone();
        assert_eq!(
            probe.on_failure(secs(10.0), secs(10.0 + 3599.0), 0.5),
            RestartDecision::Fail
        );
        // ...while a run of exactly the threshold starts over at 1 s and attempt 1.
        assert_eq!(
            restarts.on_failure(secs(10.0), secs(10.0 + 3600.0), 0.5),
            RestartDecision::Restart {
                attempt: 1,
                delay: secs(1.0),
            }
        );
        assert_eq!(
            fail_quickly(&mut restarts, 4000),
            RestartDecision::Restart {
                attempt: 2,
                delay: secs(1.5),
            }
        );
        // The total keeps counting across the reset.
        assert_eq!(restarts.attempts(), 5);
    }

    #[test]
    fn a_short_run_keeps_growing_the_backoff() {
        let mut restarts = Restarts::new(RestartStrategy::default_for(true));
        fail_quickly(&mut restarts, 0);
        // 59 minutes is below the 1 h threshold.
        assert_eq!(
            restarts.on_failure(secs(2.0), secs(2.0 + 59.0 * 60.0), 0.5),
            RestartDecision::Restart {
                attempt: 2,
                delay: secs(1.5),
            }
        );
    }

    #[test]
    fn exponential_attempts_exhausted_fails_for_good() {
        let mut restarts = Restarts::new(RestartStrategy::ExponentialDelay(ExponentialDelay {
            attempts: Some(2),
            ..ExponentialDelay::default()
        }));
        assert!(matches!(
            fail_quickly(&mut restarts, 0),
            RestartDecision::Restart { attempt: 1, .. }
        ));
        assert!(matches!(
            fail_quickly(&mut restarts, 5),
            RestartDecision::Restart { attempt: 2, .. }
        ));
        assert_eq!(fail_quickly(&mut restarts, 10), RestartDecision::Fail);
        // Failing is final, even after what would otherwise reset the backoff.
        assert_eq!(
            restarts.on_failure(secs(20.0), secs(100_000.0), 0.5),
            RestartDecision::Fail
        );
        assert_eq!(restarts.attempts(), 2);
    }

    #[test]
    fn unlimited_exponential_restarts_never_overflow() {
        let mut restarts = Restarts::new(RestartStrategy::default_for(true));
        for t in 0..5000 {
            let delay = restart_delay(restarts.on_failure(secs(t as f64), secs(t as f64), 0.99));
            assert!(delay <= secs(60.0));
        }
        assert_eq!(restarts.attempts(), 5000);
    }

    #[test]
    fn fixed_delay_restarts_attempts_times_then_fails() {
        let mut restarts = Restarts::new(RestartStrategy::FixedDelay(FixedDelay {
            attempts: 3,
            delay: Duration::from_secs(10),
            ..FixedDelay::default()
        }));
        for attempt in 1..=3 {
            assert_eq!(
                // Random and run length do not matter to a fixed delay.
                restarts.on_failure(secs(0.0), secs(1e6), 0.0),
                RestartDecision::Restart {
                    attempt,
                    delay: Duration::from_secs(10),
                }
            );
        }
        assert_eq!(fail_quickly(&mut restarts, 0), RestartDecision::Fail);
        assert_eq!(restarts.attempts(), 3);
    }

    #[test]
    fn fixed_delay_defaults_restart_once() {
        let mut restarts = Restarts::new(RestartStrategy::FixedDelay(FixedDelay::default()));
        assert_eq!(
            fail_quickly(&mut restarts, 0),
            RestartDecision::Restart {
                attempt: 1,
                delay: secs(1.0),
            }
        );
        assert_eq!(fail_quickly(&mut restarts, 2), RestartDecision::Fail);
    }

    #[test]
    fn none_fails_at_once() {
        let mut restarts = Restarts::new(RestartStrategy::None);
        assert_eq!(fail_quickly(&mut restarts, 0), RestartDecision::Fail);
        assert_eq!(restarts.attempts(), 0);
    }

    #[test]
    fn default_for_follows_checkpointing() {
        assert_eq!(
            RestartStrategy::default_for(true),
            RestartStrategy::ExponentialDelay(ExponentialDelay::default())
        );
        assert_eq!(RestartStrategy::default_for(false), RestartStrategy::None);
        assert_eq!(
            RestartStrategy::default_for(true).name(),
            "exponential_delay"
        );
    }

    #[test]
    fn exhausted_error_names_the_setting_and_keeps_the_cause() {
        let cause = std::io::Error::other("disk full");
        let mut restarts = Restarts::new(RestartStrategy::FixedDelay(FixedDelay::default()));
        fail_quickly(&mut restarts, 0);
        assert_eq!(fail_quickly(&mut restarts, 2), RestartDecision::Fail);
        let error = restarts.exhausted(cause);
        let message = error.to_string();
        assert!(
            message.contains("after 1 restart(s): disk full"),
            "{message}"
        );
        assert!(message.contains("attempts = 1"), "{message}");
        assert_eq!(error.cause.to_string(), "disk full");

        let message = Restarts::new(RestartStrategy::None)
            .exhausted("trap")
            .to_string();
        assert!(message.contains("strategy = \"none\""), "{message}");

        let message = Restarts::new(RestartStrategy::ExponentialDelay(ExponentialDelay {
            attempts: Some(7),
            ..ExponentialDelay::default()
        }))
        .exhausted("trap")
        .to_string();
        assert!(message.contains("attempts = 7"), "{message}");
        assert!(
            message.contains("reset_backoff_threshold = 3600s"),
            "{message}"
        );
    }
}
