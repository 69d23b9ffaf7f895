//! The whole conformance suite against a real redis-server started for the test.
#![cfg(feature = "redis")]

use std::sync::Arc;

mod redis_support;
use conformance_tests::checker::{self, Budget};
use conformance_tests::run_suite;
use conformance_tests::server::{specs::REDIS, SharedServer, TestServer};
use redis_support::{Inspect, RedLock, Redis};

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
    let redlock = Arc::new(RedLock::new(urls));
    let report = run_suite(redlock.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    checker::check(redlock, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
}
