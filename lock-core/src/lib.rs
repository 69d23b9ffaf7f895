//! Backend-agnostic distributed locks: the traits, and the machinery every backend
//! shares.
//!
//! A backend (Redis, ZooKeeper, etcd, SQL, or the in-memory [`memory`] backend here)
//! implements the small [`backend::LockBackend`] primitive: take, renew and release a
//! lease.
//! lock-core builds on it, once for all of them:
//!
//! * the user traits [`DistributedLock`], [`FairLock`], [`ReadWriteLock`],
//!   [`Semaphore`] and [`Election`], object safe;
//! * **owners** per acquisition, **re-entry** through the guard without round trips;
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
//! # Owners and re-entry
//!
//! In async Rust neither a thread nor a task is a safe unit of ownership: a task moves
//! between threads, and `join!` or `select!` run several acquiring futures in one task.
//! So **an owner is one acquisition**: each call of `acquire` (or `try_acquire`,
//! `read`, `write`, ...) that succeeds, together with the guards made from its guard.
//! Its owner token, `<client uuid>:<acquisition number>`, is what the backend stores.
//!
//! * Two acquire calls that run at the same time exclude each other, whatever they run
//!   in: tasks sharing one handle (or one `Arc<dyn DistributedLock>`), futures joined in
//!   one task, two clients. A handle is just a name for the lock; share it freely.
//! * Code that holds the lock re-enters it through its guard:
//!   [`LockGuard::reenter`] returns a further guard on the same acquisition at once,
//!   with no round trip, and the lock is freed when the last guard of the acquisition
//!   goes. Calling `acquire` again while holding waits for yourself, as with
//!   `tokio::sync::Mutex`: hand the guard (or a re-entered one) to nested code instead.
//! * The holder of a write lock takes the read side as the same owner with
//!   [`LockGuard::downgrade`]: granted at once, and writers that queued meanwhile wait
//!   for it too. Releasing the write guard then leaves the owner reading.
//!
//! # Leases and loss
//!
//! [`Lease::Fixed`] leases expire on their own and are never renewed. With
//! [`Lease::Watchdog`] (the default) the client's watchdog renews every third of the
//! watchdog lease (30 s by default), all leases in one backend call per tick. A lease
//! is lost when a renewal finds it gone, or when renewals keep failing until it runs
//! out; its guards then report it through [`LockGuard::is_held`] and
//! [`LockGuard::lost`]. The client counts a lease from the moment it sent the request,
//! less a clock-drift margin (1 % of the lease plus 2 ms by default,
//! [`LockClientBuilder::clock_drift`]) and counting time the machine spent suspended,
//! so it considers a lease gone before the backend can hand the lock to someone else.
//!
//! # Runtime
//!
//! lock-core runs on tokio. The watchdog and release-on-drop spawn tasks on the
//! current runtime.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquisition;
mod api;
pub mod backend;
mod background_loop;
mod cleanups;
mod client;
mod clock;
mod election;
mod error;
mod guard;
mod handle;
mod id;
mod info;
mod kinds;
mod latch;
mod late_grant;
mod lease;
mod lease_ids;
mod locks;
pub mod memory;
mod multi;
mod name;
mod options;
mod semaphore;
mod settings;
mod telemetry;
mod text;
mod watchdog;

/// The traits you call lock methods through: `use lock_core::prelude::*;`.
pub mod prelude {
    pub use crate::api::{
        DistributedLock, DistributedLockExt, FairLock, ReadWriteLock, ReadWriteLockExt,
    };
    pub use crate::client::LockProvider;
    pub use crate::election::{Election, ElectionExt};
    pub use crate::semaphore::{Semaphore, SemaphoreExt};
}

pub use api::{DistributedLock, DistributedLockExt, FairLock, ReadWriteLock, ReadWriteLockExt};
pub use client::{LockClient, LockClientBuilder, LockProvider};
pub use election::{
    Election, ElectionExt, ElectionHandle, Leader, LeaderChanges, Leadership, OBSERVE_EVERY,
};
pub use error::{BoxError, Error, Result};
pub use guard::{LeaseWatch, LockGuard};
pub use id::LockId;
pub use info::{
    default_description as default_holder_description, HolderInfo, LockInfo,
    MAX_HOLDER_DESCRIPTION_BYTES,
};
pub use kinds::{Capabilities, LockFamily, LockKind};
pub use lease::LeaseLoss;
pub use locks::{FairLockHandle, LockHandle, ReadWriteLockHandle};
pub use multi::{
    MemberError, MemberLoss, MultiGuard, MultiLock, MultiLockBuilder, MultiReleaseError,
};
pub use name::{
    LockKey, LockName, Namespace, DEFAULT_NAMESPACE, MAX_NAME_BYTES, NAMESPACE_SEPARATORS,
};
pub use options::{
    AcquireOptions, Lease, Wait, DEFAULT_CLOCK_DRIFT, DEFAULT_WATCHDOG_LEASE, MAX_DURATION,
    MIN_LEASE, MIN_WATCHDOG_LEASE,
};
pub use semaphore::{Semaphore, SemaphoreExt, SemaphoreHandle, MAX_PERMITS};
pub use settings::{parse_duration, TlsOptions};
pub use telemetry::{LockEvent, LockEventKind, LockEvents};

/// This crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;
