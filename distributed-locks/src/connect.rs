//! Opening a backend from a URL.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockClient, LockProvider, Result, DEFAULT_WATCHDOG_LEASE};

/// The URL schemes [`connect`] understands with the features this build has.
pub fn schemes() -> Vec<&'static str> {
    // Without backend features nothing is added.
    #[allow(unused_mut)]
    let mut schemes = vec!["memory"];
    #[cfg(feature = "redis")]
    schemes.extend([
        "redis",
        "rediss",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
        "redlock",
    ]);
    #[cfg(feature = "zookeeper")]
    schemes.extend(["zk", "zk+tls"]);
    #[cfg(feature = "postgres")]
    schemes.extend(["postgres", "postgresql"]);
    #[cfg(feature = "mysql")]
    schemes.extend(["mysql", "mariadb"]);
    #[cfg(feature = "sqlite")]
    schemes.push("sqlite");
    #[cfg(feature = "etcd")]
    schemes.extend(["etcd", "etcd+https"]);
    schemes
}

/// Client settings that every backend shares.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    namespace: Option<String>,
    watchdog_lease: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            namespace: None,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
        }
    }
}

impl ConnectOptions {
    /// The prefix of every lock (default [`DEFAULT_NAMESPACE`](lock_core::DEFAULT_NAMESPACE)).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The lease the watchdog keeps (default 30 s), renewed every third of it.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    fn client<B: lock_core::backend::LockBackend>(
        &self,
        backend: B,
    ) -> Result<Arc<dyn LockProvider>> {
        let mut builder = LockClient::builder(backend).watchdog_lease(self.watchdog_lease);
        if let Some(ns) = &self.namespace {
            builder = builder.namespace(ns.clone());
        }
        Ok(Arc::new(builder.build()?))
    }
}

/// Opens the backend `url` names and returns a lock client for it.
///
/// | scheme | backend | feature |
/// |---|---|---|
/// | `memory://` | a new in-memory backend (this process only) | always |
/// | `redis://`, `rediss://` | one Redis server (`lock_redis::RedisBackend`) | `redis` |
/// | `redis+sentinel://host:port,host:port/service[/db]`, `rediss+sentinel://...` | the primary Redis Sentinel names for `service`, followed across failovers (`lock_redis::RedisBackend`) | `redis` (and `tls`) |
/// | `redis+cluster://host:port,host:port`, `rediss+cluster://...` | a Redis Cluster, found through any listed node (`lock_redis::RedisBackend`) | `redis` (and `tls`) |
/// | `redlock://host:port,host:port,...[/db]` | RedLock over independent Redis masters (`lock_redis::RedLockBackend`, exclusive locks only; user, password and `/db` apply to every master) | `redis` |
/// | `zk://`, `zk+tls://` | a ZooKeeper ensemble (`lock_zookeeper::ZkBackend`, URL as `ZkConfig::from_url`) | `zookeeper` (and `tls`) |
/// | `postgres://`, `postgresql://` | PostgreSQL (`lock_sql::SqlBackend`, URL as `SqlConfig::from_url`: `?lock_strategy=for-update` picks row locks, `session` advisory locks) | `postgres` or `sql` |
/// | `mysql://`, `mariadb://` | MySQL or MariaDB (the same) | `mysql` or `sql` |
/// | `sqlite://path` | an SQLite file (the same) | `sqlite` or `sql` |
/// | `etcd://host:port[,host:port...]`, `etcd+https://...` | an etcd v3 cluster (`lock_etcd::EtcdBackend`) | `etcd` |
///
/// # Errors
/// [`Error::InvalidArgument`] for a malformed URL or a scheme this build lacks (the
/// message lists the ones it has); [`Error::Unavailable`] if the server cannot be
/// reached within the backend's connect timeout.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops any half-open connection.
pub async fn connect(url: &str, options: ConnectOptions) -> Result<Arc<dyn LockProvider>> {
    let Some((scheme, _rest)) = url.split_once("://") else {
        return Err(Error::invalid_argument(format!(
            "{url:?} is not a URL: expected <scheme>://..., with a scheme among {:?}",
            schemes()
        )));
    };
    match scheme {
        "memory" => options.client(lock_core::memory::MemoryBackend::new()),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+sentinel" | "rediss+sentinel" | "redis+cluster"
        | "rediss+cluster" => {
            let config = lock_redis::RedisConfig::from_url(url)?;
            options.client(lock_redis::RedisBackend::connect(config).await?)
        }
        #[cfg(feature = "redis")]
        "redlock" => {
            let masters = redlock_masters(url)?;
            options.client(lock_redis::RedLockBackend::from_urls(masters)?)
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zk+tls" => {
            let config = lock_zookeeper::ZkConfig::from_url(url)?;
            options.client(lock_zookeeper::ZkBackend::connect(config).await?)
        }
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => connect_sql(url, &options).await,
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => connect_sql(url, &options).await,
        #[cfg(feature = "sqlite")]
        "sqlite" => connect_sql(url, &options).await,
        #[cfg(feature = "etcd")]
        "etcd" | "etcd+https" => {
            let config = lock_etcd::EtcdConfig::from_url(url)?;
            options.client(lock_etcd::EtcdBackend::connect(config).await?)
        }
        other => Err(Error::invalid_argument(format!(
            "unknown or disabled lock backend {other:?}: this build supports {:?} (enable the crate feature of the backend)", schemes()
        ))),
    }
}

/// A database's client (`postgres://`, `mysql://`, `sqlite://`).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
async fn connect_sql(url: &str, options: &ConnectOptions) -> Result<Arc<dyn LockProvider>> {
    let sql = lock_sql::SqlConfig::from_url(url)?;
    options.client(lock_sql::SqlBackend::connect(sql).await?)
}

/// The `redis://` URL of each master a `redlock://` URL names.
#[cfg(feature = "redis")]
fn redlock_masters(url: &str) -> Result<Vec<String>> {
    let rest = url.strip_prefix("redlock://").unwrap_or(url);
    let (authority, suffix) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let masters: Vec<String> = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("redis://{userinfo}{host}{suffix}"))
        .collect();
    if masters.is_empty() {
        return Err(Error::invalid_argument(format!(
            "{url:?} names no Redis master: expected redlock://host:port,host:port,..."
        )));
    }
    Ok(masters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "redis")]
    #[test]
    fn redlock_urls_name_each_master() {
        assert_eq!(
            redlock_masters("redlock://a:1,b:2,c:3").unwrap(),
            ["redis://a:1", "redis://b:2", "redis://c:3"]
        );
        assert_eq!(
            redlock_masters("redlock://u:p@a:1,b:2/3").unwrap(),
            ["redis://u:p@a:1/3", "redis://u:p@b:2/3"]
        );
        assert!(matches!(
            redlock_masters("redlock://"),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[tokio::test]
    async fn bad_urls_are_refused_clearly() {
        for (url, words) in [
            ("redis-without-scheme", "not a URL"),
            ("nosuch://x", "unknown or disabled"),
            ("", "not a URL"),
        ] {
            let err = connect(url, ConnectOptions::default()).await.unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{url}: {err}");
            assert!(err.to_string().contains(words), "{url}: {err}");
        }
        let err = connect("memory://", ConnectOptions::default().namespace("bad\u{7}"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }));
    }
}
