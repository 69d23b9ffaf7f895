//! The lease strategy: lock rows with owner, fencing token and a server-clock expiry.
//!
//! Every grant first writes the key's row in the keys table: that creates it or bumps
//! its fence, and locks it, so acquisitions of one key run one after another and each
//! sees what the previous committed (read-committed isolation; SQLite has one writer
//! at a time anyway).
//!
//! An uncontended request is granted by one conditional upsert
//! ([`crate::sql::FastGrant`]): on PostgreSQL the bump and the upsert are one
//! autocommitted statement; on MySQL and SQLite the upsert follows the bump in a short
//! transaction. If it does not grant, the general path applies the rules in
//! [`crate::decide`] to the key's live leases and queue, read under the key row lock:
//! it learns how long to wait, queues fair and write requests, and grants what the
//! upsert could not judge (requests holding a ticket). Renewals and releases are single
//! statements guarded by owner and fence (the lease's version).

mod acquire;
mod admin;
mod blind_undos;
mod finished_if_left;
mod release;
mod transaction;
mod undo;

pub(crate) use acquire::acquire;
pub(crate) use admin::{force_unlock, force_unlock_holder, inspect, is_locked};
pub(crate) use blind_undos::BlindUndos;
pub(crate) use release::{proclaim, release, renew};
pub(crate) use transaction::{bump_key, last_insert_id};

use std::sync::Arc;
use std::time::Duration;

use lock_core::LockKind;

use crate::key::KeyId;

/// Waiting settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) queue_ttl: Duration,
}

/// A duration as whole milliseconds for the database, rounded up and at least 1.
pub(crate) fn millis(d: Duration) -> i64 {
    let ms = d.as_micros().div_ceil(1000).max(1);
    i64::try_from(ms).unwrap_or(i64::MAX / 4)
}

/// One acquisition request, as the transaction needs it.
pub(super) struct Ask {
    pub(super) key: KeyId,
    pub(super) kind: LockKind,
    pub(super) owner: String,
    pub(super) ttl_ms: i64,
    pub(super) queue_ttl_ms: i64,
    /// What the client says about itself, stored with the lease for `inspect`.
    pub(super) description: String,
    /// A semaphore's count (1 for locks).
    pub(super) permits: u32,
    /// Stops the undos by owner alone of this acquire's calls once the same owner asks
    /// again.
    pub(super) blind: Arc<blind_undos::BlindSwitch>,
}

pub(super) enum Outcome {
    Granted(u64),
    Blocked {
        wake_in_ms: Option<i64>,
        /// The lease that blocks it, where the attempt tells (MariaDB: the grant
        /// procedure's refusal of an exclusive request, or the general path's reads):
        /// whose doorbell to watch.
        blocker: Option<Blocker>,
    },
    /// A semaphore's holders or waiters use this count, not the request's.
    OtherCount(u32),
}

/// The live lease a blocked request waits for: its kind and owner name its doorbell.
pub(super) struct Blocker {
    pub(super) kind: LockKind,
    pub(super) owner: String,
    /// Whether something else may let the request in first (a semaphore of more
    /// than one permit), so that its waiter polls as well.
    pub(super) one_of_several: bool,
}
