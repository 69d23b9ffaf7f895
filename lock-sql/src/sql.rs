//! Every statement the backend sends, written once per dialect at connect time.
//!
//! The only text spliced into SQL is the table prefix, which is validated (ASCII
//! letters, digits, `_`) and quoted; every value (lock keys, owners, durations) is a
//! bind parameter.

use std::sync::Arc;

use crate::dialect::Dialect;

/// A statement ready to hand to the driver.
pub(crate) type Stmt = Arc<str>;

/// The schema version this release writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The tables, quoted.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) meta: String,
    pub(crate) keys: String,
    pub(crate) leases: String,
    pub(crate) queue: String,
    pub(crate) rows: String,
    pub(crate) holders: String,
    /// The PostgreSQL notification channel (unquoted: it is passed as a value).
    pub(crate) channel: String,
}

impl Tables {
    pub(crate) fn new(dialect: Dialect, prefix: &str) -> Self {
        let q = |suffix: &str| dialect.quote(&format!("{prefix}_{suffix}"));
        Tables {
            meta: q("meta"),
            keys: q("keys"),
            leases: q("leases"),
            queue: q("queue"),
            rows: q("rows"),
            holders: q("holders"),
            channel: format!("{prefix}_release"),
        }
    }
}

/// The statements of one backend.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) dialect: Dialect,
    pub(crate) tables: Tables,
    pub(crate) create: Vec<Stmt>,
    pub(crate) read_version: Stmt,
    pub(crate) write_version: Stmt,
    /// Creates the key's row or bumps its fence, locking it for the transaction.
    /// PostgreSQL and SQLite return the fence; MySQL needs [`Self::key_fence`].
    pub(crate) key_bump: Stmt,
    pub(crate) key_fence: Stmt,
    pub(crate) live_leases: Stmt,
    pub(crate) live_queue: Stmt,
    pub(crate) put_lease: Stmt,
    pub(crate) clean_expired: Stmt,
    pub(crate) ticket_bump: Stmt,
    pub(crate) key_ticket: Stmt,
    pub(crate) enqueue: Stmt,
    pub(crate) refresh_ticket: Stmt,
    pub(crate) dequeue: Stmt,
    /// Deletes one live lease; PostgreSQL's version also notifies waiters and
    /// returns the count as a row.
    pub(crate) release: Stmt,
    pub(crate) force_unlock: Stmt,
    pub(crate) count_live: Stmt,
    // The FOR UPDATE strategy.
    pub(crate) ensure_row: Stmt,
    pub(crate) lock_row_nowait: Stmt,
    pub(crate) lock_row_wait: Stmt,
    pub(crate) probe_row: Stmt,
    pub(crate) row_exists: Stmt,
    pub(crate) put_holder: Stmt,
    pub(crate) get_holder: Stmt,
    pub(crate) delete_holder: Stmt,
    pub(crate) fence_bump: Stmt,
    pub(crate) connection_id: Stmt,
    pub(crate) notify: Stmt,
}

