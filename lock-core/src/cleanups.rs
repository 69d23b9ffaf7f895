//! Clean-ups that run in the background (a release retried, a dropped waiter's queue
//! place removed, a late grant undone), counted so that a program can wait for them
//! before it exits ([`LockClient::shutdown`](crate::LockClient::shutdown)).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Counts a component's background clean-ups and lets a caller wait until none is
/// left. Cloning shares the count.
///
/// Backends spawn the work they do for a dropped or failed call with
/// [`spawn_on`](Cleanups::spawn_on), or hold a [`PendingCleanup`] while they do it in a
/// task that already runs, and wait in [`LockBackend::settle`](crate::backend::LockBackend::settle)
/// with [`settled`](Cleanups::settled).
///
/// ```
/// use lock_core::backend::Cleanups;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let cleanups = Cleanups::default();
/// let runtime = tokio::runtime::Handle::current();
/// cleanups.spawn_on(&runtime, async {
///     // remove what a dropped call left on the server
/// });
/// cleanups.settled().await;
/// assert_eq!(cleanups.pending(), 0);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Cleanups {
    pending: Arc<Pending>,
}

#[derive(Debug)]
struct Pending {
    // An atomic, and only its return to zero wakes anyone: every acquire changes the
    // count of acquires under way twice.
    count: AtomicUsize,
    /// Signalled each time the count returns to zero.
    drained: Notify,
    /// The `lock_cleanups_pending{backend}` gauge this count is reported to, if any.
    gauge: Option<metrics::Gauge>,
}

impl Pending {
    fn new(gauge: Option<metrics::Gauge>) -> Arc<Self> {
        Arc::new(Pending {
            count: AtomicUsize::new(0),
            drained: Notify::new(),
            gauge,
        })
    }

    fn add(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.report();
    }

    fn remove(&self) {
        let before = self.count.fetch_sub(1, Ordering::AcqRel);
        // Only a `PendingCleanup`, made by `add`, removes.
        debug_assert!(before > 0);
        let left = before.saturating_sub(1);
        self.report();
        if left == 0 {
            self.drained.notify_waiters();
        }
    }

    /// Sets the gauge to the count as read after the change. Racing changes may leave
    /// it one change behind until the next change.
    fn report(&self) {
        if let Some(gauge) = &self.gauge {
            gauge.set(self.count.load(Ordering::Acquire) as f64);
        }
    }
}

impl Default for Cleanups {
    fn default() -> Self {
        Cleanups {
            pending: Pending::new(None),
        }
    }
}

impl Cleanups {
    /// A count that is also reported as the `lock_cleanups_pending` gauge, labelled
    /// with `backend`.
    pub fn reported(backend: &'static str) -> Self {
        Cleanups {
            pending: Pending::new(Some(metrics::gauge!(
                "lock_cleanups_pending",
                "backend" => backend
            ))),
        }
    }

    /// Counts one clean-up until the returned value is dropped.
    pub fn begin(&self) -> PendingCleanup {
        self.pending.add();
        PendingCleanup {
            pending: self.pending.clone(),
        }
    }

    /// Spawns `cleanup` on `runtime`, counted until it finishes (or the runtime drops
    /// it at shutdown).
    pub fn spawn_on<F>(&self, runtime: &tokio::runtime::Handle, cleanup: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let pending = self.begin();
        runtime.spawn(async move {
            let _pending = pending;
            cleanup.await;
        });
    }

    /// How many clean-ups are under way.
    pub fn pending(&self) -> usize {
        self.pending.count.load(Ordering::Acquire)
    }

    /// Waits until no clean-up is under way.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits; the clean-ups go on.
    pub async fn settled(&self) {
        loop {
            let drained = self.pending.drained.notified();
            tokio::pin!(drained);
            // Registered before the count is read: a return to zero after the read
            // wakes this wait rather than passing it by.
            drained.as_mut().enable();
            if self.pending() == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// One clean-up counted by [`Cleanups`], until dropped.
#[derive(Debug)]
pub struct PendingCleanup {
    pending: Arc<Pending>,
}

impl Drop for PendingCleanup {
    fn drop(&mut self) {
        self.pending.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn settled_waits_for_spawned_and_begun_cleanups() {
        let cleanups = Cleanups::default();
        cleanups.settled().await;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        cleanups.spawn_on(&tokio::runtime::Handle::current(), async move {
            let _ = rx.await;
        });
        let held = cleanups.begin();
        assert_eq!(cleanups.pending(), 2);
        let waiting = tokio::spawn({
            let cleanups = cleanups.clone();
            async move { cleanups.settled().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        tx.send(()).unwrap();
        drop(held);
        waiting.await.unwrap();
        assert_eq!(cleanups.pending(), 0);
    }
}
