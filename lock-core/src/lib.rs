//! Backend-agnostic distributed locks: the traits, and the machinery every backend
//! shares.
//!
//! A backend (Redis, ZooKeeper, etcd, SQL, or the in-memory [`memory`] backend here)
//! implements the small [`LockBackend`] primitive: take, renew and release a lease.
//! lock-core builds on it, once for all of them:
//!
//! * the user traits [`DistributedLock`], [`FairLock`] and [`ReadWriteLock`], object safe;
//! * **reentrancy** without round trips, and hold counts;
//! * **guards** ([`LockGuard`]) with fencing tokens, `release().await`, loss reporting
//!   and best-effort release on drop;
//! * the **watchdog**: one task per client renewing every lease in one batched call;
//! * **deadlines** for waiting, **argument checks**, **namespaces** and `tracing` events;
//! * [`MultiLock`]: several locks, on any backends, taken all or nothing in an order
//!   that cannot deadlock.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{memory::MemoryBackend, prelude::*, AcquireOptions, LockClient};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! let client = LockClient::new(MemoryBackend::new());
//! let lock = client.lock("orders/42")?;
//!
//! // Wait without limit; the watchdog keeps the lease alive until release.
//! let guard = lock.acquire().await?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release().await?;
//!
//! // Wait at most 2 s; hold for at most 10 s, never renewed.
//! let opts = AcquireOptions::wait_for(Duration::from_secs(2)).lease(Duration::from_secs(10));
//! let guard = lock.acquire_with(opts).await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Owners and reentrancy
//!
//! In async Rust a thread id means nothing: a task moves between threads, and one
//! thread runs many tasks. So **an owner is a lock handle**: the value returned by
//! [`LockClient::lock`] (or `fair_lock`, `rw_lock`) together with its clones. Its owner
//! token, `<client uuid>:<handle number>`, is what the backend stores.
//!
//! * The same handle (or a clone) acquiring again while it holds a live lease
//!   re-enters: no round trip, a further guard, and the lock is freed when the last
//!   guard is released. Concurrent acquires of one handle are serialised so they never
//!   both reach the backend.
//! * Two handles are two owners and exclude each other, even in one task. Give each
//!   worker its own handle to make them contend; share a handle to let code re-enter.
//! * A re-entry joins the existing lease: its own lease option is ignored.
//!
//! # Leases and loss
//!
//! [`Lease::Fixed`] leases expire on their own and are never renewed. With
//! [`Lease::Watchdog`] (the default) the client's watchdog renews every third of the
//! watchdog lease (30 s by default), all leases in one backend call per tick. A lease
//! is lost when a renewal finds it gone, or when renewals keep failing until it runs
//! out; its guards then report it through [`LockGuard::is_held`] and
//! [`LockGuard::lost`]. The client counts a lease from the moment it sent the request,
//! so it considers a lease gone no later than the backend does.
//!
//! # Runtime
//!
//! lock-core runs on tokio. The watchdog and release-on-drop spawn tasks on the
//! current runtime.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod api;
mod backend;
mod cleanups;
mod client;
mod clock;
mod error;
mod guard;
mod id;
mod lease;
mod locks;
pub mod memory;
mod multi;
mod name;
mod options;
mod owner;
mod watchdog;

/// The traits you call lock methods through: `use lock_core::prelude::*;`.
pub mod prelude {
    pub use crate::api::{
        DistributedLock, DistributedLockExt, FairLock, ReadWriteLock, ReadWriteLockExt,
    };
    pub use crate::client::LockProvider;
}

pub use api::{DistributedLock, DistributedLockExt, FairLock, ReadWriteLock, ReadWriteLockExt};
pub use backend::{
    AcquireRequest, Capabilities, Grant, HeldLease, LockBackend, LockFamily, LockKind, OwnerToken,
    Renewal,
};
pub use cleanups::{Cleanups, PendingCleanup};
pub use client::{LockClient, LockClientBuilder, LockProvider};
pub use error::{BoxError, Error, Result};
pub use guard::LockGuard;
pub use id::LockId;
pub use lease::{LeaseLoss, LossNotifier};
pub use locks::{FairMutex, Mutex, RwLock};
pub use multi::{
    MemberError, MemberLoss, MultiGuard, MultiLock, MultiLockBuilder, MultiReleaseError,
};
pub use name::{
    LockKey, LockName, Namespace, DEFAULT_NAMESPACE, MAX_NAME_BYTES, NAMESPACE_SEPARATORS,
};
pub use options::{
    check_duration, AcquireOptions, Deadline, Lease, Wait, DEFAULT_WATCHDOG_LEASE, MAX_DURATION,
    MIN_LEASE, MIN_WATCHDOG_LEASE,
};
