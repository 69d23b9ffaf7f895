//! Semaphores: the user trait, its shorthands, and the handle that implements it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::api::{delegate_to_target, none_on_timeout, run_under};
use crate::backend::{Capabilities, LockBackend};
use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::guard::{LeaseWatch, LockGuard};
use crate::handle::Handle;
use crate::id::LockId;
use crate::info::LockInfo;
use crate::kinds::{LockFamily, LockKind};
use crate::name::{LockKey, LockName};
use crate::options::AcquireOptions;

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A counting semaphore: at most [`permits`](Self::permits) holders at once, across
/// processes.
///
/// Each permit is a lease like a lock's: its guard is a [`LockGuard`] with a fencing
/// token (strictly increasing per name, across permits and holders), loss reporting,
/// `extend` and `release`, kept alive by the client's one watchdog (batched with its
/// locks) or leased for a fixed time. A value of this trait is a handle; as with
/// locks, every acquire through it is a holder of its own, and
/// [`LockGuard::reenter`] adds a guard on the same permit.
///
/// * **Count checked.** The count is stored with the semaphore while anyone holds or
///   waits for a permit; an acquire that names another count is refused with
///   [`Error::InvalidArgument`], so two deployments that disagree cannot admit more
///   holders than either allows. Once nobody holds or waits, the next acquire sets it.
/// * **Order.** Waiters are granted in request order where the backend keeps a queue
///   (see [`Capabilities`] and each backend's docs): a waiter is not overtaken by
///   later arrivals, and a release wakes only the waiters it can admit.
///
/// ```
/// use lock_core::{memory::MemoryBackend, LockClient, Semaphore, SemaphoreExt};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let client = LockClient::new(MemoryBackend::new());
/// let exports = client.semaphore("exports", 2)?;
/// let first = exports.acquire().await?;
/// let second = exports.acquire().await?;
/// assert!(exports.try_acquire().await?.is_none()); // both permits are taken
/// first.release().await?;
/// assert_eq!(exports.available().await?, 1);
/// # second.release().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Semaphore: Send + Sync + fmt::Debug {
    /// The semaphore's name.
    fn name(&self) -> &LockName;

    /// Which semaphore this is, the same for every holder of it on the same store.
    fn lock_id(&self) -> LockId;

    /// How many holders it admits at once.
    fn permits(&self) -> u32;

    /// What the backend under it supports.
    fn capabilities(&self) -> Capabilities;

    /// Acquires one permit, waiting and leasing as `options` say.
    ///
    /// # Errors
    /// [`Error::Timeout`] if not granted in time (or, for a single try, every permit is
    /// taken or waited for); [`Error::InvalidArgument`] for bad durations or a count
    /// that differs from the one the semaphore's holders and waiters use;
    /// [`Error::Unsupported`] where the backend has no semaphores or cannot keep the
    /// lease; [`Error::Unavailable`] if the backend cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, nothing is left behind (no queue place or
    /// permit), and permits already held stay held.
    async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard>;

    /// How many permit guards acquires through this handle hold on live leases. No
    /// round trip.
    fn hold_count(&self) -> u32;

    /// How many permits are free now, asking the backend: the count less the holders.
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the backend cannot list a semaphore's holders.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn available(&self) -> Result<u32>;

    /// **For operators:** frees every permit and wakes the waiters. The holders' guards
    /// report the loss as for a lock. Returns whether any was held.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock(&self) -> Result<bool>;

    /// **For operators:** frees only the permit whose fencing token is `token` and
    /// wakes the waiters. Returns whether it was still held.
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the backend cannot remove one holder atomically.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock_holder(&self, token: u64) -> Result<bool>;

    /// Who holds permits now (owner, description, fencing token, when acquired, lease
    /// expiry by the server's clock) and how many wait, as far as the backend keeps
    /// them.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn inspect(&self) -> Result<LockInfo>;
}

/// A shared semaphore is the semaphore, as for locks.
#[async_trait]
impl<T: Semaphore + ?Sized> Semaphore for Arc<T> {
    delegate_to_target!();

    fn permits(&self) -> u32 {
        (**self).permits()
    }

    async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        (**self).acquire_with(options).await
    }

    fn hold_count(&self) -> u32 {
        (**self).hold_count()
    }

    async fn available(&self) -> Result<u32> {
        (**self).available().await
    }

    async fn force_unlock(&self) -> Result<bool> {
        (**self).force_unlock().await
    }

    async fn force_unlock_holder(&self, token: u64) -> Result<bool> {
        (**self).force_unlock_holder(token).await
    }

    async fn inspect(&self) -> Result<LockInfo> {
        (**self).inspect().await
    }
}

