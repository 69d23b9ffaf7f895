//! The client: one backend, one namespace, one watchdog, and the lock handles made
//! from them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::acquisition::Acquisition;
use crate::api::{DistributedLock, FairLock, ReadWriteLock};
use crate::backend::{Capabilities, LockBackend, OwnerToken};
use crate::cleanups::Cleanups;
use crate::election::{Election, ElectionHandle};
use crate::error::Result;
use crate::lease_ids::LeaseIdMap;
use crate::locks::{FairLockHandle, LockHandle, ReadWriteLockHandle};
use crate::name::{LockKey, LockName, Namespace};
use crate::options::{
    check_duration, ClockDrift, DEFAULT_WATCHDOG_LEASE, MAX_DURATION, MIN_WATCHDOG_LEASE,
};
use crate::semaphore::{Semaphore, SemaphoreHandle};
use crate::telemetry::{EventHook, LockEvent, LockEvents, Telemetry};
use crate::watchdog::{LeaseEntry, Watchdog};

/// How long a shutdown waits for the acquires under way to see it.
const ACQUIRES_GRACE: Duration = Duration::from_secs(1);

/// What every lock handle of a client shares.
#[derive(Debug)]
pub(crate) struct ClientInner<B: LockBackend> {
    pub(crate) backend: Arc<B>,
    pub(crate) watchdog: Watchdog<B>,
    pub(crate) watchdog_lease: Duration,
    drift: ClockDrift,
    pub(crate) telemetry: Arc<Telemetry>,
    /// What this client says about itself, stored beside its leases.
    pub(crate) description: Arc<str>,
    namespace: Namespace,
    id: uuid::Uuid,
    /// `id` and a colon: what every owner token of this client begins with.
    owner_prefix: Box<str>,
    next_owner: AtomicU64,
    next_lease: AtomicU64,
    /// Releases retried or made after a guard was dropped, still under way.
    pub(crate) cleanups: Cleanups,
    /// Acquires at the backend right now: a shutdown waits for them to see it.
    pub(crate) acquiring: Cleanups,
    /// Set by [`LockClient::shutdown`]: no more grants.
    closed: watch::Sender<bool>,
    /// Every acquisition granted and not yet given back, by lease id, for
    /// [`LockClient::shutdown`] to release.
    held: StdMutex<LeaseIdMap<Weak<Acquisition<B>>>>,
}

impl<B: LockBackend> ClientInner<B> {
    /// The owner token of a new acquisition: unique to it, across processes.
    pub(crate) fn next_owner_token(&self) -> OwnerToken {
        OwnerToken::with_prefix(
            &self.owner_prefix,
            self.next_owner.fetch_add(1, Ordering::Relaxed),
        )
    }

    pub(crate) fn next_lease_id(&self) -> u64 {
        self.next_lease.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the client is shut down.
    pub(crate) async fn closed(&self) {
        let mut closed = self.closed.subscribe();
        // The sender lives in `self`: the channel cannot close while we wait.
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// How long this client counts on a lease of `ttl` from the send of the request
    /// that won, renewed or extended it: what the backend guarantees, less the
    /// clock-drift margin.
    pub(crate) fn validity(&self, ttl: Duration) -> Duration {
        self.drift.validity(ttl, self.backend.lease_validity(ttl))
    }

    /// The clock-drift margin kept back from a lease of `ttl`.
    pub(crate) fn drift_margin(&self, ttl: Duration) -> Duration {
        self.drift.margin(ttl)
    }

    /// Records a new grant, for [`LockClient::shutdown`].
    pub(crate) fn track(&self, acquisition: &Arc<Acquisition<B>>) {
        self.held_map()
            .insert(acquisition.lease().id, Arc::downgrade(acquisition));
    }

    /// Forgets a grant given back; `true` if it was still recorded (whoever takes it
    /// out releases it).
    pub(crate) fn untrack(&self, lease: &LeaseEntry<B>) -> bool {
        self.held_map().remove(&lease.id).is_some()
    }

    fn held_map(&self) -> std::sync::MutexGuard<'_, LeaseIdMap<Weak<Acquisition<B>>>> {
        // Single inserts and removes: a panic cannot leave it half done.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A lock client over one backend: makes lock handles in its namespace and runs the
/// one watchdog that renews all of their leases.
///
/// Cloning is cheap and shares everything. Leases kept by the watchdog need a tokio
/// runtime: the watchdog is a task on the runtime of the acquire that started it, and
/// moves to the runtime of another watched lease when that one shuts down.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{memory::MemoryBackend, DistributedLockExt, LockClient};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let client = LockClient::builder(MemoryBackend::new())
///     .namespace("billing")
///     .watchdog_lease(Duration::from_secs(10))
///     .build()?;
/// let guard = client.lock("invoice-run")?.acquire().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct LockClient<B: LockBackend> {
    inner: Arc<ClientInner<B>>,
}

impl<B: LockBackend> Clone for LockClient<B> {
    fn clone(&self) -> Self {
        LockClient {
            inner: self.inner.clone(),
        }
    }
}

impl<B: LockBackend> fmt::Debug for LockClient<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.inner.backend.name())
            .field("namespace", &self.inner.namespace)
            .field("id", &self.inner.id)
            .finish()
    }
}

