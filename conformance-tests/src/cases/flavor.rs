//! The lock types that keep the mutex contract, so the mutex cases run on each.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, LockFamily, LockGuard, LockId, LockInfo,
    LockName, LockProvider, ReadWriteLock, Result,
};

use super::{Needs, FAIR, NOTHING, RW};

/// Which lock type stands in for the mutex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// [`LockProvider::lock`].
    Exclusive,
    /// [`LockProvider::fair_lock`].
    Fair,
    /// The write side of [`LockProvider::rw_lock`].
    WriteSide,
}

impl Flavor {
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Flavor::Exclusive => "exclusive",
            Flavor::Fair => "fair",
            Flavor::WriteSide => "write",
        }
    }

    pub(crate) fn needs(self) -> Needs {
        match self {
            Flavor::Exclusive => NOTHING,
            Flavor::Fair => FAIR,
            Flavor::WriteSide => RW,
        }
    }

    pub(crate) fn family(self) -> LockFamily {
        match self {
            Flavor::Exclusive => LockFamily::Exclusive,
            Flavor::Fair => LockFamily::Fair,
            Flavor::WriteSide => LockFamily::ReadWrite,
        }
    }

    /// A new owner of lock `name` of this type.
    pub(crate) fn lock(self, provider: &dyn LockProvider, name: &str) -> Arc<dyn DistributedLock> {
        let made: Result<Arc<dyn DistributedLock>> = match self {
            Flavor::Exclusive => provider.lock(name),
            Flavor::Fair => provider
                .fair_lock(name)
                .map(|l| l as Arc<dyn DistributedLock>),
            Flavor::WriteSide => provider
                .rw_lock(name)
                .map(|l| Arc::new(WriteSide(l)) as Arc<dyn DistributedLock>),
        };
        made.unwrap_or_else(|err| panic!("making lock {name:?}: {err}"))
    }
}

/// The write side of a read-write lock, seen as a mutex.
#[derive(Debug)]
struct WriteSide(Arc<dyn ReadWriteLock>);

#[async_trait]
impl DistributedLock for WriteSide {
    fn name(&self) -> &LockName {
        self.0.name()
    }

    fn lock_id(&self) -> LockId {
        self.0.lock_id()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.0.write_with(options).await
    }

    fn hold_count(&self) -> u32 {
        self.0.write_hold_count()
    }

    async fn is_locked(&self) -> Result<bool> {
        self.0.is_locked().await
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.0.force_unlock().await
    }

    async fn force_unlock_holder(&self, token: u64) -> Result<bool> {
        self.0.force_unlock_holder(token).await
    }

    async fn inspect(&self) -> Result<LockInfo> {
        self.0.inspect().await
    }
}
