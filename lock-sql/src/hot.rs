//! A connection kept outside the pool for the one-statement hot path (PostgreSQL's
//! uncontended grant and every release). sqlx's pool pings a connection when it hands
//! it out and again when it takes it back: two round trips around each statement, as
//! much as the statement itself costs on a fast network.

use std::time::Duration;

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, AnyPool};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{classify, Class};

/// A hot connection that sat idle this long and then fails is taken to have died while
/// idle (a restarted server, a dropped link), before the statement reached it: the
/// statement is run again on a pooled connection, which the pool checks first.
const IDLE_DEATH: Duration = Duration::from_secs(1);

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

impl HotConnection {
    /// Runs the query `make` builds and returns its first row, on the hot connection
    /// if it is free, else on a pooled one.
    ///
    /// # Cancel safety
    /// Dropped mid-statement, the statement may or may not have run, as with any
    /// connection; the hot connection is then closed, not reused.
    pub(crate) async fn fetch_optional(
        &self,
        pool: &AnyPool,
        make: impl Fn() -> Query<'static, Any, AnyArguments>,
    ) -> Result<Option<AnyRow>, sqlx::Error> {
        if let Ok(mut slot) = self.slot.try_lock() {
            let (mut conn, idle_for) = match slot.take() {
                Some(idle) => (idle.conn, idle.since.elapsed()),
                None => (pool.acquire().await?.detach(), Duration::ZERO),
            };
            match make().fetch_optional(&mut conn).await {
                Ok(row) => {
                    *slot = Some(Idle {
                        conn,
                        since: Instant::now(),
                    });
                    return Ok(row);
                }
                // The connection is dropped (closed) here either way.
                Err(e) if !died_before(&e, idle_for) => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "hot connection died while idle; using the pool")
                }
            }
        }
        make().fetch_optional(&mut *pool.acquire().await?).await
    }
}

/// Whether `e` says the connection was gone before the statement could run: the
/// server's notice that it terminated the session (SQLSTATE 57P01-57P03, sent to an
/// idle session when it is killed or the server shuts down), or a broken connection
/// after `idle_for` of silence.
fn died_before(e: &sqlx::Error, idle_for: Duration) -> bool {
    if let sqlx::Error::Database(db) = e {
        if db.code().is_some_and(|c| c.starts_with("57P0")) {
            return true;
        }
    }
    classify(e) == Class::Unavailable && idle_for >= IDLE_DEATH
}
