//! A connection kept outside the pool for the one-statement hot path (the
//! uncontended grant of PostgreSQL and MariaDB, and the owners' releases). sqlx's
//! pool pings a connection when it hands it out and again when it takes it back: two
//! round trips around each statement, as much as the statement itself costs on a fast
//! network (SQLite's pool only pings on the way back, a hand-off to the connection's
//! worker thread). It is one connection beyond the pool's limit.

use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::Connection as _;
use sqlx::{Any, AnyConnection, AnyPool};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

/// A hot connection that sat idle this long is pinged before a statement is sent on
/// it: a server restart or a dropped link while it was idle then costs nothing but the
/// ping. A statement that fails is never sent again by itself: it may have run (a
/// grant, a release) although its reply was lost.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// One connection, used by whoever finds it free; the others use the pool.
#[derive(Debug, Default)]
pub(crate) struct HotConnection {
    slot: Arc<Mutex<Option<Idle>>>,
}

/// The hot connection, taken for one statement that needs neither the pool nor a
/// ping first; see [`HotConnection::take_ready`].
pub(crate) struct ReadyHot {
    slot: OwnedMutexGuard<Option<Idle>>,
    /// Taken by the statement; put back into the slot if none was sent.
    idle: Option<Idle>,
}

#[derive(Debug)]
struct Idle {
    conn: AnyConnection,
    since: Instant,
}

/// A statement on the hot path that failed, and whether it may have reached the server.
#[derive(Debug)]
pub(crate) struct HotError {
    pub(crate) error: sqlx::Error,
    /// False if no connection was had (the pool, or the ping of an idle one, failed):
    /// the statement never left.
    pub(crate) sent: bool,
}

impl HotError {
    fn not_sent(error: sqlx::Error) -> Self {
        HotError { error, sent: false }
    }
}

impl HotConnection {
    /// The hot connection, if it is free, open and was used lately: a statement on it
    /// waits for nothing but the server, so a caller that stops polling it holds no
    /// place in the pool's queue.
    pub(crate) fn take_ready(&self) -> Option<ReadyHot> {
        let mut slot = self.slot.clone().try_lock_owned().ok()?;
        match slot.take() {
            Some(idle) if idle.since.elapsed() < IDLE_CHECK => Some(ReadyHot {
                slot,
                idle: Some(idle),
            }),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Runs the query `make` builds and returns its first row, on the hot connection
    /// if it is free, else on a pooled one. The idle connection's ping is bounded by
    /// `limit`.
    ///
    /// # Cancel safety
    /// Dropped mid-statement, the statement may or may not have run, as with any
    /// connection; the connection it ran on, hot or pooled, is then closed, not
    /// reused.
    pub(crate) async fn fetch_optional(
        &self,
        pool: &AnyPool,
        limit: Duration,
        make: impl Fn() -> Query<'static, Any, AnyArguments>,
    ) -> Result<Option<AnyRow>, HotError> {
        let Ok(mut slot) = self.slot.try_lock() else {
            let mut conn =
                ClosedUnlessDone(Some(pool.acquire().await.map_err(HotError::not_sent)?));
            let row = first_after_commit(make(), conn.get()).await;
            if row.is_ok() {
                conn.done();
            }
            return row;
        };
        let conn = match slot.take() {
            Some(idle) if idle.since.elapsed() < IDLE_CHECK => idle.conn,
            Some(mut idle) => {
                let ping = tokio::time::timeout(limit, idle.conn.ping()).await;
                match ping {
                    Ok(Ok(())) => idle.conn,
                    failed => {
                        tracing::debug!(?failed, "hot connection died while idle; opening another");
                        pool.acquire().await.map_err(HotError::not_sent)?.detach()
                    }
                }
            }
            None => pool.acquire().await.map_err(HotError::not_sent)?.detach(),
        };
        run_and_keep(&mut slot, conn, make()).await
    }
}

impl ReadyHot {
    /// Runs `query` on the hot connection and returns its first row.
    ///
    /// # Cancel safety
    /// Dropped mid-statement, the statement may or may not have run; the connection is
    /// closed, and the slot left empty for the next caller to fill. Dropped before
    /// its first poll, the connection goes back to the slot.
    pub(crate) async fn fetch_optional(
        mut self,
        query: Query<'static, Any, AnyArguments>,
    ) -> Result<Option<AnyRow>, HotError> {
        let Some(idle) = self.idle.take() else {
            return Err(HotError::not_sent(sqlx::Error::PoolClosed));
        };
        run_and_keep(&mut self.slot, idle.conn, query).await
    }
}

impl Drop for ReadyHot {
    fn drop(&mut self) {
        if let Some(idle) = self.idle.take() {
            *self.slot = Some(idle);
        }
    }
}

/// Runs `query` on `conn` and puts `conn` back in `slot` if it answered; on an error
/// the connection is dropped (closed), not put back.
async fn run_and_keep(
    slot: &mut Option<Idle>,
    mut conn: AnyConnection,
    query: Query<'static, Any, AnyArguments>,
) -> Result<Option<AnyRow>, HotError> {
    let row = first_after_commit(query, &mut conn).await?;
    *slot = Some(Idle {
        conn,
        since: Instant::now(),
    });
    Ok(row)
}

/// A pooled connection that is closed, not given back to the pool, unless its call
/// ran to its end: a call that failed or was dropped midway may have left a
/// transaction open that the pool would not know of (SQLite's one-call grant waiting
/// in `BEGIN IMMEDIATE`, a call killed inside MariaDB's grant procedure, which skips
/// its handler), keeping other writers out and taking later statements on it into a
/// transaction that is never committed.
struct ClosedUnlessDone(Option<PoolConnection<Any>>);

impl ClosedUnlessDone {
    fn get(&mut self) -> &mut AnyConnection {
        self.0.as_mut().expect("present until done or dropped")
    }

    /// The call ran to its end: the connection goes back to the pool.
    fn done(mut self) {
        drop(self.0.take());
    }
}

impl Drop for ClosedUnlessDone {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(conn.detach());
        }
    }
}

