//! Letting go of an advisory lock.

use std::sync::atomic::Ordering;

use lock_core::backend::HeldLease;
use lock_core::{Error, Result};
use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::names::LockId;
use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::error::procedure_unusable;
use crate::pessimistic::{Pinned, PinnedConn};
use crate::sql::AdvisoryStatements;
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
                let row = match release_mysql_call(db, &id, &mut conn).await {
                    Some(row) => row?,
                    None => release_mysql_text(&id, &mut conn).await?,
                };
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

/// MariaDB: calls the release procedure while it can be called
/// ([`SessionProcedures`](crate::sql::SessionProcedures)); its row, or `None` if it
/// cannot be called (it did not run).
async fn release_mysql_call(
    db: &Db,
    id: &LockId,
    conn: &mut PinnedConn,
) -> Option<std::result::Result<AnyRow, sqlx::Error>> {
    let procedures = db.sql.session_procedures.as_ref()?;
    if !db.session_procedures.load(Ordering::Relaxed) {
        return None;
    }
    let rows = q(&procedures.call_release)
        .bind(id.mysql.clone())
        .fetch_all(conn.conn())
        .await;
    match rows {
        Ok(rows) => Some(rows.into_iter().next().ok_or(sqlx::Error::RowNotFound)),
        // Dropped, or not executable by this user: it did not run, and releases go
        // as text from now on.
        Err(e) if procedure_unusable(&e) => {
            tracing::warn!(
                error = %e,
                "{}: the session strategy's release procedure cannot be called; releases go as text",
                db.scope
            );
            db.session_procedures.store(false, Ordering::Relaxed);
            None
        }
        Err(e) => Some(Err(e)),
    }
}

/// MariaDB: the release as text ([`AdvisoryStatements::mysql_unlock`]).
///
/// [`AdvisoryStatements::mysql_unlock`]: crate::sql::AdvisoryStatements::mysql_unlock
async fn release_mysql_text(
    id: &LockId,
    conn: &mut PinnedConn,
) -> std::result::Result<AnyRow, sqlx::Error> {
    let sql = AdvisoryStatements::mysql_unlock(&id.mysql);
    let rows = sqlx::raw_sql(AssertSqlSafe(sql))
        .fetch_all(conn.conn())
        .await?;
    rows.into_iter().next().ok_or(sqlx::Error::RowNotFound)
}
