//! One lock handle: a key of one client, and the acquisitions made through it. Every
//! lock type is a thin wrapper around this.
//!
//! A handle is not an owner. Each acquire call through it is an acquisition of its own,
//! with an owner token of its own, so two calls that run at the same time (tasks
//! sharing the handle, futures joined in one task) exclude each other exactly as two
//! clients would. Re-entry goes through a guard the caller already holds
//! ([`LockGuard::reenter`](crate::LockGuard::reenter)).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::time::Instant;
use tracing::Instrument;

use crate::acquisition::Acquisition;
use crate::backend::{AcquireRequest, HeldLease, LockBackend, LockFamily, LockKind, OwnerToken};
use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::id::LockId;
use crate::late_grant::{self, Confirmation};
use crate::lease::{LeaseLoss, LeaseState, LossNotifier};
use crate::name::LockKey;
use crate::options::{AcquireOptions, Lease, Wait};
use crate::telemetry::{kind_label, LeaseIdentity, Outcome};
use crate::watchdog::LeaseEntry;

/// How long past the deadline of a wait a backend's acquire may take before it is
/// dropped (cancel safe, as every backend's acquire is) and the wait answers
/// `Timeout`: longer than the backends' own clean-up graces, so they answer first.
pub(crate) const OVERDUE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A key of one client, shared by a handle's clones and by its acquisitions.
#[derive(Debug)]
pub(crate) struct Handle<B: LockBackend> {
    client: Arc<ClientInner<B>>,
    key: LockKey,
    /// For a semaphore, how many holders it admits; 1 for a lock.
    permits: u32,
    /// Acquisitions made through this handle that may still have guards, for the hold
    /// counts. An acquisition removes itself when its last guard goes.
    live: Mutex<Vec<Weak<Acquisition<B>>>>,
}

impl<B: LockBackend> Handle<B> {
    pub(crate) fn new(client: Arc<ClientInner<B>>, key: LockKey) -> Arc<Self> {
        Self::with_permits(client, key, 1)
    }

