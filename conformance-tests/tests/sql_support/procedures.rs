//! MariaDB's stored procedures (the lease strategy's grant, the session strategy's
//! try and release) are an optimisation, never a requirement: a user that may not
//! create them gets its locks, sharing them with clients that call them, and a
//! procedure dropped under a running client is no error.

use lock_core::prelude::*;
use lock_core::LockClient;
use lock_sql::{sqlx, SqlBackend, Strategy};
use sqlx::{AnyPool, Row};

use super::extra::{client, ns};
use super::Sql;

/// A user of the test's database that may use and make tables but not procedures (no
/// `CREATE ROUTINE`), and a connection of the server's own user beside it.
struct LimitedUser {
    root: AnyPool,
    name: String,
    /// The test's URL with this user's credentials.
    url: String,
}

impl LimitedUser {
    /// Makes the user; `None`, with a SKIP line for `check`, if the server will not.
    async fn new(sql: &Sql, check: &str) -> Option<Self> {
        let name = format!("u{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let root = AnyPool::connect(&sql.url).await.expect("connect");
        let database: String = sqlx::query("SELECT DATABASE()")
            .fetch_one(&root)
            .await
            .expect("database")
            .get(0);
        let created = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE USER '{name}'@'%' IDENTIFIED BY 'pw'; \
             GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX ON `{database}`.* TO '{name}'@'%'"
        )))
        .execute(&root)
        .await;
        if let Err(e) = created {
            println!(
                "sql-extra[{}] SKIP {check}: no user could be made: {e}",
                sql.label
            );
            return None;
        }
        let (scheme, rest) = sql.url.split_once("://").expect("a URL");
        let host = rest.split_once('@').map_or(rest, |(_, host)| host);
        let url = format!("{scheme}://{name}:pw@{host}");
        Some(LimitedUser { root, name, url })
    }

    /// The procedures of tables `prefix` whose role is `role` (`grant`, `take`,
    /// `free`).
    async fn procedures(&self, prefix: &str, role: &str) -> Vec<String> {
        sqlx::query(
            "SELECT CAST(routine_name AS CHAR) FROM information_schema.routines \
             WHERE routine_schema = DATABASE() AND routine_name LIKE ?",
        )
        .bind(format!("{prefix}\\_{role}\\_%"))
        .fetch_all(&self.root)
        .await
        .expect("routines")
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect()
    }

    async fn drop_procedure(&self, name: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP PROCEDURE `{name}`")))
            .execute(&self.root)
            .await
            .expect("drop the procedure");
    }

    /// How many `CALL`s the server has run, all sessions together.
    async fn calls(&self) -> i64 {
        let row = sqlx::query(
            "SELECT CAST(variable_value AS SIGNED) FROM information_schema.global_status \
             WHERE variable_name = 'COM_CALL_PROCEDURE'",
        )
        .fetch_one(&self.root)
        .await
        .expect("global status");
        row.get(0)
    }

    async fn remove(self) {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP USER '{}'@'%'",
            self.name
        )))
        .execute(&self.root)
        .await;
    }
}

