//! The session strategy: a lock is a session-level advisory lock (PostgreSQL's
//! `pg_advisory_lock`, MariaDB's `GET_LOCK`) held by a connection pinned to the lease.
//!
//! Acquire pins a connection and sends one statement that tries the lock and, if it
//! got it, sets the session's silence limit and draws the fence. Only if the lock is
//! busy and the caller waits does it send more: the connection's id (so an abandoned
//! wait can be cancelled, as [`crate::pessimistic`] does) and the waiting statement,
//! which the server wakes on release. The fence lives in a table the server keeps off
//! the disk and is floored by the server clock ([`crate::sql::AdvisoryStatements`]), so
//! no grant waits for a disk.
//!
//! Release lets go of the lock and clears the silence limit in one statement; the
//! connection goes back to the pool. Renewal and loss detection are the FOR UPDATE
//! strategy's: a statement per held lock that moves the silence limit on, and a
//! connection found dead is a lost lock ([`crate::pessimistic::renew`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Grant, HeldLease};
use lock_core::{Error, HolderInfo, LockFamily, LockInfo, LockKind, Result};
use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::error::{classify, Class};
use crate::key::KeyId;
use crate::pessimistic::{kill_under_release_fence, Connection, Pinned, PinnedConn, WaitGuard};
use crate::SqlLease;

/// The most keys [`Register`] remembers before it starts over.
const REGISTER_LIMIT: usize = 100_000;

/// The keys this process has put in the name register, so a lock taken again and
/// again registers its name once.
#[derive(Debug, Default)]
pub(crate) struct Register(Mutex<HashSet<String>>);

impl Register {
    fn contains(&self, hash: &str) -> bool {
        self.0.lock().map(|set| set.contains(hash)).unwrap_or(false)
    }

    fn insert(&self, hash: &str) {
        if let Ok(mut set) = self.0.lock() {
            if set.len() >= REGISTER_LIMIT {
                set.clear();
            }
            set.insert(hash.to_owned());
        }
    }
}

/// The server's name of one advisory lock: a key and family of one table set.
pub(crate) struct LockId {
    /// PostgreSQL's 64-bit advisory key.
    pg: i64,
    /// MariaDB's lock name (hex, 49 characters: within MySQL's limit of 64).
    mysql: String,
}

impl LockId {
    fn of(db: &Db, key: &KeyId, family: LockFamily) -> Self {
        let space = &db.lock_space;
        let mut digest = Sha256::new();
        digest.update((space.len() as u64).to_be_bytes());
        digest.update(space.as_bytes());
        digest.update(key.hash.as_bytes());
        digest.update([family_code(family)]);
        let digest = digest.finalize();
        let mut pg = [0u8; 8];
        pg.copy_from_slice(&digest[..8]);
        let hex: String = digest[..20].iter().map(|b| format!("{b:02x}")).collect();
        LockId {
            pg: i64::from_be_bytes(pg),
            mysql: format!("lock_sql_{hex}"),
        }
    }

    /// `pg_locks` shows a 64-bit advisory key as two 32-bit halves.
    fn halves(&self) -> (i64, i64) {
        let bits = self.pg as u64;
        ((bits >> 32) as i64, (bits & 0xffff_ffff) as i64)
    }
}

fn family_code(family: LockFamily) -> u8 {
    match family {
        LockFamily::Exclusive => 0,
        LockFamily::Fair => 1,
        LockFamily::ReadWrite => 2,
        LockFamily::Semaphore => 3,
        LockFamily::Election => 4,
    }
}

/// The kinds the strategy can hold on `dialect`: exclusive locks, and on PostgreSQL
/// fair ones (its lock queue grants in request order, and a try never passes a waiter).
pub(crate) fn supports(dialect: Dialect, kind: LockKind) -> bool {
    match kind {
        LockKind::Exclusive => true,
        LockKind::Fair => dialect == Dialect::Postgres,
        _ => false,
    }
}

/// Where this backend's advisory locks live (see [`Db::lock_space`]); refuses
/// PostgreSQL before 14, which has no `idle_session_timeout` to lease a session with.
pub(crate) async fn lock_space(db: &Db, table_prefix: &str) -> Result<String> {
    let row = q(&db.sql.advisory.lock_space)
        .fetch_one(&db.pool)
        .await
        .map_err(|e| db.err(e))?;
    let place: String = row.try_get(0).map_err(|e| db.err(e))?;
    let version: i64 = row.try_get(1).map_err(|e| db.err(e))?;
    if db.dialect == Dialect::Postgres && version < 140_000 {
        return Err(Error::Unsupported {
            backend: db.name(),
            operation: "the session strategy before PostgreSQL 14 (no idle_session_timeout)",
        });
    }
    Ok(format!("{place}/{table_prefix}"))
}

/// A connection for a lock, from the held-lock pool.
async fn pin(db: &Db) -> Result<PoolConnection<Any>> {
    db.held_pool.acquire().await.map_err(|e| db.err(e))
}

/// Puts the key's namespace and name in the name register, once per process.
async fn register(db: &Db, key: &KeyId) -> Result<()> {
    if db.registered.contains(&key.hash) {
        return Ok(());
    }
    let insert = q(&db.sql.advisory.register)
        .bind(key.hash.clone())
        .bind(key.namespace.clone())
        .bind(key.name.clone())
        .execute(&db.pool);
    db.timed("registering the lock's name", async {
        insert.await.map_err(|e| db.err(e))
    })
    .await?;
    db.registered.insert(&key.hash);
    Ok(())
}

