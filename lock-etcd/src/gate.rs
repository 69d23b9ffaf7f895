//! One owner per client at a time on each exclusive lock.
//!
//! Every owner of a client shares the client's session lease, and the exclusive key is
//! `<prefix>/<lease id>`: two owners would write the same key, and etcd's recipe
//! treats a key that already exists as "this lease holds the lock" (the v3lock
//! service: locking twice with one lease is a no-op). So owners of one client take
//! turns here, in FIFO order, and only the one at the front contends at etcd. This
//! keeps the key layout `etcdctl lock` understands and costs waiters of one process no
//! round trips and no watches. Fixed leases are leases of their own and skip the gate.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex as StdMutex};

use lock_core::backend::Deadline;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type Slots = StdMutex<HashMap<String, Arc<AsyncMutex<()>>>>;

/// The per-key turns of one client.
#[derive(Debug, Default)]
pub(crate) struct Gates {
    slots: Arc<Slots>,
}

impl Gates {
    /// Waits for this client's turn on `key` until `deadline`; `None` if it passed
    /// first. With a passed deadline it tries once.
    ///
    /// Cancel safe: a dropped wait leaves the queue.
    pub(crate) async fn enter(&self, key: &str, deadline: Deadline) -> Option<GatePermit> {
        let slot = lock(&self.slots).entry(key.to_owned()).or_default().clone();
        let guard = match deadline.instant() {
            None => Some(slot.clone().lock_owned().await),
            // `timeout_at` polls the lock once before looking at the deadline, so a
            // free gate is entered even with a passed deadline.
            Some(at) => tokio::time::timeout_at(at, slot.clone().lock_owned())
                .await
                .ok(),
        };
        drop(slot);
        match guard {
            Some(guard) => Some(GatePermit {
                guard: Some(guard),
                key: key.to_owned(),
                slots: self.slots.clone(),
            }),
            None => {
                tidy(&self.slots, key);
                None
            }
        }
    }

    /// How many keys have an entry (tests check nothing is left behind).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.slots).len()
    }
}

fn lock(slots: &Slots) -> std::sync::MutexGuard<'_, HashMap<String, Arc<AsyncMutex<()>>>> {
    // Insert and remove only: nothing a panic could leave half done.
    slots
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Drops the key's entry once nobody holds or waits for it.
fn tidy(slots: &Slots, key: &str) {
    let mut map = lock(slots);
    if map
        .get(key)
        .is_some_and(|slot| Arc::strong_count(slot) == 1)
    {
        map.remove(key);
    }
}

/// This owner's turn on one key; the next owner's starts when it is dropped.
/// Where a grant keeps its turn: emptied on release, or when the lease under the
/// grant is lost (see `Lease::open_on_loss`), whichever comes first.
pub(crate) type GateSlot = StdMutex<Option<GatePermit>>;

pub(crate) struct GatePermit {
    guard: Option<OwnedMutexGuard<()>>,
    key: String,
    slots: Arc<Slots>,
}

impl fmt::Debug for GatePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatePermit")
            .field("key", &self.key)
            .finish()
    }
}

impl Drop for GatePermit {
    fn drop(&mut self) {
        self.guard.take();
        tidy(&self.slots, &self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn turns_are_exclusive_and_leave_nothing_behind() {
        let gates = Gates::default();
        let first = gates.enter("k", Deadline::never()).await.expect("free");
        assert!(gates
            .enter("k", Deadline::after(Duration::ZERO))
            .await
            .is_none());
        assert!(gates
            .enter("k", Deadline::after(Duration::from_millis(20)))
            .await
            .is_none());
        let other = gates.enter("other", Deadline::after(Duration::ZERO)).await;
        assert!(other.is_some());
        drop(other);
        drop(first);
        assert_eq!(gates.len(), 0);
        let again = gates.enter("k", Deadline::after(Duration::ZERO)).await;
        assert!(again.is_some());
        drop(again);
        assert_eq!(gates.len(), 0);
    }
}
