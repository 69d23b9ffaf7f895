//! What the backend keeps with each granted lock, and the task that reports its loss:
//! the holder's node deleted behind its back, or its session ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::backend::LossNotifier;
use lock_core::LeaseLoss;
use tokio::sync::{watch, Notify};
use zookeeper_client::Error as ZkError;
use zookeeper_client::{Client, EventType, WatchedEvent};

use crate::error::is_connection_loss;
use crate::session;

/// The backend data of one granted lock: its node, and the session that holds it.
#[derive(Debug)]
pub struct ZkLease {
    pub(crate) path: String,
    pub(crate) generation: u64,
    pub(crate) flags: Arc<LeaseFlags>,
}

impl ZkLease {
    /// The holder's node, below the chroot: `/<namespace>/<name>/_c_<uuid>-lock-<seq>`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether the backend has seen this lease end (node deleted, session ended).
    pub fn is_lost(&self) -> bool {
        self.flags.lost.load(Ordering::Acquire)
    }
}

/// Shared by a lease and its watch task.
#[derive(Debug, Default)]
pub(crate) struct LeaseFlags {
    /// The node or its session is gone.
    pub(crate) lost: AtomicBool,
    /// The owner is releasing: the node's deletion is ours, not a loss.
    pub(crate) releasing: AtomicBool,
    /// A release sent a delete (its answer may not have come).
    pub(crate) delete_sent: AtomicBool,
    /// The node was deleted (not lost with its session) while a release was under way.
    pub(crate) deleted: AtomicBool,
    /// Ends the watch task after a release.
    pub(crate) stop: Notify,
}

impl LeaseFlags {
    /// Whether the node went by a delete that a release sent.
    pub(crate) fn deleted_by_release(&self) -> bool {
        self.delete_sent.load(Ordering::Acquire) && self.deleted.load(Ordering::Acquire)
    }
}

/// How long a lock granted at once is held before its node is watched. A shorter hold
/// costs no watch; a longer one learns of its node's deletion within this plus a round
/// trip (setting the watch finds a node already gone).
pub(crate) const WATCH_AFTER: Duration = Duration::from_millis(200);

/// After a failed attempt to set the watch, the first pause; it doubles up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// What a watch event on a held node means: its session ended, or the node was deleted.
pub(crate) fn loss_of(event: WatchedEvent) -> LeaseLoss {
    match event.event_type {
        EventType::Session => LeaseLoss::SessionLost,
        _ => LeaseLoss::Revoked,
    }
}

/// The loss of `node`, granted at once: a child watch on it from [`WATCH_AFTER`] on
/// (an ephemeral node has no children, so it fires only on deletion or a session
/// event, never on the data writes a fencing token may make). A node already gone
/// when the watch is set is lost at once. While the watch cannot be set (the
/// connection lost), it is tried again; the session's end is [`watch`]'s to report.
pub(crate) fn deleted_later(client: Client, node: String) -> BoxFuture<'static, LeaseLoss> {
    async move {
        tokio::time::sleep(WATCH_AFTER).await;
        let mut pause = FIRST_PAUSE;
        loop {
            match client.list_and_watch_children(&node).await {
                Ok((_, watcher)) => return loss_of(watcher.changed().await),
                Err(ZkError::NoNode) => return LeaseLoss::Revoked,
                Err(error) => {
                    if is_connection_loss(&error) || error == ZkError::Timeout {
                        tracing::debug!(%node, %error, "could not watch a held node; trying again");
                    } else {
                        // Not the connection: its deletion goes unseen meanwhile.
                        tracing::warn!(%node, %error, "could not watch a held node; trying again");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }
    .boxed()
}

/// Watches a held node until it is released, deleted by someone else, or its session
/// ends; reports the last two through `loss`. `deleted` resolves when the node goes
/// or its session ends.
pub(crate) fn watch(
    flags: Arc<LeaseFlags>,
    deleted: BoxFuture<'static, LeaseLoss>,
    session_ended: watch::Receiver<bool>,
    loss: LossNotifier,
) {
    tokio::spawn(async move {
        let reason = tokio::select! {
            reason = deleted => reason,
            () = session::ended(session_ended) => LeaseLoss::SessionLost,
            () = flags.stop.notified() => return,
        };
        if reason == LeaseLoss::Revoked {
            flags.deleted.store(true, Ordering::Release);
        }
        flags.lost.store(true, Ordering::Release);
        if !flags.releasing.load(Ordering::Acquire) {
            tracing::warn!(%reason, "zookeeper lock lost");
            loss.notify(reason);
        }
    });
}
