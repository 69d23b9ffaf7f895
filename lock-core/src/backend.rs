//! For backend implementers: the primitive a backend implements to get every lock type,
//! owners and re-entry, the watchdog, guards and loss reporting from lock-core, and the
//! types that go with it.
//!
//! Users of locks never need this module; the crate root has what they call. A backend
//! implements [`LockBackend`]: take a lease for an owner, renew leases in batches,
//! release one, answer two queries. Its documentation is the contract, and the
//! conformance-tests crate checks it against a real server.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use crate::background_loop::{BackgroundLoop, LoopGuard, LoopWork};
pub use crate::cleanups::{Cleanups, PendingCleanup};
pub use crate::election::Leader;
use crate::error::Result;
pub use crate::info::{HolderInfo, LockInfo};
pub use crate::kinds::{Capabilities, LockFamily, LockKind};
pub use crate::lease::LossNotifier;
use crate::name::LockKey;
pub use crate::options::{check_duration, Deadline};
pub use crate::settings::QuerySettings;
pub use crate::text::{push_decimal, push_hex};

/// Who holds a lock: one acquisition of one client (see
/// [`LockGuard`](crate::LockGuard#owners-and-re-entry)). Formatted as
/// `<client uuid>:<acquisition number>`, unique across processes; a downgrade's read
/// lease carries its write acquisition's token.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerToken(Arc<str>);

impl OwnerToken {
    /// What every token of the client whose uuid is `client` begins with, made once per
    /// client: formatting the uuid again for each acquisition costs more than the rest.
    pub(crate) fn prefix(client: &uuid::Uuid) -> Box<str> {
        let mut prefix = client.hyphenated().to_string();
        prefix.push(':');
        prefix.into()
    }

    /// The token of `acquisition` of the client whose tokens begin with `prefix`.
    pub(crate) fn with_prefix(prefix: &str, acquisition: u64) -> Self {
        let mut token = String::with_capacity(prefix.len() + 20);
        token.push_str(prefix);
        push_decimal(&mut token, acquisition);
        OwnerToken(token.into())
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

/// One request to take a lease.
#[derive(Debug)]
pub struct AcquireRequest<'a> {
    /// Which lock.
    pub key: &'a LockKey,
    /// Which side or type of lock.
    pub kind: LockKind,
    /// For [`LockKind::Permit`]: how many holders the semaphore admits at once (at
    /// least 1). A backend stores it with the semaphore while anyone holds or waits,
    /// and refuses a request that names another count with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument). 1 for the other kinds.
    pub permits: u32,
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
    /// What the client says about itself (host, process; see
    /// [`LockClientBuilder::holder_description`](crate::LockClientBuilder::holder_description)):
    /// a backend that can store it beside the lease does, for
    /// [`LockBackend::inspect`]. At most 256 bytes, no control characters. For
    /// [`LockKind::Leader`] it is the campaign's value, which the backend must store
    /// for [`LockBackend::leader`].
    pub holder: &'a str,
}

/// A granted lease as the backend describes it.
#[derive(Debug)]
pub struct Grant<L> {
    /// The fencing token: strictly greater than every token granted before for this
    /// key, whatever the kind. For [`LockKind::Leader`] a backend may instead give the
    /// candidacy's create stamp where other clients of the election read it as the term
    /// (etcd, ZooKeeper): greater than every earlier leader's and every token granted
    /// before the request, though not one granted to another kind while it waited.
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
#[non_exhaustive]
pub enum Renewal {
    /// The lease was found and now lasts the requested ttl from the renewal.
    Renewed,
    /// The lease is gone or belongs to someone else; nothing was changed.
    Lost,
    /// The server that keeps this lease did not answer, while others answered for
    /// theirs (a node of a cluster down or failing over): unknown, as if the whole call
    /// had failed, but for this lease alone. The watchdog tries it again, and reports
    /// it lost once its local expiry passes with no renewal answered.
    Unanswered,
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
///   read request from the owner of the write lease is granted (downgrade). Permit
///   leases conflict only beyond the count: never more than
///   [`AcquireRequest::permits`] valid permit leases on a key, granted in request
///   order where the backend keeps a queue.
/// * **No reentrancy here.** lock-core never asks for a lease an owner already holds,
///   except in a race with its own in-flight release. Treat a repeated exclusive,
///   fair or write request like any other contender (wait); never grant it twice.
/// * **Fencing.** [`Grant::fence`] strictly increases per key across all grants, even
///   after the key's state is deleted (an election's term may be its candidacy's create
///   stamp instead: see [`Grant::fence`]).
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
    /// keep the default, which returns at once; [`Cleanups`] counts them.
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
    /// Returns one [`Renewal`] per lease, in order. A backend whose leases live on
    /// several servers answers [`Renewal::Unanswered`] for the leases of a server that
    /// failed rather than failing the call, so that one server's outage costs only the
    /// leases it keeps.
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

    /// Removes only the lease of `family` on `key` whose fencing token is `fence`, in one
    /// step that cannot hit a newer holder, and wakes the waiters. Returns whether there
    /// was one. For operators breaking one stuck holder.
    fn force_unlock_holder(
        &self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> impl Future<Output = Result<bool>> + Send {
        let _ = (key, family, fence);
        std::future::ready(Err(crate::Error::Unsupported {
            backend: self.name(),
            operation: "force-unlocking one holder",
        }))
    }

    /// Publishes `value` as the value of the election leader holding `lease` (a
    /// [`LockKind::Leader`] lease), in one step that cannot touch a later leader.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease is gone, and nothing
    /// is written. The default: [`Error::Unsupported`](crate::Error::Unsupported).
    fn proclaim(
        &self,
        lease: &HeldLease<Self::Lease>,
        value: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (lease, value);
        std::future::ready(Err(crate::Error::Unsupported {
            backend: self.name(),
            operation: "elections",
        }))
    }

    /// The leader of the election `key`, with the value it published and its term (the
    /// fencing token of its [`LockKind::Leader`] lease), or `None` if nobody leads.
    /// The default reads the first holder [`inspect`](Self::inspect) reports.
    fn leader(&self, key: &LockKey) -> impl Future<Output = Result<Option<Leader>>> + Send {
        async move {
            let info = self.inspect(key, LockFamily::Election).await?;
            Ok(info.holders.into_iter().next().map(|holder| {
                Leader::new(
                    holder.description.unwrap_or_default(),
                    holder.fencing_token.unwrap_or_default(),
                )
            }))
        }
    }

    /// Who holds `family` on `key` now and how many wait, with what the backend keeps
    /// of each holder ([`LockInfo`]).
    fn inspect(
        &self,
        key: &LockKey,
        family: LockFamily,
    ) -> impl Future<Output = Result<LockInfo>> + Send {
        let _ = (key, family);
        std::future::ready(Err(crate::Error::Unsupported {
            backend: self.name(),
            operation: "inspecting a lock",
        }))
    }
}
