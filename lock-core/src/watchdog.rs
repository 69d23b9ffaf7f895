//! One watchdog per client: renews every watchdog-kept lease in one batched call per
//! tick and reports the leases it could not keep.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backend::{BackgroundLoop, HeldLease, LockBackend, LoopGuard, LoopWork, Renewal};
use crate::lease::{LeaseLoss, LeaseState, Stamp};
use crate::lease_ids::LeaseIdMap;
use crate::telemetry::Telemetry;

/// One granted lease: what the backend needs, and what the client knows of it.
#[derive(Debug)]
pub(crate) struct LeaseEntry<B: LockBackend> {
    pub(crate) id: u64,
    pub(crate) held: HeldLease<B::Lease>,
    pub(crate) state: Arc<LeaseState>,
    /// Whether the watchdog keeps this lease alive (false for fixed leases, and once
    /// a guard has extended it by hand).
    pub(crate) watched: AtomicBool,
    /// Held from sending a renewal of this lease until its reply is applied, by the
    /// watchdog and by `extend`: with one renewal in flight at a time, replies apply
    /// in the order the server saw the requests, so a late watchdog reply never
    /// overrides a newer `extend`.
    pub(crate) renewal: tokio::sync::Mutex<()>,
    /// Watchdog renewals of it that failed in a row (reported at the first, and when
    /// one goes through again).
    failures: AtomicU32,
}

impl<B: LockBackend> LeaseEntry<B> {
    pub(crate) fn new(
        id: u64,
        held: HeldLease<B::Lease>,
        state: Arc<LeaseState>,
        watched: bool,
    ) -> Self {
        LeaseEntry {
            id,
            held,
            state,
            watched: AtomicBool::new(watched),
            renewal: tokio::sync::Mutex::new(()),
            failures: AtomicU32::new(0),
        }
    }
}

#[derive(Debug)]
struct Registry<B: LockBackend> {
    leases: LeaseIdMap<Watched<B>>,
    renewals: BackgroundLoop,
}

impl<B: LockBackend> LoopWork for Registry<B> {
    fn background(&mut self) -> &mut BackgroundLoop {
        &mut self.renewals
    }

    fn runtimes(&self) -> impl Iterator<Item = &Handle> {
        self.leases.values().map(|watched| &watched.runtime)
    }
}

/// A watched lease, and the runtime of the call that watched it: where the renewals
/// can go on if the runtime the loop runs on shuts down.
#[derive(Debug)]
struct Watched<B: LockBackend> {
    entry: Arc<LeaseEntry<B>>,
    runtime: Handle,
}

#[derive(Debug)]
struct Shared<B: LockBackend> {
    backend: Arc<B>,
    ttl: Duration,
    /// How long the client counts on a renewal of `ttl`, from its send.
    validity: Duration,
    telemetry: Arc<Telemetry>,
    registry: Mutex<Registry<B>>,
}

/// Renews at a third of the lease. Its task runs only while it has leases to keep, on
/// the runtime of the call that started it; when that runtime shuts down, it moves to
/// the runtime of another watched lease.
#[derive(Debug)]
pub(crate) struct Watchdog<B: LockBackend> {
    shared: Arc<Shared<B>>,
}