impl<B: LockBackend> LockClient<B> {
    /// A client with the default namespace ([`DEFAULT_NAMESPACE`](crate::DEFAULT_NAMESPACE))
    /// and watchdog lease ([`DEFAULT_WATCHDOG_LEASE`]).
    pub fn new(backend: B) -> Self {
        LockClient::builder(backend).assemble(Namespace::default(), ClockDrift::default())
    }

    /// A builder to set the namespace, watchdog lease, clock drift, metrics labels and
    /// event callbacks.
    pub fn builder(backend: B) -> LockClientBuilder<B> {
        LockClientBuilder {
            backend: Arc::new(backend),
            namespace: None,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            clock_drift: None,
            lock_names_in_metrics: false,
            hooks: Vec::new(),
            description: None,
        }
    }

    /// The lock events of this client (acquired, renewal failed, renewed late, lost,
    /// released) from now on, for code that must react to them. Each subscriber gets
    /// every event; one that falls far behind skips the oldest.
    ///
    /// ```
    /// use lock_core::{memory::MemoryBackend, DistributedLockExt, LockClient, LockEventKind};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let client = LockClient::new(MemoryBackend::new());
    /// let mut events = client.events();
    /// client.lock("nightly")?.acquire().await?.release().await?;
    /// assert!(matches!(events.next().await.unwrap().what, LockEventKind::Acquired { .. }));
    /// assert!(matches!(events.next().await.unwrap().what, LockEventKind::Released { .. }));
    /// # Ok(()) }
    /// ```
    pub fn events(&self) -> LockEvents {
        self.inner.telemetry.subscribe()
    }

    fn key(&self, name: &str) -> Result<LockKey> {
        Ok(LockKey::new(
            self.inner.namespace.clone(),
            LockName::new(name)?,
        ))
    }

