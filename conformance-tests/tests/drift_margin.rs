//! A holder cut off from its server by a network that silently drops its packets must
//! stop saying "held" before the server can hand the lock to someone else, with at
//! least the clock-drift margin to spare (1 % of the lease plus 2 ms by default): real
//! machines' clocks run at slightly different rates, so a holder that counts the server's
//! whole lease can still believe it holds after the server freed the lock.
//!
//! For each backend with leases that expire on the server (Redis, PostgreSQL, MariaDB,
//! etcd; ZooKeeper's session is checked in tests/zookeeper/checks.rs), with a fixed lease
//! and with a watchdog lease: the holder's connections go through a proxy that is then
//! cut; another client, connected directly, waits for the lock. The margin measured is
//! the time from the holder's last expiry (`LockGuard::expires_at`) to the other's grant.
//! With a watchdog lease, the holder's failed renewal must also be logged as a warning
//! that names the lock.
#![cfg(all(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "etcd"
))]

#[path = "sql_support/servers.rs"]
mod servers;

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::log_capture;
use conformance_tests::proxy::Blackhole;
use conformance_tests::server::specs::{ETCD, MARIADB, POSTGRES, REDIS};
use conformance_tests::server::TestServer;
use distributed_locks::{connect, prelude::*, AcquireOptions, ConnectOptions, LockProvider};
use tokio::time::Instant;

/// The lease both scenarios use: long enough for a loaded machine to acquire and cut
/// well within it.
const LEASE: Duration = Duration::from_secs(3);

/// `url` with its port replaced by `port`.
fn through(url: &str, server_port: u16, port: u16) -> String {
    let from = format!(":{server_port}");
    assert!(url.contains(&from), "{url} has no port {server_port}");
    url.replacen(&from, &format!(":{port}"), 1)
}

async fn client(url: &str, namespace: &str) -> Arc<dyn LockProvider> {
    let options = ConnectOptions::default()
        .namespace(namespace)
        .watchdog_lease(LEASE);
    connect(url, options)
        .await
        .unwrap_or_else(|err| panic!("connecting to {url}: {err}"))
}

/// One scenario: returns the margin between the holder's last expiry and the other's
/// grant.
async fn margin(url: &str, server_port: u16, watchdog: bool) -> Duration {
    let namespace = format!("drift{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let proxy = Blackhole::to(server_port).await.expect("proxy");
    let holder = client(&through(url, server_port, proxy.port()), &namespace).await;
    let other = client(url, &namespace).await;
    let lock = holder.lock("cut-off").expect("lock");
    let options = if watchdog {
        AcquireOptions::try_once()
    } else {
        AcquireOptions::try_once().lease(LEASE)
    };
    let guard = lock
        .acquire_with(options)
        .await
        .expect("the holder acquires");
    if watchdog {
        // Past the first renewal, so the watchdog's lease is the one that runs out.
        tokio::time::sleep(LEASE / 2).await;
    }
    proxy.cut();
    let waiter = other.lock("cut-off").expect("lock");
    let taken = tokio::spawn(async move {
        let guard = waiter.acquire_timeout(LEASE * 10).await;
        (guard, Instant::now())
    });
    // The holder's last word on its lease, until it says it no longer holds.
    let mut last_expiry = guard.expires_at().expect("held after the cut");
    while let Some(at) = guard.expires_at() {
        last_expiry = at;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (taken, taken_at) = tokio::time::timeout(LEASE * 12, taken)
        .await
        .expect("the other client got an answer")
        .expect("waiter task");
    let next = taken.expect("the server handed the lock on");
    assert!(next.fencing_token() > guard.fencing_token());
    next.release().await.expect("release");
    if watchdog {
        renewal_failure_is_logged(&format!("{namespace}/cut-off"), guard.fencing_token()).await;
    }
    taken_at.saturating_duration_since(last_expiry)
}

/// The cut-off holder's watchdog logged its failed renewal with the lock's name, its
/// backend, kind, owner and token: what an operator reads first.
async fn renewal_failure_is_logged(lock: &str, token: u64) {
    let warning = log_capture::expect_warning(lock, "renewal failed", LEASE).await;
    assert_eq!(warning.field("kind"), Some("exclusive"), "{warning:?}");
    assert_eq!(
        warning.field("token"),
        Some(token.to_string().as_str()),
        "{warning:?}"
    );
    warning.assert_has(&["backend", "owner", "error"]);
}

async fn check(backend: &str, url: &str, server_port: u16) {
    assert!(log_capture::capturing(), "warnings are not recorded");
    // What the default drift factor keeps back from a lease of LEASE.
    let promised = LEASE.mul_f64(distributed_locks::DEFAULT_CLOCK_DRIFT) + Duration::from_millis(2);
    for watchdog in [false, true] {
        let measured = margin(url, server_port, watchdog).await;
        let kind = if watchdog { "watchdog" } else { "fixed" };
        println!(
            "{backend}, {kind} lease of {LEASE:?}: the holder stopped saying held {measured:?} before the other client was granted (at least {promised:?} promised)"
        );
        assert!(
            measured >= promised,
            "{backend}, {kind} lease: the cut-off holder said held until {measured:?} before the lock was handed on, less than the {promised:?} drift margin"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holder_cut_off_stops_holding_first() {
    let server = TestServer::start(&REDIS)
        .await
        .expect("redis-server starts");
    let port = server.port().expect("port");
    check("redis", &server.url(), port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_holder_cut_off_stops_holding_first() {
    let server = TestServer::start(&POSTGRES).await.expect("postgres starts");
    servers::wait_until_ready(&server.url()).await;
    let port = server.port().expect("port");
    check("postgres", &server.url(), port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_holder_cut_off_stops_holding_first() {
    let server = TestServer::start(&MARIADB).await.expect("mariadb starts");
    servers::wait_until_ready(&server.url()).await;
    let port = server.port().expect("port");
    check("mariadb", &server.url(), port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_holder_cut_off_stops_holding_first() {
    let server = TestServer::start(&ETCD).await.expect("etcd starts");
    let port = server.port().expect("port");
    check("etcd", &server.url(), port).await;
}
