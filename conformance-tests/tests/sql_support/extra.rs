//! SQL-specific checks beyond the shared suite: client clock skew, killed
//! connections, hostile names as stored, a SIGKILLed FOR UPDATE holder, and the
//! database going away.

use std::time::Duration;

use conformance_tests::holder::{take, HolderProcess};
use conformance_tests::server::Freezer;
use conformance_tests::{Backend, HolderSpec};
use lock_core::prelude::*;
use lock_core::{AcquireOptions, Error, LockClient, LockKey, LockKind, LockName, Namespace};
use lock_sql::{sqlx, Dialect, SqlBackend, SqlConfig, Strategy};
use sqlx::Row;
use tokio::time::Instant;

use super::Sql;

pub(super) fn ns() -> String {
    format!("extra-{}", uuid::Uuid::new_v4().simple())
}

pub(super) async fn client(
    sql: &Sql,
    namespace: &str,
    options: SqlConfig,
) -> LockClient<SqlBackend> {
    let backend = SqlBackend::connect(options).await.expect("connect");
    let _ = sql;
    LockClient::builder(backend)
        .namespace(namespace)
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .expect("client")
}

/// Session settings that move the session's idea of "now" (MySQL's `SET timestamp`
/// moves `NOW()`), or at least its time zone (PostgreSQL): a client whose clock is
/// far ahead, and one far behind.
fn skews(dialect: Dialect) -> [&'static str; 2] {
    match dialect {
        Dialect::MySql => [
            "SET timestamp = UNIX_TIMESTAMP(SYSDATE()) + 7200",
            "SET timestamp = UNIX_TIMESTAMP(SYSDATE()) - 7200",
        ],
        Dialect::Postgres => ["SET TIME ZONE '+14'", "SET TIME ZONE '-12'"],
        _ => ["PRAGMA user_version", "PRAGMA user_version"],
    }
}

/// A holder and a contender whose clocks disagree by hours: the contender never
/// gets the unexpired lease, and does get it once the lease has run out by the
/// server's clock.
pub async fn clock_skew_never_steals(sql: &Sql) {
    let dialect = sql.backend().await.expect("connect").dialect();
    let [ahead, behind] = skews(dialect);
    for (holder_skew, contender_skew) in [(ahead, behind), (behind, ahead)] {
        let ns = ns();
        let holder = client(sql, &ns, sql.options().with_session_statement(holder_skew)).await;
        let contender = client(
            sql,
            &ns,
            sql.options().with_session_statement(contender_skew),
        )
        .await;
        let lease = Duration::from_millis(1500);
        let guard = holder
            .lock("skew")
            .unwrap()
            .acquire_with(AcquireOptions::try_once().lease(lease))
            .await
            .expect("holder acquires");
        let acquired = Instant::now();
        let other = contender.lock("skew").unwrap();
        assert!(
            other.try_acquire().await.unwrap().is_none(),
            "skewed contender stole the lease"
        );
        tokio::time::sleep(lease / 2).await;
        assert!(
            other.try_acquire().await.unwrap().is_none(),
            "skewed contender stole the lease"
        );
        let next = other
            .acquire_timeout(lease + Duration::from_secs(5))
            .await
            .expect("contender after expiry");
        assert!(
            acquired.elapsed() >= lease - Duration::from_millis(50),
            "granted early"
        );
        assert!(next.fencing_token() > guard.fencing_token());
        next.release().await.unwrap();
        // Readers and fair locks use the same clock.
        let r = holder.rw_lock("skew-rw").unwrap();
        let w = contender.rw_lock("skew-rw").unwrap();
        let read = r
            .read_with(AcquireOptions::try_once().lease(lease))
            .await
            .unwrap();
        assert!(w.try_write().await.unwrap().is_none());
        read.release().await.unwrap();
    }
    println!("sql-extra[{}] PASS clock_skew_never_steals", sql.label);
}

/// Names with quotes, semicolons and any script are stored as given (read back from
/// the keys table), each its own lock; a 10,000-character name is refused by
/// lock-core before anything is sent.
pub async fn hostile_names_stored_safely(sql: &Sql) {
    let ns = ns();
    let c = client(sql, &ns, sql.options()).await;
    let names = [
        "quote'd \"name\" `tick`",
        "semi;colon'); DROP TABLE lock_sql_keys; --",
        "ünïcødé 锁 🔒 \u{202e}rtl",
        "back\\slash %_ wildcards",
    ];
    let backend = c.backend().clone();
    let mut guards = Vec::new();
    for name in names {
        guards.push(
            c.lock(name)
                .unwrap()
                .try_acquire()
                .await
                .unwrap()
                .expect("free"),
        );
        let key = LockKey::new(Namespace::new(&ns).unwrap(), LockName::new(name).unwrap());
        let table = format!("{}_keys", backend.table_prefix());
        let sql_text = match backend.dialect() {
            Dialect::Postgres => {
                format!("SELECT namespace, name FROM \"{table}\" WHERE khash = $1")
            }
            Dialect::MySql => format!("SELECT namespace, name FROM `{table}` WHERE khash = ?"),
            _ => format!("SELECT namespace, name FROM \"{table}\" WHERE khash = ?"),
        };
        let row = sqlx::query(sqlx::AssertSqlSafe(sql_text))
            .bind(lock_sql::stored_key(&key))
            .fetch_one(backend.pool())
            .await
            .expect("key row");
        let (stored_ns, stored_name): (String, String) = (row.get(0), row.get(1));
        assert_eq!(
            (stored_ns.as_str(), stored_name.as_str()),
            (ns.as_str(), name)
        );
    }
    let long = "x".repeat(10_000);
    assert!(matches!(c.lock(&long), Err(Error::InvalidArgument { .. })));
    for g in guards {
        g.release().await.unwrap();
    }
    println!("sql-extra[{}] PASS hostile_names_stored_safely", sql.label);
}

/// Attempts on a held exclusive lock change nothing in the database: the key's
/// fence stays where the holder's grant left it (on PostgreSQL not even the row's
/// version moves), so waiters woken by a release do not each write and flush a commit.
pub async fn blocked_attempts_write_nothing(sql: &Sql) {
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let contender = client(sql, &ns, sql.options()).await;
    let guard = holder.lock("quiet").unwrap().acquire().await.unwrap();
    let backend = holder.backend().clone();
    let table = format!("{}_keys", backend.table_prefix());
    let key = LockKey::new(
        Namespace::new(&ns).unwrap(),
        LockName::new("quiet").unwrap(),
    );
    let sql_text = match backend.dialect() {
        Dialect::Postgres => {
            format!("SELECT fence, CAST(xmin AS TEXT) FROM \"{table}\" WHERE khash = $1")
        }
        Dialect::MySql => format!("SELECT fence, '' FROM `{table}` WHERE khash = ?"),
        _ => format!("SELECT fence, '' FROM \"{table}\" WHERE khash = ?"),
    };
    let read = || async {
        let row = sqlx::query(sqlx::AssertSqlSafe(sql_text.clone()))
            .bind(lock_sql::stored_key(&key))
            .fetch_one(backend.pool())
            .await
            .expect("key row");
        (row.get::<i64, _>(0), row.get::<String, _>(1))
    };
    let before = read().await;
    let lock = contender.lock("quiet").unwrap();
    for _ in 0..20 {
        assert!(lock.try_acquire().await.unwrap().is_none(), "held");
    }
    let waited = lock.acquire_timeout(Duration::from_millis(300)).await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    assert_eq!(read().await, before, "blocked attempts wrote the key row");
    guard.release().await.unwrap();
    let next = lock
        .try_acquire()
        .await
        .unwrap()
        .expect("free after release");
    assert!(
        next.fencing_token() > before.0 as u64,
        "a grant still moves the fence"
    );
    next.release().await.unwrap();
    println!(
        "sql-extra[{}] PASS blocked_attempts_write_nothing",
        sql.label
    );
}

