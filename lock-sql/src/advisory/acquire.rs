//! Taking an advisory lock: one statement that tries it and draws the fence, then,
//! if the caller waits, a wait inside the server.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use lock_core::backend::{AcquireRequest, Grant};
use lock_core::{Error, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AssertSqlSafe, Row};
use tokio::time::Instant;

use super::names::{register, LockId};
use super::{limit_secs, silence_limit, supports};
use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::error::{classify, procedure_unusable, Class};
use crate::key::KeyId;
use crate::lease::last_insert_id;
use crate::pessimistic::{Connection, Pinned, PinnedConn, WaitGuard};
use crate::server_limits::{limit_ms, postgres_wait_limit_ms};
use crate::SqlLease;

/// A connection for a lock: the spare, else one from the held-lock pool.
async fn pin(db: &Db) -> Result<PoolConnection<Any>> {
    db.spare.pin(&db.held_pool).await.map_err(|e| db.err(e))
}

/// How long a waiting statement may wait.
#[derive(Clone, Copy)]
enum Wait {
    /// Not at all.
    Try,
    /// Up to this long; `None` for ever.
    For(Option<Duration>),
}

/// What the statement that takes the lock answered.
enum Taken {
    /// The lock, with this fence.
    Fence(i64),
    /// Busy: the session holds nothing it did not hold before.
    Busy,
    /// PostgreSQL's `lock_timeout` ended the statement: perhaps in the fence's
    /// insert, after the lock was taken (a session-level lock outlives the failed
    /// statement), so the connection must be closed, never reused.
    TimedOut,
}

/// Runs the statement that takes the lock and, if taken, sets the silence limit to
/// `limit` and draws the fence.
async fn take(
    db: &Db,
    pinned: &mut PinnedConn,
    id: &LockId,
    key: &KeyId,
    wait: Wait,
    limit: Duration,
) -> std::result::Result<Taken, sqlx::Error> {
    match db.dialect {
        Dialect::Postgres => take_postgres(db, pinned, id, key, wait, limit).await,
        _ => take_mysql(db, pinned, id, key, wait, limit).await,
    }
}

/// PostgreSQL: one statement, whose row says whether the lock was taken and its fence.
async fn take_postgres(
    db: &Db,
    pinned: &mut PinnedConn,
    id: &LockId,
    key: &KeyId,
    wait: Wait,
    limit: Duration,
) -> std::result::Result<Taken, sqlx::Error> {
    let stmt = match wait {
        Wait::Try => &db.sql.advisory.try_lock,
        Wait::For(_) => &db.sql.advisory.wait_lock,
    };
    let taken = q(stmt)
        .bind(id.pg)
        .bind(limit_ms(limit))
        .bind(key.hash.clone())
        .fetch_one(pinned.conn())
        .await;
    let row = match taken {
        Ok(row) => row,
        Err(e) if classify(&e) == Class::LockNotAvailable => return Ok(Taken::TimedOut),
        Err(e) => return Err(e),
    };
    Ok(if row.try_get::<i64, _>(0)? == 1 {
        Taken::Fence(row.try_get(1)?)
    } else {
        Taken::Busy
    })
}

