//! What the postgres, mysql and sqlite test targets share: the servers, the
//! conformance `Backend` over lock-sql, and the SQL-specific fault tests.

#![allow(dead_code, unreachable_pub)] // each target uses its own part

pub mod extra;
pub mod late_commits;
pub mod orphans;
pub mod procedures;
pub mod servers;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::{Backend, ClientOptions, HolderSpec};
use lock_core::{LockFamily, LockKey, LockProvider};
use lock_sql::{sqlx, SqlBackend, SqlConfig, Strategy};
use sqlx::Row as _;

/// One database with one strategy, as the suite sees it.
pub struct Sql {
    /// `postgres`, `postgres/for-update`, ...
    pub label: String,
    pub url: String,
    pub strategy: Strategy,
    pub prefix: String,
}

impl Sql {
    pub fn new(url: &str, strategy: Strategy, prefix: &str) -> Self {
        let dialect = url.split(':').next().unwrap_or_default().to_owned();
        let label = match strategy {
            Strategy::ForUpdate => format!("{dialect}/for-update"),
            Strategy::Session => format!("{dialect}/session"),
            _ => dialect,
        };
        Sql {
            label,
            url: url.to_owned(),
            strategy,
            prefix: prefix.to_owned(),
        }
    }

    /// The same database under another name in reports (`postgres+tls`, ...).
    pub fn labelled(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// The URL's settings (TLS, ...), with this strategy, prefix and a small pool.
    pub fn options(&self) -> SqlConfig {
        SqlConfig::from_url(&self.url)
            .expect("a test URL with valid settings")
            .with_strategy(self.strategy)
            .with_table_prefix(self.prefix.clone())
            .with_max_connections(4)
    }

    pub async fn backend(&self) -> lock_core::Result<SqlBackend> {
        SqlBackend::connect(self.options()).await
    }
}

#[async_trait]
impl Backend for Sql {
    fn name(&self) -> &str {
        &self.label
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        // Check the client options before connecting, as a caller would see them.
        options.check()?;
        options.client(self.backend().await?)
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        let backend = self.backend().await.map_err(|e| e.to_string())?;
        // FOR UPDATE and session: the server's locks first, then the tables. A client
        // cut off for good cannot delete its holder records; `inspect` names no holder
        // of a free lock and deletes those (the SQL extras check the records a release
        // deletes).
        let mut left = Vec::new();
        if self.strategy != Strategy::Lease {
            left.extend(held_row_locks(&backend, namespace, true).await?);
        }
        left.extend(leftover_rows(&backend, namespace).await?);
        Ok(left)
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        use lock_core::backend::LockBackend as _;
        let backend = self.backend().await.map_err(|e| e.to_string())?;
        match self.strategy {
            // The row vanishes behind the holder's back.
            Strategy::Lease => {
                let (lo, hi) = match family {
                    LockFamily::Exclusive => (0, 0),
                    LockFamily::Fair => (1, 1),
                    LockFamily::ReadWrite => (2, 3),
                    LockFamily::Semaphore => (4, 4),
                    LockFamily::Election => (5, 5),
                };
                delete_leases(&backend, key, lo, hi).await
            }
            // The connection holding the row lock is killed.
            _ => backend
                .force_unlock(key, family)
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
        }
    }

    fn holder_command(&self, spec: &HolderSpec) -> Option<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
        let strategy = match self.strategy {
            Strategy::ForUpdate => "for-update",
            Strategy::Session => "session",
            _ => "lease",
        };
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let url = format!(
            "{}{sep}lock_strategy={strategy}&lock_table_prefix={}",
            self.url, self.prefix
        );
        cmd.args(["--url", &url])
            .args(["--namespace", &spec.namespace])
            .args(["--name", &spec.name])
            .args([
                "--watchdog-lease-ms",
                &spec.watchdog_lease.as_millis().to_string(),
            ]);
        Some(cmd)
    }

