//! How long to wait for a lock and how long to hold it.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(1);
/// The longest lease or wait limit accepted (one year); wait without limit with
/// [`Wait::Forever`] instead.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The shortest watchdog lease accepted: renewals go out every third of it.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);
/// The watchdog lease used when none is configured (Redisson's default).
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);

/// The clock-drift factor used when none is configured (RedLock's).
pub const DEFAULT_CLOCK_DRIFT: f64 = 0.01;
/// Taken off every lease on top of the drift factor: a server's expiry resolution.
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// How much of a lease the client keeps back for clocks that run at different rates
/// (see [`LockClientBuilder::clock_drift`](crate::LockClientBuilder::clock_drift)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ClockDrift {
    factor: f64,
}

impl Default for ClockDrift {
    fn default() -> Self {
        ClockDrift {
            factor: DEFAULT_CLOCK_DRIFT,
        }
    }
}

impl ClockDrift {
    pub(crate) fn new(factor: f64) -> Result<Self> {
        if !factor.is_finite() || !(0.0..=0.5).contains(&factor) {
            return Err(Error::invalid_argument(format!(
                "clock drift {factor} is not a fraction between 0 and 0.5"
            )));
        }
        Ok(ClockDrift { factor })
    }

    /// The margin for a lease of `ttl`: `factor × ttl + 2 ms`, at most half of it.
    pub(crate) fn margin(&self, ttl: Duration) -> Duration {
        (ttl.mul_f64(self.factor) + DRIFT_FLOOR).min(ttl / 2)
    }

    /// What a client counts on of a lease of `ttl` that the backend guarantees for
    /// `guaranteed`: that, less the margin.
    pub(crate) fn validity(&self, ttl: Duration, guaranteed: Duration) -> Duration {
        guaranteed.saturating_sub(self.margin(ttl))
    }
}

/// How long an acquire may wait for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Wait {
    /// Try once and fail with [`Error::Timeout`] if the lock is held.
    No,
    /// Wait up to this long, then fail with [`Error::Timeout`].
    For(Duration),
    /// Wait until the lock is granted.
    #[default]
    Forever,
}

/// How long a granted lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Lease {
    /// The client's watchdog keeps the lease alive until the guard is released: the
    /// backend lease is the client's watchdog lease, renewed every third of it.
    #[default]
    Watchdog,
    /// The lease ends this long after the acquire was sent, unless extended with
    /// [`LockGuard::extend`](crate::LockGuard::extend). It is never renewed.
    Fixed(Duration),
}

/// The options of one acquire: how long to wait and which lease to take.
///
/// The default waits without limit and keeps the lease alive with the watchdog
/// (Redisson's `lock()`); `try_once().lease(d)` is Redisson's `tryLock(0, d)`.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{AcquireOptions, Lease, Wait};
/// let opts = AcquireOptions::wait_for(Duration::from_secs(2)).lease(Duration::from_secs(10));
/// assert_eq!(opts.wait(), Wait::For(Duration::from_secs(2)));
/// assert_eq!(opts.lease_policy(), Lease::Fixed(Duration::from_secs(10)));
/// let same = AcquireOptions::default()
///     .with_wait(Wait::For(Duration::from_secs(2)))
///     .with_lease(Lease::Fixed(Duration::from_secs(10)));
/// assert_eq!(opts, same);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    wait: Wait,
    lease: Lease,
}

impl AcquireOptions {
    /// Try once, watchdog lease.
    pub fn try_once() -> Self {
        AcquireOptions {
            wait: Wait::No,
            lease: Lease::Watchdog,
        }
    }

    /// Wait up to `limit`, watchdog lease.
    pub fn wait_for(limit: Duration) -> Self {
        AcquireOptions {
            wait: Wait::For(limit),
            lease: Lease::Watchdog,
        }
    }

    /// Wait without limit, watchdog lease (the default).
    pub fn wait_forever() -> Self {
        AcquireOptions::default()
    }

    /// The same options with a fixed lease of `lease` instead of the watchdog.
    pub fn lease(self, lease: Duration) -> Self {
        self.with_lease(Lease::Fixed(lease))
    }

    /// The same options with the watchdog keeping the lease (the default).
    pub fn watchdog(self) -> Self {
        self.with_lease(Lease::Watchdog)
    }

    /// The same options with this wait.
    pub fn with_wait(self, wait: Wait) -> Self {
        AcquireOptions { wait, ..self }
    }

    /// The same options with this lease.
    pub fn with_lease(self, lease: Lease) -> Self {
        AcquireOptions { lease, ..self }
    }

    /// How long an acquire with these options waits.
    pub fn wait(&self) -> Wait {
        self.wait
    }

    /// Which lease an acquire with these options takes.
    pub fn lease_policy(&self) -> Lease {
        self.lease
    }