/// The server-side silence limit of a session (see [`crate::pessimistic`]'s
/// `silence_limit` for the idea): PostgreSQL's `idle_session_timeout` in ms (0: none,
/// past its largest value), MariaDB's `wait_timeout` in whole seconds, rounded up.
fn limit_ms(ttl: Duration) -> String {
    let ms = ttl.as_nanos().div_ceil(1_000_000).max(1);
    if ms > i32::MAX as u128 {
        "0".to_owned()
    } else {
        ms.to_string()
    }
}

fn limit_secs(ttl: Duration) -> u64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.clamp(1, LONGEST_MYSQL_LIMIT.as_secs())
}

/// MariaDB's largest `wait_timeout`: the longest lease a session can be held to, so
/// the longest the client may count on ([`crate::SqlBackend`]'s `lease_validity`).
pub(crate) const LONGEST_MYSQL_LIMIT: Duration = Duration::from_secs(31_536_000);

/// The statement that moves a held session's silence limit to `ttl` from now.
pub(crate) fn silence_limit(dialect: Dialect, ttl: Duration) -> String {
    match dialect {
        Dialect::Postgres => format!("SET idle_session_timeout = {}", limit_ms(ttl)),
        _ => format!("SET SESSION wait_timeout = {}", limit_secs(ttl)),
    }
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
    let row = match db.dialect {
        Dialect::Postgres => {
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
            match taken {
                Ok(row) => row,
                Err(e) if classify(&e) == Class::LockNotAvailable => return Ok(Taken::TimedOut),
                Err(e) => return Err(e),
            }
        }
        _ => {
            let wait_secs = match wait {
                Wait::Try => 0.0,
                Wait::For(Some(d)) => d.as_secs_f64().max(0.001),
                Wait::For(None) => 31_536_000.0,
            };
            let sql =
                db.sql
                    .advisory
                    .mysql_lock(&id.mysql, &key.hash, wait_secs, limit_secs(limit));
            let rows = sqlx::raw_sql(AssertSqlSafe(sql))
                .fetch_all(pinned.conn())
                .await?;
            rows.into_iter().last().ok_or(sqlx::Error::RowNotFound)?
        }
    };
    let got: i64 = row.try_get(0)?;
    Ok(if got == 1 {
        Taken::Fence(row.try_get(1)?)
    } else {
        Taken::Busy
    })
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
            pinned.clean = true;
            return Ok(None);
        }
        Taken::Busy => {}
        // Closed on drop.
        Taken::TimedOut if remaining == Some(Duration::ZERO) => return Ok(None),
        Taken::TimedOut => {
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
    loop {
        attempts += 1;
        let mut pinned = PinnedConn::new(pin(db).await?);
        let started_at = Instant::now();
        match take(db, &mut pinned, id, key, Wait::Try, ttl).await {
            Ok(taken) => return Ok((pinned, taken, started_at)),
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
            pinned.clean = true;
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
            let timeout = remaining.map_or(0, |r| r.as_millis().clamp(1, i32::MAX as u128));
            let row = q(&db.sql.advisory.prepare_wait)
                .bind(timeout.to_string())
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
        data: SqlLease {
            key,
            pinned: Some(Pinned::new(pinned, 0)),
        },
    }
}

/// Lets go of the lock and hands the connection back: [`Error::NotOwner`] if its
/// connection died first (the lock went with it) or no longer held it.
pub(crate) async fn release(db: &Db, lease: &HeldLease<SqlLease>, pinned: &Pinned) -> Result<()> {
    let Some(mut conn) = pinned.take().await else {
        // The watchdog found the connection dead.
        return Err(Error::not_owner(&lease.key));
    };
    let id = LockId::of(db, &lease.data.key, lease.kind.family());
    // Whether the lock was let go, and whether the connection may go back to the pool.
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
                let sql = format!(
                    "SELECT CAST(COALESCE(GET_LOCK(CONCAT('lock_sql_connection_', CONNECTION_ID()), 10), 0) \
                     AS SIGNED) INTO @lock_sql_fenced; \
                     SELECT CAST(COALESCE(RELEASE_LOCK('{}'), 0) AS SIGNED), CAST(@lock_sql_fenced AS SIGNED), \
                     RELEASE_LOCK(CONCAT('lock_sql_connection_', CONNECTION_ID())); \
                     SET SESSION wait_timeout = @@GLOBAL.wait_timeout",
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
    conn.clean = clean;
    if released {
        Ok(())
    } else {
        Err(Error::not_owner(&lease.key))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_and_stay_in_range() {
        assert_eq!(limit_ms(Duration::from_micros(1500)), "2");
        assert_eq!(limit_ms(Duration::from_secs(10_000_000)), "0");
        assert_eq!(limit_secs(Duration::from_millis(600)), 1);
        assert_eq!(limit_secs(Duration::from_millis(2001)), 3);
        assert_eq!(limit_secs(Duration::from_secs(u32::MAX as u64)), 31_536_000);
    }

    #[test]
    fn only_postgres_has_fair_session_locks() {
        assert!(supports(Dialect::Postgres, LockKind::Fair));
        assert!(!supports(Dialect::MySql, LockKind::Fair));
        assert!(supports(Dialect::MySql, LockKind::Exclusive));
        assert!(!supports(Dialect::Postgres, LockKind::Read));
    }
}
