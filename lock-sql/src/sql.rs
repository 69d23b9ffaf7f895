//! Every statement the backend sends, written once per dialect at connect time.
//!
//! The only text spliced into SQL is the table prefix, which is validated (ASCII
//! letters, digits, `_`) and quoted; every value (lock keys, owners, durations) is a
//! bind parameter.

use std::sync::Arc;

use lock_core::LockKind;

use crate::dialect::Dialect;
use crate::key::kind_code;

/// A statement ready to hand to the driver.
pub(crate) type Stmt = Arc<str>;

/// The schema version this release writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The lease table's columns for `inspect`, which tables made before them lack (they
/// are added at connect: [`Statements::holder_columns`]). Releases that do not know
/// them leave their defaults, so they need no new schema version.
const HOLDER_COLUMNS: &str =
    "description VARCHAR(1024) NOT NULL DEFAULT '', acquired_ms BIGINT NOT NULL DEFAULT 0";

/// The tables, quoted.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) meta: String,
    pub(crate) keys: String,
    pub(crate) leases: String,
    pub(crate) queue: String,
    pub(crate) rows: String,
    pub(crate) holders: String,
    /// The lease table's name as the catalogs take it: quoted for PostgreSQL's
    /// `to_regclass`, bare for MySQL's information schema and SQLite's pragma.
    pub(crate) leases_name: String,
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
            leases_name: match dialect {
                Dialect::Postgres => q("leases"),
                Dialect::MySql | Dialect::Sqlite => format!("{prefix}_leases"),
            },
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
    /// The strategy the tables were first used with (a `?` for its code, written only
    /// if none is recorded yet), and the one recorded.
    pub(crate) write_strategy: Stmt,
    pub(crate) read_strategy: Stmt,
    /// Creates the key's row or bumps its fence, locking it for the transaction.
    /// PostgreSQL and SQLite return the fence; MySQL reports it as the last insert id
    /// ([`Self::last_insert_id`] reads it if a server does not).
    pub(crate) key_bump: Stmt,
    /// MySQL: the connection's `LAST_INSERT_ID()`, where the key and ticket bumps
    /// leave the new counter value.
    pub(crate) last_insert_id: Stmt,
    pub(crate) live_leases: Stmt,
    pub(crate) live_queue: Stmt,
    pub(crate) put_lease: Stmt,
    /// The fence of one lease row: tells whether `put_lease` wrote it.
    pub(crate) lease_fence: Stmt,
    pub(crate) clean_expired: Stmt,
    /// The uncontended grant of each kind (indexed by [`kind_code`]): see
    /// [`FastGrant`].
    pub(crate) fast_grant: [FastGrant; 4],
    pub(crate) ticket_bump: Stmt,
    pub(crate) enqueue: Stmt,
    pub(crate) refresh_ticket: Stmt,
    pub(crate) dequeue: Stmt,
    /// Deletes one live lease; PostgreSQL's version also notifies waiters and
    /// returns the count as a row.
    pub(crate) release: Stmt,
    /// Deletes the live lease of one owner whatever its fence (an owner is one
    /// acquisition): undoes a grant whose reply, and so its fence, was lost.
    pub(crate) undo_grant: Stmt,
    pub(crate) force_unlock: Stmt,
    /// Deletes the live lease of a family with one fence (PostgreSQL: and notifies).
    pub(crate) force_unlock_holder: Stmt,
    pub(crate) count_live: Stmt,
    /// The live leases of a family, with what `inspect` reports.
    pub(crate) inspect_leases: Stmt,
    /// How many live queue tickets a family has.
    pub(crate) count_waiters: Stmt,
    /// Which of the [`HOLDER_COLUMNS`] the lease table has (their names as rows).
    pub(crate) holder_columns: Stmt,
    /// Adds one of them, by name.
    pub(crate) add_description: Stmt,
    pub(crate) add_acquired_ms: Stmt,
    // The FOR UPDATE strategy.
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
                 expires_ms {int} NOT NULL, {HOLDER_COLUMNS}, PRIMARY KEY (khash, kind, holder)){suffix}"
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
        let write_strategy = st(match dialect {
            Dialect::MySql => {
                format!("INSERT IGNORE INTO {meta} (name, value) VALUES ('strategy', ?)")
            }
            _ => format!(
                "INSERT INTO {meta} (name, value) VALUES ('strategy', ?) ON CONFLICT (name) DO NOTHING"
            ),
        });
        let read_strategy = st(format!("SELECT value FROM {meta} WHERE name = 'strategy'"));
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
            // LAST_INSERT_ID(expr) puts the new fence in the statement's OK packet, so
            // no SELECT is needed to read it back.
            Dialect::MySql => format!(
                "INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, LAST_INSERT_ID(1), 0, ?, ?) \
                 ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
            ),
        });
        let last_insert_id = st("SELECT CAST(LAST_INSERT_ID() AS SIGNED)".to_owned());
        let live_leases = st(format!(
            "SELECT kind, owner, expires_ms - {now} AS remaining FROM {leases} \
             WHERE khash = ? AND expires_ms > {now}"
        ));
        let live_queue = st(format!(
            "SELECT kind, ticket, owner, expires_ms - {now} AS remaining FROM {queue} \
             WHERE khash = ? AND expires_ms > {now} ORDER BY ticket"
        ));
        let lease_insert = format!(
            "INSERT INTO {leases} (khash, kind, holder, owner, fence, expires_ms, description, acquired_ms) \
             VALUES (?, ?, ?, ?, ?, {now} + ?, ?, {now})"
        );
        // Takes over an existing row only if it has expired by now: a renewal that
        // committed after this transaction read the leases must win. (MySQL assigns
        // left to right, so `expires_ms` goes last: the tests read its old value.)
        let put_lease = st(match dialect {
            Dialect::MySql => format!(
                "{lease_insert} ON DUPLICATE KEY UPDATE \
                 owner = IF(expires_ms <= {now}, VALUES(owner), owner), \
                 fence = IF(expires_ms <= {now}, VALUES(fence), fence), \
                 description = IF(expires_ms <= {now}, VALUES(description), description), \
                 acquired_ms = IF(expires_ms <= {now}, VALUES(acquired_ms), acquired_ms), \
                 expires_ms = IF(expires_ms <= {now}, VALUES(expires_ms), expires_ms)"
            ),
            _ => format!(
                "{lease_insert} ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
                 fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
                 acquired_ms = excluded.acquired_ms WHERE {leases}.expires_ms <= {now}"
            ),
        });
        let lease_fence = st(format!(
            "SELECT fence FROM {leases} WHERE khash = ? AND kind = ? AND holder = ?"
        ));
        let clean_expired = st(format!(
            "DELETE FROM {leases} WHERE khash = ? AND expires_ms <= {now}"
        ));
        let ticket_bump = st(match dialect {
            Dialect::MySql => {
                format!("UPDATE {keys} SET ticket = LAST_INSERT_ID(ticket + 1) WHERE khash = ?")
            }
            _ => format!("UPDATE {keys} SET ticket = ticket + 1 WHERE khash = ? RETURNING ticket"),
        });
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
        let undo_grant = st(with_notify(&format!(
            "khash = ? AND kind = ? AND holder = ? AND owner = ? AND expires_ms > {now}"
        )));
        let force_unlock = st(with_notify(&force_where));
        let force_unlock_holder = st(with_notify(&format!("{force_where} AND fence = ?")));
        let count_live = st(format!("SELECT COUNT(*) FROM {leases} WHERE {force_where}"));
        let inspect_leases = st(format!(
            "SELECT kind, owner, fence, description, acquired_ms, expires_ms FROM {leases} \
             WHERE {force_where} ORDER BY fence"
        ));
        let count_waiters = st(format!(
            "SELECT COUNT(*) FROM {queue} WHERE khash = ? AND kind >= ? AND kind <= ? AND expires_ms > {now}"
        ));
        let wanted = "('description', 'acquired_ms')";
        let holder_columns = st(match dialect {
            Dialect::Postgres => format!(
                "SELECT CAST(attname AS TEXT) FROM pg_attribute WHERE attrelid = to_regclass(?) \
                 AND NOT attisdropped AND attname IN {wanted}"
            ),
            Dialect::MySql => format!(
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = ? AND column_name IN {wanted}"
            ),
            Dialect::Sqlite => {
                format!("SELECT name FROM pragma_table_info(?) WHERE name IN {wanted}")
            }
        });
        let (description_column, acquired_column) =
            HOLDER_COLUMNS.split_once(", ").expect("two holder columns");
        let add_description = st(format!(
            "ALTER TABLE {leases} ADD COLUMN {description_column}"
        ));
        let add_acquired_ms = st(format!("ALTER TABLE {leases} ADD COLUMN {acquired_column}"));

        // FOR UPDATE strategy.
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
        let notify = st(match dialect {
            Dialect::Postgres => "SELECT pg_notify(?, ?) IS NULL".to_owned(),
            _ => "SELECT 1".to_owned(),
        });
        let fast_grant = fast_grants(dialect, &t);
        Statements {
            dialect,
            tables: t,
            create,
            read_version,
            write_version,
            write_strategy,
            read_strategy,
            key_bump,
            last_insert_id,
            live_leases,
            live_queue,
            put_lease,
            lease_fence,
            fast_grant,
            clean_expired,
            ticket_bump,
            enqueue,
            refresh_ticket,
            dequeue,
            release,
            undo_grant,
            force_unlock,
            force_unlock_holder,
            count_live,
            inspect_leases,
            count_waiters,
            holder_columns,
            add_description,
            add_acquired_ms,
            ensure_row,
            lock_row_nowait,
            lock_row_wait,
            probe_row,
            row_locked,
            row_exists,
            put_holder,
            delete_holder,
            connection_id,
            kill_row_holder,
            row_blocker,
            cancel_wait,
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

/// What a statement's bind markers stand for, in order: the caller binds the values
/// of one request in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    Key,
    Namespace,
    Name,
    Kind,
    Holder,
    Owner,
    /// The fence the transaction's key bump returned (MySQL and SQLite).
    Fence,
    Ttl,
    /// What the requesting client says about itself (for `inspect`).
    Description,
}

