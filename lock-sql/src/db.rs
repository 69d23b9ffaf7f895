//! The connection pool, per-connection settings, the schema, and the helpers every
//! statement goes through (request timeout, error mapping, retry of transient
//! conflicts).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, Result};

use lock_core::backend::Cleanups;
use sqlx::any::{AnyArguments, AnyPoolOptions};
use sqlx::query::Query;
use sqlx::{Any, AnyPool, AssertSqlSafe, Row};

use crate::bells::{Bells, MAX_WATCHES};
use crate::config::{SqlConfig, Strategy};
use crate::dialect::Dialect;
use crate::error::{classify, convert, timed_out, Class};
use crate::hot::HotConnection;
use crate::lease::BlindUndos;
use crate::server_limits::{idle_transaction_limit, LimitScope};
use crate::spare::SpareConnection;
use crate::sql::{Procedure, Statements, Stmt, SCHEMA_VERSION};
use crate::url::DbUrl;

/// One database: its pool and statements.
#[derive(Debug)]
pub(crate) struct Db {
    pub(crate) pool: AnyPool,
    /// FOR UPDATE and session: the connections pinned to held locks, one each.
    pub(crate) held_pool: AnyPool,
    /// The session strategy: the connection of the last clean release, for the next
    /// lock.
    pub(crate) spare: SpareConnection,
    /// The session strategy's keys whose names this process has registered.
    pub(crate) registered: crate::advisory::Register,
    /// The session strategy: what its advisory lock ids are derived from (database,
    /// schema, table prefix), so locks of two table sets never meet.
    pub(crate) lock_space: String,
    pub(crate) sql: Statements,
    pub(crate) dialect: Dialect,
    pub(crate) url: DbUrl,
    pub(crate) request_timeout: Duration,
    /// Undos, queue removals and cancels left running by dropped or failed calls.
    pub(crate) cleanups: Cleanups,
    /// The connection of the one-statement grants and releases (PostgreSQL and
    /// MariaDB).
    pub(crate) hot: HotConnection,
    /// MariaDB: whether the grant procedure is there to call ([`GrantProcedure`]):
    /// connect makes it; a call that finds it gone, forbidden or at odds with the
    /// tables' collation turns this off, and acquires take the transaction.
    ///
    /// [`GrantProcedure`]: crate::sql::GrantProcedure
    pub(crate) grant_procedure: AtomicBool,
    /// MariaDB, session strategy: whether its procedures are there to call
    /// ([`SessionProcedures`]), as `grant_procedure`; else tries and releases go as
    /// text.
    ///
    /// [`SessionProcedures`]: crate::sql::SessionProcedures
    pub(crate) session_procedures: AtomicBool,
    /// Undos of grants whose fence never came back (see [`BlindUndos`]).
    pub(crate) blind_undos: BlindUndos,
    /// Where the lock tables are (the address without credentials, and the tables'
    /// prefix): names the backend's location and its in-process release topics.
    pub(crate) scope: String,
    /// MariaDB's lease strategy: the doorbells that wake waiters in other processes.
    pub(crate) bells: Option<Bells>,
}

/// A query for `stmt`. The text is trusted: see [`crate::sql`].
pub(crate) fn q(stmt: &Stmt) -> Query<'static, Any, AnyArguments> {
    sqlx::query(AssertSqlSafe(stmt.clone()))
}

/// The settings every new connection gets before use.
pub(crate) fn session_setup(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        // Each statement of a lock transaction must see what committed before it (the
        // key row lock orders them), and the server clock is read in UTC so a DST
        // change cannot move it.
        Dialect::MySql => &[
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            "SET time_zone = '+00:00'",
        ],
        // Several processes share the file: WAL lets readers run beside the writer,
        // and the busy timeout makes writers queue instead of failing.
        Dialect::Sqlite => &[
            "PRAGMA busy_timeout = 5000",
            "PRAGMA journal_mode = WAL",
            "PRAGMA synchronous = NORMAL",
        ],
        Dialect::Postgres => &[],
    }
}

