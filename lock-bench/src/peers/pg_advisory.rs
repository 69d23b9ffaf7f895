//! The floor on PostgreSQL: `pg_advisory_lock` + `pg_advisory_unlock` on a session of
//! its own, through sqlx. The server queues the waiters and hands the lock over
//! itself; nothing is written, and nothing survives the session.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, Connection, PgConnection};

use crate::contender::{BenchError, Contender, Role, Worker};

/// Advisory locks at `url`.
pub struct PgAdvisory {
    url: String,
}

impl PgAdvisory {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for PgAdvisory {
    fn name(&self) -> String {
        "pg_advisory_lock".into()
    }

    fn role(&self) -> Role {
        Role::Floor
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        Ok(Box::new(AdvisoryWorker {
            conn: PgConnection::connect(&self.url).await?,
            key: super::key_of(name),
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
        if released {
            Ok(())
        } else {
            Err("pg_advisory_unlock: not held".into())
        }
    }
}
