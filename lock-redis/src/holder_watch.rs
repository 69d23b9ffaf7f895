//! Tells a holder within a moment that its lease was force-unlocked, instead of at its
//! next renewal (a third of the lease later; never, for a fixed lease).
//!
//! A force-unlock announces each lease it removes on the lock's channel as
//! `forced:<value>` (`inspect.lua`). A holder listens there for its own value through
//! the backend's shared pub/sub connection, and looks once at the key after each
//! (re)subscription, for an announcement it could not have heard.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::LossNotifier;
use lock_core::{LeaseLoss, LockKind};
use tokio::sync::Notify;

use crate::calls;
use crate::keys::Keys;
use crate::node::Node;
use crate::pubsub::Interest;

/// How long a grant is held before its holder listens. A lock held for less costs
/// nothing more than before (a subscription and a look at the key); one held longer
/// hears of a force-unlock within a round trip, or this plus two if it came earlier.
pub(crate) const WATCH_AFTER: Duration = Duration::from_millis(200);

/// After a failed subscription or look, the first pause; it doubles up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// The listening of one held lease; it ends when stopped (its release begins) or
/// dropped.
#[derive(Debug)]
pub(crate) struct HolderWatch {
    shared: Arc<Shared>,
}

/// What the listening task and the lease share.
#[derive(Debug, Default)]
struct Shared {
    stop: Notify,
    /// Set when the owner releases: the lease's deletion is then no loss.
    releasing: AtomicBool,
}

impl HolderWatch {
    /// Listens for the force-unlock of the lease stored as `value`.
    pub(crate) fn start(
        node: &Node,
        keys: Keys,
        kind: LockKind,
        value: String,
        loss: LossNotifier,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let node = node.clone();
        let task = shared.clone();
        tokio::spawn(async move {
            let forced = tokio::select! {
                forced = listen(&node, &keys, kind, &value) => forced,
                () = task.stop.notified() => return,
            };
            if forced && !task.releasing.load(Ordering::Acquire) && loss.is_live() {
                tracing::warn!(key = %keys.lock, kind = ?kind, "redis lock force-unlocked behind its holder's back");
                loss.notify(LeaseLoss::Revoked);
            }
        });
        HolderWatch { shared }
    }

    /// Ends the listening: the owner is releasing the lease.
    pub(crate) fn stop(&self) {
        self.shared.releasing.store(true, Ordering::Release);
        // `notify_one` keeps the wake-up if the task is not waiting yet.
        self.shared.stop.notify_one();
    }
}

/// Resolves with `true` once the lease is known gone.
async fn listen(node: &Node, keys: &Keys, kind: LockKind, value: &str) -> bool {
    tokio::time::sleep(WATCH_AFTER).await;
    let channel = keys.channel(kind);
    let registration = node.pubsub().register(
        channel,
        Interest::Payload(format!("forced:{value}").into_bytes()),
    );
    let look = calls::held(keys, kind, value);
    let mut pause = FIRST_PAUSE;
    loop {
        let looked = match registration.ready().await {
            Ok(()) => node.call::<i64>("holder check", &look).await,
            Err(error) => Err(error),
        };
        match looked {
            Ok(0) => return true,
            Ok(_) => pause = FIRST_PAUSE,
            Err(error) => {
                tracing::debug!(key = %keys.lock, %error, "could not listen for a force-unlock; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
                continue;
            }
        }
        // The announcement, or a lost connection: look again either way.
        registration.notified().await;
    }
}

impl Drop for HolderWatch {
    fn drop(&mut self) {
        self.shared.stop.notify_one();
    }
}
