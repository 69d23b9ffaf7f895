//! The FOR UPDATE strategy's statements: the lock rows, the holder records, and the
//! server's own lock state that `force_unlock` and `is_locked` read.

use super::{s, Stmt, Tables};
use crate::dialect::Dialect;

/// The FOR UPDATE strategy's statements.
#[derive(Debug)]
pub(crate) struct RowLockStatements {
    pub(crate) ensure_row: Stmt,
    pub(crate) lock_row_nowait: Stmt,
    pub(crate) lock_row_wait: Stmt,
    pub(crate) probe_row: Stmt,
    /// PostgreSQL: whether a live transaction holds the row lock (the row's `xmax` is
    /// a running backend's transaction), read without taking any lock.
    pub(crate) row_locked: Stmt,
    pub(crate) row_exists: Stmt,
    pub(crate) put_holder: Stmt,
    pub(crate) delete_holder: Stmt,
    /// A lock's holder record: its owner and fence, and whether it can still be true:
    /// its fence is the key's latest and (PostgreSQL) the connection it names holds
    /// the row lock, by the server's lock state.
    pub(crate) read_holder: Stmt,
    /// The connection's id (PostgreSQL's pid, MySQL's thread id) and, on PostgreSQL,
    /// when its backend started: a pid is reused, the pair is not.
    pub(crate) connection_id: Stmt,
    /// PostgreSQL: cancels the query of the backend with this pid and start time.
    pub(crate) cancel_wait: Stmt,
    /// PostgreSQL: terminates the backend whose transaction holds the row lock (the
    /// row's `xmax`); returns how many it signalled.
    pub(crate) kill_row_holder: Stmt,
    /// MySQL: the thread whose transaction holds the lock a given thread waits for.
    pub(crate) row_blocker: Stmt,
}

impl RowLockStatements {
    pub(crate) fn new(dialect: Dialect, t: &Tables) -> Self {
        let (rows, holders, keys) = (&t.rows, &t.holders, &t.keys);
        let st = |sql: String| s(dialect, sql);
        let ensure_row = st(match dialect {
            // MariaDB's duplicate check waits for the row lock of a row that exists
            // and is held: never on a shared pool connection (its holder needs the
            // pool to record its grant). A lock-wait timeout there means the row exists.
            Dialect::MySql => format!(
                "SET STATEMENT innodb_lock_wait_timeout = 0 FOR INSERT IGNORE INTO {rows} (khash, kind) VALUES (?, ?)"
            ),
            _ => format!("INSERT INTO {rows} (khash, kind) VALUES (?, ?) ON CONFLICT DO NOTHING"),
        });
        let lock_row = format!("SELECT kind FROM {rows} WHERE khash = ? AND kind = ? FOR UPDATE");
        let lock_row_nowait = st(format!("{lock_row} NOWAIT"));
        let lock_row_wait = st(lock_row);
        let probe_row = st(format!(
            "SELECT kind FROM {rows} WHERE khash = ? AND kind = ? FOR UPDATE SKIP LOCKED"
        ));
        let row_locked = st(format!(
            "SELECT COUNT(*) FROM {rows} r JOIN pg_stat_activity a ON a.backend_xid = r.xmax \
             WHERE r.khash = ? AND r.kind = ?"
        ));
        let row_exists = st(format!(
            "SELECT kind FROM {rows} WHERE khash = ? AND kind = ?"
        ));
        let put_holder = st(match dialect {
            Dialect::MySql => format!(
                "REPLACE INTO {holders} (khash, kind, owner, fence, connection_id) VALUES (?, ?, ?, ?, ?)"
            ),
            _ => format!(
                "INSERT INTO {holders} (khash, kind, owner, fence, connection_id) VALUES (?, ?, ?, ?, ?) \
                 ON CONFLICT (khash, kind) DO UPDATE SET owner = excluded.owner, fence = excluded.fence, \
                 connection_id = excluded.connection_id"
            ),
        });
        let delete_holder = st(format!(
            "DELETE FROM {holders} WHERE khash = ? AND kind = ? AND owner = ? AND fence = ?"
        ));
        // A record of an earlier grant has a fence below the key's: its holder let go,
        // whatever connection holds the row now (a pooled connection, a reused pid).
        let current = format!("h.fence = (SELECT k.fence FROM {keys} k WHERE k.khash = h.khash)");
        let read_holder = st(match dialect {
            Dialect::Postgres => format!(
                "SELECT h.owner, h.fence, CASE WHEN {current} AND EXISTS (SELECT 1 FROM {rows} r \
                 JOIN pg_stat_activity a ON a.backend_xid = r.xmax WHERE r.khash = h.khash \
                 AND r.kind = h.kind AND a.pid = h.connection_id) THEN 1 ELSE 0 END \
                 FROM {holders} h WHERE h.khash = ? AND h.kind = ?"
            ),
            _ => format!(
                "SELECT h.owner, h.fence, CASE WHEN {current} THEN 1 ELSE 0 END \
                 FROM {holders} h WHERE h.khash = ? AND h.kind = ?"
            ),
        });
        let connection_id = st(match dialect {
            Dialect::Postgres => {
                "SELECT CAST(pg_backend_pid() AS BIGINT), CAST(backend_start AS TEXT) \
                 FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                    .to_owned()
            }
            Dialect::MySql => "SELECT CAST(CONNECTION_ID() AS SIGNED), ''".to_owned(),
            Dialect::Sqlite => "SELECT 0, ''".to_owned(),
        });
        let cancel_wait = st(match dialect {
            Dialect::Postgres => {
                "SELECT COUNT(*) FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
                 WHERE pid = ? AND CAST(backend_start AS TEXT) = ?) AS t"
                    .to_owned()
            }
            _ => "SELECT 1".to_owned(),
        });
        let kill_row_holder = st(format!(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a \
             JOIN {rows} r ON a.backend_xid = r.xmax WHERE r.khash = ? AND r.kind = ? \
             AND a.pid <> pg_backend_pid()) AS t"
        ));
        let row_blocker = st(
            "SELECT CAST(b.trx_mysql_thread_id AS SIGNED) FROM information_schema.INNODB_LOCK_WAITS w \
             JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
             JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id \
             WHERE r.trx_mysql_thread_id = ? AND b.trx_state <> 'LOCK WAIT' LIMIT 1"
                .to_owned(),
        );
        RowLockStatements {
            ensure_row,
            lock_row_nowait,
            lock_row_wait,
            probe_row,
            row_locked,
            row_exists,
            put_holder,
            delete_holder,
            read_holder,
            connection_id,
            cancel_wait,
            kill_row_holder,
            row_blocker,
        }
    }
}
