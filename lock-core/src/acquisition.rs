//! One acquisition: a granted lease, the guards that share it (the first, and those
//! made by re-entry), and how it is given back.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{LockBackend, LockKind, Renewal};
use crate::cleanups::PendingCleanup;
use crate::error::{Error, Result};
use crate::guard::{HoldOps, LockGuard};
use crate::handle::Handle;
use crate::id::LockId;
use crate::latch::Latch;
use crate::lease::{LeaseLoss, Stamp};
use crate::options::{validate_lease, AcquireOptions, Lease};
use crate::watchdog::LeaseEntry;

/// How long a release that failed with a retryable error is retried in the background.
/// Longer than any lease a session-based backend keeps alive without its server.
const RELEASE_RETRY_LIMIT: Duration = Duration::from_secs(300);

/// One granted lease and its guards.
#[derive(Debug)]
pub(crate) struct Acquisition<B: LockBackend> {
    handle: Arc<Handle<B>>,
    lease: Arc<LeaseEntry<B>>,
    /// The lease asked for: a downgrade takes the read side with the same kind.
    asked: Lease,
    /// Guards not yet released or dropped. Zero once the acquisition was given back
    /// (its last guard went, or a shutdown released it): guards left then are stale.
    holds: Mutex<u32>,
    /// A write acquisition's downgrades, one at a time, and the read acquisition the
    /// last one made.
    read_side: tokio::sync::Mutex<Weak<Acquisition<B>>>,
    /// Turns true once a release of this acquisition was answered, or can no longer
    /// be sent: a downgrade waits for it on the read side an earlier one made.
    release_answered: Latch,
}

/// What giving up one hold did.
enum GiveUp {
    /// Other guards of the acquisition remain.
    Remaining,
    /// That was the last hold: the lease must be released on the backend. Counted as
    /// a clean-up from before the lease left the client's records until the release
    /// is answered (or counts itself), so that a shutdown that no longer finds it
    /// there still waits for it.
    Last(PendingCleanup),
    /// The acquisition was already given back (by a shutdown).
    AlreadyGone,
}

impl<B: LockBackend> Acquisition<B> {
    pub(crate) fn new(
        handle: Arc<Handle<B>>,
        lease: Arc<LeaseEntry<B>>,
        asked: Lease,
    ) -> Arc<Self> {
        Arc::new(Acquisition {
            handle,
            lease,
            asked,
            holds: Mutex::new(1),
            read_side: tokio::sync::Mutex::new(Weak::new()),
            release_answered: Latch::default(),
        })
    }

    pub(crate) fn lease(&self) -> &LeaseEntry<B> {
        &self.lease
    }

    pub(crate) fn kind(&self) -> LockKind {
        self.lease.held.kind
    }

    fn holds(&self) -> MutexGuard<'_, u32> {
        // Single increments and assignments: a panic cannot leave it half done.
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Guards on this acquisition, if its lease is live (0 otherwise).
    pub(crate) fn live_holds(&self) -> u32 {
        if self.lease.state.is_held() {
            *self.holds()
        } else {
            0
        }
    }

    /// A guard on this acquisition (the caller has counted its hold).
    pub(crate) fn guard(self: &Arc<Self>) -> LockGuard {
        let held = &self.lease.held;
        LockGuard::new(
            held.key.name().clone(),
            held.kind,
            held.fence,
            self.lease.state.clone(),
            Box::new(GuardHold {
                acquisition: self.clone(),
            }),
        )
    }

    fn name(&self) -> String {
        self.lease.held.key.name().to_string()
    }

    fn lease_lost(&self) -> Error {
        Error::LeaseLost { name: self.name() }
    }

    /// Another guard on this live acquisition, with no round trip.
    fn reenter(self: &Arc<Self>) -> Result<LockGuard> {
        let mut holds = self.holds();
        if *holds == 0 || !self.lease.state.is_held() {
            return Err(self.lease_lost());
        }
        *holds += 1;
        drop(holds);
        tracing::trace!(key = %self.lease.held.key, "lock re-entered");
        Ok(self.guard())
    }

