//! The conformance suite over TLS against a real etcd that serves clients over TLS
//! only and asks for a client certificate, with certificates made by the test, and
//! the refusals of clients without TLS or trusting another CA.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::run_transport_suite;
use conformance_tests::server::tls::test_certs;
use conformance_tests::server::{tls_specs::ETCD_TLS, TestServer};
use lock_etcd::{EtcdBackend, EtcdConfig};

mod etcd_support;
use etcd_support::{ready, Etcd};

/// How long a refused client may take to be told: its connect timeout and slack.
const TIMEOUT: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tls() {
    let server = TestServer::start(&ETCD_TLS)
        .await
        .expect("etcd with TLS starts");
    let url = server.url();
    let admin = ready(&url).await;
    let etcd = Arc::new(Etcd {
        name: "etcd+tls",
        url: url.clone(),
        admin,
    });
    let report = run_transport_suite(etcd.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());

    let port = server.port().expect("started here");
    let err = refused(&format!("etcd://127.0.0.1:{port}")).await;
    println!("etcd+tls: a client without TLS is refused: {err}");
    let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base);
    let err = refused(&format!("{base}?tls_ca={}", test_certs().ca().display())).await;
    println!("etcd+tls: a client without a certificate is refused: {err}");
    let wrong_ca = test_certs().trusting_other_ca(&url);
    let err = refused(&wrong_ca).await;
    println!("etcd+tls: a client trusting another CA is refused: {err}");
    assert!(
        err.to_lowercase().contains("certificate"),
        "a wrong CA should be named as a certificate error: {err}"
    );
}

/// Connects through `url` and expects a refusal within the timeout and slack.
async fn refused(url: &str) -> String {
    let config = EtcdConfig::from_url(url)
        .expect("valid settings")
        .with_connect_timeout(TIMEOUT)
        .with_request_timeout(TIMEOUT);
    let started = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(2 * TIMEOUT + SLACK, EtcdBackend::connect(config))
        .await
        .unwrap_or_else(|_| panic!("{url}: no answer within {:?}", 2 * TIMEOUT + SLACK));
    match outcome {
        Ok(_) => panic!("{url}: connected, but the server requires TLS with a client certificate of the test CA"),
        Err(err) => {
            println!("  after {:?}", started.elapsed());
            err.to_string()
        }
    }
}
