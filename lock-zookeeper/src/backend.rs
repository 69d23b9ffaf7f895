//! [`ZkBackend`]: the lock-core primitive on ZooKeeper.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Capabilities, Error, LockFamily, LockInfo, LockKey, LockKind, Result};

use lock_core::backend::{AcquireRequest, Grant, HeldLease, LockBackend, OwnerToken, Renewal};
use zookeeper_client::{Client, Error as ZkError, Stat};

use crate::config::ZkConfig;
use crate::error::{self, is_connection_loss, BACKEND};
use crate::lease::{LeaseFlags, ZkLease};
use crate::node_data;
use crate::path;
use crate::recipe;
use crate::session::{ConnectionState, Sessions};
use crate::stats::{Counters, ZkStats};

/// Locks on ZooKeeper, for [`LockClient`](lock_core::LockClient).
///
/// One backend is one ZooKeeper session: every lock taken through it is an ephemeral
/// node of that session, so the session is the lease. There is no renewal traffic per
/// lock; the client's pings keep the session, and the watchdog's renewals are answered
/// from what this backend knows of the session and its nodes. Cloning shares the session.
///
/// * **Loss.** A holder's node deleted behind its back, or the session expiring, is
///   reported to every guard at once ([`LockGuard::lost`](lock_core::LockGuard::lost));
///   a node deleted within 0.2 s of its grant, when the watch on it is set.
/// * **Uncertainty.** While the connection is lost the session may live on:
///   [`connection_state`](Self::connection_state) says [`ConnectionState::Suspended`]
///   and renewals fail (so guards stop being renewed locally). At most 4/5 of a session
///   timeout after the last reply from the server (at least a fifth before the server
///   may expire the session), the session is declared lost and guards report
///   [`LeaseLoss::SessionLost`](lock_core::LeaseLoss::SessionLost).
/// * **Fixed leases** are not supported ([`Capabilities::fixed_lease`] is false): a
///   node lives as long as its session, and an honest expiry while the client lives
///   would need a timer that ZooKeeper does not run. Use the session timeout instead.
///
/// ```no_run
/// use lock_core::{DistributedLockExt, LockClient};
/// use lock_zookeeper::ZkBackend;
///
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// let backend = ZkBackend::connect_url("zk://127.0.0.1:2181/apps?session_timeout_ms=10000").await?;
/// let client = LockClient::new(backend);
/// let guard = client.lock("orders")?.acquire().await?; // node under /apps/locks/orders
/// println!("fencing token (a zxid): {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ZkBackend {
    inner: Arc<Inner>,
}

/// What the clones of a backend share.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) sessions: Sessions,
    pub(crate) counters: Counters,
    /// Write locks held through this backend, by read-write lock path and owner, with
    /// their node: a read request of their owner is a downgrade.
    writers: Mutex<WriterMap>,
    /// Contender nodes of dropped acquires being deleted.
    pub(crate) cleanups: lock_core::backend::Cleanups,
}

/// Read-write lock path and owner → the write lock's flags and node.
type WriterMap = HashMap<(String, OwnerToken), (Arc<LeaseFlags>, String)>;

impl Inner {
    pub(crate) fn secured(&self) -> bool {
        self.sessions.config().digest().is_some()
    }

    fn writers(&self) -> std::sync::MutexGuard<'_, WriterMap> {
        // Single inserts and removes only: nothing half-done to poison.
        self.writers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node of the write lock `owner` holds on the read-write lock at `dir`, if
    /// this backend knows of one that is not lost.
    pub(crate) fn held_write(&self, dir: &str, owner: &OwnerToken) -> Option<String> {
        self.writers()
            .get(&(dir.to_owned(), owner.clone()))
            .filter(|(flags, _)| !flags.lost.load(Ordering::Acquire))
            .map(|(_, node)| node.clone())
    }

    pub(crate) fn register_writer(
        &self,
        dir: &str,
        owner: &OwnerToken,
        flags: &Arc<LeaseFlags>,
        node: &str,
    ) {
        self.writers().insert(
            (dir.to_owned(), owner.clone()),
            (flags.clone(), node.to_owned()),
        );
    }

