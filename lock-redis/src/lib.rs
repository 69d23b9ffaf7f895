//! Redis backend for [lock-core](lock_core): exclusive, fair and read-write locks,
//! semaphores and elections on one Redis server, the primary Redis Sentinel names, or a
//! Redis Cluster ([`RedisBackend`]), and exclusive locks by RedLock over several
//! independent masters ([`RedLockBackend`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{prelude::*, AcquireOptions, LockClient};
//! use lock_redis::{RedisBackend, RedisConfig};
//!
//! # #[tokio::main] async fn main() -> lock_core::Result<()> {
//! let config = RedisConfig::from_url("redis://127.0.0.1:6379")?
//!     .with_connect_timeout(Duration::from_millis(500));
//! let client = LockClient::new(RedisBackend::new(config)?);
//!
//! let lock = client.lock("reports/daily")?;
//! let guard = lock.acquire_with(AcquireOptions::wait_for(Duration::from_secs(5))).await?;
//! // ... pass guard.fencing_token() to the storage you protect ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Round trips
//!
//! * **Acquire, uncontended:** one (`EVALSHA` of the acquire script). A blocked waiter
//!   subscribes (one more round trip on the pub/sub connection, none if another waiter
//!   of this process already listens on the lock) and tries again.
//! * **Release:** one. **Renewal tick:** one per 1000 leases, whatever the locks.
//! * **With [replica acknowledgement](RedisConfig::with_replica_acks):** one more
//!   per grant (`WAIT`).
//!
//! # Layout
//!
//! The exclusive lock is the key `namespace:name`, a plain string holding
//! `<owner token>:<request id>:<fence>` with a `PX` lease: the layout of redis-py's
//! `Lock`, redsync and rslock. A lock held by one of those clients (`SET key token NX
//! PX`) excludes ours, and ours excludes theirs. Its fencing counter and every key of the
//! fair and read-write locks live at `{namespace:name}:...`, in the same hash slot.
//! A grant takes one more than the larger of the fencing counter and the server clock
//! in microseconds: a counter lost to a failover or to a restart without persistence
//! starts again above every token issued before, and tokens follow the order of the
//! grants to within the servers' clock skew, even while an old primary that has not
//! yet heard of a failover keeps granting beside the new one. For the same reason the
//! counter can expire: it does, a week after the name's last grant, so a name locked
//! once does not keep a key for ever.
//!
//! Every acquire call (every RedLock round) sends a request id of its own
//! ([`RedisLease`]). A call that is run again after its reply was lost finds the key
//! its own request wrote and takes it over with a new fence. A key of the same owner
//! written by another request blocks like anyone's: a call abandoned at its timeout
//! still runs on the server when it gets there, and gives back whatever it is granted,
//! so it must never take over (and then remove) a grant a later call of that owner
//! holds. A call that fails after it may have reached the server (its connection
//! dropped, and its second run on a new connection failed too) gives back whatever its
//! request was granted in the background, retrying until that grant would have run
//! out. Releases and renewals match the whole stored value.
//!
//! A release that frees its lease leaves a receipt, `{namespace:name}:released:<request
//! id>`, holding the freed value, which expires on its own 5 s after the lease would
//! have. A release whose reply was lost with its connection runs again (on a new
//! connection, or from lock-core's retries) and finds the lease gone: the receipt
//! tells it that this very release freed it, so it succeeds. A lease that was already
//! gone when the release first ran leaves no receipt, and is reported lost.
//!
//! # Force-unlocks
//!
//! `force_unlock` announces each lease it removes on the lock's channel. A holder that
//! has held its lock for 0.2 s listens there (through the shared pub/sub connection,
//! one subscription per lock) and looks at its key once, so it learns of the loss within
//! about a second, with [`LeaseLoss::Revoked`](lock_core::LeaseLoss::Revoked), instead
//! of at its next renewal (never, for a fixed lease). RedLock holders learn at their
//! next renewal.
//!
//! # Waiting
//!
//! A release publishes on a per-lock channel. Waiters subscribe through one shared
//! pub/sub connection per backend, and sleep until a message or the end of the
//! holder's lease, whichever comes first; a lost message costs at most one lease, never
//! a hang. A fair lock wakes only the waiter first in line.
//!
//! An exclusive lock wakes one waiter among every client that waits for it. A blocked
//! waiter registers in `{namespace:name}:waiting` (its id to an expiry by the server
//! clock, refreshed every third of the [waiter lease](RedisConfig::waiter_lease)), and
//! listens on `{namespace:name}:channel:<backend id>`, a channel only its own backend
//! subscribes to. A release publishes, on its backend's channel, the id of the waiter
//! whose entry expires first (the one refreshed longest ago, not always the one that
//! has waited longest); `PUBLISH` counting no listener there means that waiter's process
//! is gone, and the release drops it and tries the next. A woken waiter that gives up
//! before it tries passes the wake-up on as it leaves, and a backend that is woken for
//! a waiter of its own that is no longer there (its entry outlived it) removes the
//! entry and passes the wake-up on. The lock stays unfair: anyone,
//! the releaser too, may take it before the woken waiter does, which then waits again.
//! RedLock's waiters do not register, and every release wakes them.
//!
//! Another client on the shared layout (redis-py, redsync, a raw `SET NX PX`) publishes
//! nothing when it releases. The acquire script tells such a holder from ours (ours
//! store a fence this lock's counter issued), and only then does the waiter look again
//! by itself: after 20 ms, doubling up to
//! [`with_silent_holder_poll`](RedisConfig::with_silent_holder_poll) (150 ms by default).
//! Such a release is noticed within that long (measured: 60 ms median, 68 ms worst),
//! not at the end of the holder's lease. Behind our own holders nobody polls (a
//! registered waiter only refreshes its entry).
//!
//! # Fair locks
//!
//! A FIFO list of waiter ids plus a sorted set of their expiries, by the **Redis
//! server clock** (`TIME` inside the scripts), so client clock skew cannot evict live
//! waiters. A waiting client refreshes its place every third of the
//! [waiter lease](RedisConfig::waiter_lease); a waiter that dies holds up the queue for
//! at most that long.
//!
//! # Elections
//!
//! An election is a line of candidates kept as the fair lock's (at
//! `{namespace:name}:elect`, `:elect:queue`, `:elect:timeout`, woken on
//! `:elect:channel`). The campaign value rides in the leader's lease value, as a
//! holder's description does; a value the leader proclaims lives beside it, at
//! `{namespace:name}:elect:value`, naming the lease it belongs to, renewed with the
//! lease and deleted with it, so a later leader never reads as an earlier one's value.
//! The term is the name's fencing token. [Replica acknowledgement](RedisConfig::with_replica_acks)
//! covers the grant, not a proclaim: a failover may bring back the value proclaimed
//! before. RedLock holds no elections.
//!
//! # Read-write locks
//!
//! The writer is a string key with a `PX` lease; readers are entries of a hash
//! (`owner:request:fence` to expiry by the server clock). **Writers are preferred:** once a
//! writer waits, new readers wait behind it (the writer's own owner may still take the
//! read lock: downgrade), so a stream of readers cannot starve a writer. Readers can
//! starve under a stream of writers.
//!
//! # Sentinel
//!
//! With a `redis+sentinel://host:port,host:port/service` URL the backend asks the
//! sentinels for the primary of `service` (and checks its `ROLE`) on first use, and
//! again after a failure that may mean it moved: a refused or dropped connection, no
//! answer, `READONLY` from a demoted primary. The failing call runs once more on the
//! primary they name. A waiting acquire rides out a failover within its wait limit
//! and the [failover grace](RedisConfig::with_failover_grace); a one-shot try fails
//! at once with a retryable [`lock_core::Error::Unavailable`].
//!
//! # Cluster
//!
//! With a `redis+cluster://host:port,host:port` URL every call goes to the node that
//! owns the lock's slot (all of a lock's keys share one; names with `{` or `}` are
//! percent-encoded on a cluster to keep it so). Scripts publish on sharded channels
//! (`SPUBLISH`) and waiters listen with `SSUBSCRIBE` at the slot's owner, subscribing
//! again wherever the slot moves. The watchdog renews with one `CLUSTER SLOTS` and one
//! script call per node per tick; a node whose call fails costs only the leases it
//! keeps ([`Renewal::Unanswered`](lock_core::backend::Renewal::Unanswered)). Waiters
//! ride out a failover as under Sentinel.
//!
//! # What Redis does not promise
//!
//! A single Redis server is enough for locks that save work. Replication is
//! asynchronous: a failover to a replica that had not yet received the lease can
//! grant it twice (the holder learns of the loss at its next renewal).
//! [Replica acknowledgement](RedisConfig::with_replica_acks) narrows that window
//! but cannot close it. Use the fencing token wherever correctness matters, or a
//! consensus-backed backend.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod calls;
mod cluster;
mod config;
mod error;
mod holder_watch;
mod holders;
mod keys;
mod node;
mod primary;
mod pubsub;
mod redlock;
mod scripts;
mod url_settings;

pub use backend::RedisBackend;
pub use config::{
    RedisConfig, ReplicaAcks, TooFewReplicas, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAILOVER_GRACE,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_SILENT_HOLDER_POLL, DEFAULT_WAITER_LEASE,
};
pub use keys::RedisLease;
pub use redis;
pub use redlock::RedLockBackend;

/// This crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
