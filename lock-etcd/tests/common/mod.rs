//! A real etcd for these tests, through the shared server harness: free loopback
//! ports, a temporary data directory, stopped by PID when dropped.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use conformance_tests::server::{free_port, ServerSpec, TestServer};
use lock_core::{LockBackend, LockFamily, LockKey, LockName, Namespace};
use lock_etcd::{EtcdBackend, EtcdConfig};

pub const ETCD: ServerSpec = ServerSpec {
    name: "etcd",
    env_url: "LOCK_TEST_ETCD_URL",
    command: etcd_command,
    url: |port| format!("etcd://127.0.0.1:{port}"),
};

/// Every etcd URL on loopback; the peer port too, or it would default to 2380.
fn etcd_command(port: u16, dir: &Path) -> Command {
    let peer = free_port().expect("a free peer port");
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut cmd = Command::new("etcd");
    cmd.arg("--data-dir").arg(dir.join("data"));
    cmd.args([
        "--name",
        "lock-etcd-test",
        "--logger",
        "zap",
        "--log-level",
        "warn",
    ]);
    cmd.args(["--listen-client-urls", &client_url]);
    cmd.args(["--advertise-client-urls", &client_url]);
    cmd.args(["--listen-peer-urls", &peer_url]);
    cmd.args(["--initial-advertise-peer-urls", &peer_url]);
    cmd.args(["--initial-cluster", &format!("lock-etcd-test={peer_url}")]);
    cmd
}

pub fn key(namespace: &str, name: &str) -> LockKey {
    LockKey::new(
        Namespace::new(namespace).unwrap(),
        LockName::new(name).unwrap(),
    )
}

/// Starts etcd and waits until it has elected itself and serves requests.
pub async fn start() -> (TestServer, EtcdBackend) {
    let server = TestServer::start(&ETCD).await.expect("etcd starts");
    let backend = ready(&server.url()).await;
    (server, backend)
}

pub async fn ready(url: &str) -> EtcdBackend {
    let started = tokio::time::Instant::now();
    loop {
        if let Ok(backend) = EtcdBackend::connect_url(url).await {
            if backend
                .is_locked(&key("probe", "probe"), LockFamily::Exclusive)
                .await
                .is_ok()
            {
                return backend;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "etcd at {url} did not serve within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn backend(url: &str) -> EtcdBackend {
    EtcdBackend::connect(EtcdConfig::from_url(url).unwrap())
        .await
        .expect("connect")
}

/// `127.0.0.1:port` of an `etcd://` URL, for etcdctl.
pub fn endpoint(url: &str) -> String {
    url.trim_start_matches("etcd://").to_owned()
}
