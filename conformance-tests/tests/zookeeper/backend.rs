//! The conformance `Backend` over lock-zookeeper, shared by the ZooKeeper targets.
#![allow(dead_code)] // each target uses its part

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::{Backend, ClientOptions, HolderSpec};
use lock_core::backend::LockBackend;
use lock_core::{LockFamily, LockKey, LockProvider};
use lock_zookeeper::{ZkBackend, ZkConfig};

/// The session timeout of the suite's clients: long enough that a loaded machine never
/// expires a live client, short enough not to matter.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

pub struct Zk {
    /// `zookeeper`, `zookeeper+tls`.
    pub name: &'static str,
    pub url: String,
    /// The server's process, to pause it (none for a server from the environment).
    pub server: Option<conformance_tests::server::Freezer>,
    /// A client of its own for the fault hook, as an operator's would be.
    pub operator: ZkBackend,
}

impl Zk {
    /// The URL of a client whose session times out after `session`.
    pub fn url_with_session(&self, session: Duration) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}session_timeout_ms={}&connect_timeout_ms=10000",
            self.url,
            session.as_millis()
        )
    }

    pub fn config(&self, session: Duration) -> ZkConfig {
        ZkConfig::from_url(&self.url_with_session(session)).expect("valid url")
    }
}

#[async_trait]
impl Backend for Zk {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        // Each client is a session of its own, as another process's would be.
        options.client(ZkBackend::new(self.config(SESSION_TIMEOUT)).expect("valid settings"))
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        // Contender nodes are ephemeral; the persistent (container) nodes above them
        // are reaped by the server once empty, so only ephemerals count.
        let raw = self
            .operator
            .zookeeper_client()
            .await
            .map_err(|e| e.to_string())?;
        let mut left = Vec::new();
        let mut dirs = vec![format!("/{namespace}")];
        while let Some(dir) = dirs.pop() {
            let children = match raw.list_children(&dir).await {
                Ok(children) => children,
                Err(lock_zookeeper::zookeeper_client::Error::NoNode) => continue,
                Err(err) => return Err(format!("list {dir}: {err}")),
            };
            for child in children {
                let path = format!("{dir}/{child}");
                match raw.check_stat(&path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner != 0 => left.push(path),
                    Ok(Some(_)) => dirs.push(path),
                    Ok(None) => {}
                    Err(err) => return Err(format!("stat {path}: {err}")),
                }
            }
        }
        Ok(left)
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        // Deletes the holders' nodes, as an operator would.
        conformance_tests::revoked(self.operator.force_unlock(key, family).await)
    }

    fn holder_command(&self, spec: &HolderSpec) -> Option<tokio::process::Command> {
        // The holder's session is its lease: it times out after the watchdog lease the
        // case allows for, so the lock is free within that lease plus slack.
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
        command
            .arg("--url")
            .arg(self.url_with_session(spec.watchdog_lease))
            .args(["--namespace", &spec.namespace, "--name", &spec.name])
            .arg("--watchdog-lease-ms")
            .arg(spec.watchdog_lease.as_millis().to_string());
        Some(command)
    }

    fn slack(&self) -> Duration {
        // The server expires sessions on tick boundaries and is a JVM on a shared
        // 2-core machine: a little more room than the default 2 s.
        Duration::from_secs(3)
    }
}
