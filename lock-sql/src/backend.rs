//! [`SqlBackend`]: the lock-core backend over one database.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::{Capabilities, Error, LockFamily, LockInfo, LockKey, LockKind, Result};

use lock_core::backend::{AcquireRequest, Grant, HeldLease, LockBackend, Renewal};

use crate::advisory;
use crate::bells::{BellHold, Here};
use crate::config::{SqlConfig, Strategy};
use crate::db::Db;
use crate::dialect::Dialect;
use crate::holder_record;
use crate::key::KeyId;
use crate::lease::{self, Timing};
use crate::listen::Listener;
use crate::pessimistic::{self, Pinned};

/// What the backend keeps with each granted lease.
///
/// Opaque: lock-core hands it back on renewal and release. With
/// [`Strategy::ForUpdate`] it owns the connection whose transaction holds the row lock;
/// with [`Strategy::Session`], the connection whose session holds the advisory lock.
pub struct SqlLease {
    pub(crate) key: KeyId,
    pub(crate) pinned: Option<Pinned>,
    /// MariaDB's lease strategy: the lease's doorbell, freed as the lease row is
    /// deleted, or when the lease is dropped (see [`crate::bells`]).
    pub(crate) bell: Mutex<Option<BellHold>>,
}

impl SqlLease {
    pub(crate) fn lease(key: KeyId, bell: Option<BellHold>) -> Self {
        SqlLease {
            key,
            pinned: None,
            bell: Mutex::new(bell),
        }
    }

    /// A lease held by a pinned connection.
    pub(crate) fn pinned(key: KeyId, pinned: Pinned) -> Self {
        SqlLease {
            key,
            pinned: Some(pinned),
            bell: Mutex::new(None),
        }
    }

    /// Frees the lease's doorbell, if it has one: its row is being deleted. Gives back
    /// the mark of the lease as this process's, to drop once the row is gone.
    pub(crate) fn ring(&self) -> Option<Here> {
        let bell = self
            .bell
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        bell.and_then(BellHold::free)
    }
}

impl fmt::Debug for SqlLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLease")
            .field("key", &self.key.hash)
            .field("pinned", &self.pinned.is_some())
            .field("bell", &self.bell)
            .finish()
    }
}

#[derive(Debug)]
struct Inner {
    db: Arc<Db>,
    listener: Option<Arc<Listener>>,
    strategy: Strategy,
    timing: Timing,
    table_prefix: String,
}

/// Distributed locks in PostgreSQL, MySQL/MariaDB or SQLite.
///
/// Make one with [`SqlBackend::connect`] and hand it to a
/// [`LockClient`](lock_core::LockClient). Cloning is cheap and shares the pool.
///
/// ```no_run
/// use lock_core::{prelude::*, LockClient};
/// use lock_sql::{SqlBackend, SqlConfig};
///
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// let backend = SqlBackend::connect(SqlConfig::from_url("postgres://locks@127.0.0.1/app")?).await?;
/// let client = LockClient::new(backend);
/// let guard = client.lock("nightly-report")?.acquire().await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqlBackend {
    inner: Arc<Inner>,
}

impl fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlBackend")
            .field("dialect", &self.inner.db.dialect)
            .field("strategy", &self.inner.strategy)
            .field("table_prefix", &self.inner.table_prefix)
            .finish()
    }
}

