//! [`EtcdBackend`]: the lock-core primitive on etcd.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnResponse,
    WatchOptions, WatchStream,
};
use lock_core::backend::{
    AcquireRequest, Cleanups, Grant, HeldLease, LockBackend, LossNotifier, Renewal,
};
use lock_core::{Capabilities, Error, LeaseLoss, LockFamily, LockInfo, LockKey, Result};

use crate::config::EtcdConfig;
use crate::error::{within, BACKEND};
use crate::gate::{GatePermit, GateSlot, Gates, Holder, Vigil};
use crate::key_watch::KeyWatch;
use crate::keys::Prefix;
use crate::lease::{Lease, Leases};
use crate::queries;
use crate::writes::Writes;

/// Compares (and reads) per transaction when the watchdog checks its keys; etcd
/// refuses transactions of more than 128 operations by default.
const CHECK_CHUNK: usize = 100;

/// What every clone of a backend shares.
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) config: EtcdConfig,
    pub(crate) leases: Leases,
    pub(crate) gates: Gates,
    /// The write locks held through this client: a read request of their owner is a
    /// downgrade.
    pub(crate) writes: Writes,
    /// Makes fair and read-write keys unique per acquisition.
    pub(crate) seq: AtomicU64,
    /// Delete events that woke a waiter (diagnostics: no herd).
    pub(crate) wakeups: AtomicU64,
    /// Keys of dropped acquires being removed, releases retried, leases revoked.
    pub(crate) cleanups: Cleanups,
}

impl Inner {
    pub(crate) async fn txn(&self, what: &'static str, txn: Txn) -> Result<TxnResponse> {
        let mut kv = self.client.kv_client();
        within(what, self.config.request_timeout(), kv.txn(txn)).await
    }

    /// A watch of `key` from now on (with `options`: of a range, or of some events
    /// only), once etcd confirmed it; with the revision etcd read just before
    /// registering it.
    pub(crate) async fn watch(
        &self,
        key: &[u8],
        options: Option<WatchOptions>,
    ) -> Result<(WatchStream, i64)> {
        let mut watches = self.client.watch_client();
        within("watch", self.config.request_timeout(), async {
            let mut stream = watches.watch(key, options).await?;
            match stream.message().await? {
                Some(reply) if reply.created() && !reply.canceled() => {
                    let revision = reply.header().map_or(0, |h| h.revision());
                    Ok((stream, revision))
                }
                other => Err(etcd_client::Error::WatchError(format!(
                    "watch not created: {other:?}"
                ))),
            }
        })
        .await
    }
}

/// The first pause before a vigil asks etcd again after a failure; it doubles up to
/// [`VIGIL_MAX_PAUSE`].
const VIGIL_PAUSE: Duration = Duration::from_millis(100);
const VIGIL_MAX_PAUSE: Duration = Duration::from_secs(2);

