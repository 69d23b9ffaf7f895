//! lockctl against a real ZooKeeper server, with a 4 s session (the session is the
//! lease: a SIGKILLed lockctl's lock comes free when it expires).

mod common;

use conformance_tests::server::{specs, TestServer};

/// The server's URL with a session short enough for the SIGKILL scenario.
fn url(server: &TestServer) -> String {
    format!("{}?session_timeout_ms=4000", server.url())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::all_scenarios(&url(&server), "zookeeper").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_group_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::group_scenarios(&url(&server), "zookeeper").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_is_noticed_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::force_unlock_is_noticed_within_a_second(&url(&server), "zookeeper").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::option_scenarios(&url(&server), "zookeeper").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_holder_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::status_names_the_holder_and_a_token_breaks_only_it(&url(&server), "zookeeper").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_runs_at_once_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::at_most_n_runs_at_once(&url(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_runs_at_a_time_on_zookeeper() {
    let server = TestServer::start(&specs::ZOOKEEPER)
        .await
        .expect("zookeeper server");
    common::one_leader_runs_at_a_time(&url(&server)).await;
}