impl<B: LockBackend> Watchdog<B> {
    pub(crate) fn new(
        backend: Arc<B>,
        ttl: Duration,
        validity: Duration,
        telemetry: Arc<Telemetry>,
    ) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                ttl,
                validity,
                telemetry,
                registry: Mutex::new(Registry {
                    leases: LeaseIdMap::default(),
                    renewals: BackgroundLoop::default(),
                }),
            }),
        }
    }

    /// Starts (or, after a failed `extend`, resumes) keeping `entry` alive. Must be
    /// called inside a tokio runtime.
    pub(crate) fn watch(&self, entry: Arc<LeaseEntry<B>>) {
        let runtime = Handle::current();
        entry.watched.store(true, Ordering::Release);
        let watched = Watched { entry, runtime };
        let mut registry = lock(&self.shared.registry);
        let start = registry.renewals.claim().then(|| watched.runtime.clone());
        registry.leases.insert(watched.entry.id, watched);
        drop(registry);
        let Some(runtime) = start else {
            return;
        };
        // Made before the spawn, and spawned outside the lock: a loop dropped before it
        // first runs (its runtime shutting down) moves too.
        let renewals = Renewals {
            shared: Arc::downgrade(&self.shared),
            guard: LoopGuard::new(&runtime),
        };
        runtime.spawn(run(renewals));
    }

    /// Stops keeping the lease alive; returns whether it was watched. A renewal in
    /// flight then changes nothing the guards see (see `tick`).
    pub(crate) fn unwatch(&self, entry: &LeaseEntry<B>) -> bool {
        let was = entry.watched.swap(false, Ordering::AcqRel);
        if was {
            lock(&self.shared.registry).leases.remove(&entry.id);
        }
        was
    }

    /// How many leases the watchdog keeps alive.
    pub(crate) fn len(&self) -> usize {
        lock(&self.shared.registry).leases.len()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The registry holds no invariant a panic elsewhere could break.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the renewal loop holds: the client, weakly, and its guard. Dropped before the
/// loop ends by itself (its runtime shut down under it, perhaps before it first ran),
/// it moves the loop to the runtime of another watched lease.
struct Renewals<B: LockBackend> {
    shared: Weak<Shared<B>>,
    guard: LoopGuard,
}

impl<B: LockBackend> Drop for Renewals<B> {
    fn drop(&mut self) {
        let (true, Some(shared)) = (self.guard.is_armed(), self.shared.upgrade()) else {
            return;
        };
        self.guard.dropped(&shared.registry, |runtime, guard| {
            let shared = self.shared.clone();
            drop(runtime.spawn(run(Renewals { shared, guard })));
        });
    }
}

/// The renewal loop. It holds the client only weakly, and ends when nothing is left to
/// renew (the next `watch` starts a new one).
async fn run<B: LockBackend>(mut renewals: Renewals<B>) {
    let shared = renewals.shared.clone();
    let Some(ttl) = shared.upgrade().map(|s| s.ttl) else {
        return;
    };
    let interval = ttl / 3;
    // After a failed renewal, retry sooner, but not in a tight loop.
    let retry = (ttl / 10).max(Duration::from_millis(10));
    // A moved loop renews at once: the one it replaces may have been retrying, or not
    // polled at all, with leases near their end.
    let mut next = if renewals.guard.is_moved() {
        Instant::now()
    } else {
        Instant::now() + interval
    };
    loop {
        tokio::time::sleep_until(next).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        next = tick(&shared, interval, retry).await;
        // Check and clear under one lock, so a lease watched meanwhile starts a new loop.
        let mut registry = lock(&shared.registry);
        if registry.leases.is_empty() {
            registry.renewals.end(&mut renewals.guard);
            return;
        }
    }
}

/// One renewal of every watched lease; returns when to tick next.
async fn tick<B: LockBackend>(shared: &Shared<B>, interval: Duration, retry: Duration) -> Instant {
    let batch: Vec<Arc<LeaseEntry<B>>> = lock(&shared.registry)
        .leases
        .values()
        .map(|watched| watched.entry.clone())
        .collect();
    let (live, ended): (Vec<_>, Vec<_>) =
        batch.into_iter().partition(|e| e.state.ended().is_none());
    for entry in &ended {
        // Past its local expiry before we could renew it: someone else may hold it now
        // (the lease's identity logs and reports it).
        entry.state.end(LeaseLoss::Expired);
        forget(shared, entry);
    }
    if live.is_empty() {
        return Instant::now() + interval;
    }
    // A lease whose renewal is busy is being extended, and so no longer watched.
    let (live, _renewing): (Vec<_>, Vec<_>) = live
        .iter()
        .filter_map(|e| e.renewal.try_lock().ok().map(|busy| (e, busy)))
        .unzip();
    if live.is_empty() {
        return Instant::now() + interval;
    }
    let sent = Stamp::now();
    let validity = shared.validity;
    let leases: Vec<&HeldLease<B::Lease>> = live.iter().map(|e| &e.held).collect();
    let outcome = tokio::time::timeout(shared.ttl, shared.backend.renew(&leases, shared.ttl)).await;
    let error = match outcome {
        Ok(Ok(renewals)) if renewals.len() == live.len() => {
            let mut renewed = 0;
            let mut unanswered = Vec::new();
            for (entry, renewal) in live.iter().zip(renewals) {
                // Released or extended while the renewal was out: what it renewed is
                // the release's or the extend's to judge. A `Lost` then still ends the
                // lease, unless its release was sent (the release got there first, and
                // the guards were told already): an extend waiting for this renewal may
                // be dropped before it sends its own.
                if !entry.watched.load(Ordering::Acquire) {
                    if renewal == Renewal::Lost && entry.state.counts() {
                        entry.state.end(LeaseLoss::Revoked);
                    }
                    continue;
                }
                match renewal {
                    Renewal::Renewed => {
                        renewed += 1;
                        // Refused after the local expiry: the next tick reports it.
                        if entry.state.renewed(sent, validity) {
                            let failures = entry.failures.swap(0, Ordering::Relaxed);
                            if let (1.., Some(identity)) = (failures, entry.state.identity()) {
                                identity.renewed_late(failures);
                            }
                        }
                    }
                    Renewal::Lost => {
                        // The backend no longer has it (the identity reports it).
                        entry.state.end(LeaseLoss::Revoked);
                        forget(shared, entry);
                    }
                    Renewal::Unanswered => unanswered.push(*entry),
                }
            }
            shared.telemetry.renewals(renewed, unanswered.len());
            tracing::trace!(leases = live.len(), "watchdog renewed leases");
            if unanswered.is_empty() {
                return sent.at + interval;
            }
            let error = "the server that keeps the lease did not answer";
            tracing::debug!(
                error,
                leases = unanswered.len(),
                "lease renewal failed; retrying"
            );
            return failed(shared, unanswered.into_iter(), error, retry);
        }
        Ok(Ok(renewals)) => format!(
            "backend answered {} renewals for {} leases",
            renewals.len(),
            live.len()
        ),
        Ok(Err(err)) => err.to_string(),
        Err(_) => format!("renewal did not answer within {:?}", shared.ttl),
    };
    tracing::debug!(%error, leases = live.len(), "lease renewal failed; retrying");
    shared.telemetry.renewals(0, live.len());
    // As above: a lease released or extended while the renewal was out is not this
    // tick's to report.
    let watched = live
        .into_iter()
        .filter(|e| e.watched.load(Ordering::Acquire));
    failed(shared, watched, &error, retry)
}

/// Counts a failed renewal of each of `entries`, ends those past their local expiry,
/// and returns when to try again.
fn failed<'a, B: LockBackend>(
    shared: &Shared<B>,
    entries: impl Iterator<Item = &'a Arc<LeaseEntry<B>>>,
    error: &str,
    retry: Duration,
) -> Instant {
    let now = Instant::now();
    for entry in entries {
        if entry.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Some(identity) = entry.state.identity() {
                identity.renewal_failed(error);
            }
        }
        if now >= entry.state.expires_at() {
            entry.state.end(LeaseLoss::RenewalFailed {
                last_error: error.to_owned(),
            });
            forget(shared, entry);
        }
    }
    now + retry
}

fn forget<B: LockBackend>(shared: &Shared<B>, entry: &LeaseEntry<B>) {
    entry.watched.store(false, Ordering::Release);
    lock(&shared.registry).leases.remove(&entry.id);
}
