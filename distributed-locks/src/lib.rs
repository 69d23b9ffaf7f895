//! Distributed locks for async Rust: one API, the backend picked by a cargo feature
//! and a URL.
//!
//! This crate re-exports [`lock_core`] (the traits, guards, errors and the in-memory
//! backend) and, behind features, each backend crate. [`connect`] opens any of them
//! from a URL and hands back an object-safe [`LockProvider`], so the rest of the
//! program does not name the backend at all.
//!
//! ```
//! use distributed_locks::{connect, prelude::*, ConnectOptions};
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distributed_locks::Result<()> {
//! let locks = connect("memory://", ConnectOptions::default().namespace("jobs")).await?;
//! let guard = locks.lock("nightly-report")?.acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | URLs | backend crate |
//! |---|---|---|
//! | (none) | `memory://` | [`lock_core::memory`] |
//! | `redis` | `redis://`, `redis+sentinel://`, `redis+cluster://`, `redlock://`; with `tls` also `rediss://`, `rediss+sentinel://`, `rediss+cluster://` | `lock-redis` |
//! | `zookeeper` | `zk://`; with `tls` also `zk+tls://` | `lock-zookeeper` |
//! | `etcd` | `etcd://`, `etcd+https://` (with `tls`) | `lock-etcd` (needs `protoc` to build) |
//! | `postgres` | `postgres://`, `postgresql://` | `lock-sql` with PostgreSQL's driver |
//! | `mysql` | `mysql://`, `mariadb://` | `lock-sql` with MySQL's driver |
//! | `sqlite` | `sqlite://path` | `lock-sql` with SQLite compiled in |
//! | `sql` | all three databases | `lock-sql` |
//! | `tls` | TLS (rustls) for the backends above: `rediss://`, `zk+tls://`, `etcd+https://`, PostgreSQL and MySQL/MariaDB (`sslmode`, `ssl-mode`, `tls_ca`, ...) | their `tls` features |
//!
//! # Settings in the URL
//!
//! Each backend reads its production settings from the URL's query, in the same
//! words (`connect_timeout=3s`, `request_timeout=1s`, `tls_ca=/etc/ca.pem`, ...), and
//! refuses a key it does not know. The tables: `lock_redis::RedisConfig`,
//! `lock_etcd::EtcdConfig`, `lock_sql::SqlConfig::from_url` and
//! `lock_zookeeper::ZkConfig::from_url`.
//!
//! [`schemes`] lists what a build understands; [`connect`] refuses any other scheme,
//! naming the feature.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;

pub use connect::{connect, schemes, ConnectOptions};
// What users call; backend implementers depend on `lock_core` and its `backend` module.
pub use lock_core::{
    default_holder_description, memory, parse_duration, prelude, AcquireOptions, BoxError,
    Capabilities, DistributedLock, DistributedLockExt, Election, ElectionExt, ElectionHandle,
    Error, FairLock, FairLockHandle, HolderInfo, Leader, LeaderChanges, Leadership, Lease,
    LeaseLoss, LeaseWatch, LockClient, LockClientBuilder, LockEvent, LockEventKind, LockEvents,
    LockFamily, LockGuard, LockHandle, LockId, LockInfo, LockKey, LockKind, LockName, LockProvider,
    MemberError, MemberLoss, MultiGuard, MultiLock, MultiLockBuilder, MultiReleaseError, Namespace,
    ReadWriteLock, ReadWriteLockExt, ReadWriteLockHandle, Result, Semaphore, SemaphoreExt,
    SemaphoreHandle, Wait, DEFAULT_CLOCK_DRIFT, DEFAULT_NAMESPACE, DEFAULT_WATCHDOG_LEASE,
    MAX_DURATION, MAX_HOLDER_DESCRIPTION_BYTES, MAX_NAME_BYTES, MAX_PERMITS, MIN_LEASE,
    MIN_WATCHDOG_LEASE, NAMESPACE_SEPARATORS, OBSERVE_EVERY,
};

/// The Redis backend crate, [`lock_redis`]: `RedisBackend`, `RedLockBackend`, `RedisConfig`.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lock_redis as redis;

/// The ZooKeeper backend crate, [`lock_zookeeper`]: `ZkBackend`, `ZkConfig`.
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use lock_zookeeper as zookeeper;

/// The SQL backend crate, [`lock_sql`]: `SqlBackend`, `SqlConfig`, `Strategy`, with
/// the databases whose features are on (`postgres`, `mysql`, `sqlite`; `sql` is all
/// three).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite")))
)]
pub use lock_sql as sql;

/// The etcd backend crate, [`lock_etcd`]: `EtcdBackend`, `EtcdConfig`.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lock_etcd as etcd;

/// The README's examples compile as doctests (they need every backend feature).
#[cfg(all(
    doctest,
    feature = "redis",
    feature = "zookeeper",
    feature = "sql",
    feature = "etcd"
))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// This crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
