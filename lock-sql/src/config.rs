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
    /// connection per held lock** (from a second pool, see [`SqlConfig::with_max_held_locks`]). If that connection dies
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
    /// **Session-level advisory locks**: PostgreSQL's `pg_advisory_lock`, MariaDB's
    /// `GET_LOCK`, held by a connection pinned to the guard, as DistributedLock.NET's
    /// PostgreSQL and MySQL locks are. Nothing is written to disk per grant: the
    /// fencing token is a counter in a table the server keeps off the disk (PostgreSQL
    /// `UNLOGGED`, MariaDB `MEMORY`), never below the server clock in microseconds, so
    /// a server crash that empties it cannot make a token go back (unless the server
    /// clock is set back past the last token). A try or an uncontended acquire is one
    /// round trip; a release is one. Like [`ForUpdate`](Self::ForUpdate) it costs one
    /// connection per held lock; a dead connection frees the lock at once and the guard
    /// learns it at the next watchdog tick; the server ends a session silent for its
    /// lease (PostgreSQL `idle_session_timeout`, 14 and later; MariaDB `wait_timeout`,
    /// whole seconds), at most the server's largest limit (PostgreSQL's is about 24.8
    /// days: a longer lease is counted only that long, and the watchdog renews within
    /// it); waiters wait inside the server, which wakes them on release.
    /// Exclusive locks on both; fair locks on PostgreSQL, whose lock queue grants in
    /// request order (MariaDB does not promise an order). No read-write locks: a
    /// downgrade would need the writer's own connection. No `inspect` of the holder:
    /// the server knows only the connection. PostgreSQL and MySQL/MariaDB only.
    Session,
}

/// The settings of a [`SqlBackend`](crate::SqlBackend): the database URL, the
/// strategy, the tables, the pools and the timeouts.
///
/// Made from a URL with [`from_url`](Self::from_url), then changed with the `with_*`
/// setters, which never fail: every value is checked once, by
/// [`SqlBackend::connect`](crate::SqlBackend::connect), with an
/// [`Error::InvalidArgument`] naming the setting. The password never appears in `Debug`
/// output or errors.
///
/// ```
/// use std::time::Duration;
/// use lock_sql::{SqlConfig, Strategy};
/// let config = SqlConfig::from_url("postgres://127.0.0.1/app")?
///     .with_credentials("locks", "s3cret")
///     .with_strategy(Strategy::Lease)
///     .with_table_prefix("app_locks")
///     .with_max_connections(8)
///     .with_connect_timeout(Duration::from_secs(3));
/// assert_eq!(config.table_prefix(), "app_locks");
/// assert_eq!(config.username(), Some("locks"));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct SqlConfig {
    pub(crate) url: String,
    pub(crate) credentials: Option<(String, String)>,
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

impl std::fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlConfig")
            .field("url", &crate::url::redacted(&self.url))
            .field("username", &self.username())
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
/// How long to wait for a connection unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one statement or short transaction may take unless configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most [`SqlConfig::with_max_held_locks`] takes: each held lock pins a server
/// connection, and this is far more than servers are set up to serve (PostgreSQL's
/// and MariaDB's `max_connections` are 100 and 151 by default).
pub const MAX_HELD_LOCKS: u32 = 65_535;