/// MariaDB: a try calls the try procedure while it can be called
/// ([`SessionProcedures`](crate::sql::SessionProcedures)); a wait, or a try without
/// it, sends two statements, the fence upsert's OK packet the outcome (see
/// [`AdvisoryStatements::mysql_lock`](crate::sql::AdvisoryStatements::mysql_lock)).
async fn take_mysql(
    db: &Db,
    pinned: &mut PinnedConn,
    id: &LockId,
    key: &KeyId,
    wait: Wait,
    limit: Duration,
) -> std::result::Result<Taken, sqlx::Error> {
    if let (Wait::Try, Some(procedures)) = (wait, db.sql.session_procedures.as_ref()) {
        if db.session_procedures.load(Ordering::Relaxed) {
            let rows = q(&procedures.call_take)
                .bind(id.mysql.clone())
                .bind(limit_secs(limit) as i64)
                .bind(key.hash.clone())
                .fetch_all(pinned.conn())
                .await?;
            let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
            return Ok(match row.try_get::<i64, _>(0)? {
                0 => Taken::Busy,
                fence => Taken::Fence(fence),
            });
        }
    }
    let wait_secs = match wait {
        Wait::Try => 0.0,
        Wait::For(Some(d)) => d.as_secs_f64().max(0.001),
        Wait::For(None) => 31_536_000.0,
    };
    let sql = db
        .sql
        .advisory
        .mysql_lock(&id.mysql, &key.hash, wait_secs, limit_secs(limit));
    let done: Vec<_> = sqlx::raw_sql(AssertSqlSafe(sql))
        .execute_many(pinned.conn())
        .try_collect()
        .await?;
    let upsert = done.get(1).ok_or(sqlx::Error::RowNotFound)?;
    if upsert.rows_affected() == 0 {
        return Ok(Taken::Busy);
    }
    let reported = upsert.last_insert_id();
    Ok(Taken::Fence(
        last_insert_id(pinned.conn(), db, reported).await?,
    ))
}

/// Takes the advisory lock, waiting until the request's deadline.
pub(crate) async fn acquire(
    db: &Arc<Db>,
    req: AcquireRequest<'_>,
) -> Result<Option<Grant<SqlLease>>> {
    if !supports(db.dialect, req.kind) {
        return Err(Error::Unsupported {
            backend: db.name(),
            operation: "read-write locks, semaphores and elections with the session strategy \
                        (and fair locks on MySQL/MariaDB)",
        });
    }
    let key = KeyId::of(req.key);
    register(db, &key).await?;
    let id = LockId::of(db, &key, req.kind.family());
    // An uncontended lock is taken here, in one round trip.
    let (mut pinned, tried, started_at) = db
        .timed("trying an advisory lock", try_lock(db, &id, &key, req.ttl))
        .await?;
    let remaining = req.deadline.remaining();
    match tried {
        Taken::Fence(fence) => return Ok(Some(granted(key, pinned, fence, started_at))),
        Taken::Busy if remaining == Some(Duration::ZERO) => {
            // The statement left the session as it found it.
            pinned.keep_in(&db.spare);
            return Ok(None);
        }
        Taken::Busy => {}
        // Closed on drop.
        Taken::TimedOut if remaining == Some(Duration::ZERO) => return Ok(None),
        Taken::TimedOut => {
            // Closed before another is asked for: with one connection allowed, the
            // pool would wait for this one.
            drop(pinned);
            pinned = db
                .timed("taking a connection for the lock", async {
                    Ok(PinnedConn::new(pin(db).await?))
                })
                .await?;
        }
    }
    wait(db, pinned, &id, key, &req, remaining).await
}

/// Pins a connection and tries the lock on it: the connection, the fence if taken, and
/// when the try was sent. The pool does not ping a connection before handing it out,
/// so one that died idle (a server restart, a network cut) fails here. The try runs
/// again on another: the failed one is closed, so once the pool's idle connections are
/// used up it opens a new one, and a server that is down fails that with
/// `Unavailable`. (A session that failed after it took the lock is closed too, which
/// lets the lock go.)
async fn try_lock(
    db: &Db,
    id: &LockId,
    key: &KeyId,
    ttl: Duration,
) -> Result<(PinnedConn, Taken, Instant)> {
    // Every pooled connection may have died in the same event.
    let most = db.held_pool.options().get_max_connections() + 1;
    let mut attempts = 0;
    let mut as_text = false;
    loop {
        attempts += 1;
        let mut pinned = PinnedConn::new(pin(db).await?);
        let started_at = Instant::now();
        match take(db, &mut pinned, id, key, Wait::Try, ttl).await {
            Ok(taken) => return Ok((pinned, taken, started_at)),
            // Dropped, or not executable by this user: it did not run. The connection
            // is closed all the same, as any a try failed on, and the try goes as
            // text, now and from now on.
            Err(e) if !as_text && procedure_unusable(&e) => {
                tracing::warn!(
                    error = %e,
                    "{}: the session strategy's try procedure cannot be called; tries go as text",
                    db.scope
                );
                db.session_procedures.store(false, Ordering::Relaxed);
                as_text = true;
                attempts -= 1;
            }
            Err(e) if attempts < most && classify(&e) == Class::Unavailable => {
                tracing::debug!(error = %e, "pooled lock connection is gone; trying another");
            }
            Err(e) => return Err(db.err(e)),
        }
    }
}

