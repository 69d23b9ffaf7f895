//! The in-memory backend: the reference implementation of the semantics.
//!
//! Locks live in a map behind a mutex inside one process; waiters are woken by
//! [`tokio::sync::Notify`] (fair-lock waiters individually, in queue order). Every
//! conformance test passes here first. Leases expire on their own, fencing tokens come
//! from one counter, and the watchdog renews through [`LockBackend::renew`] exactly as
//! it does over a network, so the in-memory backend also serves as a fast stand-in for
//! single-process tests of code that uses locks.
//!
//! Semaphores grant in request order: a waiter is granted while it is among the first
//! waiters the free permits admit, and a release wakes only those.
//!
//! Read-write policy: writers are preferred. Once a writer waits, new readers wait
//! behind it (the owner of the write lock may still take the read lock), so a stream
//! of readers cannot starve a writer.

mod table;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{
    AcquireRequest, Capabilities, Grant, HeldLease, LockBackend, LockFamily, LockKind, Renewal,
};
use crate::error::{Error, Result};
use crate::info::LockInfo;
use crate::lease::LeaseLoss;
use crate::name::LockKey;
use table::{Attempt, Outcome, Table};

/// Locks held in this process's memory. Clones share the same locks, so several
/// [`LockClient`](crate::LockClient)s over clones of one backend contend like clients
/// of one server.
///
/// ```
/// use lock_core::{memory::MemoryBackend, DistributedLockExt, LockClient};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let backend = MemoryBackend::new();
/// let a = LockClient::new(backend.clone());
/// let b = LockClient::new(backend);
/// let held = a.lock("shared")?.acquire().await?;
/// assert!(b.lock("shared")?.try_acquire().await?.is_none());
/// held.release().await?;
/// assert!(b.lock("shared")?.try_acquire().await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    table: Arc<Mutex<Table>>,
    /// Tells this backend's locks from those of other instances in the process.
    instance: u64,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        static INSTANCES: AtomicU64 = AtomicU64::new(1);
        MemoryBackend {
            table: Arc::default(),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Every table operation completes before it returns: no half state to poison.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many keys have any state: held, queued for or waited on. Zero once every
    /// lock is released and no one waits; tests use it to check nothing is left behind.
    pub fn active_keys(&self) -> usize {
        self.table().len()
    }

    /// The keys of `namespace` that have any state, as [`MemoryBackend::active_keys`]
    /// counts them.
    pub fn active_keys_in(&self, namespace: &str) -> Vec<LockKey> {
        self.table()
            .keys()
            .filter(|key| key.namespace().as_str() == namespace)
            .cloned()
            .collect()
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("active_keys", &self.active_keys())
            .finish()
    }
}

/// Undoes a waiter's registration (queue ticket or waiting-writer count) however the
/// acquire ends: granted, timed out, or its future dropped.
struct WaitRegistration<'a> {
    backend: &'a MemoryBackend,
    key: &'a LockKey,
    kind: LockKind,
    ticket: Option<(u64, Arc<Notify>)>,
    writer: bool,
    /// Counted as waiting (for `inspect`).
    waiting: bool,
}

impl WaitRegistration<'_> {
    /// A place in the fair or semaphore queue, taken once.
    fn queued(&mut self, permits: u32) -> Result<&(u64, Arc<Notify>)> {
        if self.ticket.is_none() {
            let ticket = self.backend.table().enqueue(self.key, self.kind, permits);
            self.ticket =
                Some(ticket.map_err(|count| Error::other_permit_count(self.key, count, permits))?);
        }
        Ok(self.ticket.as_ref().expect("queued above"))
    }

    fn waiting(&mut self) {
        if !self.waiting {
            self.waiting = true;
            self.backend.table().waiting(self.key, 1);
        }
    }

    fn writer(&mut self) {
        if !self.writer {
            self.writer = true;
            self.backend.table().writer_waiting(self.key, 1);
        }
    }
}

