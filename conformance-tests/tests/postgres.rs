//! The conformance suite and the SQL fault tests against a real PostgreSQL, with both
//! strategies.

mod sql_support;

use conformance_tests::server::TestServer;
use lock_sql::Strategy;
use sql_support::{extra, run_suite, servers, Sql};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let mut server = TestServer::start(&conformance_tests::server::specs::POSTGRES)
        .await
        .expect("start postgres");
    let url = server.url();
    servers::wait_until_ready(&url).await;
    let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);

    run_suite(Sql::new(&url, Strategy::Lease, &prefix), 60).await;
    run_suite(Sql::new(&url, Strategy::ForUpdate, &prefix), 20).await;

    let lease = Sql::new(&url, Strategy::Lease, &prefix);
    let for_update = Sql::new(&url, Strategy::ForUpdate, &prefix);
    extra::clock_skew_never_steals(&lease).await;
    extra::hostile_names_stored_safely(&lease).await;
    extra::killed_connection(&for_update).await;
    extra::force_unlock_spares_a_reused_connection_id(&for_update).await;
    extra::killed_connection(&lease).await;
    extra::sigkilled_for_update_holder_frees_at_once(&for_update).await;
    let closed = format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        conformance_tests::server::free_port().unwrap()
    );
    let stop = async {
        if let Some(p) = server.process() {
            p.stop();
        }
    };
    extra::unreachable_is_unavailable_quickly(&closed, stop, &lease).await;
}
