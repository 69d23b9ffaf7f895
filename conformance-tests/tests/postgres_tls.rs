//! The conformance suite over TLS against a real PostgreSQL that requires it,
//! with certificates made by the test, and the refusals of clients without TLS or
//! trusting another CA.

mod sql_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tls() {
    sql_support::tls::tls_suite(&conformance_tests::server::tls_specs::POSTGRES_TLS).await;
}
