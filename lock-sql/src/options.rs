//! Connection and behaviour settings, checked before anything connects.

use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};

use crate::dialect::validate_table_prefix;

/// How a lock is held in the database.
///
/// The two never share tables: a lease row and a row lock know nothing of each other,
/// so the tables remember the strategy of their first client, and a client of the other
/// strategy on the same table prefix is refused at connect with
/// [`Error::InvalidArgument`](lock_core::Error::InvalidArgument).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Strategy {
    /// **Lease rows with optimistic versioning** (the default). A lock is a row with
    /// its owner, fencing token and an expiry computed by the database's clock. Taking
    /// it is one short transaction that inserts the row or takes over an expired one;
    /// renewal and release compare owner and token. No connection is held between
    /// calls, so one pool serves any number of locks; a crashed holder's lock frees
    /// when its lease runs out. Works on all three databases; all lock types.
    #[default]
    Lease,
    /// **Pessimistic `SELECT ... FOR UPDATE`**. The lock is a row lock held by an open
    /// transaction on a connection pinned to the guard: it costs **one database
    /// connection per held lock** (from a second pool, see `max_held_locks`). If that connection dies
    /// (process killed, connection reset, `pg_terminate_backend`, `KILL`) the database
    /// ends the transaction and the lock is free at once; the guard learns it at the
    /// next watchdog tick. The transaction is leased too: the server ends it once it
    /// has been silent for its lease (MariaDB: rounded up to whole seconds), so a holder
    /// cut off with its connection left open, or paused, frees the lock like a lease
    /// row, and fixed leases are offered. Waiters wait inside the database, which wakes
    /// them on release. Exclusive locks only.
    /// PostgreSQL and MySQL/MariaDB only: SQLite has no row locks, and connecting with
    /// this strategy to an SQLite URL fails with `Error::Unsupported`.
    ForUpdate,
}

/// The settings of a [`SqlBackend`](crate::SqlBackend).
///
/// ```
/// use std::time::Duration;
/// use lock_sql::{SqlOptions, Strategy};
/// let options = SqlOptions::new("postgres://locks@127.0.0.1/app")
///     .strategy(Strategy::Lease)
///     .table_prefix("app_locks")
///     .max_connections(8)
///     .connect_timeout(Duration::from_secs(3));
/// assert_eq!(options.get_table_prefix(), "app_locks");
/// ```
#[derive(Clone)]
pub struct SqlOptions {
    pub(crate) url: String,
    pub(crate) strategy: Strategy,
    pub(crate) table_prefix: String,
    pub(crate) max_connections: u32,
    pub(crate) max_held_locks: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) queue_ttl: Duration,
    pub(crate) session_sql: Vec<String>,
    pub(crate) tls: Option<TlsOptions>,
}

impl std::fmt::Debug for SqlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlOptions")
            .field("url", &crate::url::redacted(&self.url))
            .field("strategy", &self.strategy)
            .field("table_prefix", &self.table_prefix)
            .field("max_connections", &self.max_connections)
            .field("max_held_locks", &self.max_held_locks)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("poll_min", &self.poll_min)
            .field("poll_max", &self.poll_max)
            .field("queue_ttl", &self.queue_ttl)
            .field("session_sql", &self.session_sql)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The table prefix used when none is set: tables `lock_sql_keys`, `lock_sql_leases`, ...
pub const DEFAULT_TABLE_PREFIX: &str = "lock_sql";

impl SqlOptions {
    /// Defaults for `url`: `postgres://user:pass@host:port/db`, `mysql://...` (also
    /// MariaDB) or `sqlite://path/to/file.db`. The URL is checked by
    /// [`SqlBackend::connect`](crate::SqlBackend::connect).
    pub fn new(url: impl Into<String>) -> Self {
        SqlOptions {
            url: url.into(),
            strategy: Strategy::Lease,
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            max_connections: 10,
            max_held_locks: 100,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            poll_min: Duration::from_millis(5),
            poll_max: Duration::from_millis(250),
            queue_ttl: Duration::from_secs(10),
            session_sql: Vec::new(),
            tls: None,
        }
    }