/// The grant of an uncontended request: one statement that writes the lease only if
/// the request may have it, and returns the row's fence if it did.
///
/// * PostgreSQL: the whole acquisition in one autocommitted statement. A
///   data-modifying CTE bumps the key's fence (and so locks the key row, like the
///   general transaction), then inserts the lease row or takes over an expired one
///   (`ON CONFLICT ... DO UPDATE ... WHERE` expired, judged on the newest row version).
///   Kinds whose rule looks at other rows (fair: the queue; read and write: the other
///   side) read them in the statement's snapshot, which is only current if no other
///   acquisition committed on the key between the snapshot and the key row lock:
///   every acquisition bumps the fence under that lock, so the grant also requires
///   the bumped fence to be exactly one above the snapshot's. Otherwise nothing is
///   written but the fence (gaps are allowed) and the caller takes the general path.
/// * MySQL and SQLite: run after the key bump in the acquiring transaction (the key
///   row lock makes every statement after it current), in place of reading the live
///   leases and queue. MySQL has no `WHERE` on `ON DUPLICATE KEY UPDATE`, so the
///   assignments keep the row unless it expired; `RETURNING` gives the row's fence
///   either way, and the lease is ours if it is the fence this transaction bumped.
#[derive(Debug)]
pub(crate) struct FastGrant {
    pub(crate) stmt: Stmt,
    pub(crate) args: Vec<Arg>,
}

