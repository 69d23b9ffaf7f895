//! A MultiLock over two real servers at once: a Redis lock (a cache entry) and the write
//! side of a PostgreSQL read-write lock (its table), as users combine them. All or
//! nothing, no deadlock between opposite build orders, a loss on one server reported
//! through the one guard, and nothing left on either server after a failure or a
//! cancelled acquire.
#![cfg(all(feature = "redis", feature = "postgres"))]

#[path = "sql_support/servers.rs"]
mod servers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conformance_tests::server::specs::{POSTGRES, REDIS};
use conformance_tests::server::TestServer;
use lock_core::prelude::*;
use lock_core::{LockClient, LockProvider, MultiLock};
use lock_redis::{RedisBackend, RedisConfig};
use lock_sql::{SqlBackend, SqlConfig};

const SLACK: Duration = Duration::from_secs(5);

struct Servers {
    redis_url: String,
    postgres_url: String,
    namespace: String,
}

impl Servers {
    fn redis(&self, watchdog_lease: Duration) -> Arc<dyn LockProvider> {
        let config = RedisConfig::from_url(&self.redis_url).expect("redis URL");
        let backend = RedisBackend::new(config).expect("redis backend");
        Arc::new(
            LockClient::builder(backend)
                .namespace(&self.namespace)
                .watchdog_lease(watchdog_lease)
                .build()
                .expect("client"),
        )
    }

    async fn postgres(&self) -> Arc<dyn LockProvider> {
        let options = SqlConfig::from_url(&self.postgres_url)
            .expect("database URL")
            .with_max_connections(4);
        let backend = SqlBackend::connect(options)
            .await
            .expect("postgres backend");
        Arc::new(
            LockClient::builder(backend)
                .namespace(&self.namespace)
                .build()
                .expect("client"),
        )
    }

    /// The cache entry on Redis and the table on PostgreSQL, listed in either order.
    async fn both(&self, table_first: bool) -> MultiLock {
        self.both_with(table_first, Duration::from_secs(10)).await
    }

    async fn both_with(&self, table_first: bool, redis_watchdog: Duration) -> MultiLock {
        let cache = self.redis(redis_watchdog).lock("user:42").expect("lock");
        let table = self.postgres().await.rw_lock("users").expect("lock");
        let builder = MultiLock::builder();
        let builder = if table_first {
            builder.write(table).lock(cache)
        } else {
            builder.lock(cache).write(table)
        };
        builder.build().expect("multi-lock")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_postgres_as_one_lock() {
    let redis = TestServer::start(&REDIS)
        .await
        .expect("redis-server starts");
    let postgres = TestServer::start(&POSTGRES).await.expect("postgres starts");
    servers::wait_until_ready(&postgres.url()).await;
    let servers = Servers {
        redis_url: redis.url(),
        postgres_url: postgres.url(),
        namespace: format!("mixed{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
    };
    opposite_orders_never_deadlock(&servers).await;
    one_held_member_fails_the_whole(&servers).await;
    cancelled_acquire_leaves_nothing(&servers).await;
    a_loss_on_one_server_is_reported(&servers).await;
}

async fn opposite_orders_never_deadlock(servers: &Servers) {
    const ROUNDS: u64 = 50;
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for table_first in [false, true] {
        let lock = servers.both(table_first).await;
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.acquire().await.expect("acquire");
                let backends: Vec<&str> =
                    guard.fencing_tokens().map(|(id, _)| id.backend()).collect();
                assert_eq!(backends, ["redis", "postgres"], "one order: by name");
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(SLACK * 12, task)
            .await
            .expect("a deadlock never ends")
            .expect("worker");
    }
    assert_eq!(counter.load(Ordering::SeqCst), ROUNDS * 2, "lost updates");
}

async fn one_held_member_fails_the_whole(servers: &Servers) {
    let other = servers.postgres().await.rw_lock("users").expect("lock");
    let held = other.read().await.expect("a reader holds the table");
    let lock = servers.both(false).await;
    assert!(lock.try_acquire().await.expect("try").is_none());
    let cache = servers.redis(SLACK).lock("user:42").expect("lock");
    assert!(
        !cache.is_locked().await.expect("is_locked"),
        "the Redis member stayed held after the PostgreSQL member was refused"
    );
    let err = lock
        .acquire_timeout(Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("users"), "{err}");
    assert!(!cache.is_locked().await.expect("is_locked"));
    held.release().await.expect("release");
}

async fn cancelled_acquire_leaves_nothing(servers: &Servers) {
    // By name "user:42" < "users": the Redis member is taken first, then the table
    // is waited for.
    let other = servers.postgres().await.rw_lock("users").expect("lock");
    let held = other.write().await.expect("hold the table");
    let lock = servers.both(true).await;
    let cache = servers.redis(SLACK).lock("user:42").expect("lock");
    let attempt = tokio::time::timeout(Duration::from_secs(1), lock.acquire()).await;
    assert!(attempt.is_err(), "acquired past a held member");
    let next = tokio::time::timeout(SLACK, cache.acquire())
        .await
        .expect("the dropped acquire kept the Redis lock")
        .expect("acquire");
    next.release().await.expect("release");
    held.release().await.expect("release");
}

async fn a_loss_on_one_server_is_reported(servers: &Servers) {
    let watchdog = Duration::from_millis(600);
    let lock = servers.both_with(false, watchdog).await;
    let guard = lock.acquire().await.expect("acquire");
    let lost = guard.lost();
    let operator = servers.redis(SLACK).lock("user:42").expect("lock");
    assert!(operator.force_unlock().await.expect("force unlock"));
    let loss = tokio::time::timeout(watchdog + SLACK, lost)
        .await
        .expect("the loss was reported");
    assert_eq!(loss.id.backend(), "redis", "{loss}");
    assert!(!guard.is_held());
    let err = guard.release().await.unwrap_err();
    assert_eq!(
        err.released(),
        1,
        "the PostgreSQL member was still released: {err}"
    );
    let table = servers.postgres().await.rw_lock("users").expect("lock");
    assert!(!table.is_locked().await.expect("is_locked"));
}
