//! The Redis keys and channels of one lock.
//!
//! The exclusive lock lives at the bare key `namespace:name` (a plain string, the
//! layout redis-py's `Lock` and redsync use), so those clients and this crate exclude
//! each other on it. Everything else of the lock lives at `{namespace:name}:suffix`.
//! Redis Cluster hashes a key containing `{tag}` by the tag alone, so `{x}:fence`
//! lands in the same slot as the key `x`, and a script may touch all of them at once.
//! (Names that themselves contain `{` or `}` break that equality on a cluster; on a
//! single server or RedLock masters it does not matter.)

use lock_core::{LockKey, LockKind};

/// The keys and channels of one lock.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// `namespace:name`: the exclusive lock itself.
    pub(crate) lock: String,
    /// `{namespace:name}`: the prefix of every other key.
    tag: String,
}

impl Keys {
    pub(crate) fn new(key: &LockKey) -> Self {
        let lock = key.joined(':');
        let tag = format!("{{{lock}}}");
        Keys { lock, tag }
    }

    fn aux(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tag)
    }

    /// The fencing counter shared by every lock type of this name. It never expires:
    /// tokens must keep increasing after every lease of the name is gone.
    pub(crate) fn fence(&self) -> String {
        self.aux("fence")
    }

    /// Where the exclusive lock's releases are published.
    pub(crate) fn exclusive_channel(&self) -> String {
        self.aux("channel")
    }

    /// The fair lock's holder (a string `owner:fence` with a PX lease).
    pub(crate) fn fair_holder(&self) -> String {
        self.aux("fair")
    }

    /// The fair lock's FIFO queue of waiter ids.
    pub(crate) fn fair_queue(&self) -> String {
        self.aux("fair:queue")
    }

    /// The fair lock's waiter expiries (sorted set, server-clock ms).
    pub(crate) fn fair_timeouts(&self) -> String {
        self.aux("fair:timeout")
    }

    /// Where the fair lock names the waiter whose turn came.
    pub(crate) fn fair_channel(&self) -> String {
        self.aux("fair:channel")
    }

    /// The read-write lock's writer (a string `owner:fence` with a PX lease).
    pub(crate) fn rw_writer(&self) -> String {
        self.aux("rw:write")
    }

    /// The read-write lock's readers (hash `owner:fence` -> expiry ms).
    pub(crate) fn rw_readers(&self) -> String {
        self.aux("rw:read")
    }

    /// The read-write lock's waiting writers (sorted set, server-clock ms).
    pub(crate) fn rw_waiting_writers(&self) -> String {
        self.aux("rw:waiting")
    }

    /// Where the read-write lock's releases are published.
    pub(crate) fn rw_channel(&self) -> String {
        self.aux("rw:channel")
    }

    /// The key a lease of `kind` is stored under, and whether it is a reader entry in
    /// a hash rather than a string.
    pub(crate) fn lease_key(&self, kind: LockKind) -> (String, bool) {
        match kind {
            LockKind::Exclusive => (self.lock.clone(), false),
            LockKind::Fair => (self.fair_holder(), false),
            LockKind::Write => (self.rw_writer(), false),
            LockKind::Read => (self.rw_readers(), true),
        }
    }
}

/// The value a lease of `owner` with `fence` is stored as.
pub(crate) fn lease_value(owner: &str, fence: u64) -> String {
    format!("{owner}:{fence}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockName, Namespace};

    #[test]
    fn auxiliary_keys_share_the_lock_keys_hash_tag() {
        let key = LockKey::new(
            Namespace::new("app").unwrap(),
            LockName::new("jobs").unwrap(),
        );
        let keys = Keys::new(&key);
        assert_eq!(keys.lock, "app:jobs");
        assert_eq!(keys.fence(), "{app:jobs}:fence");
        assert_eq!(keys.fair_queue(), "{app:jobs}:fair:queue");
        assert_eq!(lease_value("c:1", 7), "c:1:7");
    }
}