impl SqlBackend {
    /// Checks the settings, connects, and creates the tables if they are missing.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad URL or option, or for tables used with the
    /// other [`Strategy`]; [`Error::Unsupported`] for
    /// [`Strategy::ForUpdate`] on SQLite; [`Error::Unavailable`] if the database
    /// cannot be reached within the connect timeout; [`Error::Backend`] if the tables
    /// exist with a newer schema version.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future closes what it opened.
    pub async fn connect(options: SqlConfig) -> Result<Self> {
        options.validate()?;
        let mut url = crate::url::parse(&options.driver_url()?)?;
        url.driver_url = crate::tls::with_tls(&url.driver_url, url.dialect, options.tls.as_ref())?;
        if url.dialect == Dialect::Sqlite {
            match options.strategy {
                Strategy::Lease => {}
                Strategy::ForUpdate => {
                    return Err(Error::Unsupported {
                        backend: "sqlite",
                        operation:
                            "the FOR UPDATE strategy (SQLite has no row locks; use Strategy::Lease)",
                    })
                }
                Strategy::Session => return Err(Error::Unsupported {
                    backend: "sqlite",
                    operation:
                        "the session strategy (SQLite has no advisory locks; use Strategy::Lease)",
                }),
            }
        }
        let db = Arc::new(Db::connect(&options, url).await?);
        let listener = match (db.dialect, options.strategy) {
            (Dialect::Postgres, Strategy::Lease) => Some(Listener::new(
                &db.url.driver_url,
                &db.sql.tables.channel,
                options.connect_timeout,
            )),
            _ => None,
        };
        Ok(SqlBackend {
            inner: Arc::new(Inner {
                db,
                listener,
                strategy: options.strategy,
                timing: Timing {
                    poll_min: options.poll_min,
                    poll_max: options.poll_max,
                    queue_ttl: options.queue_ttl,
                },
                table_prefix: options.table_prefix.clone(),
            }),
        })
    }

    /// [`connect`](Self::connect) with every setting the URL gives
    /// ([`SqlConfig::from_url`]: strategy, table prefix, pool, timeouts, TLS, ...),
    /// the rest default. An unknown URL key is an error.
    ///
    /// # Errors
    /// As for [`connect`](Self::connect) and [`SqlConfig::from_url`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(SqlConfig::from_url(url)?).await
    }

    /// Which database this is.
    pub fn dialect(&self) -> Dialect {
        self.inner.db.dialect
    }

    /// How locks are held.
    pub fn strategy(&self) -> Strategy {
        self.inner.strategy
    }

    /// The prefix of this backend's tables.
    pub fn table_prefix(&self) -> &str {
        &self.inner.table_prefix
    }

    /// The connection pool, to run your own statements in the same database (for
    /// example to inspect the lock tables). On PostgreSQL and MariaDB the server ends a
    /// transaction on it left idle for three request timeouts (at least 1 s; see
    /// [`SqlConfig::with_request_timeout`](crate::SqlConfig::with_request_timeout)):
    /// keep longer transactions on a pool of your own, or lift the limit for one
    /// (`SET LOCAL idle_in_transaction_session_timeout = 0` on PostgreSQL).
    pub fn pool(&self) -> &sqlx::AnyPool {
        &self.inner.db.pool
    }
}

impl LockBackend for SqlBackend {
    type Lease = SqlLease;

