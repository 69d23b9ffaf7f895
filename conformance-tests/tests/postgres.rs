//! The conformance suite and the SQL fault tests against a real PostgreSQL, with both
//! strategies.

mod sql_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    sql_support::server_suite(&conformance_tests::server::specs::POSTGRES).await;
}
