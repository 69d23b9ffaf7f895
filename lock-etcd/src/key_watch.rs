//! Tells a holder within a moment that its key was deleted behind its back (a
//! force-unlock, an operator's `etcdctl del`), instead of at its next renewal, which
//! comes only every third of the lease and never for a fixed lease.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::Inner;
use crate::gate::{self, Holder, Vigil};

/// How long a grant is held before its key is watched. A lock held for less costs
/// nothing more than before (a watch is two requests); one held longer learns of a
/// deletion within this plus a round trip, since the watch begins with a look at the
/// key.
pub(crate) const WATCH_AFTER: Duration = Duration::from_millis(200);

/// The watch on one held key; it ends when stopped or dropped (the lease released or
/// gone).
#[derive(Debug)]
pub(crate) struct KeyWatch {
    stop: Arc<Notify>,
}

impl KeyWatch {
    /// Watches `holder`'s key from [`WATCH_AFTER`] on; if it goes while its owner is not
    /// releasing it, the guard is told ([`LeaseLoss::Revoked`](lock_core::LeaseLoss))
    /// and this client's next owner of the key may go ahead.
    pub(crate) fn start(inner: &Arc<Inner>, holder: Holder) -> Self {
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let inner = inner.clone();
        tokio::spawn(async move {
            let gone = async {
                tokio::time::sleep(WATCH_AFTER).await;
                inner.gone(&holder).await;
            };
            tokio::select! {
                () = gone => holder.give_way(true),
                () = stopped.notified() => {}
                () = gate::lost(holder.loss()) => {}
            }
        });
        KeyWatch { stop }
    }

    /// Ends the watch: the owner is releasing the key.
    pub(crate) fn stop(&self) {
        self.stop.notify_one();
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        // `notify_one` keeps the wake-up if the task is not waiting yet.
        self.stop.notify_one();
    }
}