    fn name(&self) -> &'static str {
        self.inner.db.name()
    }

    fn location(&self) -> String {
        self.inner.db.scope.clone()
    }

    fn lease_validity(&self, ttl: Duration) -> Duration {
        match (self.inner.strategy, self.inner.db.dialect) {
            (Strategy::Session, Dialect::MySql) => {
                ttl.min(crate::server_limits::LONGEST_MYSQL_LIMIT)
            }
            (Strategy::Session | Strategy::ForUpdate, Dialect::Postgres) => {
                ttl.min(crate::server_limits::LONGEST_POSTGRES_LIMIT)
            }
            _ => ttl,
        }
    }

    async fn settle(&self) {
        // Nothing is left outside the pool once the client is done.
        self.inner.db.spare.give_back();
        self.inner.db.cleanups.settled().await;
    }

    fn capabilities(&self) -> Capabilities {
        match self.inner.strategy {
            Strategy::Lease => Capabilities::ALL.with_loss_notice(false),
            // `inspect` names a row lock's holder by owner and token only (no
            // description); one holder at a time, broken by `force_unlock`. A fixed
            // lease is the server's silence limit left to run out.
            Strategy::ForUpdate => Capabilities::ALL
                .with_inspect(false)
                .with_loss_notice(false)
                .with_fair(false)
                .with_read_write(false)
                .with_semaphore(false)
                .with_election(false),
            // `inspect` says whether it is held, not by whom: the server knows only the
            // connection.
            Strategy::Session => Capabilities::ALL
                .with_inspect(false)
                .with_loss_notice(false)
                .with_fair(advisory::supports(self.inner.db.dialect, LockKind::Fair))
                .with_read_write(false)
                .with_semaphore(false)
                .with_election(false),
        }
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<SqlLease>>> {
        let inner = &self.inner;
        match inner.strategy {
            Strategy::Lease => {
                lease::acquire(&inner.db, inner.listener.as_ref(), inner.timing, req).await
            }
            Strategy::ForUpdate => pessimistic::acquire(&inner.db, req).await,
            Strategy::Session => advisory::acquire(&inner.db, req).await,
        }
    }

    async fn release(&self, lease: &HeldLease<SqlLease>) -> Result<()> {
        let db = &self.inner.db;
        match (&lease.data.pinned, self.inner.strategy) {
            (None, _) => lease::release(db, lease).await,
            (Some(pinned), Strategy::Session) => advisory::release(db, lease, pinned).await,
            (Some(pinned), _) => pessimistic::release(db, lease, pinned).await,
        }
    }

    async fn renew(&self, leases: &[&HeldLease<SqlLease>], ttl: Duration) -> Result<Vec<Renewal>> {
        let db = &self.inner.db;
        match self.inner.strategy {
            Strategy::Lease => lease::renew(db, leases, ttl).await,
            Strategy::ForUpdate => {
                let limit = pessimistic::silence_limit(db.dialect, ttl);
                pessimistic::renew(db, leases, limit).await
            }
            Strategy::Session => {
                let limit = advisory::silence_limit(db.dialect, ttl);
                pessimistic::renew(db, leases, limit).await
            }
        }
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        let key = KeyId::of(key);
        match self.inner.strategy {
            Strategy::Lease => lease::is_locked(&self.inner.db, &key, family).await,
            Strategy::ForUpdate => pessimistic::is_locked(&self.inner.db, &key, family).await,
            Strategy::Session => advisory::is_locked(&self.inner.db, &key, family).await,
        }
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        let key = KeyId::of(key);
        match self.inner.strategy {
            Strategy::Lease => lease::force_unlock(&self.inner.db, &key, family).await,
            Strategy::ForUpdate => pessimistic::force_unlock(&self.inner.db, &key, family).await,
            Strategy::Session => advisory::force_unlock(&self.inner.db, &key, family).await,
        }
    }

    async fn force_unlock_holder(
        &self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> Result<bool> {
        match self.inner.strategy {
            Strategy::Lease => {
                lease::force_unlock_holder(&self.inner.db, &KeyId::of(key), family, fence).await
            }
            Strategy::ForUpdate | Strategy::Session => Err(Error::Unsupported {
                backend: self.name(),
                operation: "force-unlocking one holder with a connection-held strategy",
            }),
        }
    }

    async fn proclaim(&self, lease: &HeldLease<SqlLease>, value: &str) -> Result<()> {
        match &lease.data.pinned {
            None => lease::proclaim(&self.inner.db, lease, value).await,
            Some(_) => Err(Error::Unsupported {
                backend: self.name(),
                operation: "elections with a connection-held strategy",
            }),
        }
    }

    async fn inspect(&self, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
        match self.inner.strategy {
            Strategy::Lease => lease::inspect(&self.inner.db, &KeyId::of(key), family).await,
            Strategy::ForUpdate => {
                holder_record::inspect(&self.inner.db, &KeyId::of(key), family).await
            }
            Strategy::Session => advisory::inspect(&self.inner.db, &KeyId::of(key), family).await,
        }
    }
}
