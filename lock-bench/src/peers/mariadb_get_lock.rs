//! The floor on MariaDB and MySQL: `GET_LOCK` + `RELEASE_LOCK` on a connection of its
//! own, through sqlx. The server queues the waiters; nothing is written.

use async_trait::async_trait;
use distributed_locks::sql::sqlx::{self, Connection, MySqlConnection};

use crate::contender::{BenchError, Contender, Role, Worker};

/// How long one `GET_LOCK` may wait, in seconds: longer than any bench run.
const WAIT_SECONDS: i64 = 3600;

/// Named locks at `url`.
pub struct GetLock {
    url: String,
}

impl GetLock {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for GetLock {
    fn name(&self) -> String {
        "GET_LOCK".into()
    }

    fn role(&self) -> Role {
        Role::Floor
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        Ok(Box::new(GetLockWorker {
            conn: MySqlConnection::connect(&self.url).await?,
            name: format!("bench-get-lock:{name}"),
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
