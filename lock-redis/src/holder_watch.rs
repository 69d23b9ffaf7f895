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

use lock_core::backend::{BackgroundLoop, LoopGuard, LoopWork, LossNotifier};
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
            runtime: tokio::runtime::Handle::current(),
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
/// each lease still held when it falls due. It runs on the runtime of the grant that
/// started it, and moves to the runtime of another waiting entry when that one shuts
/// down.
#[derive(Debug, Default)]
pub(crate) struct HolderWatches {
    pending: Mutex<Pending>,
}

/// The watches waiting to fall due, and the task that takes them.
#[derive(Debug, Default)]
struct Pending {
    queue: DueQueue<Listening>,
    starter: BackgroundLoop,
}

impl LoopWork for Pending {
    fn background(&mut self) -> &mut BackgroundLoop {
        &mut self.starter
    }

    fn runtimes(&self) -> impl Iterator<Item = &tokio::runtime::Handle> {
        self.queue.live().map(|listening| &listening.runtime)
    }
}

/// What the listening of one lease needs.
#[derive(Debug)]
struct Listening {
    shared: Arc<Shared>,
    keys: Keys,
    kind: LockKind,
    value: String,
    loss: LossNotifier,
    /// The acquirer's runtime, where the listening runs.
    runtime: tokio::runtime::Handle,
}

impl Ends for Listening {
    fn ended(&self) -> bool {
        self.shared.ended()
    }
}

impl HolderWatches {
    fn defer(&self, node: &Node, listening: Listening) {
        let start = {
            let mut pending = lock(&self.pending);
            let start = pending.starter.claim().then(|| listening.runtime.clone());
            // Stamped under the lock, so the queue stays in the order entries fall due.
            pending.queue.push(Instant::now() + WATCH_AFTER, listening);
            start
        };
        if let Some(runtime) = start {
            // Made before the spawn, outside the lock: a task dropped before it first
            // runs (its runtime shutting down) moves too.
            let starter = Starter {
                node: node.clone(),
                guard: LoopGuard::new(&runtime),
            };
            runtime.spawn(start_when_due(starter));
        }
    }
}

/// Whether a queued entry has ended, and so leaves the queue without falling due.
trait Ends {
    fn ended(&self) -> bool;
}

/// Entries in the order they fall due.
#[derive(Debug)]
struct DueQueue<T> {
    entries: VecDeque<(Instant, T)>,
}

impl<T> Default for DueQueue<T> {
    fn default() -> Self {
        DueQueue {
            entries: VecDeque::new(),
        }
    }
}

impl<T: Ends> DueQueue<T> {
    /// Puts `entry` in, due `at` (no earlier than any entry in the queue).
    fn push(&mut self, at: Instant, entry: T) {
        // Entries that ended meanwhile leave here, not when they fall due: a lock taken
        // and released in a loop keeps one entry, not a queue of them.
        while self.entries.front().is_some_and(|(_, first)| first.ended()) {
            self.entries.pop_front();
        }
        self.entries.push_back((at, entry));
    }

    /// Takes the entries due at `now` that have not ended, and says when the next
    /// falls due; `None` when none is left.
    fn take_due(&mut self, now: Instant) -> (Vec<T>, Option<Instant>) {
        let mut due = Vec::new();
        while let Some((at, first)) = self.entries.front() {
            if first.ended() {
                self.entries.pop_front();
            } else if *at <= now {
                due.extend(self.entries.pop_front().map(|(_, entry)| entry));
            } else {
                return (due, Some(*at));
            }
        }
        (due, None)
    }

    /// The entries that have not ended.
    fn live(&self) -> impl Iterator<Item = &T> {
        self.entries
            .iter()
            .map(|(_, entry)| entry)
            .filter(|entry| !entry.ended())
    }
}

/// What the task of [`HolderWatches`] holds. Dropped before the task ends by itself
/// (its runtime shut down, perhaps before it first ran), it moves the task to the
/// runtime of another entry still waiting.
struct Starter {
    node: Node,
    guard: LoopGuard,
}

impl Drop for Starter {
    fn drop(&mut self) {
        if !self.guard.is_armed() {
            return;
        }
        self.guard
            .dropped(&self.node.holder_watches().pending, |runtime, guard| {
                let node = self.node.clone();
                drop(runtime.spawn(start_when_due(Starter { node, guard })));
            });
    }
}

/// The task of [`HolderWatches`]: starts the listening of the entries due, sleeps
/// until the next falls due, and ends when none is left.
async fn start_when_due(mut starter: Starter) {
    loop {
        let (due, next) = {
            let mut pending = lock(&starter.node.holder_watches().pending);
            let (due, next) = pending.queue.take_due(Instant::now());
            if next.is_none() {
                pending.starter.end(&mut starter.guard);
            }
            (due, next)
        };
        for listening in due {
            listen_until_stopped(&starter.node, listening);
        }
        let Some(next) = next else {
            return;
        };
        tokio::time::sleep_until(next).await;
    }
}

/// Listens for the force-unlock of a lease held for [`WATCH_AFTER`], until its owner
/// releases it or drops its guard.
fn listen_until_stopped(node: &Node, listening: Listening) {
    let node = node.clone();
    let Listening {
        shared,
        keys,
        kind,
        value,
        loss,
        runtime,
    } = listening;
    runtime.spawn(async move {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    impl Ends for Arc<AtomicBool> {
        fn ended(&self) -> bool {
            self.load(Ordering::Acquire)
        }
    }

    fn entry() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(false))
    }

    fn end(entry: &Arc<AtomicBool>) {
        entry.store(true, Ordering::Release);
    }

    #[test]
    fn a_lock_taken_and_released_in_a_loop_keeps_one_entry() {
        let mut queue = DueQueue::default();
        let at = Instant::now();
        for n in 0..1000 {
            let next = entry();
            queue.push(at + Duration::from_micros(n), next.clone());
            end(&next);
        }
        assert_eq!(queue.entries.len(), 1);
        assert_eq!(queue.live().count(), 0);
        let (due, next) = queue.take_due(at + WATCH_AFTER);
        assert!(due.is_empty());
        assert_eq!(next, None, "the task ends with nothing left");
    }

    #[test]
    fn a_task_dropped_before_it_first_runs_lets_the_next_deferral_start_another() {
        let config = crate::RedisConfig::from_url("redis://127.0.0.1:1").unwrap();
        let node = Node::new(config).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        drop(runtime);
        assert!(lock(&node.holder_watches().pending).starter.claim());
        // A runtime shut down drops a task spawned on it without running it.
        drop(handle.spawn(start_when_due(Starter {
            node: node.clone(),
            guard: LoopGuard::new(&handle),
        })));
        assert!(
            lock(&node.holder_watches().pending).starter.claim(),
            "the next deferral starts a task"
        );
    }

    #[test]
    fn entries_still_held_are_taken_when_due_and_ended_ones_never() {
        let mut queue = DueQueue::default();
        let at = Instant::now();
        let (held, released, later) = (entry(), entry(), entry());
        queue.push(at, held.clone());
        queue.push(at + Duration::from_millis(1), released.clone());
        queue.push(at + Duration::from_millis(50), later.clone());
        end(&released);
        let (due, next) = queue.take_due(at);
        assert_eq!(due.len(), 1);
        assert!(Arc::ptr_eq(&due[0], &held));
        assert_eq!(next, Some(at + Duration::from_millis(50)));
        assert_eq!(queue.live().count(), 1);
        let (due, next) = queue.take_due(at + Duration::from_millis(50));
        assert!(Arc::ptr_eq(&due[0], &later));
        assert_eq!(next, None);
    }
}
