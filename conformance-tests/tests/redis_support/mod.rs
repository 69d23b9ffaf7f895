//! What the Redis suites share: the keys a namespace leaves, and the single-primary
//! backend (one server, or the primary Sentinel names).
#![allow(dead_code)] // each test target uses its part

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::server::sentinel::SentinelDeployment;
use conformance_tests::{Backend, ClientOptions, HolderSpec};
use lock_core::{LockBackend, LockFamily, LockKey, LockProvider};
use lock_redis::{redis, RedisBackend, RedisConfig};

/// Every key of `namespace` on the server at `url` but the fencing counters, which stay
/// by design: the exclusive lock's bare key `ns:name` and the `{ns:name}:...` keys.
pub async fn leftovers(url: &str, namespace: &str) -> Result<Vec<String>, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
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
        left.extend(keys.into_iter().filter(|k| !k.ends_with("}:fence")));
    }
    Ok(left)
}

/// Where the suite looks for leftover keys.
pub enum Inspect {
    /// The one server.
    Url(String),
    /// Whichever node the sentinels name as primary now.
    Sentinel(Arc<SentinelDeployment>),
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
        RedisConfig::builder(&self.url)
            .connect_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_secs(1))
            .waiter_lease(Duration::from_secs(1))
            .build()
            .expect("valid URL")
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
        }
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        self.admin
            .force_unlock(key, family)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
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
