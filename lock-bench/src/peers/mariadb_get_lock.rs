//! The floor on MariaDB and MySQL: `GET_LOCK` + `RELEASE_LOCK` on a connection of its
//! own, through sqlx. The server queues the waiters; nothing is written. Beside it,
//! the same floor plus the server work of the session strategy's promises, to tell
//! the server's share of that strategy's cycle from the client's.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, Connection, MySqlConnection};

use crate::contender::{BenchError, Contender, Role, Worker};

/// How long one `GET_LOCK` may wait, in seconds: longer than any bench run.
const WAIT_SECONDS: i64 = 3600;

/// What the floor with promises needs on the server, made when missing: a fence
/// table the server keeps in memory only, as the session strategy's is, and that
/// strategy's try and release as two procedures, so that each is one statement the
/// server parses, as they are there.
const FENCED_SETUP: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS bench_get_lock_fences \
     (khash VARCHAR(64) CHARACTER SET ascii PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=MEMORY",
    // Takes the lock as the floor does and, if taken, sets the session's silence limit
    // and draws a fencing token, one past the key's last and never below the server
    // clock in µs; answers the token, or 0.
    "CREATE PROCEDURE IF NOT EXISTS bench_get_lock_take \
     (IN a_name VARCHAR(64), IN a_limit BIGINT, IN a_wait BIGINT) MODIFIES SQL DATA \
     BEGIN \
     IF GET_LOCK(a_name, a_wait) = 1 THEN \
     SET SESSION wait_timeout = a_limit; \
     INSERT INTO bench_get_lock_fences (khash, fence) \
     VALUES (a_name, LAST_INSERT_ID(CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED))) \
     ON DUPLICATE KEY UPDATE fence = \
     LAST_INSERT_ID(GREATEST(fence + 1, CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED))); \
     SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS fence; \
     ELSE SELECT CAST(0 AS SIGNED) AS fence; \
     END IF; \
     END",
    // Lets go of the lock as the floor does, under the connection's own release fence
    // (the name a force-unlock takes before it kills), and puts the silence limit back;
    // answers 1 if the lock was held.
    "CREATE PROCEDURE IF NOT EXISTS bench_get_lock_free (IN a_name VARCHAR(64)) MODIFIES SQL DATA \
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
        Ok(Box::new(FencedWorker {
            conn,
            name: format!("bench-get-lock-fenced:{name}"),
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
    name: String,
    /// The last grant's fencing token.
    last: i64,
}

#[async_trait]
impl Worker for FencedWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let (fence,): (i64,) = sqlx::query_as("CALL bench_get_lock_take(?, ?, ?)")
            .bind(&self.name)
            .bind(30_i64)
            .bind(WAIT_SECONDS)
            .fetch_one(&mut self.conn)
            .await?;
        // Within one worker, tokens must increase; across workers the bench's counter
        // checks exclusion.
        if fence > self.last {
            self.last = fence;
            Ok(())
        } else {
            Err(format!("fenced GET_LOCK: token {fence} after {}", self.last).into())
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let (released, fenced): (i64, i64) = sqlx::query_as("CALL bench_get_lock_free(?)")
            .bind(&self.name)
            .fetch_one(&mut self.conn)
            .await?;
        if released == 1 && fenced == 1 {
            Ok(())
        } else {
            Err(format!("fenced RELEASE_LOCK: released {released}, fenced {fenced}").into())
        }
    }
}
