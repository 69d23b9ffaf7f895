//! The state of one granted lease as the client sees it: its local expiry and whether
//! it was lost, with a way to wait for the loss.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::telemetry::LeaseIdentity;

/// Why a lease stopped protecting its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// The lease ran out before it was renewed or extended (a fixed lease's normal end).
    Expired,
    /// The backend no longer has this lease: it was deleted, force-unlocked, taken over
    /// after expiry, or the server lost its data.
    Revoked,
    /// The backend session or connection that carried the lease ended (ZooKeeper
    /// session expiry, etcd lease revoked, SQL connection closed).
    SessionLost,
    /// Renewals kept failing until the lease ran out; the last error is kept.
    RenewalFailed {
        /// The last renewal error, as text.
        last_error: String,
    },
    /// The guard was released: the lease ended because its owner let go.
    Released,
}

impl fmt::Display for LeaseLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseLoss::Expired => f.write_str("the lease expired"),
            LeaseLoss::Revoked => f.write_str("the backend no longer has the lease"),
            LeaseLoss::SessionLost => f.write_str("the backend session ended"),
            LeaseLoss::RenewalFailed { last_error } => {
                write!(f, "renewal failed until the lease ran out: {last_error}")
            }
            LeaseLoss::Released => f.write_str("the lease was released"),
        }
    }
}

impl std::error::Error for LeaseLoss {}

/// A moment on both of the clocks a lease is counted on: tokio's (which tests can
/// pause) and the time spent suspended (see [`crate::clock`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp {
    pub(crate) at: Instant,
    suspended: Duration,
}

impl Stamp {
    pub(crate) fn now() -> Self {
        Stamp {
            at: Instant::now(),
            suspended: crate::clock::suspended(),
        }
    }
}

#[derive(Clone, Debug)]
struct Status {
    ended: Option<LeaseLoss>,
    /// Its release is on its way: the backend may have let it go already, so nobody
    /// may count on it, though how it ended is only known from the reply.
    letting_go: bool,
    /// Still being acquired: live whatever the clock says until [`LeaseState::granted`]
    /// counts its expiry from the attempt that won it. A backend may act on its
    /// notifier's liveness as it hands a grant over (etcd passes the next owner of the
    /// client its turn on a key whose holder ended), so a wait longer than the lease
    /// must not make a grant look ended before it is counted.
    pending: bool,
    /// The local expiry on tokio's clock, as of `mark` (unused while pending).
    expires_at: Instant,
    /// The suspend reading when `expires_at` was set (while pending: when the state
    /// was made, before the acquire's first attempt): a suspend since then shortens
    /// what is left, since tokio's clock did not count it.
    mark: Duration,
}

impl Status {
    /// Time spent suspended since `mark`.
    fn slept(&self) -> Duration {
        crate::clock::suspended().saturating_sub(self.mark)
    }

    /// The expiry as tokio's clock now names it: earlier by the time spent suspended
    /// since it was set.
    fn effective_expiry(&self) -> Instant {
        self.expires_at
            .checked_sub(self.slept())
            .unwrap_or(self.expires_at)
    }

    /// Whether its local expiry has passed by `now` (never while pending).
    fn expired(&self, now: Instant) -> bool {
        !self.pending && now >= self.effective_expiry()
    }
}

/// Shared by a lease's guards, the watchdog and the backend's [`LossNotifier`].
#[derive(Debug)]
pub(crate) struct LeaseState {
    shared: Arc<Shared>,
    /// Who the lease is, for the metrics, events and logs of its end (none in tests of
    /// the state alone).
    identity: Option<Arc<LeaseIdentity>>,
}

/// The status and its waiters, which outlive the [`LeaseState`]: a waiter still reads
/// how the lease ended once every owner is gone.
///
/// A mutex and a `Notify`: every grant and release changes the status, and a change
/// costs one lock and one wake-up call.
#[derive(Debug)]
struct Shared {
    status: Mutex<Status>,
    /// Woken at each change of `status`, and when the [`LeaseState`] is dropped.
    changed: Notify,
    /// Set when the [`LeaseState`] is dropped: nothing can renew the lease any more.
    orphaned: AtomicBool,
}

impl Shared {
    fn status(&self) -> MutexGuard<'_, Status> {
        // Each update leaves the status whole before it can panic.
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How often a waiter on [`LeaseState::ended_future`] looks again: after a suspend,
/// tokio's timers fire late by the time slept, so the future re-reads the suspend clock
/// at least this often.
const SUSPEND_RECHECK: Duration = Duration::from_secs(1);

impl LeaseState {
    /// A live lease that expires at `expires_at` unless renewed.
    #[cfg(test)]
    pub(crate) fn new(expires_at: Instant) -> Arc<Self> {
        Self::build(false, expires_at, None)
    }