/// Lease and session strategies: an uncontended acquire is one request to the server
/// and its release another, with nothing around them (no transaction statements, no
/// pool pings): the whole cycle is two round trips, as a lock table written by hand
/// (or an advisory lock taken by hand) is.
pub async fn an_uncontended_cycle_is_two_round_trips(sql: &Sql) {
    const CYCLES: u64 = 20;
    let ns = ns();
    // No renewal falls within the cycles.
    let (client, proxy) = proxied_client(sql, &sql.url, &ns, Duration::from_secs(60)).await;
    let lock = client.lock("counted").unwrap();
    let cycle = || async {
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
    };
    // The connections are opened and the statements prepared first.
    for _ in 0..3 {
        cycle().await;
    }
    // The pool may still be checking a connection it was given back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = proxy.chunks_to_server();
    for _ in 0..CYCLES {
        cycle().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let requests = proxy.chunks_to_server() - before;
    assert!(
        requests <= 2 * CYCLES + 2,
        "{requests} requests reached the server for {CYCLES} uncontended cycles"
    );
    let _ = client.shutdown().await;
    println!(
        "sql-extra[{}] PASS an_uncontended_cycle_is_two_round_trips ({requests} requests for {CYCLES} cycles)",
        sql.label
    );
}

/// `n` clients in `namespace`, each with its own connection, that poll only every 5 s
/// and keep 30 s leases: a waiter among them is granted sooner only if woken.
async fn slow_polling_clients(sql: &Sql, namespace: &str, n: usize) -> Vec<LockClient<SqlBackend>> {
    let slow_polls = sql
        .options()
        .with_poll_interval(Duration::from_secs(5), Duration::from_secs(5));
    let mut clients = Vec::new();
    for _ in 0..n {
        let backend = SqlBackend::connect(slow_polls.clone())
            .await
            .expect("connect");
        clients.push(
            LockClient::builder(backend)
                .namespace(namespace)
                .watchdog_lease(Duration::from_secs(30))
                .build()
                .expect("client"),
        );
    }
    clients
}

/// A waiter in the releaser's process gets the lock at the release, not at its next
/// poll: with polls 2.5-5 s apart (and a 30 s lease, so the holder's expiry does not
/// shorten them), it must be granted well under the first poll's 2.5 s.
pub async fn same_process_waiter_woken_at_release(sql: &Sql) {
    let clients = slow_polling_clients(sql, &ns(), 2).await;
    let guard = clients[0].lock("bell").unwrap().acquire().await.unwrap();
    let waiter_lock = clients[1].lock("bell").unwrap();
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.acquire_timeout(Duration::from_secs(20)).await;
        (Instant::now(), guard)
    });
    // Let the waiter make its first attempt and settle into its first pause.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (granted, next) = waiter.await.unwrap();
    let took = granted - released;
    next.expect("granted").release().await.unwrap();
    assert!(
        took < Duration::from_millis(1500),
        "granted {took:?} after the release"
    );
    println!(
        "sql-extra[{}] PASS same_process_waiter_woken_at_release ({took:?})",
        sql.label
    );
}

/// A waiter in another process than the holder's gets the lock at the release, not at
/// its next poll: PostgreSQL's notification, MariaDB's doorbell; for every kind of
/// lock, each blocked by the kind a `lock-holder` process holds, all at once. Each
/// holder releases 5 s after it got its lock and keeps its connections (so only the
/// release can tell); the waiters begin 2 s after the grants, once the holders have
/// surely taken their doorbells, and poll (and refresh their queue tickets) 10-20 s
/// apart (the 60 s leases do not shorten that), so each must be granted well before
/// its first poll.
pub async fn other_process_waiter_woken_at_release(sql: &Sql) {
    let namespace = ns();
    let slow_polls = sql
        .options()
        .with_poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .with_queue_ttl(Duration::from_secs(60));
    let waiter = LockClient::builder(SqlBackend::connect(slow_polls).await.expect("connect"))
        .namespace(namespace.clone())
        .watchdog_lease(Duration::from_secs(60))
        .build()
        .expect("client");
    // The kind the holder process holds, and the kind it blocks.
    let cases = [
        ("exclusive", LockKind::Exclusive),
        ("fair", LockKind::Fair),
        ("write", LockKind::Read),
        ("read", LockKind::Write),
        ("permit", LockKind::Permit),
        ("leader", LockKind::Leader),
    ];
    let waits = cases.iter().map(|&(held, wanted)| {
        let (sql, waiter, namespace) = (sql, &waiter, namespace.clone());
        async move {
            let name = format!("bell-{held}");
            let spec = HolderSpec {
                namespace,
                name: name.clone(),
                watchdog_lease: Duration::from_secs(60),
            };
            let mut command = sql.holder_command(&spec).expect("a holder process");
            command.args(["--kind", held, "--release-after-ms", "5000"]);
            let mut holder = HolderProcess::start(command, Duration::from_secs(30))
                .await
                .expect("the holder process holds the lock");
            // A lease granted without a wait takes its doorbell 5 ms after the grant,
            // on a connection the holder opens then (six holders start at once).
            tokio::time::sleep(Duration::from_secs(2)).await;
            let asked = Instant::now();
            let tried = take(
                waiter,
                &name,
                wanted,
                1,
                "waiter",
                AcquireOptions::try_once(),
            )
            .await;
            assert!(
                matches!(tried, Err(Error::Timeout { .. })),
                "{wanted:?} beside a holder of {held}: the holder process released \
                 before the wait began, or the try failed: {tried:?}"
            );
            let wait = AcquireOptions::wait_for(Duration::from_secs(40));
            let guard = take(waiter, &name, wanted, 1, "waiter", wait)
                .await
                .expect("granted");
            let took = asked.elapsed();
            guard.release().await.unwrap();
            holder.kill().await;
            let line = format!("{wanted:?} beside {held}: granted {took:?} after the wait began");
            if took < Duration::from_secs(8) {
                Ok(line)
            } else {
                Err(line)
            }
        }
    });
    let took = futures::future::join_all(waits).await;
    let slow: Vec<&String> = took.iter().filter_map(|case| case.as_ref().err()).collect();
    assert!(
        slow.is_empty(),
        "the holders releasing 3 s after the waits began, a release in the other process \
         did not wake the waiter: {slow:?} (all: {took:?})"
    );
    let took: Vec<&String> = took.iter().filter_map(|case| case.as_ref().ok()).collect();
    println!(
        "sql-extra[{}] PASS other_process_waiter_woken_at_release ({took:?})",
        sql.label
    );
}

