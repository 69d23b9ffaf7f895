//! Tells a holder within a moment that its lease was force-unlocked, instead of at its
//! next renewal (a third of the lease later; never, for a fixed lease).
//!
//! A force-unlock announces each lease it removes on the lock's channel as
//! `forced:<value>` (`inspect.lua`). A holder listens there for its own value through
//! the backend's shared pub/sub connection, and looks once at the key after each
//! (re)subscription, for an announcement it could not have heard.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::LossNotifier;
use lock_core::{LeaseLoss, LockKind};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::calls;
use crate::keys::Keys;
use crate::node::Node;
use crate::pubsub::Interest;

/// How long a grant is held before its holder listens. A lock held for less costs no
/// subscription, no look at the key and no task of its own; one held longer hears of
/// a force-unlock within a round trip, or this plus two if it came earlier.
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
    /// Set when the listening ends (the owner releases, or drops the lease).
    ended: AtomicBool,
    /// Set when the owner releases: the lease's deletion is then no loss.
    releasing: AtomicBool,
}

impl Shared {
    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        // `notify_one` keeps the wake-up if the task is not waiting yet.
        self.stop.notify_one();
    }

    fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

impl HolderWatch {
    /// Listens for the force-unlock of the lease stored as `value`, from
    /// [`WATCH_AFTER`] on (see [`HolderWatches`]).
    pub(crate) fn start(
        node: &Node,
        keys: Keys,
        kind: LockKind,
        value: String,
        loss: LossNotifier,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let listening = Listening {
            shared: shared.clone(),
            keys,
            kind,
            value,
            loss,
        };
        node.holder_watches().defer(node, listening);
        HolderWatch { shared }
    }

    /// Ends the listening: the owner is releasing the lease.
    pub(crate) fn stop(&self) {
        self.shared.releasing.store(true, Ordering::Release);
        self.shared.end();
    }
}

/// The holder watches of one server not yet listening. Most locks are released well
/// within [`WATCH_AFTER`]: their watch then costs a queue entry, no task and no
/// wake-up. One task per server, running while entries wait, starts the listening of
/// each lease still held when it falls due.
#[derive(Debug, Default)]
pub(crate) struct HolderWatches {
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    /// Each with when it falls due, in the order they were deferred (which is the
    /// order they fall due).
    queue: VecDeque<(Instant, Listening)>,
    /// Whether the task that starts them runs.
    running: bool,
}

/// What the listening of one lease needs.
#[derive(Debug)]
struct Listening {
    shared: Arc<Shared>,
    keys: Keys,
    kind: LockKind,
    value: String,
    loss: LossNotifier,
}

impl HolderWatches {
    fn defer(&self, node: &Node, listening: Listening) {
        let mut pending = lock(&self.pending);
        // Leases given back meanwhile leave here, not when they fall due: a lock taken
        // and released in a loop keeps one entry, not a queue of them.
        while pending
            .queue
            .front()
            .is_some_and(|(_, first)| first.shared.ended())
        {
            pending.queue.pop_front();
        }
        // Stamped under the lock, so the queue stays in the order entries fall due.
        pending
            .queue
            .push_back((Instant::now() + WATCH_AFTER, listening));
        if !pending.running {
            pending.running = true;
            tokio::spawn(start_when_due(node.clone()));
        }
    }

    /// Takes the entries due at `now` whose lease is still held, and says when the
    /// next one falls due; `None` when none is left, and the task ends.
    fn take_due(&self, now: Instant) -> (Vec<Listening>, Option<Instant>) {
        let mut pending = lock(&self.pending);
        let mut due = Vec::new();
        while let Some((at, first)) = pending.queue.front() {
            if first.shared.ended() {
                pending.queue.pop_front();
            } else if *at <= now {
                due.extend(pending.queue.pop_front().map(|(_, listening)| listening));
            } else {
                return (due, Some(*at));
            }
        }
        pending.running = false;
        (due, None)
    }
}

/// Clears the `running` flag if the task is dropped mid-way (its runtime shut down
/// under it), so the next deferral starts another.
struct Running<'a> {
    watches: &'a HolderWatches,
    armed: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.watches.pending).running = false;
        }
    }
}

/// The task of [`HolderWatches`]: starts the listening of the entries due, sleeps
/// until the next falls due, and ends when none is left.
async fn start_when_due(node: Node) {
    let watches = node.holder_watches();
    let mut running = Running {
        watches,
        armed: true,
    };
    loop {
        let (due, next) = watches.take_due(Instant::now());
        for listening in due {
            listen_until_stopped(&node, listening);
        }
        let Some(next) = next else {
            running.armed = false;
            return;
        };
        tokio::time::sleep_until(next).await;
    }
}

/// Listens for the force-unlock of a lease held for [`WATCH_AFTER`], until its owner
/// releases it or drops its guard.
fn listen_until_stopped(node: &Node, listening: Listening) {
    let node = node.clone();
    tokio::spawn(async move {
        let Listening {
            shared,
            keys,
            kind,
            value,
            loss,
        } = listening;
        let forced = tokio::select! {
            forced = listen(&node, &keys, kind, &value) => forced,
            () = shared.stop.notified() => return,
        };
        if forced && !shared.releasing.load(Ordering::Acquire) && loss.is_live() {
            tracing::warn!(key = %keys.lock, kind = ?kind, "redis lock force-unlocked behind its holder's back");
            loss.notify(LeaseLoss::Revoked);
        }
    });
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The queue holds no invariant a panic elsewhere could break.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Resolves with `true` once the lease is known gone.
async fn listen(node: &Node, keys: &Keys, kind: LockKind, value: &str) -> bool {
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
        self.shared.end();
    }
}
