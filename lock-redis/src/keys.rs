//! The Redis keys and channels of one lock.
//!
//! The exclusive lock lives at the bare key `namespace:name` (a plain string, the
//! layout redis-py's `Lock` and redsync use), so those clients and this crate exclude
//! each other on it. Everything else of the lock lives at `{namespace:name}:suffix`.
//! Redis Cluster hashes a key containing `{tag}` by the tag alone, so `{x}:fence`
//! lands in the same slot as the key `x`, and a script may touch all of them at once.
//!
//! On a Redis Cluster, a name containing `{` or `}` would break that equality (the
//! bare key would be hashed by the braces inside the name). There the name is written
//! with `%`, `{` and `}` percent-encoded (`%25`, `%7B`, `%7D`): distinct names stay
//! distinct keys, and every key of a lock stays in one slot. Names without those
//! three characters are written as they are, so other clients share them as on one
//! server.

use std::sync::Arc;

use lock_core::{LockKey, LockKind};

use crate::holder_watch::HolderWatch;

/// The suffix of the fencing counter's key ([`Keys::fence`]).
pub(crate) const FENCE: &str = "fence";
/// The suffix of the exclusive lock's waiters' key ([`Keys::exclusive_waiters`]).
pub(crate) const EXCLUSIVE_WAITERS: &str = "waiting";
/// The suffix of the exclusive lock's channel ([`Keys::exclusive_channel`]).
pub(crate) const EXCLUSIVE_CHANNEL: &str = "channel";
/// What a release receipt's key has after the lock's tag, before the request id
/// ([`Keys::receipt`]).
pub(crate) const RECEIPT: &str = "released:";

/// The keys and channels of one lock.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// `namespace:name`: the exclusive lock itself.
    pub(crate) lock: String,
    /// `{namespace:name}`: the prefix of every other key.
    tag: String,
    /// On a Redis Cluster: the scripts publish on sharded channels.
    pub(crate) sharded: bool,
}

impl Keys {
    /// The keys on one server (or RedLock masters).
    pub(crate) fn new(key: &LockKey) -> Self {
        let lock = key.joined(':');
        let tag = concat(&["{", &lock, "}"]);
        Keys {
            lock,
            tag,
            sharded: false,
        }
    }

