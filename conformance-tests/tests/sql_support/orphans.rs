//! What a client gives up on over a cut network must not stay behind: a transaction
//! left open on the server would keep the key's row, and so the lock, from every
//! client for as long as the server keeps an idle session (hours); a connection left
//! waiting for an answer that never comes would keep its place in the client's pool.

use std::time::Duration;

use conformance_tests::checker::{loopback_port, through};
use conformance_tests::proxy::Blackhole;
use lock_core::backend::LockBackend as _;
use lock_core::prelude::*;
use lock_core::{AcquireOptions, LockClient, LockFamily, LockKey, LockName, Namespace};
use lock_sql::{sqlx, Dialect, SqlBackend, SqlConfig, Strategy};
use tokio::time::Instant;

use super::extra::{client, ns};
use super::Sql;

/// Lease strategy: a client cut off while its acquire's transaction waits for the key's
/// row gives up; the server then runs the statement, and the transaction holds the row.
/// Other clients get the lock while the network is still cut, and once it is back the
/// cut-off client, with one pooled connection, has that connection again.
pub async fn a_transaction_a_cut_leaves_open_never_keeps_its_key(sql: &Sql) {
    let ns = ns();
    let (options, proxy) = behind_a_proxy(sql).await;
    let cut_off = client(sql, &ns, options).await;
    let other = client(sql, &ns, sql.options()).await;
    let checker = sql.backend().await.unwrap();
    // Every acquire of a semaphore is a transaction: no one-statement grant counts
    // permits.
    let permits = cut_off.semaphore("orphan", 2).unwrap();
    permits.acquire().await.unwrap().release().await.unwrap();

    let mut blocker = checker.pool().begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(lock_keys_sql(&checker)))
        .bind(ns.clone())
        .fetch_all(&mut *blocker)
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        permits
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(2)))
            .await
            .map(drop)
    });
    cut_while_waiting(&checker, &proxy, blocker, &keys_pattern(&checker), waiting).await;

    // Still cut off: its client can neither commit nor roll back the transaction.
    let wait = AcquireOptions::wait_for(Duration::from_secs(20));
    let theirs = other
        .semaphore("orphan", 2)
        .unwrap()
        .acquire_with(wait)
        .await;
    let theirs = theirs.unwrap_or_else(|e| {
        panic!("the key stayed locked by the transaction the cut left open: {e}")
    });
    proxy.heal();
    let again = cut_off
        .semaphore("orphan", 2)
        .unwrap()
        .acquire_with(wait)
        .await;
    let again = again.unwrap_or_else(|e| {
        panic!("the cut-off client has no connection for its own acquire: {e}")
    });
    again.release().await.unwrap();
    theirs.release().await.unwrap();
    let _ = cut_off.shutdown().await;
    let _ = other.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_transaction_a_cut_leaves_open_never_keeps_its_key",
        sql.label
    );
}

/// A statement given up on while the network is cut, outside a transaction, leaves
/// its pooled connection waiting for an answer that never comes, which the server
/// never ends: the pool must close that connection rather than keep its place. Here a
/// forced unlock waits for a lease row another transaction locked when the cut comes;
/// with one pooled connection, the client's calls work again once the network is back.
pub async fn a_statement_given_up_over_a_cut_gives_its_place_back(sql: &Sql) {
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let held = holder.lock("place").unwrap().acquire().await.unwrap();
    let (options, proxy) = behind_a_proxy(sql).await;
    let cut_off = SqlBackend::connect(options).await.unwrap();
    let checker = sql.backend().await.unwrap();
    let key = LockKey::new(
        Namespace::new(&ns).unwrap(),
        LockName::new("place").unwrap(),
    );
    assert!(cut_off
        .is_locked(&key, LockFamily::Exclusive)
        .await
        .unwrap());

    let mut blocker = checker.pool().begin().await.unwrap();
    let lock_leases = match checker.dialect() {
        Dialect::MySql => format!("SELECT khash FROM `{}_leases` FOR UPDATE", sql.prefix),
        _ => format!("SELECT khash FROM \"{}_leases\" FOR UPDATE", sql.prefix),
    };
    sqlx::query(sqlx::AssertSqlSafe(lock_leases))
        .fetch_all(&mut *blocker)
        .await
        .unwrap();
    let pattern = format!("%DELETE FROM _{}_leases_%", sql.prefix);
    let unlocking = {
        let (cut_off, key) = (cut_off.clone(), key.clone());
        tokio::spawn(async move { cut_off.force_unlock(&key, LockFamily::Exclusive).await })
    };
    cut_while_waiting(&checker, &proxy, blocker, &pattern, unlocking).await;
    proxy.heal();

    let until = Instant::now() + Duration::from_secs(20);
    loop {
        match cut_off.is_locked(&key, LockFamily::Exclusive).await {
            Ok(_) => break,
            Err(e) if Instant::now() < until => {
                println!("sql-extra[{}] not yet: {e}", sql.label);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the client's one pooled connection never came back: {e}"),
        }
    }
    drop(held);
    let _ = holder.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_statement_given_up_over_a_cut_gives_its_place_back",
        sql.label
    );
}