/// The rule of [`crate::decide::decide`] for a request without a queue ticket, as an
/// SQL condition over the key's other rows (the lease row of the request itself is
/// judged by the upsert).
fn fast_condition(kind: LockKind, t: &Tables, now: &str) -> (String, Vec<Arg>) {
    let (leases, queue) = (&t.leases, &t.queue);
    let (fair, read, write) = (
        kind_code(LockKind::Fair),
        kind_code(LockKind::Read),
        kind_code(LockKind::Write),
    );
    match kind {
        LockKind::Exclusive => ("1 = 1".to_owned(), vec![]),
        // A fair request never overtakes a live ticket.
        LockKind::Fair => (
            format!(
                "NOT EXISTS (SELECT 1 FROM {queue} x WHERE x.khash = ? AND x.kind = {fair} AND x.expires_ms > {now})"
            ),
            vec![Arg::Key],
        ),
        // No live reader (the write row itself is the upsert's business).
        LockKind::Write => (
            format!(
                "NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.khash = ? AND x.kind = {read} AND x.expires_ms > {now})"
            ),
            vec![Arg::Key],
        ),
        // No live writer and no waiting writer but the requester itself (downgrade).
        LockKind::Read => (
            format!(
                "NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.khash = ? AND x.kind = {write} AND x.owner <> ? AND x.expires_ms > {now}) \
                 AND NOT EXISTS (SELECT 1 FROM {queue} x WHERE x.khash = ? AND x.kind = {write} AND x.owner <> ? AND x.expires_ms > {now})"
            ),
            vec![Arg::Key, Arg::Owner, Arg::Key, Arg::Owner],
        ),
    }
}