/// Runs the session settings on a fresh connection.
pub(crate) async fn setup_connection(
    conn: &mut sqlx::AnyConnection,
    dialect: Dialect,
    extra: &[String],
) -> std::result::Result<(), sqlx::Error> {
    for stmt in session_setup(dialect) {
        sqlx::raw_sql(*stmt).execute(&mut *conn).await?;
    }
    for stmt in extra {
        sqlx::raw_sql(AssertSqlSafe(stmt.clone()))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// One connection made directly, before the pool: a refused or unreachable server fails
/// here at once with its own cause (the pool would retry until its acquire timeout and
/// say only "pool timed out"); a file that cannot be a SQLite database, or a server
/// that is not MariaDB behind `mysql://`, is [`Error::InvalidArgument`].
async fn probe(url: &DbUrl, session_sql: &[String], limit: Duration) -> Result<()> {
    use sqlx::Connection as _;
    let dialect = url.dialect;
    // A SQLite URL holds no password: its path may be shown.
    let sqlite_path = url
        .driver_url
        .strip_prefix("sqlite://")
        .and_then(|rest| rest.split('?').next())
        .unwrap_or_default();
    if dialect == Dialect::Sqlite {
        // A device or directory is no database; SQLite would only say "locked".
        if std::fs::metadata(sqlite_path).is_ok_and(|m| !m.is_file()) {
            return Err(Error::invalid_argument(format!(
                "{sqlite_path:?} cannot be used as a SQLite database: not a regular file"
            )));
        }
    }
    let checked = async {
        let mut conn = sqlx::AnyConnection::connect(&url.driver_url).await?;
        let version = match dialect {
            Dialect::MySql => Some(
                sqlx::raw_sql("SELECT VERSION()")
                    .fetch_one(&mut conn)
                    .await?
                    .try_get::<String, _>(0)?,
            ),
            _ => None,
        };
        // A server we refuse is told so, not by the error a session setting it lacks
        // (MySQL has no idle transaction limit) would give.
        if version
            .as_deref()
            .is_none_or(|v| check_mysql_server(v).is_ok())
        {
            setup_connection(&mut conn, dialect, session_sql).await?;
        }
        let _ = conn.close().await;
        Ok::<_, sqlx::Error>(version)
    };
    let version = match tokio::time::timeout(limit, checked).await {
        Ok(Ok(version)) => version,
        Ok(Err(e)) if dialect == Dialect::Sqlite && classify(&e) != Class::Transient => {
            return Err(Error::invalid_argument(format!(
                "{sqlite_path:?} cannot be used as a SQLite database: {e}"
            )));
        }
        Ok(Err(e)) => return Err(convert(dialect.name(), e)),
        Err(_) => return Err(timed_out(dialect.name(), "connecting", limit)),
    };
    match version {
        Some(version) => check_mysql_server(&version),
        None => Ok(()),
    }
}

/// Whether a `mysql://` server (`SELECT VERSION()`) can hold our locks.
fn check_mysql_server(version: &str) -> Result<()> {
    if !is_mariadb(version) {
        return Err(Error::invalid_argument(format!(
            "mysql:// needs MariaDB (10.6 or later); this server is MySQL {version}, whose \
             SQL lacks INSERT ... RETURNING"
        )));
    }
    let mut numbers = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if (major, minor) < (10, 6) {
        return Err(Error::invalid_argument(format!(
            "mysql:// needs MariaDB 10.6 or later (FOR UPDATE SKIP LOCKED); this server is {version}"
        )));
    }
    Ok(())
}

/// The session statements of the session strategy's pinned connections: the caller's,
/// and on MySQL the size MariaDB gives the `MEMORY` fence table when a session opens it
/// first after a restart (1 GiB: room for about ten million keys).
fn held_session_sql(options: &SqlConfig, dialect: Dialect) -> Arc<Vec<String>> {
    let mut sql = options.session_sql.clone();
    if dialect == Dialect::MySql {
        sql.push(FENCE_TABLE_SIZE_MYSQL.to_owned());
    }
    Arc::new(sql)
}

/// See [`held_session_sql`].
pub(crate) const FENCE_TABLE_SIZE_MYSQL: &str = "SET SESSION max_heap_table_size = 1073741824";

/// The session statements of the pool's connections: the server ends a transaction
/// of theirs left idle for three request timeouts, then the caller's. Their
/// transactions last a request each; one its client gave up on over a cut network,
/// whose close never reaches the server, would otherwise keep the rows it locked (a
/// key's row: its lock, for every client) until the server drops the idle connection,
/// hours later. The connections pinned to held locks set limits of their own.
fn pool_session_sql(options: &SqlConfig, dialect: Dialect) -> Vec<String> {
    let mut sql = Vec::with_capacity(options.session_sql.len() + 1);
    if dialect != Dialect::Sqlite {
        let limit = options
            .request_timeout
            .saturating_mul(3)
            .max(Duration::from_secs(1));
        sql.push(idle_transaction_limit(dialect, limit, LimitScope::Session));
    }
    sql.extend(options.session_sql.iter().cloned());
    sql
}

/// Whether a connection given back to the pool is done with what it was sent, within
/// `limit`: the answer of a statement its caller gave up on, or the ROLLBACK sqlx
/// queued for a dropped transaction. sqlx then pings it, with no limit: one whose
/// answer was lost to a cut network would keep its place in the pool until TCP gives
/// up (a quarter of an hour), or for good behind a link that keeps the socket open.
/// One that is not done in time is closed (its statement, if still running, ends on
/// the server when it answers into the closed socket). Nothing pending costs nothing:
/// `flush` waits only for what is owed, unlike a ping's round trip. A SQLite
/// connection is a file this process opened.
async fn answers_within(
    conn: &mut sqlx::AnyConnection,
    dialect: Dialect,
    limit: Duration,
) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection as _;
    if dialect == Dialect::Sqlite {
        return Ok(true);
    }
    match tokio::time::timeout(limit, conn.flush()).await {
        Ok(done) => done.map(|()| true),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("a connection given back to the pool was not done within {limit:?}"),
        ))),
    }
}