impl Vigil for Inner {
    async fn is_there(&self, holder: &Holder) -> Result<bool> {
        let mut kv = self.client.kv_client();
        let options = GetOptions::new().with_keys_only();
        let timeout = self.config.request_timeout();
        let found = within(
            "check holder",
            timeout,
            kv.get(holder.key.as_str(), Some(options)),
        )
        .await?;
        Ok(found
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == holder.revision))
    }

    async fn gone(&self, holder: &Holder) {
        let mut pause = VIGIL_PAUSE;
        loop {
            // Watch from now, then check the key is still there: it may have gone
            // before the watch existed. The key's only writers after its grant are its
            // own puts, so any deletion means it is gone.
            let watched = match self.watch(holder.key.as_bytes(), None).await {
                Ok((watch, _)) => match self.is_there(holder).await {
                    Ok(true) => Some(watch),
                    Ok(false) => return,
                    Err(error) => {
                        tracing::debug!(key = %holder.key, %error, "could not look at a holder's key; trying again");
                        None
                    }
                },
                Err(error) => {
                    tracing::debug!(key = %holder.key, %error, "could not watch a holder's key; trying again");
                    None
                }
            };
            if let Some(mut watch) = watched {
                pause = VIGIL_PAUSE;
                loop {
                    match watch.message().await {
                        Ok(Some(reply)) if !reply.canceled() => {
                            let deleted = reply
                                .events()
                                .iter()
                                .any(|e| e.event_type() == EventType::Delete);
                            if deleted {
                                return;
                            }
                        }
                        // Cancelled, closed or failed: watch again.
                        _ => break,
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(VIGIL_MAX_PAUSE);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Nothing is held any more (guards keep their backend alive): revoke the
        // session so waiters elsewhere need not wait for its TTL.
        let sessions = self.leases.sessions_now();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if sessions.is_empty() {
            return;
        }
        let client = self.client.clone();
        let timeout = self.config.request_timeout();
        runtime.spawn(async move {
            for lease in sessions {
                let _ = lease.revoke(&client, timeout).await;
            }
        });
    }
}

/// What the backend keeps with each granted lock: its key, the etcd lease it hangs
/// on, and (exclusive locks on the session lease) this owner's turn on the key.
pub struct EtcdLease {
    key: String,
    /// The key's create revision: a guarded change touches only this key, never a
    /// newer one of the same name and lease (etcd #22082). After a wait it differs
    /// from the fencing token, which is drawn at grant time.
    revision: i64,
    /// What the key holds: rewritten when an extend moves it to a new lease.
    value: StdMutex<Vec<u8>>,
    /// Shared with the key's watch, which asks whether it is gone.
    lease: Arc<StdMutex<Arc<Lease>>>,
    gate: Arc<GateSlot>,
    /// Set once its owner releases it, so a vigil that sees the key go takes that for
    /// the release it is, not a loss.
    releasing: Arc<AtomicBool>,
    loss: LossNotifier,
    /// Tells the guard at once if the key is deleted behind its back.
    watch: KeyWatch,
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Single assignments only.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl fmt::Debug for EtcdLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLease")
            .field("key", &self.key)
            .field("lease", &format_args!("{:x}", self.lease_id()))
            .finish()
    }
}

impl EtcdLease {
    pub(crate) fn new(
        inner: &Arc<Inner>,
        key: String,
        revision: i64,
        value: Vec<u8>,
        lease: Arc<Lease>,
        gate: Option<GatePermit>,
        loss: LossNotifier,
    ) -> Self {
        let slot: Arc<GateSlot> = Arc::new(StdMutex::new(None));
        let releasing = Arc::new(AtomicBool::new(false));
        let holder = Holder::new(
            key.clone(),
            revision,
            loss.clone(),
            releasing.clone(),
            Arc::downgrade(&slot),
        );
        if let Some(permit) = gate {
            // Waiting owners of this client keep watch over this grant from now on.
            permit.announce(holder.clone());
            *lock(&slot) = Some(permit);
        }
        lease.open_on_loss(Arc::downgrade(&slot));
        let lease = Arc::new(StdMutex::new(lease));
        EtcdLease {
            key,
            revision,
            value: StdMutex::new(value),
            watch: KeyWatch::start(inner, holder, lease.clone()),
            lease,
            gate: slot,
            releasing,
            loss,
        }
    }

    pub(crate) fn into_parts(self) -> (String, Arc<Lease>, Option<GatePermit>) {
        let lease = lock(&self.lease).clone();
        let gate = lock(&self.gate).take();
        (self.key, lease, gate)
    }

    /// The lock's key in etcd (`<prefix>/<lease id hex>` for an exclusive lock).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The id of the etcd lease the key is attached to.
    pub fn lease_id(&self) -> i64 {
        lock(&self.lease).id()
    }

    /// The key's create revision.
    pub(crate) fn revision(&self) -> i64 {
        self.revision
    }

    fn lease(&self) -> Arc<Lease> {
        lock(&self.lease).clone()
    }

    /// Ends this owner's turn on the key, letting the next owner of this client in.
    fn end_turn(&self) {
        lock(&self.gate).take();
    }
}

/// Locks on an etcd v3 cluster, in the layout of etcd's own `concurrency.Mutex`.
///
/// Cloning is cheap and shares the connection, the session lease and the gates. See
/// the [crate docs](crate) for the recipe, the key layout and the round trips.
///
/// ```no_run
/// use lock_core::{DistributedLockExt, LockClient};
/// use lock_etcd::{EtcdBackend, EtcdConfig};
///
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// let backend = EtcdBackend::connect(EtcdConfig::from_url("etcd://127.0.0.1:2379")?).await?;
/// let client = LockClient::new(backend);
/// let guard = client.lock("orders/42")?.acquire().await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl EtcdBackend {
    /// Connects to the cluster and checks that it answers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a setting that is out of range or that
    /// etcd-client refuses;
    /// [`Error::Unavailable`] if no endpoint answers within the connect and request
    /// timeouts; [`Error::Backend`] if etcd refuses the credentials.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is held yet.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        config.validate()?;
        let options = config.client_options()?;
        let limit = config.connect_timeout() + config.request_timeout();
        let client = within(
            "connect",
            limit,
            Client::connect(config.endpoints(), Some(options)),
        )
        .await?;
        let backend = EtcdBackend {
            inner: Arc::new(Inner {
                client,
                config,
                leases: Leases::default(),
                gates: Gates::default(),
                writes: Writes::default(),
                seq: AtomicU64::new(1),
                wakeups: AtomicU64::new(0),
                cleanups: Cleanups::default(),
            }),
        };
        backend.ping().await?;
        Ok(backend)
    }

    /// [`EtcdBackend::connect`] with [`EtcdConfig::from_url`].
    ///
    /// # Errors
    /// As [`EtcdBackend::connect`], and [`Error::InvalidArgument`] for a bad URL.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is held yet.
    pub async fn connect_url(url: &str) -> Result<Self> {
        EtcdBackend::connect(EtcdConfig::from_url(url)?).await
    }

    /// Asks the cluster for its status (one request).
    ///
    /// # Errors
    /// [`Error::Unavailable`] if it does not answer in time.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn ping(&self) -> Result<()> {
        let mut maintenance = self.inner.client.maintenance_client();
        let limit = self.inner.config.connect_timeout() + self.inner.config.request_timeout();
        within("status", limit, maintenance.status())
            .await
            .map(drop)
    }

    /// The settings this backend was made with.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The etcd-client handle, sharing this backend's connection.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// How many times a waiter of this backend was woken by the deletion of the key it
    /// waited behind. Each release wakes at most the waiters directly behind the
    /// released key (one, for exclusive and fair locks): no thundering herd.
    pub fn waiter_wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// The id of the session lease that watchdog-kept locks of `watchdog_lease` hang
    /// on, if one is live (for operators and tests).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads local state.
    pub async fn session_lease_id(&self, watchdog_lease: Duration) -> Option<i64> {
        self.inner.leases.session_id(watchdog_lease).await
    }

    fn not_owner(key: &LockKey) -> Error {
        Error::not_owner(key)
    }

    /// Moves a lock's key to a new lease of `ttl` (its create revision, and so its
    /// place and fencing token, stay): how a lease is extended, since an etcd lease
    /// keeps its TTL and may carry other locks.
    async fn move_to_new_lease(
        &self,
        held: &HeldLease<EtcdLease>,
        ttl: Duration,
    ) -> Result<Renewal> {
        let inner = &self.inner;
        let timeout = inner.config.request_timeout();
        let new = inner.leases.fixed(&inner.client, timeout, ttl).await?;
        let data = &held.data;
        let txn = Txn::new()
            .when([Compare::create_revision(
                data.key.as_str(),
                CompareOp::Equal,
                data.revision,
            )])
            .and_then([TxnOp::put(
                data.key.as_str(),
                lock(&data.value).clone(),
                Some(PutOptions::new().with_lease(new.id())),
            )]);
        let mut unsettled = UnsettledMove {
            inner,
            held,
            new: Some(new.clone()),
        };
        let outcome = inner.txn("extend", txn).await;
        match outcome {
            Err(error) => {
                tracing::debug!(key = %data.key, %error, "an extend's move to a new lease may or may not have been made; giving the lock up");
                unsettled.give_up();
                // The guard reads lost from here; the error says why.
                Err(error)
            }
            Ok(reply) if reply.succeeded() => {
                unsettled.settled();
                new.watch(data.loss.clone());
                let old = std::mem::replace(&mut *lock(&data.lease), new);
                if !old.is_session() {
                    spawn_revoke(inner, old);
                }
                Ok(Renewal::Renewed)
            }
            Ok(_) => {
                unsettled.settled();
                spawn_revoke(inner, new);
                data.end_turn();
                inner.writes.forget(held);
                Ok(Renewal::Lost)
            }
        }
    }

    /// Which of `leases` still have their key with their create revision: one
    /// transaction per [`CHECK_CHUNK`] leases, all compares in the common case.
    async fn keys_present(&self, leases: &[&HeldLease<EtcdLease>]) -> Result<Vec<bool>> {
        let mut present = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(CHECK_CHUNK) {
            let compares: Vec<Compare> = chunk
                .iter()
                .map(|l| {
                    Compare::create_revision(l.data.key.as_str(), CompareOp::Equal, l.data.revision)
                })
                .collect();
            let reads: Vec<TxnOp> = chunk
                .iter()
                .map(|l| {
                    TxnOp::get(
                        l.data.key.as_str(),
                        Some(GetOptions::new().with_keys_only()),
                    )
                })
                .collect();
            let reply = self
                .inner
                .txn("check keys", Txn::new().when(compares).or_else(reads))
                .await?;
            if reply.succeeded() {
                present.extend(std::iter::repeat_n(true, chunk.len()));
                continue;
            }
            let ops = reply.op_responses();
            let found = queries::gets(&ops);
            for (i, l) in chunk.iter().enumerate() {
                let there = found
                    .get(i)
                    .and_then(|kvs| kvs.first())
                    .is_some_and(|kv| kv.create_revision() == l.data.revision);
                present.push(there);
            }
        }
        Ok(present)
    }
}