    /// The lease of `identity`, being acquired: live, with no expiry, until
    /// [`granted`](Self::granted) (or dropped, if the acquire is).
    pub(crate) fn pending(identity: Arc<LeaseIdentity>) -> Arc<Self> {
        Self::build(true, Instant::now(), Some(identity))
    }

    #[cfg(test)]
    pub(crate) fn pending_for_test() -> Arc<Self> {
        Self::build(true, Instant::now(), None)
    }

    fn build(
        pending: bool,
        expires_at: Instant,
        identity: Option<Arc<LeaseIdentity>>,
    ) -> Arc<Self> {
        Arc::new(LeaseState {
            shared: Arc::new(Shared {
                status: Mutex::new(Status {
                    ended: None,
                    letting_go: false,
                    pending,
                    expires_at,
                    mark: crate::clock::suspended(),
                }),
                changed: Notify::new(),
                orphaned: AtomicBool::new(false),
            }),
            identity,
        })
    }

    fn status(&self) -> MutexGuard<'_, Status> {
        self.shared.status()
    }

    /// Applies `update`, and wakes the waiters if it says it changed the status.
    fn update(&self, update: impl FnOnce(&mut Status) -> bool) -> bool {
        let changed = update(&mut self.status());
        if changed {
            self.shared.changed.notify_waiters();
        }
        changed
    }

    /// Who the lease is.
    pub(crate) fn identity(&self) -> Option<&Arc<LeaseIdentity>> {
        self.identity.as_ref()
    }

    /// Live: not ended and not past its local expiry. A lease being released is still
    /// live here, so that the release can tell a lease lost before it from one it let
    /// go; what a guard reports is [`counts`](Self::counts).
    pub(crate) fn is_held(&self) -> bool {
        self.ended().is_none()
    }

    /// Whether its holder may count on it: live, and no release sent.
    pub(crate) fn counts(&self) -> bool {
        // Read apart: the guard of a temporary lives to the end of its expression, and
        // `is_held` takes the lock again.
        let letting_go = self.status().letting_go;
        !letting_go && self.is_held()
    }

    /// Its release is about to be sent: from now on nobody counts on it.
    pub(crate) fn letting_go(&self) {
        self.update(|status| {
            let changed = !status.letting_go;
            status.letting_go = true;
            changed
        });
    }

    /// The local expiry, as tokio's clock names it now.
    pub(crate) fn expires_at(&self) -> Instant {
        self.status().effective_expiry()
    }

    /// Why the lease ended, counting a passed expiry; `None` while held.
    pub(crate) fn ended(&self) -> Option<LeaseLoss> {
        let status = self.status();
        match &status.ended {
            Some(loss) => Some(loss.clone()),
            None if status.expired(Instant::now()) => Some(LeaseLoss::Expired),
            None => None,
        }
    }

    /// Time spent suspended since the lease's clock was last set (while pending: since
    /// the acquire began).
    pub(crate) fn slept(&self) -> Duration {
        self.status().slept()
    }

    /// The attempt that won the lease was sent at `started_at`: it runs until
    /// `started_at + validity`, however long the wait before that attempt was. A
    /// suspend is counted from the pending state's mark, taken before the first attempt
    /// was sent, so that one during the winning round trip counts. One during the wait
    /// before that attempt then counts too (the two cannot be told apart here), which
    /// can only end the lease early.
    pub(crate) fn granted(&self, started_at: Instant, validity: Duration) {
        let mark = self.status().mark;
        self.count_from(started_at, mark, validity);
    }

    /// A renewal sent at `sent`, before any guard was handed over, confirmed a grant
    /// answered too late to count from its own send (see `late_grant`): the lease runs
    /// until `sent + validity`.
    pub(crate) fn confirmed(&self, sent: Stamp, validity: Duration) {
        self.count_from(sent.at, sent.suspended, validity);
    }

    /// Ends the pending state: the lease runs until `at + validity`, counting suspends
    /// from `mark` on.
    fn count_from(&self, at: Instant, mark: Duration, validity: Duration) {
        let expires_at = at + validity;
        self.update(|status| {
            if status.ended.is_some() {
                return false;
            }
            status.pending = false;
            status.expires_at = expires_at;
            status.mark = mark;
            true
        });
    }

