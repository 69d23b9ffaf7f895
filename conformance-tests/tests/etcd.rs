//! The whole conformance suite against a real etcd started for the test.
#![cfg(feature = "etcd")]

use std::sync::Arc;

use conformance_tests::checker::{self, Budget};
use conformance_tests::run_suite;
use conformance_tests::server::{specs::ETCD, SharedServer, TestServer};

mod etcd_support;
use etcd_support::{ready, Etcd};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_conformance() {
    let server = TestServer::start(&ETCD).await.expect("etcd starts");
    let url = server.url();
    let admin = ready(&url).await;
    let etcd = Arc::new(Etcd {
        name: "etcd",
        url,
        admin,
    });
    let report = run_suite(etcd.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    checker::check(etcd.clone(), Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
    // Again with one client behind a proxy that is cut at a random moment, and the
    // server frozen or restarted now and then.
    let admin = etcd.admin.clone();
    let cut_off = checker::ProxiedUrl::new(&etcd.url, move |through| {
        Arc::new(Etcd {
            name: "etcd",
            url: through,
            admin: admin.clone(),
        })
    })
    .expect("a loopback URL")
    .with_server(SharedServer::new(server))
    .restarting(checker::AfterRestart::KeepsLocks);
    checker::check_behind_proxy(
        etcd,
        Arc::new(cut_off),
        Budget::seeds(checker::CUT_OFF_SEEDS),
    )
    .await;
}