/// The first row of an autocommitted statement, once its commit is done. PostgreSQL
/// sends the rows before the implicit commit at the end of the statement, and
/// `fetch_optional` returns with the first: a grant would count as won before its
/// commit, which may still fail (a serialization failure, a deferred trigger, a
/// crash) and leave the lock to someone else.
async fn first_after_commit(
    query: Query<'static, Any, AnyArguments>,
    conn: &mut AnyConnection,
) -> Result<Option<AnyRow>, HotError> {
    match query.fetch_all(conn).await {
        Ok(rows) => Ok(rows.into_iter().next()),
        Err(error) => Err(HotError { error, sent: true }),
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use sqlx::any::AnyPoolOptions;

    /// A SQLite file in a directory removed when the first value is dropped: its
    /// URL, and a pool on it.
    async fn scratch_database() -> (tempfile::TempDir, String, AnyPool) {
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hot.db").display());
        let pool = pool(&url).await;
        (dir, url, pool)
    }

    async fn pool(url: &str) -> AnyPool {
        AnyPoolOptions::new()
            .max_connections(2)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::raw_sql("PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL")
                        .execute(conn)
                        .await
                        .map(drop)
                })
            })
            .connect(url)
            .await
            .expect("pool")
    }

    /// The hot connection is taken for a statement in the caller's task only while it
    /// is free and was used in the last second; one taken and not used goes back.
    #[tokio::test]
    async fn only_a_free_and_fresh_hot_connection_is_taken() {
        let (_dir, _url, pool) = scratch_database().await;
        let hot = HotConnection::default();
        assert!(hot.take_ready().is_none(), "taken before it was made");
        let one = || sqlx::query("SELECT 1");
        let row = hot.fetch_optional(&pool, Duration::from_secs(1), one).await;
        assert!(row.unwrap().is_some());
        let ready = hot.take_ready().expect("free and fresh");
        assert!(hot.take_ready().is_none(), "taken twice");
        drop(ready);
        let ready = hot.take_ready().expect("given back unused");
        let row = ready.fetch_optional(sqlx::query("SELECT 2")).await;
        assert!(row.unwrap().is_some());
        let ready = hot.take_ready().expect("kept after its statement");
        drop(ready);
        tokio::time::sleep(IDLE_CHECK + Duration::from_millis(100)).await;
        assert!(
            hot.take_ready().is_none(),
            "taken unpinged after sitting idle"
        );
        let row = hot.fetch_optional(&pool, Duration::from_secs(1), one).await;
        assert!(row.unwrap().is_some(), "pinged and used again");
    }

    /// A call on the pooled connection (the hot one busy) dropped while SQLite's
    /// `BEGIN IMMEDIATE` waits for the write lock: the connection must not go back to
    /// the pool inside the transaction, where it would keep every other writer out
    /// and roll back whatever later ran on it.
    #[tokio::test]
    async fn a_dropped_pooled_call_never_leaves_its_transaction_open() {
        let (_dir, url, pool) = scratch_database().await;
        sqlx::raw_sql("CREATE TABLE t (x INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        let mut blocker = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut blocker)
            .await
            .unwrap();
        let hot = HotConnection::default();
        let busy = hot.slot.lock().await;
        let call = hot.fetch_optional(&pool, Duration::from_secs(1), || {
            sqlx::query("BEGIN IMMEDIATE; INSERT INTO t VALUES (1); COMMIT")
        });
        let dropped = tokio::time::timeout(Duration::from_millis(300), call).await;
        assert!(dropped.is_err(), "the call waits for the write lock");
        drop(busy);
        sqlx::raw_sql("COMMIT").execute(&mut blocker).await.unwrap();
        // The pool's worker finishes the BEGIN; the pool then takes the connection
        // back (or it was closed).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let write = sqlx::raw_sql(
            "PRAGMA busy_timeout = 1000; BEGIN IMMEDIATE; INSERT INTO t VALUES (2); COMMIT",
        )
        .execute(&mut blocker)
        .await;
        assert!(
            write.is_ok(),
            "another connection cannot write: {:?}",
            write.err()
        );
    }
}