    fn slack(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// SQLite has one writer at a time: with cases running side by side, a renewal
    /// can wait out other transactions' commits, so its short leases are longer.
    fn short_lease(&self) -> Duration {
        if self.url.starts_with("sqlite") {
            Duration::from_millis(1500)
        } else {
            Duration::from_millis(600)
        }
    }
}

/// The live lease and queue rows and the row-lock rows of every lock of `namespace`,
/// with their fence or ticket. Left out, as they stay by design: the key table and its
/// fencing counters, and lease and queue rows past their expiry (lock-sql releases only
/// live leases and deletes expired rows lazily, at the next acquire of the key).
pub async fn leftover_rows(backend: &SqlBackend, namespace: &str) -> Result<Vec<String>, String> {
    let prefix = backend.table_prefix();
    let (quote, param, param2) = match backend.dialect() {
        lock_sql::Dialect::MySql => ('`', "?", "?"),
        lock_sql::Dialect::Postgres => ('"', "$1", "$2"),
        _ => ('"', "?", "?"),
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut left = Vec::new();
    for (table, col, expires) in [
        ("leases", "fence", true),
        ("queue", "ticket", true),
        ("holders", "fence", false),
    ] {
        let live = if expires {
            format!(" AND t.expires_ms > {param2}")
        } else {
            String::new()
        };
        let sql = format!(
            "SELECT t.kind, t.{col} FROM {quote}{prefix}_{table}{quote} t \
             JOIN {quote}{prefix}_keys{quote} k ON k.khash = t.khash WHERE k.namespace = {param}{live}"
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(namespace.to_owned());
        if expires {
            query = query.bind(now_ms);
        }
        let rows = query
            .fetch_all(backend.pool())
            .await
            .map_err(|e| format!("{table}: {e}"))?;
        left.extend(rows.iter().map(|row| {
            let kind: i64 = row.try_get(0).unwrap_or(-1);
            let id: i64 = row.try_get(1).unwrap_or(-1);
            format!("{prefix}_{table}: kind {kind}, {col} {id}")
        }));
    }
    Ok(left)
}

/// FOR UPDATE and session: the locks of `namespace` some connection still holds (a
/// row lock, an advisory lock), by the server's own lock state; with `inspect`, also
/// those `inspect` names a holder of though free (and it deletes the holder records it
/// finds stale).
pub async fn held_row_locks(
    backend: &SqlBackend,
    namespace: &str,
    inspect: bool,
) -> Result<Vec<String>, String> {
    use lock_core::backend::LockBackend as _;
    let prefix = backend.table_prefix();
    let sql = match backend.dialect() {
        lock_sql::Dialect::MySql => format!("SELECT name FROM `{prefix}_keys` WHERE namespace = ?"),
        _ => format!("SELECT name FROM \"{prefix}_keys\" WHERE namespace = $1"),
    };
    let names: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .fetch_all(backend.pool())
        .await
        .map_err(|e| format!("{prefix}_keys: {e}"))?;
    let mut held = Vec::new();
    for name in names {
        let key = LockKey::new(
            lock_core::Namespace::new(namespace).map_err(|e| e.to_string())?,
            lock_core::LockName::new(&name).map_err(|e| e.to_string())?,
        );
        // A connection dropped on an error path is closed in the background, and its
        // lock goes a moment later: only a lock still held after a second counts.
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        let before = held.len();
        let mut families = vec![LockFamily::Exclusive];
        if backend.capabilities().fair {
            families.push(LockFamily::Fair);
        }
        for family in families {
            while backend
                .is_locked(&key, family)
                .await
                .map_err(|e| e.to_string())?
            {
                if tokio::time::Instant::now() >= until {
                    held.push(format!("{prefix}: the {family:?} lock of {name:?} is held"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if !inspect || held.len() > before {
            continue;
        }
        let info = backend
            .inspect(&key, LockFamily::Exclusive)
            .await
            .map_err(|e| e.to_string())?;
        if info.is_locked() {
            held.push(format!("inspect names a holder of free {name:?}: {info:?}"));
        }
    }
    Ok(held)
}

/// Deletes the lease rows of `key` with kinds `lo..=hi`, as an operator would by hand.
pub async fn delete_leases(
    backend: &SqlBackend,
    key: &LockKey,
    lo: i64,
    hi: i64,
) -> Result<(), String> {
    let table = format!("{}_leases", backend.table_prefix());
    let sql = match backend.dialect() {
        lock_sql::Dialect::Postgres => {
            format!("DELETE FROM \"{table}\" WHERE khash = $1 AND kind >= $2 AND kind <= $3")
        }
        lock_sql::Dialect::MySql => {
            format!("DELETE FROM `{table}` WHERE khash = ? AND kind >= ? AND kind <= ?")
        }
        _ => format!("DELETE FROM \"{table}\" WHERE khash = ? AND kind >= ? AND kind <= ?"),
    };
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(lock_sql::stored_key(key))
        .bind(lo)
        .bind(hi)
        .execute(backend.pool())
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Runs the whole conformance suite on `sql`, asserting a floor on what passed, then
/// the randomized history checker.
pub async fn run_suite(sql: Sql, min_passed: usize) {
    use conformance_tests::checker::{self, Budget};
    let sql = Arc::new(sql);
    run_cases(sql.clone(), min_passed).await;
    checker::check(sql, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
}

/// The history checker again, with one client of some seeds behind a proxy that is cut
/// at a random moment (both ways, or only the server's replies), healed or not, and
/// `server` frozen or killed and restarted now and then (if it was started here). That
/// client gives up on a call after 1 s, so its calls fail, and are asked again, while
/// their statements may still run. Then the wait-limit check under late replies, with
/// the default timeouts, which outlast its wait.
pub async fn check_with_cut_off(sql: Sql, server: &conformance_tests::server::SharedServer) {
    use conformance_tests::checker::{self, Budget, ProxiedUrl};
    let hook = |url: &str| {
        let (strategy, prefix, label) = (sql.strategy, sql.prefix.clone(), sql.label.clone());
        ProxiedUrl::new(url, move |through| {
            Arc::new(Sql::new(&through, strategy, &prefix).labelled(label.clone()))
        })
        .expect("a loopback URL")
    };
    let cut_off = hook(&with_short_timeouts(&sql.url))
        .with_server(server.clone())
        .restarting(after_restart(sql.strategy));
    let late_replies = hook(&sql.url);
    checker::check_behind_proxies(
        Arc::new(sql),
        Arc::new(cut_off),
        &late_replies,
        Budget::seeds(checker::CUT_OFF_SEEDS),
    )
    .await;
}

/// `url` with 1 s request and connect timeouts, so that a cut-off client gives up
/// soon.
pub fn with_short_timeouts(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}request_timeout=1s&connect_timeout=1s")
}

/// What a server keeps of a strategy's locks when it is killed and restarted. Lease
/// rows are committed. A row lock or an advisory lock lives in the server's memory and
/// goes with it, while its holder learns of that only at its next renewal (a fixed
/// lease's holder: when the lease ends), so the server must stay down for a lease.
fn after_restart(strategy: Strategy) -> conformance_tests::checker::AfterRestart {
    use conformance_tests::checker::AfterRestart;
    match strategy {
        Strategy::ForUpdate | Strategy::Session => AfterRestart::ForgetsLocks,
        _ => AfterRestart::KeepsLocks,
    }
}

/// The conformance cases alone (without the history checker), at least `min_passed`
/// of them passing unless `LOCK_TEST_CASES` picks some.
pub async fn run_cases(sql: Arc<Sql>, min_passed: usize) {
    let label = sql.label.clone();
    let report = conformance_tests::run_suite(sql).await;
    check_passed(&label, &report, min_passed);
}

/// The cases again over another transport (TLS): see
/// [`conformance_tests::run_transport_suite`].
pub async fn run_transport_cases(sql: Arc<Sql>, min_passed: usize) {
    let label = sql.label.clone();
    let report = conformance_tests::run_transport_suite(sql).await;
    check_passed(&label, &report, min_passed);
}

fn check_passed(label: &str, report: &conformance_tests::Report, min_passed: usize) {
    if std::env::var_os("LOCK_TEST_CASES").is_none() {
        assert!(
            report.passed.len() >= min_passed,
            "{label}: {}",
            report.summary()
        );
    }
}

/// The suite with both strategies and every SQL fault test, against a server of
/// `spec` (PostgreSQL or MariaDB) started for the test.
pub async fn server_suite(spec: &conformance_tests::server::ServerSpec) {
    use conformance_tests::server::{free_port, SharedServer, TestServer};
    use lock_sql::Strategy;

    let server = TestServer::start(spec)
        .await
        .unwrap_or_else(|err| panic!("start {}: {err}", spec.name));
    let url = server.url();
    servers::wait_until_ready(&url).await;
    let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);

    // One table set per strategy: they never share tables.
    let update_prefix = format!("{prefix}u");
    let session_prefix = format!("{prefix}s");
    run_suite(Sql::new(&url, Strategy::Lease, &prefix), 60).await;
    run_suite(Sql::new(&url, Strategy::ForUpdate, &update_prefix), 20).await;
    run_suite(Sql::new(&url, Strategy::Session, &session_prefix), 20).await;
    let shared = SharedServer::new(server);
    check_with_cut_off(Sql::new(&url, Strategy::Lease, &prefix), &shared).await;
    check_with_cut_off(Sql::new(&url, Strategy::ForUpdate, &update_prefix), &shared).await;
    check_with_cut_off(Sql::new(&url, Strategy::Session, &session_prefix), &shared).await;
    let mut server = shared.lock().await;

    let lease = Sql::new(&url, Strategy::Lease, &prefix);
    let for_update = Sql::new(&url, Strategy::ForUpdate, &update_prefix);
    extra::strategies_never_mix_on_one_table_set(&url).await;
    extra::tables_without_holder_columns_get_them(&url).await;
    extra::force_unlock_spares_the_holder_of_another_lock(&for_update).await;
    extra::is_locked_never_makes_a_try_fail(&for_update).await;
    extra::clock_skew_never_steals(&lease).await;
    extra::hostile_names_stored_safely(&lease).await;
    extra::blocked_attempts_write_nothing(&lease).await;
    extra::an_uncontended_cycle_is_two_round_trips(&lease).await;
    if spec.name == "mariadb" {
        procedures::locks_work_without_the_grant_procedure(&lease).await;
    }
    extra::same_process_waiter_woken_at_release(&lease).await;
    extra::other_process_waiter_woken_at_release(&lease).await;
    if spec.name == "postgres" {
        extra::only_a_waiting_client_hears_releases(&lease).await;
    }
    extra::same_process_reader_woken_when_a_writer_withdraws(&lease).await;
    extra::killed_connection(&for_update).await;
    extra::a_silent_holder_lets_go(&for_update).await;
    extra::a_release_the_server_missed_still_forgets_its_holder(&for_update).await;
    extra::a_ticket_the_server_missed_the_removal_of_goes(&lease).await;
    orphans::a_transaction_a_cut_leaves_open_never_keeps_its_key(&lease).await;
    orphans::the_server_ends_a_transaction_left_idle(&lease, &for_update).await;
    orphans::a_statement_given_up_over_a_cut_gives_its_place_back(&lease).await;
    extra::a_downgrade_asked_again_keeps_its_read_side(&lease).await;
    extra::a_holder_cut_off_for_good_is_forgotten(&for_update).await;
    extra::inspect_never_names_an_earlier_grant(&for_update).await;
    extra::force_unlock_spares_a_reused_connection_id(&for_update).await;
    extra::killed_connection(&lease).await;
    extra::sigkilled_for_update_holder_frees_at_once(&for_update).await;
    if spec.name == "postgres" {
        extra::for_update_grant_never_outlives_its_connection(&for_update).await;
    }
    let session = Sql::new(&url, Strategy::Session, &session_prefix);
    extra::a_guard_dropped_outside_a_runtime_frees_its_lock(&for_update).await;
    extra::a_guard_dropped_outside_a_runtime_frees_its_lock(&session).await;
    extra::a_wait_past_the_servers_longest_limit_is_granted(&for_update).await;
    extra::a_wait_past_the_servers_longest_limit_is_granted(&session).await;
    extra::a_released_connection_goes_to_whoever_waits(&session).await;
    extra::an_uncontended_cycle_is_two_round_trips(&session).await;
    if spec.name == "mariadb" {
        procedures::session_locks_work_without_their_procedures(&session, server.can_fault()).await;
    }
    extra::a_released_connection_goes_to_whoever_waits(&for_update).await;
    if let Some(freezer) = server.freezer() {
        extra::a_grant_answered_after_a_stall_is_held(&lease, &freezer).await;
        extra::a_grant_answered_after_a_stall_is_held(&session, &freezer).await;
    }
    if server.can_fault() {
        extra::session_tokens_never_go_back_across_a_crash(&session, &mut server).await;
    }
    // A port nobody listens on: the same URL shape, no server behind it.
    let closed = (spec.url)(free_port().expect("a free port"));
    let stop = async {
        if server.can_fault() {
            server.kill().await.expect("kill the server");
        }
    };
    extra::unreachable_is_unavailable_quickly(&closed, stop, &lease).await;
}
