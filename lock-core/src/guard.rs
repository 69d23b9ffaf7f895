//! The guard every acquisition returns.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::Result;
use crate::id::LockId;
use crate::kinds::LockKind;
use crate::lease::{LeaseLoss, LeaseState};
use crate::name::LockName;

/// What a guard needs from the lock that made it, with the backend type erased.
pub(crate) trait HoldOps: Send + Sync + fmt::Debug {
    fn release(&self) -> BoxFuture<'_, Result<()>>;
    fn release_on_drop(&self);
    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<()>>;
    fn reenter(&self) -> Result<LockGuard>;
    fn read_as_writer(&self) -> BoxFuture<'_, Result<LockGuard>>;
    fn proclaim<'a>(&'a self, value: &'a str) -> BoxFuture<'a, Result<()>>;
    fn lock_id(&self) -> LockId;
}

/// Proof of one acquisition: holds the lock until released or dropped.
///
/// # Owners and re-entry
///
/// Every acquire call is an owner of its own: two calls that run at the same time
/// exclude each other, whether they come from tasks sharing one handle or from futures
/// joined in one task. Code that already holds the lock re-enters it through the
/// guard it holds: [`reenter`](Self::reenter) returns a further guard on the same
/// acquisition at once, with no round trip, and the lock is freed when the last guard
/// of the acquisition goes. Calling `acquire` again on a held lock instead waits like
/// anyone else, as a `tokio::sync::Mutex` does.
///
/// # Losing the lease
///
/// A lease can end while you hold the guard: a fixed lease runs out, the backend loses
/// the key, or the watchdog cannot renew in time. Check [`is_held`](Self::is_held)
/// before a write that must be exclusive, pass [`fencing_token`](Self::fencing_token)
/// to storage that can reject stale writers, or race your work against
/// [`lost`](Self::lost).
///
/// # Dropping
///
/// Releasing over a network cannot happen inside `Drop`. Dropping a guard without
/// [`release`](Self::release) does this, at once and without blocking: if other guards
/// of the same acquisition remain, the hold count drops by one and nothing else
/// happens. If it was the last one, the watchdog stops renewing the lease, and a
/// release is spawned on the current tokio runtime; without a runtime (or if that
/// release fails) the lease expires on its own after at most its ttl. Prefer
/// `release().await` to learn the outcome.
///
/// ```
/// use lock_core::{memory::MemoryBackend, DistributedLockExt, LockClient};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let client = LockClient::new(MemoryBackend::new());
/// let lock = client.lock("reports")?;
/// let guard = lock.acquire().await?;
/// assert!(guard.is_held());
/// let token = guard.fencing_token(); // hand this to the storage you write to
/// # let _ = token;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once (best effort, see `Dropping`)"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    name: LockName,
    kind: LockKind,
    fence: u64,
    state: Arc<LeaseState>,
    ops: Box<dyn HoldOps>,
    done: bool,
}

impl LockGuard {
    pub(crate) fn new(
        name: LockName,
        kind: LockKind,
        fence: u64,
        state: Arc<LeaseState>,
        ops: Box<dyn HoldOps>,
    ) -> Self {
        LockGuard {
            name,
            kind,
            fence,
            state,
            ops,
            done: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Which lock this guard holds, as every client of the same store names it.
    pub fn lock_id(&self) -> LockId {
        self.ops.lock_id()
    }

    /// A cheap, cloneable view of this guard's lease for code that must react to its
    /// loss (say, a task doing the work) without holding the guard.
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch {
            name: self.name.clone(),
            fence: self.fence,
            state: self.state.clone(),
        }
    }

    /// Which lock or side this guard holds.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The fencing token of this acquisition: strictly greater than the token of every
    /// earlier acquisition of this name, by anyone. Reentrant guards share their
    /// acquisition's token.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// Publishes `value` as an election leader's value (see
    /// [`Leadership::proclaim`](crate::Leadership::proclaim)).
    pub(crate) async fn proclaim(&self, value: &str) -> Result<()> {
        self.ops.proclaim(value).await
    }

    /// Whether the lease is still held, as far as this client knows: not reported lost,
    /// not past its expiry (counted from when the acquire or last renewal was sent,
    /// less the clock-drift margin, counting time the machine spent suspended), and no
    /// release of it sent (by the last guard's release or drop, or by
    /// [`LockClient::shutdown`](crate::LockClient::shutdown)): the backend may let it go
    /// before the reply comes back. Costs no round trip.
    pub fn is_held(&self) -> bool {
        self.state.counts()
    }

    /// When the lease runs out as this client counts it, unless renewed or extended
    /// first; `None` once it is not held. A watchdog lease moves on at every renewal.
    pub fn expires_at(&self) -> Option<tokio::time::Instant> {
        self.state.counts().then(|| self.state.expires_at())
    }

    /// How long the lease has left as this client counts it; `None` once it is not held.
    pub fn remaining(&self) -> Option<Duration> {
        self.expires_at()
            .map(|at| at.saturating_duration_since(tokio::time::Instant::now()))
    }

    /// Another guard on this acquisition, at once and with no round trip: re-entry for
    /// code that already holds the lock (a nested call that is handed this guard). The
    /// two guards share the lease and the fencing token; the lock is freed when the last
    /// guard of the acquisition is released or dropped.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease is no longer held.
    ///
    /// ```
    /// use lock_core::{memory::MemoryBackend, DistributedLockExt, LockClient};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let lock = LockClient::new(MemoryBackend::new()).lock("ledger")?;
    /// let outer = lock.acquire().await?;
    /// let inner = outer.reenter()?; // no round trip
    /// assert_eq!(inner.fencing_token(), outer.fencing_token());
    /// inner.release().await?;
    /// assert!(outer.is_held()); // still held: one guard is left
    /// outer.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn reenter(&self) -> Result<LockGuard> {
        self.ops.reenter()
    }