    /// A handle on a semaphore of `permits` holders.
    pub(crate) fn with_permits(
        client: Arc<ClientInner<B>>,
        key: LockKey,
        permits: u32,
    ) -> Arc<Self> {
        Arc::new(Handle {
            client,
            key,
            permits,
            live: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn key(&self) -> &LockKey {
        &self.key
    }

    pub(crate) fn permits(&self) -> u32 {
        self.permits
    }

    pub(crate) fn client(&self) -> &Arc<ClientInner<B>> {
        &self.client
    }

    pub(crate) fn backend(&self) -> &B {
        &self.client.backend
    }

    /// The backend, if it offers `kind` locks: for the queries that go to it directly
    /// (not through `acquire`), which check what `acquire` checks.
    pub(crate) fn backend_for(&self, kind: LockKind) -> Result<&B> {
        self.check_supported(kind, Lease::Watchdog)?;
        Ok(self.backend())
    }

    pub(crate) fn lock_id(&self, family: LockFamily) -> LockId {
        let backend = &self.client.backend;
        LockId::new(self.key.clone(), family, backend.name(), backend.location())
    }

    fn live(&self) -> MutexGuard<'_, Vec<Weak<Acquisition<B>>>> {
        // Pushes and retains only: a panic cannot leave it half done.
        self.live
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many guards of acquisitions of `kind` made through this handle are held on
    /// live leases.
    pub(crate) fn hold_count(&self, kind: LockKind) -> u32 {
        self.live()
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|acquisition| acquisition.kind() == kind)
            .map(|acquisition| acquisition.live_holds())
            .sum()
    }

    /// Forgets an acquisition whose last guard went.
    pub(crate) fn forget(&self, acquisition: &Acquisition<B>) {
        self.live()
            .retain(|a| a.strong_count() > 0 && !std::ptr::eq(a.as_ptr(), acquisition));
    }

    /// Acquires `kind` as a new owner, waiting and leasing as `options` say.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        kind: LockKind,
        options: AcquireOptions,
    ) -> Result<LockGuard> {
        Ok(self.acquire_as(kind, options, None, None).await?.guard())
    }

    /// Acquires `kind` for `owner` (a downgrade takes the read side with the write
    /// acquisition's token), or as a new owner; `value` is a campaign's, published as
    /// the holder's description instead of the client's.
    pub(crate) async fn acquire_as(
        self: &Arc<Self>,
        kind: LockKind,
        options: AcquireOptions,
        owner: Option<OwnerToken>,
        value: Option<&str>,
    ) -> Result<Arc<Acquisition<B>>> {
        let deadline = options.validate(Instant::now())?;
        self.check_supported(kind, options.lease_policy())?;
        let client = &self.client;
        if client.is_closed() {
            return Err(Error::Closed);
        }
        let token = owner.unwrap_or_else(|| client.next_owner_token());
        let (ttl, watched) = match options.lease_policy() {
            Lease::Watchdog => (client.watchdog_lease, true),
            Lease::Fixed(ttl) => (ttl, false),
        };
        let identity = LeaseIdentity::new(
            self.key.clone(),
            kind,
            token.clone(),
            client.telemetry.clone(),
        );
        let span = tracing::debug_span!(
            "lock.acquire",
            namespace = self.key.namespace().as_str(),
            name = %self.key.name(),
            backend = client.backend.name(),
            kind = kind_label(kind),
            owner = %token,
            token = tracing::field::Empty,
        );
        let mut ended = AcquireEnded::new(self, kind, options.wait());
        let result = async {
            let state = LeaseState::pending(identity.clone());
            let loss = LossNotifier::new(&state);
            let request = AcquireRequest {
                key: &self.key,
                kind,
                permits: self.permits,
                owner: &token,
                ttl,
                deadline,
                watchdog: watched,
                loss: &loss,
                holder: value.unwrap_or(&client.description),
            };
            // A shutdown ends the wait; the backend cleans up as for a dropped acquire.
            let _acquiring = client.acquiring.begin();
            // So does a backend still busy well past the deadline of a wait (a slow
            // server): the wait limit holds whatever the server's pace.
            let overdue = async {
                match deadline.instant().filter(|_| !deadline.has_passed()) {
                    Some(at) => tokio::time::sleep_until(at + OVERDUE_GRACE).await,
                    None => std::future::pending().await,
                }
            };
            let grant = tokio::select! {
                grant = client.backend.acquire(request) => grant?,
                () = client.closed() => return Err(Error::Closed),
                () = overdue => None,
            };
            let Some(grant) = grant else {
                tracing::debug!("lock not acquired before the deadline");
                return Err(self.timeout(options.wait()));
            };
            let fence = grant.fence;
            let mut held = HeldLease {
                key: self.key.clone(),
                kind,
                owner: token.clone(),
                fence,
                data: grant.data,
            };
            // Count the lease from the attempt that won it, not from the start of the
            // wait; or from a renewal that confirmed it, if that attempt's reply came
            // too late for the watchdog to keep it (the lease stays pending, so live,
            // meanwhile).
            let validity = client.validity(ttl);
            // A suspend since the first attempt counts against the lease, whether it
            // came during a wait or the winning round trip (the client cannot tell
            // which): a renewal sent now, where the watchdog keeps the lease, tells how
            // much of it is left.
            let late = late_grant::is_late(
                grant.started_at,
                validity.saturating_sub(state.slept()),
                ttl,
            );
            let confirmation = if watched && late {
                let confirming =
                    late_grant::confirm(&client.backend, &client.cleanups, held, ttl, validity);
                tokio::select! {
                    (confirmed, confirmation) = confirming => {
                        held = confirmed;
                        confirmation
                    }
                    // The grant is released in the background, which a shutdown waits for.
                    () = client.closed() => return Err(Error::Closed),
                }
            } else {
                Confirmation::Unanswered
            };
            match confirmation {
                Confirmation::Renewed(sent) => state.confirmed(sent, validity),
                Confirmation::Unanswered | Confirmation::Lost => {
                    state.granted(grant.started_at, validity);
                }
            }
            tracing::Span::current().record("token", fence);
            identity.granted(fence, ended.started.elapsed());
            if matches!(confirmation, Confirmation::Lost) {
                // After the grant is told, so that the loss is reported as this grant's.
                state.end(LeaseLoss::Revoked);
            }
            let entry = Arc::new(LeaseEntry::new(
                client.next_lease_id(),
                held,
                state,
                watched,
            ));
            let acquisition = Acquisition::new(self.clone(), entry.clone(), options.lease_policy());
            if watched {
                client.watchdog.watch(entry);
            }
            self.live().push(Arc::downgrade(&acquisition));
            // Recorded before looking at `closed`, which a shutdown sets before it takes
            // the records: so either it releases this grant or this call does.
            client.track(&acquisition);
            if client.is_closed() && client.untrack(acquisition.lease()) {
                let _ = acquisition.release_for_shutdown().await;
                return Err(Error::Closed);
            }
            tracing::debug!("lock acquired");
            Ok(acquisition)
        }
        .instrument(span)
        .await;
        ended.with(&result);
        result
    }

    fn check_supported(&self, kind: LockKind, lease: Lease) -> Result<()> {
        let backend = &self.client.backend;
        backend.capabilities().require(backend.name(), kind, lease)
    }

    fn timeout(&self, wait: Wait) -> Error {
        Error::Timeout {
            name: self.key.name().to_string(),
            waited: match wait {
                Wait::For(limit) => limit,
                Wait::No | Wait::Forever => std::time::Duration::ZERO,
            },
        }
    }
}

/// Records how an acquire ended, for the metrics: by its result, or as cancelled if its
/// future is dropped first.
struct AcquireEnded<'a, B: LockBackend> {
    handle: &'a Handle<B>,
    kind: LockKind,
    wait: Wait,
    started: Instant,
    recorded: bool,
}

