//! lockctl against a real etcd server.

mod common;

use conformance_tests::server::{specs, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::all_scenarios(&server.url(), "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_group_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::group_scenarios(&server.url(), "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_is_noticed_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::force_unlock_is_noticed_within_a_second(&server.url(), "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::option_scenarios(&server.url(), "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_holder_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::status_names_the_holder_and_a_token_breaks_only_it(&server.url(), "etcd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_runs_at_once_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::at_most_n_runs_at_once(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_runs_at_a_time_on_etcd() {
    let server = TestServer::start(&specs::ETCD).await.expect("etcd server");
    common::one_leader_runs_at_a_time(&server.url()).await;
}
