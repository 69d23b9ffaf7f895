//! The conformance suite and the SQL fault tests against SQLite files (lease strategy:
//! SQLite has no row locks, so FOR UPDATE is refused).

mod sql_support;

use lock_core::Error;
use lock_sql::{SqlBackend, SqlConfig, Strategy};
use sql_support::{extra, run_suite, Sql};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    run_suite(Sql::new(&url, Strategy::Lease, "lock_sql"), 60).await;

    let err = SqlBackend::connect(
        SqlConfig::from_url(&url)
            .expect("database URL")
            .with_strategy(Strategy::ForUpdate),
    )
    .await
    .expect_err("FOR UPDATE on SQLite");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("row locks"), "{err}");
    println!("sql-extra[sqlite] PASS for_update_refused: {err}");
    // `connect_url` reads the URL's own settings as `distributed_locks::connect` does.
    let err = SqlBackend::connect_url(&format!("{url}?lock_strategy=for-update"))
        .await
        .expect_err("connect_url with lock_strategy=for-update on SQLite");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    let err = SqlBackend::connect_url(&format!("{url}?lock_strategy=session"))
        .await
        .expect_err("the session strategy on SQLite");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("advisory locks"), "{err}");
    let prefixed = SqlBackend::connect_url(&format!("{url}?lock_table_prefix=from_url"))
        .await
        .expect("connect_url with a table prefix");
    assert_eq!(prefixed.table_prefix(), "from_url");
    println!("sql-extra[sqlite] PASS connect_url_reads_the_url_settings");

    let lease = Sql::new(&url, Strategy::Lease, "lock_sql");
    extra::tables_without_holder_columns_get_them(&url).await;
    extra::clock_skew_never_steals(&lease).await;
    extra::hostile_names_stored_safely(&lease).await;
    extra::blocked_attempts_write_nothing(&lease).await;
    extra::same_process_waiter_woken_at_release(&lease).await;
    extra::same_process_reader_woken_when_a_writer_withdraws(&lease).await;
    // A path that cannot be a database is a bad argument, said at once, not a
    // retryable outage after the busy timeout.
    let missing = format!("sqlite://{}/no/such/dir/locks.db", dir.path().display());
    for bad in [missing.as_str(), "sqlite:///dev/null"] {
        let started = std::time::Instant::now();
        let err = SqlBackend::connect_url(bad)
            .await
            .expect_err("opened nothing");
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{bad}: {err:?}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(3),
            "{bad}: took {:?}",
            started.elapsed()
        );
        println!("sql-extra[sqlite] PASS unusable_file_is_invalid_argument: {err}");
    }
}
