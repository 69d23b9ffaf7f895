//! Distributed locks in PostgreSQL, MySQL/MariaDB and SQLite, for
//! [lock-core](lock_core): every lock type ([`DistributedLock`](lock_core::DistributedLock),
//! [`FairLock`](lock_core::FairLock), [`ReadWriteLock`](lock_core::ReadWriteLock)),
//! reentrancy, fencing tokens, the watchdog and loss reporting, over
//! [`sqlx`](https://docs.rs/sqlx).
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{prelude::*, LockClient};
//! use lock_sql::{SqlBackend, SqlConfig, Strategy};
//!
//! # #[tokio::main] async fn main() -> lock_core::Result<()> {
//! // SQLite needs no server, and works across processes on one machine.
//! let backend = SqlBackend::connect_url("sqlite://locks.db").await?;
//! let client = LockClient::new(backend);
//! let guard = client.lock("orders/42")?.acquire_timeout(Duration::from_secs(5)).await?;
//! guard.release().await?;
//!
//! // PostgreSQL with row locks on a pinned connection instead of lease rows.
//! let config = SqlConfig::from_url("postgres://locks@127.0.0.1/app")?.with_strategy(Strategy::ForUpdate);
//! let client = LockClient::new(SqlBackend::connect(config).await?);
//! client.lock("orders/42")?.acquire().await?.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Strategies
//!
//! | | [`Strategy::Lease`] (default) | [`Strategy::ForUpdate`] | [`Strategy::Session`] |
//! |---|---|---|---|
//! | a held lock is | a row with owner, fence and expiry (server clock) | a row lock in an open transaction | a session-level advisory lock (`pg_advisory_lock`, `GET_LOCK`) |
//! | writes per grant | a synced commit | a synced commit (the fence) and the holder record | none to disk: the fence counter is in an `UNLOGGED`/`MEMORY` table, floored by the server clock |
//! | connections | pooled, none held between calls (MariaDB: one per client that holds their doorbells, and one per doorbell its blocked waiters watch, at most 8) | one pinned connection per held lock | one pinned connection per held lock |
//! | holder crashes | freed when its lease runs out | freed as soon as the connection drops, or when its lease runs out if the connection stays open | as FOR UPDATE |
//! | the server restarts | held locks stay held on a server that writes commits out before acknowledging them (see [Durability](#durability)) | every lock frees with the server; its holder learns at its next keep-alive (a fixed lease's holder: when the lease ends), so a server back sooner may grant it to another meanwhile | as FOR UPDATE |
//! | waiting | PostgreSQL `LISTEN/NOTIFY` (a client listens only while one of its handles is blocked waiting, and 2–3 s after, so others' releases cost an idle client nothing); MariaDB: the holder's doorbell, a `GET_LOCK` name its client holds while the lease lasts, on which waiters in other processes block (waiters kept waiting only by other waiters' queue tickets poll); else MySQL/SQLite polling with backoff and jitter, releases in the same process wake at once; a release wakes one waiter of each kind per client (every reader), and only that one (and every reader) polls | inside the database's lock queue | inside the database's lock queue |
//! | lock types | exclusive, fair, read-write | exclusive | exclusive; fair on PostgreSQL |
//! | `inspect` | holders with owner, token, description, times | owner and token | whether it is held |
//! | fixed leases | yes | yes (the server ends a transaction silent for its lease; MySQL rounds up to whole seconds) | yes (the server ends a session silent for its lease: PostgreSQL 14+ `idle_session_timeout`; MySQL `wait_timeout`, whole seconds) |
//! | databases | PostgreSQL, MySQL/MariaDB, SQLite | PostgreSQL, MySQL/MariaDB | PostgreSQL, MySQL/MariaDB |
//!
//! # Tables
//!
//! The backend creates its tables if they are missing, named from a configurable,
//! validated and quoted prefix ([`SqlConfig::with_table_prefix`], default
//! [`DEFAULT_TABLE_PREFIX`]): `<prefix>_meta` (holding a schema version marker, so a
//! later release can migrate), `<prefix>_keys` (one row per lock key: its fencing
//! counter and queue-ticket counter; never deleted, so fencing tokens keep increasing
//! when lease rows are deleted), `<prefix>_leases`, `<prefix>_queue` (fair-lock and
//! waiting-writer tickets), `<prefix>_rows` and `<prefix>_holders` (FOR UPDATE),
//! `<prefix>_fences` (the session strategy's fence counters; not durable).
//! Keys are stored as a SHA-256 of namespace and name (with both kept as text beside
//! it), so every valid lock name fits any database's index, and all values are bind
//! parameters.
//!
//! On MariaDB the lease strategy also creates a stored procedure,
//! `<prefix>_grant_<digest>` (the digest is of its body, so releases with other
//! statements make procedures of their own), that grants an uncontended lease in one
//! call (the key's fence bump and the lease row in one transaction on the server) where
//! a client-side transaction takes four round trips. Connect creates it if it is
//! missing, which needs the `CREATE ROUTINE` privilege on the database, and calls need
//! `EXECUTE`. A user without them still gets every lock, through the client-side
//! transaction: connect logs a warning when it cannot create the procedure, and the
//! first acquire when it cannot call it. The session strategy creates two the same
//! way, `<prefix>_take_<digest>` and `<prefix>_free_<digest>`, which try a lock and
//! let it go in one statement each (with the fence and the silence limit); without
//! them each is two statements, sent together (a try or release that finds them gone
//! or forbidden logs a warning, and they go as text from then on).
//!
//! # Durability
//!
//! Grants, renewals and force-unlocks commit as the server is configured (synced to
//! disk by default). On PostgreSQL an owner's release commits without waiting for the
//! disk (`synchronous_commit` off for that transaction alone, whatever the server or
//! role sets): a release lost in a server crash, or not yet on a standby that takes
//! over, keeps the lock taken until its lease runs out, and the next grant's synced
//! commit writes the release to the log before itself, so no grant can be lost that
//! way and the fencing token still moves at every grant.
//!
//! [`Strategy::Session`] writes nothing to disk per grant: its lock lives in the
//! server's memory, and its fence counter in a table the server does not log
//! (PostgreSQL `UNLOGGED`, MariaDB `MEMORY`; a crash or, on MariaDB, any restart empties
//! it). Each token is one past the last and never below the server clock in
//! microseconds, so the tokens after a crash are above those before it as long as the
//! server clock does not go back. On a PostgreSQL standby that takes over, unlogged
//! tables are empty too: the same floor holds if the clocks of the two hosts agree to
//! within the time the failover takes. `<prefix>_keys` holds the names the strategy
//! has seen (written once per name), for operators and `lockctl`.
//!
//! # Time
//!
//! Every expiry is computed and compared by the database server's clock
//! (`clock_timestamp()`, `SYSDATE(3)`, SQLite's `julianday('now')`); clients send only
//! durations. A client whose clock is off cannot steal an unexpired lease.
//!
//! # Read-write policy
//!
//! Writers are preferred: a waiting writer takes a queue ticket, and new readers wait
//! while one is queued (the write lock's owner may still read: downgrade). A writer
//! that gives up removes its ticket; one that crashes stops blocking readers when its
//! ticket expires ([`SqlConfig::with_queue_ttl`]).
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod advisory;
mod backend;
mod bells;
mod config;
mod db;
mod decide;
mod dialect;
mod error;
mod holder_record;
mod hot;
mod key;
mod lease;
mod listen;
mod local_wake;
mod pessimistic;
mod server_limits;
mod spare;
mod sql;
mod tls;
mod url;
mod url_settings;
mod wait;
mod wait_line;

pub use backend::{SqlBackend, SqlLease};
pub use config::{
    SqlConfig, Strategy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TABLE_PREFIX,
    MAX_HELD_LOCKS,
};
pub use dialect::{Dialect, MAX_TABLE_PREFIX};
pub use sqlx;

/// The value of the `khash` column under which `key` is stored in every table: for
/// operators looking a lock up by hand (and for tests that tamper with rows).
///
/// ```
/// use lock_core::{LockKey, LockName, Namespace};
/// let key = LockKey::new(Namespace::new("app")?, LockName::new("jobs")?);
/// assert_eq!(lock_sql::stored_key(&key).len(), 64);
/// # Ok::<(), lock_core::Error>(())
/// ```
pub fn stored_key(key: &lock_core::LockKey) -> String {
    key::KeyId::of(key).hash
}

/// This crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