/// The server itself ends a transaction of the client's pool left idle for three
/// request timeouts (the client's close may never reach the server), while a FOR
/// UPDATE lock, a transaction kept open on purpose and idle between renewals for
/// longer than that, is held as long as its lease.
pub async fn the_server_ends_a_transaction_left_idle(lease: &Sql, for_update: &Sql) {
    assert_eq!(
        (lease.strategy, for_update.strategy),
        (Strategy::Lease, Strategy::ForUpdate)
    );
    let ns = ns();
    let short = |sql: &Sql| {
        Sql::new(
            &super::with_short_timeouts(&sql.url),
            sql.strategy,
            &sql.prefix,
        )
    };
    let backend = short(lease).backend().await.unwrap();
    // Renewed every 4 s: its transaction sits idle longer than the pool's limit.
    let holder = LockClient::builder(
        SqlBackend::connect(short(for_update).options())
            .await
            .unwrap(),
    )
    .namespace(&ns)
    .watchdog_lease(Duration::from_secs(12))
    .build()
    .unwrap();
    let held = holder.lock("kept").unwrap().acquire().await.unwrap();
    let mut left_idle = backend.pool().begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(lock_keys_sql(&backend)))
        .bind(ns.clone())
        .fetch_all(&mut *left_idle)
        .await
        .unwrap();
    // Three request timeouts of 1 s, with slack for a loaded machine.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = sqlx::query("SELECT 1").fetch_one(&mut *left_idle).await;
    assert!(
        after.is_err(),
        "a transaction idle for 6 s is still open on the server"
    );
    assert!(held.is_held(), "the FOR UPDATE lock was lost");
    held.release()
        .await
        .expect("the FOR UPDATE lock's transaction outlives the limit");
    let _ = holder.shutdown().await;
    println!(
        "sql-extra[{}] PASS the_server_ends_a_transaction_left_idle",
        lease.label
    );
}

/// Cuts the network of `call` once its statement (whose text is `like`, the only one
/// of its kind on these tables) waits on the server for rows `blocker` locked, checks the call gives up, then commits `blocker`:
/// the statement runs, and its answer is lost. Heals the network once it ran.
async fn cut_while_waiting<T: std::fmt::Debug>(
    checker: &SqlBackend,
    proxy: &Blackhole,
    blocker: sqlx::Transaction<'static, sqlx::Any>,
    like: &str,
    call: tokio::task::JoinHandle<lock_core::Result<T>>,
) {
    let until = Instant::now() + Duration::from_secs(20);
    while lock_waits(checker, like).await == 0 {
        assert!(Instant::now() < until, "the call never waited for the rows");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    let gave_up = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("a call over a cut network ends")
        .unwrap();
    assert!(gave_up.is_err(), "a call over a cut network: {gave_up:?}");
    blocker.commit().await.unwrap();
    while lock_waits(checker, like).await > 0 {
        assert!(Instant::now() < until, "the cut-off statement never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Locks the key rows of the namespace bound as its one parameter.
fn lock_keys_sql(backend: &SqlBackend) -> String {
    let prefix = backend.table_prefix();
    match backend.dialect() {
        Dialect::MySql => {
            format!("SELECT khash FROM `{prefix}_keys` WHERE namespace = ? FOR UPDATE")
        }
        _ => format!("SELECT khash FROM \"{prefix}_keys\" WHERE namespace = $1 FOR UPDATE"),
    }
}

/// The settings of a client of `sql`'s tables through a fresh proxy the test can cut,
/// with short timeouts and one pooled connection (one the client loses track of leaves
/// it none), and that proxy.
async fn behind_a_proxy(sql: &Sql) -> (SqlConfig, Blackhole) {
    let port = loopback_port(&sql.url).expect("a loopback URL");
    let proxy = Blackhole::to(port).await.expect("proxy");
    let through = through(&super::with_short_timeouts(&sql.url), port, proxy.port());
    let options = Sql::new(&through, sql.strategy, &sql.prefix)
        .options()
        .with_max_connections(1);
    (options, proxy)
}

/// The text of `backend`'s key bumps, for [`lock_waits`] (`_` stands for either
/// quote).
fn keys_pattern(backend: &SqlBackend) -> String {
    format!("%INSERT INTO _{}_keys_%", backend.table_prefix())
}

/// How many statements whose text is `like` wait for a lock a transaction holds (on
/// MariaDB: run; InnoDB's own view of lock waits is a cache that can lag behind by
/// more than a request timeout).
async fn lock_waits(backend: &SqlBackend, like: &str) -> i64 {
    let query = match backend.dialect() {
        Dialect::MySql => sqlx::query_scalar(
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.PROCESSLIST \
             WHERE ID <> CONNECTION_ID() AND INFO LIKE ?",
        ),
        _ => sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE $1",
        ),
    };
    query
        .bind(like.to_owned())
        .fetch_one(backend.pool())
        .await
        .expect("the server's lock waits")
}