    /// A renewal sent at `sent` succeeded: the lease now runs until `sent + validity`.
    /// Counting from the send, not the reply, keeps the local view conservative.
    ///
    /// Refused (returns false) once the lease has ended or its local expiry has passed:
    /// by then the guard may have reported the loss, and the lock may be someone
    /// else's, so a late reply never brings the lease back. Callers send one renewal
    /// of a lease at a time ([`LeaseEntry::renewal`](crate::watchdog::LeaseEntry)), so
    /// replies are applied in the order the server saw the requests.
    pub(crate) fn renewed(&self, sent: Stamp, validity: Duration) -> bool {
        self.update(|status| {
            // A pending lease is not granted yet: nothing to renew.
            if status.ended.is_some() || status.pending || status.expired(Instant::now()) {
                return false;
            }
            status.expires_at = sent.at + validity;
            status.mark = sent.suspended;
            true
        })
    }

    /// Marks the lease ended; the first reason wins. A loss the backend reports
    /// (`Revoked`, `SessionLost`) once the local expiry has passed is recorded as the
    /// expiry, which came first (nobody had looked yet). Returns whether this call ended
    /// it (and then tells the metrics, the events and the log).
    pub(crate) fn end(&self, mut reason: LeaseLoss) -> bool {
        let ended = self.update(|status| {
            if status.ended.is_some() {
                return false;
            }
            let reported = matches!(reason, LeaseLoss::Revoked | LeaseLoss::SessionLost);
            if reported && status.expired(Instant::now()) {
                reason = LeaseLoss::Expired;
            }
            status.ended = Some(reason.clone());
            true
        });
        if let (true, Some(identity)) = (ended, &self.identity) {
            identity.ended(&reason);
        }
        ended
    }

    /// Resolves with the reason once the lease ends or its local expiry passes. It
    /// does not keep the lease's owners alive: once every one is gone and the lease
    /// had not ended, nothing can renew it, and it resolves as expired.
    pub(crate) fn ended_future(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            loop {
                let changed = shared.changed.notified();
                tokio::pin!(changed);
                // Registered before the status is read: a change after the read wakes
                // this wait rather than passing it by.
                changed.as_mut().enable();
                let (ended, letting_go, expires_at) = {
                    let status = shared.status();
                    (
                        status.ended.clone(),
                        status.letting_go,
                        (!status.pending).then(|| status.effective_expiry()),
                    )
                };
                if let Some(loss) = ended {
                    return loss;
                }
                // Its release is on its way: it stopped protecting anyone when that was
                // sent, whatever the reply says later.
                if letting_go {
                    return LeaseLoss::Released;
                }
                let now = Instant::now();
                if expires_at.is_some_and(|at| now >= at) {
                    return LeaseLoss::Expired;
                }
                if shared.orphaned.load(Ordering::Acquire) {
                    return LeaseLoss::Expired;
                }
                let look_again =
                    expires_at.map_or(now + SUSPEND_RECHECK, |at| at.min(now + SUSPEND_RECHECK));
                tokio::select! {
                    () = &mut changed => {}
                    () = tokio::time::sleep_until(look_again) => {}
                }
            }
        }
    }
}

impl Drop for LeaseState {
    fn drop(&mut self) {
        self.shared.orphaned.store(true, Ordering::Release);
        self.shared.changed.notify_waiters();
    }
}

/// Lets a backend report that a lease it granted is gone, for backends that learn it
/// from a session or stream rather than from a renewal (ZooKeeper session expiry, an
/// etcd keep-alive stream ending). Cloning is cheap; it does not keep the lease alive.
///
/// ```
/// # use lock_core::{backend::LossNotifier, LeaseLoss};
/// fn on_session_expired(notifiers: &[LossNotifier]) {
///     for n in notifiers {
///         n.notify(LeaseLoss::SessionLost);
///     }
/// }
/// ```
#[derive(Clone, Debug)]
pub struct LossNotifier(Weak<LeaseState>);

impl LossNotifier {
    pub(crate) fn new(state: &Arc<LeaseState>) -> Self {
        LossNotifier(Arc::downgrade(state))
    }

    /// Marks the lease lost and wakes everyone waiting on
    /// [`LockGuard::lost`](crate::LockGuard::lost). A no-op once the lease has ended.
    pub fn notify(&self, reason: LeaseLoss) {
        if let Some(state) = self.0.upgrade() {
            // The lease's identity logs, counts and reports the loss.
            state.end(reason);
        }
    }

