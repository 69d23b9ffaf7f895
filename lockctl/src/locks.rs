//! Which lock a name means for lockctl.
//!
//! A run takes the **write side of the read-write lock** NAME, and `--shared` its
//! read side, so shared and exclusive runs of one name exclude each other. On a
//! backend without read-write locks (RedLock, SQL with `lock_strategy=for-update` or
//! `session`) runs take the exclusive lock NAME instead, and `--shared` is refused.
//! `status`, `wait` and `force-unlock` look at, or break, the same lock. A program that must
//! exclude lockctl runs takes `client.rw_lock(NAME)?.write()` (or `client.lock(NAME)`
//! on those backends). `run -N N` takes a permit of the semaphore NAME instead, which
//! is a lock of its own (`client.semaphore(NAME, N)`), and `elect` the leadership of
//! the election NAME (`client.election(NAME)`); `-N N` and `--election` point
//! `status`, `wait` and `force-unlock` at those.

use std::sync::Arc;

use distributed_locks::{
    AcquireOptions, DistributedLock, Election, Error, LockGuard, LockInfo, LockKind, LockProvider,
    ReadWriteLock, Result, Semaphore,
};

use crate::cli::WhichLock;

/// The lock a name means on one backend.
#[derive(Debug)]
pub(crate) enum RunLock {
    /// Both sides of a read-write lock: exclusive runs write, shared runs read.
    ReadWrite(Arc<dyn ReadWriteLock>),
    /// An exclusive lock, where the backend has no read-write locks.
    Exclusive(Arc<dyn DistributedLock>),
    /// A semaphore (`run -N N`): at most N runs at once.
    Semaphore(Arc<dyn Semaphore>),
    /// An election (`elect`): one leader at a time.
    Election(Arc<dyn Election>),
}

impl RunLock {
    /// The lock `name` means on `client`'s backend.
    ///
    /// # Errors
    /// An invalid name.
    pub(crate) fn of(client: &dyn LockProvider, name: &str) -> Result<Self> {
        Ok(if client.capabilities().read_write {
            RunLock::ReadWrite(client.rw_lock(name)?)
        } else {
            RunLock::Exclusive(client.lock(name)?)
        })
    }

    /// The lock `which` names: the semaphore `name`, the election `name`, or else the
    /// lock `name`.
    ///
    /// # Errors
    /// As [`RunLock::of`], [`RunLock::semaphore`] and [`RunLock::election`].
    pub(crate) fn named(client: &dyn LockProvider, name: &str, which: &WhichLock) -> Result<Self> {
        match (which.permits, which.election) {
            (Some(permits), _) => Self::semaphore(client, name, permits),
            (None, true) => Self::election(client, name),
            (None, false) => Self::of(client, name),
        }
    }

    /// The semaphore `name` of `permits` on `client`'s backend (a backend without
    /// semaphores refuses it at first use).
    ///
    /// # Errors
    /// An invalid name or count.
    pub(crate) fn semaphore(client: &dyn LockProvider, name: &str, permits: u32) -> Result<Self> {
        Ok(RunLock::Semaphore(client.semaphore(name, permits)?))
    }

    /// The election `name` on `client`'s backend (a backend without elections refuses
    /// it at first use).
    ///
    /// # Errors
    /// An invalid name.
    pub(crate) fn election(client: &dyn LockProvider, name: &str) -> Result<Self> {
        Ok(RunLock::Election(client.election(name)?))
    }

    /// What it is, for messages: "lock" or "election".
    pub(crate) fn what(&self) -> &'static str {
        match self {
            RunLock::Election(_) => "election",
            _ => "lock",
        }
    }

    /// The kind of lock it is (the write side of one runs can share).
    pub(crate) fn kind(&self) -> LockKind {
        match self {
            RunLock::ReadWrite(_) => LockKind::Write,
            RunLock::Exclusive(_) => LockKind::Exclusive,
            RunLock::Semaphore(_) => LockKind::Permit,
            RunLock::Election(_) => LockKind::Leader,
        }
    }

    /// Whether runs can share it (`--shared`).
    pub(crate) fn can_share(&self) -> bool {
        matches!(self, RunLock::ReadWrite(_))
    }

    /// Acquires the shared (read) side if `shared`, else the exclusive one; in an
    /// election, campaigns with `value` (by default, host and pid).
    ///
    /// # Cancel safety
    /// As the lock's own acquire or campaign: nothing is left behind.
    pub(crate) async fn acquire(
        &self,
        shared: bool,
        value: Option<&str>,
        options: AcquireOptions,
    ) -> Result<LockGuard> {
        match self {
            RunLock::ReadWrite(lock) if shared => lock.read_with(options).await,
            RunLock::ReadWrite(lock) => lock.write_with(options).await,
            // `run` refuses --shared here before it gets this far.
            RunLock::Exclusive(lock) => lock.acquire_with(options).await,
            RunLock::Semaphore(semaphore) => semaphore.acquire_with(options).await,
            RunLock::Election(election) => {
                let value =
                    value.map_or_else(distributed_locks::default_holder_description, str::to_owned);
                let leadership = election.campaign_with(&value, options).await?;
                Ok(leadership.into_guard())
            }
        }
    }

    /// Whether a run would have to wait for it: anyone holds it (either side), or for
    /// a semaphore, every permit is held.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub(crate) async fn is_locked(&self) -> Result<bool> {
        match self {
            RunLock::ReadWrite(lock) => lock.is_locked().await,
            RunLock::Exclusive(lock) => lock.is_locked().await,
            RunLock::Semaphore(semaphore) => Ok(semaphore.available().await? == 0),
            RunLock::Election(election) => Ok(election.leader().await?.is_some()),
        }
    }

    /// The semaphore's count, for a semaphore.
    pub(crate) fn permits(&self) -> Option<u32> {
        match self {
            RunLock::Semaphore(semaphore) => Some(semaphore.permits()),
            _ => None,
        }
    }

    /// Who holds it (both sides) and how many wait, as far as the backend keeps them.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub(crate) async fn inspect(&self) -> Result<LockInfo> {
        match self {
            RunLock::ReadWrite(lock) => lock.inspect().await,
            RunLock::Exclusive(lock) => lock.inspect().await,
            RunLock::Semaphore(semaphore) => semaphore.inspect().await,
            RunLock::Election(election) => election.inspect().await,
        }
    }

    /// Removes only the holder whose fencing token is `token`.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    pub(crate) async fn force_unlock_holder(&self, token: u64) -> Result<bool> {
        match self {
            RunLock::ReadWrite(lock) => lock.force_unlock_holder(token).await,
            RunLock::Exclusive(lock) => lock.force_unlock_holder(token).await,
            RunLock::Semaphore(semaphore) => semaphore.force_unlock_holder(token).await,
            RunLock::Election(_) => Err(Error::invalid_argument(
                "an election's leader is removed whole: force-unlock without --token",
            )),
        }
    }

    /// Removes every holder (both sides).
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        match self {
            RunLock::ReadWrite(lock) => lock.force_unlock().await,
            RunLock::Exclusive(lock) => lock.force_unlock().await,
            RunLock::Semaphore(semaphore) => semaphore.force_unlock().await,
            RunLock::Election(election) => election.force_unlock().await,
        }
    }
}