    /// Checks both durations and turns the wait into a deadline counted from `now`.
    pub(crate) fn validate(&self, now: Instant) -> Result<Deadline> {
        if let Lease::Fixed(lease) = self.lease {
            validate_lease(lease)?;
        }
        match self.wait {
            Wait::No => Ok(Deadline::at(now)),
            Wait::Forever => Ok(Deadline::never()),
            Wait::For(limit) if limit > MAX_DURATION => Err(Error::invalid_argument(format!(
                "wait limit {limit:?} is longer than the maximum {MAX_DURATION:?}; use Wait::Forever to wait without limit"
            ))),
            Wait::For(limit) => Ok(Deadline::at(now + limit)),
        }
    }
}

/// Checks a fixed lease: between [`MIN_LEASE`] and [`MAX_DURATION`].
pub(crate) fn validate_lease(lease: Duration) -> Result<()> {
    check_duration("lease", lease, MIN_LEASE, MAX_DURATION).map(drop)
}

/// Checks a setting's duration (a timeout, a lease) against `min..=max`, for backends
/// validating their options the way lock-core validates its own.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{backend::check_duration, MAX_DURATION};
/// let ms = Duration::from_millis(1);
/// assert!(check_duration("connect timeout", Duration::from_secs(2), ms, MAX_DURATION).is_ok());
/// let err = check_duration("connect timeout", Duration::ZERO, ms, MAX_DURATION).unwrap_err();
/// assert_eq!(err.to_string(), "invalid argument: connect timeout 0ns is shorter than the minimum 1ms");
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what`, the value and the bound it breaks.
pub fn check_duration(
    what: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration> {
    if value < min {
        return Err(Error::invalid_argument(format!(
            "{what} {value:?} is shorter than the minimum {min:?}"
        )));
    }
    if value > max {
        return Err(Error::invalid_argument(format!(
            "{what} {value:?} is longer than the maximum {max:?}"
        )));
    }
    Ok(value)
}

/// When a wait ends: at an instant, or never. Backends receive one with every acquire
/// request and must return by it.
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::Deadline;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let d = Deadline::after(Duration::from_millis(5));
/// assert!(!d.has_passed());
/// d.sleep().await;
/// assert!(d.has_passed());
/// assert_eq!(Deadline::never().remaining(), None);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// A deadline at `instant`.
    pub fn at(instant: Instant) -> Self {
        Deadline(Some(instant))
    }

    /// A deadline `after` from now.
    pub fn after(after: Duration) -> Self {
        Deadline(Instant::now().checked_add(after))
    }

    /// No deadline.
    pub fn never() -> Self {
        Deadline(None)
    }

    /// The instant, if there is one.
    pub fn instant(&self) -> Option<Instant> {
        self.0
    }

    /// Whether the deadline has passed (never, for [`Deadline::never`]).
    pub fn has_passed(&self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }

    /// The time left (zero once passed); `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.0
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// The earlier of this deadline and `instant`.
    pub fn min(self, instant: Instant) -> Instant {
        match self.0 {
            Some(at) => at.min(instant),
            None => instant,
        }
    }

    /// Resolves when the deadline passes; never resolves without one.
    ///
    /// # Cancel safety
    /// Cancel safe: it only sleeps.
    pub async fn sleep(&self) {
        match self.0 {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_margin_follows_the_redlock_rule() {
        let drift = ClockDrift::default();
        assert_eq!(
            drift.margin(Duration::from_secs(30)),
            Duration::from_millis(302)
        );
        assert_eq!(
            drift.validity(Duration::from_secs(3), Duration::from_secs(3)),
            Duration::from_millis(2968)
        );
        // Never more than half of a tiny lease.
        assert_eq!(
            drift.margin(Duration::from_millis(2)),
            Duration::from_millis(1)
        );
        for bad in [-0.1, 0.6, f64::NAN, f64::INFINITY] {
            assert!(ClockDrift::new(bad).is_err(), "{bad}");
        }
        assert_eq!(
            ClockDrift::new(0.0).unwrap().margin(Duration::from_secs(1)),
            DRIFT_FLOOR
        );
    }

    #[test]
    fn durations_are_checked() {
        let now = Instant::now();
        let bad = [
            AcquireOptions::try_once().lease(Duration::ZERO),
            AcquireOptions::try_once().lease(Duration::from_micros(999)),
            AcquireOptions::try_once().lease(Duration::MAX),
            AcquireOptions::wait_for(Duration::MAX),
        ];
        for opts in bad {
            let err = opts.validate(now).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{opts:?}");
        }
        assert_eq!(
            AcquireOptions::try_once().validate(now).unwrap(),
            Deadline::at(now)
        );
        assert_eq!(
            AcquireOptions::wait_forever().validate(now).unwrap(),
            Deadline::never()
        );
    }
}
