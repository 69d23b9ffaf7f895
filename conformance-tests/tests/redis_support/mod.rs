//! What the Redis suites share: the keys a namespace leaves, and the single-primary
//! backend (one server, or the primary Sentinel names).
#![allow(dead_code)] // each test target uses its part

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::server::redis_cluster::ClusterDeployment;
use conformance_tests::server::sentinel::SentinelDeployment;
use conformance_tests::{Backend, ClientOptions, HolderSpec};
use lock_core::backend::LockBackend;
use lock_core::{DistributedLockExt, LockClient, LockFamily, LockKey, LockProvider};
use lock_redis::{redis, RedLockBackend, RedisBackend, RedisConfig};
use tokio::time::Instant;

/// Every key of `namespace` on the server at `url` but the fencing counters, which stay
/// by design, and the release receipts, which expire on their own a few seconds after
/// the lease they freed would have: the exclusive lock's bare key `ns:name` and the
/// `{ns:name}:...` keys.
pub async fn leftovers(url: &str, namespace: &str) -> Result<Vec<String>, String> {
    let client = plain_client(url)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let mut left = Vec::new();
    for pattern in [format!("{namespace}:*"), format!("{{{namespace}:*")] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        left.extend(
            keys.into_iter()
                .filter(|k| !k.ends_with("}:fence") && !k.contains("}:released:")),
        );
    }
    Ok(left)
}

/// A client of redis-rs itself for the server at `url`; for the TLS test server
/// (`tls_*` settings in the URL), one that trusts the test CA and presents the client
/// certificate.
pub fn plain_client(url: &str) -> Result<redis::Client, String> {
    let Some((base, _settings)) = url.split_once('?') else {
        return redis::Client::open(url).map_err(|e| e.to_string());
    };
    tls_client(base)
}

#[cfg(feature = "tls")]
fn tls_client(base: &str) -> Result<redis::Client, String> {
    let certs = conformance_tests::server::tls::test_certs();
    let read =
        |path: std::path::PathBuf| std::fs::read(&path).map_err(|e| format!("{path:?}: {e}"));
    let tls = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: read(certs.client_cert())?,
            client_key: read(certs.client_key())?,
        }),
        root_cert: Some(read(certs.ca())?),
    };
    redis::Client::build_with_tls(base, tls).map_err(|e| e.to_string())
}

#[cfg(not(feature = "tls"))]
fn tls_client(base: &str) -> Result<redis::Client, String> {
    Err(format!("{base} with TLS settings needs the `tls` feature"))
}

/// Where the suite looks for leftover keys.
pub enum Inspect {
    /// The one server.
    Url(String),
    /// Whichever node the sentinels name as primary now.
    Sentinel(Arc<SentinelDeployment>),
    /// Every primary of the cluster.
    Cluster(Arc<ClusterDeployment>),
}

/// A Redis deployment with one primary, under test.
pub struct Redis {
    name: &'static str,
    inspect: Inspect,
    /// What clients (and the holder process) connect to.
    url: String,
    /// For the fault hooks: a backend of its own, like an operator's.
    admin: RedisBackend,
}

impl Redis {
    pub fn new(name: &'static str, inspect: Inspect, url: String) -> Self {
        let admin =
            RedisBackend::new(RedisConfig::from_url(&url).expect("valid URL")).expect("a backend");
        Redis {
            name,
            inspect,
            url,
            admin,
        }
    }

    pub fn config(&self) -> RedisConfig {
        RedisConfig::from_url(&self.url)
            .expect("valid URL")
            .with_connect_timeout(Duration::from_secs(1))
            .with_request_timeout(Duration::from_secs(1))
            .with_waiter_lease(Duration::from_secs(1))
    }
}

#[async_trait]
impl Backend for Redis {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(RedisBackend::new(self.config())?)
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        match &self.inspect {
            Inspect::Url(url) => leftovers(url, namespace).await,
            Inspect::Sentinel(deployment) => {
                let primary = deployment.primary_port().await?;
                leftovers(&SentinelDeployment::node_url(primary), namespace).await
            }
            Inspect::Cluster(cluster) => {
                let mut left = Vec::new();
                for primary in cluster.primaries().await? {
                    let url = SentinelDeployment::node_url(primary);
                    left.extend(leftovers(&url, namespace).await?);
                }
                Ok(left)
            }
        }
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        conformance_tests::revoked(self.admin.force_unlock(key, family).await)
    }

    fn holder_command(&self, spec: &HolderSpec) -> Option<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
        cmd.args([
            "--url",
            &self.url,
            "--namespace",
            &spec.namespace,
            "--name",
            &spec.name,
        ]);
        cmd.args([
            "--watchdog-lease-ms",
            &spec.watchdog_lease.as_millis().to_string(),
        ]);
        Some(cmd)
    }
}

