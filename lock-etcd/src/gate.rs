//! One owner per client at a time on each exclusive lock.
//!
//! Every owner of a client shares the client's session lease, and the exclusive key is
//! `<prefix>/<lease id>`: two owners would write the same key, and etcd's recipe
//! treats a key that already exists as "this lease holds the lock" (the v3lock
//! service: locking twice with one lease is a no-op). So owners of one client take
//! turns here, in FIFO order, and only the one at the front contends at etcd. This
//! keeps the key layout `etcdctl lock` understands, and the waiters of one process cost
//! etcd one watch in all (the vigil below). Fixed leases are leases of their own and
//! skip the gate.
//!
//! A turn ends when its grant is released, and as soon as the grant is known lost: a
//! stale guard its user keeps must not hold up the other owners of its client. The
//! backend ends it when it learns of a loss itself (see `Lease::open_on_loss`); and
//! while owners wait for a granted turn, one of them keeps a [`Vigil`] over the
//! holder: it watches the holder's key at etcd (one watch per key, whatever the number
//! of waiters) and its guard's loss (a local check), and ends the turn when either
//! goes, telling the guard when its key was deleted behind its back.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use lock_core::{LeaseLoss, Result};

use lock_core::backend::{Deadline, LossNotifier};
use tokio::sync::{watch, Mutex as AsyncMutex, OwnedMutexGuard};

/// How often a vigil looks whether the holder's guard was told of a loss (a local
/// check: lock-core ends a lease whose renewals failed without telling the backend).
const LOSS_POLL: Duration = Duration::from_millis(100);

/// Watches a holder's key at etcd for a [vigil](self).
pub(crate) trait Vigil: Sync {
    /// Whether the holder's key is still there, created at its revision (one request).
    fn is_there(&self, holder: &Holder) -> impl Future<Output = Result<bool>> + Send;
    /// Resolves once the holder's key is gone (deleted, or its lease ended).
    fn gone(&self, holder: &Holder) -> impl Future<Output = ()> + Send;
}

/// The turns on one key.
struct Entry {
    turn: Arc<AsyncMutex<()>>,
    /// The grant that holds the turn, once granted; `None` while the turn's owner
    /// still contends at etcd, or when nobody has the turn.
    holder: watch::Sender<Option<Holder>>,
    /// Held by the one waiter that keeps the vigil.
    vigil: AsyncMutex<()>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            turn: Arc::default(),
            holder: watch::Sender::new(None),
            vigil: AsyncMutex::new(()),
        }
    }
}

type Slots = StdMutex<HashMap<String, Arc<Entry>>>;

/// The per-key turns of one client.
#[derive(Default)]
pub(crate) struct Gates {
    slots: Arc<Slots>,
}

impl fmt::Debug for Gates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gates")
            .field("keys", &lock(&self.slots).len())
            .finish()
    }
}