    /// A new owner of the exclusive lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    pub fn lock(&self, name: &str) -> Result<LockHandle<B>> {
        Ok(LockHandle::new(self.inner.clone(), self.key(name)?))
    }

    /// A new owner of the fair lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    pub fn fair_lock(&self, name: &str) -> Result<FairLockHandle<B>> {
        Ok(FairLockHandle::new(self.inner.clone(), self.key(name)?))
    }

    /// A new owner of the read-write lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    pub fn rw_lock(&self, name: &str) -> Result<ReadWriteLockHandle<B>> {
        Ok(ReadWriteLockHandle::new(
            self.inner.clone(),
            self.key(name)?,
        ))
    }

    /// A handle on the semaphore `name`, which admits `permits` holders at once.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name or
    /// a count outside 1 to [`MAX_PERMITS`](crate::MAX_PERMITS).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<SemaphoreHandle<B>> {
        SemaphoreHandle::new(self.inner.clone(), self.key(name)?, permits)
    }

    /// A handle on the election `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    pub fn election(&self, name: &str) -> Result<ElectionHandle<B>> {
        Ok(ElectionHandle::new(self.inner.clone(), self.key(name)?))
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// The namespace every lock of this client lives in.
    pub fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    /// This client's id, the first part of every owner token it hands out.
    pub fn id(&self) -> uuid::Uuid {
        self.inner.id
    }

    /// The lease the watchdog keeps; renewals go out every third of it.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.watchdog_lease
    }

    /// How many leases the watchdog is keeping alive right now.
    pub fn watched_leases(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Ends this client's work, for a program about to exit: after it, nothing this
    /// client took or queued for is left on the server.
    ///
    /// 1. The client takes no more locks: acquires in progress on any of its handles
    ///    end with [`Error::Closed`](crate::Error::Closed) (their waits are removed as
    ///    for a dropped acquire), and later ones fail with it at once. An acquire future
    ///    that is not polled again is waited for only a moment (a second): it ends with
    ///    `Closed`, leaving nothing, whenever it is polled or dropped.
    /// 2. Every lease it holds is released, whatever the hold counts; guards still
    ///    around then report not held, and their `release` says the lease was lost.
    /// 3. It waits for the clean-ups still under way: releases retried in the
    ///    background (only while the server may still hold their lease: a lease that
    ///    expires on its own is not retried past its end) and the backend's own
    ///    ([`LockBackend::settle`]). A backend shared with other clients is waited on
    ///    for theirs too.
    ///
    /// Without it, a program that returns from `main` right after dropping a guard or
    /// an acquire can leave a lease or a queue place to run out on its own, blocking
    /// others meanwhile.
    ///
    /// # Errors
    /// The first release that failed (the others are still made). A release that
    /// failed with a retryable error is retried in the background and waited for
    /// here, within the backend's limits; clones of the client are shut down too.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops the waiting, not the work; the client
    /// stays shut down.
    ///
    /// ```
    /// use lock_core::{memory::MemoryBackend, prelude::*, Error, LockClient};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let client = LockClient::new(MemoryBackend::new());
    /// let lock = client.lock("nightly-report")?;
    /// let guard = lock.acquire().await?;
    /// client.shutdown().await?;
    /// assert!(!guard.is_held());
    /// assert!(matches!(lock.try_acquire().await, Err(Error::Closed)));
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &self.inner;
        // Closed first: a grant recorded from now on sees it and gives itself back.
        inner.closed.send_replace(true);
        // Acquires under way end at once when next polled; once they have, whatever they
        // left at the backend is counted by its clean-ups, and any grant they got is
        // recorded. One never polled again (pinned in the caller's own `select!`) is not
        // waited for past a moment: it gives back what it gets when it is polled or
        // dropped.
        let _ = tokio::time::timeout(ACQUIRES_GRACE, inner.acquiring.settled()).await;
        let held: Vec<_> = inner.held_map().drain().map(|(_, a)| a).collect();
        let mut unreleased = Unreleased {
            rest: held.into_iter(),
            cleanups: &inner.cleanups,
        };
        let mut first_error = None;
        for acquisition in unreleased.rest.by_ref() {
            let Some(acquisition) = acquisition.upgrade() else {
                continue;
            };
            if let Err(err) = acquisition.release_for_shutdown().await {
                first_error.get_or_insert(err);
            }
        }
        inner.cleanups.settled().await;
        inner.backend.settle().await;
        first_error.map_or(Ok(()), Err)
    }
}

/// The grants a shutdown took out of the client's records and has not released yet.
/// Dropped with some left (the shutdown's future dropped midway), it releases them in
/// the background, counted as clean-ups: nothing else would, since they are no longer
/// recorded.
struct Unreleased<'a, B: LockBackend> {
    rest: std::vec::IntoIter<Weak<Acquisition<B>>>,
    cleanups: &'a Cleanups,
}

