//! The whole conformance suite against a real redis-server started for the test.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::server::{specs::REDIS, TestServer};
use conformance_tests::{run_suite, Backend, ClientOptions, HolderSpec};
use lock_core::{LockBackend, LockFamily, LockKey, LockProvider};
use lock_redis::{redis, RedLockBackend, RedisBackend, RedisConfig};

/// Every key of `namespace` on the server at `url` but the fencing counters, which stay
/// by design: the exclusive lock's bare key `ns:name` and the `{ns:name}:...` keys.
async fn leftovers(url: &str, namespace: &str) -> Result<Vec<String>, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut left = Vec::new();
    for pattern in [format!("{namespace}:*"), format!("{{{namespace}:*")] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        left.extend(keys.into_iter().filter(|k| !k.ends_with("}:fence")));
    }
    Ok(left)
}

struct Redis {
    url: String,
    /// For the fault hooks: a backend of its own, like an operator's.
    admin: RedisBackend,
}

impl Redis {
    fn config(&self) -> RedisConfig {
        RedisConfig::builder(&self.url)
            .connect_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_secs(1))
            .waiter_lease(Duration::from_secs(1))
            .build()
            .expect("valid URL")
    }
}

#[async_trait]
impl Backend for Redis {
    fn name(&self) -> &str {
        "redis"
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(RedisBackend::new(self.config())?)
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        leftovers(&self.url, namespace).await
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        self.admin
            .force_unlock(key, family)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn holder_command(&self, spec: &HolderSpec) -> Option<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
        cmd.args([
            "--url",
            &self.url,
            "--namespace",
            &spec.namespace,
            "--name",
            &spec.name,
        ]);
        cmd.args([
            "--watchdog-lease-ms",
            &spec.watchdog_lease.as_millis().to_string(),
        ]);
        Some(cmd)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_conformance() {
    let server = TestServer::start(&REDIS)
        .await
        .expect("redis-server starts");
    let url = server.url();
    let admin = RedisBackend::new(RedisConfig::from_url(&url).unwrap()).unwrap();
    let report = run_suite(Arc::new(Redis { url, admin })).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
}

/// RedLock over five masters: the exclusive-lock cases (fair and read-write locks are
/// not offered on RedLock, so the suite skips them).
struct RedLock {
    urls: Vec<String>,
    admin: RedLockBackend,
}

impl RedLock {
    fn backend(&self) -> lock_core::Result<RedLockBackend> {
        RedLockBackend::new(self.urls.iter().map(|url| {
            RedisConfig::builder(url)
                .connect_timeout(Duration::from_secs(1))
                .command_timeout(Duration::from_secs(1))
                .build()
                .expect("valid URL")
        }))
    }
}

#[async_trait]
impl Backend for RedLock {
    fn name(&self) -> &str {
        "redlock"
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(self.backend()?)
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        let mut left = Vec::new();
        for url in &self.urls {
            let keys = leftovers(url, namespace).await?;
            left.extend(keys.into_iter().map(|k| format!("{url} {k}")));
        }
        Ok(left)
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        self.admin
            .force_unlock(key, family)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_conformance() {
    let mut servers = Vec::new();
    for _ in 0..5 {
        servers.push(
            TestServer::start(&REDIS)
                .await
                .expect("redis-server starts"),
        );
    }
    let urls: Vec<String> = servers.iter().map(TestServer::url).collect();
    let admin = RedLockBackend::from_urls(&urls).unwrap();
    let report = run_suite(Arc::new(RedLock { urls, admin })).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
}