impl Gates {
    /// Waits for this client's turn on `key` until `deadline`; `None` if it passed
    /// first. With a passed deadline it tries once: a turn held by a grant whose guard
    /// was told of a loss, or whose key `vigil` finds gone, counts as free.
    ///
    /// Cancel safe: a dropped wait leaves the queue.
    pub(crate) async fn enter(
        &self,
        key: &str,
        deadline: Deadline,
        vigil: &impl Vigil,
    ) -> Option<GatePermit> {
        let entry = lock(&self.slots).entry(key.to_owned()).or_default().clone();
        let guard = match deadline.instant() {
            Some(_) if deadline.has_passed() => try_once(&entry, vigil).await,
            Some(at) => {
                tokio::select! {
                    guard = entry.turn.clone().lock_owned() => Some(guard),
                    () = keep_vigil(&entry, vigil) => None,
                    () = tokio::time::sleep_until(at) => None,
                }
            }
            None => {
                tokio::select! {
                    guard = entry.turn.clone().lock_owned() => Some(guard),
                    () = keep_vigil(&entry, vigil) => None,
                }
            }
        };
        match guard {
            Some(guard) => Some(GatePermit {
                guard: Some(guard),
                entry: Some(entry),
                key: key.to_owned(),
                slots: self.slots.clone(),
            }),
            None => {
                drop(entry);
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

/// A single try at the turn: free, or held by a grant that is known lost or whose key
/// is gone (one request).
async fn try_once(entry: &Entry, vigil: &impl Vigil) -> Option<OwnedMutexGuard<()>> {
    if let Ok(guard) = entry.turn.clone().try_lock_owned() {
        return Some(guard);
    }
    let holder = entry.holder.borrow().clone()?;
    let lost = !holder.loss.is_live();
    let gone = !lost && matches!(vigil.is_there(&holder).await, Ok(false));
    if !lost && !gone {
        return None;
    }
    holder.give_way(gone);
    entry.turn.clone().try_lock_owned().ok()
}

/// Keeps the vigil over the holders of `entry`'s turn, for as long as it is polled
/// (never resolves): one waiter at a time keeps it, the others queue for it.
async fn keep_vigil(entry: &Entry, vigil: &impl Vigil) {
    let _one = entry.vigil.lock().await;
    let mut holders = entry.holder.subscribe();
    loop {
        let current = holders.borrow_and_update().clone();
        let Some(holder) = current else {
            // The sender lives in `entry`, which outlives this.
            let _ = holders.changed().await;
            continue;
        };
        let gone = tokio::select! {
            () = vigil.gone(&holder) => true,
            () = lost(&holder.loss) => false,
            _ = holders.changed() => continue,
        };
        holder.give_way(gone);
        // Wait for that grant to let go of the turn before looking again (its
        // release may be retrying in the background with the turn).
        let _ = holders.changed().await;
    }
}

/// Resolves once `loss` says its lease ended.
pub(crate) async fn lost(loss: &LossNotifier) {
    while loss.is_live() {
        tokio::time::sleep(LOSS_POLL).await;
    }
}

fn lock(slots: &Slots) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
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
        .is_some_and(|entry| Arc::strong_count(entry) == 1)
    {
        map.remove(key);
    }
}

/// Where a grant keeps its turn: emptied on release, or when the grant is found lost
/// (see `Lease::open_on_loss` and [`Vigil`]), whichever comes first.
pub(crate) type GateSlot = StdMutex<Option<GatePermit>>;

/// The grant that holds a turn, as the waiters' vigil sees it.
#[derive(Clone)]
pub(crate) struct Holder {
    /// Its key at etcd, and the key's create revision.
    pub(crate) key: String,
    pub(crate) revision: i64,
    loss: LossNotifier,
    /// Set when its owner releases it: the key's deletion is then no loss.
    releasing: Arc<AtomicBool>,
    slot: Weak<GateSlot>,
}

impl Holder {
    pub(crate) fn new(
        key: String,
        revision: i64,
        loss: LossNotifier,
        releasing: Arc<AtomicBool>,
        slot: Weak<GateSlot>,
    ) -> Self {
        Holder {
            key,
            revision,
            loss,
            releasing,
            slot,
        }
    }

    /// What tells its guard of a loss.
    pub(crate) fn loss(&self) -> &LossNotifier {
        &self.loss
    }

    /// Ends the grant's turn; if its key is `gone` behind its back, tells its guard.
    pub(crate) fn give_way(&self, gone: bool) {
        if gone && !self.releasing.load(Ordering::Acquire) {
            tracing::warn!(key = %self.key, "etcd lock key gone while its guard is kept; the next owner of this client goes ahead");
            self.loss.notify(LeaseLoss::Revoked);
        }
        if let Some(slot) = self.slot.upgrade() {
            let permit = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(permit);
        }
    }
}

/// This owner's turn on one key; the next owner's starts when it is dropped.
pub(crate) struct GatePermit {
    guard: Option<OwnedMutexGuard<()>>,
    /// Taken out only on drop.
    entry: Option<Arc<Entry>>,
    key: String,
    slots: Arc<Slots>,
}

impl GatePermit {
    /// The turn now belongs to a grant: the waiters' vigil watches it.
    pub(crate) fn announce(&self, holder: Holder) {
        if let Some(entry) = &self.entry {
            entry.holder.send_replace(Some(holder));
        }
    }
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
        if let Some(entry) = self.entry.take() {
            entry.holder.send_replace(None);
        }
        self.guard.take();
        // The entry goes with the last of its permits and waiters.
        tidy(&self.slots, &self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::backend::{AcquireRequest, Grant, HeldLease, LockBackend, Renewal};
    use lock_core::memory::MemoryBackend;
    use lock_core::prelude::*;
    use lock_core::{AcquireOptions, Capabilities, LockClient, LockFamily, LockKey};
    use std::time::Duration;
    use tokio::sync::Notify;

    /// Stands in for the holder's key at etcd (the vigil against a real etcd is tested
    /// in tests/etcd.rs): there until `delete`.
    #[derive(Default)]
    struct Key {
        deleted: Notify,
        gone: AtomicBool,
    }

    impl Key {
        fn delete(&self) {
            self.gone.store(true, Ordering::Release);
            self.deleted.notify_waiters();
        }
    }

    impl Vigil for Key {
        async fn is_there(&self, _: &Holder) -> Result<bool> {
            Ok(!self.gone.load(Ordering::Acquire))
        }
        async fn gone(&self, _: &Holder) {
            let deleted = self.deleted.notified();
            if !self.gone.load(Ordering::Acquire) {
                deleted.await;
            }
        }
    }

    /// lock-core's in-memory backend, handing out each grant's loss notifier (a guard's
    /// view of its lease, which only lock-core makes).
    #[derive(Debug, Default)]
    struct Noting {
        memory: MemoryBackend,
        notifiers: Arc<StdMutex<Vec<LossNotifier>>>,
    }

    impl LockBackend for Noting {
        type Lease = ();
        fn name(&self) -> &'static str {
            self.memory.name()
        }
        fn capabilities(&self) -> Capabilities {
            self.memory.capabilities()
        }
        async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<()>>> {
            self.notifiers.lock().unwrap().push(req.loss.clone());
            self.memory.acquire(req).await
        }
        async fn release(&self, lease: &HeldLease<()>) -> Result<()> {
            self.memory.release(lease).await
        }
        async fn renew(&self, leases: &[&HeldLease<()>], ttl: Duration) -> Result<Vec<Renewal>> {
            self.memory.renew(leases, ttl).await
        }
        async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
            self.memory.is_locked(key, family).await
        }
        async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
            self.memory.force_unlock(key, family).await
        }
    }

    /// Takes the turn on "k" and announces it as held by a grant with `loss`; the
    /// permit sits in the returned slot, as in an `EtcdLease`.
    async fn held_turn(gates: &Gates, loss: LossNotifier) -> Arc<GateSlot> {
        let permit = gates
            .enter("k", Deadline::never(), &Key::default())
            .await
            .expect("free");
        let slot: Arc<GateSlot> = Arc::new(StdMutex::new(None));
        permit.announce(Holder::new(
            "k/1".into(),
            7,
            loss,
            Arc::new(AtomicBool::new(false)),
            Arc::downgrade(&slot),
        ));
        *slot.lock().unwrap() = Some(permit);
        slot
    }

    #[tokio::test]
    async fn turns_are_exclusive_and_leave_nothing_behind() {
        let key = Key::default();
        let gates = Gates::default();
        let first = gates
            .enter("k", Deadline::never(), &key)
            .await
            .expect("free");
        assert!(gates
            .enter("k", Deadline::after(Duration::ZERO), &key)
            .await
            .is_none());
        assert!(gates
            .enter("k", Deadline::after(Duration::from_millis(20)), &key)
            .await
            .is_none());
        let other = gates
            .enter("other", Deadline::after(Duration::ZERO), &key)
            .await;
        assert!(other.is_some());
        drop(other);
        drop(first);
        assert_eq!(gates.len(), 0);
        let again = gates
            .enter("k", Deadline::after(Duration::ZERO), &key)
            .await;
        assert!(again.is_some());
        drop(again);
        assert_eq!(gates.len(), 0);
    }

    #[tokio::test]
    async fn the_turn_of_a_grant_whose_key_goes_passes_on_and_its_guard_is_told() {
        let backend = Noting::default();
        let notifiers = backend.notifiers.clone();
        let client = LockClient::new(backend);
        let guard = client.lock("x").unwrap().acquire().await.unwrap();
        let loss = notifiers.lock().unwrap().pop().unwrap();
        let gates = Gates::default();
        let key = Key::default();
        let slot = held_turn(&gates, loss).await;
        let waiting = gates.enter("k", Deadline::after(Duration::from_secs(30)), &key);
        tokio::pin!(waiting);
        tokio::select! {
            _ = &mut waiting => panic!("entered a held turn"),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        key.delete();
        let permit = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the turn passes on")
            .expect("entered");
        assert!(slot.lock().unwrap().is_none(), "the grant's turn ended");
        let told = tokio::time::timeout(Duration::from_secs(1), guard.lost()).await;
        assert_eq!(told, Ok(LeaseLoss::Revoked));
        drop(permit);
        assert_eq!(gates.len(), 0);
    }

    /// lock-core ends a lease without telling the backend when it runs out unrenewed
    /// (its renewals failed, or it was fixed): the turn passes on all the same.
    #[tokio::test]
    async fn the_turn_of_a_grant_lost_to_lock_core_passes_on() {
        let backend = Noting::default();
        let notifiers = backend.notifiers.clone();
        let client = LockClient::new(backend);
        let short = |ms| AcquireOptions::try_once().lease(Duration::from_millis(ms));
        let guard = client
            .lock("x")
            .unwrap()
            .acquire_with(short(300))
            .await
            .unwrap();
        let loss = notifiers.lock().unwrap().pop().unwrap();
        let gates = Gates::default();
        let key = Key::default();
        let slot = held_turn(&gates, loss).await;
        assert!(
            gates
                .enter("k", Deadline::after(Duration::ZERO), &key)
                .await
                .is_none(),
            "a single try entered a live grant's turn"
        );
        let permit = gates
            .enter("k", Deadline::after(Duration::from_secs(30)), &key)
            .await
            .expect("the turn passes on once the lease ran out");
        assert!(!guard.is_held());
        assert!(slot.lock().unwrap().is_none());
        drop(permit);
        // A single try takes the turn of a grant known lost, too.
        let guard = client
            .lock("y")
            .unwrap()
            .acquire_with(short(100))
            .await
            .unwrap();
        let loss = notifiers.lock().unwrap().pop().unwrap();
        let _slot = held_turn(&gates, loss).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!guard.is_held());
        let single = gates
            .enter("k", Deadline::after(Duration::ZERO), &key)
            .await;
        assert!(single.is_some(), "a single try waited for a lost grant");
    }
}
