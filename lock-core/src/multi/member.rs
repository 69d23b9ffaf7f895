//! One lock of a [`MultiLock`](super::MultiLock), whatever its type.

use std::fmt;
use std::sync::Arc;

use crate::api::{DistributedLock, ReadWriteLock};
use crate::backend::{Capabilities, LockFamily, LockKind};
use crate::error::Result;
use crate::guard::LockGuard;
use crate::id::LockId;
use crate::options::{AcquireOptions, Lease};
use crate::semaphore::Semaphore;

/// The handle a member acquires through.
#[derive(Clone)]
enum Handle {
    /// An exclusive or fair lock.
    Mutex(Arc<dyn DistributedLock>),
    /// The read side of a read-write lock.
    Read(Arc<dyn ReadWriteLock>),
    /// The write side of a read-write lock.
    Write(Arc<dyn ReadWriteLock>),
    /// A permit of a semaphore.
    Permit(Arc<dyn Semaphore>),
}

/// A member: its handle and what the multi-lock needs to know of it up front.
#[derive(Clone)]
pub(super) struct Member {
    handle: Handle,
    id: LockId,
    kind: LockKind,
    capabilities: Capabilities,
}

impl Member {
    pub(super) fn mutex(lock: Arc<dyn DistributedLock>) -> Self {
        let id = lock.lock_id();
        // An exclusive view of a read-write lock (a wrapper's) takes its write side.
        let kind = match id.family() {
            LockFamily::Exclusive => LockKind::Exclusive,
            LockFamily::Fair => LockKind::Fair,
            LockFamily::ReadWrite => LockKind::Write,
            LockFamily::Semaphore => LockKind::Permit,
            LockFamily::Election => LockKind::Leader,
        };
        let capabilities = lock.capabilities();
        Member {
            handle: Handle::Mutex(lock),
            id,
            kind,
            capabilities,
        }
    }

    pub(super) fn permit(semaphore: Arc<dyn Semaphore>) -> Self {
        Member {
            id: semaphore.lock_id(),
            kind: LockKind::Permit,
            capabilities: semaphore.capabilities(),
            handle: Handle::Permit(semaphore),
        }
    }

    pub(super) fn read(lock: Arc<dyn ReadWriteLock>) -> Self {
        Self::side(lock, LockKind::Read)
    }

    pub(super) fn write(lock: Arc<dyn ReadWriteLock>) -> Self {
        Self::side(lock, LockKind::Write)
    }

    fn side(lock: Arc<dyn ReadWriteLock>, kind: LockKind) -> Self {
        let id = lock.lock_id();
        let capabilities = lock.capabilities();
        let handle = match kind {
            LockKind::Read => Handle::Read(lock),
            _ => Handle::Write(lock),
        };
        Member {
            handle,
            id,
            kind,
            capabilities,
        }
    }

    pub(super) fn id(&self) -> &LockId {
        &self.id
    }

    pub(super) fn kind(&self) -> LockKind {
        self.kind
    }

    /// [`Error::Unsupported`](crate::Error::Unsupported) if the backend lacks this
    /// member's lock type or `lease`.
    pub(super) fn check_supported(&self, lease: Lease) -> Result<()> {
        self.capabilities
            .require(self.id.backend(), self.kind, lease)
    }

    /// Guards of acquires through this member's handle held on live leases of its side.
    pub(super) fn hold_count(&self) -> u32 {
        match &self.handle {
            Handle::Mutex(lock) => lock.hold_count(),
            Handle::Read(lock) => lock.read_hold_count(),
            Handle::Write(lock) => lock.write_hold_count(),
            Handle::Permit(semaphore) => semaphore.hold_count(),
        }
    }

    /// Acquires through the member's own handle, as an owner of its own.
    ///
    /// # Cancel safety
    /// As the handle's acquire: nothing is left behind.
    pub(super) async fn acquire(&self, options: AcquireOptions) -> Result<LockGuard> {
        match &self.handle {
            Handle::Mutex(lock) => lock.acquire_with(options).await,
            Handle::Read(lock) => lock.read_with(options).await,
            Handle::Write(lock) => lock.write_with(options).await,
            Handle::Permit(semaphore) => semaphore.acquire_with(options).await,
        }
    }
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish()
    }
}
