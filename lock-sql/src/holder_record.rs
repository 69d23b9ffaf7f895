//! The FOR UPDATE strategy's holder records: a row per held lock naming its owner and
//! fence, for `inspect` and for operators reading the table.
//!
//! The row lock itself lives in a transaction, where nothing written is visible to
//! others, so the record is committed beside it and can outlive it: a holder cut off
//! from the server cannot delete its record when the server ends its connection. A
//! record is therefore believed only while the row lock it speaks of is held, by the
//! server's own lock state, and `inspect` deletes one it finds stale. A later holder of
//! the lock overwrites it in any case.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{HolderInfo, LockFamily, LockInfo, LockKind, Result};
use sqlx::Row;
use tokio::time::Instant;

use crate::db::{q, Db};
use crate::key::{kind_code, KeyId};

/// How long a holder record whose delete failed is tried again, in the background.
const FORGET_RETRY_LIMIT: Duration = Duration::from_secs(10);
/// The pause between those tries.
const FORGET_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// A holder record sent for a grant not yet complete: deleted in the background if
/// this is dropped with it still set.
pub(crate) struct UnconfirmedRecord {
    db: Arc<Db>,
    pub(crate) record: Option<HolderRecord>,
}

impl UnconfirmedRecord {
    pub(crate) fn new(db: &Arc<Db>) -> Self {
        UnconfirmedRecord {
            db: db.clone(),
            record: None,
        }
    }
}

impl Drop for UnconfirmedRecord {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            record.forget_in_background(&self.db, Duration::ZERO);
        }
    }
}

/// The record naming a lock's holder, kept beside the row lock.
pub(crate) struct HolderRecord {
    pub(crate) hash: String,
    pub(crate) kind: i64,
    pub(crate) owner: String,
    pub(crate) fence: i64,
}

impl HolderRecord {
    /// Deletes it; if that fails (the server slow, frozen or cut off), tries again in
    /// the background for a while.
    pub(crate) async fn forget_or_retry(self, db: &Arc<Db>) {
        if self.forget(db).await.is_err() {
            self.forget_in_background(db, FORGET_RETRY_PAUSE);
        }
    }

    /// Deletes it in a background task, first after `pause`, and again every
    /// [`FORGET_RETRY_PAUSE`] while that fails, for up to [`FORGET_RETRY_LIMIT`].
    fn forget_in_background(self, db: &Arc<Db>, pause: Duration) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let db = db.clone();
        let cleanups = db.cleanups.clone();
        cleanups.spawn_on(&rt, async move {
            let until = Instant::now() + FORGET_RETRY_LIMIT;
            tokio::time::sleep(pause).await;
            while self.forget(&db).await.is_err() && Instant::now() < until {
                tokio::time::sleep(FORGET_RETRY_PAUSE).await;
            }
        });
    }

    /// Deletes it (only this owner's record with this fence), within the request
    /// timeout.
    async fn forget(&self, db: &Db) -> Result<()> {
        let delete = q(&db.sql.row_lock.delete_holder)
            .bind(self.hash.clone())
            .bind(self.kind)
            .bind(self.owner.clone())
            .bind(self.fence)
            .execute(&db.pool);
        db.timed("forgetting the lock holder", async {
            delete.await.map(drop).map_err(|e| db.err(e))
        })
        .await
    }
}

/// Who holds the row lock of `key`: its owner and fencing token from the holder
/// record, if the record is still true; a holder without them if the row is locked by
/// a connection that has not recorded itself yet. A stale record is deleted (best
/// effort: the answer does not depend on it).
///
/// A record is true while the row is locked, its fence is the key's latest (a new
/// holder draws its fence right after its lock) and, on PostgreSQL, the connection it
/// names is the one whose transaction holds the row. MariaDB cannot name a row lock's
/// holder without the `PROCESS` privilege and sees a row lock only by probing it, so
/// there a record may be believed for a moment too long: while a new holder that has
/// locked the row draws its fence, or while another probe holds a free row.
pub(crate) async fn inspect(db: &Db, key: &KeyId, family: LockFamily) -> Result<LockInfo> {
    if family != LockFamily::Exclusive {
        // The strategy has exclusive locks only.
        return Ok(LockInfo::new(Vec::new(), None));
    }
    let kind = kind_code(LockKind::Exclusive);
    let read = q(&db.sql.row_lock.read_holder)
        .bind(key.hash.clone())
        .bind(kind)
        .fetch_optional(&db.pool);
    let record = db
        .timed("inspecting a lock", async {
            let Some(row) = read.await.map_err(|e| db.err(e))? else {
                return Ok(None);
            };
            let owner: String = row.try_get(0).map_err(|e| db.err(e))?;
            let fence: i64 = row.try_get(1).map_err(|e| db.err(e))?;
            let holds: i64 = row.try_get(2).map_err(|e| db.err(e))?;
            Ok(Some((owner, fence, holds > 0)))
        })
        .await?;
    // Read after the record: a row found free now means the record's holder had let go
    // (or lost) its lock before, so the record is stale, whoever locks the row next.
    let locked = crate::pessimistic::is_locked(db, key, family).await?;
    let believed = match record {
        Some((owner, fence, holds)) => {
            if locked && holds {
                Some((owner, fence))
            } else {
                // Only this record: one a new holder wrote meanwhile has a higher fence.
                let stale = HolderRecord {
                    hash: key.hash.clone(),
                    kind,
                    owner,
                    fence,
                };
                if let Err(error) = stale.forget(db).await {
                    tracing::debug!(%error, "could not delete a stale holder record");
                }
                None
            }
        }
        None => None,
    };
    let holders = match believed {
        Some((owner, fence)) => vec![HolderInfo::new(LockKind::Exclusive)
            .with_owner(owner)
            .with_fencing_token(u64::try_from(fence).unwrap_or(0))],
        None if locked => vec![HolderInfo::new(LockKind::Exclusive)],
        None => Vec::new(),
    };
    Ok(LockInfo::new(holders, None))
}