impl SqlConfig {
    /// The settings of `url`: `postgres://user:pass@host:port/db`, `mysql://...` (also
    /// `mariadb://`) or `sqlite://path/to/file.db`, whose query may carry this crate's
    /// settings beside the driver's. Every setting but the session statements and the
    /// credentials has a key; the driver's own keys (`sslmode`, `application_name`, ...
    /// for PostgreSQL; `ssl-mode`, `charset`, ... for MySQL; `mode`, `cache`, ... for
    /// SQLite) stay in the URL the driver gets; any other key is an error, not ignored.
    /// This is how `distributed_locks::connect`, `lockctl` and
    /// [`SqlBackend::connect_url`](crate::SqlBackend::connect_url) read a URL.
    ///
    /// | key | setting | example |
    /// |---|---|---|
    /// | `lock_strategy` | [`with_strategy`](Self::with_strategy) | `lease`, `for-update`, `session` |
    /// | `lock_table_prefix` | [`with_table_prefix`](Self::with_table_prefix) | `app_locks` |
    /// | `pool_max` | [`with_max_connections`](Self::with_max_connections) | `20` |
    /// | `max_held_locks` | [`with_max_held_locks`](Self::with_max_held_locks) | `100` |
    /// | `connect_timeout` | [`with_connect_timeout`](Self::with_connect_timeout) | `5s` |
    /// | `request_timeout` | [`with_request_timeout`](Self::with_request_timeout) | `10s` |
    /// | `poll_min`, `poll_max` | [`with_poll_interval`](Self::with_poll_interval) | `5ms`, `250ms` |
    /// | `queue_ttl` | [`with_queue_ttl`](Self::with_queue_ttl) | `10s` |
    /// | `tls_ca`, `tls_cert`, `tls_key` | [`with_tls`](Self::with_tls) (PEM files) | `/etc/locks/ca.pem` |
    ///
    /// Durations take a unit (`500ms`, `10s`, `2m`; a bare number is seconds).
    ///
    /// ```
    /// use lock_sql::{SqlConfig, Strategy};
    /// let c = SqlConfig::from_url("postgres://h/db?sslmode=disable&lock_strategy=for-update&lock_table_prefix=app&pool_max=20")?;
    /// assert_eq!(c.table_prefix(), "app");
    /// assert_eq!(c.strategy(), Strategy::ForUpdate);
    /// assert_eq!(c.url(), "postgres://h/db?sslmode=disable");
    /// assert!(SqlConfig::from_url("postgres://h/db?pool_size=20").is_err());
    /// assert!(SqlConfig::from_url("redis://h").is_err());
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a URL that names no database this build has, an
    /// unknown key, a key given twice, or a value that is not what its key takes,
    /// naming the key.
    pub fn from_url(url: &str) -> Result<Self> {
        let config = crate::url_settings::config_from_url(url)?;
        crate::url::parse(&config.url)?;
        config.validate()?;
        Ok(config)
    }

    /// The defaults for `url`, read by `from_url` before the query's settings.
    pub(crate) fn defaults(url: String) -> Self {
        SqlConfig {
            url,
            credentials: None,
            strategy: Strategy::Lease,
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
            max_connections: 10,
            max_held_locks: 100,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            poll_min: Duration::from_millis(5),
            poll_max: Duration::from_millis(250),
            queue_ttl: Duration::from_secs(10),
            session_sql: Vec::new(),
            tls: None,
        }
    }