    fn unregister_writer(&self, lease: &HeldLease<ZkLease>) {
        if lease.kind != LockKind::Write {
            return;
        }
        let dir = path::lock_path(&lease.key, LockFamily::ReadWrite);
        let mut writers = self.writers();
        let key = (dir, lease.owner.clone());
        if writers
            .get(&key)
            .is_some_and(|(flags, _)| Arc::ptr_eq(flags, &lease.data.flags))
        {
            writers.remove(&key);
        }
    }
}

impl fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkBackend")
            .field("config", self.inner.sessions.config())
            .field("state", &self.connection_state())
            .finish()
    }
}

impl ZkBackend {
    /// A backend that connects on first use (and again whenever a session has ended).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a setting of `config` that is out of range.
    pub fn new(config: ZkConfig) -> Result<Self> {
        config.validate()?;
        Ok(ZkBackend {
            inner: Arc::new(Inner {
                sessions: Sessions::new(config),
                counters: Counters::default(),
                writers: Mutex::new(HashMap::new()),
                cleanups: lock_core::backend::Cleanups::default(),
            }),
        })
    }

    /// A backend with its session established.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a setting of `config` that is out of range;
    /// [`Error::Unavailable`] if ZooKeeper cannot be reached within the connect timeout;
    /// [`Error::Backend`] if it refuses (for example the chroot cannot be created).
    ///
    /// # Cancel safety
    /// Cancel safe: a session being established when the future is dropped is closed.
    pub async fn connect(config: ZkConfig) -> Result<Self> {
        let backend = ZkBackend::new(config)?;
        backend.inner.sessions.get().await?;
        Ok(backend)
    }

    /// [`connect`](Self::connect) with settings from a `zk://` URL
    /// (see [`ZkConfig::from_url`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL, else as [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        ZkBackend::connect(ZkConfig::from_url(url)?).await
    }

    /// The settings.
    pub fn config(&self) -> &ZkConfig {
        self.inner.sessions.config()
    }

    /// Whether locks held through this backend are certain right now; see
    /// [`ConnectionState`].
    pub fn connection_state(&self) -> ConnectionState {
        self.inner.sessions.state()
    }

    /// Counters of requests and wake-ups so far.
    pub fn stats(&self) -> ZkStats {
        self.inner.counters.snapshot()
    }

    /// The ZooKeeper client of the current session (connecting if there is none), to
    /// inspect the tree or share the session. Closing or expiring its session ends every
    /// lock of this backend.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn zookeeper_client(&self) -> Result<Client> {
        Ok(self.inner.sessions.get().await?.client.clone())
    }

    /// The node path of the lock of `family` on `key`, below the chroot: the path to
    /// give Curator to share the lock (exclusive locks use the bare path).
    ///
    /// ```
    /// use lock_core::{LockFamily, LockKey, LockName, Namespace};
    /// let key = LockKey::new(Namespace::new("locks")?, LockName::new("orders/42")?);
    /// assert_eq!(lock_zookeeper::ZkBackend::lock_path(&key, LockFamily::Exclusive), "/locks/orders/42");
    /// assert_eq!(lock_zookeeper::ZkBackend::lock_path(&key, LockFamily::ReadWrite), "/locks/orders/42%rw");
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    pub fn lock_path(key: &LockKey, family: LockFamily) -> String {
        path::lock_path(key, family)
    }

    /// The contenders of `dir` now, in queue order.
    async fn queue(
        &self,
        key: &LockKey,
        family: LockFamily,
    ) -> Result<(Client, String, Vec<path::Contender>)> {
        let session = self.inner.sessions.get().await?;
        let dir = path::lock_path(key, family);
        let until = tokio::time::Instant::now() + self.config().request_timeout();
        let children = match recipe::bounded(until, session.client.list_children(&dir)).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => Vec::new(),
            Err(err) => return Err(error::map(err)),
        };
        let queue = path::contenders(&children, family);
        Ok((session.client.clone(), dir, queue))
    }
}

