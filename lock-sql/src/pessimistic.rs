//! The FOR UPDATE strategy: a lock is a row lock held by an open transaction on a
//! connection pinned to the lease.
//!
//! Acquire makes sure the lock's row exists, takes a connection out of the pool,
//! starts a transaction and runs `SELECT ... FOR UPDATE` on the row (`NOWAIT` for a
//! single try; otherwise the database queues the waiter and wakes it on release, with
//! a lock timeout at the caller's deadline). Then it bumps the key's fence in its own
//! committed statement, and records the holder (owner, fence, connection id) for
//! `inspect` and operators ([`crate::holder_record`]). [`force_unlock`] frees the lock
//! by killing the holder's connection, guarded against ids that now name another
//! connection. Release rolls the transaction back and returns the connection to the
//! pool; if the connection died, the database already rolled back and the lock was
//! lost.
//!
//! The lock is leased too: the server ends a lock transaction that stays silent for
//! its lease ([`silence_limit`]), and the watchdog's renewal moves that limit on. So a
//! holder cut off from the database with its connection left open on the server (a
//! partition, a frozen host) frees the lock as a lease row would expire.

use std::time::Duration;

use futures::future::join_all;
use lock_core::backend::{AcquireRequest, Grant, HeldLease, Renewal};
use lock_core::{Error, LockFamily, LockKind, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AssertSqlSafe, Row};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::error::{classify, Class};
use crate::holder_record::{HolderRecord, UnconfirmedRecord};
use crate::key::{kind_code, KeyId};
use crate::server_limits::{idle_transaction_limit, postgres_wait_limit_ms, LimitScope};
use crate::spare::SpareConnection;
use crate::SqlLease;

/// A pooled connection inside a lock transaction. Unless marked clean (its
/// transaction ended normally), it is closed when dropped instead of going back to the
/// pool, which makes the server end the transaction and free the row (or, with the
/// session strategy, the advisory lock).
pub(crate) struct PinnedConn {
    conn: Option<PoolConnection<Any>>,
    pub(crate) clean: bool,
}

impl Drop for PinnedConn {
    fn drop(&mut self) {
        // Handing a connection back to the pool (or closing it through the pool) spawns
        // a task: outside a runtime it is taken out of the pool and closed here, which
        // ends the server session and frees whatever it held.
        if tokio::runtime::Handle::try_current().is_err() {
            if let Some(conn) = self.conn.take() {
                drop(conn.detach());
            }
            return;
        }
        if let Some(conn) = self.conn.as_mut() {
            if !self.clean {
                conn.close_on_drop();
            }
        }
    }
}

impl PinnedConn {
    pub(crate) fn new(conn: PoolConnection<Any>) -> Self {
        PinnedConn {
            conn: Some(conn),
            clean: false,
        }
    }

    pub(crate) fn conn(&mut self) -> &mut sqlx::AnyConnection {
        self.conn.as_mut().expect("present until dropped")
    }

    /// Hands a clean connection (no lock, no transaction, no limit left on its
    /// session) to `spare` for the next lock.
    pub(crate) fn keep_in(mut self, spare: &SpareConnection) {
        if let Some(conn) = self.conn.take() {
            spare.keep(conn);
        }
    }
}

/// The connection holding one lock, kept in [`SqlLease`].
pub(crate) struct Pinned {
    conn: Mutex<Option<PinnedConn>>,
    /// The server's id of the connection, for traces (0 where not read).
    connection_id: i64,
}

impl Pinned {
    pub(crate) fn new(conn: PinnedConn, connection_id: i64) -> Self {
        Pinned {
            conn: Mutex::new(Some(conn)),
            connection_id,
        }
    }

    /// The connection, for the release; `None` if the watchdog found it dead.
    pub(crate) async fn take(&self) -> Option<PinnedConn> {
        self.conn.lock().await.take()
    }
}

/// Cancels the server-side wait of a connection whose lock wait was abandoned, so
/// it does not linger in the lock queue.
pub(crate) struct WaitGuard<'a> {
    db: &'a std::sync::Arc<Db>,
    connection: &'a Connection,
    armed: bool,
}

/// Which server connection a lock transaction runs on.
#[derive(Clone, Debug)]
pub(crate) struct Connection {
    /// PostgreSQL's backend pid, MySQL's thread id.
    pub(crate) id: i64,
    /// PostgreSQL: when the backend started (pids are reused; the pair is not).
    /// Empty on MySQL, whose thread ids are not reused while the server runs.
    pub(crate) started: String,
}