fn s(dialect: Dialect, sql: String) -> Stmt {
    dialect.markers(&sql).into()
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, prefix: &str) -> Self {
        let t = Tables::new(dialect, prefix);
        let now = dialect.now_ms();
        let (meta, keys, leases, queue, rows, holders) =
            (&t.meta, &t.keys, &t.leases, &t.queue, &t.rows, &t.holders);
        let st = |sql: String| s(dialect, sql);
        let (text, int, suffix) = match dialect {
            Dialect::Postgres => ("TEXT", "BIGINT", ""),
            Dialect::MySql => (
                "TEXT",
                "BIGINT",
                " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
            ),
            Dialect::Sqlite => ("TEXT", "INTEGER", ""),
        };
        let create = vec![
            st(format!(
                "CREATE TABLE IF NOT EXISTS {meta} (name VARCHAR(64) NOT NULL PRIMARY KEY, value {int} NOT NULL){suffix}"
            )),
            st(format!(
                "CREATE TABLE IF NOT EXISTS {keys} (khash VARCHAR(64) NOT NULL PRIMARY KEY, fence {int} NOT NULL, \
                 ticket {int} NOT NULL, namespace {text} NOT NULL, name {text} NOT NULL){suffix}"
            )),
            st(format!(
                "CREATE TABLE IF NOT EXISTS {leases} (khash VARCHAR(64) NOT NULL, kind {int} NOT NULL, \
                 holder VARCHAR(128) NOT NULL, owner VARCHAR(128) NOT NULL, fence {int} NOT NULL, \
                 expires_ms {int} NOT NULL, PRIMARY KEY (khash, kind, holder)){suffix}"
            )),
            st(format!(
                "CREATE TABLE IF NOT EXISTS {queue} (khash VARCHAR(64) NOT NULL, kind {int} NOT NULL, \
                 ticket {int} NOT NULL, owner VARCHAR(128) NOT NULL, expires_ms {int} NOT NULL, \
                 PRIMARY KEY (khash, kind, ticket)){suffix}"
            )),
            st(format!(
                "CREATE TABLE IF NOT EXISTS {rows} (khash VARCHAR(64) NOT NULL, kind {int} NOT NULL, \
                 PRIMARY KEY (khash, kind)){suffix}"
            )),
            st(format!(
                "CREATE TABLE IF NOT EXISTS {holders} (khash VARCHAR(64) NOT NULL, kind {int} NOT NULL, \
                 owner VARCHAR(128) NOT NULL, fence {int} NOT NULL, connection_id {int} NOT NULL, \
                 PRIMARY KEY (khash, kind)){suffix}"
            )),
        ];
        let read_version = st(format!(
            "SELECT value FROM {meta} WHERE name = 'schema_version'"
        ));
        let write_version = st(match dialect {
            Dialect::MySql => format!(
                "INSERT IGNORE INTO {meta} (name, value) VALUES ('schema_version', {SCHEMA_VERSION})"
            ),
            _ => format!(
                "INSERT INTO {meta} (name, value) VALUES ('schema_version', {SCHEMA_VERSION}) ON CONFLICT (name) DO NOTHING"
            ),
        });
        let key_insert = format!(
            "INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, 1, 0, ?, ?)"
        );
        let key_bump = st(match dialect {
            Dialect::Postgres => format!(
                "INSERT INTO {keys} AS k (khash, fence, ticket, namespace, name) VALUES (?, 1, 0, ?, ?) \
                 ON CONFLICT (khash) DO UPDATE SET fence = k.fence + 1 RETURNING fence"
            ),
            Dialect::Sqlite => format!(
                "{key_insert} ON CONFLICT (khash) DO UPDATE SET fence = fence + 1 RETURNING fence"
            ),
            Dialect::MySql => format!("{key_insert} ON DUPLICATE KEY UPDATE fence = fence + 1"),
        });
        let key_fence = st(format!("SELECT fence FROM {keys} WHERE khash = ?"));
        let live_leases = st(format!(
            "SELECT kind, owner, expires_ms - {now} AS remaining FROM {leases} \
             WHERE khash = ? AND expires_ms > {now}"
        ));
        let live_queue = st(format!(
            "SELECT kind, ticket, owner, expires_ms - {now} AS remaining FROM {queue} \
             WHERE khash = ? AND expires_ms > {now} ORDER BY ticket"
        ));
        let lease_insert = format!(
            "INSERT INTO {leases} (khash, kind, holder, owner, fence, expires_ms) VALUES (?, ?, ?, ?, ?, {now} + ?)"
        );
        let put_lease = st(match dialect {
            Dialect::MySql => format!(
                "{lease_insert} ON DUPLICATE KEY UPDATE owner = VALUES(owner), fence = VALUES(fence), expires_ms = VALUES(expires_ms)"
            ),
            _ => format!(
                "{lease_insert} ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
                 fence = excluded.fence, expires_ms = excluded.expires_ms"
            ),
        });
        let clean_expired = st(format!(
            "DELETE FROM {leases} WHERE khash = ? AND expires_ms <= {now}"
        ));
        let ticket_bump = st(match dialect {
            Dialect::MySql => format!("UPDATE {keys} SET ticket = ticket + 1 WHERE khash = ?"),
            _ => format!("UPDATE {keys} SET ticket = ticket + 1 WHERE khash = ? RETURNING ticket"),
        });
        let key_ticket = st(format!("SELECT ticket FROM {keys} WHERE khash = ?"));
        let enqueue = st(format!(
            "INSERT INTO {queue} (khash, kind, ticket, owner, expires_ms) VALUES (?, ?, ?, ?, {now} + ?)"
        ));
        let refresh_ticket = st(format!(
            "UPDATE {queue} SET expires_ms = {now} + ? WHERE khash = ? AND kind = ? AND ticket = ? AND expires_ms > {now}"
        ));
        let dequeue = st(format!(
            "DELETE FROM {queue} WHERE khash = ? AND kind = ? AND ticket = ?"
        ));
        let release_where = format!(
            "khash = ? AND kind = ? AND holder = ? AND owner = ? AND fence = ? AND expires_ms > {now}"
        );
        let force_where = format!("khash = ? AND kind >= ? AND kind <= ? AND expires_ms > {now}");
        let with_notify = |cond: &str| {
            match dialect {
            // pg_notify is delivered at commit, so a woken waiter sees the row gone.
            Dialect::Postgres => format!(
                "WITH d AS (DELETE FROM {leases} WHERE {cond} RETURNING khash) \
                 SELECT COUNT(*) AS n FROM d, LATERAL (SELECT pg_notify(?, d.khash) IS NULL AS sent) AS x"
            ),
            _ => format!("DELETE FROM {leases} WHERE {cond}"),
        }
        };
        let release = st(with_notify(&release_where));
        let force_unlock = st(with_notify(&force_where));
        let count_live = st(format!("SELECT COUNT(*) FROM {leases} WHERE {force_where}"));

        // FOR UPDATE strategy.
        let ensure_row = st(match dialect {
            Dialect::MySql => format!("INSERT IGNORE INTO {rows} (khash, kind) VALUES (?, ?)"),
            _ => format!("INSERT INTO {rows} (khash, kind) VALUES (?, ?) ON CONFLICT DO NOTHING"),
        });
        let lock_row = format!("SELECT kind FROM {rows} WHERE khash = ? AND kind = ? FOR UPDATE");
        let lock_row_nowait = st(format!("{lock_row} NOWAIT"));
        let lock_row_wait = st(lock_row);
        let probe_row = st(format!(
            "SELECT kind FROM {rows} WHERE khash = ? AND kind = ? FOR UPDATE SKIP LOCKED"
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
        let get_holder = st(format!(
            "SELECT owner, fence, connection_id FROM {holders} WHERE khash = ? AND kind = ?"
        ));
        let delete_holder = st(format!(
            "DELETE FROM {holders} WHERE khash = ? AND kind = ? AND owner = ? AND fence = ?"
        ));
        let fence_bump = key_bump.clone();
        let connection_id = st(match dialect {
            Dialect::Postgres => "SELECT CAST(pg_backend_pid() AS BIGINT)".to_owned(),
            Dialect::MySql => "SELECT CAST(CONNECTION_ID() AS SIGNED)".to_owned(),
            Dialect::Sqlite => "SELECT 0".to_owned(),
        });
        let notify = st(match dialect {
            Dialect::Postgres => "SELECT pg_notify(?, ?) IS NULL".to_owned(),
            _ => "SELECT 1".to_owned(),
        });
        Statements {
            dialect,
            tables: t,
            create,
            read_version,
            write_version,
            key_bump,
            key_fence,
            live_leases,
            live_queue,
            put_lease,
            clean_expired,
            ticket_bump,
            key_ticket,
            enqueue,
            refresh_ticket,
            dequeue,
            release,
            force_unlock,
            count_live,
            ensure_row,
            lock_row_nowait,
            lock_row_wait,
            probe_row,
            row_exists,
            put_holder,
            get_holder,
            delete_holder,
            fence_bump,
            connection_id,
            notify,
        }
    }

    /// One statement renewing `n` leases: each given as `khash, kind, holder, owner,
    /// fence` after the leading ttl parameter. PostgreSQL and SQLite return the renewed
    /// rows; on MySQL the affected-row count says whether all were found.
    pub(crate) fn renew(&self, n: usize) -> Stmt {
        let now = self.dialect.now_ms();
        let leases = &self.tables.leases;
        let returning = match self.dialect {
            Dialect::MySql => "",
            _ => " RETURNING khash, kind, fence",
        };
        s(
            self.dialect,
            format!(
                "UPDATE {leases} SET expires_ms = {now} + ? WHERE expires_ms > {now} AND ({}){returning}",
                lease_matches(n)
            ),
        )
    }

    /// MySQL only: which of `n` leases are live, after a renewal that did not find all.
    pub(crate) fn live_of(&self, n: usize) -> Stmt {
        let now = self.dialect.now_ms();
        let leases = &self.tables.leases;
        s(
            self.dialect,
            format!(
                "SELECT khash, kind, fence FROM {leases} WHERE expires_ms > {now} AND ({})",
                lease_matches(n)
            ),
        )
    }
}

fn lease_matches(n: usize) -> String {
    vec!["(khash = ? AND kind = ? AND holder = ? AND owner = ? AND fence = ?)"; n].join(" OR ")
}
