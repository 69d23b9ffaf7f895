//! The primitive a backend implements to get every lock type, reentrancy, the
//! watchdog, guards and loss reporting from lock-core.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::lease::LossNotifier;
use crate::name::LockKey;
use crate::options::{Deadline, Lease};

/// Which lock a request is for. Exclusive, fair and read-write locks on one name are
/// separate locks that do not exclude each other; they share only the fencing counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKind {
    /// [`DistributedLock`](crate::DistributedLock): one holder, no order among waiters.
    Exclusive,
    /// [`FairLock`](crate::FairLock): one holder, granted in request order.
    Fair,
    /// The shared side of a [`ReadWriteLock`](crate::ReadWriteLock).
    Read,
    /// The exclusive side of a [`ReadWriteLock`](crate::ReadWriteLock).
    Write,
}

impl LockKind {
    /// Read and write requests name one read-write lock; this says which lock.
    pub fn family(self) -> LockFamily {
        match self {
            LockKind::Exclusive => LockFamily::Exclusive,
            LockKind::Fair => LockFamily::Fair,
            LockKind::Read | LockKind::Write => LockFamily::ReadWrite,
        }
    }
}

/// A lock type, for queries that cover both sides of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockFamily {
    /// Exclusive locks.
    Exclusive,
    /// Fair locks.
    Fair,
    /// Read-write locks.
    ReadWrite,
}

/// Who holds a lock: one lock handle (a [`Mutex`](crate::Mutex), [`FairMutex`](crate::FairMutex)
/// or [`RwLock`](crate::RwLock) and its clones) of one client. Formatted as
/// `<client uuid>:<handle number>`, unique across processes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerToken(Arc<str>);

impl OwnerToken {
    pub(crate) fn new(client: &uuid::Uuid, handle: u64) -> Self {
        OwnerToken(format!("{client}:{handle}").into())
    }

    /// A token from its text, for backends that read owners back and for tests.
    pub fn from_string(token: String) -> Self {
        OwnerToken(token.into())
    }

    /// The token as text, the form backends store.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a backend can do. The machinery refuses what is not supported with
/// [`Error::Unsupported`](crate::Error::Unsupported) before calling the backend, and the
/// conformance suite skips (loudly) what a backend lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`LockKind::Fair`] requests are granted in request order.
    pub fair: bool,
    /// [`LockKind::Read`] and [`LockKind::Write`] are supported.
    pub read_write: bool,
    /// [`Lease::Fixed`](crate::Lease::Fixed) leases expire on their own while the client
    /// lives. False where the lease is a session (ZooKeeper).
    pub fixed_lease: bool,
    /// Locks can be shared with other processes (false for the in-memory backend).
    pub cross_process: bool,
}

impl Capabilities {
    /// [`Error::Unsupported`](crate::Error::Unsupported) naming what `backend` lacks for
    /// a `kind` lock with `lease`, checked before anything is sent.
    pub(crate) fn require(self, backend: &'static str, kind: LockKind, lease: Lease) -> Result<()> {
        let missing = match kind {
            LockKind::Fair if !self.fair => Some("fair locks"),
            LockKind::Read | LockKind::Write if !self.read_write => Some("read-write locks"),
            _ if matches!(lease, Lease::Fixed(_)) && !self.fixed_lease => Some("fixed leases"),
            _ => None,
        };
        match missing {
            Some(operation) => Err(crate::Error::Unsupported { backend, operation }),
            None => Ok(()),
        }
    }

    /// Everything supported.
    pub const ALL: Capabilities = Capabilities {
        fair: true,
        read_write: true,
        fixed_lease: true,
        cross_process: true,
    };

    /// The same capabilities with `cross_process` set.
    pub const fn with_cross_process(self, cross_process: bool) -> Self {
        Capabilities {
            cross_process,
            ..self
        }
    }

    /// The same capabilities with `fair` set.
    pub const fn with_fair(self, fair: bool) -> Self {
        Capabilities { fair, ..self }
    }

