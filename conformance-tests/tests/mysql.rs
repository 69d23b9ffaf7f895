//! The conformance suite and the SQL fault tests against a real MariaDB, with both
//! strategies.

mod sql_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    sql_support::server_suite(&conformance_tests::server::specs::MARIADB).await;
}