    /// Options from a URL whose query carries this crate's settings beside the
    /// driver's. Every setting of [`SqlOptions`] but the session statements has a key;
    /// the driver's own keys (`sslmode`, `application_name`, ... for PostgreSQL;
    /// `ssl-mode`, `charset`, ... for MySQL; `mode`, `cache`, ... for SQLite) stay in
    /// the URL the driver gets; any other key is an error, not ignored. This is how
    /// `distributed_locks::connect`, `lockctl` and [`SqlBackend::connect_url`](crate::SqlBackend::connect_url)
    /// read a URL.
    ///
    /// | key | setting | example |
    /// |---|---|---|
    /// | `lock_strategy` | [`strategy`](Self::strategy) | `lease`, `for-update` |
    /// | `lock_table_prefix` | [`table_prefix`](Self::table_prefix) | `app_locks` |
    /// | `pool_max` | [`max_connections`](Self::max_connections) | `20` |
    /// | `max_held_locks` | [`max_held_locks`](Self::max_held_locks) | `100` |
    /// | `connect_timeout` | [`connect_timeout`](Self::connect_timeout) | `5s` |
    /// | `request_timeout` | [`request_timeout`](Self::request_timeout) | `10s` |
    /// | `poll_min`, `poll_max` | [`poll_interval`](Self::poll_interval) | `5ms`, `250ms` |
    /// | `queue_ttl` | [`queue_ttl`](Self::queue_ttl) | `10s` |
    /// | `tls_ca`, `tls_cert`, `tls_key` | [`tls`](Self::tls) (PEM files) | `/etc/locks/ca.pem` |
    ///
    /// Durations take a unit (`500ms`, `10s`, `2m`; a bare number is seconds).
    ///
    /// ```
    /// use lock_sql::{SqlOptions, Strategy};
    /// let o = SqlOptions::from_url("postgres://h/db?sslmode=disable&lock_strategy=for-update&lock_table_prefix=app&pool_max=20")?;
    /// assert_eq!(o.get_table_prefix(), "app");
    /// assert_eq!(o.get_strategy(), Strategy::ForUpdate);
    /// assert_eq!(o.get_url(), "postgres://h/db?sslmode=disable");
    /// assert!(SqlOptions::from_url("postgres://h/db?pool_size=20").is_err());
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown key, a key given twice, or a value
    /// that is not what its key takes, naming the key.
    pub fn from_url(url: &str) -> Result<Self> {
        crate::url_settings::options_from_url(url)
    }

    /// The URL the driver gets.
    pub fn get_url(&self) -> &str {
        &self.url
    }

    /// The strategy.
    pub fn get_strategy(&self) -> Strategy {
        self.strategy
    }

    /// How locks are held (default [`Strategy::Lease`]).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The prefix of the tables this backend creates and uses (default
    /// [`DEFAULT_TABLE_PREFIX`]): ASCII letters, digits and `_`, at most
    /// [`MAX_TABLE_PREFIX`](crate::MAX_TABLE_PREFIX) bytes. Clients share locks only
    /// if they use the same tables.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// The table prefix.
    pub fn get_table_prefix(&self) -> &str {
        &self.table_prefix
    }

    /// The most pooled connections (default 10). The FOR UPDATE strategy pins
    /// connections of a separate pool, see [`max_held_locks`](Self::max_held_locks).
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// [`Strategy::ForUpdate`] only: the most locks held at once through this backend
    /// (default 100). Each pins a connection of a second pool of this size; an acquire
    /// beyond it waits for a connection up to the connect timeout, then fails with
    /// `Error::Unavailable`.
    pub fn max_held_locks(mut self, max: u32) -> Self {
        self.max_held_locks = max;
        self
    }

