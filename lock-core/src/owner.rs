//! One owner of one lock: reentrancy counts, acquire and release on top of the
//! backend primitive. Every lock type is a thin wrapper around this.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{
    AcquireRequest, HeldLease, LockBackend, LockFamily, LockKind, OwnerToken, Renewal,
};
use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::guard::{HoldOps, LockGuard};
use crate::id::LockId;
use crate::lease::{LeaseLoss, LeaseState, LossNotifier};
use crate::name::LockKey;
use crate::options::{validate_lease, AcquireOptions, Lease, Wait};
use crate::watchdog::LeaseEntry;

/// How long a release that failed with a retryable error is retried in the background.
/// Longer than any lease a session-based backend keeps alive without its server.
const RELEASE_RETRY_LIMIT: Duration = Duration::from_secs(300);

/// The two places an owner can hold a lease: the exclusive one (exclusive, fair or
/// write) and the shared one (read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Primary,
    Read,
}

impl Slot {
    fn of(kind: LockKind) -> Self {
        match kind {
            LockKind::Read => Slot::Read,
            LockKind::Exclusive | LockKind::Fair | LockKind::Write => Slot::Primary,
        }
    }
}

#[derive(Debug)]
struct Hold<B: LockBackend> {
    lease: Arc<LeaseEntry<B>>,
    count: u32,
}

#[derive(Debug)]
struct Holds<B: LockBackend> {
    primary: Option<Hold<B>>,
    read: Option<Hold<B>>,
}

impl<B: LockBackend> Holds<B> {
    fn slot(&mut self, slot: Slot) -> &mut Option<Hold<B>> {
        match slot {
            Slot::Primary => &mut self.primary,
            Slot::Read => &mut self.read,
        }
    }
}

/// What giving up one hold did.
enum Decrement {
    /// Other guards of the same acquisition remain.
    Remaining,
    /// That was the last hold: the lease must be released on the backend.
    Last,
    /// The guard's lease is no longer this owner's current one (it was lost and
    /// replaced, or cleared): only the backend can say whether anything is left.
    Stale,
}

/// What an owner already has of the lock it asks for.
enum Reentry<B: LockBackend> {
    /// A live lease: a further guard on it.
    Reentered(LockGuard),
    /// A lease that was lost; cleared from its slot.
    Lost(Arc<LeaseEntry<B>>),
    /// Nothing.
    Free,
}

/// One owner of one lock. Shared by a lock handle's clones and its guards.
#[derive(Debug)]
pub(crate) struct Owner<B: LockBackend> {
    client: Arc<ClientInner<B>>,
    key: LockKey,
    token: OwnerToken,
    /// Serialises this owner's trips to the backend for acquisition, so two tasks of
    /// one owner never both ask for the lease: the second one re-enters.
    gate: tokio::sync::Mutex<()>,
    holds: Mutex<Holds<B>>,
}

impl<B: LockBackend> Owner<B> {
    pub(crate) fn new(client: Arc<ClientInner<B>>, key: LockKey) -> Arc<Self> {
        let token = client.next_owner_token();
        Arc::new(Owner {
            client,
            key,
            token,
            gate: tokio::sync::Mutex::new(()),
            holds: Mutex::new(Holds {
                primary: None,
                read: None,
            }),
        })
    }

    pub(crate) fn key(&self) -> &LockKey {
        &self.key
    }

    pub(crate) fn backend(&self) -> &B {
        &self.client.backend
    }

    pub(crate) fn lock_id(&self, family: LockFamily) -> LockId {
        let backend = &self.client.backend;
        LockId::new(self.key.clone(), family, backend.name(), backend.location())
    }

    fn holds(&self) -> MutexGuard<'_, Holds<B>> {
        // Every update below is a single assignment: a panic cannot leave it half done.
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many guards this owner has on a live lease of `kind`'s slot.
    pub(crate) fn hold_count(&self, kind: LockKind) -> u32 {
        match self.holds().slot(Slot::of(kind)) {
            Some(hold) if hold.lease.state.is_held() => hold.count,
            _ => 0,
        }
    }

