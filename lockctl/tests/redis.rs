//! lockctl against a real Redis server.

mod common;

use conformance_tests::server::{specs, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::all_scenarios(&server.url(), "redis").await;
}