impl<B: LockBackend> Drop for Unreleased<'_, B> {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for acquisition in self.rest.by_ref().filter_map(|a| a.upgrade()) {
            self.cleanups.spawn_on(&runtime, async move {
                let _ = acquisition.release_for_shutdown().await;
            });
        }
    }
}

/// Sets up a [`LockClient`].
pub struct LockClientBuilder<B: LockBackend> {
    backend: Arc<B>,
    namespace: Option<String>,
    watchdog_lease: Duration,
    clock_drift: Option<f64>,
    lock_names_in_metrics: bool,
    hooks: Vec<EventHook>,
    description: Option<String>,
}

impl<B: LockBackend> fmt::Debug for LockClientBuilder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("backend", &self.backend)
            .field("namespace", &self.namespace)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("clock_drift", &self.clock_drift)
            .field("lock_names_in_metrics", &self.lock_names_in_metrics)
            .field("hooks", &self.hooks.len())
            .field("description", &self.description)
            .finish()
    }
}

impl<B: LockBackend> LockClientBuilder<B> {
    /// The prefix of every lock (default `"locks"`); checked by [`build`](Self::build).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The lease the watchdog keeps, renewed every third of it (default 30 s, at least
    /// 30 ms). A crashed client's locks are freed this long after its last renewal.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How fast the servers' clocks may run against this machine's, as a fraction
    /// (default 0.01, RedLock's factor; at most 0.5). A guard counts a lease of `ttl`
    /// as `ttl - (factor × ttl + 2 ms)` from the send of the request that won or renewed
    /// it, so a holder cut off from the server stops saying held before the server can
    /// hand the lock to someone else, even if the server's clock runs that much faster.
    /// The margin never takes more than half the lease. (NTP may slew a clock by 500
    /// ppm, 0.0005; a VM's clock can drift more.)
    pub fn clock_drift(mut self, factor: f64) -> Self {
        self.clock_drift = Some(factor);
        self
    }

    /// Whether metrics carry a `lock` label with the lock's namespace and name (default:
    /// no, as names can be unbounded: one series per lock ever taken). Backend and kind
    /// labels are always there.
    pub fn lock_names_in_metrics(mut self, on: bool) -> Self {
        self.lock_names_in_metrics = on;
        self
    }