impl ZkBackend {
    /// A node's data and stat, or `None` if it is gone.
    async fn read_node(&self, client: &Client, node: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        let until = tokio::time::Instant::now() + self.config().request_timeout();
        match recipe::bounded(until, client.get_data(node)).await {
            Ok(found) => Ok(Some(found)),
            Err(ZkError::NoNode) => Ok(None),
            Err(err) => Err(error::map(err)),
        }
    }
}

/// The holders in a queue: the first node; for a semaphore the first as many as its
/// count; for a read-write lock every reader before the first writer (or that writer
/// alone), and every downgrade reader (granted at once, wherever it stands).
fn holders(queue: &[path::Contender], family: LockFamily) -> Vec<&path::Contender> {
    let front = match (family, queue.first()) {
        (_, None) => 0,
        // The first as many as the oldest's count, of that count.
        (LockFamily::Semaphore, Some(first)) => {
            let permits = first
                .permits
                .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
            queue
                .iter()
                .take(permits)
                .take_while(|c| c.permits == first.permits)
                .count()
        }
        (LockFamily::ReadWrite, Some(first)) if !first.writer => {
            queue.iter().take_while(|c| !c.writer).count()
        }
        _ => 1,
    };
    queue
        .iter()
        .enumerate()
        .filter(|(i, c)| *i < front || c.downgrade)
        .map(|(_, c)| c)
        .collect()
}

impl LockBackend for ZkBackend {
    type Lease = ZkLease;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn location(&self) -> String {
        let config = self.config();
        format!(
            "{}{}",
            config.connect_string(),
            config.chroot().unwrap_or_default()
        )
    }