impl Drop for WaitRegistration<'_> {
    fn drop(&mut self) {
        let mut table = self.backend.table();
        if let Some((id, _)) = self.ticket.take() {
            // A granted ticket has left the queue already; this is then a no-op.
            table.dequeue(self.key, self.kind, id);
        }
        if self.writer {
            table.writer_waiting(self.key, -1);
        }
        if self.waiting {
            table.waiting(self.key, -1);
        }
    }
}

impl LockBackend for MemoryBackend {
    type Lease = ();

    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL.with_cross_process(false)
    }

    fn location(&self) -> String {
        format!("instance {}", self.instance)
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<()>>> {
        let mut registration = WaitRegistration {
            backend: self,
            key: req.key,
            kind: req.kind,
            ticket: None,
            writer: false,
            waiting: false,
        };
        let waits = !req.deadline.has_passed();
        loop {
            // Register for the wake-up before looking, so a release in between is seen.
            let wake = match req.kind {
                LockKind::Fair | LockKind::Leader | LockKind::Permit if waits => {
                    Some(registration.queued(req.permits)?.1.clone())
                }
                _ => None,
            };
            let wake = wake.unwrap_or_else(|| self.table().changed(req.key));
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            let attempt = Attempt {
                key: req.key,
                kind: req.kind,
                permits: req.permits,
                owner: req.owner,
                ttl: req.ttl,
                ticket: registration.ticket.as_ref().map(|(id, _)| *id),
                description: req.holder,
                loss: req.loss,
            };
            let now = Instant::now();
            let wake_at = match self.table().try_grant(&attempt, now) {
                Outcome::Granted(fence) => {
                    return Ok(Some(Grant {
                        fence,
                        data: (),
                        started_at: now,
                    }))
                }
                Outcome::Blocked { wake_at } => wake_at,
                Outcome::OtherCount(count) => {
                    return Err(Error::other_permit_count(req.key, count, req.permits))
                }
            };
            if req.deadline.has_passed() {
                return Ok(None);
            }
            registration.waiting();
            if req.kind == LockKind::Write {
                registration.writer();
            }
            // Sleep until notified, the holder's lease runs out, or the deadline.
            let until = match wake_at {
                Some(at) => Some(req.deadline.min(at)),
                None => req.deadline.instant(),
            };
            match until {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    async fn release(&self, lease: &HeldLease<()>) -> Result<()> {
        let released = self
            .table()
            .release(&lease.key, lease.kind, &lease.owner, lease.fence);
        if released {
            Ok(())
        } else {
            Err(Error::not_owner(&lease.key))
        }
    }

    async fn renew(&self, leases: &[&HeldLease<()>], ttl: Duration) -> Result<Vec<Renewal>> {
        let mut table = self.table();
        Ok(leases
            .iter()
            .map(
                |l| match table.renew(&l.key, l.kind, &l.owner, l.fence, ttl) {
                    true => Renewal::Renewed,
                    false => Renewal::Lost,
                },
            )
            .collect())
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        Ok(self.table().is_locked(key, family))
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        let (held, removed) = self.table().force_unlock(key, family);
        for loss in removed {
            loss.notify(LeaseLoss::Revoked);
        }
        Ok(held)
    }

    async fn force_unlock_holder(
        &self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> Result<bool> {
        let removed = self.table().force_unlock_holder(key, family, fence);
        if let Some(loss) = &removed {
            loss.notify(LeaseLoss::Revoked);
        }
        Ok(removed.is_some())
    }

    async fn inspect(&self, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
        Ok(self.table().inspect(key, family))
    }

    async fn proclaim(&self, lease: &HeldLease<()>, value: &str) -> Result<()> {
        if self
            .table()
            .proclaim(&lease.key, &lease.owner, lease.fence, value)
        {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                name: lease.key.name().to_string(),
            })
        }
    }
}
