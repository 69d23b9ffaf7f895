//! ZooKeeper backend for [lock-core](lock_core): exclusive, fair and read-write locks as
//! ephemeral sequential nodes, in the layout Apache Curator uses, so Java services using
//! Curator's `InterProcessMutex` / `InterProcessReadWriteLock` share the same locks.
//!
//! ```no_run
//! use lock_core::{DistributedLockExt, LockClient};
//! use lock_zookeeper::{ZkBackend, ZkConfig};
//! use std::time::Duration;
//!
//! # #[tokio::main] async fn main() -> lock_core::Result<()> {
//! let config = ZkConfig::from_url("zk://zk1:2181,zk2:2181,zk3:2181")?
//!     .with_chroot("/billing")
//!     .with_session_timeout(Duration::from_secs(10));
//! let client = LockClient::new(ZkBackend::connect(config).await?);
//! let guard = client.lock("invoice-run")?.acquire().await?;
//! // ... work, passing guard.fencing_token() to the storage it writes ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The recipe
//!
//! Each request creates an `EPHEMERAL_SEQUENTIAL` child of the lock's path named
//! `_c_<uuid>-lock-<seq>` (read-write: `_c_<uuid>-__READ__<seq>` /
//! `_c_<uuid>-__WRIT__<seq>`). The lowest sequence holds. Every other contender
//! watches only the node it waits for, so a release wakes one waiter (readers: the
//! readers queued behind the releasing writer), however long the queue: it is fair by
//! construction, and serves both [`DistributedLock`](lock_core::DistributedLock) and
//! [`FairLock`](lock_core::FairLock). Every child with a Curator marker and sequence
//! counts as a contender, whoever created it.
//!
//! * Paths: exclusive `/<namespace>/<name>` (the bare path: give Curator this path),
//!   fair `/<namespace>/<name>%fair`, read-write `/<namespace>/<name>%rw`; see
//!   [`ZkBackend::lock_path`]. Lock paths are container nodes that the server reaps
//!   once empty; a chroot (from the URL or [`ZkConfig::with_chroot`]) holds a tenant.
//! * Read-write policy: a reader waits only for writers queued before it, a writer for
//!   every node before it and for every downgrade reader. Queue order decides, so
//!   neither side starves the other.
//! * Downgrade: the holder of the write lock may take the read lock. Its reader node,
//!   `_c_<uuid>-__DOWN__-__READ__<seq>` (still a reader in its place to Curator), is
//!   created in one multi-op with a check that its write node still exists, and holds
//!   at once; a read request whose write lock went meanwhile queues as an ordinary
//!   reader. Since writers wait for downgrade readers wherever they stand, a writer
//!   that queued while the write lock was held never gets in while the downgraded owner
//!   still reads; downgrade readers never wait, so this cannot deadlock. Curator's
//!   recipe lacks this: a *Curator* writer on the same path waits only for the nodes
//!   before its own, so it can get in beside our downgraded reader (as it can beside a
//!   Curator one).
//! * Protected creation: the `_c_<uuid>` prefix lets a create whose reply was lost find
//!   its node instead of leaving an orphan.
//! * Node data: the owner token, a newline, and the client's description of itself
//!   ([`LockClientBuilder::holder_description`](lock_core::LockClientBuilder::holder_description)),
//!   which `inspect` reports with the node's token and time; Curator puts the client's
//!   IP address there, kazoo its identifier.
//! * Fencing token: a zxid, so it is monotonic across the ensemble: the node's czxid
//!   for a grant on the first look (or a downgrade), else the zxid of a write to the
//!   node at grant time. A grant's token is above every token of a grant that returned
//!   before its acquire began, and every reader's token lies between the tokens of the
//!   writers before and after it. Readers that hold at once are concurrent grants: their
//!   tokens are distinct, in the order ZooKeeper saw their grants (the create, or the
//!   write after a wait), which is neither their queue order nor the order in which
//!   their acquire calls return; putting them in either order would need the readers
//!   to wait for one another. So a store that rejects tokens below the highest it has
//!   seen can take writes under the write lock, not from concurrent readers.
//!
//! # Sessions, loss and uncertainty
//!
//! The session is the lease: no renewal round trip per lock. A killed holder's locks
//! are freed when the server expires its session (the session timeout). A holder's
//! node deleted behind its back, or its session expiring, is reported to its guards at
//! once (a lock held for less than 0.2 s sets no watch on its node: its deletion is
//! seen when the watch is set, 0.2 s after the grant); a lost connection makes locks uncertain ([`ZkBackend::connection_state`]),
//! and they are reported lost before the server could have expired the session: 7/20
//! of a session timeout T after the client declares the connection lost (which it does
//! 2/5 to 9/20 T after the last reply from the server), so at most 4/5 T after that
//! reply, at least T/5 before the server may expire the session and hand the locks on.
//! Fixed leases are not supported (see [`ZkBackend`]).
//!
//! # Costs
//!
//! Uncontended acquire: two round trips (create; then the queue read). Release: one
//! (delete). A lock held for more than 0.2 s, or a waiter, also watches its own node
//! (one request). A contended grant: one read per wake-up, plus one write for its
//! fencing token. No traffic per held lock while held.
//!
//! # Cancel safety
//!
//! Dropping an acquire future deletes its node (from a spawned task, since drop cannot
//! wait), found by its uuid if the create was still in flight.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acl;
mod backend;
mod config;
mod error;
mod lease;
mod node_data;
mod path;
mod recipe;
mod session;
mod stats;
#[cfg(feature = "tls")]
mod tls;

pub use backend::ZkBackend;
pub use config::{
    ZkConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SESSION_TIMEOUT,
};
pub use lease::ZkLease;
pub use session::ConnectionState;
pub use stats::ZkStats;
/// The ZooKeeper client this backend is built on, for [`ZkBackend::zookeeper_client`].
pub use zookeeper_client;

/// This crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
