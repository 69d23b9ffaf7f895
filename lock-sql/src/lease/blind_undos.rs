//! Stopping a blind undo (one that deletes an owner's lease whatever its fence, for a
//! grant whose fence never came back) before the same owner asks for that lease
//! again: a downgrade asked again carries the owner of the earlier one, and the undo
//! would delete the new lease too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lock_core::LockKind;

use crate::key::kind_code;

/// An acquire's stop switch: every blind undo of its calls takes `deleting` across
/// each delete (and from a failed one on, until it ends) and looks at `stopped` first.
#[derive(Debug, Default)]
pub(crate) struct BlindSwitch {
    /// Turned (for good) when the same owner asks again.
    stopped: AtomicBool,
    pub(super) deleting: tokio::sync::Mutex<()>,
}

impl BlindSwitch {
    /// Whether the same owner asked again.
    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

/// The owner key of a switch: lock key hash, kind and owner.
type Owner = (String, i64, String);

/// The switches of each key, kind and owner that an acquire, a call of one or an undo
/// of its grant still holds.
#[derive(Debug, Default)]
pub(crate) struct BlindUndos(Mutex<Switches>);

#[derive(Debug, Default)]
struct Switches {
    by_owner: HashMap<Owner, Vec<Weak<BlindSwitch>>>,
    /// How many owners were kept at the last sweep of those nobody holds.
    kept: usize,
}

impl BlindUndos {
    fn switches(&self) -> MutexGuard<'_, Switches> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The switch of a new acquire of `key`'s `kind` by `owner`, registered before any
    /// call of it is sent. Every earlier switch of the same owner still held is turned,
    /// each between its undo's deletes, once none of them can land any more (a delete
    /// sent before could otherwise land after this acquire's grant). An acquire that
    /// leaves while it waits turns the rest no more: the next finds them still listed.
    /// Only the read side is asked again by its owner (a downgrade): another kind's
    /// switch is not registered, and nothing turns it.
    ///
    /// `None` if an earlier undo still holds its switch after `limit`: one of its
    /// deletes failed and may still land, so this acquire must not be granted yet.
    pub(super) async fn arm(
        &self,
        key: &str,
        kind: LockKind,
        owner: &str,
        limit: Duration,
    ) -> Option<Arc<BlindSwitch>> {
        let switch = Arc::new(BlindSwitch::default());
        if kind != LockKind::Read {
            return Some(switch);
        }
        let earlier: Vec<Arc<BlindSwitch>> = {
            let mut switches = self.switches();
            let id = (key.to_owned(), kind_code(kind), owner.to_owned());
            let list = switches.by_owner.entry(id).or_default();
            let earlier: Vec<_> = list.iter().filter_map(Weak::upgrade).collect();
            list.retain(|switch| switch.strong_count() > 0);
            list.push(Arc::downgrade(&switch));
            switches.sweep();
            earlier
        };
        let until = tokio::time::Instant::now() + limit;
        for switch in earlier {
            let _deleting = tokio::time::timeout_at(until, switch.deleting.lock())
                .await
                .ok()?;
            switch.stopped.store(true, Ordering::SeqCst);
        }
        Some(switch)
    }
}

impl Switches {
    /// Forgets the owners whose switches nobody holds any more, once their number has
    /// doubled since the last sweep: amortized, a constant cost per acquire.
    fn sweep(&mut self) {
        if self.by_owner.len() > 2 * self.kept.max(32) {
            self.by_owner.retain(|_, list| {
                list.retain(|switch| switch.strong_count() > 0);
                !list.is_empty()
            });
            self.kept = self.by_owner.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_later_acquire_of_the_same_owner_turns_every_earlier_switch() {
        let undos = BlindUndos::default();
        let first = undos.arm("k", LockKind::Read, "o", LIMIT).await.unwrap();
        let second = undos.arm("k", LockKind::Read, "o", LIMIT).await.unwrap();
        let other_owner = undos.arm("k", LockKind::Read, "p", LIMIT).await.unwrap();
        let other_key = undos.arm("l", LockKind::Read, "o", LIMIT).await.unwrap();
        assert!(first.is_stopped() && !second.is_stopped());
        let third = undos.arm("k", LockKind::Read, "o", LIMIT).await.unwrap();
        assert!(first.is_stopped() && second.is_stopped() && !third.is_stopped());
        assert!(!other_owner.is_stopped() && !other_key.is_stopped());
        let write = undos.arm("k", LockKind::Write, "o", LIMIT).await.unwrap();
        drop(undos.arm("k", LockKind::Write, "o", LIMIT).await.unwrap());
        assert!(!write.is_stopped(), "only the read side is asked again");
    }

    /// An acquire waits for an earlier undo's delete under way before it turns that
    /// switch; one that leaves meanwhile turns nothing, and the next still finds it.
    #[tokio::test]
    async fn a_switch_is_turned_between_deletes_by_whichever_acquire_stays() {
        let undos = BlindUndos::default();
        let first = undos.arm("k", LockKind::Read, "o", LIMIT).await.unwrap();
        let deleting = first.deleting.lock().await;
        let left = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            undos.arm("k", LockKind::Read, "o", LIMIT),
        )
        .await;
        assert!(left.is_err(), "waited for the delete under way");
        assert!(!first.is_stopped(), "turned during a delete");
        let mut next = std::pin::pin!(undos.arm("k", LockKind::Read, "o", LIMIT));
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "the next waits too"
        );
        drop(deleting);
        let next = next.await.expect("within the limit");
        assert!(first.is_stopped() && !next.is_stopped());
    }

    /// An earlier undo that holds its switch past the limit (a delete that may still
    /// land) keeps the acquire from going on.
    #[tokio::test]
    async fn an_acquire_gives_up_on_a_switch_held_past_its_limit() {
        let undos = BlindUndos::default();
        let first = undos.arm("k", LockKind::Read, "o", LIMIT).await.unwrap();
        let in_doubt = first.deleting.lock().await;
        let short = Duration::from_millis(50);
        assert!(undos.arm("k", LockKind::Read, "o", short).await.is_none());
        assert!(!first.is_stopped());
        drop(in_doubt);
        assert!(undos.arm("k", LockKind::Read, "o", short).await.is_some());
        assert!(first.is_stopped());
    }

    #[tokio::test]
    async fn switches_nobody_holds_are_forgotten() {
        let undos = BlindUndos::default();
        let held = undos.arm("k", LockKind::Read, "held", LIMIT).await.unwrap();
        for n in 0..1_000 {
            drop(undos.arm("k", LockKind::Read, &n.to_string(), LIMIT).await);
        }
        let switches = undos.switches();
        assert!(switches.by_owner.len() <= 70, "{}", switches.by_owner.len());
        let id = ("k".to_owned(), kind_code(LockKind::Read), "held".to_owned());
        assert!(switches.by_owner.contains_key(&id));
        drop(held);
    }
}