/// The server stalls (frozen) as an uncontended acquire reaches it, for longer than
/// the watchdog lease (1.5 s against 1 s): the grant's reply comes after the lease, counted from the send,
/// has run out here, while the server counts it from when it took it. The guard
/// handed over is held, and its release finds it.
pub async fn a_grant_answered_after_a_stall_is_held(sql: &Sql, freezer: &Freezer) {
    let c = LockClient::builder(SqlBackend::connect(sql.options()).await.expect("connect"))
        .namespace(ns())
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .expect("client");
    let lock = c.lock("stalled").unwrap();
    // Connected and warm, so the grant is the call that meets the stall.
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    freezer.freeze().expect("freeze the server");
    let acquiring =
        tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    freezer.thaw().expect("thaw the server");
    let guard = acquiring.await.unwrap().expect("granted after the stall");
    assert!(guard.is_held(), "a live lease was handed over as lost");
    guard.release().await.expect("the release found the lease");
    println!(
        "sql-extra[{}] PASS a_grant_answered_after_a_stall_is_held",
        sql.label
    );
}

/// The holder's connection is killed from another session. FOR UPDATE: the row lock
/// goes with it, the guard reports the loss and another client gets the lock at once.
/// Lease: the pool reconnects and the lease survives.
pub async fn killed_connection(sql: &Sql) {
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let other = client(sql, &ns, sql.options()).await;
    let guard = holder.lock("killed").unwrap().acquire().await.unwrap();
    let killer = sql.backend().await.unwrap();
    let kill_all = match killer.dialect() {
        Dialect::Postgres => "SELECT pg_terminate_backend(pid) IS NULL FROM pg_stat_activity \
                              WHERE pid <> pg_backend_pid() AND datname = current_database() \
                              AND query NOT LIKE 'LISTEN%'"
            .to_owned(),
        _ => String::new(),
    };
    if killer.dialect() == Dialect::Postgres {
        sqlx::raw_sql(sqlx::AssertSqlSafe(kill_all))
            .execute(killer.pool())
            .await
            .unwrap();
    } else {
        let ids: Vec<i64> = sqlx::query(
            "SELECT CAST(id AS SIGNED) FROM information_schema.PROCESSLIST \
             WHERE id <> CONNECTION_ID() AND user = 'root' AND db = DATABASE()",
        )
        .fetch_all(killer.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
        for id in ids {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                .execute(killer.pool())
                .await;
        }
    }
    let lock = other.lock("killed").unwrap();
    match sql.strategy {
        Strategy::ForUpdate => {
            let killed = Instant::now();
            let next = lock
                .acquire_timeout(Duration::from_secs(5))
                .await
                .expect("free once the connection died");
            assert!(
                killed.elapsed() < Duration::from_secs(2),
                "took {:?}",
                killed.elapsed()
            );
            let loss = tokio::time::timeout(Duration::from_secs(3), guard.lost())
                .await
                .expect("loss reported");
            assert_ne!(loss, lock_core::LeaseLoss::Released);
            next.release().await.unwrap();
        }
        _ => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert!(guard.is_held(), "the lease did not survive a reconnect");
            assert!(lock.try_acquire().await.unwrap().is_none());
            guard.release().await.unwrap();
        }
    }
    println!("sql-extra[{}] PASS killed_connection", sql.label);
}

