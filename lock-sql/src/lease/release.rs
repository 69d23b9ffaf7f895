//! Releasing and renewing leases: single statements guarded by owner and fence.

use std::time::Duration;

use lock_core::{Error, LockKind, Result};

use lock_core::backend::{HeldLease, Renewal};
use sqlx::any::{Any, AnyArguments};
use sqlx::query::Query;
use sqlx::Row;

use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::key::{holder_of, kind_code};
use crate::local_wake;
use crate::SqlLease;

use super::millis;

/// Leases renewed per statement; more are split into several statements.
pub(super) const RENEW_CHUNK: usize = 100;

/// Deletes one live lease if key, kind, owner and fence match (any fence if `fence`
/// is `None`: an owner is one acquisition); tells waiters. Returns whether it was
/// there.
pub(super) async fn delete_lease(
    db: &Db,
    khash: &str,
    kind: LockKind,
    owner: &str,
    fence: Option<i64>,
) -> Result<bool> {
    let query = || {
        let stmt = match fence {
            Some(_) => &db.sql.lease.release,
            None => &db.sql.lease.undo_grant,
        };
        let query = q(stmt)
            .bind(khash.to_owned())
            .bind(kind_code(kind))
            .bind(holder_of(kind, owner).to_owned())
            .bind(owner.to_owned());
        match fence {
            Some(fence) => query.bind(fence),
            None => query,
        }
    };
    let deleted = db
        .timed("releasing a lock", async {
            match db.dialect {
                Dialect::Postgres => {
                    let with_channel = || query().bind(db.sql.tables.channel.clone());
                    let row = db
                        .hot
                        .fetch_optional(&db.pool, db.request_timeout, with_channel)
                        .await
                        .map_err(|e| e.error)
                        .and_then(|row| row.ok_or(sqlx::Error::RowNotFound))
                        .map_err(|e| db.err(e))?;
                    row.try_get::<i64, _>(0).map_err(|e| db.err(e))
                }
                // The deleted row, if there was one.
                Dialect::MySql | Dialect::Sqlite => db
                    .hot
                    .fetch_optional(&db.pool, db.request_timeout, query)
                    .await
                    .map(|row| i64::from(row.is_some()))
                    .map_err(|e| db.err(e.error)),
            }
        })
        .await?;
    if deleted > 0 && db.dialect != Dialect::Postgres {
        local_wake::announce(local_wake::topic(&db.scope, khash));
    }
    Ok(deleted > 0)
}

/// Sets an election leader's value, if its lease is the live one of its owner and
/// fence.
pub(crate) async fn proclaim(db: &Db, lease: &HeldLease<SqlLease>, value: &str) -> Result<()> {
    let fence = i64::try_from(lease.fence).map_err(|_| lost(lease))?;
    let khash = lease.data.key.hash.clone();
    let there = db
        .timed("proclaiming a value", async {
            let update = q(&db.sql.lease.proclaim).bind(value.to_owned());
            let done = guard(update, &khash, lease, fence)
                .execute(&db.pool)
                .await
                .map_err(|e| db.err(e))?;
            if done.rows_affected() > 0 {
                return Ok(true);
            }
            let row = guard(q(&db.sql.lease.lease_live), &khash, lease, fence)
                .fetch_one(&db.pool)
                .await
                .map_err(|e| db.err(e))?;
            Ok(row.try_get::<i64, _>(0).map_err(|e| db.err(e))? > 0)
        })
        .await?;
    if there {
        Ok(())
    } else {
        Err(lost(lease))
    }
}

/// `query` with the guard of one live lease bound: key, kind, holder, owner, fence.
fn guard(
    query: Query<'static, Any, AnyArguments>,
    khash: &str,
    lease: &HeldLease<SqlLease>,
    fence: i64,
) -> Query<'static, Any, AnyArguments> {
    let owner = lease.owner.as_str();
    query
        .bind(khash.to_owned())
        .bind(kind_code(lease.kind))
        .bind(holder_of(lease.kind, owner).to_owned())
        .bind(owner.to_owned())
        .bind(fence)
}

