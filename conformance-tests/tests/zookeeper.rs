//! The whole conformance suite against a real ZooKeeper, then the ZooKeeper-specific
//! checks (session expiry, cancel safety, Curator interop, no herd, errors), all on
//! one server started here from Debian's jar.

#[path = "zookeeper/checks.rs"]
mod checks;
#[path = "zookeeper/faults.rs"]
mod faults;
#[path = "zookeeper/server.rs"]
mod server;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance_tests::checker::{self, Budget};
use conformance_tests::server::TestServer;
use conformance_tests::{run_suite, Backend, ClientOptions, HolderSpec};
use futures::FutureExt;
use lock_core::backend::LockBackend;
use lock_core::{LockFamily, LockKey, LockProvider};
use lock_zookeeper::{ZkBackend, ZkConfig};
use tokio::time::Instant;

/// The session timeout of the suite's clients: long enough that a loaded machine never
/// expires a live client, short enough not to matter.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

pub struct Zk {
    url: String,
    /// The server's process, to pause it (none for a server from the environment).
    pub server: Option<conformance_tests::server::Freezer>,
    /// A client of its own for the fault hook, as an operator's would be.
    operator: ZkBackend,
}

impl Zk {
    /// The URL of a client whose session times out after `session`.
    pub fn url_with_session(&self, session: Duration) -> String {
        format!(
            "{}?session_timeout_ms={}&connect_timeout_ms=10000",
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
        "zookeeper"
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        // Each client is a session of its own, as another process's would be.
        options.client(ZkBackend::new(self.config(SESSION_TIMEOUT)))
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
        self.operator
            .force_unlock(key, family)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_conformance() {
    let started = Instant::now();
    let mut server = TestServer::start(&server::ZOOKEEPER)
        .await
        .unwrap_or_else(|err| panic!("zookeeper did not start: {err}"));
    let listening = started.elapsed();
    let url = server.url();
    let freezer = server.freezer();
    if let Some(process) = server.process() {
        server::wait_serving(process.port(), Duration::from_secs(30))
            .await
            .unwrap_or_else(|err| panic!("{err}; log:\n{}", process.log_tail()));
    }
    let serving = started.elapsed();
    let operator = ZkBackend::connect_url(&format!("{url}?connect_timeout_ms=30000"))
        .await
        .expect("first session");
    println!(
        "zookeeper: start-up {:.0?} to an open port, {:.0?} to serving, first session at {:.0?}",
        listening,
        serving,
        started.elapsed()
    );
    let zk = Arc::new(Zk {
        url,
        server: freezer,
        operator,
    });

    let report = run_suite(zk.clone()).await;
    if std::env::var_os("LOCK_TEST_CASES").is_none() {
        assert!(report.passed.len() >= 50, "{}", report.summary());
    }

    let mut failed = Vec::new();
    for (name, check) in checks::all() {
        if std::env::var("LOCK_TEST_CASES").is_ok_and(|f| !f.split(',').any(|p| name.contains(p))) {
            continue;
        }
        let began = Instant::now();
        match AssertUnwindSafe(check(zk.clone())).catch_unwind().await {
            Ok(()) => println!("zookeeper PASS {name} ({:.2?})", began.elapsed()),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("zookeeper FAIL {name}: {message}");
                failed.push(name);
            }
        }
    }
    assert!(failed.is_empty(), "zookeeper checks failed: {failed:?}");
    checker::check(zk, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
    drop(server);
}