/// What serialises schema changes between clients: a transaction-level advisory lock
/// on PostgreSQL, a named lock on MySQL.
const SCHEMA_LOCK_POSTGRES: &str =
    "SELECT 1 FROM (SELECT pg_advisory_xact_lock(7306853318711111)) AS l";
const SCHEMA_LOCK_MYSQL: &str = "SELECT GET_LOCK('lock_sql_schema', 30)";
const SCHEMA_UNLOCK_MYSQL: &str = "SELECT RELEASE_LOCK('lock_sql_schema')";

/// The strategies' codes in the tables' `meta` row `strategy`.
const STRATEGY_LEASE: i64 = 1;
const STRATEGY_FOR_UPDATE: i64 = 2;
const STRATEGY_SESSION: i64 = 3;

fn strategy_code(strategy: Strategy) -> i64 {
    match strategy {
        Strategy::Lease => STRATEGY_LEASE,
        Strategy::ForUpdate => STRATEGY_FOR_UPDATE,
        Strategy::Session => STRATEGY_SESSION,
    }
}

/// Whether `SELECT VERSION()` names a MariaDB server (`10.11.6-MariaDB-0+deb12u1`).
fn is_mariadb(version: &str) -> bool {
    version.to_ascii_lowercase().contains("mariadb")
}