/// Waits in the server's queue for the lock, until the deadline.
async fn wait(
    db: &Arc<Db>,
    mut pinned: PinnedConn,
    id: &LockId,
    key: KeyId,
    req: &AcquireRequest<'_>,
    remaining: Option<Duration>,
) -> Result<Option<Grant<SqlLease>>> {
    let connection = db
        .timed("preparing a lock wait", async {
            prepare_wait(db, &mut pinned, remaining)
                .await
                .map_err(|e| db.err(e))
        })
        .await?;
    let mut guard = WaitGuard::new(db, &connection);
    // The statement sets the lease's silence limit once it has the lock, so the
    // server's lease runs from after the statement, later than its send.
    let sent = Instant::now();
    let waiting = take(db, &mut pinned, id, &key, Wait::For(remaining), req.ttl);
    let outcome = match req.deadline.instant() {
        Some(at) => match tokio::time::timeout_at(at + Duration::from_millis(20), waiting).await {
            Ok(outcome) => outcome,
            // The guard cancels the server-side wait; the connection is closed, which
            // frees the lock if the server granted it meanwhile.
            Err(_) => return Ok(None),
        },
        None => waiting.await,
    };
    guard.disarm();
    let fence = match outcome.map_err(|e| db.err(e))? {
        Taken::Fence(fence) => fence,
        Taken::Busy => {
            pinned.keep_in(&db.spare);
            return Ok(None);
        }
        // Closed on drop.
        Taken::TimedOut => return Ok(None),
    };
    // A lease counted from the send is safe, and after a short wait most of it is
    // left; after a long one the limit is set again, and the lease counted from that.
    if sent.elapsed() <= req.ttl / 4 {
        return Ok(Some(granted(key, pinned, fence, sent)));
    }
    let started_at = Instant::now();
    let limit = sqlx::raw_sql(AssertSqlSafe(silence_limit(db.dialect, req.ttl)));
    db.timed("setting the lock's lease", async {
        limit.execute(pinned.conn()).await.map_err(|e| db.err(e))
    })
    .await?;
    Ok(Some(granted(key, pinned, fence, started_at)))
}

/// The connection's id, with the server's own wait limit set to `remaining` (whole
/// milliseconds on PostgreSQL; MariaDB's `GET_LOCK` takes it with the statement).
async fn prepare_wait(
    db: &Db,
    pinned: &mut PinnedConn,
    remaining: Option<Duration>,
) -> std::result::Result<Connection, sqlx::Error> {
    match db.dialect {
        Dialect::Postgres => {
            let row = q(&db.sql.advisory.prepare_wait)
                .bind(postgres_wait_limit_ms(remaining))
                .fetch_one(pinned.conn())
                .await?;
            Ok(Connection {
                id: row.try_get(0)?,
                started: row.try_get(1)?,
            })
        }
        _ => {
            let row = q(&db.sql.row_lock.connection_id)
                .fetch_one(pinned.conn())
                .await?;
            Ok(Connection {
                id: row.try_get(0)?,
                started: String::new(),
            })
        }
    }
}

fn granted(key: KeyId, pinned: PinnedConn, fence: i64, started_at: Instant) -> Grant<SqlLease> {
    Grant {
        fence: fence as u64,
        started_at,
        data: SqlLease::pinned(key, Pinned::new(pinned, 0)),
    }
}