/// The first key of the two-key advisory locks that gate PostgreSQL's exclusive fast
/// grants ("LOCK" in ASCII). Two-key advisory locks never collide with one-key ones; a
/// collision with an application's two-key lock would only send our attempts down the
/// general path.
const GATE_CLASS: i32 = 0x4c4f_434b;

fn fast_grants(dialect: Dialect, t: &Tables) -> [FastGrant; 4] {
    [
        LockKind::Exclusive,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ]
    .map(|kind| fast_grant(dialect, t, kind))
}

fn fast_grant(dialect: Dialect, t: &Tables, kind: LockKind) -> FastGrant {
    let now = dialect.now_ms();
    let (keys, leases) = (&t.keys, &t.leases);
    let cols = "(khash, kind, holder, owner, fence, expires_ms, description, acquired_ms)";
    let (cond, cond_args) = fast_condition(kind, t, now);
    let mut args = Vec::new();
    let sql = match dialect {
        Dialect::Postgres => {
            let looks_around = kind != LockKind::Exclusive;
            let mut sql = String::from("WITH ");
            if looks_around {
                sql.push_str(&format!(
                    "s AS (SELECT fence FROM {keys} WHERE khash = ?), "
                ));
                args.push(Arg::Key);
            }
            // The key row is bumped only if the request's own lease row is not live:
            // when it is, the upsert below cannot grant, and a bump would make a
            // blocked attempt a write, with its commit flushed to disk. (A row that
            // changes meanwhile is judged by the upsert on its newest version.)
            //
            // An exclusive request also needs the key's advisory gate, held until
            // this statement commits: the waiters a release wakes all try at once,
            // and without it each one that read the lease row before the winner's
            // commit would bump the key and flush a commit of its own, one after
            // another behind the winner's row lock. Those that find the gate taken
            // write nothing and go on to the general path, which decides on the
            // committed rows.
            let gate = if kind == LockKind::Exclusive {
                format!("AND pg_try_advisory_xact_lock({GATE_CLASS}, hashtext(?))")
            } else {
                String::new()
            };
            sql.push_str(&format!(
                "k AS (INSERT INTO {keys} AS kr (khash, fence, ticket, namespace, name) SELECT ?, 1, 0, ?, ? \
                 WHERE NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.khash = ? AND x.kind = {} \
                 AND x.holder = ? AND x.expires_ms > {now}) {gate} \
                 ON CONFLICT (khash) DO UPDATE SET fence = kr.fence + 1 RETURNING kr.fence), \
                 g AS (INSERT INTO {leases} AS l {cols} SELECT ?, ?, ?, ?, k.fence, {now} + ?, ?, {now} FROM k WHERE ",
                kind_code(kind)
            ));
            args.extend([Arg::Key, Arg::Namespace, Arg::Name, Arg::Key, Arg::Holder]);
            if kind == LockKind::Exclusive {
                args.push(Arg::Key);
            }
            args.extend([
                Arg::Key,
                Arg::Kind,
                Arg::Holder,
                Arg::Owner,
                Arg::Ttl,
                Arg::Description,
            ]);
            if looks_around {
                sql.push_str("k.fence = COALESCE((SELECT fence FROM s), 0) + 1 AND ");
            }
            sql.push_str(&cond);
            args.extend(cond_args);
            sql.push_str(&format!(
                " ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
                 fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
                 acquired_ms = excluded.acquired_ms WHERE l.expires_ms <= {now} \
                 RETURNING l.fence)"
            ));
            if matches!(kind, LockKind::Read | LockKind::Write) {
                // Dead readers' rows would otherwise pile up (the general path cleans
                // them too). Never the row the upsert may take over: one statement
                // must not change a row twice.
                sql.push_str(&format!(
                    ", c AS (DELETE FROM {leases} WHERE khash = ? AND kind = {} AND holder <> ? \
                     AND expires_ms <= {now})",
                    kind_code(LockKind::Read)
                ));
                args.extend([Arg::Key, Arg::Holder]);
            }
            if kind == LockKind::Exclusive {
                // Always one row: the grant's fence, or how long the live lease (as
                // this statement's snapshot sees it) has left; both empty while
                // another request holds the gate. An exclusive request needs
                // nothing else to decide, so a blocked waiter costs one statement
                // that writes nothing.
                sql.push_str(&format!(
                    " SELECT (SELECT fence FROM g) AS fence, (SELECT MAX(x.expires_ms) - {now} \
                     FROM {leases} x WHERE x.khash = ? AND x.kind = {} AND x.expires_ms > {now}) AS left_ms",
                    kind_code(kind)
                ));
                args.push(Arg::Key);
            } else {
                sql.push_str(" SELECT fence FROM g");
            }
            sql
        }
        Dialect::MySql => {
            args.extend([
                Arg::Key,
                Arg::Kind,
                Arg::Holder,
                Arg::Owner,
                Arg::Fence,
                Arg::Ttl,
                Arg::Description,
            ]);
            args.extend(cond_args);
            // Assignments run left to right on the updated values: the fence decides
            // once (the server clock is read anew at every call), the rest follow it.
            format!(
                "INSERT INTO {leases} {cols} SELECT ?, ?, ?, ?, ?, {now} + ?, ?, {now} FROM DUAL WHERE {cond} \
                 ON DUPLICATE KEY UPDATE fence = IF(expires_ms <= {now}, VALUES(fence), fence), \
                 owner = IF(fence = VALUES(fence), VALUES(owner), owner), \
                 description = IF(fence = VALUES(fence), VALUES(description), description), \
                 acquired_ms = IF(fence = VALUES(fence), VALUES(acquired_ms), acquired_ms), \
                 expires_ms = IF(fence = VALUES(fence), VALUES(expires_ms), expires_ms) RETURNING fence"
            )
        }
        Dialect::Sqlite => {
            args.extend([
                Arg::Key,
                Arg::Kind,
                Arg::Holder,
                Arg::Owner,
                Arg::Fence,
                Arg::Ttl,
                Arg::Description,
            ]);
            args.extend(cond_args);
            format!(
                "INSERT INTO {leases} AS l {cols} SELECT ?, ?, ?, ?, ?, {now} + ?, ?, {now} WHERE {cond} \
                 ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
                 fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
                 acquired_ms = excluded.acquired_ms WHERE l.expires_ms <= {now} \
                 RETURNING fence"
            )
        }
    };
    FastGrant {
        stmt: s(dialect, sql),
        args,
    }
}
