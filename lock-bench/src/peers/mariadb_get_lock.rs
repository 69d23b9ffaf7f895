//! The floor on MariaDB and MySQL: `GET_LOCK` + `RELEASE_LOCK` on a connection of its
//! own, through sqlx. The server queues the waiters; nothing is written. Beside it,
//! the same floor plus the server work of the session strategy's promises, done by a
//! bare client, to tell our client's share of that strategy's cycle.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, Connection, MySqlConnection};

use crate::contender::{BenchError, Contender, Role, Worker};

/// How long one `GET_LOCK` may wait, in seconds: longer than any bench run.
const WAIT_SECONDS: i64 = 3600;

/// What the floor with promises needs on the server: a fence table the server keeps
/// in memory only, as the session strategy's is, and that strategy's try and release
/// as two procedures, one statement each for the server to parse, as they are there
/// (with the same parameters and security, and the take's wait added). The procedures
/// are made anew each time, so a server used before runs the bodies below.
const FENCED_SETUP: [&str; 5] = [
    "CREATE TABLE IF NOT EXISTS bench_get_lock_fences \
     (khash CHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=MEMORY",
    "DROP PROCEDURE IF EXISTS bench_get_lock_take",
    // Takes the lock as the floor does (waiting up to `a_wait` s) and, if taken, sets
    // the session's silence limit and draws the fencing token of the key `a_key`, one
    // past its last and never below the server clock in µs; answers the token, or 0.
    "CREATE PROCEDURE bench_get_lock_take \
     (IN a_name VARCHAR(64) CHARACTER SET ascii, IN a_limit BIGINT, \
     IN a_key VARCHAR(64) CHARACTER SET ascii, IN a_wait BIGINT) \
     MODIFIES SQL DATA SQL SECURITY INVOKER \
     BEGIN \
     IF GET_LOCK(a_name, a_wait) = 1 THEN \
     SET SESSION wait_timeout = a_limit; \
     INSERT INTO bench_get_lock_fences (khash, fence) \
     VALUES (a_key, LAST_INSERT_ID(CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED))) \
     ON DUPLICATE KEY UPDATE fence = \
     LAST_INSERT_ID(GREATEST(fence + 1, CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED))); \
     SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS fence; \
     ELSE \
     SET SESSION wait_timeout = @@GLOBAL.wait_timeout; \
     SELECT CAST(0 AS SIGNED) AS fence; \
     END IF; \
     END",
    "DROP PROCEDURE IF EXISTS bench_get_lock_free",
    // Under the connection's own release fence (the name a force-unlock takes before
    // it kills), puts the silence limit back and lets go of the lock as the floor does;
    // answers whether the lock was held, and whether the release fence was had.
    "CREATE PROCEDURE bench_get_lock_free (IN a_name VARCHAR(64) CHARACTER SET ascii) \
     MODIFIES SQL DATA SQL SECURITY INVOKER \
     BEGIN \
     DECLARE a_fenced BIGINT DEFAULT COALESCE(GET_LOCK(CONCAT('bench_connection_', CONNECTION_ID()), 10), 0); \
     DECLARE a_released BIGINT DEFAULT 0; \
     SET SESSION wait_timeout = @@GLOBAL.wait_timeout; \
     SET a_released = COALESCE(RELEASE_LOCK(a_name), 0); \
     DO RELEASE_LOCK(CONCAT('bench_connection_', CONNECTION_ID())); \
     SELECT a_released AS released, a_fenced AS fenced; \
     END",
];

/// Named locks at the floor's URL, bare or with the server work of the session
/// strategy's promises inside its two statements: a fencing token and a silence limit
/// per grant, the limit put back at release under a release fence.
pub struct GetLock(pub super::Floor);

#[async_trait]
impl Contender for GetLock {
    fn name(&self) -> String {
        self.0
            .name("GET_LOCK", "GET_LOCK, fenced, with a silence limit")
    }

    fn role(&self) -> Role {
        self.0.role()
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let mut conn = MySqlConnection::connect(&self.0.url).await?;
        if !self.0.promises {
            return Ok(Box::new(GetLockWorker {
                conn,
                name: format!("bench-get-lock:{name}"),
            }));
        }
        // Workers are made one after another, so these never race.
        for statement in FENCED_SETUP {
            sqlx::raw_sql(statement).execute(&mut conn).await?;
        }
        // Hex digests as the session strategy's names and keys are.
        let digest = |what: &str| format!("{:064x}", super::key_of(what) as u64);
        Ok(Box::new(FencedWorker {
            conn,
            name: digest(&format!("get-lock-fenced:{name}")),
            khash: digest(&format!("get-lock-fence:{name}")),
            last: 0,
        }))
    }
}

struct GetLockWorker {
    conn: MySqlConnection,
    name: String,
}

#[async_trait]
impl Worker for GetLockWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let (got,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK(?, ?)")
            .bind(&self.name)
            .bind(WAIT_SECONDS)
            .fetch_one(&mut self.conn)
            .await?;
        match got {
            Some(1) => Ok(()),
            other => Err(format!("GET_LOCK returned {other:?}").into()),
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let (released,): (Option<i64>,) = sqlx::query_as("SELECT RELEASE_LOCK(?)")
            .bind(&self.name)
            .fetch_one(&mut self.conn)
            .await?;
        match released {
            Some(1) => Ok(()),
            other => Err(format!("RELEASE_LOCK returned {other:?}").into()),
        }
    }
}

struct FencedWorker {
    conn: MySqlConnection,
    /// The `GET_LOCK` name.
    name: String,
    /// The fence table's key.
    khash: String,
    /// The last grant's fencing token.
    last: i64,
}

#[async_trait]
impl Worker for FencedWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        // Every row of the reply, as the session strategy reads a `CALL`'s: its last
        // packet comes after the row.
        let rows: Vec<(i64,)> = sqlx::query_as("CALL bench_get_lock_take(?, ?, ?, ?)")
            .bind(&self.name)
            .bind((super::LEASE_MS / 1000) as i64)
            .bind(&self.khash)
            .bind(WAIT_SECONDS)
            .fetch_all(&mut self.conn)
            .await?;
        let fence = match rows.as_slice() {
            [(0,)] => {
                return Err(format!("fenced GET_LOCK: not granted in {WAIT_SECONDS} s").into())
            }
            [(fence,)] => *fence,
            other => return Err(format!("fenced GET_LOCK answered {other:?}").into()),
        };
        // Within one worker, tokens must increase; across workers the bench's counter
        // checks exclusion.
        if fence <= self.last {
            return Err(format!("fenced GET_LOCK: token {fence} after {}", self.last).into());
        }
        self.last = fence;
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as("CALL bench_get_lock_free(?)")
            .bind(&self.name)
            .fetch_all(&mut self.conn)
            .await?;
        match rows.as_slice() {
            [(1, 1)] => Ok(()),
            other => {
                Err(format!("fenced RELEASE_LOCK answered (released, fenced) {other:?}").into())
            }
        }
    }
}