impl<'a, B: LockBackend> AcquireEnded<'a, B> {
    fn new(handle: &'a Handle<B>, kind: LockKind, wait: Wait) -> Self {
        AcquireEnded {
            handle,
            kind,
            wait,
            started: Instant::now(),
            recorded: false,
        }
    }

    fn record(&mut self, outcome: Outcome) {
        self.recorded = true;
        self.handle.client.telemetry.acquire_ended(
            &self.handle.key,
            self.kind,
            outcome,
            self.started.elapsed(),
        );
    }

    fn with<T>(&mut self, result: &Result<T>) {
        let outcome = match result {
            Ok(_) => Outcome::Granted,
            Err(Error::Timeout { .. }) if self.wait == Wait::No => Outcome::Refused,
            Err(Error::Timeout { .. }) => Outcome::TimedOut,
            Err(Error::Closed) => Outcome::Closed,
            Err(_) => Outcome::Error,
        };
        self.record(outcome);
    }
}

impl<B: LockBackend> Drop for AcquireEnded<'_, B> {
    fn drop(&mut self) {
        if !self.recorded {
            self.record(Outcome::Cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use crate::backend::{AcquireRequest, Grant, HeldLease, LockBackend, Renewal};
    use crate::memory::MemoryBackend;
    use crate::prelude::*;
    use crate::{AcquireOptions, Capabilities, LockClient, LockFamily, LockInfo, LockKey, Result};

    /// A memory backend on a machine that sleeps `nap` while each grant's reply is on
    /// its way (the suspend is simulated on the test's thread).
    #[derive(Debug)]
    struct Napping {
        inner: MemoryBackend,
        nap: Duration,
        renewals: AtomicUsize,
    }

    impl LockBackend for Napping {
        type Lease = ();

        fn name(&self) -> &'static str {
            "napping-memory"
        }

        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities()
        }

        async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<()>>> {
            let grant = self.inner.acquire(req).await;
            crate::clock::simulate_suspend(self.nap);
            grant
        }

        async fn release(&self, lease: &HeldLease<()>) -> Result<()> {
            self.inner.release(lease).await
        }

        async fn renew(&self, leases: &[&HeldLease<()>], ttl: Duration) -> Result<Vec<Renewal>> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            self.inner.renew(leases, ttl).await
        }

        async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
            self.inner.is_locked(key, family).await
        }

        async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
            self.inner.force_unlock(key, family).await
        }

        async fn force_unlock_holder(
            &self,
            key: &LockKey,
            family: LockFamily,
            fence: u64,
        ) -> Result<bool> {
            self.inner.force_unlock_holder(key, family, fence).await
        }

        async fn inspect(&self, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
            self.inner.inspect(key, family).await
        }
    }

    fn napping_client(nap: Duration) -> LockClient<Napping> {
        let backend = Napping {
            inner: MemoryBackend::new(),
            nap,
            renewals: AtomicUsize::new(0),
        };
        LockClient::builder(backend)
            .watchdog_lease(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    /// The machine slept 60 s between a 30 s lease's grant and its reply: the server's
    /// lease ran out meanwhile, so the guard handed over must not say held.
    #[tokio::test(flavor = "current_thread")]
    async fn a_suspend_during_the_winning_round_trip_counts_against_the_lease() {
        let client = napping_client(Duration::from_secs(60));
        let fixed = AcquireOptions::try_once().lease(Duration::from_secs(30));
        let guard = client.lock("napped").unwrap().acquire_with(fixed).await;
        let guard = guard.unwrap();
        assert!(
            !guard.is_held(),
            "held after a 60 s suspend during the grant of a 30 s lease"
        );
    }

    /// The same with a watchdog lease: confirmed by a renewal sent after the suspend,
    /// as a grant answered too late is, and held from there.
    #[tokio::test(flavor = "current_thread")]
    async fn a_watchdog_grant_with_a_suspend_during_its_round_trip_is_confirmed() {
        let client = napping_client(Duration::from_secs(60));
        let guard = client.lock("napped").unwrap().acquire().await.unwrap();
        let renewals = client.backend().renewals.load(Ordering::SeqCst);
        assert_eq!(renewals, 1, "one renewal confirmed the grant");
        assert!(guard.is_held(), "the backend still had it: held");
    }
}