    /// The keys on a Redis Cluster: every one in the slot of the bare key.
    pub(crate) fn in_cluster(key: &LockKey) -> Self {
        let name = key.name().as_str();
        let name: std::borrow::Cow<'_, str> = if name.contains(['%', '{', '}']) {
            name.replace('%', "%25")
                .replace('{', "%7B")
                .replace('}', "%7D")
                .into()
        } else {
            name.into()
        };
        let lock = concat(&[key.namespace().as_str(), ":", &name]);
        let tag = concat(&["{", &lock, "}"]);
        Keys {
            lock,
            tag,
            sharded: true,
        }
    }

    /// [`Keys::new`] or [`Keys::in_cluster`].
    pub(crate) fn for_deployment(key: &LockKey, cluster: bool) -> Self {
        if cluster {
            Keys::in_cluster(key)
        } else {
            Keys::new(key)
        }
    }

    fn aux(&self, suffix: &str) -> String {
        concat(&self.aux_parts(suffix, ""))
    }

    /// The parts of the key `{namespace:name}:<suffix><more>`, end to end: for calls
    /// that write it straight into their command (see [`crate::calls::Packer`]).
    pub(crate) fn aux_parts<'a>(&'a self, suffix: &'a str, more: &'a str) -> [&'a str; 4] {
        [&self.tag, ":", suffix, more]
    }

    /// The fencing counter shared by every lock type of this name. It expires a week
    /// after the name's last grant; tokens keep increasing after that because every
    /// token is floored by the server clock (`next_fence.lua`).
    pub(crate) fn fence(&self) -> String {
        self.aux(FENCE)
    }

    /// The receipt a release of the lease won by the request of `lease` leaves when it
    /// frees it (see [`crate::calls::release_with_receipt`]); it expires on its own
    /// a few seconds after the lease would have.
    pub(crate) fn receipt(&self, lease: &RedisLease) -> String {
        concat(&self.aux_parts(RECEIPT, &lease.request))
    }

    /// Where the exclusive lock's releases are published.
    pub(crate) fn exclusive_channel(&self) -> String {
        self.aux(EXCLUSIVE_CHANNEL)
    }

    /// The exclusive lock's waiters (sorted set: waiter id -> expiry ms by the server
    /// clock), of which a release wakes one.
    pub(crate) fn exclusive_waiters(&self) -> String {
        self.aux(EXCLUSIVE_WAITERS)
    }

    /// Where the exclusive lock's waiters of the backend `inbox` are told that a
    /// release chose one of them (the message is its id): one channel per backend, so
    /// that a release learns from `PUBLISH`'s count whether anyone still listens
    /// there, and passes over a waiter whose process is gone.
    pub(crate) fn exclusive_inbox(&self, inbox: &str) -> String {
        concat(&[&self.tag, ":channel:", inbox])
    }

    /// The fair lock's holder (a string `owner:request:fence` with a PX lease).
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

    /// An election's leader (a string `owner:request:fence` with a PX lease, like the
    /// fair lock's holder). The value a leader proclaimed lives beside it at
    /// `<this key>:value` (see `proclaim.lua`); until then, its campaign value rides in
    /// its request id (see `holders.rs`).
    pub(crate) fn leader(&self) -> String {
        self.aux("elect")
    }

    /// The value an election's leader proclaimed (a hash: `lease`, the leader's lease
    /// value it belongs to, and `value`), expiring with the leader's key.
    pub(crate) fn leader_value(&self) -> String {
        format!("{}:value", self.leader())
    }

    /// An election's FIFO queue of candidate ids.
    pub(crate) fn election_queue(&self) -> String {
        self.aux("elect:queue")
    }

    /// An election's candidate expiries (sorted set, server-clock ms).
    pub(crate) fn election_timeouts(&self) -> String {
        self.aux("elect:timeout")
    }

    /// Where an election names the candidate whose turn came.
    pub(crate) fn election_channel(&self) -> String {
        self.aux("elect:channel")
    }

    /// The read-write lock's writer (a string `owner:request:fence` with a PX lease).
    pub(crate) fn rw_writer(&self) -> String {
        self.aux("rw:write")
    }

    /// The read-write lock's readers (hash `owner:request:fence` -> expiry ms).
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

    /// A semaphore's permit holders (hash `owner:request:fence` -> expiry ms, and
    /// `#permits` -> its count while anyone holds or waits).
    pub(crate) fn semaphore_holders(&self) -> String {
        self.aux("sem:holders")
    }

    /// A semaphore's FIFO queue of waiter ids.
    pub(crate) fn semaphore_queue(&self) -> String {
        self.aux("sem:queue")
    }

    /// A semaphore's waiter expiries (sorted set, server-clock ms).
    pub(crate) fn semaphore_timeouts(&self) -> String {
        self.aux("sem:timeout")
    }

    /// Where a semaphore names the waiters whose turn came.
    pub(crate) fn semaphore_channel(&self) -> String {
        self.aux("sem:channel")
    }

    /// Where releases of a `kind` lock are published (and its force-unlocks: see
    /// `inspect.lua`).
    pub(crate) fn channel(&self, kind: LockKind) -> String {
        match kind {
            LockKind::Exclusive => self.exclusive_channel(),
            LockKind::Fair => self.fair_channel(),
            LockKind::Leader => self.election_channel(),
            LockKind::Read | LockKind::Write => self.rw_channel(),
            LockKind::Permit => self.semaphore_channel(),
        }
    }

    /// The key a lease of `kind` is stored under, and how.
    pub(crate) fn lease_key(&self, kind: LockKind) -> (String, Stored) {
        match kind {
            LockKind::Exclusive => (self.lock.clone(), Stored::String),
            LockKind::Fair => (self.fair_holder(), Stored::String),
            LockKind::Leader => (self.leader(), Stored::Leader),
            LockKind::Write => (self.rw_writer(), Stored::String),
            LockKind::Read => (self.rw_readers(), Stored::Entry),
            LockKind::Permit => (self.semaphore_holders(), Stored::Entry),
        }
    }
}

/// How a lease is stored under its key, as the renewal and look-up scripts are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The key is a string holding the lease's value.
    String,
    /// The lease is an entry of a hash of values -> expiry ms (readers, permits).
    Entry,
    /// A leader: a string like [`Stored::String`], whose proclaimed value at
    /// `<key>:value` lives as long as it.
    Leader,
}

impl Stored {
    /// The code the scripts know it by.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Stored::String => "s",
            Stored::Entry => "r",
            Stored::Leader => "l",
        }
    }
}

