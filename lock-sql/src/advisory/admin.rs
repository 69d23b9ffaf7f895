//! What operators and tools ask of an advisory lock: is it held, and breaking it.

use std::time::Duration;

use lock_core::{HolderInfo, LockFamily, LockInfo, LockKind, Result};
use sqlx::Row;
use tokio::time::Instant;

use super::names::LockId;
use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::key::KeyId;
use crate::pessimistic::kill_under_release_fence;

/// Whether some session holds the lock, by the server's own lock state.
pub(crate) async fn is_locked(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    if !matches!(family, LockFamily::Exclusive | LockFamily::Fair) {
        return Ok(false);
    }
    let id = LockId::of(db, key, family);
    db.timed("checking a lock", async {
        Ok(holder(db, &id).await.map_err(|e| db.err(e))? != 0)
    })
    .await
}

/// PostgreSQL: how many sessions hold the lock; MariaDB: the holder's connection id;
/// 0 if free.
async fn holder(db: &Db, id: &LockId) -> std::result::Result<i64, sqlx::Error> {
    let read = match db.dialect {
        Dialect::Postgres => {
            let (hi, lo) = id.halves();
            q(&db.sql.advisory.holders).bind(hi).bind(lo)
        }
        _ => q(&db.sql.advisory.holder_connection).bind(id.mysql.clone()),
    };
    read.fetch_one(&db.pool).await?.try_get(0)
}

/// A locked lock's one holder, known only by its kind.
pub(crate) async fn inspect(db: &Db, key: &KeyId, family: LockFamily) -> Result<LockInfo> {
    let holders = if is_locked(db, key, family).await? {
        let kind = match family {
            LockFamily::Fair => LockKind::Fair,
            _ => LockKind::Exclusive,
        };
        vec![HolderInfo::new(kind)]
    } else {
        Vec::new()
    };
    Ok(LockInfo::new(holders, None))
}

/// Kills the connection holding the lock, and waits (briefly) for the server to free
/// it. MariaDB kills under the holder's release fence (as FOR UPDATE does), and only
/// if that connection still holds the lock once the fence is held.
pub(crate) async fn force_unlock(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    if !matches!(family, LockFamily::Exclusive | LockFamily::Fair) {
        return Ok(false);
    }
    let id = LockId::of(db, key, family);
    let killed = db
        .timed("killing the holder's connection", async {
            kill_holder(db, &id).await.map_err(|e| db.err(e))
        })
        .await?;
    if !killed {
        return Ok(false);
    }
    let until = Instant::now() + db.request_timeout;
    while Instant::now() < until && is_locked(db, key, family).await? {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(true)
}

async fn kill_holder(db: &Db, id: &LockId) -> std::result::Result<bool, sqlx::Error> {
    if db.dialect == Dialect::Postgres {
        let (hi, lo) = id.halves();
        let killed: i64 = q(&db.sql.advisory.kill_holders)
            .bind(hi)
            .bind(lo)
            .fetch_one(&db.pool)
            .await?
            .try_get(0)?;
        return Ok(killed > 0);
    }
    loop {
        let holder_id = holder(db, id).await?;
        if holder_id == 0 {
            return Ok(false);
        }
        // Only if it still holds the lock once it cannot be releasing.
        let holds = q(&db.sql.advisory.holder_connection).bind(id.mysql.clone());
        if kill_under_release_fence(db, holder_id, holds).await? == Some(true) {
            return Ok(true);
        }
    }
}