    /// Whether the lease this notifier belongs to is still live (not ended, not
    /// released); backends drop notifiers for which this is false.
    pub fn is_live(&self) -> bool {
        self.0
            .upgrade()
            .is_some_and(|state| state.ended().is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expiry_and_loss_resolve_the_future() {
        let state = LeaseState::new(Instant::now() + Duration::from_secs(1));
        assert!(state.is_held());
        let fut = state.ended_future();
        assert!(state.renewed(Stamp::now(), Duration::from_secs(5)));
        assert_eq!(fut.await, LeaseLoss::Expired);
        assert!(!state.is_held());
        assert!(
            !state.renewed(Stamp::now(), Duration::from_secs(5)),
            "an expired lease is never renewed"
        );
        assert!(!state.is_held());

        let state = LeaseState::new(Instant::now() + Duration::from_secs(60));
        let fut = tokio::spawn(state.ended_future());
        LossNotifier::new(&state).notify(LeaseLoss::Revoked);
        assert_eq!(fut.await.unwrap(), LeaseLoss::Revoked);
        assert!(!state.end(LeaseLoss::Released), "first reason wins");
    }

    /// A loss reported after the local expiry passed, before anyone looked (the timer
    /// not run yet on a loaded machine): the lease had already run out, and says so.
    #[tokio::test(start_paused = true)]
    async fn a_loss_reported_after_the_expiry_passed_is_the_expiry() {
        let state = LeaseState::new(Instant::now() + Duration::from_secs(1));
        let fut = state.ended_future();
        tokio::time::advance(Duration::from_secs(2)).await;
        LossNotifier::new(&state).notify(LeaseLoss::SessionLost);
        assert_eq!(state.ended(), Some(LeaseLoss::Expired));
        assert_eq!(fut.await, LeaseLoss::Expired);

        // The watchdog's own verdict on a lease it could not renew keeps its error.
        let state = LeaseState::new(Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(2)).await;
        let failed = LeaseLoss::RenewalFailed {
            last_error: "refused".into(),
        };
        state.end(failed.clone());
        assert_eq!(state.ended(), Some(failed));

        // Before the expiry the reported loss stands.
        let state = LeaseState::new(Instant::now() + Duration::from_secs(1));
        LossNotifier::new(&state).notify(LeaseLoss::SessionLost);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(state.ended(), Some(LeaseLoss::SessionLost));
    }

    /// A lease being acquired is live however long the wait, and is counted from the
    /// attempt that won it once granted.
    #[tokio::test(start_paused = true)]
    async fn a_pending_lease_is_live_until_granted_then_counted_from_the_grant() {
        let state = LeaseState::pending_for_test();
        let notifier = LossNotifier::new(&state);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(notifier.is_live() && state.is_held());
        assert!(
            !state.renewed(Stamp::now(), Duration::from_secs(5)),
            "a lease not granted yet is never renewed"
        );
        let won_at = Instant::now() - Duration::from_secs(2);
        state.granted(won_at, Duration::from_secs(3));
        // Two clock reads make each suspend reading a few nanoseconds apart (more when
        // preempted between them), which only ever ends a lease earlier.
        let expiry = state.expires_at();
        let counted = won_at + Duration::from_secs(3);
        assert!(
            expiry <= counted && expiry + Duration::from_millis(200) >= counted,
            "{:?} before the counted expiry",
            counted.saturating_duration_since(expiry)
        );
        assert_eq!(
            state.ended_future().await,
            LeaseLoss::Expired,
            "runs out 3 s after the winning attempt"
        );
        let ran_out = Instant::now() - won_at;
        assert!(
            ran_out >= Duration::from_millis(2_800) && ran_out < Duration::from_millis(3_010),
            "{ran_out:?}"
        );

        let state = LeaseState::pending_for_test();
        let fut = tokio::spawn(state.ended_future());
        tokio::task::yield_now().await;
        assert!(!fut.is_finished());
        LossNotifier::new(&state).notify(LeaseLoss::SessionLost);
        assert_eq!(fut.await.unwrap(), LeaseLoss::SessionLost);
    }

    /// A machine that sleeps longer than the lease: tokio's clock stood still, the
    /// server's did not, so the lease must count as run out.
    #[test]
    fn a_suspend_longer_than_the_lease_ends_it() {
        let state = LeaseState::new(Instant::now() + Duration::from_secs(30));
        assert!(state.is_held());
        crate::clock::simulate_suspend(Duration::from_secs(60));
        assert!(
            !state.is_held(),
            "held after a 60 s suspend of a 30 s lease"
        );
        assert_eq!(state.ended(), Some(LeaseLoss::Expired));
    }
}