/// FOR UPDATE on PostgreSQL: the holder's row-lock connection dies while its fence is
/// being drawn (held up here by an operator's lock on the key row). Another client
/// takes the row lock meanwhile. The first must not be granted on a dead connection:
/// it would then believe it holds the lock alongside the real holder, and its token,
/// drawn later, would beat the real holder's at a fenced store.
pub async fn for_update_grant_never_outlives_its_connection(sql: &Sql) {
    use sqlx::Connection as _;
    let ns = ns();
    let a = client(sql, &ns, sql.options()).await;
    let b = client(sql, &ns, sql.options()).await;
    let lock_a = a.lock("stalled").unwrap();
    lock_a.acquire().await.unwrap().release().await.unwrap(); // the key row exists
    let backend = sql.backend().await.unwrap();
    let key = lock_core::LockKey::new(
        lock_core::Namespace::new(&ns).unwrap(),
        lock_core::LockName::new("stalled").unwrap(),
    );
    let keys = format!("{}_keys", backend.table_prefix());
    let mut operator = sqlx::AnyConnection::connect(&sql.url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut operator).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT fence FROM \"{keys}\" WHERE khash = $1 FOR UPDATE"
    )))
    .bind(lock_sql::stored_key(&key))
    .fetch_one(&mut operator)
    .await
    .unwrap();
    let waiting =
        tokio::spawn(async move { lock_a.acquire_timeout(Duration::from_secs(20)).await });
    // A holds the row lock and waits to draw its fence: kill its row-lock connection.
    let rows = format!("{}_rows", backend.table_prefix());
    let started = Instant::now();
    loop {
        let killed: Vec<i64> = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity WHERE state = 'idle in transaction' \
             AND query LIKE '%{rows}%FOR UPDATE%' AND pid <> pg_backend_pid()"
        )))
        .fetch_all(backend.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
        if let [pid] = killed[..] {
            sqlx::query("SELECT pg_terminate_backend(CAST($1 AS INTEGER))")
                .bind(pid)
                .execute(backend.pool())
                .await
                .unwrap();
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "A never held the row lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // B takes the row lock A's dead connection let go of (its fence waits too).
    let lock_b = b.lock("stalled").unwrap();
    let taking = tokio::spawn(async move { lock_b.acquire_timeout(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    sqlx::raw_sql("COMMIT")
        .execute(&mut operator)
        .await
        .unwrap();
    let b_guard = taking.await.unwrap().expect("B gets the lock");
    match waiting.await.unwrap() {
        Ok(a_guard) => {
            // A may be granted only on a live connection, after B let go: never both.
            assert!(
                !b_guard.is_held() || !a_guard.is_held(),
                "both hold the lock: A (token {}) on a dead connection, B (token {})",
                a_guard.fencing_token(),
                b_guard.fencing_token()
            );
        }
        Err(err) => assert!(err.is_retryable(), "{err:?}"),
    }
    b_guard.release().await.unwrap();
    println!(
        "sql-extra[{}] PASS for_update_grant_never_outlives_its_connection",
        sql.label
    );
}

/// FOR UPDATE: the holder record names a connection that is not the holder (a dead
/// holder's record, its id now reused by an idle connection). `force_unlock` must
/// not kill that connection, and frees the lock by killing its real holder (the
/// server's lock state names it: the row's `xmax`, MariaDB's lock waits).
pub async fn force_unlock_spares_a_reused_connection_id(sql: &Sql) {
    use lock_core::backend::LockBackend as _;
    use lock_core::LockFamily;
    use sqlx::Connection as _;
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let guard = holder.lock("reused-id").unwrap().acquire().await.unwrap();
    let backend = sql.backend().await.unwrap();
    let dialect = backend.dialect();
    let mut innocent = sqlx::AnyConnection::connect(&sql.url).await.unwrap();
    let id_sql = match dialect {
        Dialect::Postgres => "SELECT CAST(pg_backend_pid() AS BIGINT)",
        _ => "SELECT CAST(CONNECTION_ID() AS SIGNED)",
    };
    let id: i64 = sqlx::query(id_sql)
        .fetch_one(&mut innocent)
        .await
        .unwrap()
        .get(0);
    let key = LockKey::new(
        Namespace::new(&ns).unwrap(),
        LockName::new("reused-id").unwrap(),
    );
    let table = format!("{}_holders", backend.table_prefix());
    let forge = match dialect {
        Dialect::Postgres => {
            format!("UPDATE \"{table}\" SET connection_id = $1 WHERE khash = $2")
        }
        _ => format!("UPDATE `{table}` SET connection_id = ? WHERE khash = ?"),
    };
    let forged = sqlx::query(sqlx::AssertSqlSafe(forge))
        .bind(id)
        .bind(lock_sql::stored_key(&key))
        .execute(backend.pool())
        .await
        .unwrap();
    assert_eq!(forged.rows_affected(), 1, "holder record");
    let outcome = backend.force_unlock(&key, LockFamily::Exclusive).await;
    assert!(
        matches!(outcome, Ok(true)),
        "there was a holder: {outcome:?}"
    );
    let loss = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the real holder lost the lock");
    assert_ne!(loss, lock_core::LeaseLoss::Released);
    sqlx::raw_sql("SELECT 1")
        .execute(&mut innocent)
        .await
        .expect("the connection that inherited the id was killed");
    println!(
        "sql-extra[{}] PASS force_unlock_spares_a_reused_connection_id",
        sql.label
    );
}

/// A queued writer gives up (its wait limit) while readers hold the lock: a reader
/// queued behind it in the same process is let in at once, not at its next poll.
pub async fn same_process_reader_woken_when_a_writer_withdraws(sql: &Sql) {
    let clients = slow_polling_clients(sql, &ns(), 3).await;
    let reading = clients[0].rw_lock("shelf").unwrap().read().await.unwrap();
    let writer_lock = clients[1].rw_lock("shelf").unwrap();
    let writer = tokio::spawn(async move {
        let gave_up = writer_lock
            .write_with(AcquireOptions::wait_for(Duration::from_secs(1)))
            .await;
        (Instant::now(), gave_up.map(drop))
    });
    // The writer queues first; the reader then waits behind it (writers go first).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reader_lock = clients[2].rw_lock("shelf").unwrap();
    let reader = tokio::spawn(async move {
        let guard = reader_lock
            .read_with(AcquireOptions::wait_for(Duration::from_secs(20)))
            .await;
        (Instant::now(), guard)
    });
    let (withdrew, gave_up) = writer.await.unwrap();
    assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
    let (granted, next) = reader.await.unwrap();
    let took = granted.saturating_duration_since(withdrew);
    next.expect("the reader was granted")
        .release()
        .await
        .unwrap();
    reading.release().await.unwrap();
    assert!(
        took < Duration::from_millis(1500),
        "the reader was granted {took:?} after the writer withdrew"
    );
    println!(
        "sql-extra[{}] PASS same_process_reader_woken_when_a_writer_withdraws ({took:?})",
        sql.label
    );
}

/// A lease client and a FOR UPDATE client on the same tables and name never both
/// hold: whichever strategy comes second is refused at connect, with an error that
/// names both.
pub async fn strategies_never_mix_on_one_table_set(url: &str) {
    let prefix = format!("mix{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let ns = ns();
    for (first, second) in [
        (Strategy::Lease, Strategy::ForUpdate),
        (Strategy::ForUpdate, Strategy::Lease),
    ] {
        let prefix = format!("{prefix}{}", first == Strategy::Lease);
        let options = |strategy| {
            SqlConfig::from_url(url)
                .expect("database URL")
                .with_strategy(strategy)
                .with_table_prefix(prefix.clone())
                .with_max_connections(2)
        };
        let client_of = |backend: SqlBackend| {
            LockClient::builder(backend)
                .namespace(&ns)
                .build()
                .expect("client")
        };
        let holder = client_of(SqlBackend::connect(options(first)).await.expect("connect"));
        let held = holder.lock("mixed").unwrap().acquire().await.unwrap();
        match SqlBackend::connect(options(second)).await {
            Err(Error::InvalidArgument { message }) => {
                assert!(
                    message.contains(&format!("{first:?}"))
                        && message.contains(&format!("{second:?}")),
                    "{message}"
                );
            }
            Err(other) => panic!("{second:?} after {first:?}: {other}"),
            Ok(backend) => {
                let other = client_of(backend);
                let got = other.lock("mixed").unwrap().try_acquire().await;
                assert!(
                    !matches!(got, Ok(Some(_))),
                    "a {second:?} client was granted the lock a {first:?} client holds"
                );
                other.shutdown().await.unwrap();
            }
        }
        assert!(held.is_held());
        held.release().await.unwrap();
        holder.shutdown().await.unwrap();
    }
    println!("sql-extra PASS strategies_never_mix_on_one_table_set");
}

/// FOR UPDATE: the holder record of one lock names the connection that now holds
/// *another* lock (a holder released, its pooled connection was reused, and the record
/// was read before the release). `force_unlock` of the first lock must break its real
/// holder and leave the other lock's holder alone.
pub async fn force_unlock_spares_the_holder_of_another_lock(sql: &Sql) {
    use lock_core::backend::LockBackend as _;
    use lock_core::LockFamily;
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let bystander_client = client(sql, &ns, sql.options()).await;
    let target = holder.lock("target").unwrap().acquire().await.unwrap();
    let bystander = bystander_client
        .lock("bystander")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let backend = sql.backend().await.unwrap();
    let table = format!("{}_holders", backend.table_prefix());
    let key = |name: &str| LockKey::new(Namespace::new(&ns).unwrap(), LockName::new(name).unwrap());
    let (read, forge) = match backend.dialect() {
        Dialect::Postgres => (
            format!("SELECT connection_id FROM \"{table}\" WHERE khash = $1"),
            format!("UPDATE \"{table}\" SET connection_id = $1 WHERE khash = $2"),
        ),
        _ => (
            format!("SELECT connection_id FROM `{table}` WHERE khash = ?"),
            format!("UPDATE `{table}` SET connection_id = ? WHERE khash = ?"),
        ),
    };
    let bystander_connection: i64 = sqlx::query(sqlx::AssertSqlSafe(read))
        .bind(lock_sql::stored_key(&key("bystander")))
        .fetch_one(backend.pool())
        .await
        .unwrap()
        .get(0);
    let forged = sqlx::query(sqlx::AssertSqlSafe(forge))
        .bind(bystander_connection)
        .bind(lock_sql::stored_key(&key("target")))
        .execute(backend.pool())
        .await
        .unwrap();
    assert_eq!(forged.rows_affected(), 1, "holder record");
    let outcome = backend
        .force_unlock(&key("target"), LockFamily::Exclusive)
        .await;
    assert!(matches!(outcome, Ok(true)), "{outcome:?}");
    let loss = tokio::time::timeout(Duration::from_secs(5), target.lost())
        .await
        .expect("the real holder lost the lock");
    assert_ne!(loss, lock_core::LeaseLoss::Released);
    // The bystander's connection is alive and its watchdog still renews.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        bystander.is_held(),
        "force_unlock of another lock killed the bystander's connection"
    );
    bystander.release().await.unwrap();
    holder.shutdown().await.unwrap();
    bystander_client.shutdown().await.unwrap();
    println!(
        "sql-extra[{}] PASS force_unlock_spares_the_holder_of_another_lock",
        sql.label
    );
}

/// A FOR UPDATE holder process killed with SIGKILL frees the lock at once (its
/// connection drops), far sooner than its 30 s watchdog lease.
pub async fn sigkilled_for_update_holder_frees_at_once(sql: &Sql) {
    let spec = HolderSpec {
        namespace: ns(),
        name: "crash-now".into(),
        watchdog_lease: Duration::from_secs(30),
    };
    let mut holder =
        HolderProcess::start(sql.holder_command(&spec).unwrap(), Duration::from_secs(30))
            .await
            .expect("holder");
    let c = client(sql, &spec.namespace, sql.options()).await;
    let lock = c.lock(&spec.name).unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    holder.kill().await;
    let killed = Instant::now();
    let guard = lock
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("free");
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "took {:?}",
        killed.elapsed()
    );
    assert!(guard.fencing_token() > holder.fence());
    guard.release().await.unwrap();
    println!(
        "sql-extra[{}] PASS sigkilled_for_update_holder_frees_at_once ({:?})",
        sql.label,
        killed.elapsed()
    );
}

/// An unreachable database gives a retryable `Unavailable` within the connect
/// timeout, at connect time and for a client whose server went away.
pub async fn unreachable_is_unavailable_quickly(
    url: &str,
    stop: impl std::future::Future<Output = ()>,
    sql: &Sql,
) {
    // A refused connection fails at once, saying so: not after a long connect timeout
    // as "pool timed out".
    let started = Instant::now();
    let err = SqlBackend::connect(
        SqlConfig::from_url(url)
            .expect("database URL")
            .with_connect_timeout(Duration::from_secs(30)),
    )
    .await
    .expect_err("connected to nothing");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("refused"),
        "the cause is lost: {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a refused connection took {:?}",
        started.elapsed()
    );

    let limit = Duration::from_secs(2);
    let started = Instant::now();
    let err = SqlBackend::connect(
        SqlConfig::from_url(url)
            .expect("database URL")
            .with_connect_timeout(limit),
    )
    .await
    .expect_err("connected to nothing");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        started.elapsed() < limit + Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );

    let ns = ns();
    let c = client(
        sql,
        &ns,
        sql.options()
            .with_connect_timeout(limit)
            .with_request_timeout(limit),
    )
    .await;
    let lock = c.lock("down").unwrap();
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
    stop.await;
    let started = Instant::now();
    let err = lock
        .try_acquire()
        .await
        .expect_err("acquired with the database down");
    assert!(err.is_retryable(), "{err:?}");
    assert!(
        started.elapsed() < limit * 2 + Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    println!(
        "sql-extra[{}] PASS unreachable_is_unavailable_quickly ({:?})",
        sql.label,
        started.elapsed()
    );
}

/// Tables made by a release without the holder columns (`description`,
/// `acquired_ms`), with a live lease that release wrote: a client of this release
/// adds the columns at connect, `inspect` reports the old holder with what it has
/// (owner, token, expiry; no description), and new grants carry their description.
pub async fn tables_without_holder_columns_get_them(url: &str) {
    let prefix = format!(
        "holdcols{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let sql = Sql::new(url, Strategy::Lease, &prefix);
    let first = sql.backend().await.expect("connect");
    let dialect = first.dialect();
    let table = match dialect {
        Dialect::MySql => format!("`{prefix}_leases`"),
        _ => format!("\"{prefix}_leases\""),
    };
    let queue = table.replace("_leases", "_queue");
    for (table, column) in [
        (&table, "description"),
        (&table, "acquired_ms"),
        (&table, "permits"),
        (&queue, "permits"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {table} DROP COLUMN {column}"
        )))
        .execute(first.pool())
        .await
        .expect("drop a newer column");
    }
    // A live exclusive lease as the older release writes it.
    let key = LockKey::new(
        Namespace::new("holdcols").unwrap(),
        LockName::new("old").unwrap(),
    );
    let now = match dialect {
        Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        Dialect::MySql => "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    };
    let insert = format!(
        "INSERT INTO {table} (khash, kind, holder, owner, fence, expires_ms) \
         VALUES ('{}', 0, '', 'old-client:1', 7, {now} + 60000)",
        lock_sql::stored_key(&key)
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(insert))
        .execute(first.pool())
        .await
        .expect("an older release's lease row");
    drop(first);

    let backend = sql.backend().await.expect("connect adds the columns");
    let client = LockClient::builder(backend)
        .namespace("holdcols")
        .holder_description("new holder")
        .build()
        .expect("client");
    let old = client.lock("old").unwrap();
    let info = old.inspect().await.expect("inspect the old holder");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    let holder = &info.holders[0];
    assert_eq!(holder.fencing_token, Some(7), "{info:?}");
    assert_eq!(holder.owner.as_deref(), Some("old-client:1"), "{info:?}");
    assert_eq!(
        (holder.description.as_deref(), holder.acquired_at),
        (None, None)
    );
    assert!(holder.expires_at.is_some(), "{info:?}");
    assert!(
        old.try_acquire().await.unwrap().is_none(),
        "the old lease holds"
    );

    let fresh = client.lock("fresh").unwrap();
    let guard = fresh
        .acquire()
        .await
        .expect("a grant on the migrated tables");
    let info = fresh.inspect().await.expect("inspect");
    assert_eq!(
        info.holders[0].description.as_deref(),
        Some("new holder"),
        "{info:?}"
    );
    assert!(info.holders[0].acquired_at.is_some(), "{info:?}");
    guard.release().await.expect("release");
    // The semaphore's count is kept in the added `permits` columns.
    let permits = client.semaphore("permits", 1).unwrap();
    let permit = permits
        .acquire()
        .await
        .expect("a permit on the migrated tables");
    assert!(permits.try_acquire().await.unwrap().is_none(), "one permit");
    permit.release().await.expect("release the permit");
    assert!(old
        .force_unlock_holder(7)
        .await
        .expect("break the old holder"));
    println!(
        "sql-extra[{}] PASS tables_without_holder_columns_get_them",
        sql.label
    );
}

/// FOR UPDATE: `is_locked` on a free lock must not make a concurrent `try_acquire`
/// fail. A probe that takes the row lock for a moment (`SKIP LOCKED`) does, since the
/// try's `NOWAIT` finds the row locked by it. PostgreSQL reads the lock state instead
/// (the row's `xmax` and the backends' transactions); MariaDB, which exposes no row
/// lock without a wait, still probes, and is only reported here.
pub async fn is_locked_never_makes_a_try_fail(sql: &Sql) {
    let ns = ns();
    let tries = client(sql, &ns, sql.options()).await;
    let lookers = client(sql, &ns, sql.options()).await;
    let lock = tries.lock("probed").unwrap();
    let looker = lookers.lock("probed").unwrap();
    // The row exists once the lock was taken once.
    lock.acquire().await.unwrap().release().await.unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    let looking = tokio::spawn(async move {
        let mut looks = 0u32;
        while Instant::now() < until {
            // Held now and then, by the tries below: the answer is not the point.
            looker.is_locked().await.unwrap();
            looks += 1;
        }
        looks
    });
    // One try at a time, each released before the next: whenever one asks, the lock
    // is free, so every refusal is the probe's doing.
    let (mut granted, mut refused) = (0u32, 0u32);
    while Instant::now() < until {
        match lock.try_acquire().await.unwrap() {
            Some(guard) => {
                granted += 1;
                guard.release().await.unwrap();
            }
            None => refused += 1,
        }
    }
    let looks = looking.await.unwrap();
    let report = format!("{granted} tries granted, {refused} refused, beside {looks} looks");
    tries.shutdown().await.unwrap();
    lookers.shutdown().await.unwrap();
    if sql.url.starts_with("mysql") {
        println!(
            "sql-extra[{}] NOTE is_locked_never_makes_a_try_fail: {report} (MariaDB still probes)",
            sql.label
        );
        return;
    }
    assert_eq!(refused, 0, "a free lock was refused to a try: {report}");
    println!(
        "sql-extra[{}] PASS is_locked_never_makes_a_try_fail: {report}",
        sql.label
    );
}

/// FOR UPDATE: a holder whose network goes silent, its connection still open on the
/// server (a partition, a frozen host), lets the lock go within about its lease by the
/// server's own timer, not after hours of TCP keep-alive. And a holder that lost its
/// locks leaves no holder record behind once it gives them up.
pub async fn a_silent_holder_lets_go(sql: &Sql) {
    let ns = ns();
    let (silent, proxy) = proxied_client(sql, &sql.url, &ns, Duration::from_millis(600)).await;
    let other = client(sql, &ns, sql.options()).await;
    let held = silent.lock("silent").unwrap().acquire().await.unwrap();
    let also_held = silent.lock("also-silent").unwrap().acquire().await.unwrap();

    proxy.cut();
    let cut = Instant::now();
    let next = other
        .lock("silent")
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .expect("the server frees the lock of a holder gone silent");
    let granted = Instant::now();
    // Never while the silent holder may still count on its lease: it runs from before
    // the holder's last statement on the lock's connection, the server's limit from
    // after it.
    assert!(!held.is_held(), "granted while the silent holder held it");
    // The lease is 600 ms (MariaDB: whole seconds); the slack is for a loaded machine.
    let freed_after = granted - cut;
    assert!(freed_after < Duration::from_secs(5), "took {freed_after:?}");
    let loss = tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the silent holder learns it lost the lock");
    assert_ne!(loss, lock_core::LeaseLoss::Released);
    next.release().await.unwrap();

    proxy.heal();
    // Both were lost; their releases remove the holder records.
    let _ = held.release().await;
    let _ = also_held.release().await;
    let checker = sql.backend().await.unwrap();
    let left = rows_left_within(&checker, &ns, Duration::from_secs(10)).await;
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = silent.shutdown().await;
    let _ = other.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_silent_holder_lets_go (freed {freed_after:?} after the cut)",
        sql.label
    );
}

/// A release the server never saw (the network cut while it was sent) still removes
/// the holder record that `status` and `inspect` read, once the server can be reached
/// again, though the lock itself went with the connection.
pub async fn a_release_the_server_missed_still_forgets_its_holder(sql: &Sql) {
    let ns = ns();
    let url = super::with_short_timeouts(&sql.url);
    let (cut_off, proxy) = proxied_client(sql, &url, &ns, Duration::from_secs(30)).await;
    let held = cut_off.lock("missed").unwrap().acquire().await.unwrap();
    proxy.cut();
    let released = held.release().await;
    assert!(
        released.is_err(),
        "a release through a cut network: {released:?}"
    );
    proxy.heal();
    let checker = sql.backend().await.unwrap();
    let left = rows_left_within(&checker, &ns, Duration::from_secs(15)).await;
    assert!(
        left.is_empty(),
        "left behind 15 s after the network came back: {left:?}"
    );
    let _ = cut_off.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_release_the_server_missed_still_forgets_its_holder",
        sql.label
    );
}

