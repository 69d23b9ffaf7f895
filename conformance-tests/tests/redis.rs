//! The whole conformance suite against a real redis-server started for the test.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
mod redis_support;
use conformance_tests::checker::{self, Budget};
use conformance_tests::server::{specs::REDIS, SharedServer, TestServer};
use conformance_tests::{run_suite, Backend, ClientOptions};
use lock_core::backend::LockBackend;
use lock_core::{LockFamily, LockKey, LockProvider};
use lock_redis::{RedLockBackend, RedisConfig};
use redis_support::{leftovers, Inspect, Redis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_conformance() {
    let server = TestServer::start(&REDIS)
        .await
        .expect("redis-server starts");
    let url = server.url();
    let redis = Arc::new(Redis::new("redis", Inspect::Url(url.clone()), url));
    let report = run_suite(redis.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    checker::check(redis, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
    // Again with one client behind a proxy that is cut at a random moment, and the
    // server frozen or restarted now and then.
    let url = server.url();
    let server = SharedServer::new(server);
    let direct = url.clone();
    // Inspected directly: the proxy may be cut when the run looks for leftovers.
    let cut_off = checker::ProxiedUrl::new(&url, move |through| {
        Arc::new(Redis::new("redis", Inspect::Url(direct.clone()), through))
    })
    .expect("a loopback URL")
    .with_server(server.clone())
    // Started without persistence.
    .restarting(checker::AfterRestart::ForgetsLocks);
    let redis = Arc::new(Redis::new("redis", Inspect::Url(url.clone()), url));
    checker::check_behind_proxy(
        redis,
        Arc::new(cut_off),
        Budget::seeds(checker::SERVER_SEEDS),
    )
    .await;
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
            RedisConfig::from_url(url)
                .expect("valid URL")
                .with_connect_timeout(Duration::from_secs(1))
                .with_request_timeout(Duration::from_secs(1))
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
    let redlock = Arc::new(RedLock { urls, admin });
    let report = run_suite(redlock.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    checker::check(redlock, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
}