/// Shorthands for [`Semaphore`]. Implemented for every semaphore; you MUST NOT
/// implement it yourself.
pub trait SemaphoreExt: Semaphore {
    /// Waits without limit for a permit; the watchdog keeps its lease.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire_with`]: nothing is left behind.
    fn acquire(&self) -> impl Future<Output = Result<LockGuard>> + Send {
        self.acquire_with(AcquireOptions::wait_forever())
    }

    /// Tries once: `Ok(None)` if no permit is free for a newcomer.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire_with`]: nothing is left behind.
    fn try_acquire(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send {
        let fut = self.acquire_with(AcquireOptions::try_once());
        async move { none_on_timeout(fut.await) }
    }

    /// Waits up to `limit` for a permit: [`Error::Timeout`] after that.
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire_with`]: nothing is left behind.
    fn acquire_timeout(&self, limit: Duration) -> impl Future<Output = Result<LockGuard>> + Send {
        self.acquire_with(AcquireOptions::wait_for(limit))
    }

    /// Runs `job` holding a permit, as
    /// [`DistributedLockExt::run_exclusive`](crate::DistributedLockExt::run_exclusive)
    /// does with a lock: the job is stopped with [`Error::LeaseLost`] if the permit is
    /// lost, and the permit is released either way.
    ///
    /// # Errors
    /// As [`DistributedLockExt::run_exclusive`](crate::DistributedLockExt::run_exclusive).
    ///
    /// # Cancel safety
    /// Dropping the future drops the job where it is and releases the permit as a
    /// dropped guard does.
    fn run_with_permit<F, Fut, T>(
        &self,
        options: AcquireOptions,
        job: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseWatch) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let acquire = self.acquire_with(options);
        async move { run_under(acquire.await?, job).await }
    }
}

impl<T: Semaphore + ?Sized> SemaphoreExt for T {}

/// A handle on a semaphore. Implements [`Semaphore`]; made by
/// [`LockClient::semaphore`](crate::LockClient::semaphore).
pub struct SemaphoreHandle<B: LockBackend> {
    handle: Arc<Handle<B>>,
}

impl<B: LockBackend> SemaphoreHandle<B> {
    pub(crate) fn new(client: Arc<ClientInner<B>>, key: LockKey, permits: u32) -> Result<Self> {
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::invalid_argument(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"
            )));
        }
        Ok(SemaphoreHandle {
            handle: Handle::with_permits(client, key, permits),
        })
    }

    /// Where the semaphore lives: namespace and name.
    pub fn key(&self) -> &LockKey {
        self.handle.key()
    }
}

/// A clone is the same handle: its hold count is this one's.
impl<B: LockBackend> Clone for SemaphoreHandle<B> {
    fn clone(&self) -> Self {
        SemaphoreHandle {
            handle: self.handle.clone(),
        }
    }
}

impl<B: LockBackend> fmt::Debug for SemaphoreHandle<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreHandle")
            .field("key", self.handle.key())
            .field("permits", &self.handle.permits())
            .field("backend", &self.handle.backend().name())
            .finish()
    }
}

#[async_trait]
impl<B: LockBackend> Semaphore for SemaphoreHandle<B> {
    fn name(&self) -> &LockName {
        self.handle.key().name()
    }

    fn lock_id(&self) -> LockId {
        self.handle.lock_id(LockFamily::Semaphore)
    }

    fn permits(&self) -> u32 {
        self.handle.permits()
    }

    fn capabilities(&self) -> Capabilities {
        self.handle.backend().capabilities()
    }

    async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.handle.acquire(LockKind::Permit, options).await
    }

    fn hold_count(&self) -> u32 {
        self.handle.hold_count(LockKind::Permit)
    }

    async fn available(&self) -> Result<u32> {
        let info = self.inspect().await?;
        let held = u32::try_from(info.holders.len()).unwrap_or(u32::MAX);
        Ok(self.handle.permits().saturating_sub(held))
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.handle
            .backend_for(LockKind::Permit)?
            .force_unlock(self.handle.key(), LockFamily::Semaphore)
            .await
    }

    async fn force_unlock_holder(&self, token: u64) -> Result<bool> {
        self.handle
            .backend_for(LockKind::Permit)?
            .force_unlock_holder(self.handle.key(), LockFamily::Semaphore, token)
            .await
    }

    async fn inspect(&self) -> Result<LockInfo> {
        self.handle
            .backend_for(LockKind::Permit)?
            .inspect(self.handle.key(), LockFamily::Semaphore)
            .await
    }
}
