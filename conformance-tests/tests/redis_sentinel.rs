//! Redis under Sentinel (one primary, one replica, three sentinels, all real servers):
//! the whole conformance suite through a `redis+sentinel://` URL, failovers while a lock
//! is held and another client waits, and replica acknowledgement of grants.
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::checker::{self, Budget};
use conformance_tests::run_suite;
use conformance_tests::server::sentinel::SentinelDeployment;
use lock_core::{DistributedLock, DistributedLockExt, Error};
use lock_redis::TooFewReplicas;
use redis_support::{client, config, holder_and_waiter_across, Inspect, Redis};
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
    let backend = Arc::new(backend);
    let report = run_suite(backend.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    checker::check(backend, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_keeps_the_lock_and_the_waiter_still_gets_it() {
    let deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    holder_and_waiter_across(&url, "job", || async {
        let old = deployment.primary_port().await.expect("a primary");
        deployment.failover().await.expect("SENTINEL FAILOVER");
        let new = deployment
            .wait_for_new_primary(old)
            .await
            .expect("a new primary");
        format!("SENTINEL FAILOVER from port {old} to {new}")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_and_the_waiter_still_gets_the_lock() {
    let mut deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    holder_and_waiter_across(&url, "job", || async {
        let old = deployment.primary_port().await.expect("a primary");
        deployment.kill(old);
        let new = deployment
            .wait_for_new_primary(old)
            .await
            .expect("a new primary");
        format!("SIGKILL of the primary on port {old}; new primary {new}")
    })
    .await;
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
        config(url).with_replica_acks(replicas, Duration::from_millis(300), on_too_few),
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
        config(&url).with_replica_acks(1, Duration::from_secs(1), TooFewReplicas::Release),
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

/// Replication is asynchronous: a failover can promote a replica that never received a
/// lease, nor the fencing counter's last increments. Made certain here: once the
/// replica has the lease, its key and the counter are deleted on the replica (made
/// writable), then the primary is killed. The holder must be told at its next renewal,
/// the waiter must then get the lock, and its token must still be higher: the counter
/// never restarts below the server clock (in microseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_failover_loses_is_reported_to_its_holder() {
    use lock_redis::redis::{self, AsyncCommands};

    let mut deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    let ns = format!("lost-{}", std::process::id());
    let holder = client(config(&url), &ns);
    let waiter = client(config(&url), &ns);
    let held = holder
        .lock("job")
        .unwrap()
        .acquire()
        .await
        .expect("acquire");

    let primary = deployment.primary_port().await.expect("a primary");
    let replica = deployment.replica_ports(primary)[0];
    let replica = redis::Client::open(SentinelDeployment::node_url(replica)).unwrap();
    let mut replica = replica.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{ns}:job");
    let started = Instant::now();
    while !replica.exists::<_, bool>(&key).await.unwrap() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never replicated"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query_async(&mut replica)
        .await
        .unwrap();
    let deleted: usize = replica
        .del(&[key.clone(), format!("{{{key}}}:fence")])
        .await
        .unwrap();
    assert_eq!(deleted, 2);
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("job").unwrap();
        lock.acquire_timeout(Duration::from_secs(90)).await
    });

    let killed_at = Instant::now();
    deployment.kill(primary);
    let new = deployment
        .wait_for_new_primary(primary)
        .await
        .expect("a new primary");
    let promoted_after = killed_at.elapsed();
    let loss = tokio::time::timeout(Duration::from_secs(30), held.lost())
        .await
        .expect("the holder is told its lease is gone");
    let told_after = killed_at.elapsed();
    assert!(!held.is_held());
    let guard = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiter finishes")
        .expect("the waiter task")
        .expect("the waiter gets the lock");
    println!(
        "primary killed; {new} promoted after {promoted_after:?}; the holder was told after \
         {told_after:?} ({loss:?}); the waiter got the lock after {:?} with token {} (the \
         holder's was {})",
        killed_at.elapsed(),
        guard.fencing_token(),
        held.fencing_token()
    );
    assert!(
        guard.fencing_token() > held.fencing_token(),
        "a token was issued again after the counter was lost"
    );
    guard.release().await.expect("release");
}

/// Fair and write waiters ride out a failover, but never past their wait limit (issue
/// 29): once an attempt timed out on a frozen primary, the next one must not wait for
/// the abandoned call to finish (it holds on for up to a call timeout plus the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_attempt_timed_out_still_ends_at_its_wait_limit() {
    use lock_core::prelude::*;

    let deployment = SentinelDeployment::start(1)
        .await
        .expect("the Sentinel deployment starts");
    let url = deployment.url();
    let ns = format!("limit-{}", std::process::id());
    let fast = || {
        config(&url)
            .with_connect_timeout(Duration::from_millis(500))
            .with_request_timeout(Duration::from_millis(500))
    };
    let fair_waiter = client(fast(), &ns);
    let writer = client(fast(), &ns);
    // Connected (and the scripts loaded) before the primary freezes.
    let fair = fair_waiter.fair_lock("job").unwrap();
    fair.try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let rw = writer.rw_lock("job").unwrap();
    rw.try_write()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();

    let primary = deployment.primary_port().await.expect("a primary");
    deployment.pause(primary);
    let wait = Duration::from_secs(3);
    let options = lock_core::AcquireOptions::wait_for(wait).lease(Duration::from_secs(20));
    let started = Instant::now();
    let (fair_result, write_result) = tokio::join!(
        async {
            let result = fair.acquire_with(options).await;
            (result, started.elapsed())
        },
        async {
            let result = rw.write_with(options).await;
            (result, started.elapsed())
        },
    );
    deployment.resume(primary);
    let (fair_result, fair_took) = fair_result;
    let (write_result, write_took) = write_result;
    println!(
        "primary frozen: the fair waiter ended after {fair_took:?} ({:?}), the writer after \
         {write_took:?} ({:?}); wait limit {wait:?}",
        fair_result.as_ref().map(|_| "granted"),
        write_result.as_ref().map(|_| "granted"),
    );
    // The limit, plus one call in flight at it and a lookup of the primary.
    let bound = wait + Duration::from_secs(3);
    assert!(fair_took < bound, "the fair waiter took {fair_took:?}");
    assert!(write_took < bound, "the writer took {write_took:?}");
}