impl Db {
    /// Opens the pool, checks the server answers, and creates the schema if missing.
    pub(crate) async fn connect(options: &SqlConfig, url: DbUrl) -> Result<Db> {
        sqlx::any::install_default_drivers();
        let dialect = url.dialect;
        let session_sql = Arc::new(options.session_sql.clone());
        let pool_session_sql = Arc::new(pool_session_sql(options, dialect));
        let release_check = options.request_timeout;
        let pool_options = |max: u32, session_sql: &Arc<Vec<String>>| {
            let setup_sql = session_sql.clone();
            AnyPoolOptions::new()
                .max_connections(max)
                .min_connections(0)
                .acquire_timeout(options.connect_timeout)
                .idle_timeout(Some(Duration::from_secs(60)))
                // A SQLite connection is a file this process opened: its ping only
                // goes to the connection's worker thread and back, and finds nothing.
                .test_before_acquire(dialect != Dialect::Sqlite)
                .after_connect(move |conn, _meta| {
                    let extra = setup_sql.clone();
                    Box::pin(async move { setup_connection(conn, dialect, &extra).await })
                })
        };
        let pool = pool_options(options.max_connections, &pool_session_sql)
            .after_release(move |conn, _meta| {
                Box::pin(answers_within(conn, dialect, release_check))
            })
            .connect_lazy(&url.driver_url)
            .map_err(|e| convert(dialect.name(), e))?;
        let held_pool = match options.strategy {
            Strategy::ForUpdate => pool_options(options.max_held_locks, &session_sql)
                .connect_lazy(&url.driver_url)
                .map_err(|e| convert(dialect.name(), e))?,
            // No ping before each use: the lock statement is the first a pinned
            // connection runs, and a dead one is retried on another
            // (`advisory::acquire`).
            Strategy::Session => {
                pool_options(options.max_held_locks, &held_session_sql(options, dialect))
                    .test_before_acquire(false)
                    .connect_lazy(&url.driver_url)
                    .map_err(|e| convert(dialect.name(), e))?
            }
            Strategy::Lease => pool.clone(),
        };
        probe(&url, &pool_session_sql, options.connect_timeout).await?;
        let scope = format!("{} tables {}", url.location(), options.table_prefix);
        // The doorbells' connections: the ringer's, the watches'.
        let bell_pools = match (dialect, options.strategy) {
            (Dialect::MySql, Strategy::Lease) => {
                // No ping before use: a dead connection fails its statement, and
                // waiters poll meanwhile.
                let lazy = |max| {
                    pool_options(max, &pool_session_sql)
                        .test_before_acquire(false)
                        .connect_lazy(&url.driver_url)
                        .map_err(|e| convert(dialect.name(), e))
                };
                Some((lazy(1)?, lazy(MAX_WATCHES)?))
            }
            _ => None,
        };
        let mut db = Db {
            pool,
            held_pool,
            spare: SpareConnection::default(),
            registered: Default::default(),
            lock_space: String::new(),
            // A call's lock wait ends before its caller gives up on it (three
            // request timeouts), so a grant never commits long after that.
            sql: Statements::new(dialect, &options.table_prefix, options.request_timeout),
            dialect,
            url,
            request_timeout: options.request_timeout,
            cleanups: Cleanups::default(),
            hot: HotConnection::default(),
            grant_procedure: AtomicBool::new(false),
            session_procedures: AtomicBool::new(false),
            blind_undos: BlindUndos::default(),
            scope,
            bells: None,
        };
        db.timed("creating the schema", db.ensure_schema()).await?;
        db.timed("adding the newer columns", db.ensure_added_columns())
            .await?;
        db.timed(
            "checking the tables' strategy",
            db.claim_strategy(options.strategy),
        )
        .await?;
        if let (Strategy::Lease, Some(grant)) = (options.strategy, &db.sql.grant_procedure) {
            let ready = db
                .ensure_procedures(
                    &[&grant.procedure],
                    "the lease grant procedure could not be created; acquires take a \
                     transaction of four round trips instead of one call",
                )
                .await?;
            db.grant_procedure.store(ready, Ordering::Relaxed);
        }
        if let Some((ring_pool, watch_pool)) = bell_pools {
            let space = db
                .timed(
                    "reading where the doorbells live",
                    crate::advisory::lock_space(&db, &options.table_prefix),
                )
                .await?;
            db.bells = Some(Bells::new(
                &space,
                ring_pool,
                watch_pool,
                options.request_timeout,
            ));
        }
        if options.strategy == Strategy::Session {
            db.timed("creating the fence table", async {
                db.create_fences().await.map_err(|e| db.err(e))
            })
            .await?;
            db.lock_space = db
                .timed(
                    "reading where advisory locks live",
                    crate::advisory::lock_space(&db, &options.table_prefix),
                )
                .await?;
        }
        if let (Strategy::Session, Some(made)) = (options.strategy, &db.sql.session_procedures) {
            let ready = db
                .ensure_procedures(
                    &[&made.take, &made.release],
                    "the session strategy's procedures could not be created; tries and \
                     releases send two statements each instead of one call",
                )
                .await?;
            db.session_procedures.store(ready, Ordering::Relaxed);
        }
        Ok(db)
    }