/// Lease strategy: a writer whose wait ends while the server cannot be reached (so
/// its queue ticket's removal fails) still removes the ticket once the server can be
/// reached again, long before the ticket would expire on its own: writers and permit
/// waiters queue behind it until then.
pub async fn a_ticket_the_server_missed_the_removal_of_goes(sql: &Sql) {
    let ns = ns();
    // A ticket left alone lives a minute, far longer than the test waits for it.
    let url = format!("{}&queue_ttl=60s", super::with_short_timeouts(&sql.url));
    let (cut_off, proxy) = proxied_client(sql, &url, &ns, Duration::from_secs(30)).await;
    let holder = client(sql, &ns, sql.options()).await;
    let checker = sql.backend().await.unwrap();
    let reading = holder.rw_lock("queued").unwrap().read().await.unwrap();
    let writer_lock = cut_off.rw_lock("queued").unwrap();
    let writer = tokio::spawn(async move {
        writer_lock
            .write_with(AcquireOptions::wait_for(Duration::from_secs(3)))
            .await
            .map(drop)
    });
    // The writer's ticket is in the queue: cut it off while it waits.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = super::leftover_rows(&checker, &ns).await.unwrap();
        if rows.iter().any(|row| row.contains("_queue:")) {
            break;
        }
        assert!(Instant::now() < until, "the writer never queued: {rows:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    let gave_up = writer.await.unwrap();
    assert!(
        gave_up.is_err(),
        "a writer cut off while it waited: {gave_up:?}"
    );
    // Its removal, tried at the end of the wait, failed (else the test shows nothing).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let queued = super::leftover_rows(&checker, &ns).await.unwrap();
    assert!(
        queued.iter().any(|row| row.contains("_queue:")),
        "the ticket went before the network came back: {queued:?}"
    );
    proxy.heal();
    reading.release().await.unwrap();
    let left = rows_left_within(&checker, &ns, Duration::from_secs(15)).await;
    assert!(
        left.is_empty(),
        "left behind 15 s after the network came back: {left:?}"
    );
    let _ = cut_off.shutdown().await;
    let _ = holder.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_ticket_the_server_missed_the_removal_of_goes",
        sql.label
    );
}