/// An extend's move of a key to a new lease, sent and not answered: the key may hang
/// on either lease now, and nobody keeps the new one. Given up (the move failed with
/// its outcome unknown, or the extend was dropped meanwhile), the lock is reported lost
/// first, before anyone else can be granted it, then its key is deleted if it is still
/// this grant's and both leases that carried only it are revoked, in the background.
/// Any failure counts as unknown: one that surely came before the send cannot be told
/// apart, and giving up a lock costs less than two owners.
struct UnsettledMove<'a> {
    inner: &'a Arc<Inner>,
    held: &'a HeldLease<EtcdLease>,
    new: Option<Arc<Lease>>,
}

impl UnsettledMove<'_> {
    /// The move was answered: the caller takes it from here.
    fn settled(&mut self) {
        self.new = None;
    }

    fn give_up(&mut self) {
        let Some(new) = self.new.take() else {
            return;
        };
        let data = &self.held.data;
        // This owner's turn is kept until the key is gone, as a failed release keeps it:
        // taken before the loss is told, which lets the other owners' vigil hand it on.
        let gate = lock(&data.gate).take();
        data.loss.notify(LeaseLoss::Revoked);
        data.watch.stop();
        self.inner.writes.forget(self.held);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Both leases run out on their own.
            return;
        };
        let old = data.lease();
        let (inner, key, revision) = (self.inner.clone(), data.key.clone(), data.revision);
        self.inner.cleanups.spawn_on(&runtime, async move {
            delete_with_retries(&inner, "give up a moved key", &key, revision, true).await;
            drop(gate);
            let timeout = inner.config.request_timeout();
            for lease in [Some(new), (!old.is_session()).then_some(old)].into_iter().flatten() {
                if let Err(error) = lease.revoke(&inner.client, timeout).await {
                    tracing::debug!(%error, "could not revoke an unused lease; it expires on its own");
                }
            }
        });
    }
}

