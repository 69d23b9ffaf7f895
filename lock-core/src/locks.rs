//! The three lock handles: thin wrappers that give one [`Handle`] the user-facing traits.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{DistributedLock, FairLock, ReadWriteLock};
use crate::backend::LockBackend;
use crate::client::ClientInner;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::handle::Handle;
use crate::id::LockId;
use crate::info::LockInfo;
use crate::kinds::{Capabilities, LockFamily, LockKind};
use crate::name::{LockKey, LockName};
use crate::options::AcquireOptions;

/// Defines a handle type around one [`Handle`], with the parts all three share.
macro_rules! lock_handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name<B: LockBackend> {
            handle: Arc<Handle<B>>,
        }

        impl<B: LockBackend> $name<B> {
            pub(crate) fn new(client: Arc<ClientInner<B>>, key: LockKey) -> Self {
                $name { handle: Handle::new(client, key) }
            }

            /// Where the lock lives: namespace and name.
            pub fn key(&self) -> &LockKey {
                self.handle.key()
            }
        }

        /// A clone is the same handle: its hold counts are this one's. Acquiring
        /// through either is, as always, an owner of its own.
        impl<B: LockBackend> Clone for $name<B> {
            fn clone(&self) -> Self {
                $name { handle: self.handle.clone() }
            }
        }

        impl<B: LockBackend> fmt::Debug for $name<B> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("key", self.handle.key())
                    .field("backend", &self.handle.backend().name())
                    .finish()
            }
        }
    };
}

lock_handle!(
    /// A handle on an exclusive lock. Implements
    /// [`DistributedLock`]; made by [`LockClient::lock`](crate::LockClient::lock).
    ///
    /// Every acquire through it is an owner of its own; see
    /// [`LockGuard`](crate::LockGuard#owners-and-re-entry).
    LockHandle
);
lock_handle!(
    /// A handle on a fair (FIFO) exclusive lock. Implements [`FairLock`];
    /// made by [`LockClient::fair_lock`](crate::LockClient::fair_lock).
    ///
    /// Every acquire through it is an owner of its own; see
    /// [`LockGuard`](crate::LockGuard#owners-and-re-entry).
    FairLockHandle
);
lock_handle!(
    /// A handle on a read-write lock. Implements [`ReadWriteLock`]; made by
    /// [`LockClient::rw_lock`](crate::LockClient::rw_lock).
    ///
    /// Every acquire through it is an owner of its own; see
    /// [`LockGuard`](crate::LockGuard#owners-and-re-entry).
    ReadWriteLockHandle
);

/// Implements [`DistributedLock`] for an exclusive handle taking `$kind` leases.
macro_rules! exclusive_lock {
    ($name:ident, $kind:expr, $family:expr) => {
        #[async_trait]
        impl<B: LockBackend> DistributedLock for $name<B> {
            fn name(&self) -> &LockName {
                self.handle.key().name()
            }

            fn lock_id(&self) -> LockId {
                self.handle.lock_id($family)
            }

            fn capabilities(&self) -> Capabilities {
                self.handle.backend().capabilities()
            }

            async fn acquire_with(&self, options: AcquireOptions) -> Result<LockGuard> {
                self.handle.acquire($kind, options).await
            }

            fn hold_count(&self) -> u32 {
                self.handle.hold_count($kind)
            }

            async fn is_locked(&self) -> Result<bool> {
                self.handle
                    .backend()
                    .is_locked(self.handle.key(), $family)
                    .await
            }

            async fn force_unlock(&self) -> Result<bool> {
                self.handle
                    .backend()
                    .force_unlock(self.handle.key(), $family)
                    .await
            }

            async fn force_unlock_holder(&self, token: u64) -> Result<bool> {
                self.handle
                    .backend()
                    .force_unlock_holder(self.handle.key(), $family, token)
                    .await
            }

            async fn inspect(&self) -> Result<LockInfo> {
                self.handle
                    .backend()
                    .inspect(self.handle.key(), $family)
                    .await
            }
        }
    };
}

exclusive_lock!(LockHandle, LockKind::Exclusive, LockFamily::Exclusive);
exclusive_lock!(FairLockHandle, LockKind::Fair, LockFamily::Fair);

impl<B: LockBackend> FairLock for FairLockHandle<B> {}

#[async_trait]
impl<B: LockBackend> ReadWriteLock for ReadWriteLockHandle<B> {
    fn name(&self) -> &LockName {
        self.handle.key().name()
    }

    fn lock_id(&self) -> LockId {
        self.handle.lock_id(LockFamily::ReadWrite)
    }

    fn capabilities(&self) -> Capabilities {
        self.handle.backend().capabilities()
    }

    async fn read_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.handle.acquire(LockKind::Read, options).await
    }

    async fn write_with(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.handle.acquire(LockKind::Write, options).await
    }

    fn read_hold_count(&self) -> u32 {
        self.handle.hold_count(LockKind::Read)
    }

    fn write_hold_count(&self) -> u32 {
        self.handle.hold_count(LockKind::Write)
    }

    async fn is_locked(&self) -> Result<bool> {
        self.handle
            .backend()
            .is_locked(self.handle.key(), LockFamily::ReadWrite)
            .await
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.handle
            .backend()
            .force_unlock(self.handle.key(), LockFamily::ReadWrite)
            .await
    }

    async fn force_unlock_holder(&self, token: u64) -> Result<bool> {
        self.handle
            .backend()
            .force_unlock_holder(self.handle.key(), LockFamily::ReadWrite, token)
            .await
    }

    async fn inspect(&self) -> Result<LockInfo> {
        self.handle
            .backend()
            .inspect(self.handle.key(), LockFamily::ReadWrite)
            .await
    }
}
