//! Redis under Sentinel (one primary, one replica, three sentinels, all real servers):
//! the whole conformance suite through a `redis+sentinel://` URL, failovers while a lock
//! is held and another client waits, and replica acknowledgement of grants.
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::run_suite;
use conformance_tests::server::sentinel::SentinelDeployment;
use lock_core::{DistributedLock, DistributedLockExt, Error, LockClient};
use lock_redis::{RedisBackend, RedisConfig, RedisConfigBuilder, TooFewReplicas};
use redis_support::{Inspect, Redis};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_conformance() {
    let deployment = Arc::new(
        SentinelDeployment::start(1)
            .await
            .expect("the Sentinel deployment starts"),
    );
    let url = deployment.url();
    let backend = Redis::new("redis-sentinel", Inspect::Sentinel(deployment.clone()), url);
    let report = run_suite(Arc::new(backend)).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
}

fn config(url: &str) -> RedisConfigBuilder {
    RedisConfig::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_secs(1))
        .failover_grace(Duration::from_secs(60))
}

fn client(config: RedisConfigBuilder, namespace: &str) -> LockClient<RedisBackend> {
    let backend = RedisBackend::new(config.build().expect("valid settings")).expect("backend");
    LockClient::builder(backend)
        .namespace(namespace)
        // Long enough to outlast a failover, so the lease is kept across it.
        .watchdog_lease(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// How a primary goes away.
enum Fault {
    /// `SENTINEL FAILOVER`: a replica is promoted, the old primary follows it.
    Planned,
    /// SIGKILL of the primary: the sentinels call it down and elect a replacement.
    Kill,
}

/// One client holds a lock and another waits for it while the primary is replaced.
/// The holder must keep the lock on the new primary (its key was replicated) or be
/// told it lost it; the waiter must never get it while the holder still holds it, and
/// must get it once the holder lets go.
async fn failover_with_a_holder_and_a_waiter(fault: Fault) {
    let mut deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    let namespace = format!("failover-{}", std::process::id());
    let holder = client(config(&url), &namespace);
    let waiter = client(config(&url), &namespace);
    let held = holder
        .lock("job")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");
    let first_token = held.fencing_token();
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("job").unwrap();
        let guard = lock.acquire_timeout(Duration::from_secs(90)).await;
        (guard, Instant::now(), waiter)
    });
    // Let the waiter subscribe and block behind the holder before the fault.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the waiter got a held lock");

    let old = deployment.primary_port().await.expect("a primary");
    let fault_at = Instant::now();
    match fault {
        Fault::Planned => deployment.failover().await.expect("SENTINEL FAILOVER"),
        Fault::Kill => deployment.kill(old),
    }
    let new = deployment
        .wait_for_new_primary(old)
        .await
        .expect("a new primary");
    let failover_took = fault_at.elapsed();

    // Over more than one renewal period on the new primary, the holder either keeps
    // its lease or is told it is gone.
    let lost = tokio::select! {
        loss = held.lost() => Some(loss),
        () = tokio::time::sleep(Duration::from_secs(5)) => None,
    };
    let released_at = Instant::now();
    match &lost {
        None => {
            assert!(
                !waiting.is_finished(),
                "the waiter got the lock while the holder still held it"
            );
            assert!(held.is_held());
            held.release().await.expect("release on the new primary");
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
        "failover from port {old} to {new} took {failover_took:?}; the holder {}; \
         the waiter got the lock {:?} after the holder let go",
        if lost.is_some() {
            "was told of the loss"
        } else {
            "kept its lease"
        },
        got_at.saturating_duration_since(released_at)
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_keeps_the_lock_and_the_waiter_still_gets_it() {
    failover_with_a_holder_and_a_waiter(Fault::Planned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_and_the_waiter_still_gets_the_lock() {
    failover_with_a_holder_and_a_waiter(Fault::Kill).await;
}

/// What an acquire under replica acknowledgement returns, and whether the lock is
/// held afterwards (asked through a client without acknowledgement).
async fn acked_acquire(
    url: &str,
    namespace: &str,
    replicas: u32,
    on_too_few: TooFewReplicas,
) -> (lock_core::Result<lock_core::LockGuard>, bool) {
    let acked = client(
        config(url).replica_acks(replicas, Duration::from_millis(300), on_too_few),
        namespace,
    );
    let result = acked.lock("acked").unwrap().acquire().await;
    let plain = client(config(url), namespace);
    let held = plain
        .lock("acked")
        .unwrap()
        .is_locked()
        .await
        .expect("is_locked");
    (result, held)
}

fn assert_too_few(result: &lock_core::Result<lock_core::LockGuard>, expected: &str) {
    match result {
        Err(err @ Error::Unavailable { .. }) => {
            assert!(err.to_string().contains(expected), "{err}");
            assert!(err.is_retryable());
        }
        other => panic!("expected a retryable shortfall error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_wait_for_replicas_and_a_shortfall_leaves_nothing_held() {
    let mut deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    let ns = format!("acks-{}", std::process::id());

    let (granted, held) = acked_acquire(&url, &ns, 1, TooFewReplicas::Release).await;
    let guard = granted.expect("one replica has the grant");
    assert!(held);
    guard.release().await.expect("release");

    // Two replicas asked for, one exists: released, retryable, nobody locked out.
    let (short, held) = acked_acquire(&url, &ns, 2, TooFewReplicas::Release).await;
    assert_too_few(&short, "only 1 of 2 replicas");
    assert!(!held, "a grant too few replicas have was left held");

    let (kept, held) = acked_acquire(&url, &ns, 2, TooFewReplicas::KeepAndWarn).await;
    let guard = kept.expect("kept as configured");
    assert!(held);
    guard.release().await.expect("release");

    // The replica gone: nothing acknowledges.
    let primary = deployment.primary_port().await.expect("primary");
    let replica = deployment.replica_ports(primary)[0];
    deployment.kill(replica);
    let (short, held) = acked_acquire(&url, &ns, 1, TooFewReplicas::Release).await;
    assert_too_few(&short, "only 0 of 1 replicas");
    assert!(!held, "a grant no replica has was left held");
}

/// Not a timing assertion: prints what acknowledgement costs per acquire + release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acknowledgement_cost_is_printed() {
    let deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    let ns = format!("ack-cost-{}", std::process::id());
    let plain = client(config(&url), &ns);
    let acked = client(
        config(&url).replica_acks(1, Duration::from_secs(1), TooFewReplicas::Release),
        &ns,
    );
    for (what, client) in [("without", &plain), ("with", &acked)] {
        let lock = client.lock("cost").unwrap();
        lock.acquire().await.unwrap().release().await.unwrap();
        let rounds = 200;
        let started = Instant::now();
        for _ in 0..rounds {
            lock.acquire().await.unwrap().release().await.unwrap();
        }
        println!(
            "acquire + release {what} replica acknowledgement: {:?} per cycle",
            started.elapsed() / rounds
        );
    }
}
