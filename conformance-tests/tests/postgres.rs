//! The conformance suite and the SQL fault tests against a real PostgreSQL, with both
//! strategies.

mod sql_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    sql_support::server_suite(&conformance_tests::server::specs::POSTGRES).await;
}

/// Grants whose commit lands after the acquire gave up on it are undone (a server of
/// its own: the test changes the server's standby setting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_late_commits() {
    use conformance_tests::server::{specs::POSTGRES, TestServer};
    use lock_sql::Strategy;

    let server = TestServer::start(&POSTGRES)
        .await
        .unwrap_or_else(|err| panic!("start postgres: {err}"));
    let url = server.url();
    sql_support::servers::wait_until_ready(&url).await;
    let prefix = format!("l{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let sql = sql_support::Sql::new(&url, Strategy::Lease, &prefix);
    sql_support::late_commits::a_grant_whose_commit_failed_is_not_taken(&sql).await;
    sql_support::late_commits::a_grant_whose_reply_was_lost_is_undone(&sql).await;
    sql_support::late_commits::a_grant_committed_after_its_timeout_is_undone(&sql).await;
}
