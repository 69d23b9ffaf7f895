//! Letting go of an advisory lock.

use lock_core::backend::HeldLease;
use lock_core::{Error, Result};
use sqlx::{AssertSqlSafe, Row};

use super::names::LockId;
use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::pessimistic::Pinned;
use crate::SqlLease;

/// Lets go of the lock and keeps the connection for the next lock (a connection that
/// failed or might still hold something is closed): [`Error::NotOwner`] if its
/// connection died first (the lock went with it) or no longer held it.
pub(crate) async fn release(db: &Db, lease: &HeldLease<SqlLease>, pinned: &Pinned) -> Result<()> {
    let Some(mut conn) = pinned.take().await else {
        // The watchdog found the connection dead.
        return Err(Error::not_owner(&lease.key));
    };
    let id = LockId::of(db, &lease.data.key, lease.kind.family());
    // Whether the lock was let go, and whether the connection may be used again.
    let unlock = async {
        match db.dialect {
            Dialect::Postgres => {
                let row = q(&db.sql.advisory.unlock)
                    .bind(id.pg)
                    .fetch_one(conn.conn())
                    .await?;
                let released = row.try_get::<i64, _>(0)? == 1;
                Ok::<_, sqlx::Error>((released, released))
            }
            // Under the connection's release fence, as FOR UPDATE's release: a
            // force-unlock never kills this connection once its release began. If the
            // fence could not be had, the connection is closed rather than reused, so
            // a kill on its way hits nothing else.
            _ => {
                // The silence limit is put back in the same statement as the fence
                // is taken: two statements, one round trip.
                let sql = format!(
                    "SET @lock_sql_fenced = CAST(COALESCE(GET_LOCK(CONCAT('lock_sql_connection_', CONNECTION_ID()), 10), 0) \
                     AS SIGNED), SESSION wait_timeout = @@GLOBAL.wait_timeout; \
                     SELECT CAST(COALESCE(RELEASE_LOCK('{}'), 0) AS SIGNED), CAST(@lock_sql_fenced AS SIGNED), \
                     RELEASE_LOCK(CONCAT('lock_sql_connection_', CONNECTION_ID()))",
                    id.mysql
                );
                let rows = sqlx::raw_sql(AssertSqlSafe(sql))
                    .fetch_all(conn.conn())
                    .await?;
                let row = rows.into_iter().next().ok_or(sqlx::Error::RowNotFound)?;
                let released = row.try_get::<i64, _>(0)? == 1;
                Ok((released, released && row.try_get::<i64, _>(1)? == 1))
            }
        }
    };
    let (released, clean) = match tokio::time::timeout(db.request_timeout, unlock).await {
        Ok(Ok(outcome)) => outcome,
        // A connection that failed to answer is closed, which frees whatever it held.
        _ => (false, false),
    };
    if clean {
        conn.keep_in(&db.spare);
    }
    if released {
        Ok(())
    } else {
        Err(Error::not_owner(&lease.key))
    }
}
