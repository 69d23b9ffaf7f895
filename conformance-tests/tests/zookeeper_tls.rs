//! The conformance suite over TLS against a real ZooKeeper that has only a TLS client
//! port (Netty) and asks for a client certificate, with certificates made by the test,
//! and the refusal of a client trusting another CA.

#[path = "zookeeper/backend.rs"]
mod backend;

use std::sync::Arc;
use std::time::Duration;

use backend::Zk;
use conformance_tests::run_transport_suite;
use conformance_tests::server::tls::test_certs;
use conformance_tests::server::{tls_specs::ZOOKEEPER_TLS, TestServer};
use lock_core::DistributedLockExt as _;
use lock_core::LockClient;
use lock_zookeeper::{ZkBackend, ZkConfig};

/// How long a refused client may take to be told: its connect timeout and slack.
const TIMEOUT: Duration = Duration::from_secs(3);
const SLACK: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_tls() {
    let server = TestServer::start(&ZOOKEEPER_TLS)
        .await
        .expect("zookeeper with TLS starts");
    let url = server.url();
    let operator = serving(&url).await;
    let zk = Arc::new(Zk {
        name: "zookeeper+tls",
        url: url.clone(),
        server: server.freezer(),
        operator,
    });
    let report = run_transport_suite(zk.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());

    let wrong_ca = test_certs().trusting_other_ca(&url);
    let err = refused(&wrong_ca).await;
    println!("zookeeper+tls: a client trusting another CA is refused: {err}");
    assert!(
        err.contains("certificate"),
        "a wrong CA should be named as a likely certificate error: {err}"
    );
    // The server still serves a client that trusts the right CA: the refusal was the
    // certificate's, not a server gone.
    let _ = serving(&url).await;
}

/// A first session, once the fresh server serves (its port opens before).
async fn serving(url: &str) -> ZkBackend {
    let started = tokio::time::Instant::now();
    loop {
        let url = format!("{url}&connect_timeout=5s");
        match ZkBackend::connect_url(&url).await {
            Ok(backend) => return backend,
            Err(err) if started.elapsed() > Duration::from_secs(60) => {
                panic!("zookeeper at {url} did not serve over TLS within 60 s: {err}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Takes a lock through `url` and expects a refusal within the timeout and slack.
async fn refused(url: &str) -> String {
    let config = ZkConfig::from_url(url)
        .expect("valid settings")
        .with_connect_timeout(TIMEOUT);
    let client = LockClient::new(ZkBackend::new(config).expect("valid settings"));
    let attempt = async { client.lock("tls-check")?.try_acquire().await };
    let outcome = tokio::time::timeout(TIMEOUT + SLACK, attempt)
        .await
        .unwrap_or_else(|_| panic!("{url}: no answer within {:?}", TIMEOUT + SLACK));
    match outcome {
        Ok(got) => panic!(
            "{url}: answered ({:?}), but the server requires TLS with the test CA",
            got.is_some()
        ),
        Err(err) => err.to_string(),
    }
}