fn lost(lease: &HeldLease<SqlLease>) -> Error {
    Error::LeaseLost {
        name: lease.key.name().to_string(),
    }
}

/// Tells waiters that `khash` may be free: PostgreSQL's through a notification, this
/// process's elsewhere (other processes see it at their next poll, or on MariaDB by
/// the doorbell the release frees).
pub(super) async fn notify(db: &Db, khash: &str) -> Result<()> {
    if db.dialect != Dialect::Postgres {
        local_wake::announce(local_wake::topic(&db.scope, khash));
        return Ok(());
    }
    let send = q(&db.sql.notify)
        .bind(db.sql.tables.channel.clone())
        .bind(khash.to_owned())
        .execute(&db.pool);
    db.timed("notifying waiters", async {
        send.await.map(drop).map_err(|e| db.err(e))
    })
    .await
}

/// Releases one lease: [`Error::NotOwner`] if it is not the live lease of this owner
/// and fence.
pub(crate) async fn release(db: &Db, lease: &HeldLease<SqlLease>) -> Result<()> {
    let fence = i64::try_from(lease.fence).unwrap_or(-1);
    let khash = &lease.data.key.hash;
    // The doorbell is freed as the row is deleted, not a round trip after: a waiter
    // it wakes looks a round trip later, and a look that still meets the delete waits
    // for its row lock; one that comes before finds the doorbell free and looks again.
    let here = lease.data.ring();
    let deleted = delete_lease(db, khash, lease.kind, lease.owner.as_str(), Some(fence)).await;
    drop(here);
    let deleted = deleted?;
    if deleted {
        Ok(())
    } else {
        Err(Error::not_owner(&lease.key))
    }
}

/// Renews every lease in one statement per [`RENEW_CHUNK`] leases.
pub(crate) async fn renew(
    db: &Db,
    leases: &[&HeldLease<SqlLease>],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    let mut out = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(RENEW_CHUNK) {
        let renewed = db
            .timed("renewing leases", renew_chunk(db, chunk, millis(ttl)))
            .await?;
        out.extend(chunk.iter().map(|l| {
            let id = (l.data.key.hash.as_str(), kind_code(l.kind), l.fence as i64);
            if renewed.iter().any(|(h, k, f)| (h.as_str(), *k, *f) == id) {
                Renewal::Renewed
            } else {
                Renewal::Lost
            }
        }));
    }
    Ok(out)
}

pub(super) fn bind_leases<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    leases: &[&HeldLease<SqlLease>],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    for l in leases {
        query = query
            .bind(l.data.key.hash.clone())
            .bind(kind_code(l.kind))
            .bind(holder_of(l.kind, l.owner.as_str()).to_owned())
            .bind(l.owner.as_str().to_owned())
            .bind(i64::try_from(l.fence).unwrap_or(-1));
    }
    query
}

/// The (key hash, kind, fence) of each lease of `chunk` that was renewed.
pub(super) async fn renew_chunk(
    db: &Db,
    chunk: &[&HeldLease<SqlLease>],
    ttl_ms: i64,
) -> Result<Vec<(String, i64, i64)>> {
    let stmt = db.sql.renew(chunk.len());
    let query = bind_leases(q(&stmt).bind(ttl_ms), chunk);
    let rows = if db.dialect == Dialect::MySql {
        let done = query.execute(&db.pool).await.map_err(|e| db.err(e))?;
        if done.rows_affected() as usize == chunk.len() {
            return Ok(chunk
                .iter()
                .map(|l| (l.data.key.hash.clone(), kind_code(l.kind), l.fence as i64))
                .collect());
        }
        // Some were not found: ask which are live (just renewed) to tell them apart.
        let stmt = db.sql.live_of(chunk.len());
        bind_leases(q(&stmt), chunk)
            .fetch_all(&db.pool)
            .await
            .map_err(|e| db.err(e))?
    } else {
        query.fetch_all(&db.pool).await.map_err(|e| db.err(e))?
    };
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<std::result::Result<_, sqlx::Error>>()
        .map_err(|e| db.err(e))
}
