//! The floor on PostgreSQL: `pg_advisory_lock` + `pg_advisory_unlock` on a session of
//! its own, through sqlx. The server queues the waiters and hands the lock over
//! itself; nothing is written, and nothing survives the session. Beside it, the same
//! floor plus the server work of the session strategy's promises, done by a bare
//! client, to tell our client's share of that strategy's cycle.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, Connection, PgConnection};

use crate::contender::{BenchError, Contender, Role, Worker};

/// The fence table of the floor with promises, as the session strategy's: keyed by a
/// 64-digit hex digest, and not written to the log.
const FENCES: &str = "CREATE UNLOGGED TABLE IF NOT EXISTS bench_advisory_hex_fences \
     (khash VARCHAR(64) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL)";

/// The session strategy's statement that waits for a lock, run by hand: takes the lock
/// (`$1`) as the floor does and, in the same statement, sets the session's silence
/// limit (`$2`, ms as text) and draws the fencing token of the key `$3`, one past its
/// last and never below the server clock in µs. Answers 1, the token, and 1 (the
/// limit was set).
const FENCED_LOCK: &str = "WITH l AS (SELECT true AS ok FROM (SELECT pg_advisory_lock($1)) AS w), \
     t AS (SELECT set_config('idle_session_timeout', CASE WHEN l.ok THEN $2 ELSE '0' END, false) AS v FROM l), \
     f AS (INSERT INTO bench_advisory_hex_fences AS f (khash, fence) \
     SELECT $3, CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) FROM l WHERE l.ok \
     ON CONFLICT (khash) DO UPDATE SET fence = GREATEST(f.fence + 1, excluded.fence) \
     RETURNING f.fence) \
     SELECT CASE WHEN l.ok THEN 1 ELSE 0 END, COALESCE((SELECT fence FROM f), 0), \
     (SELECT COUNT(v) FROM t) FROM l";

/// The session strategy's release, run by hand: lets go of the lock (`$1`) as the
/// floor does and clears the session's silence and wait limits. Answers 1 if the lock
/// was held.
const FENCED_UNLOCK: &str = "SELECT CASE WHEN pg_advisory_unlock($1) THEN 1 ELSE 0 END, \
     set_config('idle_session_timeout', '0', false), set_config('lock_timeout', '0', false)";

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
        let key = super::key_of(&format!("fenced:{name}"));
        Ok(Box::new(FencedWorker {
            conn,
            key,
            khash: format!("{:064x}", key as u64),
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
        let (released,): (bool,) = sqlx::query_as("SELECT pg_advisory_unlock($1)")
            .bind(self.key)
            .fetch_one(&mut self.conn)
            .await?;
        held_at_release(released, "pg_advisory_unlock")
    }
}

struct FencedWorker {
    conn: PgConnection,
    key: i64,
    /// The fence table's key: the lock's key as 64 hex digits.
    khash: String,
    /// The last grant's fencing token.
    last: i64,
}

#[async_trait]
impl Worker for FencedWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let (taken, fence, limited): (i32, i64, i64) = sqlx::query_as(FENCED_LOCK)
            .bind(self.key)
            .bind(super::LEASE_MS.to_string())
            .bind(&self.khash)
            .fetch_one(&mut self.conn)
            .await?;
        if taken != 1 || limited != 1 {
            return Err(
                format!("fenced pg_advisory_lock: taken {taken}, limit set {limited}").into(),
            );
        }
        // Within one worker, tokens must increase; across workers the bench's counter
        // checks exclusion.
        if fence <= self.last {
            return Err(
                format!("fenced pg_advisory_lock: token {fence} after {}", self.last).into(),
            );
        }
        self.last = fence;
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let (released, _, _): (i32, String, String) = sqlx::query_as(FENCED_UNLOCK)
            .bind(self.key)
            .fetch_one(&mut self.conn)
            .await?;
        held_at_release(released == 1, "fenced pg_advisory_unlock")
    }
}

/// Ok if the lock was `held` when `what` let go of it.
fn held_at_release(held: bool, what: &str) -> Result<(), BenchError> {
    if held {
        Ok(())
    } else {
        Err(format!("{what}: not held").into())
    }
}
