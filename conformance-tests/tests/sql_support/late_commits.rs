//! PostgreSQL: grants whose commit lands after the acquire gave up on it. A commit is
//! held back here the way a production server holds it when its synchronous standby
//! stops answering (`synchronous_standby_names` naming a standby that never comes;
//! only the acquiring client's sessions ask for synchronous commit). Once the standby
//! setting is cleared, the held commits land. Whatever lands must be undone by the
//! client that gave up on it; otherwise a lease nobody holds blocks the lock for its
//! whole time to live.

use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockClient;
use lock_sql::{sqlx, SqlBackend};
use sqlx::Connection as _;
use tokio::time::Instant;

use super::Sql;

/// Longer than any wait below: an orphaned lease would outlast the test.
const LEASE: Duration = Duration::from_secs(120);

/// `url` with a session setting for synchronous commit added.
fn with_sync_commit(url: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options[synchronous_commit]={value}")
}

/// A raw connection whose commits never wait for a standby.
async fn admin(url: &str) -> sqlx::AnyConnection {
    sqlx::AnyConnection::connect(&with_sync_commit(url, "local"))
        .await
        .expect("an admin connection")
}

/// Makes commits of synchronous sessions wait for a standby that never answers (or
/// stops that), and waits until the server applies it (the checkpointer reads the
/// setting some time after the reload).
async fn hold_commits(url: &str, hold: bool) {
    let mut admin = admin(url).await;
    sqlx::raw_sql("CREATE TABLE IF NOT EXISTS late_commit_probe (x INTEGER)")
        .execute(&mut admin)
        .await
        .unwrap();
    let set = if hold {
        "ALTER SYSTEM SET synchronous_standby_names = 'nobody'"
    } else {
        "ALTER SYSTEM RESET synchronous_standby_names"
    };
    sqlx::raw_sql(set).execute(&mut admin).await.unwrap();
    sqlx::raw_sql("SELECT pg_reload_conf()")
        .execute(&mut admin)
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        // A commit of a synchronous session that wrote something either waits (held)
        // or not.
        let mut probe = sqlx::AnyConnection::connect(&with_sync_commit(url, "on"))
            .await
            .unwrap();
        let commit = sqlx::raw_sql("INSERT INTO late_commit_probe VALUES (1)").execute(&mut probe);
        let held = tokio::time::timeout(Duration::from_millis(300), commit)
            .await
            .is_err();
        if held == hold {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server did not apply synchronous_standby_names (hold: {hold})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until a session of this database waits for the standby, and returns its pid.
async fn session_waiting_for_standby(url: &str) -> i32 {
    let mut admin = admin(url).await;
    let started = Instant::now();
    loop {
        let pid: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
             AND datname = current_database() AND query NOT LIKE '%late_commit_probe%' LIMIT 1",
        )
        .fetch_optional(&mut admin)
        .await
        .unwrap();
        if let Some(pid) = pid {
            return pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no acquire commit waited for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn client(sql: &Sql, url: &str, namespace: &str) -> LockClient<SqlBackend> {
    described_client(sql, url, namespace, "late-commits test").await
}

async fn described_client(
    sql: &Sql,
    url: &str,
    namespace: &str,
    description: &str,
) -> LockClient<SqlBackend> {
    let options = Sql::new(url, sql.strategy, &sql.prefix)
        .options()
        .with_request_timeout(Duration::from_secs(1));
    let backend = SqlBackend::connect(options).await.expect("connect");
    LockClient::builder(backend)
        .namespace(namespace)
        .watchdog_lease(LEASE)
        .holder_description(description)
        .build()
        .expect("client")
}

/// The lock is free for another client within `within`, which is far shorter than
/// the lease of anything the acquire of `what` may have left behind.
async fn free_for_another(sql: &Sql, namespace: &str, name: &str, fair: bool, what: &str) {
    let other = client(sql, &with_sync_commit(&sql.url, "local"), namespace).await;
    let within = Duration::from_secs(15);
    let started = Instant::now();
    let guard = if fair {
        other.fair_lock(name).unwrap().acquire_timeout(within).await
    } else {
        other.lock(name).unwrap().acquire_timeout(within).await
    };
    let guard = guard.unwrap_or_else(|e| {
        panic!(
            "{what}: the lock stayed taken {:?} after the acquire gave up ({e}): a lease \
             nobody holds blocks it for {LEASE:?}",
            started.elapsed()
        )
    });
    println!(
        "sql-extra[{}] {what}: free for another client {:?} after the acquire gave up",
        sql.label,
        started.elapsed()
    );
    guard.release().await.unwrap();
    other.shutdown().await.unwrap();
}

/// An uncontended grant (one autocommitted statement) whose implicit COMMIT fails
/// (here a deferred constraint trigger refuses it; in production a serialization
/// failure under a serializable default, a full disk, a crash) granted nothing: the
/// client must not take it for a grant. PostgreSQL sends the statement's rows before
/// that commit.
pub async fn a_grant_whose_commit_failed_is_not_taken(sql: &Sql) {
    let ns = format!("late-{}", uuid::Uuid::new_v4().simple());
    let refused = described_client(sql, &sql.url, &ns, "refused at commit").await;
    let other = client(sql, &sql.url, &ns).await;
    // Tables made first.
    let lock = refused.lock("refused").unwrap();
    let _ = lock.is_locked().await.unwrap();
    let leases = format!("{}_leases", sql.prefix);
    let mut admin = admin(&sql.url).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE OR REPLACE FUNCTION late_commit_refuse() RETURNS trigger AS $$ BEGIN \
           IF NEW.description = 'refused at commit' THEN RAISE EXCEPTION 'refused at commit'; END IF; \
           RETURN NEW; END $$ LANGUAGE plpgsql; \
         CREATE CONSTRAINT TRIGGER late_commit_refuse AFTER INSERT OR UPDATE ON {leases} \
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION late_commit_refuse()"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    let first = lock.try_acquire().await;
    // Not a single try: on a loaded machine the refused try may answer with its 1 s
    // request timeout while its statement still runs, and its uncommitted row keeps a
    // try out until the commit is refused. A row left behind would block for LEASE.
    let second = other
        .lock("refused")
        .unwrap()
        .acquire_timeout(Duration::from_secs(15))
        .await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP TRIGGER late_commit_refuse ON {leases}"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    if let Ok(Some(first)) = &first {
        panic!(
            "the refused grant (its commit failed) was taken as granted (token {}), and \
             another client {} the lock at the same time",
            first.fencing_token(),
            if second.is_ok() {
                "holds"
            } else {
                "does not hold"
            }
        );
    }
    let second = second.unwrap_or_else(|e| {
        panic!("the lock was not free for another client ({e}) after the refused try answered {first:?}")
    });
    println!(
        "sql-extra[{}] the refused try answered {:?}",
        sql.label,
        first.map(|g| g.is_some())
    );
    second.release().await.unwrap();
    refused.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
    println!(
        "sql-extra[{}] PASS a_grant_whose_commit_failed_is_not_taken",
        sql.label
    );
}

/// An uncontended grant (one autocommitted statement) commits, and its session is
/// terminated while it waits for the standby: the grant is visible, the client gets
/// only an error. The client must undo it, not run it again beside itself.
pub async fn a_grant_whose_reply_was_lost_is_undone(sql: &Sql) {
    let ns = format!("late-{}", uuid::Uuid::new_v4().simple());
    let url = with_sync_commit(&sql.url, "on");
    let acquirer = client(sql, &url, &ns).await;
    let lock = acquirer.lock("hot").unwrap();
    // Tables made and a hot connection open before commits are held.
    lock.acquire().await.unwrap().release().await.unwrap();
    hold_commits(&sql.url, true).await;
    let trying = tokio::spawn(async move { lock.try_acquire().await });
    let pid = session_waiting_for_standby(&sql.url).await;
    let mut admin = admin(&sql.url).await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&mut admin)
        .await
        .unwrap();
    hold_commits(&sql.url, false).await;
    let tried = tokio::time::timeout(Duration::from_secs(30), trying)
        .await
        .expect("the try ended")
        .unwrap();
    let rows = super::leftover_rows(&sql.backend().await.unwrap(), &ns).await;
    println!(
        "sql-extra[{}] the try answered {:?}; rows: {rows:?}",
        sql.label,
        tried
            .as_ref()
            .map(|g| g.as_ref().map(|g| g.fencing_token()))
    );
    drop(tried);
    free_for_another(sql, &ns, "hot", false, "a grant whose reply was lost").await;
    acquirer.shutdown().await.unwrap();
    println!(
        "sql-extra[{}] PASS a_grant_whose_reply_was_lost_is_undone",
        sql.label
    );
}

/// A queued fair waiter is granted in a transaction whose COMMIT waits for the
/// standby longer than the client waits for it. The client gives up; the commit lands
/// later. Its clean-up must not have run before the commit landed.
pub async fn a_grant_committed_after_its_timeout_is_undone(sql: &Sql) {
    let ns = format!("late-{}", uuid::Uuid::new_v4().simple());
    let url = with_sync_commit(&sql.url, "on");
    let holder = client(sql, &with_sync_commit(&sql.url, "local"), &ns).await;
    let acquirer = client(sql, &url, &ns).await;
    let held = holder.fair_lock("queued").unwrap().acquire().await.unwrap();
    let lock = acquirer.fair_lock("queued").unwrap();
    let waiting = tokio::spawn(async move {
        lock.acquire_timeout(Duration::from_secs(60))
            .await
            .map(|guard| guard.fencing_token())
    });
    // Queued (its ticket committed) well before the holder's lease ends.
    tokio::time::sleep(Duration::from_millis(500)).await;
    hold_commits(&sql.url, true).await;
    // The holder's sessions commit without a standby; the waiter's grant then waits.
    held.release().await.unwrap();
    let _pid = session_waiting_for_standby(&sql.url).await;
    // Longer than the client waits for any commit (three request timeouts).
    tokio::time::sleep(Duration::from_secs(5)).await;
    hold_commits(&sql.url, false).await;
    let waited = tokio::time::timeout(Duration::from_secs(70), waiting)
        .await
        .expect("the waiter ended")
        .unwrap();
    println!("sql-extra[{}] the waiter answered {waited:?}", sql.label);
    if let Ok(_token) = waited {
        // Granted after all (a later attempt): nothing was orphaned by this client.
        acquirer.shutdown().await.unwrap();
        holder.shutdown().await.unwrap();
        println!(
            "sql-extra[{}] NOTE a_grant_committed_after_its_timeout_is_undone: the waiter \
             was granted on a later attempt",
            sql.label
        );
        return;
    }
    free_for_another(
        sql,
        &ns,
        "queued",
        true,
        "a grant committed after its timeout",
    )
    .await;
    acquirer.shutdown().await.unwrap();
    holder.shutdown().await.unwrap();
    println!(
        "sql-extra[{}] PASS a_grant_committed_after_its_timeout_is_undone",
        sql.label
    );
}