    fn give_up(&self) -> GiveUp {
        let mut holds = self.holds();
        match *holds {
            0 => GiveUp::AlreadyGone,
            1 => {
                *holds = 0;
                drop(holds);
                let under_way = self.handle.client().cleanups.begin();
                self.stop();
                GiveUp::Last(under_way)
            }
            _ => {
                *holds -= 1;
                GiveUp::Remaining
            }
        }
    }

    /// Stops renewing and tracking the lease: it is about to be released.
    fn stop(&self) {
        self.lease.state.letting_go();
        let client = self.handle.client();
        client.watchdog.unwatch(&self.lease);
        client.untrack(&self.lease);
        self.handle.forget(self);
    }

    /// Gives up one guard's hold; the last one releases the lease at the backend.
    async fn release(self: &Arc<Self>) -> Result<()> {
        match self.give_up() {
            GiveUp::Remaining if self.lease.state.is_held() => Ok(()),
            GiveUp::Remaining | GiveUp::AlreadyGone => Err(self.lease_lost()),
            GiveUp::Last(_under_way) => self.give_back().await,
        }
    }

    fn release_on_drop(self: &Arc<Self>) {
        let GiveUp::Last(_under_way) = self.give_up() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.lease.held.key, "guard dropped outside a runtime; the lease will expire");
            self.release_answered.open();
            return;
        };
        let acquisition = AnsweredWhenDropped(self.clone());
        let cleanups = self.handle.client().cleanups.clone();
        cleanups.spawn_on(&runtime, async move {
            let _ = acquisition.0.give_back().await;
        });
    }

    /// Gives back the lease whatever the hold count, for
    /// [`LockClient::shutdown`](crate::LockClient::shutdown): the guards left on it turn
    /// stale. One already given back is left alone, and one lost before is only cleaned
    /// up at the backend, not reported.
    pub(crate) async fn release_for_shutdown(self: &Arc<Self>) -> Result<()> {
        {
            let mut holds = self.holds();
            if *holds == 0 {
                return Ok(());
            }
            *holds = 0;
        }
        self.stop();
        let lost_before = !self.lease.state.is_held();
        let released = self.give_back().await;
        if lost_before {
            return Ok(());
        }
        released
    }

    /// Releases the lease at the backend and says what that means for the caller: the
    /// one place a release's outcome is read.
    async fn give_back(self: &Arc<Self>) -> Result<()> {
        self.send_release(Attempt::First).await
    }

    /// Sends the release; a resent one may find its first attempt went through.
    async fn send_release(self: &Arc<Self>, attempt: Attempt) -> Result<()> {
        let held = &self.lease.held;
        // A lease already lost here (expired, revoked, its session gone) is reported
        // as lost whatever the backend answers: the caller holds nothing to retry for.
        let lost_before = !self.lease.state.is_held();
        let span = tracing::debug_span!(
            "lock.release",
            namespace = held.key.namespace().as_str(),
            name = %held.key.name(),
            backend = self.handle.backend().name(),
            kind = crate::telemetry::kind_label(held.kind),
            owner = %held.owner,
            token = held.fence,
        );
        // If the caller drops this future before the backend answered, the release is
        // seen through in the background rather than left to the lease's end.
        let mut unfinished = Unfinished(Some(self.clone()));
        let result = self.handle.backend().release(held).instrument(span).await;
        unfinished.0 = None;
        self.release_answered.open();
        match self.outcome(result, lost_before, attempt) {
            Outcome::Done(result) => result,
            Outcome::Retry(err) => {
                self.retry_in_background();
                Err(err)
            }
        }
    }

    fn outcome(&self, result: Result<()>, lost_before: bool, attempt: Attempt) -> Outcome {
        if lost_before {
            // Ran out here without anyone noticing: count it as the loss it was.
            self.lease.state.end(LeaseLoss::Expired);
        }
        let outcome = self.read_outcome(result, lost_before, attempt);
        if let (Outcome::Retry(err) | Outcome::Done(Err(err)), Some(identity)) =
            (&outcome, self.lease.state.identity())
        {
            if !matches!(err, Error::LeaseLost { .. }) {
                identity.release_failed(err);
            }
        }
        outcome
    }

    fn read_outcome(&self, result: Result<()>, lost_before: bool, attempt: Attempt) -> Outcome {
        let (state, key, fence) = (
            &self.lease.state,
            &self.lease.held.key,
            self.lease.held.fence,
        );
        match result {
            Ok(()) if lost_before => {
                // The backend still had it (its lease outlasts ours by a margin), but
                // this guard had reported it gone: the holder may not have been alone.
                tracing::debug!(%key, fence, "released a lease that had run out here");
                Outcome::Done(Err(self.lease_lost()))
            }
            Ok(()) => {
                state.end(LeaseLoss::Released);
                tracing::debug!(%key, fence, "lock released");
                Outcome::Done(Ok(()))
            }
            Err(Error::NotOwner { .. }) if attempt == Attempt::Again => {
                // Most likely the first attempt went through and only its reply was
                // lost; either way its holder had let go of it.
                state.end(LeaseLoss::Released);
                tracing::debug!(%key, fence, "a resent release found the lease gone: released");
                Outcome::Done(Ok(()))
            }
            Err(Error::NotOwner { .. }) => {
                // The lease's identity reports the loss, if this is where it was found.
                state.end(LeaseLoss::Revoked);
                tracing::debug!(%key, fence, "release found the lease already lost");
                Outcome::Done(Err(self.lease_lost()))
            }
            Err(err) if lost_before || !state.is_held() => {
                tracing::debug!(%key, error = %err, "release of a lost lease failed");
                Outcome::Done(Err(self.lease_lost()))
            }
            Err(err) if err.is_retryable() => {
                tracing::debug!(%key, error = %err, "release failed; retrying it in the background");
                Outcome::Retry(err)
            }
            Err(err) => {
                tracing::debug!(%key, error = %err, "release failed; the lease will expire");
                Outcome::Done(Err(err))
            }
        }
    }

    /// Sends the release again in the background, for a release future dropped before
    /// the backend answered.
    fn finish_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.release_answered.open();
            return;
        };
        let acquisition = AnsweredWhenDropped(self.clone());
        let cleanups = self.handle.client().cleanups.clone();
        cleanups.spawn_on(&runtime, async move {
            let _ = acquisition.0.send_release(Attempt::Again).await;
        });
    }

    /// Until when a release is worth retrying: while the server may still hold the
    /// lease. A lease that expires at the server (every backend with fixed leases) is
    /// gone by its local expiry plus the drift margin, whatever we do; a session's
    /// (ZooKeeper) lives as long as the session, so it is retried for
    /// [`RELEASE_RETRY_LIMIT`]. Backends that keep a lease on a session they renew
    /// themselves (etcd's watchdog keys) see their own failed releases through.
    fn retry_until(&self) -> Instant {
        let client = self.handle.client();
        if !self.handle.backend().capabilities().fixed_lease {
            return Instant::now() + RELEASE_RETRY_LIMIT;
        }
        let ttl = match self.asked {
            Lease::Watchdog => client.watchdog_lease,
            Lease::Fixed(ttl) => ttl,
        };
        // A second for the request's way to the server, which counts from receipt.
        self.lease.state.expires_at() + client.drift_margin(ttl) + Duration::from_secs(1)
    }

    /// Keeps releasing the lease after a release failed with a retryable error, with
    /// backoff, until the backend lets go, says the lease is gone, or the server can no
    /// longer hold it ([`retry_until`](Self::retry_until)). Without this a lease whose
    /// life is a session (ZooKeeper) stays held as long as the session does. Safe to
    /// repeat: a release acts only on this acquisition (key, owner and fence), never on
    /// a newer one.
    fn retry_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.lease.held.key, "no runtime to retry the release on; the lease will expire");
            return;
        };
        let acquisition = self.clone();
        let cleanups = self.handle.client().cleanups.clone();
        cleanups.spawn_on(&runtime, async move {
            let (held, state) = (&acquisition.lease.held, &acquisition.lease.state);
            let give_up = acquisition.retry_until();
            let mut delay = Duration::from_millis(50);
            loop {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                match acquisition.handle.backend().release(held).await {
                    Ok(()) => {
                        state.end(LeaseLoss::Released);
                        tracing::debug!(key = %held.key, fence = held.fence, "lock released on a retry");
                        return;
                    }
                    Err(Error::NotOwner { .. }) => {
                        // The failed attempt before may have gone through: see
                        // `read_outcome`.
                        state.end(LeaseLoss::Released);
                        tracing::debug!(key = %held.key, fence = held.fence, "a release retry found the lease gone: released");
                        return;
                    }
                    Err(err) if err.is_retryable() && Instant::now() < give_up => {
                        tracing::debug!(key = %held.key, error = %err, "release retry failed");
                    }
                    Err(err) => {
                        if let Some(identity) = state.identity() {
                            identity.release_abandoned(&err);
                        }
                        return;
                    }
                }
            }
        });
    }

    async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_lease(ttl)?;
        let handle = &self.handle;
        if !handle.backend().capabilities().fixed_lease {
            return Err(Error::Unsupported {
                backend: handle.backend().name(),
                operation: "extending a lease",
            });
        }
        let client = handle.client();
        // Stop the watchdog first, or its next renewal would override the new expiry,
        // then wait for a renewal already in flight to be applied before sending ours.
        let was_watched = client.watchdog.unwatch(&self.lease);
        let _renewal = self.lease.renewal.lock().await;
        if !self.lease.state.counts() {
            return Err(self.lease_lost());
        }
        let sent = Stamp::now();
        let span = tracing::debug_span!("lock.extend", key = %self.lease.held.key, fence = self.lease.held.fence, ?ttl);
        let renewal = handle
            .backend()
            .renew(&[&self.lease.held], ttl)
            .instrument(span)
            .await;
        // Unknown, as a failed call is.
        let renewal = renewal.and_then(|renewed| match renewed.first() {
            Some(Renewal::Unanswered) => Err(Error::unavailable(
                handle.backend().name(),
                "the server that keeps the lease did not answer",
            )),
            _ => Ok(renewed),
        });
        let renewed = match renewal {
            Ok(renewed) => renewed,
            Err(err) => {
                // Nothing is known to have changed: a lease the watchdog kept stays kept,
                // unless its release was sent meanwhile (checked under the holds' lock,
                // which the last give-up takes before it stops the watchdog).
                let holds = self.holds();
                if was_watched && *holds > 0 && self.lease.state.counts() {
                    client.watchdog.watch(self.lease.clone());
                }
                drop(holds);
                return Err(err);
            }
        };
        if renewed.first() != Some(&Renewal::Renewed) {
            self.lease.state.end(LeaseLoss::Revoked);
            return Err(self.lease_lost());
        }
        if !self.lease.state.renewed(sent, client.validity(ttl)) {
            // The reply came after the lease ran out here: it stays lost.
            return Err(self.lease_lost());
        }
        Ok(())
    }

    /// Publishes an election leader's new value, only while this leadership lives.
    async fn proclaim(&self, value: &str) -> Result<()> {
        if self.kind() != LockKind::Leader {
            return Err(Error::invalid_argument(format!(
                "only a leadership proclaims a value; this guard holds a lock on `{}`",
                self.name()
            )));
        }
        if *self.holds() == 0 || !self.lease.state.is_held() {
            return Err(self.lease_lost());
        }
        let span = tracing::debug_span!("lock.proclaim", key = %self.lease.held.key, fence = self.lease.held.fence);
        self.handle
            .backend()
            .proclaim(&self.lease.held, value)
            .instrument(span)
            .await
    }

    /// Takes the read side as this write acquisition's owner: granted at once by every
    /// backend while the write lease lives.
    async fn read_as_writer(&self) -> Result<LockGuard> {
        if self.kind() != LockKind::Write {
            return Err(Error::invalid_argument(format!(
                "only a write guard can downgrade; this guard holds {} `{}`",
                match self.kind() {
                    LockKind::Exclusive => "the exclusive lock",
                    LockKind::Fair => "the fair lock",
                    LockKind::Read => "the read lock",
                    LockKind::Write => "the write lock",
                    LockKind::Permit => "a permit of the semaphore",
                    LockKind::Leader => "the leadership of the election",
                },
                self.name()
            )));
        }
        // While the read side an earlier downgrade made is held, another downgrade
        // re-enters it, alike on every backend: the SQL tables keep one read lease per
        // owner, and would refuse a second.
        let mut read_side = self.read_side.lock().await;
        if *self.holds() == 0 || !self.lease.state.is_held() {
            return Err(self.lease_lost());
        }
        if let Some(read) = read_side.upgrade() {
            if let Ok(guard) = read.reenter() {
                return Ok(guard);
            }
            self.await_release_of(&read).await;
            if *self.holds() == 0 || !self.lease.state.is_held() {
                return Err(self.lease_lost());
            }
        }
        let options = AcquireOptions::try_once().with_lease(self.asked);
        let owner = Some(self.lease.held.owner.clone());
        match self
            .handle
            .acquire_as(LockKind::Read, options, owner, None)
            .await
        {
            Ok(read) => {
                *read_side = Arc::downgrade(&read);
                Ok(read.guard())
            }
            Err(Error::Timeout { .. }) if !self.lease.state.is_held() => Err(self.lease_lost()),
            Err(err) => Err(err),
        }
    }

    /// Waits until the release of `read`, the read side an earlier downgrade made, has
    /// been answered, if all its guards are gone: its lease may still be on the backend
    /// (a dropped guard's release runs in the background), and the SQL tables keep one
    /// read lease per owner, so a downgrade asked before that would be refused. Each
    /// backend bounds a release by its request timeout; this also ends when the write
    /// lease ends, after which the downgrade is refused anyway.
    async fn await_release_of(&self, read: &Acquisition<B>) {
        if *read.holds() > 0 {
            // Held but lost: no release is under way.
            return;
        }
        let expiry = self.lease.state.expires_at();
        tokio::select! {
            () = read.release_answered.opened() => {}
            _ = self.lease.state.ended_future() => {}
            () = tokio::time::sleep_until(expiry) => {}
        }
    }
}

