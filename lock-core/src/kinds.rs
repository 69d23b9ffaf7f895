//! The lock types and what a backend supports: what users and backends both name.

use crate::error::Result;
use crate::options::Lease;

/// Which lock a request is for. Exclusive, fair and read-write locks and semaphores on
/// one name are separate locks that do not exclude each other; they share only the
/// fencing counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKind {
    /// [`DistributedLock`](crate::DistributedLock): one holder, no order among waiters.
    Exclusive,
    /// [`FairLock`](crate::FairLock): one holder, granted in request order.
    Fair,
    /// The shared side of a [`ReadWriteLock`](crate::ReadWriteLock).
    Read,
    /// The exclusive side of a [`ReadWriteLock`](crate::ReadWriteLock).
    Write,
    /// One permit of a [`Semaphore`](crate::Semaphore): up to its count of holders at
    /// once, granted in request order.
    Permit,
    /// Leadership of an [`Election`](crate::Election): one leader, candidates served in
    /// request order, the campaign's value published as the holder's description.
    Leader,
}

impl LockKind {
    /// Read and write requests name one read-write lock; this says which lock.
    pub fn family(self) -> LockFamily {
        match self {
            LockKind::Exclusive => LockFamily::Exclusive,
            LockKind::Fair => LockFamily::Fair,
            LockKind::Read | LockKind::Write => LockFamily::ReadWrite,
            LockKind::Permit => LockFamily::Semaphore,
            LockKind::Leader => LockFamily::Election,
        }
    }
}

/// A lock type, for queries that cover both sides of a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockFamily {
    /// Exclusive locks.
    Exclusive,
    /// Fair locks.
    Fair,
    /// Read-write locks.
    ReadWrite,
    /// Semaphores.
    Semaphore,
    /// Elections.
    Election,
}

/// What a backend can do. The machinery refuses what is not supported with
/// [`Error::Unsupported`](crate::Error::Unsupported) before calling the backend, and the
/// conformance suite skips (loudly) what a backend lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// [`LockKind::Fair`] requests are granted in request order.
    pub fair: bool,
    /// [`LockKind::Read`] and [`LockKind::Write`] are supported.
    pub read_write: bool,
    /// [`LockKind::Permit`] is supported: [`Semaphore`](crate::Semaphore)s.
    pub semaphore: bool,
    /// [`LockKind::Leader`] is supported: [`Election`](crate::Election)s, with
    /// [`LockBackend::proclaim`](crate::backend::LockBackend::proclaim) and the
    /// leader's value and term readable through
    /// [`LockBackend::leader`](crate::backend::LockBackend::leader).
    pub election: bool,
    /// [`Lease::Fixed`](crate::Lease::Fixed) leases expire on their own while the client
    /// lives. False where the lease is a session (ZooKeeper).
    pub fixed_lease: bool,
    /// Locks can be shared with other processes (false for the in-memory backend).
    pub cross_process: bool,
    /// [`LockBackend::inspect`](crate::backend::LockBackend::inspect) and
    /// [`LockBackend::force_unlock_holder`](crate::backend::LockBackend::force_unlock_holder)
    /// report and break single holders, with the description each holder's client gave.
    pub inspect: bool,
    /// A holder whose lease is taken away behind its back (a force-unlock, an operator
    /// deleting it) learns of it within about a second, by a notification from the
    /// server, as long as its connection is up. Without it (SQL, RedLock) the loss is
    /// found at the watchdog's next renewal, a third of the lease later, and a fixed
    /// lease's guard says held until the lease's end.
    pub loss_notice: bool,
}

impl Capabilities {
    /// Checks that a `kind` lock with `lease` can be had, as every acquire does before
    /// anything is sent; useful to refuse early, before asking a person or starting work.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) naming what `backend` lacks.
    ///
    /// # Example
    /// ```
    /// use lock_core::{Capabilities, Lease, LockKind};
    ///
    /// let mut exclusive_only = Capabilities::ALL;
    /// exclusive_only.semaphore = false;
    /// assert!(exclusive_only.require("redlock", LockKind::Exclusive, Lease::Watchdog).is_ok());
    /// assert!(exclusive_only.require("redlock", LockKind::Permit, Lease::Watchdog).is_err());
    /// ```
    pub fn require(self, backend: &'static str, kind: LockKind, lease: Lease) -> Result<()> {
        let missing = match kind {
            LockKind::Fair if !self.fair => Some("fair locks"),
            LockKind::Read | LockKind::Write if !self.read_write => Some("read-write locks"),
            LockKind::Permit if !self.semaphore => Some("semaphores"),
            LockKind::Leader if !self.election => Some("elections"),
            _ if matches!(lease, Lease::Fixed(_)) && !self.fixed_lease => Some("fixed leases"),
            _ => None,
        };
        match missing {
            Some(operation) => Err(crate::Error::Unsupported { backend, operation }),
            None => Ok(()),
        }
    }

    /// Everything supported.
    pub const ALL: Capabilities = Capabilities {
        fair: true,
        read_write: true,
        semaphore: true,
        election: true,
        fixed_lease: true,
        cross_process: true,
        inspect: true,
        loss_notice: true,
    };

    /// The same capabilities with `cross_process` set.
    pub const fn with_cross_process(self, cross_process: bool) -> Self {
        Capabilities {
            cross_process,
            ..self
        }
    }

    /// The same capabilities with `fair` set.
    pub const fn with_fair(self, fair: bool) -> Self {
        Capabilities { fair, ..self }
    }

    /// The same capabilities with `read_write` set.
    pub const fn with_read_write(self, read_write: bool) -> Self {
        Capabilities { read_write, ..self }
    }

    /// The same capabilities with `semaphore` set.
    pub const fn with_semaphore(self, semaphore: bool) -> Self {
        Capabilities { semaphore, ..self }
    }

    /// The same capabilities with `election` set.
    pub const fn with_election(self, election: bool) -> Self {
        Capabilities { election, ..self }
    }

    /// The same capabilities with `inspect` set.
    pub const fn with_inspect(self, inspect: bool) -> Self {
        Capabilities { inspect, ..self }
    }

    /// The same capabilities with `loss_notice` set.
    pub const fn with_loss_notice(self, loss_notice: bool) -> Self {
        Capabilities {
            loss_notice,
            ..self
        }
    }

    /// The same capabilities with `fixed_lease` set.
    pub const fn with_fixed_lease(self, fixed_lease: bool) -> Self {
        Capabilities {
            fixed_lease,
            ..self
        }
    }
}
