//! A watchdog lease whose grant was answered too late for the watchdog to keep it:
//! confirmed by one renewal before its guard is handed over.
//!
//! A lease is counted from the send of the attempt that won it, but the backend counts
//! it from when it took it: a server that stalled before it took the attempt answers
//! with a lease that is live there and run out, or nearly, here. Handing that over
//! would give the caller a guard lost from the start, or before the watchdog's next
//! tick; one renewal, counted from its own send, tells whether it is still this
//! owner's.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{HeldLease, LockBackend, Renewal};
use crate::cleanups::Cleanups;
use crate::lease::Stamp;

/// Whether a watchdog lease of `ttl` counted from `started_at` for `validity` has less
/// left than the watchdog's interval (a third of `ttl`): its next tick may come too
/// late for it.
pub(crate) fn is_late(started_at: Instant, validity: Duration, ttl: Duration) -> bool {
    started_at + validity < Instant::now() + ttl / 3
}

/// What the confirming renewal of a late grant found.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Confirmation {
    /// Renewed: the lease counts from the renewal's send.
    Renewed(Stamp),
    /// The backend no longer has the lease: the guard is handed over lost.
    Lost,
    /// No answer within the lease's validity, or a failure: the lease counts from the
    /// grant's attempt, as before, and has run out or nearly (what the backend holds,
    /// it lets go at the lease's end).
    Unanswered,
}

/// Renews `held` once, and says what that found.
///
/// While this runs the lease is still pending, so live to the backend's loss notifier:
/// nothing hands its turn on. If the acquire is dropped meanwhile, the lease is
/// released in the background, as an acquire's cancel safety promises.
pub(crate) async fn confirm<B: LockBackend>(
    backend: &Arc<B>,
    cleanups: &Cleanups,
    held: HeldLease<B::Lease>,
    ttl: Duration,
    validity: Duration,
) -> (HeldLease<B::Lease>, Confirmation) {
    let pending = ReleasedIfDropped {
        backend: backend.clone(),
        cleanups: cleanups.clone(),
        held: Some(held),
    };
    let sent = Stamp::now();
    let renewal = {
        let leases: Vec<&HeldLease<B::Lease>> = pending.held.iter().collect();
        tokio::time::timeout(validity, backend.renew(&leases, ttl)).await
    };
    let held = pending.disarm();
    let confirmation = match &renewal {
        Ok(Ok(r)) if matches!(r.as_slice(), [Renewal::Renewed]) => Confirmation::Renewed(sent),
        Ok(Ok(r)) if matches!(r.as_slice(), [Renewal::Lost]) => Confirmation::Lost,
        _ => Confirmation::Unanswered,
    };
    tracing::debug!(key = %held.key, fence = held.fence, ?renewal, ?confirmation, "confirmed a grant answered near or after its lease's end here");
    (held, confirmation)
}

/// A lease nobody holds a guard of yet: released in the background if dropped.
struct ReleasedIfDropped<B: LockBackend> {
    backend: Arc<B>,
    cleanups: Cleanups,
    held: Option<HeldLease<B::Lease>>,
}

impl<B: LockBackend> ReleasedIfDropped<B> {
    /// The lease, now someone else's to release.
    fn disarm(mut self) -> HeldLease<B::Lease> {
        self.held
            .take()
            .expect("the lease is only taken here or when dropped")
    }
}

impl<B: LockBackend> Drop for ReleasedIfDropped<B> {
    fn drop(&mut self) {
        let (Some(held), Ok(runtime)) = (self.held.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let backend = self.backend.clone();
        self.cleanups.spawn_on(&runtime, async move {
            if let Err(err) = backend.release(&held).await {
                tracing::debug!(key = %held.key, error = %err, "releasing a grant whose acquire was dropped failed; the lease will expire");
            }
        });
    }
}
