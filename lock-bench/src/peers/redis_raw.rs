//! The floor on Redis: the two round trips every Redis lock needs, a `SET key token
//! NX PX` to take it and a compare-and-delete script to give it back, with polling
//! while it is held (the recipe most hand-rolled Redis locks use). Beside it, the same
//! floor plus the server work of this library's promises, to tell the server's share
//! of our cycle from the client's.

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;

use super::POLL_EVERY;
use crate::contender::{BenchError, Contender, Role, Worker};

const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// `SET NX PX` + Lua release at the floor's URL, bare or with the server work of this
/// library's promises: a fencing token per grant, a receipt and a look for waiters per
/// release, each inside its script call.
pub struct RawRedis(pub super::Floor);

#[async_trait]
impl Contender for RawRedis {
    fn name(&self) -> String {
        self.0
            .name("SET NX PX + Lua", "SET NX PX + Lua, fenced, with receipts")
    }

    fn role(&self) -> Role {
        self.0.role()
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let conn = redis::Client::open(self.0.url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let token = format!("{:x}", rand::random::<u64>());
        if !self.0.promises {
            return Ok(Box::new(RawWorker {
                conn,
                key: format!("bench-raw:{name}"),
                token,
                release: redis::Script::new(RELEASE),
            }));
        }
        let key = format!("bench-fenced:{name}");
        Ok(Box::new(FencedWorker {
            conn,
            fence: format!("{{{key}}}:fence"),
            waiters: format!("{{{key}}}:waiting"),
            key,
            token,
            value: String::new(),
            acquire: redis::Script::new(FENCED_ACQUIRE),
            release: redis::Script::new(FENCED_RELEASE),
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
                .arg(super::LEASE_MS)
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

/// Takes the lock as the floor does, and draws a fencing token that keeps
/// increasing when the counter is lost (floored by the server clock), stored in the
/// lock's value for anyone who reads the holder.
const FENCED_ACQUIRE: &str = r"
if redis.call('exists', KEYS[1]) == 1 then return 0 end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = redis.call('incr', KEYS[2])
if fence <= now then
  fence = now + 1
  redis.call('set', KEYS[2], string.format('%d', fence), 'PX', 604800000)
else
  redis.call('pexpire', KEYS[2], 604800000)
end
redis.call('set', KEYS[1], ARGV[1] .. ':' .. string.format('%d', fence), 'PX', ARGV[2])
return fence
";

/// Gives the lock back as the floor does, leaving a receipt (so a release run again
/// after its reply was lost knows it went through) and looking for a waiter to wake.
const FENCED_RELEASE: &str = r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local left = math.max(redis.call('pttl', KEYS[1]), 0)
redis.call('set', KEYS[2], ARGV[1], 'PX', left + 5000)
redis.call('del', KEYS[1])
redis.call('exists', KEYS[3])
return 1
";

struct FencedWorker {
    conn: MultiplexedConnection,
    key: String,
    fence: String,
    waiters: String,
    token: String,
    /// What the last grant stored: the token and its fence.
    value: String,
    acquire: redis::Script,
    release: redis::Script,
}

#[async_trait]
impl Worker for FencedWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        loop {
            let fence: u64 = self
                .acquire
                .key(&self.key)
                .key(&self.fence)
                .arg(&self.token)
                .arg(super::LEASE_MS)
                .invoke_async(&mut self.conn)
                .await?;
            if fence > 0 {
                self.value = format!("{}:{fence}", self.token);
                return Ok(());
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let receipt = format!("{{{}}}:released:{}", self.key, self.value);
        let released: i64 = self
            .release
            .key(&self.key)
            .key(&receipt)
            .key(&self.waiters)
            .arg(&self.value)
            .invoke_async(&mut self.conn)
            .await?;
        if released == 1 {
            Ok(())
        } else {
            Err("the fenced raw lock was not ours to release".into())
        }
    }
}
