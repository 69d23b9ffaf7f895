//! What the backend keeps with each granted lock, and the task that reports its loss:
//! the holder's node deleted behind its back, or its session ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use lock_core::backend::LossNotifier;
use lock_core::LeaseLoss;
use tokio::sync::{watch, Notify};
use zookeeper_client::{EventType, WatchedEvent};

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

/// Watches a held node until it is released, deleted by someone else, or its session
/// ends; reports the last two through `loss`. `deleted` is the pending child watch on
/// the node itself: an ephemeral node has no children, so it fires only on deletion
/// (or a session event), never on the data writes a fencing token may make.
pub(crate) fn watch(
    flags: Arc<LeaseFlags>,
    deleted: BoxFuture<'static, WatchedEvent>,
    session_ended: watch::Receiver<bool>,
    loss: LossNotifier,
) {
    tokio::spawn(async move {
        let reason = tokio::select! {
            event = deleted => match event.event_type {
                EventType::Session => LeaseLoss::SessionLost,
                _ => LeaseLoss::Revoked,
            },
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
