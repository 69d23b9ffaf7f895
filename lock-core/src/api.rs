//! The user-facing lock traits, object safe, and their convenience extensions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::Capabilities;
use crate::error::{Error, Result};
use crate::guard::{LeaseWatch, LockGuard};
use crate::id::LockId;
use crate::info::LockInfo;
use crate::name::LockName;
use crate::options::AcquireOptions;

/// An exclusive, reentrant distributed lock held by one owner at a time.
///
/// A value of this trait is one **owner** of one named lock (see the
/// [crate docs](crate#owners-and-reentrancy)): acquiring it again while it holds the
/// lock re-enters without a round trip, and the lock is freed at the last release.
/// Usable as `&dyn DistributedLock` or `Arc<dyn DistributedLock>`; the convenience
/// methods are in [`DistributedLockExt`].
///
/// ```
/// use std::time::Duration;
/// use lock_core::{memory::MemoryBackend, DistributedLock, DistributedLockExt, LockClient};
///
/// async fn exclusive_job(lock: &dyn DistributedLock) -> lock_core::Result<()> {
///     let Some(guard) = lock.try_acquire().await? else {
///         return Ok(()); // someone else is on it
///     };
///     // ... work, passing guard.fencing_token() to storage ...
///     guard.release().await
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let client = LockClient::new(MemoryBackend::new());
/// exclusive_job(&client.lock("nightly")?).await
/// # }
/// ```
#[async_trait]
pub trait DistributedLock: Send + Sync + fmt::Debug {
    /// The lock's name.
    fn name(&self) -> &LockName;

    /// Which lock this is, the same for every owner of it on the same store.
    fn lock_id(&self) -> LockId;

    /// What the backend under this lock supports.
    fn capabilities(&self) -> Capabilities;

    /// Acquires the lock, waiting and leasing as `options` say.
    ///
    /// # Errors
    /// [`Error::Timeout`] if not granted in time (or, for a single try, held);
    /// [`Error::InvalidArgument`] for bad durations; [`Error::Unsupported`] for a lease
    /// the backend cannot keep; [`Error::Unavailable`] if the backend cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, nothing is left behind (no queue entry,
    /// subscription or lease), and a lock this owner already held stays held.
    async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard>;

    /// How many guards this owner holds on a live lease (0 if it does not hold the lock).
    /// Costs no round trip.
    fn hold_count(&self) -> u32;

    /// Whether anyone holds the lock, asking the backend.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn is_locked(&self) -> Result<bool>;

    /// **For operators:** removes the lock whoever holds it and wakes the waiters.
    /// The holders' guards report the loss at their next renewal or expiry. Returns
    /// whether anything was held.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock(&self) -> Result<bool>;

    /// **For operators:** removes only the holder whose fencing token is `token` (a
    /// holder that replaced it is left alone) and wakes the waiters. Returns whether it
    /// still held.
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the backend cannot remove one holder atomically.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock_holder(&self, token: u64) -> Result<bool>;

    /// Who holds the lock now (owner, description, fencing token, when acquired, lease
    /// expiry by the server's clock) and how many wait, as far as the backend keeps
    /// them (see each backend's docs).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn inspect(&self) -> Result<LockInfo>;
}

/// An exclusive, reentrant lock granted in the order requests were queued: no waiter
/// is overtaken by a later one. A single try succeeds only if nobody holds or waits.
///
/// Everything else is as for [`DistributedLock`], whose methods it has; a
/// `&dyn FairLock` coerces to a `&dyn DistributedLock`.
pub trait FairLock: DistributedLock {}

/// A lock with shared readers and one exclusive writer.
///
/// * Readers share; a writer excludes readers and other writers.
/// * Both sides are reentrant for one owner.
/// * **Downgrade:** the writer may take the read lock too, then release the write lock
///   and keep reading. **Upgrade** (read held, asking for write) is refused with
///   [`Error::InvalidArgument`], since two upgrading readers would deadlock.
/// * Writer starvation is a per-backend policy, stated in each backend's docs. The
///   in-memory backend prefers writers: once a writer waits, new readers wait behind it.
#[async_trait]
pub trait ReadWriteLock: Send + Sync + fmt::Debug {
    /// The lock's name.
    fn name(&self) -> &LockName;

    /// Which lock this is, the same for every owner of it on the same store.
    fn lock_id(&self) -> LockId;

    /// What the backend under this lock supports.
    fn capabilities(&self) -> Capabilities;

