//! Which lock a handle names, across clients and processes.

use std::fmt;
use std::sync::Arc;

use crate::backend::LockFamily;
use crate::name::{LockKey, LockName};

/// Which lock a handle names: its key (namespace and name), its lock family, and the
/// backend and store it lives in ([`LockBackend::location`](crate::backend::LockBackend::location)).
///
/// Handles of one lock, made by any client of the same store, have equal ids, and
/// handles of different locks have different ones. Ids are ordered by key, then family,
/// backend and location: an order every process computes alike, which is what a
/// [`MultiLock`](crate::MultiLock) takes its members in.
///
/// ```
/// use lock_core::{memory::MemoryBackend, prelude::*, LockClient, LockFamily};
/// # fn main() -> lock_core::Result<()> {
/// let backend = MemoryBackend::new();
/// let one = LockClient::new(backend.clone()).lock("orders")?;
/// let two = LockClient::new(backend).lock("orders")?;
/// assert_eq!(one.lock_id(), two.lock_id()); // two owners of one lock
/// assert_eq!(one.lock_id().family(), LockFamily::Exclusive);
/// assert!(one.lock_id().to_string().starts_with("locks/orders (exclusive, memory"));
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId {
    key: LockKey,
    family: LockFamily,
    backend: &'static str,
    location: Arc<str>,
}

impl LockId {
    /// The id of the `family` lock on `key`, kept by `backend` at `location`.
    pub fn new(
        key: LockKey,
        family: LockFamily,
        backend: &'static str,
        location: impl Into<Arc<str>>,
    ) -> Self {
        LockId {
            key,
            family,
            backend,
            location: location.into(),
        }
    }

    /// The lock's namespace and name.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        self.key.name()
    }

    /// Exclusive, fair or read-write.
    pub fn family(&self) -> LockFamily {
        self.family
    }

    /// The backend's short name (`"redis"`, `"postgres"`, ...).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// Where the backend keeps its locks (see
    /// [`LockBackend::location`](crate::backend::LockBackend::location)).
    pub fn location(&self) -> &str {
        &self.location
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let family = match self.family {
            LockFamily::Exclusive => "exclusive",
            LockFamily::Fair => "fair",
            LockFamily::ReadWrite => "read-write",
            LockFamily::Semaphore => "semaphore",
            LockFamily::Election => "election",
        };
        write!(f, "{} ({family}, {}", self.key, self.backend)?;
        if !self.location.is_empty() {
            write!(f, " at {}", self.location)?;
        }
        f.write_str(")")
    }
}

impl fmt::Debug for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockId({self})")
    }
}
