//! A backend for the machinery's tests: every call goes to a [`MemoryBackend`], counted,
//! and a test can make calls fail or make their replies late, to force the timings the
//! machinery must survive (a lost reply, a renewal answered after an `extend`).

#![allow(dead_code)] // each test file uses a part of it

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Grant, HeldLease, LockBackend, Renewal};
use lock_core::memory::MemoryBackend;
use lock_core::{Capabilities, Error, LockFamily, LockInfo, LockKey, Result};
use tokio::sync::watch;

/// How many calls of each kind reached the backend.
#[derive(Debug, Default)]
pub struct Calls {
    pub acquire: AtomicUsize,
    pub release: AtomicUsize,
    pub renew: AtomicUsize,
    /// How many leases each renew call carried.
    pub renew_sizes: Mutex<Vec<usize>>,
    /// For each grant, whether its loss notifier said live as the backend handed it
    /// over (a backend may act on that at once, as etcd's turns of one client do).
    pub live_at_grant: Mutex<Vec<bool>>,
}

/// What a test has asked the backend to do differently.
#[derive(Debug)]
struct Hooks {
    /// Releases that fail with `Unavailable` before reaching the backend.
    failing_releases: AtomicUsize,
    /// Renewals with this ttl take effect at once but answer only once the gate opens.
    held_ttl: Mutex<Option<Duration>>,
    gate: watch::Sender<bool>,
    /// Renewals held at the gate now.
    held_now: AtomicUsize,
    /// Added to every renewal's reply, after the renewal took effect.
    reply_delay: Mutex<Duration>,
    capabilities: Mutex<Option<Capabilities>>,
    /// Taken off every lease's validity (as RedLock takes off its drift margin).
    lease_margin: Mutex<Duration>,
    /// Renewals that fail with `Unavailable` before reaching the backend.
    failing_renewals: AtomicUsize,
    /// Renewals answered `Lost` for every lease, the backend unchanged and no loss
    /// notified (a server that lost its data in a failover).
    losing_renewals: AtomicUsize,
    /// How long a renewal takes to reach the backend.
    renewal_request_delay: Mutex<Duration>,
    /// Lock names whose leases' renewals go unanswered, the others' answered (a node
    /// of a cluster down).
    unanswered_names: Mutex<Vec<String>>,
    /// How long a release's reply takes to come back after the release took effect.
    release_reply_delay: Mutex<Duration>,
    /// How long a release takes to reach the backend.
    release_request_delay: Mutex<Duration>,
    /// Every release fails with `Unavailable` (a backend that is down).
    releases_down: std::sync::atomic::AtomicBool,
    /// How long a grant takes to reach the backend (a server that stalled).
    grant_request_delay: Mutex<Duration>,
    /// How long a grant's reply takes to come back after the grant took effect.
    grant_reply_delay: Mutex<Duration>,
}

/// A [`MemoryBackend`] behind a counting, fault-injecting wrapper. Clones share all.
#[derive(Debug, Clone)]
pub struct Wrapped {
    inner: MemoryBackend,
    pub calls: Arc<Calls>,
    hooks: Arc<Hooks>,
}

