//! The floor on PostgreSQL: `pg_advisory_lock` + `pg_advisory_unlock` on a session of
//! its own, through sqlx. The server queues the waiters and hands the lock over
//! itself; nothing is written, and nothing survives the session. Beside it, the same
//! floor plus the server work of the session strategy's promises, to tell the server's
//! share of that strategy's cycle from the client's.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, Connection, PgConnection};

use crate::contender::{BenchError, Contender, Role, Worker};

/// The fence table of the floor with promises: not written to the log, as the session
/// strategy's is not.
const FENCES: &str = "CREATE UNLOGGED TABLE IF NOT EXISTS bench_advisory_fences \
     (khash BIGINT PRIMARY KEY, fence BIGINT NOT NULL)";

/// Takes the lock as the floor does and, in the same statement, what the session
/// strategy does at a grant: sets the session's silence limit (`$2`, ms) and draws
/// a fencing token, one past the key's last and never below the server clock in µs.
const FENCED_LOCK: &str = "WITH l AS (SELECT pg_advisory_lock($1)), \
     t AS (SELECT set_config('idle_session_timeout', $2, false) AS v FROM l), \
     f AS (INSERT INTO bench_advisory_fences AS f (khash, fence) \
     SELECT $1, CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) FROM l \
     ON CONFLICT (khash) DO UPDATE SET fence = GREATEST(f.fence + 1, excluded.fence) \
     RETURNING f.fence) \
     SELECT (SELECT fence FROM f), (SELECT COUNT(v) FROM t)";

/// Lets go of the lock as the floor does and, in the same statement, clears the
/// session's silence and wait limits, as the session strategy's release does.
const FENCED_UNLOCK: &str = "SELECT pg_advisory_unlock($1) FROM (SELECT \
     set_config('idle_session_timeout', '0', false), set_config('lock_timeout', '0', false)) AS c";

/// Advisory locks at the floor's URL, bare or with the server work of the session
/// strategy's promises inside its two statements: a fencing token and a silence limit
/// per grant, the limits cleared at release.
pub struct PgAdvisory(pub super::Floor);

#[async_trait]
impl Contender for PgAdvisory {
    fn name(&self) -> String {
        self.0.name(
            "pg_advisory_lock",
            "pg_advisory_lock, fenced, with a silence limit",
        )
    }

    fn role(&self) -> Role {
        self.0.role()
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let mut conn = PgConnection::connect(&self.0.url).await?;
        if !self.0.promises {
            return Ok(Box::new(AdvisoryWorker {
                conn,
                key: super::key_of(name),
            }));
        }
        // Workers are made one after another, so the table's creation never races.
        sqlx::query(FENCES).execute(&mut conn).await?;
        Ok(Box::new(FencedWorker {
            conn,
            key: super::key_of(&format!("fenced:{name}")),
            last: 0,
        }))
    }
}

struct AdvisoryWorker {
    conn: PgConnection,
    key: i64,
}

#[async_trait]
impl Worker for AdvisoryWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(self.key)
            .execute(&mut self.conn)
            .await?;
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        unlock(&mut self.conn, "SELECT pg_advisory_unlock($1)", self.key).await
    }
}

struct FencedWorker {
    conn: PgConnection,
    key: i64,
    /// The last grant's fencing token.
    last: i64,
}

#[async_trait]
impl Worker for FencedWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let (fence, _): (Option<i64>, i64) = sqlx::query_as(FENCED_LOCK)
            .bind(self.key)
            .bind("30000")
            .fetch_one(&mut self.conn)
            .await?;
        match fence {
            // Within one worker, tokens must increase; across workers the bench's
            // counter checks exclusion.
            Some(fence) if fence > self.last => {
                self.last = fence;
                Ok(())
            }
            other => Err(format!(
                "fenced pg_advisory_lock: token {other:?} after {}",
                self.last
            )
            .into()),
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        unlock(&mut self.conn, FENCED_UNLOCK, self.key).await
    }
}

/// Runs `unlock`, a statement that lets go of the advisory lock `key` and answers
/// whether it was held.
async fn unlock(conn: &mut PgConnection, unlock: &'static str, key: i64) -> Result<(), BenchError> {
    let (released,): (bool,) = sqlx::query_as(unlock).bind(key).fetch_one(conn).await?;
    if released {
        Ok(())
    } else {
        Err(format!("not held at release: {unlock}").into())
    }
}
