//! A real etcd for these tests, through the shared server harness: free loopback
//! ports, a temporary data directory, stopped by PID when dropped.

#![allow(dead_code)]

use std::time::Duration;

pub use conformance_tests::server::specs::ETCD;
use conformance_tests::server::TestServer;
use lock_core::backend::LockBackend;
use lock_core::{LockFamily, LockKey, LockName, Namespace};
use lock_etcd::{EtcdBackend, EtcdConfig};

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