    /// How long to wait for a connection before failing with `Error::Unavailable`
    /// (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request (a statement or a short transaction) may take before it
    /// fails with `Error::Unavailable` (default 10 s). Waiting for a lock is bounded by
    /// the acquire's own wait limit instead.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The polling interval of waiters on MySQL and SQLite (and PostgreSQL's fallback
    /// when a notification is missed): it starts at `min` and doubles up to `max`,
    /// with random jitter, and never sleeps past the holder's expiry (defaults 5 ms and
    /// 250 ms). A release in the waiter's own process wakes it at once; releases in
    /// other processes are found by polling.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// How long a fair-lock or writer queue ticket lives without its waiter refreshing
    /// it (default 10 s): a crashed waiter holds up the queue at most this long. Its
    /// expiry is kept by the database's clock.
    pub fn queue_ttl(mut self, ttl: Duration) -> Self {
        self.queue_ttl = ttl;
        self
    }

    /// A statement run on every new connection, after the backend's own settings (for
    /// example `SET application_name = 'billing'`). Trusted input: it is sent as is.
    pub fn session_statement(mut self, sql: impl Into<String>) -> Self {
        self.session_sql.push(sql.into());
        self
    }

    /// TLS to PostgreSQL or MySQL/MariaDB (the `tls` feature, rustls): the CA to
    /// trust and an optional client certificate, PEM files. Unless the URL sets
    /// `sslmode` (PostgreSQL) or `ssl-mode` (MySQL) itself, the connection then
    /// requires TLS and checks that the server's certificate names the URL's host
    /// (`verify-full`, `VERIFY_IDENTITY`). A mode that would encrypt without checking
    /// the CA (`require`, `REQUIRED`) is raised to `verify-ca` / `VERIFY_CA`, and one
    /// that may not encrypt at all (`disable`, `prefer`, ...) is refused at connect. Without this, the driver's own URL keys
    /// apply (`?sslmode=require`, `?ssl-mode=REQUIRED&ssl-ca=...`). The drivers check
    /// the URL's host: [`TlsOptions::server_name`] is refused at connect.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Checks everything but the URL (checked when connecting).
    pub(crate) fn validate(&self) -> Result<()> {
        validate_table_prefix(&self.table_prefix)?;
        if self.max_connections == 0 {
            return Err(Error::invalid_argument(
                "max_connections must be at least 1",
            ));
        }
        let limit = lock_core::MAX_DURATION;
        for (what, d) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
            ("queue_ttl", self.queue_ttl),
        ] {
            lock_core::backend::check_duration(what, d, Duration::from_millis(1), limit)?;
        }
        if self.queue_ttl < Duration::from_millis(30) {
            return Err(Error::invalid_argument(format!(
                "queue_ttl {:?} must be at least 30 ms (waiters refresh their ticket every third of it)",
                self.queue_ttl
            )));
        }
        if self.poll_min.is_zero() || self.poll_min > self.poll_max || self.poll_max > limit {
            return Err(Error::invalid_argument(format!(
                "poll interval {:?}..{:?} must be non-zero, with min <= max",
                self.poll_min, self.poll_max
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused() {
        let base = SqlOptions::new("sqlite://x.db");
        assert!(base.validate().is_ok());
        let bad = [
            base.clone().table_prefix("x; DROP TABLE y"),
            base.clone().max_connections(0),
            base.clone().connect_timeout(Duration::ZERO),
            base.clone().request_timeout(Duration::MAX),
            base.clone()
                .poll_interval(Duration::from_secs(1), Duration::from_millis(1)),
            base.clone()
                .poll_interval(Duration::ZERO, Duration::from_millis(1)),
            base.clone().queue_ttl(Duration::from_millis(5)),
        ];
        for options in bad {
            let err = options.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{options:?}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let shown = format!("{:?}", SqlOptions::new("postgres://u:secret@h/db"));
        assert!(!shown.contains("secret"), "{shown}");
    }
}
