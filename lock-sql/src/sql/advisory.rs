//! The session strategy's statements: the server's advisory locks (PostgreSQL's
//! `pg_advisory_lock`, MariaDB's `GET_LOCK`), the fence counter in a table the server
//! does not write to disk, and the name register.

use super::{s, Stmt, Tables};
use crate::dialect::Dialect;
use crate::pessimistic::OWN_RELEASE_FENCE;

/// The fence of a grant: one past the key's last, and never below the server clock in
/// microseconds. The counter's table is not durable (PostgreSQL `UNLOGGED`, MariaDB
/// `MEMORY`): a crash empties it, and the clock, which has moved on since the last
/// grant before the crash, carries the fence past every token given before.
pub(super) fn clock_floor(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
        _ => "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)",
    }
}

/// The session strategy's statements. PostgreSQL's take a lock and draw its fence in
/// one statement; MariaDB's are built per call around the lock's name (hex, never a
/// user's text) and sent as one multi-statement round trip.
#[derive(Debug)]
pub(crate) struct AdvisoryStatements {
    /// The fence table, quoted.
    pub(crate) fences: String,
    /// PostgreSQL: tries the lock (`?` the lock id); if taken, sets the session's
    /// silence limit (`?` in ms, as text) and draws the fence (`?` the key hash).
    /// Returns 1 and the fence, or 0 and 0.
    pub(crate) try_lock: Stmt,
    /// PostgreSQL: the same, waiting for the lock up to the session's `lock_timeout`.
    pub(crate) wait_lock: Stmt,
    /// PostgreSQL: this connection's pid and start, and sets its `lock_timeout` (`?`
    /// in ms, as text; 0 waits for ever).
    pub(crate) prepare_wait: Stmt,
    /// PostgreSQL: lets go of the lock (`?` the lock id) and clears the silence limit
    /// and the wait limit a wait left; 1 if it was held.
    pub(crate) unlock: Stmt,
    /// PostgreSQL: how many sessions hold the lock (`?`, `?` its two halves).
    pub(crate) holders: Stmt,
    /// PostgreSQL: terminates every other session holding the lock; how many.
    pub(crate) kill_holders: Stmt,
    /// MariaDB: the connection holding a lock (`?` its name), 0 if none.
    pub(crate) holder_connection: Stmt,
    /// Where the advisory locks of these tables live: PostgreSQL's database and schema,
    /// MariaDB's database (its lock names are server-wide), and the server's version.
    pub(crate) lock_space: Stmt,
    /// Adds a key to the name register (`<prefix>_keys`, for operators and tools),
    /// once per key and process.
    pub(crate) register: Stmt,
}