impl Default for Wrapped {
    fn default() -> Self {
        Wrapped {
            inner: MemoryBackend::new(),
            calls: Arc::default(),
            hooks: Arc::new(Hooks {
                failing_releases: AtomicUsize::new(0),
                held_ttl: Mutex::new(None),
                gate: watch::Sender::new(false),
                held_now: AtomicUsize::new(0),
                reply_delay: Mutex::new(Duration::ZERO),
                capabilities: Mutex::new(None),
                lease_margin: Mutex::new(Duration::ZERO),
                failing_renewals: AtomicUsize::new(0),
                losing_renewals: AtomicUsize::new(0),
                renewal_request_delay: Mutex::new(Duration::ZERO),
                unanswered_names: Mutex::new(Vec::new()),
                release_reply_delay: Mutex::new(Duration::ZERO),
                release_request_delay: Mutex::new(Duration::ZERO),
                grant_request_delay: Mutex::new(Duration::ZERO),
                grant_reply_delay: Mutex::new(Duration::ZERO),
                releases_down: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }
}

impl Wrapped {
    /// The next `n` releases fail with a retryable error (a lost reply).
    pub fn fail_next_releases(&self, n: usize) {
        self.hooks.failing_releases.store(n, Ordering::SeqCst);
    }

    /// The next `n` renewals fail with a retryable error, changing nothing.
    pub fn fail_next_renewals(&self, n: usize) {
        self.hooks.failing_renewals.store(n, Ordering::SeqCst);
    }

    /// The next `n` renewals answer `Lost` for every lease they carry, without a loss
    /// notified: a backend that lost them and has no notifier.
    pub fn lose_next_renewals(&self, n: usize) {
        self.hooks.losing_renewals.store(n, Ordering::SeqCst);
    }

    /// Renewals answer [`Renewal::Unanswered`] for the leases of lock `name`, changing
    /// nothing for them, and renew the others.
    pub fn leave_renewals_unanswered(&self, name: &str) {
        self.hooks
            .unanswered_names
            .lock()
            .unwrap()
            .push(name.to_owned());
    }

    /// Every renewal reaches the backend `delay` after it was sent.
    pub fn delay_renewal_requests(&self, delay: Duration) {
        *self.hooks.renewal_request_delay.lock().unwrap() = delay;
    }

    /// Every grant reaches the backend `delay` after it was sent.
    pub fn delay_grant_requests(&self, delay: Duration) {
        *self.hooks.grant_request_delay.lock().unwrap() = delay;
    }

    /// Every grant's reply comes back `delay` after the grant took effect.
    pub fn delay_grant_replies(&self, delay: Duration) {
        *self.hooks.grant_reply_delay.lock().unwrap() = delay;
    }

    /// Every release reaches the backend `delay` after it was sent.
    pub fn delay_release_requests(&self, delay: Duration) {
        *self.hooks.release_request_delay.lock().unwrap() = delay;
    }

    /// Every release fails with a retryable error from now on (`false` ends it).
    pub fn releases_down(&self, down: bool) {
        self.hooks.releases_down.store(down, Ordering::SeqCst);
    }

    /// Every release's reply arrives `delay` after the release took effect.
    pub fn delay_release_replies(&self, delay: Duration) {
        *self.hooks.release_reply_delay.lock().unwrap() = delay;
    }

    /// Renewals asking for `ttl` from now on take effect at once, but their replies wait
    /// until [`Wrapped::answer_renewals`].
    pub fn hold_renewal_replies(&self, ttl: Duration) {
        *self.hooks.held_ttl.lock().unwrap() = Some(ttl);
        self.hooks.gate.send_replace(false);
    }

    /// Lets every held renewal reply go.
    pub fn answer_renewals(&self) {
        *self.hooks.held_ttl.lock().unwrap() = None;
        self.hooks.gate.send_replace(true);
    }

    /// How many renewal replies are held now.
    pub fn held_renewals(&self) -> usize {
        self.hooks.held_now.load(Ordering::SeqCst)
    }

    /// Every renewal's reply arrives `delay` after the renewal took effect.
    pub fn delay_renewal_replies(&self, delay: Duration) {
        *self.hooks.reply_delay.lock().unwrap() = delay;
    }

    /// Guarantees every lease `margin` less than its ttl.
    pub fn with_lease_margin(self, margin: Duration) -> Self {
        *self.hooks.lease_margin.lock().unwrap() = margin;
        self
    }

    /// Reports these capabilities instead of the memory backend's.
    pub fn with_capabilities(self, capabilities: Capabilities) -> Self {
        *self.hooks.capabilities.lock().unwrap() = Some(capabilities);
        self
    }
}

impl LockBackend for Wrapped {
    type Lease = ();

    fn name(&self) -> &'static str {
        "wrapped-memory"
    }

    fn capabilities(&self) -> Capabilities {
        self.hooks
            .capabilities
            .lock()
            .unwrap()
            .unwrap_or_else(|| self.inner.capabilities())
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn lease_validity(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(*self.hooks.lease_margin.lock().unwrap())
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<()>>> {
        self.calls.acquire.fetch_add(1, Ordering::SeqCst);
        let loss = req.loss.clone();
        let request_delay = *self.hooks.grant_request_delay.lock().unwrap();
        if !request_delay.is_zero() {
            tokio::time::sleep(request_delay).await;
        }
        let mut grant = self.inner.acquire(req).await?;
        let reply_delay = *self.hooks.grant_reply_delay.lock().unwrap();
        if !reply_delay.is_zero() {
            tokio::time::sleep(reply_delay).await;
        }
        if let Some(grant) = &mut grant {
            // A client over a network counts from when it sent the winning attempt.
            grant.started_at -= request_delay;
            self.calls
                .live_at_grant
                .lock()
                .unwrap()
                .push(loss.is_live());
        }
        Ok(grant)
    }

    async fn release(&self, lease: &HeldLease<()>) -> Result<()> {
        self.calls.release.fetch_add(1, Ordering::SeqCst);
        let failing =
            self.hooks
                .failing_releases
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() || self.hooks.releases_down.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                backend: "wrapped-memory",
                source: "the reply was lost".into(),
            });
        }
        let delay = *self.hooks.release_request_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let released = self.inner.release(lease).await;
        let delay = *self.hooks.release_reply_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        released
    }

    async fn renew(&self, leases: &[&HeldLease<()>], ttl: Duration) -> Result<Vec<Renewal>> {
        self.calls.renew.fetch_add(1, Ordering::SeqCst);
        self.calls.renew_sizes.lock().unwrap().push(leases.len());
        let failing =
            self.hooks
                .failing_renewals
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(Error::Unavailable {
                backend: "wrapped-memory",
                source: "no answer".into(),
            });
        }
        let delay = *self.hooks.renewal_request_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let losing =
            self.hooks
                .losing_renewals
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        let unanswered = self.hooks.unanswered_names.lock().unwrap().clone();
        let answered =
            |lease: &&HeldLease<()>| !unanswered.iter().any(|n| n == lease.key.name().as_str());
        let renewed = if losing.is_ok() {
            Ok(vec![Renewal::Lost; leases.len()])
        } else {
            let reached: Vec<&HeldLease<()>> = leases.iter().copied().filter(answered).collect();
            self.inner.renew(&reached, ttl).await.map(|renewed| {
                let mut renewed = renewed.into_iter();
                leases
                    .iter()
                    .map(|lease| match answered(lease) {
                        true => renewed.next().unwrap_or(Renewal::Lost),
                        false => Renewal::Unanswered,
                    })
                    .collect()
            })
        };
        let delay = *self.hooks.reply_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if *self.hooks.held_ttl.lock().unwrap() == Some(ttl) {
            self.hooks.held_now.fetch_add(1, Ordering::SeqCst);
            let mut gate = self.hooks.gate.subscribe();
            let _ = gate.wait_for(|open| *open).await;
            self.hooks.held_now.fetch_sub(1, Ordering::SeqCst);
        }
        renewed
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