    async fn settle(&self) {
        self.inner.cleanups.settled().await;
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL.with_fixed_lease(false)
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<ZkLease>>> {
        recipe::acquire(&self.inner, &req).await
    }

    async fn release(&self, lease: &HeldLease<ZkLease>) -> Result<()> {
        let not_owner = || Error::not_owner(&lease.key);
        let flags = &lease.data.flags;
        let session = self
            .inner
            .sessions
            .peek()
            .filter(|s| s.generation == lease.data.generation);
        if lease.data.is_lost() && flags.deleted_by_release() {
            // An earlier release's delete landed after its caller stopped waiting.
            flags.stop.notify_one();
            self.inner.unregister_writer(lease);
            return Ok(());
        }
        let Some(session) = session.filter(|_| !lease.data.is_lost()) else {
            // Its session is gone, and its ephemeral node with it.
            flags.lost.store(true, Ordering::Release);
            self.inner.unregister_writer(lease);
            return Err(not_owner());
        };
        // From the first delete sent on, the node's deletion is ours, not a loss: a
        // delete whose answer did not come may still land.
        flags.releasing.store(true, Ordering::Release);
        let timeout = self.config().request_timeout();
        let give_up = tokio::time::Instant::now() + timeout;
        let outcome = loop {
            let sent_before = flags.delete_sent.swap(true, Ordering::AcqRel);
            let delete = session.client.delete(&lease.data.path, None);
            match recipe::bounded(give_up, delete).await {
                Err(err)
                    if (is_connection_loss(&err) || err == ZkError::Timeout)
                        && tokio::time::Instant::now() < give_up =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // After a lost answer, "no node" may be an earlier delete of ours
                // having gone through (in this call or an earlier one).
                Err(ZkError::NoNode) if sent_before => break Ok(()),
                other => break other,
            }
        };
        match outcome {
            Ok(()) => {
                flags.stop.notify_one();
                self.inner.unregister_writer(lease);
                Ok(())
            }
            Err(ZkError::NoNode) => {
                flags.lost.store(true, Ordering::Release);
                flags.stop.notify_one();
                self.inner.unregister_writer(lease);
                Err(not_owner())
            }
            Err(ZkError::Timeout) => Err(error::unavailable(format!(
                "zookeeper did not answer a release within the request timeout {timeout:?}"
            ))),
            Err(err) => Err(error::map(err)),
        }
    }

    async fn renew(&self, leases: &[&HeldLease<ZkLease>], _ttl: Duration) -> Result<Vec<Renewal>> {
        // No round trip: the session's pings are the renewal. Answer from what we know.
        let session = self.inner.sessions.peek();
        let alive = |lease: &HeldLease<ZkLease>| {
            !lease.data.is_lost()
                && session
                    .as_ref()
                    .is_some_and(|s| s.generation == lease.data.generation)
        };
        let uncertain = session
            .as_ref()
            .is_some_and(|s| s.state() == ConnectionState::Suspended);
        if uncertain && leases.iter().any(|l| alive(l)) {
            return Err(error::unavailable(
                "disconnected from zookeeper: the session's locks are uncertain until it reconnects or expires",
            ));
        }
        Ok(leases
            .iter()
            .map(|lease| {
                if alive(lease) {
                    Renewal::Renewed
                } else {
                    Renewal::Lost
                }
            })
            .collect())
    }

    async fn proclaim(&self, lease: &HeldLease<ZkLease>, value: &str) -> Result<()> {
        let lost = || Error::LeaseLost {
            name: lease.key.name().to_string(),
        };
        let session = self
            .inner
            .sessions
            .peek()
            .filter(|s| s.generation == lease.data.generation && !lease.data.is_lost())
            .ok_or_else(lost)?;
        // The node is this leadership's alone: a later leader has a node of its own.
        let until = tokio::time::Instant::now() + self.config().request_timeout();
        let write = session
            .client
            .set_data(&lease.data.path, value.as_bytes(), None);
        match recipe::bounded(until, write).await {
            Ok(_) => Ok(()),
            Err(ZkError::NoNode) => Err(lost()),
            Err(err) => Err(error::map(err)),
        }
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        // The lowest contender holds (or is being told so): any contender means held.
        let (_, _, queue) = self.queue(key, family).await?;
        Ok(!queue.is_empty())
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        // Deletes the holders' nodes; waiters keep their place and the next one is woken
        // by its watch.
        let (client, dir, queue) = self.queue(key, family).await?;
        let mut removed = false;
        for holder in holders(&queue, family) {
            let until = tokio::time::Instant::now() + self.config().request_timeout();
            let delete = client.delete(&format!("{dir}/{}", holder.name), None);
            match recipe::bounded(until, delete).await {
                Ok(()) => removed = true,
                Err(ZkError::NoNode) => {}
                Err(err) => return Err(error::map(err)),
            }
        }
        Ok(removed)
    }

    async fn force_unlock_holder(
        &self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> Result<bool> {
        let (client, dir, queue) = self.queue(key, family).await?;
        for holder in holders(&queue, family) {
            let node = format!("{dir}/{}", holder.name);
            let Some((_, stat)) = self.read_node(&client, &node).await? else {
                continue;
            };
            // A leader's token is its term, the czxid (a proclaim moves the mzxid).
            let token = match family {
                LockFamily::Election => stat.czxid,
                _ => stat.mzxid,
            };
            if u64::try_from(token) != Ok(fence) {
                continue;
            }
            // The version as read: the node is deleted only as the holder it was.
            let until = tokio::time::Instant::now() + self.config().request_timeout();
            let delete = client.delete(&node, Some(stat.version));
            return match recipe::bounded(until, delete).await {
                Ok(()) => Ok(true),
                Err(ZkError::NoNode | ZkError::BadVersion) => Ok(false),
                Err(err) => Err(error::map(err)),
            };
        }
        Ok(false)
    }

    async fn inspect(&self, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
        let (client, dir, queue) = self.queue(key, family).await?;
        let holding = holders(&queue, family);
        let mut infos = Vec::with_capacity(holding.len());
        for holder in &holding {
            let node = format!("{dir}/{}", holder.name);
            // A node gone since the listing was released meanwhile.
            if let Some((data, stat)) = self.read_node(&client, &node).await? {
                let kind = match family {
                    LockFamily::Exclusive => LockKind::Exclusive,
                    LockFamily::Fair => LockKind::Fair,
                    LockFamily::Semaphore => LockKind::Permit,
                    LockFamily::Election => LockKind::Leader,
                    LockFamily::ReadWrite if holder.writer => LockKind::Write,
                    LockFamily::ReadWrite => LockKind::Read,
                };
                infos.push(node_data::holder_info(kind, &data, &stat));
            }
        }
        Ok(LockInfo::new(infos, Some(queue.len() - holding.len())))
    }
}