impl Drop for UnsettledMove<'_> {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Deletes `key` if it is still the one created at `revision`, trying up to eight
/// times with backoff: a key left behind would block others for as long as its lease
/// lives. `at_once`: the first try goes out without a pause (none failed before it).
async fn delete_with_retries(
    inner: &Inner,
    what: &'static str,
    key: &str,
    revision: i64,
    at_once: bool,
) {
    for attempt in 0..8u32 {
        if attempt > 0 || !at_once {
            tokio::time::sleep(Duration::from_millis(200) * 2u32.pow(attempt.min(4))).await;
        }
        if inner
            .txn(what, queries::delete_if(key.as_bytes(), revision))
            .await
            .is_ok()
        {
            return;
        }
    }
}

fn spawn_revoke(inner: &Inner, lease: Arc<Lease>) {
    let client = inner.client.clone();
    let timeout = inner.config.request_timeout();
    inner
        .cleanups
        .spawn_on(&tokio::runtime::Handle::current(), async move {
            if let Err(error) = lease.revoke(&client, timeout).await {
                tracing::debug!(%error, "could not revoke an unused lease; it expires on its own");
            }
        });
}

impl LockBackend for EtcdBackend {
    type Lease = EtcdLease;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn location(&self) -> String {
        self.inner.config.endpoints().join(",")
    }

