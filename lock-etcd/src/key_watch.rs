//! Tells a holder within a moment that its key was deleted behind its back (a
//! force-unlock, an operator's `etcdctl del`), instead of at its next renewal, which
//! comes only every third of the lease and never for a fixed lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::Inner;
use crate::error::within;
use crate::gate::{self, Holder, Vigil};
use crate::lease::Lease;

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
    /// Watches `holder`'s key, which hangs on `lease`, from [`WATCH_AFTER`] on. If it
    /// goes while its owner is not releasing it, the guard is told and this client's
    /// next owner of the key may go ahead: [`LeaseLoss::SessionLost`] to every guard on
    /// the lease if the lease went with it (revoked, expired), else
    /// [`LeaseLoss::Revoked`].
    ///
    /// [`LeaseLoss::SessionLost`]: lock_core::LeaseLoss::SessionLost
    /// [`LeaseLoss::Revoked`]: lock_core::LeaseLoss::Revoked
    pub(crate) fn start(inner: &Arc<Inner>, holder: Holder, lease: Arc<Mutex<Arc<Lease>>>) -> Self {
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let inner = inner.clone();
        tokio::spawn(async move {
            let gone = async {
                tokio::time::sleep(WATCH_AFTER).await;
                inner.gone(&holder).await;
            };
            tokio::select! {
                () = gone => {
                    let lease = lease.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    if lease_is_gone(&inner, &lease).await {
                        lease.lost();
                    }
                    holder.give_way(true);
                }
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

/// Whether etcd says `lease` no longer exists; `false` when it cannot say (the key's
/// deletion is then reported as a revocation, the lease's end at the next keep-alive).
async fn lease_is_gone(inner: &Inner, lease: &Lease) -> bool {
    let mut leases = inner.client.lease_client();
    let asked = within(
        "lease time-to-live",
        inner.config.request_timeout(),
        leases.time_to_live(lease.id(), None),
    )
    .await;
    matches!(asked, Ok(reply) if reply.ttl() <= 0)
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        // `notify_one` keeps the wake-up if the task is not waiting yet.
        self.stop.notify_one();
    }
}