/// A release sent in a task of its own: the release counts as answered once that task
/// ends, even one dropped before it ever ran (its runtime shutting down), so that a
/// downgrade never waits for it.
struct AnsweredWhenDropped<B: LockBackend>(Arc<Acquisition<B>>);

impl<B: LockBackend> Drop for AnsweredWhenDropped<B> {
    fn drop(&mut self) {
        self.0.release_answered.open();
    }
}

/// A release under way, until the backend answered: dropped before that, it finishes
/// the release in the background.
struct Unfinished<B: LockBackend>(Option<Arc<Acquisition<B>>>);

impl<B: LockBackend> Drop for Unfinished<B> {
    fn drop(&mut self) {
        if let Some(acquisition) = self.0.take() {
            acquisition.finish_in_background();
        }
    }
}

/// What a release's answer means for its caller.
enum Outcome {
    Done(Result<()>),
    /// A retryable failure: the lease may still be held at the backend.
    Retry(Error),
}

/// A guard's link to its acquisition.
#[derive(Debug)]
struct GuardHold<B: LockBackend> {
    acquisition: Arc<Acquisition<B>>,
}

impl<B: LockBackend> HoldOps for GuardHold<B> {
    fn release(&self) -> BoxFuture<'_, Result<()>> {
        self.acquisition.release().boxed()
    }

    fn release_on_drop(&self) {
        self.acquisition.release_on_drop();
    }

    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<()>> {
        self.acquisition.extend(ttl).boxed()
    }

    fn reenter(&self) -> Result<LockGuard> {
        self.acquisition.reenter()
    }

    fn read_as_writer(&self) -> BoxFuture<'_, Result<LockGuard>> {
        self.acquisition.read_as_writer().boxed()
    }

    fn proclaim<'a>(&'a self, value: &'a str) -> BoxFuture<'a, Result<()>> {
        self.acquisition.proclaim(value).boxed()
    }

    fn lock_id(&self) -> LockId {
        self.acquisition
            .handle
            .lock_id(self.acquisition.kind().family())
    }
}

/// Which send of a release this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    First,
    /// Sent again after a send whose answer never came: the backend may have let go.
    Again,
}