/// A downgrade asked again while the first try's call still waits for its reply (cut
/// off, then timed out at the caller; the statement is given longer) carries the same
/// owner: when that call ends without knowing whether it was granted, its undo must
/// not delete the read lease the second try was granted. Else the holder of that read
/// lease believes it holds while a writer is let in.
pub async fn a_downgrade_asked_again_keeps_its_read_side(sql: &Sql) {
    let ns = ns();
    let url = super::with_short_timeouts(&sql.url);
    let (cut_off, proxy) = proxied_client(sql, &url, &ns, Duration::from_secs(30)).await;
    let other = client(sql, &ns, sql.options()).await;
    let lock = cut_off.rw_lock("downgraded").unwrap();
    let write = lock
        .write_with(AcquireOptions::try_once().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    proxy.cut();
    let first_asked = Instant::now();
    let first = write.downgrade().await;
    assert!(first.is_err(), "a downgrade cut off: {first:?}");
    proxy.heal();
    let read = write.downgrade().await.expect("the downgrade asked again");
    write.release().await.unwrap();
    // The first try's call ends by its statement's limit (three request timeouts);
    // then its undo runs. Watch past both, with slack.
    let writers = other.rw_lock("downgraded").unwrap();
    while first_asked.elapsed() < Duration::from_secs(8) {
        assert!(read.is_held(), "the read side was lost");
        if let Some(writer) = writers.try_write().await.unwrap() {
            let after = first_asked.elapsed();
            let _ = writer.release().await;
            panic!("a writer was granted {after:.1?} after the first downgrade, beside the read side of the second, which still believed it held");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    read.release().await.unwrap();
    let _ = cut_off.shutdown().await;
    let _ = other.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_downgrade_asked_again_keeps_its_read_side",
        sql.label
    );
}

/// FOR UPDATE: `inspect` names the holder of a row lock (its owner and token), and
/// a holder cut off for good, whose release never reaches the server, is no holder
/// once the server has let its connection go: `inspect` names nobody and forgets the
/// holder record the cut-off release could not delete.
pub async fn a_holder_cut_off_for_good_is_forgotten(sql: &Sql) {
    let ns = ns();
    let url = super::with_short_timeouts(&sql.url);
    let (cut_off, proxy) = proxied_client(sql, &url, &ns, Duration::from_millis(600)).await;
    let observer = client(sql, &ns, sql.options()).await;
    let lock = observer.lock("cut-off").unwrap();
    let held = cut_off.lock("cut-off").unwrap().acquire().await.unwrap();
    let info = lock.inspect().await.expect("inspect a row lock");
    assert_eq!(info.holders.len(), 1, "one holder: {info:?}");
    assert_eq!(
        info.holders[0].fencing_token,
        Some(held.fencing_token()),
        "{info:?}"
    );
    assert!(info.holders[0].owner.is_some(), "{info:?}");

    proxy.cut();
    // The server ends the silent lock transaction after the lease (600 ms; MariaDB
    // counts whole seconds); the rest is slack for a loaded machine.
    let until = Instant::now() + Duration::from_secs(20);
    while lock.is_locked().await.unwrap() {
        assert!(Instant::now() < until, "the row lock outlived its lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = held.release().await;
    let _ = cut_off.shutdown().await;
    let checker = sql.backend().await.unwrap();
    let stale = super::leftover_rows(&checker, &ns).await.unwrap();
    let info = lock.inspect().await.expect("inspect a free lock");
    assert!(info.holders.is_empty(), "a gone holder named: {info:?}");
    let left = super::leftover_rows(&checker, &ns).await.unwrap();
    assert!(left.is_empty(), "left after inspect: {left:?}");
    let _ = observer.shutdown().await;
    println!(
        "sql-extra[{}] PASS a_holder_cut_off_for_good_is_forgotten (before inspect: {stale:?})",
        sql.label
    );
}

/// FOR UPDATE: a holder record of an earlier grant is never believed, though it names
/// the connection that holds the row now (a pooled connection goes from one holder to
/// the next; a pid is reused): here the record is rewritten by hand to an earlier
/// fence, as a release whose delete failed would have left it.
pub async fn inspect_never_names_an_earlier_grant(sql: &Sql) {
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let lock = holder.lock("earlier").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    let guard = lock.acquire().await.unwrap();
    let checker = sql.backend().await.unwrap();
    let prefix = checker.table_prefix();
    let (q, first, second) = match checker.dialect() {
        lock_sql::Dialect::MySql => ('`', "?", "?"),
        _ => ('"', "$1", "$2"),
    };
    let sql_text = format!(
        "UPDATE {q}{prefix}_holders{q} SET owner = 'gone', fence = {first} WHERE khash IN \
         (SELECT khash FROM {q}{prefix}_keys{q} WHERE namespace = {second})"
    );
    let rewritten = sqlx::query(sqlx::AssertSqlSafe(sql_text))
        .bind(guard.fencing_token() as i64 - 1)
        .bind(ns.clone())
        .execute(checker.pool())
        .await
        .unwrap();
    assert_eq!(rewritten.rows_affected(), 1, "one holder record");
    let info = lock.inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(
        info.holders[0].owner, None,
        "an earlier grant named: {info:?}"
    );
    guard.release().await.unwrap();
    let left = rows_left_within(&checker, &ns, Duration::from_secs(5)).await;
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = holder.shutdown().await;
    println!(
        "sql-extra[{}] PASS inspect_never_names_an_earlier_grant",
        sql.label
    );
}

/// A client of `sql`'s tables through `url` (`sql`'s server, perhaps with other
/// settings) behind a fresh proxy the test can cut, and that proxy.
async fn proxied_client(
    sql: &Sql,
    url: &str,
    namespace: &str,
    watchdog_lease: Duration,
) -> (
    std::sync::Arc<dyn lock_core::LockProvider>,
    std::sync::Arc<conformance_tests::proxy::Blackhole>,
) {
    use conformance_tests::checker::{CutOff as _, ProxiedUrl};
    let (strategy, prefix) = (sql.strategy, sql.prefix.clone());
    let hook = ProxiedUrl::new(url, move |through| {
        std::sync::Arc::new(Sql::new(&through, strategy, &prefix))
    })
    .expect("a loopback URL");
    let (proxied, proxy) = hook.cuttable().await.expect("proxy");
    let client = proxied
        .client(conformance_tests::ClientOptions {
            namespace: namespace.to_owned(),
            watchdog_lease,
            holder_description: None,
        })
        .await
        .expect("client");
    (client, proxy)
}

/// The holder records and row locks of `namespace` still there after `limit` (or as
/// soon as there are none), looked up on one connection of `checker`.
async fn rows_left_within(checker: &SqlBackend, namespace: &str, limit: Duration) -> Vec<String> {
    let until = Instant::now() + limit;
    loop {
        let mut left = super::leftover_rows(checker, namespace).await.unwrap();
        left.extend(
            super::held_row_locks(checker, namespace, false)
                .await
                .unwrap(),
        );
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The session strategy keeps its fence counters off the disk: a server crash empties
/// them. Tokens drawn after the crash must still be above every token drawn before it
/// (the counter is floored by the server clock). The test checks the crash did empty
/// the counters, so it exercises that path and not a clean shutdown.
pub async fn session_tokens_never_go_back_across_a_crash(
    sql: &Sql,
    server: &mut conformance_tests::server::TestServer,
) {
    assert_eq!(sql.strategy, Strategy::Session);
    let ns = ns();
    let fences = {
        let backend = sql.backend().await.expect("connect");
        match backend.dialect() {
            Dialect::MySql => format!("SELECT COUNT(*) FROM `{}_fences`", sql.prefix),
            _ => format!("SELECT COUNT(*) FROM \"{}_fences\"", sql.prefix),
        }
    };
    let counters = |backend: SqlBackend| {
        let fences = fences.clone();
        async move {
            let row = sqlx::query(sqlx::AssertSqlSafe(fences))
                .fetch_one(backend.pool())
                .await
                .expect("count the fence counters");
            row.try_get::<i64, _>(0).expect("a count")
        }
    };
    let before = client(sql, &ns, sql.options()).await;
    let lock = before.lock("crash").unwrap();
    let mut last = 0;
    for _ in 0..50 {
        let guard = lock.acquire().await.expect("acquire before the crash");
        assert!(guard.fencing_token() > last, "tokens increase");
        last = guard.fencing_token();
        guard.release().await.expect("release");
    }
    assert!(counters(before.backend().clone()).await > 0);
    // Held across the crash: the new server must not count it as held.
    let held = lock.acquire().await.expect("acquire");
    last = held.fencing_token();
    server.kill().await.expect("kill the server");
    server.restart().await.expect("restart the server");
    super::servers::wait_until_ready(&sql.url).await;
    let after = client(sql, &ns, sql.options()).await;
    assert_eq!(
        counters(after.backend().clone()).await,
        0,
        "the crash emptied the fence counters"
    );
    let next = after
        .lock("crash")
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock is free after the crash");
    assert!(
        next.fencing_token() > last,
        "token {} after the crash is not above {last} before it",
        next.fencing_token()
    );
    let loss = tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the holder learns its lock went with the server");
    assert_ne!(loss, lock_core::LeaseLoss::Released);
    next.release().await.expect("release after the crash");
    // The first client's pooled connections all died with the server: its next lock
    // runs on a new one, not into an error.
    let again = before
        .lock("after-the-crash")
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("a client whose connections died with the server locks again");
    assert!(again.fencing_token() > last);
    again.release().await.expect("release");
    println!(
        "sql-extra[{}] PASS session_tokens_never_go_back_across_a_crash",
        sql.label
    );
}

/// Connection-held strategies with a small held-lock pool: a lock waiting for a
/// connection gets the one a release frees, never held back for later (the session
/// strategy keeps released connections aside for its next locks).
pub async fn a_released_connection_goes_to_whoever_waits(sql: &Sql) {
    let ns = ns();
    for limit in [1, 2] {
        let options = sql.options().with_max_held_locks(limit);
        let client = client(sql, &ns, options).await;
        for _ in 0..3 {
            let warm = client.lock("warm").unwrap().acquire().await.unwrap();
            warm.release().await.unwrap();
        }
        let held: Vec<_> = {
            let mut held = Vec::new();
            for i in 0..limit {
                let lock = client.lock(&format!("held-{i}")).unwrap();
                held.push(lock.acquire().await.unwrap());
            }
            held
        };
        let waiter = {
            let lock = client.lock("waiting").unwrap();
            tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        for guard in held {
            guard.release().await.unwrap();
        }
        let got = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter got a connection")
            .expect("task")
            .expect("acquired once a connection was free");
        got.release().await.unwrap();
        client.shutdown().await.expect("shutdown");
    }
    println!(
        "sql-extra[{}] PASS a_released_connection_goes_to_whoever_waits",
        sql.label
    );
}

/// PostgreSQL, lease strategy: a client none of whose handles waits does not listen
/// for releases, so others' releases send it nothing. One whose waiter is blocked
/// listens (again on a new connection if its connection is killed), gets the lock at
/// its release (not at a poll), and stops listening a while after its last waiter
/// left.
pub async fn only_a_waiting_client_hears_releases(sql: &Sql) {
    let ns = ns();
    // Polls 10-20 s apart: a grant sooner than that is a wake-up.
    let separator = if sql.url.contains('?') { '&' } else { '?' };
    let slow_polls = format!("{}{separator}poll_min=20s&poll_max=20s", sql.url);
    let (proxied, proxy) = proxied_client(sql, &slow_polls, &ns, Duration::from_secs(60)).await;
    // A 30 s lease: the holder's expiry does not cut the waiter's polls short either.
    let other = slow_polling_clients(sql, &ns, 1).await.remove(0);
    let checker = sql.backend().await.unwrap();
    // The listening sessions of the database, by backend pid.
    let listening = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .fetch_all(checker.pool())
        .await
        .unwrap()
    };
    // Sessions left by earlier tests' clients are not this client's.
    let earlier = listening().await;
    // This client's listening session once there is one (within 20 s), other than
    // `not`.
    let new_listening = |not: Option<i64>| {
        let (listening, earlier) = (&listening, &earlier);
        async move {
            let since = Instant::now();
            loop {
                let now = listening().await;
                if let Some(pid) = now
                    .into_iter()
                    .find(|pid| !earlier.contains(pid) && Some(*pid) != not)
                {
                    return pid;
                }
                assert!(
                    since.elapsed() < Duration::from_secs(20),
                    "a client with a blocked waiter never listened"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let releases = |n: usize| {
        let other = &other;
        async move {
            for i in 0..n {
                let lock = other.lock(&format!("elsewhere-{i}")).unwrap();
                lock.acquire().await.unwrap().release().await.unwrap();
            }
        }
    };
    // What the releases send `proxied`, once their notifications had time to arrive.
    let proxy = &proxy;
    let releases = &releases;
    let heard = |n: usize| async move {
        let before = proxy.chunks_to_client();
        releases(n).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.chunks_to_client() - before
    };
    let idle = heard(20).await;
    assert_eq!(
        idle, 0,
        "a client with no waiter heard {idle} chunks of others' releases"
    );
    assert!(
        listening().await.iter().all(|pid| earlier.contains(pid)),
        "a client with no waiter listens"
    );

    let held = other.lock("bell").unwrap().acquire().await.unwrap();
    let lock = proxied.lock("bell").unwrap();
    let waiter = tokio::spawn(async move {
        let guard = tokio::time::timeout(Duration::from_secs(60), lock.acquire()).await;
        (Instant::now(), guard)
    });
    let first = new_listening(None).await;
    // Its listening connection is killed: it listens again on a new one.
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend(CAST($1 AS INTEGER))")
        .bind(first)
        .fetch_one(checker.pool())
        .await
        .unwrap();
    assert!(
        killed,
        "the listening session {first} was not there to kill"
    );
    new_listening(Some(first)).await;
    // Its look after the listening began is made.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (granted, guard) = waiter.await.unwrap();
    guard.expect("granted").unwrap().release().await.unwrap();
    let took = granted - released;
    assert!(
        took < Duration::from_millis(1500),
        "granted {took:?} after the release"
    );

    let left = Instant::now();
    loop {
        let ours = listening()
            .await
            .into_iter()
            .any(|pid| !earlier.contains(&pid));
        if !ours && heard(10).await == 0 {
            break;
        }
        assert!(
            left.elapsed() < Duration::from_secs(60),
            "still listening a minute after its last waiter left"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = proxied.shutdown().await;
    println!(
        "sql-extra[{}] PASS only_a_waiting_client_hears_releases (granted {took:?} after the \
         release; deaf {:?} after the waiter left)",
        sql.label,
        left.elapsed()
    );
}

/// A guard of a lock pinned to a connection (FOR UPDATE, session), dropped on a thread
/// outside any runtime: no panic, and the connection is closed, which frees the lock
/// at once, well before its lease's end.
pub async fn a_guard_dropped_outside_a_runtime_frees_its_lock(sql: &Sql) {
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let other = client(sql, &ns, sql.options()).await;
    let fixed = AcquireOptions::try_once().lease(Duration::from_secs(600));
    let guard = holder
        .lock("off-runtime")
        .unwrap()
        .acquire_with(fixed)
        .await
        .unwrap();
    let dropped = std::thread::spawn(move || drop(guard)).join();
    assert!(
        dropped.is_ok(),
        "{}: dropping a guard outside a runtime panicked",
        sql.label
    );
    let lock = other.lock("off-runtime").unwrap();
    let next = lock.acquire_timeout(Duration::from_secs(30)).await;
    let next = next.unwrap_or_else(|err| {
        panic!(
            "{}: the lock of a guard dropped outside a runtime stayed held: {err}",
            sql.label
        )
    });
    next.release().await.unwrap();
}

/// A wait whose deadline lies past the server's longest lock limit (PostgreSQL's
/// `lock_timeout` stops at `i32::MAX` ms, about 24.8 days) is a valid wait: it is
/// granted when the lock is freed, not refused by the server, and not ended early.
pub async fn a_wait_past_the_servers_longest_limit_is_granted(sql: &Sql) {
    let ns = ns();
    let holder = client(sql, &ns, sql.options()).await;
    let waiter = client(sql, &ns, sql.options()).await;
    let held = holder.lock("long-wait").unwrap().acquire().await.unwrap();
    let lock = waiter.lock("long-wait").unwrap();
    let thirty_days = Duration::from_secs(30 * 24 * 60 * 60);
    let waiting = tokio::spawn(async move { lock.acquire_timeout(thirty_days).await });
    // The waiter is in the server's queue (or refused) well before this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    held.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap_or_else(|_| panic!("{}: a freed lock was not granted in 30 s", sql.label))
        .unwrap();
    let granted =
        granted.unwrap_or_else(|err| panic!("{}: a 30-day wait failed: {err}", sql.label));
    granted.release().await.unwrap();
    println!(
        "sql-extra[{}] PASS a_wait_past_the_servers_longest_limit_is_granted",
        sql.label
    );
}
