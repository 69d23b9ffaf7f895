//! The lock most teams write first: one row per held lock, inserted if absent and
//! deleted by its owner, polled while someone else's row is there. No fencing, no
//! expiry takeover, no wake-ups: what a library has to earn its extra cost against.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, AnyConnection, Connection};

use super::POLL_EVERY;
use crate::contender::{BenchError, Contender, Role, Worker};

/// The recipe's statements in one SQL dialect.
struct Statements {
    create: &'static str,
    insert: &'static str,
    delete: &'static str,
}

const POSTGRES: Statements = Statements {
    create: "CREATE TABLE IF NOT EXISTS bench_naive_locks \
             (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)",
    insert: "INSERT INTO bench_naive_locks VALUES ($1, $2, now() + interval '30 seconds') \
             ON CONFLICT (name) DO NOTHING",
    delete: "DELETE FROM bench_naive_locks WHERE name = $1 AND owner = $2",
};

const MYSQL: Statements = Statements {
    create: "CREATE TABLE IF NOT EXISTS bench_naive_locks \
             (name VARCHAR(191) PRIMARY KEY, owner VARCHAR(64) NOT NULL, expires_at DATETIME(6) NOT NULL)",
    insert: "INSERT IGNORE INTO bench_naive_locks VALUES (?, ?, NOW(6) + INTERVAL 30 SECOND)",
    delete: "DELETE FROM bench_naive_locks WHERE name = ? AND owner = ?",
};

const SQLITE: Statements = Statements {
    create: "CREATE TABLE IF NOT EXISTS bench_naive_locks \
             (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TEXT NOT NULL)",
    insert: "INSERT INTO bench_naive_locks VALUES (?, ?, datetime('now', '+30 seconds')) \
             ON CONFLICT (name) DO NOTHING",
    delete: "DELETE FROM bench_naive_locks WHERE name = ? AND owner = ?",
};

/// The naive lock table at `url` (PostgreSQL, MySQL/MariaDB or SQLite).
pub struct NaiveTable {
    url: String,
    statements: &'static Statements,
}

impl NaiveTable {
    pub fn new(url: &str) -> Self {
        sqlx::any::install_default_drivers();
        let statements = if url.starts_with("postgres") {
            &POSTGRES
        } else if url.starts_with("sqlite") {
            &SQLITE
        } else {
            &MYSQL
        };
        // SQLite: create the file if the bench's own lock has not yet.
        let url = if url.starts_with("sqlite") && !url.contains('?') {
            format!("{url}?mode=rwc")
        } else {
            url.to_owned()
        };
        Self { url, statements }
    }
}

#[async_trait]
impl Contender for NaiveTable {
    fn name(&self) -> String {
        "naive lock table".into()
    }

    fn role(&self) -> Role {
        Role::Peer
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let mut conn = AnyConnection::connect(&self.url).await?;
        sqlx::query(self.statements.create)
            .execute(&mut conn)
            .await?;
        Ok(Box::new(NaiveWorker {
            conn,
            statements: self.statements,
            name: format!("bench-naive:{name}"),
            owner: format!("{:x}", rand::random::<u64>()),
        }))
    }
}

struct NaiveWorker {
    conn: AnyConnection,
    statements: &'static Statements,
    name: String,
    owner: String,
}

#[async_trait]
impl Worker for NaiveWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        loop {
            let inserted = sqlx::query(self.statements.insert)
                .bind(&self.name)
                .bind(&self.owner)
                .execute(&mut self.conn)
                .await;
            match inserted {
                Ok(done) if done.rows_affected() == 1 => return Ok(()),
                Ok(_) => {}
                // InnoDB's insert on a held key can deadlock with a concurrent
                // delete; SQLite's writer may be busy: both mean "not yet".
                Err(e) if is_conflict(&e) => {}
                Err(e) => return Err(e.into()),
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let deleted = sqlx::query(self.statements.delete)
            .bind(&self.name)
            .bind(&self.owner)
            .execute(&mut self.conn)
            .await?
            .rows_affected();
        if deleted == 1 {
            Ok(())
        } else {
            Err("the naive lock row was not ours".into())
        }
    }
}

/// A deadlock (SQLSTATE 40001 from MySQL, 40P01 from PostgreSQL) or a busy SQLite
/// file (5, 6 and their extended codes).
fn is_conflict(e: &sqlx::Error) -> bool {
    let code = match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    };
    matches!(
        code.as_deref(),
        Some("40001" | "40P01" | "5" | "6" | "517" | "261")
    )
}
