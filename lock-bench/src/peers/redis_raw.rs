//! The floor on Redis: the two round trips every Redis lock needs, a `SET key token
//! NX PX` to take it and a compare-and-delete script to give it back, with polling
//! while it is held (the recipe most hand-rolled Redis locks use).

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;

use super::POLL_EVERY;
use crate::contender::{BenchError, Contender, Role, Worker};

const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// `SET NX PX` + Lua release at `url`.
pub struct RawRedis {
    url: String,
}

impl RawRedis {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for RawRedis {
    fn name(&self) -> String {
        "SET NX PX + Lua".into()
    }

    fn role(&self) -> Role {
        Role::Floor
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let conn = redis::Client::open(self.url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Box::new(RawWorker {
            conn,
            key: format!("bench-raw:{name}"),
            token: format!("{:x}", rand::random::<u64>()),
            release: redis::Script::new(RELEASE),
        }))
    }
}

struct RawWorker {
    conn: MultiplexedConnection,
    key: String,
    token: String,
    release: redis::Script,
}

#[async_trait]
impl Worker for RawWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        loop {
            let set: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg(&self.token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut self.conn)
                .await?;
            if set.is_some() {
                return Ok(());
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let deleted: i64 = self
            .release
            .key(&self.key)
            .arg(&self.token)
            .invoke_async(&mut self.conn)
            .await?;
        if deleted == 1 {
            Ok(())
        } else {
            Err("the raw lock was not ours to release".into())
        }
    }
}