    /// Acquires the read (shared) side.
    ///
    /// # Errors
    /// As [`DistributedLock::acquire_with`].
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire_with`]: nothing is left behind.
    async fn read_with(&self, options: AcquireOptions) -> Result<LockGuard>;

    /// Acquires the write (exclusive) side.
    ///
    /// # Errors
    /// As [`DistributedLock::acquire_with`], and [`Error::InvalidArgument`] if this owner
    /// holds only the read side (no upgrade).
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire_with`]: nothing is left behind.
    async fn write_with(&self, options: AcquireOptions) -> Result<LockGuard>;

    /// How many read guards this owner holds on a live lease. No round trip.
    fn read_hold_count(&self) -> u32;

    /// How many write guards this owner holds on a live lease. No round trip.
    fn write_hold_count(&self) -> u32;

    /// Whether anyone holds either side, asking the backend.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn is_locked(&self) -> Result<bool>;

    /// **For operators:** removes every reader and writer and wakes the waiters.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock(&self) -> Result<bool>;

    /// **For operators:** removes only the holder whose fencing token is `token` (a
    /// holder that replaced it is left alone) and wakes the waiters. Returns whether it
    /// still held.
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the backend cannot remove one holder atomically.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock_holder(&self, token: u64) -> Result<bool>;

    /// Who holds the lock now (owner, description, fencing token, when acquired, lease
    /// expiry by the server's clock) and how many wait, as far as the backend keeps
    /// them (see each backend's docs).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn inspect(&self) -> Result<LockInfo>;
}

/// The plain methods every lock trait (and semaphores and elections) has, for an `Arc`
/// that passes them to its target (async ones stay in the impls, where `async_trait`
/// sees them).
macro_rules! delegate_to_target {
    () => {
        fn name(&self) -> &LockName {
            (**self).name()
        }

        fn lock_id(&self) -> LockId {
            (**self).lock_id()
        }

        fn capabilities(&self) -> Capabilities {
            (**self).capabilities()
        }
    };
}
pub(crate) use delegate_to_target;

/// A shared lock is the lock: `Arc<dyn DistributedLock>` from a
/// [`LockProvider`](crate::LockProvider) goes wherever a lock does.
#[async_trait]
impl<T: DistributedLock + ?Sized> DistributedLock for Arc<T> {
    delegate_to_target!();

    async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        (**self).acquire_with(options).await
    }

    fn hold_count(&self) -> u32 {
        (**self).hold_count()
    }

    async fn is_locked(&self) -> Result<bool> {
        (**self).is_locked().await
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

impl<T: FairLock + ?Sized> FairLock for Arc<T> {}

/// A shared read-write lock is the lock, as for [`DistributedLock`].
#[async_trait]
impl<T: ReadWriteLock + ?Sized> ReadWriteLock for Arc<T> {
    delegate_to_target!();

    async fn read_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        (**self).read_with(options).await
    }

    async fn write_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        (**self).write_with(options).await
    }

    fn read_hold_count(&self) -> u32 {
        (**self).read_hold_count()
    }

    fn write_hold_count(&self) -> u32 {
        (**self).write_hold_count()
    }

    async fn is_locked(&self) -> Result<bool> {
        (**self).is_locked().await
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

/// Runs `job` under `guard`: the job's output, or [`Error::LeaseLost`] if the lease is
/// lost first (the job's future is dropped then). The lock is released either way.
pub(crate) async fn run_under<F, Fut, T>(guard: LockGuard, job: F) -> Result<T>
where
    F: FnOnce(LeaseWatch) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = guard.lost();
    let work = job(guard.watch());
    tokio::select! {
        output = work => {
            guard.release().await?;
            Ok(output)
        }
        loss = lost => {
            let name = guard.name().to_string();
            tracing::warn!(lock = %name, %loss, "lock lost while its job ran; the job was stopped");
            // Whatever the backend still has of the lease goes back.
            let _ = guard.release().await;
            Err(Error::LeaseLost { name })
        }
    }
}