    /// For a write guard of a [`ReadWriteLock`](crate::ReadWriteLock): takes the read
    /// side as the same owner, granted at once while this write lease lives (other
    /// owners' writers queued meanwhile wait for it). This guard stays held: release it
    /// afterwards to keep only reading, a downgrade. The read guard has a fencing token
    /// of its own and a lease of the same kind as this one (a watchdog lease, or a fixed
    /// lease as long as this one was asked for, counted from now). Asked again while a
    /// read guard an earlier downgrade of this acquisition made is held, it re-enters
    /// that read hold (same token and lease, released with its last guard), with no
    /// round trip.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a guard that is not
    /// a write guard; [`Error::LeaseLost`](crate::Error::LeaseLost) if the write lease is
    /// no longer held; a backend error as for an acquire. This guard is unchanged by an
    /// error.
    ///
    /// # Cancel safety
    /// Cancel safe, as an acquire is: if dropped, no read lease is left behind.
    ///
    /// ```
    /// use lock_core::{memory::MemoryBackend, LockClient, ReadWriteLockExt};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let table = LockClient::new(MemoryBackend::new()).rw_lock("table")?;
    /// let write = table.write().await?;
    /// // ... write ...
    /// let read = write.downgrade().await?;
    /// write.release().await?; // readers may come in now; writers wait for `read`
    /// // ... read what was written ...
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(&self) -> Result<LockGuard> {
        self.ops.read_as_writer().await
    }

    /// Resolves when this guard stops protecting you: with the reason the lease was
    /// lost, or with [`LeaseLoss::Released`] once it was released. The future owns what
    /// it needs, so it can be spawned or raced against work with `tokio::select!`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub fn lost(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        self.state.ended_future()
    }

    /// Releases this hold. The last hold of an acquisition releases the lease on the
    /// backend and wakes a waiter.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease had already been lost:
    /// the backend refused, as another owner or acquisition holds the lock now (that
    /// holder is untouched), or this guard had already reported it not held (then a
    /// backend that still had it, its lease lasting a margin longer, lets it go too). A backend error if the release could not be sent; then the
    /// lease expires on its own.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, the hold is given up anyway and
    /// the release is seen through in the background, as for a dropped guard.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        self.ops.release().await
    }

    /// Makes the lease end `ttl` from now. A lease kept by the watchdog stops being
    /// renewed: from here on it is a fixed lease. A watchdog renewal already in flight
    /// is waited for first, so its late reply can never override the new expiry.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad `ttl` (nothing
    /// changes); [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease has already
    /// run out here or the backend no longer has it (an expired lease is never
    /// brought back);
    /// [`Error::Unsupported`](crate::Error::Unsupported) where leases are sessions; a
    /// backend error if the extension could not be made. The lease is then as it was,
    /// except on a backend that extends by moving the lock to a new lease (etcd): an
    /// extension whose outcome is unknown may have left the lock on a lease nobody
    /// keeps, so it gives the lock up, and the guard reports it lost.
    ///
    /// # Cancel safety
    /// If dropped, the extension may or may not have reached the backend; the watchdog
    /// has already stopped renewing. Call it again to be sure (on etcd, one dropped
    /// once its move was sent gave the lock up, as for an unknown outcome above: the
    /// call then answers `LeaseLost`).
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        self.ops.extend(ttl).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            self.ops.release_on_drop();
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("fencing_token", &self.fence)
            .field("held", &self.is_held())
            .finish()
    }
}

/// A view of one guard's lease that does not hold it: its fencing token, whether it is
/// still held, and a future that resolves when it is lost. Made by
/// [`LockGuard::watch`], handed to the job by
/// [`DistributedLockExt::run_exclusive`](crate::DistributedLockExt::run_exclusive).
#[derive(Clone)]
pub struct LeaseWatch {
    name: LockName,
    fence: u64,
    state: Arc<LeaseState>,
}

impl LeaseWatch {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token of the acquisition: pass it to the storage the lock protects.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// As [`LockGuard::is_held`].
    pub fn is_held(&self) -> bool {
        self.state.counts()
    }

    /// As [`LockGuard::lost`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub fn lost(&self) -> impl Future<Output = LeaseLoss> + Send + 'static {
        self.state.ended_future()
    }
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("name", &self.name)
            .field("fencing_token", &self.fence)
            .field("held", &self.is_held())
            .finish()
    }
}