fn table_prefix() -> String {
    format!("noproc{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// MariaDB, lease strategy: a database user that may not create procedures connects
/// and gets its locks through the client-side transaction, and excludes (and is
/// excluded by) a client that calls the grant procedure on the same tables; the
/// procedure dropped under a running client is no error either.
pub async fn locks_work_without_the_grant_procedure(sql: &Sql) {
    const CHECK: &str = "locks_work_without_the_grant_procedure";
    let Some(user) = LimitedUser::new(sql, CHECK).await else {
        return;
    };
    let ns = ns();
    let prefix = table_prefix();
    let admin = Sql::new(&sql.url, Strategy::Lease, &prefix);
    let limited = Sql::new(&user.url, Strategy::Lease, &prefix);
    let without = client(&limited, &ns, limited.options()).await;
    let lock = without.lock("plain").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    let made = user.procedures(&prefix, "grant").await;
    assert!(
        made.is_empty(),
        "a user without CREATE ROUTINE made {made:?}"
    );
    // The same tables through the procedure (made by this client, which may).
    let with = client(&admin, &ns, admin.options()).await;
    let token = exclude_each_other(&without, &with).await;
    // The other kinds, each way round: a writer against a reader, a fair holder
    // against a fair try.
    for (first, second) in [(&without, &with), (&with, &without)] {
        let writing = first.rw_lock("rw").unwrap().write().await.unwrap();
        let read = second.rw_lock("rw").unwrap().try_read().await.unwrap();
        assert!(read.is_none(), "a reader beside a writer of the other path");
        writing.release().await.unwrap();
        let reading = second.rw_lock("rw").unwrap().read().await.unwrap();
        let write = first.rw_lock("rw").unwrap().try_write().await.unwrap();
        assert!(
            write.is_none(),
            "a writer beside a reader of the other path"
        );
        reading.release().await.unwrap();
        let fair = first.fair_lock("fair").unwrap().acquire().await.unwrap();
        let other = second
            .fair_lock("fair")
            .unwrap()
            .try_acquire()
            .await
            .unwrap();
        assert!(other.is_none(), "two holders of a fair lock, one per path");
        fair.release().await.unwrap();
    }
    let made = user.procedures(&prefix, "grant").await;
    assert_eq!(made.len(), 1, "procedures: {made:?}");
    user.drop_procedure(&made[0]).await;
    let after = with.lock("plain").unwrap().acquire().await.unwrap();
    assert!(after.fencing_token() > token, "tokens went back");
    after.release().await.unwrap();
    let _ = without.shutdown().await;
    let _ = with.shutdown().await;
    user.remove().await;
    println!("sql-extra[{}] PASS {CHECK}", sql.label);
}

/// MariaDB, session strategy: as the lease strategy's grant procedure, its try and
/// release procedures serve a client that may call them, which shares its locks with
/// one that sends the statements as text; dropped while a lock is held, the release
/// and the next tries go as text. On a server of its own (`private_server`), the
/// check also reads the server's count of calls: none while the client without them
/// runs alone, two a cycle or more while a client with them does.
pub async fn session_locks_work_without_their_procedures(sql: &Sql, private_server: bool) {
    const CHECK: &str = "session_locks_work_without_their_procedures";
    const CYCLES: i64 = 5;
    let Some(user) = LimitedUser::new(sql, CHECK).await else {
        return;
    };
    let ns = ns();
    let prefix = table_prefix();
    let admin = Sql::new(&sql.url, Strategy::Session, &prefix);
    let limited = Sql::new(&user.url, Strategy::Session, &prefix);
    let without = client(&limited, &ns, limited.options()).await;
    let lock = without.lock("plain").unwrap();
    let before = user.calls().await;
    for _ in 0..CYCLES {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let calls = user.calls().await - before;
    if private_server {
        assert_eq!(calls, 0, "a client without the procedures called some");
    }
    for role in ["take", "free"] {
        let made = user.procedures(&prefix, role).await;
        assert!(
            made.is_empty(),
            "a user without CREATE ROUTINE made {made:?}"
        );
    }
    let with = client(&admin, &ns, admin.options()).await;
    let mine = with.lock("plain").unwrap();
    let before = user.calls().await;
    for _ in 0..CYCLES {
        mine.acquire().await.unwrap().release().await.unwrap();
    }
    let calls = user.calls().await - before;
    if private_server {
        assert!(
            calls >= 2 * CYCLES,
            "{calls} calls for {CYCLES} cycles through the procedures"
        );
    }
    exclude_each_other(&without, &with).await;
    // A counter far above the clock: the procedure's token is one past it.
    let fences = format!("{prefix}_fences");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE `{fences}` SET fence = fence + 1000000000000"
    )))
    .execute(&user.root)
    .await
    .expect("raise the fence");
    let raised: i64 = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT CAST(MAX(fence) AS SIGNED) FROM `{fences}`"
    )))
    .fetch_one(&user.root)
    .await
    .expect("read the fence")
    .get(0);
    // Two more clients that call the procedures, for the drop below.
    let (one, two) = (
        client(&admin, &ns, admin.options()).await,
        client(&admin, &ns, admin.options()).await,
    );
    let before = user.calls().await;
    for warm in [&one, &two] {
        let name = warm.lock("warm").unwrap();
        name.acquire().await.unwrap().release().await.unwrap();
    }
    let calls = user.calls().await - before;
    if private_server {
        assert!(
            calls >= 4,
            "{calls} calls for 2 cycles through the procedures"
        );
    }
    let held = mine.acquire().await.unwrap();
    assert_eq!(
        held.fencing_token(),
        raised as u64 + 1,
        "the token is not one past the counter"
    );
    // Dropped while that lock is held: a try of that lock, a try of another, and the
    // holder's release each find them gone and go as text.
    for role in ["take", "free"] {
        let made = user.procedures(&prefix, role).await;
        assert_eq!(made.len(), 1, "{role} procedures: {made:?}");
        user.drop_procedure(&made[0]).await;
    }
    let theirs = one.lock("plain").unwrap();
    assert!(
        theirs.try_acquire().await.unwrap().is_none(),
        "a try without its procedure took a held lock"
    );
    let free = two.lock("free").unwrap().try_acquire().await.unwrap();
    free.expect("a try without its procedure missed a free lock")
        .release()
        .await
        .unwrap();
    let token = held.fencing_token();
    held.release().await.unwrap();
    let taken = theirs.try_acquire().await.unwrap().expect("released");
    assert!(taken.fencing_token() > token, "tokens went back");
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "a lock taken as text, taken again"
    );
    let token = taken.fencing_token();
    taken.release().await.unwrap();
    let again = mine.acquire().await.unwrap();
    assert!(again.fencing_token() > token, "tokens went back");
    again.release().await.unwrap();
    for done in [without, with, one, two] {
        let _ = done.shutdown().await;
    }
    user.remove().await;
    println!("sql-extra[{}] PASS {CHECK}", sql.label);
}

/// A lock held through one client is refused to the other, each way round, with
/// tokens increasing; the last token.
async fn exclude_each_other(
    without: &LockClient<SqlBackend>,
    with: &LockClient<SqlBackend>,
) -> u64 {
    let mut last = 0;
    for (first, second) in [(with, without), (without, with)] {
        let held = first.lock("plain").unwrap().acquire().await.unwrap();
        assert!(held.fencing_token() > last, "tokens went back");
        assert!(
            second
                .lock("plain")
                .unwrap()
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "two holders, one per path"
        );
        last = held.fencing_token();
        held.release().await.unwrap();
    }
    last
}
