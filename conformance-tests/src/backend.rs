//! What a backend's test supplies to the suite.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::LockBackend;
use lock_core::{LockClient, LockFamily, LockKey, LockProvider};

/// The settings of one client made for a test.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The namespace (each test gets a fresh one).
    pub namespace: String,
    /// The watchdog lease.
    pub watchdog_lease: Duration,
    /// What the client says about itself beside its leases (the default if `None`).
    pub holder_description: Option<String>,
}

impl ClientOptions {
    /// A client over `backend` with these options, as [`Backend::client`] returns it.
    ///
    /// # Errors
    /// [`lock_core::Error::InvalidArgument`] for a bad namespace or watchdog lease.
    pub fn client<B: LockBackend>(self, backend: B) -> lock_core::Result<Arc<dyn LockProvider>> {
        Ok(Arc::new(self.builder(backend).build()?))
    }

    /// Checks these options as [`client`](Self::client) would, without a backend: for
    /// a backend that must not connect for options it would refuse.
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub fn check(&self) -> lock_core::Result<()> {
        self.clone()
            .builder(lock_core::memory::MemoryBackend::new())
            .build()
            .map(drop)
    }

    fn builder<B: LockBackend>(self, backend: B) -> lock_core::LockClientBuilder<B> {
        let builder = LockClient::builder(backend)
            .namespace(self.namespace)
            .watchdog_lease(self.watchdog_lease);
        match self.holder_description {
            Some(description) => builder.holder_description(description),
            None => builder,
        }
    }
}

/// What to start in another process: a holder of one lock.
#[derive(Clone, Debug)]
pub struct HolderSpec {
    /// The namespace.
    pub namespace: String,
    /// The lock's name.
    pub name: String,
    /// The holder's watchdog lease: how long after the kill the lock must be free.
    pub watchdog_lease: Duration,
}

/// What [`Backend::revoke`] answers for an operator's force-unlock that ended with
/// `forced` (how many it removed is of no interest to the fault cases).
///
/// # Errors
/// The force-unlock's error, as text.
pub fn revoked<T>(forced: lock_core::Result<T>) -> Result<(), String> {
    forced.map(drop).map_err(|e| e.to_string())
}

/// A backend under test.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The backend's name in the report.
    fn name(&self) -> &str;

    /// A new client: its own connection or session and its own watchdog, as a
    /// separate process would have.
    ///
    /// # Errors
    /// Whatever making the client fails with; an invalid namespace or watchdog lease
    /// must give [`lock_core::Error::InvalidArgument`].
    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>>;

    /// Fault hook: makes every lease of `family` on `key` vanish behind its holders'
    /// backs, the way an operator, a failover or a server restart would (delete the
    /// key, the node, the row).
    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String>;

    /// Inspection hook: what the server still keeps for locks of `namespace`, one line
    /// per thing (a lock key, a queue place, a node, a row), leaving out only what stays
    /// by design (fencing counters, empty parent nodes the server reaps). Empty once
    /// every lock of the namespace is released and no one waits.
    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String>;

    /// Fault hook: the command that starts a process holding the lock in `spec`
    /// (normally the `lock-holder` binary pointed at this backend's server). `None`
    /// if this backend cannot be shared across processes.
    fn holder_command(&self, spec: &HolderSpec) -> Option<tokio::process::Command> {
        let _ = spec;
        None
    }

    /// A fixed lease short enough for tests to wait out, long enough that a loaded
    /// machine still acquires and checks well within it.
    fn short_lease(&self) -> Duration {
        Duration::from_millis(600)
    }

    /// How late an event may come beyond what the semantics promise (a lease's end,
    /// a wait limit, a wake-up): generous, so tests do not flake on a busy machine.
    fn slack(&self) -> Duration {
        Duration::from_secs(2)
    }
}