    pub(crate) fn name(&self) -> &'static str {
        self.dialect.name()
    }

    pub(crate) fn err(&self, e: sqlx::Error) -> Error {
        convert(self.name(), e)
    }

    /// Runs `fut` within the request timeout.
    pub(crate) async fn timed<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.request_timeout, fut).await {
            Ok(out) => out,
            Err(_) => Err(timed_out(self.name(), what, self.request_timeout)),
        }
    }

    /// Creates the tables if missing and checks the version marker.
    async fn ensure_schema(&self) -> Result<()> {
        match q(&self.sql.schema.read_version)
            .fetch_optional(&self.pool)
            .await
        {
            Ok(Some(row)) => return self.check_version(row.try_get(0).map_err(|e| self.err(e))?),
            Ok(None) => {}
            // Unreachable: no point trying to create anything.
            Err(e) if classify(&e) == Class::Unavailable => return Err(self.err(e)),
            // Most likely the table does not exist yet.
            Err(_) => {}
        }
        self.create_schema().await.map_err(|e| self.err(e))?;
        let row = q(&self.sql.schema.read_version)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        self.check_version(row.try_get(0).map_err(|e| self.err(e))?)
    }

    /// Adds the columns newer than the tables (the lease table's `description` and
    /// `acquired_ms`; `permits` on the lease and queue tables) if the tables were made
    /// by a release without them. Two clients may race here: one that fails to add a
    /// column another just added looks again rather than failing.
    async fn ensure_added_columns(&self) -> Result<()> {
        let (schema, tables) = (&self.sql.schema, &self.sql.tables);
        for (table, columns) in [
            (
                &tables.leases_name,
                vec![
                    ("description", &schema.add_description),
                    ("acquired_ms", &schema.add_acquired_ms),
                    ("permits", &schema.add_lease_permits),
                ],
            ),
            (
                &tables.queue_name,
                vec![("permits", &schema.add_queue_permits)],
            ),
        ] {
            let present = self.added_columns(table).await?;
            for (column, add) in columns {
                if present.iter().any(|c| c == column) {
                    continue;
                }
                if let Err(e) = q(add).execute(&self.pool).await {
                    if !self.added_columns(table).await?.iter().any(|c| c == column) {
                        return Err(self.err(e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Which of the newer columns `table` has.
    async fn added_columns(&self, table: &str) -> Result<Vec<String>> {
        let rows = q(&self.sql.schema.added_columns)
            .bind(table.to_owned())
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|row| row.try_get::<String, _>(0).map_err(|e| self.err(e)))
            .collect()
    }

    /// Records `strategy` as the tables' strategy if none is yet, and refuses a client
    /// of the other one: a lease row and a row lock know nothing of each other, so two
    /// clients of different strategies on the same tables would both hold a lock.
    async fn claim_strategy(&self, strategy: Strategy) -> Result<()> {
        q(&self.sql.schema.write_strategy)
            .bind(strategy_code(strategy))
            .execute(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        let row = q(&self.sql.schema.read_strategy)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.err(e))?;
        let recorded: i64 = row.try_get(0).map_err(|e| self.err(e))?;
        if recorded == strategy_code(strategy) {
            return Ok(());
        }
        let recorded = match recorded {
            STRATEGY_LEASE => "Lease".to_owned(),
            STRATEGY_FOR_UPDATE => "ForUpdate".to_owned(),
            STRATEGY_SESSION => "Session".to_owned(),
            other => format!("unknown ({other})"),
        };
        Err(Error::InvalidArgument {
            message: format!(
                "{} are used with Strategy::{recorded}; a Strategy::{strategy:?} \
                 client there would not exclude their holders: use the same strategy, or another \
                 table prefix",
                self.scope
            ),
        })
    }

    fn check_version(&self, version: i64) -> Result<()> {
        if version > SCHEMA_VERSION {
            return Err(Error::backend(
                self.name(),
                format!(
                    "the lock tables have schema version {version}; this release understands up to {SCHEMA_VERSION}: upgrade lock-sql or use another table prefix"
                ),
            ));
        }
        Ok(())
    }

    /// MariaDB: creates the `procedures` that are missing; whether they are all there
    /// to call. A procedure another account made serves a user that may only execute
    /// it. A user that may not create them (`CREATE ROUTINE`) still gets its locks,
    /// through statements sent as they are, and so does a client whose creation takes
    /// longer than a request (a warning says so, `fallback`); only an unreachable
    /// server fails.
    async fn ensure_procedures(&self, procedures: &[&Procedure], fallback: &str) -> Result<bool> {
        let made = async {
            for procedure in procedures {
                let exists = q(&self.sql.schema.procedure_exists)
                    .bind(procedure.name.clone())
                    .fetch_one(&self.pool)
                    .await?
                    .try_get::<i64, _>(0)?;
                if exists == 0 {
                    // Out of the pool: if this is cut short, the connection closes
                    // with whatever it was doing. Two clients creating it at once are
                    // serialised by the server's lock on the procedure's name.
                    let mut conn = self.pool.acquire().await?.detach();
                    sqlx::raw_sql(AssertSqlSafe(procedure.create.clone()))
                        .execute(&mut conn)
                        .await?;
                }
            }
            Ok::<_, sqlx::Error>(())
        };
        let failed = match tokio::time::timeout(self.request_timeout, made).await {
            Ok(Ok(())) => return Ok(true),
            Ok(Err(e)) if classify(&e) == Class::Unavailable => return Err(self.err(e)),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.request_timeout),
        };
        tracing::warn!(error = %failed, "{}: {fallback}", self.scope);
        Ok(false)
    }

    /// Begins a transaction on a pooled connection. The BEGIN runs in a task of its
    /// own: sqlx queues no ROLLBACK for a BEGIN still in flight when its future is
    /// dropped, so a cancelled caller would put the connection back in the pool inside
    /// a transaction nobody knows of, and later statements on it (a clean-up, another
    /// grant) would be rolled back or committed with it. In its own task the BEGIN
    /// completes, and dropping the transaction then rolls it back.
    pub(crate) async fn begin(
        &self,
    ) -> std::result::Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        let pool = self.pool.clone();
        tokio::spawn(async move { pool.begin().await })
            .await
            .map_err(|_| sqlx::Error::WorkerCrashed)?
    }

    /// Creates the session strategy's fence table if missing, serialised between
    /// clients as [`create_schema`](Self::create_schema) is.
    async fn create_fences(&self) -> std::result::Result<(), sqlx::Error> {
        let Some(create) = &self.sql.schema.create_fences else {
            return Ok(());
        };
        match self.dialect {
            Dialect::Postgres => {
                let mut tx = self.begin().await?;
                sqlx::raw_sql(SCHEMA_LOCK_POSTGRES)
                    .execute(&mut *tx)
                    .await?;
                q(create).execute(&mut *tx).await?;
                tx.commit().await
            }
            _ => {
                let mut conn = self.pool.acquire().await?;
                sqlx::raw_sql(SCHEMA_LOCK_MYSQL).execute(&mut *conn).await?;
                let created = sqlx::raw_sql(AssertSqlSafe(create.clone()))
                    .execute(&mut *conn)
                    .await;
                sqlx::raw_sql(SCHEMA_UNLOCK_MYSQL)
                    .execute(&mut *conn)
                    .await?;
                created.map(drop)
            }
        }
    }

    /// Creates the tables, serialised between clients so concurrent `CREATE TABLE IF
    /// NOT EXISTS` cannot trip over each other (PostgreSQL can fail on that race).
    async fn create_schema(&self) -> std::result::Result<(), sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        match self.dialect {
            Dialect::Postgres => {
                drop(conn);
                // A transaction object rolls back if anything below fails.
                let mut tx = self.begin().await?;
                sqlx::raw_sql(SCHEMA_LOCK_POSTGRES)
                    .execute(&mut *tx)
                    .await?;
                for stmt in &self.sql.schema.create {
                    q(stmt).execute(&mut *tx).await?;
                }
                q(&self.sql.schema.write_version).execute(&mut *tx).await?;
                tx.commit().await?;
            }
            Dialect::MySql => {
                sqlx::raw_sql(SCHEMA_LOCK_MYSQL).execute(&mut *conn).await?;
                let created = async {
                    for stmt in &self.sql.schema.create {
                        sqlx::raw_sql(AssertSqlSafe(stmt.clone()))
                            .execute(&mut *conn)
                            .await?;
                    }
                    q(&self.sql.schema.write_version)
                        .execute(&mut *conn)
                        .await?;
                    Ok::<_, sqlx::Error>(())
                }
                .await;
                sqlx::raw_sql(SCHEMA_UNLOCK_MYSQL)
                    .execute(&mut *conn)
                    .await?;
                created?;
            }
            Dialect::Sqlite => {
                // SQLite serialises writers itself (busy timeout).
                for stmt in &self.sql.schema.create {
                    q(stmt).execute(&mut *conn).await?;
                }
                q(&self.sql.schema.write_version)
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{check_mysql_server, is_mariadb};

    #[test]
    fn mariadb_before_10_6_is_refused() {
        // FOR UPDATE SKIP LOCKED (is_locked, force_unlock) came in 10.6.
        for old in [
            "10.5.23-MariaDB-0+deb11u1",
            "10.4.34-MariaDB",
            "5.5.68-MariaDB",
        ] {
            let err = check_mysql_server(old).expect_err(old);
            assert!(err.to_string().contains("10.6"), "{old}: {err}");
        }
        for fine in [
            "10.6.0-MariaDB",
            "10.11.6-MariaDB-0+deb12u1",
            "11.4.2-MariaDB-log",
        ] {
            check_mysql_server(fine).expect(fine);
        }
    }

    #[test]
    fn only_mariadb_passes_for_mysql_urls() {
        assert!(is_mariadb("10.11.6-MariaDB-0+deb12u1"));
        assert!(is_mariadb("11.4.2-MariaDB-log"));
        assert!(!is_mariadb("8.0.36"));
        assert!(!is_mariadb("8.4.0-commercial"));
    }
}