    async fn settle(&self) {
        self.inner.cleanups.settled().await;
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<EtcdLease>>> {
        crate::acquire::acquire(&self.inner, req).await
    }

    async fn release(&self, held: &HeldLease<EtcdLease>) -> Result<()> {
        // From here on a read request of this owner is no downgrade.
        self.inner.writes.forget(held);
        let data = &held.data;
        data.releasing.store(true, Ordering::Release);
        data.watch.stop();
        let revision = data.revision;
        let outcome = self
            .inner
            .txn("release", queries::delete_if(data.key.as_bytes(), revision))
            .await;
        let lease = data.lease();
        match outcome {
            Ok(reply) => {
                data.end_turn();
                if !lease.is_session() {
                    // It carried only this key.
                    spawn_revoke(&self.inner, lease);
                }
                if reply.succeeded() {
                    Ok(())
                } else {
                    Err(Self::not_owner(&held.key))
                }
            }
            Err(err) => {
                // Keep the key from blocking others for as long as the session lives:
                // retry in the background, keeping this owner's turn until done.
                let inner = self.inner.clone();
                let key = data.key.clone();
                let gate = lock(&data.gate).take();
                let cleanups = self.inner.cleanups.clone();
                cleanups.spawn_on(&tokio::runtime::Handle::current(), async move {
                    delete_with_retries(&inner, "release retry", &key, revision, false).await;
                    drop(gate);
                });
                Err(err)
            }
        }
    }

    async fn renew(&self, leases: &[&HeldLease<EtcdLease>], ttl: Duration) -> Result<Vec<Renewal>> {
        // A single lease with its own TTL, or a session lock asked for another length,
        // is `LockGuard::extend`: the watchdog renews session locks with their own
        // length. (An extend by exactly the watchdog lease renews like the watchdog.)
        if let [held] = leases {
            let lease = held.data.lease();
            if !lease.is_session() || lease_session_for(&lease) != Some(ttl) {
                return Ok(vec![self.move_to_new_lease(held, ttl).await?]);
            }
        }
        // The watchdog's tick: one keep-alive per session lease (a client has one)
        // and one check that the keys are still there, side by side.
        let mut sessions: HashMap<i64, Arc<Lease>> = HashMap::new();
        for held in leases {
            let lease = held.data.lease();
            if lease.is_session() {
                sessions.entry(lease.id()).or_insert(lease);
            }
        }
        let inner = &self.inner;
        let timeout = inner.config.request_timeout();
        let keep_alives =
            futures::future::join_all(sessions.values().map(|lease| async {
                (lease.id(), lease.keep_alive(&inner.client, timeout).await)
            }));
        let (alive, present) = futures::join!(keep_alives, self.keys_present(leases));
        let mut live = HashMap::new();
        for (id, outcome) in alive {
            live.insert(id, outcome?);
        }
        let present = present?;
        Ok(leases
            .iter()
            .zip(present)
            .map(|(held, there)| {
                let id = held.data.lease_id();
                if there && live.get(&id).copied().unwrap_or(true) {
                    Renewal::Renewed
                } else {
                    held.data.end_turn();
                    self.inner.writes.forget(held);
                    Renewal::Lost
                }
            })
            .collect())
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        let prefix = Prefix::new(key, family);
        let mut kv = self.inner.client.kv_client();
        let timeout = self.inner.config.request_timeout();
        // Whoever is first among the keys holds the lock, so any key means locked.
        let options = GetOptions::new().with_prefix().with_keys_only();
        let found = within("is_locked", timeout, kv.get(prefix.range(), Some(options))).await?;
        Ok(found.kvs().iter().any(|kv| prefix.is_contender(kv.key())))
    }

    async fn force_unlock_holder(
        &self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> Result<bool> {
        crate::inspect::force_unlock_holder(&self.inner, key, family, fence).await
    }

    async fn inspect(&self, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
        crate::inspect::inspect(&self.inner, key, family).await
    }

    async fn proclaim(&self, held: &HeldLease<EtcdLease>, value: &str) -> Result<()> {
        let data = &held.data;
        // First, so that an `extend` moving the key to a new lease from now on writes
        // the new value too.
        *lock(&data.value) = value.as_bytes().to_vec();
        let txn = crate::queries::proclaim(data.key.as_bytes(), data.revision, value.as_bytes());
        if self.inner.txn("proclaim", txn).await?.succeeded() {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                name: held.key.name().to_string(),
            })
        }
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        crate::inspect::force_unlock(&self.inner, key, family).await
    }
}

fn lease_session_for(lease: &Lease) -> Option<Duration> {
    lease.session_for()
}
