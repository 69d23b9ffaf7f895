//! What the etcd targets share: the conformance `Backend` over lock-etcd and the wait
//! for a fresh server.
#![allow(dead_code)] // each test target uses its part

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::{Backend, ClientOptions, HolderSpec};
use lock_core::backend::LockBackend;
use lock_core::{LockFamily, LockKey, LockProvider};
use lock_etcd::{EtcdBackend, EtcdConfig};

pub struct Etcd {
    /// `etcd`, `etcd+tls`, ...
    pub name: &'static str,
    pub url: String,
    /// For the fault hooks: a backend of its own, like an operator's.
    pub admin: EtcdBackend,
}

impl Etcd {
    fn config(&self) -> EtcdConfig {
        EtcdConfig::from_url(&self.url)
            .expect("valid URL")
            .with_connect_timeout(Duration::from_secs(2))
            .with_request_timeout(Duration::from_secs(2))
    }
}

#[async_trait]
impl Backend for Etcd {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(EtcdBackend::connect(self.config()).await?)
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        // Every lock of the namespace lives under `namespace/`; tokens are revisions,
        // so nothing stays by design.
        let options = lock_etcd::etcd_client::GetOptions::new()
            .with_prefix()
            .with_keys_only();
        let found = self
            .admin
            .client()
            .kv_client()
            .get(format!("{namespace}/"), Some(options))
            .await
            .map_err(|e| e.to_string())?;
        Ok(found
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect())
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        conformance_tests::revoked(self.admin.force_unlock(key, family).await)
    }

    fn holder_command(&self, spec: &HolderSpec) -> Option<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
        cmd.args(["--url", &self.url, "--namespace", &spec.namespace]);
        cmd.args(["--name", &spec.name]);
        cmd.args([
            "--watchdog-lease-ms",
            &spec.watchdog_lease.as_millis().to_string(),
        ]);
        Some(cmd)
    }

    /// etcd's TTLs are whole seconds and at least its minimum (about 2 s with the
    /// default election settings): a 600 ms lease would live 2 s on the server.
    fn short_lease(&self) -> Duration {
        Duration::from_secs(2)
    }

    /// etcd sweeps expired leases every 500 ms and the session lease outlives the
    /// watchdog lease by a third (rounded up to a second): a lock of a vanished holder
    /// comes free up to about 1.5 s after the lease the client asked for.
    fn slack(&self) -> Duration {
        Duration::from_secs(3)
    }
}

/// Waits until the fresh server has elected itself and serves requests.
pub async fn ready(url: &str) -> EtcdBackend {
    let started = tokio::time::Instant::now();
    loop {
        match EtcdBackend::connect_url(url).await {
            Ok(backend) => {
                let key = LockKey::new(
                    lock_core::Namespace::new("probe").unwrap(),
                    lock_core::LockName::new("probe").unwrap(),
                );
                if backend.is_locked(&key, LockFamily::Exclusive).await.is_ok() {
                    return backend;
                }
            }
            Err(err) if started.elapsed() > Duration::from_secs(30) => {
                panic!("etcd at {url} did not serve within 30 s: {err}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
