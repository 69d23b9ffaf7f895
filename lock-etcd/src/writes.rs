//! The write locks this client holds, by read-write lock and owner: a read request of
//! their owner is a downgrade, written only while the write key still exists.

use std::collections::HashMap;
use std::sync::Mutex as StdMutex;

use lock_core::{LockFamily, LockKind};

use lock_core::backend::{HeldLease, OwnerToken};

use crate::backend::EtcdLease;
use crate::keys::Prefix;
use crate::queries::HeldWrite;

/// Registered at grant, removed at release or loss. An entry that outlives its key
/// does no harm: the downgrade's transaction compares the key's create revision, and
/// falls back to an ordinary read when the key is gone.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    held: StdMutex<HashMap<(String, OwnerToken), HeldWrite>>,
}

impl Writes {
    fn held_map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, OwnerToken), HeldWrite>> {
        // Single inserts and removes: nothing a panic could leave half done.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `owner` was granted the write lock of the read-write lock at `prefix`.
    pub(crate) fn register(&self, prefix: &Prefix, owner: &OwnerToken, write: HeldWrite) {
        self.held_map()
            .insert((prefix.range().to_owned(), owner.clone()), write);
    }

    /// The write key `owner` holds on the read-write lock at `prefix`, if any.
    pub(crate) fn held(&self, prefix: &Prefix, owner: &OwnerToken) -> Option<HeldWrite> {
        self.held_map()
            .get(&(prefix.range().to_owned(), owner.clone()))
            .cloned()
    }

    /// Forgets `lease` if it is a registered write lock (released or lost).
    pub(crate) fn forget(&self, lease: &HeldLease<EtcdLease>) {
        if lease.kind != LockKind::Write {
            return;
        }
        let prefix = Prefix::new(&lease.key, LockFamily::ReadWrite);
        self.forget_key(
            &prefix,
            &lease.owner,
            lease.data.key(),
            lease.data.revision(),
        );
    }

    /// Forgets the write key `key` created at `revision`, if it is the one registered.
    pub(crate) fn forget_key(&self, prefix: &Prefix, owner: &OwnerToken, key: &str, revision: i64) {
        let mut held = self.held_map();
        let entry = (prefix.range().to_owned(), owner.clone());
        if held
            .get(&entry)
            .is_some_and(|w| w.key == key && w.revision == revision)
        {
            held.remove(&entry);
        }
    }
}