pub fn config(url: &str) -> RedisConfig {
    RedisConfig::from_url(url)
        .expect("valid settings")
        .with_connect_timeout(Duration::from_secs(1))
        .with_request_timeout(Duration::from_secs(1))
        .with_failover_grace(Duration::from_secs(60))
}

pub fn client(config: RedisConfig, namespace: &str) -> LockClient<RedisBackend> {
    let backend = RedisBackend::new(config).expect("backend");
    LockClient::builder(backend)
        .namespace(namespace)
        // Long enough to outlast a failover, so the lease is kept across it.
        .watchdog_lease(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// One client holds a lock and another waits for it while `fault` replaces the node
/// that serves it (and returns what it did, for the report). The holder must keep the
/// lock on the new node (its key was replicated) or be told it lost it; the waiter must
/// never get it while the holder still holds it, and must get it once the holder lets
/// go.
pub async fn holder_and_waiter_across<F, Fut>(url: &str, name: &str, fault: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let namespace = format!("failover-{}", std::process::id());
    let holder = client(config(url), &namespace);
    let waiter = client(config(url), &namespace);
    let held = holder.lock(name).unwrap().acquire().await.expect("acquire");
    let first_token = held.fencing_token();
    let waiter_name = name.to_owned();
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock(&waiter_name).unwrap();
        let guard = lock.acquire_timeout(Duration::from_secs(90)).await;
        (guard, Instant::now(), waiter)
    });
    // Let the waiter subscribe and block behind the holder before the fault.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the waiter got a held lock");

    let fault_at = Instant::now();
    let what = fault().await;
    let failover_took = fault_at.elapsed();

    // Over more than one renewal period on the new node, the holder either keeps its
    // lease or is told it is gone.
    let lost = tokio::select! {
        loss = held.lost() => Some(loss),
        () = tokio::time::sleep(Duration::from_secs(5)) => None,
    };
    let released_at = Instant::now();
    match &lost {
        None => {
            if waiting.is_finished() {
                let (outcome, _, _) = waiting.await.expect("the waiter task");
                panic!("the waiter ended while the holder still held the lock: {outcome:?}");
            }
            assert!(held.is_held());
            held.release().await.expect("release on the new node");
        }
        Some(loss) => println!("the holder was told its lease was lost: {loss:?}"),
    }
    let (guard, got_at, _waiter) = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiter finishes")
        .expect("the waiter task");
    let guard = guard.expect("the waiter gets the lock after the failover");
    assert!(guard.fencing_token() > first_token);
    println!(
        "{what}: took {failover_took:?}; the holder {}; the waiter got the lock {:?} after \
         the holder let go",
        if lost.is_some() {
            "was told of the loss"
        } else {
            "kept its lease"
        },
        got_at.saturating_duration_since(released_at)
    );
    guard.release().await.expect("release");
}

/// RedLock over several masters: the exclusive-lock cases (fair and read-write locks
/// are not offered on RedLock, so the suite skips them).
pub struct RedLock {
    urls: Vec<String>,
    admin: RedLockBackend,
}

impl RedLock {
    /// RedLock over the masters at `urls`.
    pub fn new(urls: Vec<String>) -> Self {
        let admin = RedLockBackend::from_urls(&urls).expect("valid URLs");
        RedLock { urls, admin }
    }

    fn backend(&self) -> lock_core::Result<RedLockBackend> {
        RedLockBackend::new(self.urls.iter().map(|url| {
            RedisConfig::from_url(url)
                .expect("valid URL")
                .with_connect_timeout(Duration::from_secs(1))
                .with_request_timeout(Duration::from_secs(1))
        }))
    }
}

#[async_trait]
impl Backend for RedLock {
    fn name(&self) -> &str {
        "redlock"
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(self.backend()?)
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        let mut left = Vec::new();
        for url in &self.urls {
            let keys = leftovers(url, namespace).await?;
            left.extend(keys.into_iter().map(|k| format!("{url} {k}")));
        }
        Ok(left)
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        conformance_tests::revoked(self.admin.force_unlock(key, family).await)
    }
}