    /// Calls `hook` with every lock event of the client, on the task where it happens
    /// (keep it quick: log, count, signal; spawn anything longer). For a stream of
    /// events instead, see [`LockClient::events`].
    pub fn on_event(mut self, hook: impl Fn(&LockEvent) + Send + Sync + 'static) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// What this client says about itself beside every lease it holds, where the
    /// backend stores it (default: `<host name> pid <process id>`), for operators reading
    /// [`DistributedLock::inspect`](crate::DistributedLock::inspect) or `lockctl status`.
    /// At most 256 bytes, no control characters (checked by [`build`](Self::build)).
    pub fn holder_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Checks the settings and makes the client.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad namespace,
    /// watchdog lease, clock drift or holder description.
    pub fn build(self) -> Result<LockClient<B>> {
        let namespace = match &self.namespace {
            Some(ns) => Namespace::new(ns)?,
            None => Namespace::default(),
        };
        let lease = check_duration(
            "watchdog lease",
            self.watchdog_lease,
            MIN_WATCHDOG_LEASE,
            MAX_DURATION,
        )?;
        let drift = match self.clock_drift {
            Some(factor) => ClockDrift::new(factor)?,
            None => ClockDrift::default(),
        };
        if let Some(description) = &self.description {
            crate::info::check_description(description)?;
        }
        Ok(LockClientBuilder {
            watchdog_lease: lease,
            ..self
        }
        .assemble(namespace, drift))
    }

    /// Makes the client from checked settings.
    fn assemble(self, namespace: Namespace, drift: ClockDrift) -> LockClient<B> {
        let (backend, watchdog_lease) = (self.backend, self.watchdog_lease);
        let id = uuid::Uuid::new_v4();
        let validity = drift.validity(watchdog_lease, backend.lease_validity(watchdog_lease));
        let telemetry = Arc::new(Telemetry::new(
            backend.name(),
            self.lock_names_in_metrics,
            self.hooks,
        ));
        LockClient {
            inner: Arc::new(ClientInner {
                watchdog: Watchdog::new(
                    backend.clone(),
                    watchdog_lease,
                    validity,
                    telemetry.clone(),
                ),
                cleanups: Cleanups::reported(backend.name()),
                backend,
                watchdog_lease,
                drift,
                telemetry,
                description: self
                    .description
                    .unwrap_or_else(crate::info::default_description)
                    .into(),
                namespace,
                id,
                owner_prefix: OwnerToken::prefix(&id),
                next_owner: AtomicU64::new(1),
                next_lease: AtomicU64::new(1),
                acquiring: Cleanups::default(),
                closed: watch::Sender::new(false),
                held: StdMutex::new(LeaseIdMap::default()),
            }),
        }
    }
}

/// An object-safe view of a [`LockClient`], so code (and the conformance suite) can
/// work with any backend picked at run time.
///
/// ```
/// use std::sync::Arc;
/// use lock_core::{memory::MemoryBackend, DistributedLockExt, LockClient, LockProvider};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let provider: Arc<dyn LockProvider> = Arc::new(LockClient::new(MemoryBackend::new()));
/// let lock = provider.lock("any-backend")?;
/// lock.acquire().await?.release().await?;
/// # Ok(()) }
/// ```
pub trait LockProvider: Send + Sync + fmt::Debug {
    /// The backend's short name.
    fn backend_name(&self) -> &'static str;
    /// What the backend supports.
    fn capabilities(&self) -> Capabilities;
    /// The namespace.
    fn namespace(&self) -> &Namespace;
    /// A new owner of the exclusive lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    fn lock(&self, name: &str) -> Result<Arc<dyn DistributedLock>>;
    /// A new owner of the fair lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    fn fair_lock(&self, name: &str) -> Result<Arc<dyn FairLock>>;
    /// A new owner of the read-write lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name.
    fn rw_lock(&self, name: &str) -> Result<Arc<dyn ReadWriteLock>>;
    /// A handle on the semaphore `name` of `permits` holders.
    ///
    /// # Errors
    /// As [`LockClient::semaphore`].
    fn semaphore(&self, name: &str, permits: u32) -> Result<Arc<dyn Semaphore>>;
    /// A handle on the election `name`.
    ///
    /// # Errors
    /// As [`LockClient::election`].
    fn election(&self, name: &str) -> Result<Arc<dyn Election>>;
    /// [`LockClient::shutdown`]: releases what the client holds, ends its waits and
    /// waits for the clean-ups under way.
    ///
    /// # Errors
    /// As [`LockClient::shutdown`].
    ///
    /// # Cancel safety
    /// As [`LockClient::shutdown`].
    fn shutdown(&self) -> BoxFuture<'_, Result<()>>;
}

impl<B: LockBackend> LockProvider for LockClient<B> {
    fn backend_name(&self) -> &'static str {
        self.inner.backend.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.backend.capabilities()
    }

    fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    fn lock(&self, name: &str) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(LockClient::lock(self, name)?))
    }

    fn fair_lock(&self, name: &str) -> Result<Arc<dyn FairLock>> {
        Ok(Arc::new(LockClient::fair_lock(self, name)?))
    }

    fn rw_lock(&self, name: &str) -> Result<Arc<dyn ReadWriteLock>> {
        Ok(Arc::new(LockClient::rw_lock(self, name)?))
    }

    fn semaphore(&self, name: &str, permits: u32) -> Result<Arc<dyn Semaphore>> {
        Ok(Arc::new(LockClient::semaphore(self, name, permits)?))
    }

    fn election(&self, name: &str) -> Result<Arc<dyn Election>> {
        Ok(Arc::new(LockClient::election(self, name)?))
    }

    fn shutdown(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(LockClient::shutdown(self))
    }
}
