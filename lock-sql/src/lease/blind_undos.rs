//! Stopping a blind undo (one that deletes an owner's lease whatever its fence, for a
//! grant whose fence never came back) before the same owner asks for that lease
//! again: a downgrade asked again carries the owner of the earlier one, and the undo
//! would delete the new lease too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use lock_core::LockKind;

use crate::key::kind_code;

/// An acquire's stop switch, which every blind undo of its calls holds across each
/// delete and checks first: `true` once a later acquire of the same owner turned it.
pub(crate) type BlindSwitch = Arc<tokio::sync::Mutex<bool>>;

/// The owner key of a switch: lock key hash, kind and owner.
type Owner = (String, i64, String);

/// The switch of the latest acquire of each key, kind and owner, while that acquire,
/// a call of it or an undo of its grant still holds it.
#[derive(Debug, Default)]
pub(crate) struct BlindUndos(Mutex<Switches>);

#[derive(Debug, Default)]
struct Switches {
    by_owner: HashMap<Owner, Weak<tokio::sync::Mutex<bool>>>,
    /// How many were kept at the last sweep of those nobody holds.
    kept: usize,
}

impl BlindUndos {
    fn switches(&self) -> MutexGuard<'_, Switches> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The switch of a new acquire of `key`'s `kind` by `owner`. Registered before
    /// any call of the acquire is sent, so a later acquire of the same owner finds it
    /// whatever the call's task does. An earlier acquire's switch is turned first,
    /// once its undo's delete under way (if any) is done.
    pub(super) async fn arm(&self, key: &str, kind: LockKind, owner: &str) -> BlindSwitch {
        let switch = BlindSwitch::default();
        let earlier = {
            let mut switches = self.switches();
            let id = (key.to_owned(), kind_code(kind), owner.to_owned());
            let earlier = switches.by_owner.insert(id, Arc::downgrade(&switch));
            switches.sweep();
            earlier.and_then(|earlier| earlier.upgrade())
        };
        if let Some(earlier) = earlier {
            *earlier.lock().await = true;
        }
        switch
    }
}

impl Switches {
    /// Forgets the switches nobody holds any more, once their number has doubled
    /// since the last sweep: amortized, a constant cost per acquire.
    fn sweep(&mut self) {
        if self.by_owner.len() > 2 * self.kept.max(32) {
            self.by_owner.retain(|_, switch| switch.strong_count() > 0);
            self.kept = self.by_owner.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_later_acquire_of_the_same_owner_turns_the_earlier_switch() {
        let undos = BlindUndos::default();
        let first = undos.arm("k", LockKind::Read, "o").await;
        let other_owner = undos.arm("k", LockKind::Read, "p").await;
        let other_kind = undos.arm("k", LockKind::Write, "o").await;
        assert!(!*first.lock().await);
        let again = undos.arm("k", LockKind::Read, "o").await;
        assert!(*first.lock().await, "the earlier switch is turned");
        assert!(!*again.lock().await);
        assert!(!*other_owner.lock().await && !*other_kind.lock().await);
    }

    #[tokio::test]
    async fn switches_nobody_holds_are_forgotten() {
        let undos = BlindUndos::default();
        let held = undos.arm("k", LockKind::Read, "held").await;
        for n in 0..1_000 {
            drop(undos.arm("k", LockKind::Read, &n.to_string()).await);
        }
        assert!(undos.switches().by_owner.len() <= 70);
        assert!(undos.switches().by_owner.contains_key(&(
            "k".into(),
            kind_code(LockKind::Read),
            "held".into()
        )));
        drop(held);
    }
}
