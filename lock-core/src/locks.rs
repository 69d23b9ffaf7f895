//! The three lock handles: thin wrappers that give one [`Owner`] the user-facing traits.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{DistributedLock, FairLock, ReadWriteLock};
use crate::backend::{Capabilities, LockBackend, LockFamily, LockKind};
use crate::client::ClientInner;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::id::LockId;
use crate::name::{LockKey, LockName};
use crate::options::AcquireOptions;
use crate::owner::Owner;

/// Defines a handle type around one owner, with the parts all three share.
macro_rules! lock_handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name<B: LockBackend> {
            owner: Arc<Owner<B>>,
        }

        impl<B: LockBackend> $name<B> {
            pub(crate) fn new(client: Arc<ClientInner<B>>, key: LockKey) -> Self {
                $name { owner: Owner::new(client, key) }
            }

            /// Where the lock lives: namespace and name.
            pub fn key(&self) -> &LockKey {
                self.owner.key()
            }
        }

        /// A clone is the same owner: it re-enters the locks this one holds.
        impl<B: LockBackend> Clone for $name<B> {
            fn clone(&self) -> Self {
                $name { owner: self.owner.clone() }
            }
        }

        impl<B: LockBackend> fmt::Debug for $name<B> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("key", self.owner.key())
                    .field("backend", &self.owner.backend().name())
                    .finish()
            }
        }
    };
}

lock_handle!(
    /// An exclusive, reentrant lock: one owner of one name. Implements
    /// [`DistributedLock`]; made by [`LockClient::lock`](crate::LockClient::lock).
    ///
    /// Each handle is its own owner; clones of it are the same owner.
    Mutex
);
lock_handle!(
    /// A fair (FIFO) exclusive lock: one owner of one name. Implements [`FairLock`];
    /// made by [`LockClient::fair_lock`](crate::LockClient::fair_lock).
    ///
    /// Each handle is its own owner; clones of it are the same owner.
    FairMutex
);
lock_handle!(
    /// A read-write lock: one owner of one name. Implements [`ReadWriteLock`]; made by
    /// [`LockClient::rw_lock`](crate::LockClient::rw_lock).
    ///
    /// Each handle is its own owner; clones of it are the same owner.
    RwLock
);

/// Implements [`DistributedLock`] for an exclusive handle taking `$kind` leases.
macro_rules! exclusive_lock {
    ($name:ident, $kind:expr, $family:expr) => {
        #[async_trait]
        impl<B: LockBackend> DistributedLock for $name<B> {
            fn name(&self) -> &LockName {
                self.owner.key().name()
            }

            fn lock_id(&self) -> LockId {
                self.owner.lock_id($family)
            }

            fn capabilities(&self) -> Capabilities {
                self.owner.backend().capabilities()
            }

            async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
                self.owner.acquire($kind, options).await
            }

            fn hold_count(&self) -> u32 {
                self.owner.hold_count($kind)
            }

            async fn is_locked(&self) -> Result<bool> {
                self.owner
                    .backend()
                    .is_locked(self.owner.key(), $family)
                    .await
            }

            async fn force_unlock(&self) -> Result<bool> {
                self.owner
                    .backend()
                    .force_unlock(self.owner.key(), $family)
                    .await
            }
        }
    };
}

exclusive_lock!(Mutex, LockKind::Exclusive, LockFamily::Exclusive);
exclusive_lock!(FairMutex, LockKind::Fair, LockFamily::Fair);

impl<B: LockBackend> FairLock for FairMutex<B> {}

#[async_trait]
impl<B: LockBackend> ReadWriteLock for RwLock<B> {
    fn name(&self) -> &LockName {
        self.owner.key().name()
    }

    fn lock_id(&self) -> LockId {
        self.owner.lock_id(LockFamily::ReadWrite)
    }

    fn capabilities(&self) -> Capabilities {
        self.owner.backend().capabilities()
    }

    async fn read_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.owner.acquire(LockKind::Read, options).await
    }

    async fn write_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.owner.acquire(LockKind::Write, options).await
    }

    fn read_hold_count(&self) -> u32 {
        self.owner.hold_count(LockKind::Read)
    }

    fn write_hold_count(&self) -> u32 {
        self.owner.hold_count(LockKind::Write)
    }

    async fn is_locked(&self) -> Result<bool> {
        self.owner
            .backend()
            .is_locked(self.owner.key(), LockFamily::ReadWrite)
            .await
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.owner
            .backend()
            .force_unlock(self.owner.key(), LockFamily::ReadWrite)
            .await
    }
}