    /// The same capabilities with `read_write` set.
    pub const fn with_read_write(self, read_write: bool) -> Self {
        Capabilities { read_write, ..self }
    }

    /// The same capabilities with `fixed_lease` set.
    pub const fn with_fixed_lease(self, fixed_lease: bool) -> Self {
        Capabilities {
            fixed_lease,
            ..self
        }
    }
}

/// One request to take a lease.
#[derive(Debug)]
pub struct AcquireRequest<'a> {
    /// Which lock.
    pub key: &'a LockKey,
    /// Which side or type of lock.
    pub kind: LockKind,
    /// Who asks.
    pub owner: &'a OwnerToken,
    /// How long the granted lease lasts unless renewed.
    pub ttl: Duration,
    /// When to give up waiting; a passed deadline means "try once".
    pub deadline: Deadline,
    /// Whether the client's watchdog keeps this lease alive ([`Lease::Watchdog`](crate::Lease::Watchdog)):
    /// it calls `renew` with this same `ttl` every third of it until the release. False
    /// for a fixed lease, which only [`LockGuard::extend`](crate::LockGuard::extend)
    /// renews. Backends whose leases are shared objects (an etcd lease, a session) use
    /// it to put watchdog leases on one kept-alive lease and give a fixed lease its own.
    pub watchdog: bool,
    /// For backends that learn of loss outside renewals (sessions, streams).
    pub loss: &'a LossNotifier,
}

/// A granted lease as the backend describes it.
#[derive(Debug)]
pub struct Grant<L> {
    /// The fencing token: strictly greater than every token granted before for this
    /// key, whatever the kind.
    pub fence: u64,
    /// Whatever the backend needs later to renew or release this lease.
    pub data: L,
    /// When the lease began, by this process's clock: no later than the moment the
    /// request that won it was sent. The client counts the lease's `ttl` from here, so
    /// a grant after a long wait is not taken for an expired one. Backends whose
    /// lease is renewed or kept by a session may use the time of the grant.
    pub started_at: tokio::time::Instant,
}

/// A lease the client holds, handed back to the backend to renew or release it.
#[derive(Debug)]
pub struct HeldLease<L> {
    /// Which lock.
    pub key: LockKey,
    /// Which side or type.
    pub kind: LockKind,
    /// The holder.
    pub owner: OwnerToken,
    /// The fencing token of this acquisition: it tells this lease apart from an
    /// earlier or later one of the same owner.
    pub fence: u64,
    /// The backend's own data from [`Grant::data`].
    pub data: L,
}

/// What a renewal found, per lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease was found and now lasts the requested ttl from the renewal.
    Renewed,
    /// The lease is gone or belongs to someone else; nothing was changed.
    Lost,
}

