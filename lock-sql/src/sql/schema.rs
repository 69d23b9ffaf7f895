//! The tables, and what connect reads and writes in them: the schema version, the
//! strategy the tables were first used with, the lease table's `inspect` columns.

use super::{s, Stmt, Tables};
use crate::db::FENCE_TABLE_SIZE_MYSQL;
use crate::dialect::Dialect;

/// The schema version this release writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The lease table's columns for `inspect`, which tables made before them lack (they
/// are added at connect: [`SchemaStatements::added_columns`]). Releases that do not
/// know them leave their defaults, so they need no new schema version.
const HOLDER_COLUMNS: &str =
    "description VARCHAR(1024) NOT NULL DEFAULT '', acquired_ms BIGINT NOT NULL DEFAULT 0";

/// A semaphore's count, kept on its permit rows and queue tickets (0 on locks'), added
/// at connect like [`HOLDER_COLUMNS`]. Releases that do not know it have no
/// semaphores.
const PERMITS_COLUMN: &str = "permits BIGINT NOT NULL DEFAULT 0";

/// What connect runs.
#[derive(Debug)]
pub(crate) struct SchemaStatements {
    pub(crate) create: Vec<Stmt>,
    /// The session strategy's fence table (none on SQLite), created by that strategy's
    /// clients only, with the other tables or later.
    pub(crate) create_fences: Option<Stmt>,
    pub(crate) read_version: Stmt,
    pub(crate) write_version: Stmt,
    /// The strategy the tables were first used with (a `?` for its code, written only
    /// if none is recorded yet), and the one recorded.
    pub(crate) write_strategy: Stmt,
    pub(crate) read_strategy: Stmt,
    /// Which of the columns added after the first release (the [`HOLDER_COLUMNS`] and
    /// [`PERMITS_COLUMN`]) a table has, by the table's name (their names as rows).
    pub(crate) added_columns: Stmt,
    /// MySQL: whether a procedure of this name (bound) is in the database.
    pub(crate) procedure_exists: Stmt,
    /// Adds one of them.
    pub(crate) add_description: Stmt,
    pub(crate) add_acquired_ms: Stmt,
    pub(crate) add_lease_permits: Stmt,
    pub(crate) add_queue_permits: Stmt,
}

impl SchemaStatements {
    pub(crate) fn new(dialect: Dialect, t: &Tables) -> Self {
        let (meta, keys, leases, queue, rows, holders, fences) = (
            &t.meta, &t.keys, &t.leases, &t.queue, &t.rows, &t.holders, &t.fences,
        );
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
                 expires_ms {int} NOT NULL, {HOLDER_COLUMNS}, {PERMITS_COLUMN}, PRIMARY KEY (khash, kind, holder)){suffix}"
            )),
            st(format!(
                "CREATE TABLE IF NOT EXISTS {queue} (khash VARCHAR(64) NOT NULL, kind {int} NOT NULL, \
                 ticket {int} NOT NULL, owner VARCHAR(128) NOT NULL, expires_ms {int} NOT NULL, \
                 {PERMITS_COLUMN}, PRIMARY KEY (khash, kind, ticket)){suffix}"
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
        // The session strategy's counters, kept off the disk (see `sql::advisory`).
        // MariaDB sizes a MEMORY table by the session's `max_heap_table_size` when it
        // creates it: 1 GiB is room for about ten million keys.
        let create_fences = match dialect {
            Dialect::Postgres => Some(st(format!(
                "CREATE UNLOGGED TABLE IF NOT EXISTS {fences} (khash VARCHAR(64) NOT NULL PRIMARY KEY, \
                 fence BIGINT NOT NULL)"
            ))),
            Dialect::MySql => Some(st(format!(
                "{FENCE_TABLE_SIZE_MYSQL}; CREATE TABLE IF NOT EXISTS {fences} \
                 (khash CHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=MEMORY"
            ))),
            Dialect::Sqlite => None,
        };
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
        let wanted = "('description', 'acquired_ms', 'permits')";
        let added_columns = st(match dialect {
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
        let procedure_exists = st(
            "SELECT COUNT(*) FROM information_schema.routines \
             WHERE routine_schema = DATABASE() AND routine_type = 'PROCEDURE' AND routine_name = ?"
                .to_owned(),
        );
        let (description_column, acquired_column) =
            HOLDER_COLUMNS.split_once(", ").expect("two holder columns");
        let add_description = st(format!(
            "ALTER TABLE {leases} ADD COLUMN {description_column}"
        ));
        let add_acquired_ms = st(format!("ALTER TABLE {leases} ADD COLUMN {acquired_column}"));
        let add_lease_permits = st(format!("ALTER TABLE {leases} ADD COLUMN {PERMITS_COLUMN}"));
        let add_queue_permits = st(format!("ALTER TABLE {queue} ADD COLUMN {PERMITS_COLUMN}"));
        SchemaStatements {
            create,
            create_fences,
            read_version,
            write_version,
            write_strategy,
            read_strategy,
            added_columns,
            procedure_exists,
            add_description,
            add_acquired_ms,
            add_lease_permits,
            add_queue_permits,
        }
    }
}
