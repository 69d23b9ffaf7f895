//! etcd backend for [lock-core](lock_core): exclusive, fair and read-write locks on an
//! etcd v3 cluster, built on leases and create revisions the way etcd's own
//! `concurrency.Mutex` is, so `etcdctl lock` and these locks exclude each other.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{prelude::*, AcquireOptions, LockClient};
//! use lock_etcd::{EtcdBackend, EtcdConfig};
//!
//! # #[tokio::main] async fn main() -> lock_core::Result<()> {
//! let config = EtcdConfig::from_url("etcd://127.0.0.1:2379")?
//!     .with_connect_timeout(Duration::from_millis(500));
//! let client = LockClient::new(EtcdBackend::connect(config).await?);
//!
//! let lock = client.lock("reports/daily")?;
//! let guard = lock.acquire_with(AcquireOptions::wait_for(Duration::from_secs(5))).await?;
//! // ... pass guard.fencing_token() (the key's create revision) to the storage ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The recipe
//!
//! * **Key**: the exclusive lock `name` of namespace `ns` is the prefix `ns/name`; a
//!   contender writes `ns/name/<lease id in lowercase hex>` with an empty value,
//!   attached to its lease. That is the layout of etcd's `concurrency.Mutex`, of
//!   `etcdctl lock` and of etcd's v3lock service: `etcdctl lock ns/name` and this
//!   crate's lock exclude each other, both ways. (A lock name containing `/` is fine
//!   here, but `etcdctl lock ns/a` also counts the keys of our lock `a/b` as
//!   contenders.)
//! * **Holder**: the key with the lowest create revision. The **fencing token** is the
//!   holder key's create revision when granted at once, else the revision of the
//!   transaction that found it first after a wait, which writes the key again (same
//!   value and lease): etcd's revisions only grow, across all keys, so tokens follow
//!   grant order, also across the lock kinds of one name. An election's term is the
//!   leader key's create revision, as etcd's own election has it.
//! * **Uncontended acquire: one transaction** (create the key if absent, and read the
//!   oldest key in the same revision). **Release: one** transaction, deleting the key
//!   only if its create revision is still the granted one, so a stale release never
//!   deletes a newer key of the same lease (etcd #22082).
//! * **Waiting, no herd**: a waiter watches only the deletion of the newest key created
//!   before its own, so a release wakes one waiter. The watch starts *now* (not from a
//!   past revision, which etcd catches up only every 100 ms); then the waiter checks
//!   the predecessor still exists. After every wake-up it re-checks, in one
//!   transaction, that its own key still exists with its create revision (so its lease
//!   is alive: the bug Jepsen found in etcd 3.4.3, #11456) and that nothing earlier
//!   remains; the same transaction writes the key again, for the fence. A key that
//!   vanished while waiting is written again, at the back.
//!
//! # Leases
//!
//! * **One session lease per client** carries every watchdog-kept lock. Its TTL is the
//!   watchdog lease plus a third, rounded up to whole seconds (etcd's TTLs are whole
//!   seconds, at least about 2 s). The watchdog's tick is **one keep-alive** on one
//!   stream plus **one transaction** comparing every held key's create revision (one
//!   per 100 locks): its cost does not grow one round trip per lock. A lock of a
//!   crashed client is freed when the session lease runs out.
//! * A waiting client keeps its lease alive itself (nobody else may be renewing it).
//! * A **fixed lease** is a lease of its own, never kept alive once granted.
//!   [`extend`](lock_core::LockGuard::extend) moves the key to a new lease of the
//!   requested length in one guarded transaction (its create revision, place and
//!   token stay). Extending a watchdog lock by exactly the watchdog lease renews it
//!   like the watchdog does. A move whose answer never comes (it failed, leaving its
//!   outcome unknown, or the `extend` was dropped meanwhile) may have left the key on
//!   a lease nobody keeps: the lock is then given up, reported lost
//!   ([`LeaseLoss::Revoked`](lock_core::LeaseLoss::Revoked)) before its key is deleted.
//! * When a keep-alive finds the session lease gone (expired or revoked), every guard
//!   on it reports [`LeaseLoss::SessionLost`](lock_core::LeaseLoss::SessionLost) at
//!   once. A key deleted behind a holder's back (a force-unlock, `etcdctl del`) is
//!   reported within about a second, with [`LeaseLoss::Revoked`](lock_core::LeaseLoss::Revoked):
//!   a lock held for more than 0.2 s is watched (one watch and one read), so short
//!   holds cost nothing more.
//!
//! # Owners sharing the session lease
//!
//! Two owners (lock handles) of one client share its lease, and so would share the
//! exclusive key `<prefix>/<lease id>`, which etcd's recipe treats as "this lease holds
//! the lock". So owners of one client take turns on each exclusive lock in a local
//! FIFO queue, and only the front one contends at etcd: the key layout stays
//! `etcdctl`'s, and the waiters of one process cost etcd one watch in all. (Across clients the order
//! is etcd's; within a client, the local queue's.) A turn ends at release, and as soon
//! as its grant is known lost: while owners wait, one of them watches the holder's key
//! (one watch per key, whatever the number of waiters) and its guard, so a stale guard
//! kept by its user (its key force-unlocked, its lease revoked or run out) never holds
//! up the other owners of its client; the guard is told if its key was deleted behind
//! its back. Fair and read-write keys carry a
//! per-acquisition suffix (`<lease id>-<n>`) and the owner token as value, so each
//! acquisition is its own contender at etcd, in strict FIFO order.
//!
//! # Read-write locks
//!
//! Writers and readers are keys under one prefix, ordered by create revision. A writer
//! waits for every earlier key; a reader waits only for earlier writers. So a waiting
//! writer holds back readers that come after it (no writer starvation) and never
//! readers that came before (no reader starvation either).
//!
//! The holder of the write lock may take the read lock (downgrade). Its read key is a
//! *downgrade* key (`.../d/...`), written in one transaction only while its write key
//! still exists, and granted at once. Every writer waits for every downgrade key,
//! whatever its place: a writer that queued while the write lock was held, before the
//! downgrade, therefore never gets in while the downgraded owner still reads. Since
//! downgrade readers never wait, this cannot deadlock. A read request whose write lock
//! went meanwhile queues as an ordinary reader.
//!
//! # Errors and cancel safety
//!
//! Every request has the [request timeout](EtcdConfig::request_timeout); etcd down or
//! without a leader is [`Error::Unavailable`](lock_core::Error::Unavailable), which is
//! retryable. Every request requires a leader (`hasleader`): a member cut off from the
//! leader refuses new requests and ends the watches it serves, so a waiter whose watch
//! was there looks again through another member rather than waiting on a watch that
//! can no longer fire. An acquisition runs in a task of its own: dropping its future deletes the
//! key it wrote (or revokes its fixed lease), also when the grant was already on its
//! way.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod backend;
mod config;
mod error;
mod gate;
mod inspect;
mod key_watch;
mod keys;
mod lease;
mod queries;
mod url_settings;
mod writes;

pub use backend::{EtcdBackend, EtcdLease};
pub use config::{EtcdConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT};
pub use etcd_client;

/// This crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