pub(crate) fn none_on_timeout(result: Result<LockGuard>) -> Result<Option<LockGuard>> {
    match result {
        Ok(guard) => Ok(Some(guard)),
        Err(Error::Timeout { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Shorthands for [`DistributedLock`] (and so [`FairLock`]). Implemented for every
/// lock; you MUST NOT implement it yourself.
pub trait DistributedLockExt: DistributedLock {
    /// Waits without limit; the watchdog keeps the lease (Redisson's `lock()`).
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire_with`]: nothing is left behind.
    fn acquire(&self) -> impl Future<Output = Result<LockGuard>> + Send {
        self.acquire_with(AcquireOptions::wait_forever())
    }

    /// Tries once: `Ok(None)` if the lock is held by someone else.
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire_with`]: nothing is left behind.
    fn try_acquire(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send {
        let fut = self.acquire_with(AcquireOptions::try_once());
        async move { none_on_timeout(fut.await) }
    }

    /// Waits up to `limit`: [`Error::Timeout`] after that.
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire_with`]: nothing is left behind.
    fn acquire_timeout(&self, limit: Duration) -> impl Future<Output = Result<LockGuard>> + Send {
        self.acquire_with(AcquireOptions::wait_for(limit))
    }

    /// Whether an acquire made through this handle holds the lock on a live lease. No
    /// round trip.
    fn is_held_by_me(&self) -> bool {
        self.hold_count() > 0
    }

    /// Runs `job` while holding the lock (ShedLock's use): acquires as `options` say,
    /// runs the job, releases, and returns its output. If the lease is lost while the
    /// job runs, the job's future is dropped at once and this returns
    /// [`Error::LeaseLost`]. The job gets a [`LeaseWatch`] to hand the fencing token to
    /// storage, or to check [`is_held`](LeaseWatch::is_held) before a step that must be
    /// exclusive.
    ///
    /// # Errors
    /// As [`acquire_with`](DistributedLock::acquire_with) (a [`Error::Timeout`] means the
    /// job did not run); [`Error::LeaseLost`] if the lease was lost while it ran; the
    /// release's error if the job finished but the release failed.
    ///
    /// # Cancel safety
    /// Dropping the future drops the job where it is and releases the lock as a dropped
    /// guard does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_core::{memory::MemoryBackend, AcquireOptions, DistributedLockExt, LockClient};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// let lock = LockClient::new(MemoryBackend::new()).lock("nightly-report")?;
    /// let rows = lock
    ///     .run_exclusive(AcquireOptions::try_once(), |lease| async move {
    ///         // ... write, passing lease.fencing_token() to the store ...
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 42);
    /// # Ok(()) }
    /// ```
    fn run_exclusive<F, Fut, T>(
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

impl<T: DistributedLock + ?Sized> DistributedLockExt for T {}

/// Shorthands for [`ReadWriteLock`]. Implemented for every read-write lock; you MUST
/// NOT implement it yourself.
pub trait ReadWriteLockExt: ReadWriteLock {
    /// Waits without limit for the read side, watchdog lease.
    ///
    /// # Cancel safety
    /// As [`ReadWriteLock::read_with`]: nothing is left behind.
    fn read(&self) -> impl Future<Output = Result<LockGuard>> + Send {
        self.read_with(AcquireOptions::wait_forever())
    }

    /// Waits without limit for the write side, watchdog lease.
    ///
    /// # Cancel safety
    /// As [`ReadWriteLock::write_with`]: nothing is left behind.
    fn write(&self) -> impl Future<Output = Result<LockGuard>> + Send {
        self.write_with(AcquireOptions::wait_forever())
    }

    /// Tries the read side once: `Ok(None)` if a writer holds it.
    ///
    /// # Cancel safety
    /// As [`ReadWriteLock::read_with`]: nothing is left behind.
    fn try_read(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send {
        let fut = self.read_with(AcquireOptions::try_once());
        async move { none_on_timeout(fut.await) }
    }

    /// Runs `job` holding the read side, as
    /// [`DistributedLockExt::run_exclusive`] does with an exclusive lock.
    ///
    /// # Errors
    /// As [`DistributedLockExt::run_exclusive`].
    ///
    /// # Cancel safety
    /// As [`DistributedLockExt::run_exclusive`].
    fn run_read<F, Fut, T>(
        &self,
        options: AcquireOptions,
        job: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseWatch) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let acquire = self.read_with(options);
        async move { run_under(acquire.await?, job).await }
    }

    /// Runs `job` holding the write side, as
    /// [`DistributedLockExt::run_exclusive`] does with an exclusive lock.
    ///
    /// # Errors
    /// As [`DistributedLockExt::run_exclusive`].
    ///
    /// # Cancel safety
    /// As [`DistributedLockExt::run_exclusive`].
    fn run_write<F, Fut, T>(
        &self,
        options: AcquireOptions,
        job: F,
    ) -> impl Future<Output = Result<T>> + Send
    where
        F: FnOnce(LeaseWatch) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let acquire = self.write_with(options);
        async move { run_under(acquire.await?, job).await }
    }

    /// Tries the write side once: `Ok(None)` if anyone else holds either side.
    ///
    /// # Cancel safety
    /// As [`ReadWriteLock::write_with`]: nothing is left behind.
    fn try_write(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send {
        let fut = self.write_with(AcquireOptions::try_once());
        async move { none_on_timeout(fut.await) }
    }
}

impl<T: ReadWriteLock + ?Sized> ReadWriteLockExt for T {}