impl AdvisoryStatements {
    pub(crate) fn new(dialect: Dialect, t: &Tables) -> Self {
        let (keys, fences) = (&t.keys, &t.fences);
        let st = |sql: String| s(dialect, sql);
        let floor = clock_floor(dialect);
        let take = |lock: &str| {
            st(format!(
                "WITH l AS ({lock}), \
                 t AS (SELECT set_config('idle_session_timeout', CASE WHEN l.ok THEN ? ELSE '0' END, false) AS v FROM l), \
                 f AS (INSERT INTO {fences} AS f (khash, fence) SELECT ?, {floor} FROM l WHERE l.ok \
                 ON CONFLICT (khash) DO UPDATE SET fence = GREATEST(f.fence + 1, excluded.fence) RETURNING f.fence) \
                 SELECT CASE WHEN l.ok THEN 1 ELSE 0 END, COALESCE((SELECT fence FROM f), 0), \
                 (SELECT COUNT(v) FROM t) FROM l"
            ))
        };
        let try_lock = take("SELECT pg_try_advisory_lock(?) AS ok");
        let wait_lock = take("SELECT true AS ok FROM (SELECT pg_advisory_lock(?)) AS w");
        let prepare_wait = st(
            "SELECT CAST(pg_backend_pid() AS BIGINT), CAST(backend_start AS TEXT), \
             set_config('lock_timeout', ?, false) FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                .to_owned(),
        );
        let unlock = st("SELECT CASE WHEN pg_advisory_unlock(?) THEN 1 ELSE 0 END, \
             set_config('idle_session_timeout', '0', false), set_config('lock_timeout', '0', false)"
            .to_owned());
        let advisory = "FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND CAST(classid AS BIGINT) = ? AND CAST(objid AS BIGINT) = ? AND objsubid = 1 AND granted";
        let holders = st(format!("SELECT COUNT(*) {advisory}"));
        let kill_holders = st(format!(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) {advisory} \
             AND pid <> pg_backend_pid()) AS t"
        ));
        let holder_connection =
            st("SELECT CAST(COALESCE(IS_USED_LOCK(?), 0) AS SIGNED)".to_owned());
        let lock_space = st(match dialect {
            Dialect::Postgres => {
                "SELECT current_database() || '.' || COALESCE(current_schema(), ''), \
                 CAST(current_setting('server_version_num') AS BIGINT)"
                    .to_owned()
            }
            _ => "SELECT COALESCE(DATABASE(), ''), 0".to_owned(),
        });
        let register = st(match dialect {
            Dialect::MySql => format!(
                "INSERT IGNORE INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, 0, 0, ?, ?)"
            ),
            _ => format!(
                "INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, 0, 0, ?, ?) \
                 ON CONFLICT (khash) DO NOTHING"
            ),
        });
        AdvisoryStatements {
            fences: fences.clone(),
            try_lock,
            wait_lock,
            prepare_wait,
            unlock,
            holders,
            kill_holders,
            holder_connection,
            lock_space,
            register,
        }
    }

    /// MariaDB: takes the lock `name` (waiting up to `wait_secs`), and if taken sets
    /// the session's silence limit to `limit_secs` and draws the fence of `hash`. One
    /// round trip of two statements and no rows: the second's OK packet is the
    /// outcome, rows affected only if the session holds the lock, and the fence as
    /// its last insert id (`LAST_INSERT_ID(expr)`). `name` and `hash` are hex
    /// digests, never user text.
    pub(crate) fn mysql_lock(
        &self,
        name: &str,
        hash: &str,
        wait_secs: f64,
        limit_secs: u64,
    ) -> String {
        let fences = &self.fences;
        let floor = clock_floor(Dialect::MySql);
        let held = format!("COALESCE(IS_USED_LOCK('{name}') = CONNECTION_ID(), 0)");
        format!(
            "SET SESSION wait_timeout = IF(GET_LOCK('{name}', {wait_secs:.3}) = 1, {limit_secs}, @@GLOBAL.wait_timeout); \
             INSERT INTO {fences} (khash, fence) SELECT '{hash}', LAST_INSERT_ID({floor}) FROM DUAL \
             WHERE {held} ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(GREATEST(fence + 1, {floor}))"
        )
    }

    /// MariaDB: lets go of the lock `name` under the connection's release fence
    /// (which a force-unlock takes before it kills), putting the silence limit back in
    /// the statement that takes the fence: two statements in one round trip, whose row
    /// is 1 if the lock was held and let go, and 1 if the fence was had. `name` is a
    /// hex digest, never user text.
    pub(crate) fn mysql_unlock(name: &str) -> String {
        format!(
            "SET @lock_sql_fenced = CAST(COALESCE(GET_LOCK({OWN_RELEASE_FENCE}, 10), 0) AS SIGNED), \
             SESSION wait_timeout = @@GLOBAL.wait_timeout; \
             SELECT CAST(COALESCE(RELEASE_LOCK('{name}'), 0) AS SIGNED), CAST(@lock_sql_fenced AS SIGNED), \
             RELEASE_LOCK({OWN_RELEASE_FENCE})"
        )
    }
}
