//! The whole conformance suite against a real ZooKeeper, then the ZooKeeper-specific
//! checks (session expiry, cancel safety, Curator interop, no herd, errors), all on
//! one server started here from Debian's jar.

#[path = "zookeeper/backend.rs"]
mod backend;
#[path = "zookeeper/checks.rs"]
mod checks;
#[path = "zookeeper/faults.rs"]
mod faults;
#[path = "zookeeper/server.rs"]
mod server;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use conformance_tests::checker::{self, Budget};
use conformance_tests::run_suite;
use conformance_tests::server::{SharedServer, TestServer};
use futures::FutureExt;
use lock_zookeeper::ZkBackend;
use tokio::time::Instant;

pub use backend::{Zk, SESSION_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_conformance() {
    let started = Instant::now();
    let mut server = TestServer::start(&server::ZOOKEEPER)
        .await
        .unwrap_or_else(|err| panic!("zookeeper did not start: {err}"));
    let listening = started.elapsed();
    let url = server.url();
    let freezer = server.freezer();
    if let Some(process) = server.process() {
        server::wait_serving(process.port(), Duration::from_secs(30))
            .await
            .unwrap_or_else(|err| panic!("{err}; log:\n{}", process.log_tail()));
    }
    let serving = started.elapsed();
    let operator = ZkBackend::connect_url(&format!("{url}?connect_timeout_ms=30000"))
        .await
        .expect("first session");
    println!(
        "zookeeper: start-up {:.0?} to an open port, {:.0?} to serving, first session at {:.0?}",
        listening,
        serving,
        started.elapsed()
    );
    let zk = Arc::new(Zk {
        name: "zookeeper",
        url,
        server: freezer,
        operator,
    });

    let report = run_suite(zk.clone()).await;
    if std::env::var_os("LOCK_TEST_CASES").is_none() {
        assert!(report.passed.len() >= 50, "{}", report.summary());
    }

    let mut failed = Vec::new();
    for (name, check) in checks::all() {
        if std::env::var("LOCK_TEST_CASES").is_ok_and(|f| !f.split(',').any(|p| name.contains(p))) {
            continue;
        }
        let began = Instant::now();
        match AssertUnwindSafe(check(zk.clone())).catch_unwind().await {
            Ok(()) => println!("zookeeper PASS {name} ({:.2?})", began.elapsed()),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("zookeeper FAIL {name}: {message}");
                failed.push(name);
            }
        }
    }
    assert!(failed.is_empty(), "zookeeper checks failed: {failed:?}");
    checker::check(zk.clone(), Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
    // Again with one client behind a proxy that is cut at a random moment, and the
    // server frozen or restarted now and then.
    let (url, operator) = (zk.url.clone(), zk.operator.clone());
    let cut_off = checker::ProxiedUrl::new(&url, move |through| {
        Arc::new(Zk {
            name: "zookeeper",
            url: through,
            server: None,
            operator: operator.clone(),
        })
    })
    .expect("a loopback URL")
    .with_server(SharedServer::new(server))
    .restarting(checker::AfterRestart::KeepsLocks);
    checker::check_behind_proxy(zk, Arc::new(cut_off), Budget::seeds(checker::CUT_OFF_SEEDS)).await;
}