impl<'a> WaitGuard<'a> {
    pub(crate) fn new(db: &'a std::sync::Arc<Db>, connection: &'a Connection) -> Self {
        WaitGuard {
            db,
            connection,
            armed: true,
        }
    }

    /// The wait ended with an answer: nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let db = self.db.clone();
            let connection = self.connection.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let cleanups = db.cleanups.clone();
                cleanups.spawn_on(&rt, async move {
                    let _ = cancel_query(&db, &connection).await;
                });
            }
        }
    }
}

/// Cancels the lock wait of an abandoned connection (which is closed, never reused).
/// PostgreSQL matches the backend by pid *and* start time, since the pid may belong
/// to a new backend by the time this runs.
pub(crate) async fn cancel_query(
    db: &Db,
    connection: &Connection,
) -> std::result::Result<(), sqlx::Error> {
    match db.dialect {
        Dialect::Postgres => q(&db.sql.row_lock.cancel_wait)
            .bind(connection.id)
            .bind(connection.started.clone())
            .execute(&db.pool)
            .await
            .map(drop),
        _ => sqlx::raw_sql(AssertSqlSafe(format!("KILL QUERY {}", connection.id)))
            .execute(&db.pool)
            .await
            .map(drop),
    }
}

/// MySQL: kills thread `id` (PostgreSQL kills by the row's `xmax` instead).
async fn kill_connection(db: &Db, id: i64) -> std::result::Result<(), sqlx::Error> {
    let sql = format!("KILL CONNECTION {id}");
    match sqlx::raw_sql(AssertSqlSafe(sql)).execute(&db.pool).await {
        Ok(_) => Ok(()),
        // MySQL: "Unknown thread id": it is gone already.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("HY000") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Takes the row lock, waiting until the request's deadline.
pub(crate) async fn acquire(
    db: &std::sync::Arc<Db>,
    req: AcquireRequest<'_>,
) -> Result<Option<Grant<SqlLease>>> {
    if req.kind != LockKind::Exclusive {
        return Err(Error::Unsupported {
            backend: db.name(),
            operation: "fair and read-write locks with the FOR UPDATE strategy",
        });
    }
    let key = KeyId::of(req.key);
    let kind = kind_code(req.kind);
    let (mut pinned, connection) = start_transaction(db, &key, kind, req.ttl).await?;
    let connection_id = connection.id;
    match lock_row(db, &mut pinned, &connection, &key, kind, &req).await? {
        RowLock::Locked => {}
        RowLock::Busy => {
            pinned.clean = rollback(&mut pinned).await;
            return Ok(None);
        }
        // A cancel of its wait is on its way: it must never reach a statement of the
        // connection's next user, so the connection is closed, not reused.
        RowLock::Abandoned => return Ok(None),
    }
    let (fence, started_at) =
        record_grant(db, &mut pinned, &key, kind, &req, connection_id).await?;
    Ok(Some(Grant {
        fence: fence as u64,
        started_at,
        data: SqlLease::pinned(key, Pinned::new(pinned, connection_id)),
    }))
}

/// Makes sure the lock's row exists, pins a connection of the held pool and begins the
/// lock transaction on it.
async fn start_transaction(
    db: &Db,
    key: &KeyId,
    kind: i64,
    ttl: Duration,
) -> Result<(PinnedConn, Connection)> {
    let setup = async {
        // A plain read first: on MySQL, inserting a row that exists waits for its lock.
        let exists = q(&db.sql.row_lock.row_exists)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_optional(&db.pool)
            .await?;
        if exists.is_none() {
            let created = q(&db.sql.row_lock.ensure_row)
                .bind(key.hash.clone())
                .bind(kind)
                .execute(&db.pool)
                .await;
            match created {
                Ok(_) => {}
                // MariaDB: the row was created meanwhile and is held (see `ensure_row`).
                Err(e) if classify(&e) == Class::LockNotAvailable => {}
                Err(e) => return Err(e),
            }
        }
        let mut pinned = PinnedConn::new(db.held_pool.acquire().await?);
        let row = q(&db.sql.row_lock.connection_id)
            .fetch_one(pinned.conn())
            .await?;
        let connection = Connection {
            id: row.try_get(0)?,
            started: row.try_get(1)?,
        };
        // Until the lock is granted, the limit only has to outlast the statements the
        // acquire sends in between (a short lease must not end a slow acquire).
        let limit = silence_limit(db.dialect, ttl.max(db.request_timeout));
        let begin = match db.dialect {
            Dialect::Postgres => format!("BEGIN; {limit}"),
            _ => format!("{limit}; BEGIN"),
        };
        sqlx::raw_sql(AssertSqlSafe(begin))
            .execute(pinned.conn())
            .await?;
        Ok::<_, sqlx::Error>((pinned, connection))
    };
    // A slow server cannot stretch the wait limit: lock-core drops an acquire still
    // busy past its deadline, and the dropped connection closes.
    db.timed("starting a lock transaction", async {
        setup.await.map_err(|e| db.err(e))
    })
    .await
}

/// Draws the fence of a row lock just taken, sets the lease's silence limit and
/// records the holder: the fence and when the lease started.
///
/// The fence and the holder record are committed on other connections: a row written
/// in the lock transaction would vanish with it. The row lock lives only while its
/// connection does, so the connection is checked again once the fence is drawn: a
/// connection that died meanwhile let the lock go, perhaps to a holder whose fence
/// came first, and this grant must not be reported. That check sets the lease's
/// silence limit and is the transaction's last statement, so the server's limit runs
/// from after it, and the lease from before it was sent.
async fn record_grant(
    db: &std::sync::Arc<Db>,
    pinned: &mut PinnedConn,
    key: &KeyId,
    kind: i64,
    req: &AcquireRequest<'_>,
    connection_id: i64,
) -> Result<(i64, Instant)> {
    let owner = req.owner.as_str().to_owned();
    let limit = silence_limit(db.dialect, req.ttl);
    let mut started_at = Instant::now();
    // A record written for a grant that then fails or is dropped would name a holder
    // that never was: it is deleted again unless the grant completes.
    let mut written = UnconfirmedRecord::new(db);
    let record = async {
        let fence = bump_fence(db, key).await?;
        started_at = Instant::now();
        sqlx::raw_sql(AssertSqlSafe(limit))
            .execute(pinned.conn())
            .await?;
        written.record = Some(HolderRecord {
            hash: key.hash.clone(),
            kind,
            owner: owner.clone(),
            fence,
        });
        q(&db.sql.row_lock.put_holder)
            .bind(key.hash.clone())
            .bind(kind)
            .bind(owner.clone())
            .bind(fence)
            .bind(connection_id)
            .execute(&db.pool)
            .await?;
        Ok::<_, sqlx::Error>(fence)
    };
    let fence = db
        .timed("recording the lock holder", async {
            record.await.map_err(|e| db.err(e))
        })
        .await?;
    written.record = None;
    Ok((fence, started_at))
}

/// How the locking `SELECT` ended.
enum RowLock {
    Locked,
    /// The server said the lock stayed busy until the deadline.
    Busy,
    /// The client's timer ended the wait first; the server-side wait is being
    /// cancelled by [`WaitGuard`].
    Abandoned,
}

/// Runs the locking `SELECT`.
async fn lock_row(
    db: &std::sync::Arc<Db>,
    pinned: &mut PinnedConn,
    connection: &Connection,
    key: &KeyId,
    kind: i64,
    req: &AcquireRequest<'_>,
) -> Result<RowLock> {
    let remaining = req.deadline.remaining();
    if remaining == Some(Duration::ZERO) {
        let locked = q(&db.sql.row_lock.lock_row_nowait)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_optional(pinned.conn());
        let outcome = db
            .timed("trying a row lock", async { Ok(locked.await) })
            .await?;
        return match outcome {
            Ok(_) => Ok(RowLock::Locked),
            Err(e) if classify(&e) == Class::LockNotAvailable => Ok(RowLock::Busy),
            Err(e) => Err(db.err(e)),
        };
    }
    // The server's own lock timeout ends the wait at the deadline (whole seconds on
    // MySQL, so the client's timer below ends it there exactly).
    let timeout_sql = match (db.dialect, remaining) {
        (Dialect::Postgres, _) => format!(
            "SET LOCAL lock_timeout = {}",
            postgres_wait_limit_ms(remaining)
        ),
        (_, None) => "SET SESSION innodb_lock_wait_timeout = 1073741824".to_owned(),
        (_, Some(r)) => format!(
            "SET SESSION innodb_lock_wait_timeout = {}",
            r.as_secs().saturating_add(1).min(1_073_741_824)
        ),
    };
    sqlx::raw_sql(AssertSqlSafe(timeout_sql))
        .execute(pinned.conn())
        .await
        .map_err(|e| db.err(e))?;
    let mut guard = WaitGuard {
        db,
        connection,
        armed: true,
    };
    let wait = q(&db.sql.row_lock.lock_row_wait)
        .bind(key.hash.clone())
        .bind(kind)
        .fetch_optional(pinned.conn());
    let outcome = match req.deadline.instant() {
        Some(at) => match tokio::time::timeout_at(at + Duration::from_millis(20), wait).await {
            Ok(outcome) => outcome,
            // The guard cancels the server-side wait; the connection is not reused.
            Err(_) => return Ok(RowLock::Abandoned),
        },
        None => wait.await,
    };
    guard.armed = false;
    match outcome {
        Ok(_) => Ok(RowLock::Locked),
        Err(e) if classify(&e) == Class::LockNotAvailable => Ok(RowLock::Busy),
        Err(e) => Err(db.err(e)),
    }
}

/// One autocommitted statement on a pooled connection (MySQL reports the fence in
/// its OK packet, or on that same connection).
async fn bump_fence(db: &Db, key: &KeyId) -> std::result::Result<i64, sqlx::Error> {
    let mut conn = db.pool.acquire().await?;
    crate::lease::bump_key(&mut conn, db, key).await
}

/// MySQL: kills connection `holder` under its [`release_fence`], if `holds` (a statement
/// whose first column names a connection) still names it once the fence is held.
/// `None`: the fence was not had in time (the holder is releasing, or the server is
/// very slow): look again. Otherwise whether it was killed.
pub(crate) async fn kill_under_release_fence(
    db: &Db,
    holder: i64,
    holds: sqlx::query::Query<'static, Any, sqlx::any::AnyArguments>,
) -> std::result::Result<Option<bool>, sqlx::Error> {
    let mut fenced = PinnedConn::new(db.pool.acquire().await?);
    let fence = release_fence(holder);
    let wait_secs = db.request_timeout.as_secs().max(1);
    let got: i64 = sqlx::query(AssertSqlSafe(format!(
        "SELECT CAST(COALESCE(GET_LOCK('{fence}', {wait_secs}), 0) AS SIGNED)"
    )))
    .fetch_one(fenced.conn())
    .await?
    .try_get(0)?;
    if got != 1 {
        return Ok(None);
    }
    let still = holds
        .fetch_optional(fenced.conn())
        .await?
        .map(|row| row.try_get::<i64, _>(0))
        .transpose()?
        == Some(holder);
    if still {
        kill_connection(db, holder).await?;
    }
    sqlx::raw_sql(AssertSqlSafe(format!("DO RELEASE_LOCK('{fence}')")))
        .execute(fenced.conn())
        .await?;
    fenced.clean = true;
    Ok(Some(still))
}

/// The server-wide named lock a MySQL lock connection holds while it ends its lock
/// transaction, and `force_unlock` holds while it kills a holder by thread id: a
/// holder is never killed after its release began, when its connection may be on its
/// way to another lock.
fn release_fence(connection_id: i64) -> String {
    format!("{RELEASE_FENCE_PREFIX}{connection_id}")
}

/// What every [`release_fence`] is named from.
const RELEASE_FENCE_PREFIX: &str = "lock_sql_connection_";

/// The [`release_fence`] of the connection a statement runs on, as a SQL expression.
pub(crate) const OWN_RELEASE_FENCE: &str = "CONCAT('lock_sql_connection_', CONNECTION_ID())";

/// The statement that bounds how long the server keeps a lock transaction whose
/// client has gone silent (a partition, a frozen host, where the connection stays open
/// and TCP keep-alive would take hours): a lease of `ttl` from the transaction's last
/// statement. PostgreSQL ends a session idle in a transaction for
/// `idle_in_transaction_session_timeout` (set for this transaction only); MariaDB for
/// its `idle_*transaction_timeout`s, in whole seconds, which it reads only inside a
/// transaction (all three: a server setting of any one would otherwise decide). Never
/// shorter than `ttl`: the client counts its lease from before a statement is sent, the
/// server from after it ran. A lease beyond the server's largest limit gets none.
pub(crate) fn silence_limit(dialect: Dialect, ttl: Duration) -> String {
    idle_transaction_limit(dialect, ttl, LimitScope::Transaction)
}

/// MySQL: [`rollback`] under the connection's [`release_fence`], in one round trip.
async fn rollback_fenced(pinned: &mut PinnedConn, connection_id: i64) -> bool {
    let fence = release_fence(connection_id);
    let sql = format!("DO GET_LOCK('{fence}', 10); ROLLBACK; DO RELEASE_LOCK('{fence}')");
    let done = sqlx::raw_sql(AssertSqlSafe(sql)).execute(pinned.conn());
    matches!(
        tokio::time::timeout(Duration::from_secs(15), done).await,
        Ok(Ok(_))
    )
}

/// Ends the transaction; true if the connection is fit to go back to the pool.
async fn rollback(pinned: &mut PinnedConn) -> bool {
    let done = sqlx::raw_sql("ROLLBACK").execute(pinned.conn());
    matches!(
        tokio::time::timeout(Duration::from_secs(5), done).await,
        Ok(Ok(_))
    )
}

/// Ends the lock transaction: [`Error::NotOwner`] if its connection died first (the
/// lock was lost then). Either way the holder record goes.
pub(crate) async fn release(
    db: &std::sync::Arc<Db>,
    lease: &HeldLease<SqlLease>,
    pinned: &Pinned,
) -> Result<()> {
    let taken = pinned.take().await;
    let ok = match taken {
        Some(mut conn) => {
            conn.clean = match db.dialect {
                Dialect::MySql => rollback_fenced(&mut conn, pinned.connection_id).await,
                _ => rollback(&mut conn).await,
            };
            conn.clean
        }
        // The watchdog found the connection dead: the lock went with it.
        None => false,
    };
    let holder = HolderRecord {
        hash: lease.data.key.hash.clone(),
        kind: kind_code(lease.kind),
        owner: lease.owner.as_str().to_owned(),
        fence: lease.fence as i64,
    };
    // A record `inspect` would find stale once the row is free, but operators read the
    // table too.
    holder.forget_or_retry(db).await;
    if ok {
        Ok(())
    } else {
        Err(Error::not_owner(&lease.key))
    }
}

/// Checks each lease's connection is alive (the lock lives as long as its
/// transaction, or with the session strategy its session) and moves the server's
/// silence limit on by running `limit`; one round trip per held lock, all at once.
pub(crate) async fn renew(
    db: &Db,
    leases: &[&HeldLease<SqlLease>],
    limit: String,
) -> Result<Vec<Renewal>> {
    let limit = &limit;
    let pings = leases.iter().map(|lease| async move {
        let Some(pinned) = &lease.data.pinned else {
            return Renewal::Lost;
        };
        let mut slot = pinned.conn.lock().await;
        let Some(conn) = slot.as_mut() else {
            return Renewal::Lost;
        };
        let ping = sqlx::raw_sql(AssertSqlSafe(limit.as_str())).execute(conn.conn());
        match tokio::time::timeout(db.request_timeout, ping).await {
            Ok(Ok(_)) => Renewal::Renewed,
            _ => {
                tracing::debug!(
                    connection = pinned.connection_id,
                    "lock connection is gone; its lock went with it"
                );
                // Dropped dirty: closed, never reused.
                *slot = None;
                Renewal::Lost
            }
        }
    });
    Ok(join_all(pings).await)
}

/// Whether the row is locked. PostgreSQL reads it from the lock state (the row's
/// `xmax` is a running transaction), taking no lock. MariaDB shows a row lock only to
/// a transaction that waits for it, so there it is tried with `SKIP LOCKED` in a
/// transaction rolled back at once; for that moment a `NOWAIT` try of the free lock
/// fails.
pub(crate) async fn is_locked(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    if family != LockFamily::Exclusive {
        return Ok(false);
    }
    let kind = kind_code(LockKind::Exclusive);
    if db.dialect == Dialect::Postgres {
        let read = q(&db.sql.row_lock.row_locked)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_one(&db.pool);
        return db
            .timed("checking a lock", async {
                let row = read.await.map_err(|e| db.err(e))?;
                Ok(row.try_get::<i64, _>(0).map_err(|e| db.err(e))? > 0)
            })
            .await;
    }
    let probe = async {
        let mut tx = db.begin().await?;
        let free = q(&db.sql.row_lock.probe_row)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_optional(&mut *tx)
            .await?;
        tx.rollback().await?;
        if free.is_some() {
            return Ok(false);
        }
        // No row came back: locked, or never created.
        let exists = q(&db.sql.row_lock.row_exists)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_optional(&db.pool)
            .await?;
        Ok::<_, sqlx::Error>(exists.is_some())
    };
    db.timed("checking a lock", async {
        probe.await.map_err(|e| db.err(e))
    })
    .await
}

/// Kills the connection that holds the row lock, and waits (briefly) for the
/// database to free it.
///
/// The holder record is not trusted for this: a holder that died leaves its record
/// behind until the next holder overwrites it, a record is read before a release that
/// follows, and ids are reused (PostgreSQL pids soon, MariaDB thread ids after a
/// restart). The server's own lock state names the holder instead. PostgreSQL kills
/// the backend whose transaction id is the row's `xmax` (set by `SELECT ... FOR
/// UPDATE`), in one statement. MariaDB has no such column: a probe queues for the row
/// lock and the server's lock-wait table names the transaction blocking it
/// ([`kill_mysql_row_holder`]).
pub(crate) async fn force_unlock(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    if !is_locked(db, key, family).await? {
        return Ok(false);
    }
    let kind = kind_code(LockKind::Exclusive);
    if db.dialect == Dialect::Postgres {
        let kill = q(&db.sql.row_lock.kill_row_holder)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_one(&db.pool);
        let killed: i64 = db
            .timed("killing the holder's connection", async {
                let row = kill.await.map_err(|e| db.err(e))?;
                row.try_get(0).map_err(|e| db.err(e))
            })
            .await?;
        if killed == 0 {
            // Released between the check and the kill.
            return Ok(false);
        }
    } else if !kill_mysql_row_holder(db, key, kind).await? {
        // Released before the kill.
        return Ok(false);
    }
    // The server frees the row when the killed session ends, a moment later.
    let until = Instant::now() + db.request_timeout;
    while Instant::now() < until && is_locked(db, key, family).await? {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(true)
}

/// MariaDB: queues a probe transaction for the row lock, reads which thread's
/// transaction blocks it (`INNODB_LOCK_WAITS`), and kills that thread. False if the
/// probe got the row first (nobody held it). The probe's connection is closed
/// afterwards, which ends its transaction and its place in the queue.
///
/// Between the read and the kill the holder may release, and its connection go back
/// to the pool and on to another lock. So the kill happens under the holder
/// connection's [`release_fence`], which its release takes too, and only if the
/// holder still blocks the probe once the fence is held.
async fn kill_mysql_row_holder(db: &Db, key: &KeyId, kind: i64) -> Result<bool> {
    let work = async {
        let mut probe = PinnedConn::new(db.pool.acquire().await?);
        let probe_id: i64 = q(&db.sql.row_lock.connection_id)
            .fetch_one(probe.conn())
            .await?
            .try_get(0)?;
        let wait_secs = db.request_timeout.as_secs().saturating_add(1);
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET SESSION innodb_lock_wait_timeout = {wait_secs}"
        )))
        .execute(probe.conn())
        .await?;
        sqlx::raw_sql("BEGIN").execute(probe.conn()).await?;
        let queued = q(&db.sql.row_lock.lock_row_wait)
            .bind(key.hash.clone())
            .bind(kind)
            .fetch_optional(probe.conn());
        tokio::pin!(queued);
        loop {
            tokio::select! {
                outcome = &mut queued => {
                    // Granted: free already. An error: the lock stayed busy (or the
                    // server failed), and nothing was killed.
                    return outcome.map(|_| false);
                }
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            let blocker = q(&db.sql.row_lock.row_blocker)
                .bind(probe_id)
                .fetch_optional(&db.pool)
                .await?;
            let Some(row) = blocker else { continue };
            let holder: i64 = row.try_get(0)?;
            // Only if it still blocks the probe once it cannot be releasing.
            let blocks = q(&db.sql.row_lock.row_blocker).bind(probe_id);
            if kill_under_release_fence(db, holder, blocks).await? == Some(true) {
                return Ok(true);
            }
        }
    };
    db.timed("killing the holder's connection", async {
        work.await.map_err(|e| db.err(e))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_names_its_own_release_fence_as_a_kill_does() {
        assert_eq!(
            OWN_RELEASE_FENCE,
            format!("CONCAT('{RELEASE_FENCE_PREFIX}', CONNECTION_ID())")
        );
        assert_eq!(release_fence(7), "lock_sql_connection_7");
    }
}