    /// Acquires `kind` for this owner: re-entering without a round trip when the
    /// owner already holds a live lease, otherwise through the backend.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        kind: LockKind,
        options: AcquireOptions,
    ) -> Result<LockGuard> {
        let deadline = options.validate(Instant::now())?;
        self.check_supported(kind, options.lease)?;
        if self.client.is_closed() {
            return Err(Error::Closed);
        }
        let mut lost = match self.reenter(kind)? {
            Reentry::Reentered(guard) => return Ok(guard),
            Reentry::Lost(lease) => Some(lease),
            Reentry::Free => None,
        };
        let _gate = match deadline.instant() {
            None => self.gate.lock().await,
            Some(at) => match tokio::time::timeout_at(at, self.gate.lock()).await {
                Ok(gate) => gate,
                Err(_) => return Err(self.timeout(options.wait)),
            },
        };
        if self.client.is_closed() {
            return Err(Error::Closed);
        }
        // Another task of this owner may have taken the lease while we waited.
        match self.reenter(kind)? {
            Reentry::Reentered(guard) => return Ok(guard),
            Reentry::Lost(lease) => lost = Some(lease),
            Reentry::Free => {}
        }
        if let Some(lease) = lost {
            // A lost lease can leave state behind at the backend (a node, a queue place,
            // this client's turn on a key) while stale guards keep it alive here: give
            // it back before asking anew. Owner and fence keep this from touching
            // anything newer.
            if let Err(err) = self.client.backend.release(&lease.held).await {
                tracing::debug!(key = %self.key, error = %err, "released a lost lease");
            }
        }
        let (ttl, watched) = match options.lease {
            Lease::Watchdog => (self.client.watchdog_lease, true),
            Lease::Fixed(ttl) => (ttl, false),
        };
        let sent_at = Instant::now();
        let state = LeaseState::new(sent_at + ttl);
        let loss = LossNotifier::new(&state);
        let request = AcquireRequest {
            key: &self.key,
            kind,
            owner: &self.token,
            ttl,
            deadline,
            watchdog: watched,
            loss: &loss,
        };
        let span =
            tracing::debug_span!("lock.acquire", key = %self.key, ?kind, owner = %self.token);
        // A shutdown ends the wait; the backend cleans up as for a dropped acquire.
        let _acquiring = self.client.acquiring.begin();
        let grant = tokio::select! {
            grant = self.client.backend.acquire(request).instrument(span) => grant?,
            () = self.client.closed() => return Err(Error::Closed),
        };
        let Some(grant) = grant else {
            tracing::debug!(key = %self.key, ?kind, "lock not acquired before the deadline");
            return Err(self.timeout(options.wait));
        };
        // Count the lease from the attempt that won it, not from the start of the wait.
        state.granted(grant.started_at, self.client.backend.lease_validity(ttl));
        let entry = Arc::new(LeaseEntry {
            id: self.client.next_lease_id(),
            held: HeldLease {
                key: self.key.clone(),
                kind,
                owner: self.token.clone(),
                fence: grant.fence,
                data: grant.data,
            },
            state,
            watched: AtomicBool::new(watched),
            renewal: tokio::sync::Mutex::new(()),
        });
        if watched {
            self.client.watchdog.watch(entry.clone());
        }
        *self.holds().slot(Slot::of(kind)) = Some(Hold {
            lease: entry.clone(),
            count: 1,
        });
        // Recorded before looking at `closed`, which a shutdown sets before it takes
        // the records: so either it releases this grant or this call does.
        self.client.track(self, &entry);
        if self.client.is_closed() && self.client.untrack(&entry) {
            let _ = self.release(&entry).await;
            return Err(Error::Closed);
        }
        tracing::debug!(key = %self.key, ?kind, fence = grant.fence, "lock acquired");
        Ok(self.guard(entry))
    }

    fn check_supported(&self, kind: LockKind, lease: Lease) -> Result<()> {
        let backend = &self.client.backend;
        backend.capabilities().require(backend.name(), kind, lease)
    }

    /// Adds a hold to a live lease of this owner, if there is one. A lost lease is
    /// cleared from its slot (and returned) so the caller acquires anew.
    fn reenter(self: &Arc<Self>, kind: LockKind) -> Result<Reentry<B>> {
        let mut holds = self.holds();
        if kind == LockKind::Write && holds.primary.is_none() {
            if let Some(read) = &holds.read {
                if read.lease.state.is_held() {
                    return Err(Error::invalid_argument(format!(
                        "cannot upgrade the read lock on `{}` to a write lock: release the read lock first (taking the read lock while holding the write lock is allowed)",
                        self.key.name()
                    )));
                }
            }
        }
        let slot = holds.slot(Slot::of(kind));
        match slot {
            Some(hold) if hold.lease.state.is_held() => {
                hold.count += 1;
                let lease = hold.lease.clone();
                drop(holds);
                tracing::trace!(key = %self.key, ?kind, "lock re-entered");
                Ok(Reentry::Reentered(self.guard(lease)))
            }
            Some(_) => match slot.take() {
                Some(hold) => {
                    drop(holds);
                    self.client.watchdog.unwatch(&hold.lease);
                    self.client.untrack(&hold.lease);
                    Ok(Reentry::Lost(hold.lease))
                }
                None => Ok(Reentry::Free),
            },
            None => Ok(Reentry::Free),
        }
    }

    fn guard(self: &Arc<Self>, lease: Arc<LeaseEntry<B>>) -> LockGuard {
        LockGuard::new(
            self.key.name().clone(),
            lease.held.kind,
            lease.held.fence,
            lease.state.clone(),
            Box::new(GuardHold {
                owner: self.clone(),
                lease,
            }),
        )
    }

    fn timeout(&self, wait: Wait) -> Error {
        Error::Timeout {
            name: self.key.name().to_string(),
            waited: match wait {
                Wait::For(limit) => limit,
                Wait::No | Wait::Forever => Duration::ZERO,
            },
        }
    }

    fn lease_lost(&self) -> Error {
        Error::LeaseLost {
            name: self.key.name().to_string(),
        }
    }

    /// Gives up one hold of `lease`, forgetting the lease if it was the last.
    fn decrement(&self, lease: &Arc<LeaseEntry<B>>) -> Decrement {
        let mut holds = self.holds();
        let slot = holds.slot(Slot::of(lease.held.kind));
        match slot {
            Some(hold) if Arc::ptr_eq(&hold.lease, lease) => {
                hold.count -= 1;
                if hold.count > 0 {
                    return Decrement::Remaining;
                }
                *slot = None;
                drop(holds);
                self.client.watchdog.unwatch(lease);
                self.client.untrack(lease);
                Decrement::Last
            }
            _ => Decrement::Stale,
        }
    }

    async fn release(self: &Arc<Self>, lease: &Arc<LeaseEntry<B>>) -> Result<()> {
        match self.decrement(lease) {
            Decrement::Remaining if lease.state.is_held() => return Ok(()),
            Decrement::Remaining => return Err(self.lease_lost()),
            Decrement::Last | Decrement::Stale => {}
        }
        // A lease already lost here (expired, revoked, its session gone) is reported
        // as lost whatever the backend answers: the caller holds nothing to retry for.
        let lost_before = !lease.state.is_held();
        let span = tracing::debug_span!("lock.release", key = %self.key, kind = ?lease.held.kind, fence = lease.held.fence);
        match self
            .client
            .backend
            .release(&lease.held)
            .instrument(span)
            .await
        {
            Ok(()) if lost_before => {
                // The backend still had it (its lease outlasts ours by a margin), but
                // this guard had reported it gone: the holder may not have been alone.
                tracing::debug!(key = %self.key, fence = lease.held.fence, "released a lease that had run out here");
                Err(self.lease_lost())
            }
            Ok(()) => {
                lease.state.end(LeaseLoss::Released);
                tracing::debug!(key = %self.key, fence = lease.held.fence, "lock released");
                Ok(())
            }
            Err(Error::NotOwner { .. }) => {
                lease.state.end(LeaseLoss::Revoked);
                tracing::warn!(key = %self.key, fence = lease.held.fence, "release found the lease already lost");
                Err(self.lease_lost())
            }
            Err(err) if lost_before || !lease.state.is_held() => {
                tracing::debug!(key = %self.key, error = %err, "release of a lost lease failed");
                Err(self.lease_lost())
            }
            Err(err) if err.is_retryable() => {
                tracing::warn!(key = %self.key, error = %err, "release failed; retrying it in the background");
                self.release_in_background(lease);
                Err(err)
            }
            Err(err) => {
                tracing::warn!(key = %self.key, error = %err, "release failed; the lease will expire");
                Err(err)
            }
        }
    }

    /// Gives back `lease` with all its holds, for [`LockClient::shutdown`]: the guards
    /// left on it turn stale. A lease already given back is left alone, and one lost
    /// before is only cleaned up at the backend, not reported.
    ///
    /// [`LockClient::shutdown`]: crate::LockClient::shutdown
    pub(crate) async fn release_for_shutdown(
        self: &Arc<Self>,
        lease: &Arc<LeaseEntry<B>>,
    ) -> Result<()> {
        match self.holds().slot(Slot::of(lease.held.kind)) {
            Some(hold) if Arc::ptr_eq(&hold.lease, lease) => hold.count = 1,
            _ => return Ok(()),
        }
        let lost_before = !lease.state.is_held();
        let released = self.release(lease).await;
        if lost_before {
            return Ok(());
        }
        released
    }

    /// Keeps releasing `lease` after a release failed with a retryable error, with
    /// backoff, until the backend lets go, says the lease is gone, or
    /// [`RELEASE_RETRY_LIMIT`] passes. Without this a lease whose life is a session
    /// (ZooKeeper) stays held as long as the session does. Safe to repeat: a release
    /// acts only on this acquisition (key, owner and fence), never on a newer one.
    fn release_in_background(self: &Arc<Self>, lease: &Arc<LeaseEntry<B>>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "no runtime to retry the release on; the lease will expire");
            return;
        };
        let owner = self.clone();
        let lease = lease.clone();
        self.client.cleanups.clone().spawn_on(&runtime, async move {
            let give_up = Instant::now() + RELEASE_RETRY_LIMIT;
            let mut delay = Duration::from_millis(50);
            loop {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                match owner.client.backend.release(&lease.held).await {
                    Ok(()) => {
                        lease.state.end(LeaseLoss::Released);
                        tracing::debug!(key = %owner.key, fence = lease.held.fence, "lock released on a retry");
                        return;
                    }
                    Err(Error::NotOwner { .. }) => {
                        lease.state.end(LeaseLoss::Revoked);
                        return;
                    }
                    Err(err) if err.is_retryable() && Instant::now() < give_up => {
                        tracing::debug!(key = %owner.key, error = %err, "release retry failed");
                    }
                    Err(err) => {
                        tracing::warn!(key = %owner.key, error = %err, "gave up releasing; the lease will expire");
                        return;
                    }
                }
            }
        });
    }

    fn release_on_drop(self: &Arc<Self>, lease: &Arc<LeaseEntry<B>>) {
        if !matches!(self.decrement(lease), Decrement::Last) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(key = %self.key, "guard dropped outside a runtime; the lease will expire");
            return;
        };
        let owner = self.clone();
        let lease = lease.clone();
        self.client.cleanups.clone().spawn_on(&runtime, async move {
            match owner.client.backend.release(&lease.held).await {
                Ok(()) => {
                    lease.state.end(LeaseLoss::Released);
                }
                Err(err) if err.is_retryable() => {
                    tracing::debug!(key = %owner.key, error = %err, "release after drop failed; retrying");
                    owner.release_in_background(&lease);
                }
                Err(err) => {
                    tracing::debug!(key = %owner.key, error = %err, "release after drop failed; the lease will expire");
                }
            }
        });
    }

    async fn extend(&self, lease: &Arc<LeaseEntry<B>>, ttl: Duration) -> Result<()> {
        validate_lease(ttl)?;
        if !self.client.backend.capabilities().fixed_lease {
            return Err(Error::Unsupported {
                backend: self.client.backend.name(),
                operation: "extending a lease",
            });
        }
        // Stop the watchdog first, or its next renewal would override the new expiry,
        // then wait for a renewal already in flight to be applied before sending ours.
        self.client.watchdog.unwatch(lease);
        let _renewal = lease.renewal.lock().await;
        if !lease.state.is_held() {
            return Err(self.lease_lost());
        }
        let sent_at = Instant::now();
        let span =
            tracing::debug_span!("lock.extend", key = %self.key, fence = lease.held.fence, ?ttl);
        let renewed = self
            .client
            .backend
            .renew(&[&lease.held], ttl)
            .instrument(span)
            .await?;
        if renewed.first() != Some(&Renewal::Renewed) {
            lease.state.end(LeaseLoss::Revoked);
            return Err(self.lease_lost());
        }
        if !lease
            .state
            .renewed(sent_at, self.client.backend.lease_validity(ttl))
        {
            // The reply came after the lease ran out here: it stays lost.
            return Err(self.lease_lost());
        }
        Ok(())
    }
}

/// A guard's link to its owner and acquisition.
#[derive(Debug)]
struct GuardHold<B: LockBackend> {
    owner: Arc<Owner<B>>,
    lease: Arc<LeaseEntry<B>>,
}

impl<B: LockBackend> HoldOps for GuardHold<B> {
    fn release(&self) -> BoxFuture<'_, Result<()>> {
        self.owner.release(&self.lease).boxed()
    }

    fn release_on_drop(&self) {
        self.owner.release_on_drop(&self.lease);
    }

    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<()>> {
        self.owner.extend(&self.lease, ttl).boxed()
    }
}