/// What the Redis backends keep with each granted lease: the id of the request that
/// won it.
///
/// A lease is stored as `<owner token>:<request id>:<fence>` (the exclusive key's
/// value, the fair and write holders' values, a reader's entry); the request id also
/// carries the client's description of itself (see `holders.rs`). Every acquire call
/// sends an id of its own, and the scripts act on a key only as far as that request
/// wrote it: a call run again after its reply was lost takes its own grant over, but
/// an abandoned call of the same owner that reaches the server late never takes over,
/// nor its undo removes, a grant another request of that owner holds. Releases and
/// renewals match the whole value.
#[derive(Clone)]
pub struct RedisLease {
    request: Arc<str>,
    /// Listens for a force-unlock of the granted lease (see [`HolderWatch`]).
    watch: Option<Arc<HolderWatch>>,
}

impl PartialEq for RedisLease {
    fn eq(&self, other: &Self) -> bool {
        self.request == other.request
    }
}

impl Eq for RedisLease {}

impl std::hash::Hash for RedisLease {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.request.hash(state);
    }
}

impl RedisLease {
    /// The lease of the request whose id is `request` (the part of a stored value
    /// between the owner token and the fence), for rebuilding a
    /// [`HeldLease`](lock_core::backend::HeldLease) from what the server stores.
    pub fn new(request: impl Into<String>) -> Self {
        RedisLease {
            request: request.into().into(),
            watch: None,
        }
    }

    /// The same lease, whose holder listens for its force-unlock through `watch`.
    pub(crate) fn watched(mut self, watch: HolderWatch) -> Self {
        self.watch = Some(Arc::new(watch));
        self
    }

    /// Stops listening for a force-unlock: the owner is releasing the lease.
    pub(crate) fn stop_watch(&self) {
        if let Some(watch) = &self.watch {
            watch.stop();
        }
    }

    /// A lease for a new request of a client that describes itself as `holder`
    /// (see [`crate::holders::request_id`]).
    pub(crate) fn fresh(holder: &str) -> Self {
        RedisLease::new(crate::holders::request_id(holder))
    }

    /// The id of the request that won this lease.
    pub fn request(&self) -> &str {
        &self.request
    }
}

impl std::fmt::Debug for RedisLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RedisLease").field(&&*self.request).finish()
    }
}

/// The value a lease of `owner`, won by the request of `lease`, with `fence` is
/// stored as.
pub(crate) fn lease_value(owner: &str, lease: &RedisLease, fence: u64) -> String {
    let mut value = String::with_capacity(owner.len() + lease.request.len() + 22);
    value.push_str(owner);
    value.push(':');
    value.push_str(&lease.request);
    value.push(':');
    lock_core::backend::push_decimal(&mut value, fence);
    value
}

/// `parts` one after the other, in a string allocated once: keys are built on every
/// call, and `format!` would grow them more than once.
pub(crate) fn concat(parts: &[&str]) -> String {
    let mut joined = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        joined.push_str(part);
    }
    joined
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
        assert_eq!(lease_value("c:1", &RedisLease::new("9f"), 7), "c:1:9f:7");
        let (a, b) = (RedisLease::fresh(""), RedisLease::fresh(""));
        assert_ne!(a, b, "every request has an id of its own");
        assert_eq!(a.request().len(), 16);
        assert!(!a.request().contains(':'));
        assert_eq!(Keys::in_cluster(&key).lock, "app:jobs");
    }

    #[test]
    fn on_a_cluster_names_with_braces_stay_distinct_and_in_one_slot() {
        let names = ["a{b}c", "x{b}y", "a%7Bb%7Dc", "}{", "{}", "a}b", "%"];
        let mut seen = std::collections::HashSet::new();
        for name in names {
            let key = LockKey::new(Namespace::new("ns").unwrap(), LockName::new(name).unwrap());
            let keys = Keys::in_cluster(&key);
            assert!(seen.insert(keys.lock.clone()), "{name}: {}", keys.lock);
            let slot = crate::cluster::slot(&keys.lock);
            for other in [
                keys.fence(),
                keys.exclusive_channel(),
                keys.exclusive_waiters(),
                keys.exclusive_inbox("0123456789abcdef"),
                keys.rw_readers(),
                keys.leader(),
                keys.leader_value(),
                keys.election_channel(),
            ] {
                assert_eq!(crate::cluster::slot(&other), slot, "{name}: {other}");
            }
        }
    }
}
