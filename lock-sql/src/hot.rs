//! A connection kept outside the pool for the one-statement hot path (the
//! uncontended grant of PostgreSQL and MariaDB, and the owners' releases). sqlx's
//! pool pings a connection when it hands it out and again when it takes it back: two
//! round trips around each statement, as much as the statement itself costs on a fast
//! network (SQLite's pool only pings on the way back, a hand-off to the connection's
//! worker thread). It is one connection beyond the pool's limit.

use std::time::Duration;

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::Connection as _;
use sqlx::{Any, AnyConnection, AnyPool};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A hot connection that sat idle this long is pinged before a statement is sent on
/// it: a server restart or a dropped link while it was idle then costs nothing but the
/// ping. A statement that fails is never sent again by itself: it may have run (a
/// grant, a release) although its reply was lost.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// One connection, used by whoever finds it free; the others use the pool.
#[derive(Debug, Default)]
pub(crate) struct HotConnection {
    slot: Mutex<Option<Idle>>,
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
    /// Runs the query `make` builds and returns its first row, on the hot connection
    /// if it is free, else on a pooled one. The idle connection's ping is bounded by
    /// `limit`.
    ///
    /// # Cancel safety
    /// Dropped mid-statement, the statement may or may not have run, as with any
    /// connection; the hot connection is then closed, not reused.
    pub(crate) async fn fetch_optional(
        &self,
        pool: &AnyPool,
        limit: Duration,
        make: impl Fn() -> Query<'static, Any, AnyArguments>,
    ) -> Result<Option<AnyRow>, HotError> {
        let Ok(mut slot) = self.slot.try_lock() else {
            let mut conn = pool.acquire().await.map_err(HotError::not_sent)?;
            let row = first_after_commit(make(), &mut conn).await;
            if row.is_err() {
                // Closed, not given back: a call killed inside MariaDB's grant
                // procedure skips its handler and leaves its transaction open, which
                // the pool would not know of.
                drop(conn.detach());
            }
            return row;
        };
        let mut conn = match slot.take() {
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
        // On an error the connection is dropped (closed), not put back.
        let row = first_after_commit(make(), &mut conn).await?;
        *slot = Some(Idle {
            conn,
            since: Instant::now(),
        });
        Ok(row)
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
