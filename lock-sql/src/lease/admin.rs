//! Questions and operator actions: whether a lock is held, who holds it, and
//! force-unlocking.

use std::time::{Duration, UNIX_EPOCH};

use lock_core::{HolderInfo, LockFamily, LockInfo, Result};

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, Row};

use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::key::{family_range, kind_of, KeyId};
use crate::local_wake;

/// Whether any live lease of `family` exists on the key.
pub(crate) async fn is_locked(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    let (lo, hi) = family_range(family);
    let count = q(&db.sql.lease.count_live)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .fetch_one(&db.pool);
    db.timed("checking a lock", async {
        let row = count.await.map_err(|e| db.err(e))?;
        Ok(row.try_get::<i64, _>(0).map_err(|e| db.err(e))? > 0)
    })
    .await
}

/// Deletes every live lease of `family` on the key; returns whether there was any.
pub(crate) async fn force_unlock(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    let (lo, hi) = family_range(family);
    let query = q(&db.sql.lease.force_unlock)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi);
    delete_and_wake(db, key, query).await
}

/// Deletes the live lease of `family` on the key whose fencing token is `fence`;
/// returns whether there was one. A newer holder has another fence, so it is never hit.
pub(crate) async fn force_unlock_holder(
    db: &Db,
    key: &KeyId,
    family: LockFamily,
    fence: u64,
) -> Result<bool> {
    let (lo, hi) = family_range(family);
    let query = q(&db.sql.lease.force_unlock_holder)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .bind(i64::try_from(fence).unwrap_or(i64::MAX));
    delete_and_wake(db, key, query).await
}

/// Who holds `family` on the key (every live lease, oldest grant first), and for a
/// fair lock how many wait in its queue. Other kinds' waiters leave no trace here
/// (exclusive waiters and readers do not queue), so their count is unknown.
pub(crate) async fn inspect(db: &Db, key: &KeyId, family: LockFamily) -> Result<LockInfo> {
    let (lo, hi) = family_range(family);
    let leases = q(&db.sql.lease.inspect_leases)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .fetch_all(&db.pool);
    let waiters = q(&db.sql.lease.count_waiters)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .fetch_one(&db.pool);
    db.timed("inspecting a lock", async {
        let rows = leases.await.map_err(|e| db.err(e))?;
        let holders = rows
            .iter()
            .map(|row| holder_info(row).map_err(|e| db.err(e)))
            .collect::<Result<Vec<_>>>()?;
        let waiters = match family {
            LockFamily::Fair | LockFamily::Election => {
                let row = waiters.await.map_err(|e| db.err(e))?;
                let n: i64 = row.try_get(0).map_err(|e| db.err(e))?;
                Some(usize::try_from(n).unwrap_or(0))
            }
            _ => None,
        };
        Ok(LockInfo::new(holders, waiters))
    })
    .await
}

/// One row of `inspect_leases`. Times are the server's milliseconds since the epoch;
/// a lease written by a release without the holder columns has no description and an
/// `acquired_ms` of 0.
pub(super) fn holder_info(row: &sqlx::any::AnyRow) -> std::result::Result<HolderInfo, sqlx::Error> {
    let code: i64 = row.try_get(0)?;
    let kind =
        kind_of(code).ok_or_else(|| sqlx::Error::Protocol(format!("unknown lock kind {code}")))?;
    let owner: String = row.try_get(1)?;
    let fence: i64 = row.try_get(2)?;
    let description: String = row.try_get(3)?;
    let acquired_ms: i64 = row.try_get(4)?;
    let expires_ms: i64 = row.try_get(5)?;
    let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let mut info = HolderInfo::new(kind)
        .with_owner(owner)
        .with_fencing_token(u64::try_from(fence).unwrap_or(0))
        .with_expires_at(at(expires_ms));
    if !description.is_empty() {
        info = info.with_description(description);
    }
    if acquired_ms > 0 {
        info = info.with_acquired_at(at(acquired_ms));
    }
    Ok(info)
}

/// Runs a deleting statement (`force_unlock` or `force_unlock_holder`, its key and
/// family bound) and wakes the waiters; returns whether it deleted anything.
pub(super) async fn delete_and_wake(
    db: &Db,
    key: &KeyId,
    query: Query<'static, Any, AnyArguments>,
) -> Result<bool> {
    db.timed("force-unlocking a lock", async {
        let n = if db.dialect == Dialect::Postgres {
            // All rows read: the count is only true once the commit is done.
            let rows = query
                .bind(db.sql.tables.channel.clone())
                .fetch_all(&db.pool)
                .await
                .map_err(|e| db.err(e))?;
            let row = rows
                .first()
                .ok_or_else(|| db.err(sqlx::Error::RowNotFound))?;
            row.try_get::<i64, _>(0).map_err(|e| db.err(e))?
        } else {
            let n = query
                .execute(&db.pool)
                .await
                .map_err(|e| db.err(e))?
                .rows_affected() as i64;
            if n > 0 {
                local_wake::announce(local_wake::topic(&db.scope, &key.hash));
            }
            n
        };
        Ok(n > 0)
    })
    .await
}
