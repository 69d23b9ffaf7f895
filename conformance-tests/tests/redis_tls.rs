//! The conformance suite over TLS against a real redis-server that has only a TLS
//! port and asks for a client certificate, with certificates made by the test, and the
//! refusals of clients without TLS or trusting another CA; then against a Redis
//! Cluster and a Sentinel deployment over TLS.

use std::sync::Arc;
use std::time::Duration;

mod redis_support;
use conformance_tests::run_transport_suite;
use conformance_tests::server::redis_cluster::ClusterDeployment;
use conformance_tests::server::sentinel::SentinelDeployment;
use conformance_tests::server::tls::test_certs;
use conformance_tests::server::{tls_specs::REDIS_TLS, TestServer};
use lock_core::{DistributedLockExt as _, LockClient};
use lock_redis::{RedisBackend, RedisConfig};
use redis_support::{holder_and_waiter_across, Inspect, Redis};

/// How long a refused client may take to be told: its timeouts and slack.
const TIMEOUT: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tls() {
    let server = TestServer::start(&REDIS_TLS)
        .await
        .expect("redis-server with TLS starts");
    let url = server.url();
    let redis = Arc::new(Redis::new(
        "redis+tls",
        Inspect::Url(url.clone()),
        url.clone(),
    ));
    let report = run_transport_suite(redis.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());

    let port = server.port().expect("started here");
    let err = refused(&format!("redis://127.0.0.1:{port}")).await;
    println!("redis+tls: a client without TLS is refused: {err}");
    let wrong_ca = test_certs().trusting_other_ca(&url);
    let err = refused(&wrong_ca).await;
    println!("redis+tls: a client trusting another CA is refused: {err}");
    assert!(
        err.to_lowercase().contains("certificate"),
        "a wrong CA should be named as a certificate error: {err}"
    );
}

/// The suite on a Redis Cluster over TLS (`rediss+cluster://`): every
/// node serves clients, its bus and its replica over TLS, and redirects TLS clients to
/// TLS ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_tls() {
    let cluster = Arc::new(
        ClusterDeployment::start_tls()
            .await
            .expect("the cluster forms with TLS"),
    );
    let url = cluster.tls_url().expect("started with TLS");
    let backend = Redis::new("redis-cluster+tls", Inspect::Cluster(cluster.clone()), url);
    let backend = Arc::new(backend);
    let report = run_transport_suite(backend.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
}

/// The suite through Redis Sentinel over TLS (`rediss+sentinel://`):
/// sentinels and data nodes serve clients, replication and each other over TLS; then a
/// planned failover while one client holds a lock and another waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_tls() {
    let deployment = Arc::new(
        SentinelDeployment::start_tls(1)
            .await
            .expect("the Sentinel deployment starts with TLS"),
    );
    let url = deployment.tls_url().expect("started with TLS");
    let backend = Redis::new(
        "redis-sentinel+tls",
        Inspect::Sentinel(deployment.clone()),
        url.clone(),
    );
    let backend = Arc::new(backend);
    let report = run_transport_suite(backend.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    holder_and_waiter_across(&url, "job", || async {
        let old = deployment.primary_port().await.expect("a primary");
        deployment.failover().await.expect("SENTINEL FAILOVER");
        let new = deployment
            .wait_for_new_primary(old)
            .await
            .expect("a new primary");
        format!("SENTINEL FAILOVER over TLS from port {old} to {new}")
    })
    .await;
}

/// Takes a lock through `url` and expects a refusal within the timeouts and slack.
async fn refused(url: &str) -> String {
    let config = RedisConfig::from_url(url)
        .expect("valid settings")
        .with_connect_timeout(TIMEOUT)
        .with_request_timeout(TIMEOUT);
    let client = LockClient::new(RedisBackend::new(config).expect("a backend"));
    let started = tokio::time::Instant::now();
    let attempt = async { client.lock("tls-check")?.try_acquire().await };
    let outcome = tokio::time::timeout(2 * TIMEOUT + SLACK, attempt)
        .await
        .unwrap_or_else(|_| panic!("{url}: no answer within {:?}", 2 * TIMEOUT + SLACK));
    match outcome {
        Ok(got) => panic!(
            "{url}: answered ({:?}), but the server requires TLS with the test CA",
            got.is_some()
        ),
        Err(err) => {
            println!("  after {:?}", started.elapsed());
            err.to_string()
        }
    }
}