/// The backend primitive: take, renew and release leases, answer two queries.
///
/// Everything else—reentrancy, guards, the watchdog, deadlines, loss reporting,
/// argument checks and tracing—is written once in lock-core on top of this, the way
/// `lock_api` builds a mutex on a `RawMutex`.
///
/// # Contract
///
/// * **Mutual exclusion.** While a lease is valid, no other owner gets a conflicting
///   lease on the key. Read leases conflict only with write leases of other owners; a
///   read request from the owner of the write lease is granted (downgrade).
/// * **No reentrancy here.** lock-core never asks for a lease an owner already holds,
///   except in a race with its own in-flight release. Treat a repeated exclusive,
///   fair or write request like any other contender (wait); never grant it twice.
/// * **Fencing.** [`Grant::fence`] strictly increases per key across all grants, even
///   after the key's state is deleted.
/// * **Owner- and acquisition-only changes.** `release` and `renew` act only on the
///   lease whose key, kind, owner *and* fence match; otherwise they change nothing
///   (`release` returns [`Error::NotOwner`](crate::Error::NotOwner), `renew` reports
///   [`Renewal::Lost`]). So a stale guard can never touch a newer lease.
/// * **Deadlines.** `acquire` returns `Ok(None)` once [`AcquireRequest::deadline`] has
///   passed without a grant, promptly; with a passed deadline it tries exactly once.
/// * **Waking.** Waiters should learn of a release by notification where the backend
///   has one, and must not sleep past the holder's lease expiry.
/// * **Cancel safety.** If an `acquire` future is dropped, nothing is left behind: no
///   queue entry, node or granted lease (spawn a clean-up if the reply may be in flight).
/// * **Errors.** An unreachable backend is [`Error::Unavailable`](crate::Error::Unavailable)
///   within the configured connect or request timeout; never panic.
/// * **Failed releases.** lock-core retries a release that failed with a retryable
///   error while the server may still hold the lease: with fixed leases supported, until
///   its local expiry plus the drift margin; otherwise (the lease is a session) for
///   minutes. A backend that keeps watchdog leases on a session of its own that it
///   renews beyond that (etcd) sees its own failed releases through until they succeed
///   or the session ends.
///
/// The conformance-tests crate checks all of this against a real server.
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// The backend's data kept with each lease (for example a ZooKeeper node path);
    /// `()` when the key, owner and fence say enough.
    type Lease: Send + Sync + fmt::Debug + 'static;

    /// A short name for errors and traces: `"memory"`, `"redis"`, ...
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Where this backend keeps its locks, as text that is the same for every client of
    /// the same store and differs between stores: server addresses, database, key
    /// prefix or table, never a password. Two handles whose backends give the same
    /// name, location, key and lock family name the same lock; a
    /// [`MultiLock`](crate::MultiLock) orders its members by it (after the key) and
    /// refuses one lock listed twice. The default, empty, suits a backend with one
    /// store per process.
    fn location(&self) -> String {
        String::new()
    }

    /// How long the client may count on a lease of `ttl`, from the send of the request
    /// that won, renewed or extended it. `ttl` unless the servers may end it sooner by
    /// their own clocks: RedLock takes off its clock-drift margin. lock-core counts
    /// every grant, renewal and extension with this, so a guard never reports held
    /// past what the backend guarantees. A wrapper around another backend forwards it.
    fn lease_validity(&self, ttl: Duration) -> Duration {
        ttl
    }

    /// Waits until the clean-ups this backend runs in the background have finished:
    /// queue places and keys of dropped or timed-out waits removed, late grants undone,
    /// releases retried. [`LockClient::shutdown`](crate::LockClient::shutdown) calls it
    /// so that a program leaves nothing behind when it exits. A backend shared by
    /// several clients waits for the clean-ups of all of them. Backends that run none
    /// keep the default, which returns at once; [`Cleanups`](crate::Cleanups) counts them.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits; the clean-ups go on.
    fn settle(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Takes a lease, waiting until `req.deadline` for it.
    ///
    /// Returns `Ok(None)` if the deadline passed first.
    fn acquire(
        &self,
        req: AcquireRequest<'_>,
    ) -> impl Future<Output = Result<Option<Grant<Self::Lease>>>> + Send;

    /// Releases one lease and wakes whoever waits for it.
    fn release(&self, lease: &HeldLease<Self::Lease>) -> impl Future<Output = Result<()>> + Send;

    /// Sets every lease in `leases` to last `ttl` from now, in as few round trips as the
    /// backend allows (the watchdog calls this with every lease of a client at once).
    /// Returns one [`Renewal`] per lease, in order.
    fn renew(
        &self,
        leases: &[&HeldLease<Self::Lease>],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<Renewal>>> + Send;

    /// Whether any owner holds a lease of `family` on `key`.
    fn is_locked(
        &self,
        key: &LockKey,
        family: LockFamily,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Removes every lease of `family` on `key`, whoever holds it, and wakes the waiters.
    /// Returns whether there was any. For operators clearing a stuck lock.
    fn force_unlock(
        &self,
        key: &LockKey,
        family: LockFamily,
    ) -> impl Future<Output = Result<bool>> + Send;
}