    /// The user name and password, in place of the URL's (PostgreSQL and
    /// MySQL/MariaDB; SQLite has none, and connecting with them fails).
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// How locks are held (default [`Strategy::Lease`]).
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The prefix of the tables this backend creates and uses (default
    /// [`DEFAULT_TABLE_PREFIX`]): ASCII letters, digits and `_`, at most
    /// [`MAX_TABLE_PREFIX`](crate::MAX_TABLE_PREFIX) bytes. Clients share locks only
    /// if they use the same tables.
    pub fn with_table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// The most pooled connections (default 10, at least 1). The lease strategy keeps
    /// one more beside the pool for its one-statement grants and releases. The FOR
    /// UPDATE and session strategies pin connections of a separate pool, see
    /// [`with_max_held_locks`](Self::with_max_held_locks).
    pub fn with_max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// [`Strategy::ForUpdate`] and [`Strategy::Session`] only: the most locks held (or
    /// waited for) at once through this backend (default 100, from 1 to
    /// [`MAX_HELD_LOCKS`]). Each pins a connection of a second pool of this size; an acquire
    /// beyond it waits for a connection up to the connect timeout, then fails with
    /// `Error::Unavailable`.
    pub fn with_max_held_locks(mut self, max: u32) -> Self {
        self.max_held_locks = max;
        self
    }

    /// How long to wait for a connection before failing with `Error::Unavailable`
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request (a statement or a short transaction) may take before it
    /// fails with `Error::Unavailable` (default [`DEFAULT_REQUEST_TIMEOUT`]). Waiting
    /// for a lock is bounded by the acquire's own wait limit instead. It also bounds
    /// what a request the client gave up on can leave behind: the server ends a pooled
    /// connection's transaction left idle for three request timeouts (at least 1 s),
    /// and a connection given back to the pool is closed if the answer it is still
    /// owed (of a statement given up on) does not come within one.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The polling interval of waiters on MySQL and SQLite (and on PostgreSQL while a
    /// client's listening for releases starts, or if it cannot start): it starts at
    /// `min` and doubles up to `max`, with random jitter, and never sleeps past the
    /// holder's expiry (defaults 5 ms and 250 ms). On MySQL and SQLite a release in the
    /// waiter's own process wakes it at once. Releases in other processes are found by
    /// polling, except on MariaDB with the lease strategy: there the holder's doorbell
    /// wakes the waiter, which looks again at least every `4 × max`.
    pub fn with_poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// How long a fair-lock or writer queue ticket lives without its waiter refreshing
    /// it (default 10 s, at least 30 ms): a crashed waiter holds up the queue at most
    /// this long. Its expiry is kept by the database's clock.
    pub fn with_queue_ttl(mut self, ttl: Duration) -> Self {
        self.queue_ttl = ttl;
        self
    }

    /// A statement run on every new connection, after the backend's own settings (for
    /// example `SET application_name = 'billing'`); each call adds one. Trusted input:
    /// it is sent as is.
    pub fn with_session_statement(mut self, sql: impl Into<String>) -> Self {
        self.session_sql.push(sql.into());
        self
    }

    /// TLS to PostgreSQL or MySQL/MariaDB (the `tls` feature, rustls): the CA to
    /// trust and an optional client certificate, PEM files. Unless the URL sets
    /// `sslmode` (PostgreSQL) or `ssl-mode` (MySQL) itself, the connection then
    /// requires TLS and checks that the server's certificate names the URL's host
    /// (`verify-full`, `VERIFY_IDENTITY`). A mode that would encrypt without checking
    /// the CA (`require`, `REQUIRED`) is raised to `verify-ca` / `VERIFY_CA`, and one
    /// that may not encrypt at all (`disable`, `prefer`, ...) is refused at connect.
    /// Without this, the driver's own URL keys apply (`?sslmode=require`,
    /// `?ssl-mode=REQUIRED&ssl-ca=...`). The drivers check the URL's host:
    /// [`TlsOptions::server_name`] is refused at connect.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The URL the driver gets, but for the credentials: the one given, without its
    /// user and password and without this crate's query keys.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The user name, from the URL (its user info, or PostgreSQL's `user` key) or
    /// [`with_credentials`](Self::with_credentials).
    pub fn username(&self) -> Option<&str> {
        self.credentials
            .as_ref()
            .map(|(user, _)| user.as_str())
            .filter(|user| !user.is_empty())
    }

    /// How locks are held.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The prefix of the tables.
    pub fn table_prefix(&self) -> &str {
        &self.table_prefix
    }

    /// The most pooled connections.
    pub fn max_connections(&self) -> u32 {
        self.max_connections
    }

    /// The most locks held at once with [`Strategy::ForUpdate`] or [`Strategy::Session`].
    pub fn max_held_locks(&self) -> u32 {
        self.max_held_locks
    }

    /// How long to wait for a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long one request may take.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The waiters' polling interval, shortest and longest.
    pub fn poll_interval(&self) -> (Duration, Duration) {
        (self.poll_min, self.poll_max)
    }

    /// How long a queue ticket lives unrefreshed.
    pub fn queue_ttl(&self) -> Duration {
        self.queue_ttl
    }

    /// The statements run on every new connection.
    pub fn session_statements(&self) -> &[String] {
        &self.session_sql
    }

    /// The TLS settings, if any.
    pub fn tls(&self) -> Option<&TlsOptions> {
        self.tls.as_ref()
    }

    /// The URL the driver connects with: [`url`](Self::url) with the credentials.
    pub(crate) fn driver_url(&self) -> Result<String> {
        let Some((user, password)) = &self.credentials else {
            return Ok(self.url.clone());
        };
        let refused = || {
            Error::invalid_argument(format!(
                "database URL {:?} cannot carry a user name and password",
                crate::url::redacted(&self.url)
            ))
        };
        let mut url = url::Url::parse(&self.url).map_err(|_| refused())?;
        if url.scheme() == "sqlite" {
            return Err(refused());
        }
        // The drivers percent-decode the user info, so every byte that is not a letter
        // or a digit goes in encoded (`url` alone would leave a `%` as it is).
        let encode = |text: &str| {
            percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        };
        url.set_username(&encode(user)).map_err(|()| refused())?;
        let password = (!password.is_empty()).then(|| encode(password));
        url.set_password(password.as_deref())
            .map_err(|()| refused())?;
        Ok(url.into())
    }

    /// Checks everything but the URL (checked by `url::parse`).
    pub(crate) fn validate(&self) -> Result<()> {
        validate_table_prefix(&self.table_prefix)?;
        if self.max_connections == 0 {
            return Err(Error::invalid_argument(
                "max_connections must be at least 1",
            ));
        }
        if !(1..=MAX_HELD_LOCKS).contains(&self.max_held_locks) {
            return Err(Error::invalid_argument(format!(
                "max_held_locks {} must be between 1 and {MAX_HELD_LOCKS}",
                self.max_held_locks
            )));
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
        let base = SqlConfig::from_url("sqlite://x.db").unwrap();
        assert!(base.validate().is_ok());
        let bad = [
            base.clone().with_table_prefix("x; DROP TABLE y"),
            base.clone().with_max_connections(0),
            base.clone().with_connect_timeout(Duration::ZERO),
            base.clone().with_request_timeout(Duration::MAX),
            base.clone()
                .with_poll_interval(Duration::from_secs(1), Duration::from_millis(1)),
            base.clone()
                .with_poll_interval(Duration::ZERO, Duration::from_millis(1)),
            base.clone().with_queue_ttl(Duration::from_millis(5)),
            base.clone().with_max_held_locks(0),
            base.clone().with_max_held_locks(u32::MAX),
        ];
        for options in bad {
            let err = options.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{options:?}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let config = SqlConfig::from_url("postgres://u:secret@h/db").unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(config.username(), Some("u"));
        assert_eq!(config.url(), "postgres://h/db");
    }

    #[test]
    fn credentials_go_back_into_the_driver_url_encoded() {
        let config = SqlConfig::from_url("postgres://old:pw@h:5432/db?sslmode=disable").unwrap();
        assert_eq!(
            config.driver_url().unwrap(),
            "postgres://old:pw@h:5432/db?sslmode=disable"
        );
        let config = config.with_credentials("app user", "p@ss:/word%41");
        assert_eq!(
            config.driver_url().unwrap(),
            "postgres://app%20user:p%40ss%3A%2Fword%2541@h:5432/db?sslmode=disable"
        );
        // A `%` written encoded in the URL stays one character.
        let percent = SqlConfig::from_url("postgres://u:p%2541@h/db").unwrap();
        assert_eq!(percent.driver_url().unwrap(), "postgres://u:p%2541@h/db");
        let only_password = SqlConfig::from_url("postgres://:pw@h/db").unwrap();
        assert_eq!(only_password.username(), None);
        assert_eq!(only_password.driver_url().unwrap(), "postgres://:pw@h/db");
        // PostgreSQL's own `user` and `password` keys are credentials too.
        let keyed = SqlConfig::from_url("postgres://u:old@h/db?user=a&password=x%25y").unwrap();
        assert_eq!(keyed.username(), Some("a"));
        assert_eq!(keyed.url(), "postgres://h/db");
        assert!(!format!("{keyed:?}").contains("x%y"), "{keyed:?}");
        assert_eq!(keyed.driver_url().unwrap(), "postgres://a:x%25y@h/db");
        let replaced = keyed.with_credentials("b", "y");
        assert_eq!(replaced.driver_url().unwrap(), "postgres://b:y@h/db");
        let not_utf8 = SqlConfig::from_url("postgres://u:%ff@h/db").unwrap_err();
        assert!(
            matches!(not_utf8, Error::InvalidArgument { .. }),
            "{not_utf8}"
        );
        let encoded = SqlConfig::from_url("mysql://r%40ot:p%40ss@h/db").unwrap();
        assert_eq!(encoded.username(), Some("r@ot"));
        assert_eq!(encoded.driver_url().unwrap(), "mysql://r%40ot:p%40ss@h/db");
        let lite = SqlConfig::from_url("sqlite://x.db")
            .unwrap()
            .with_credentials("u", "p");
        let err = lite.driver_url().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    }
}
