//! Redis Cluster (three primaries, three replicas, all real servers): the whole
//! conformance suite through a `redis+cluster://` URL, names that would split a lock
//! across slots, renewals batched per node, and failovers of the node that serves a
//! held lock while another client waits.
#![cfg(feature = "redis")]

mod redis_support;

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::checker::{self, Budget};
use conformance_tests::run_suite;
use conformance_tests::server::redis_cluster::ClusterDeployment;
use lock_core::{DistributedLock, DistributedLockExt};
use lock_redis::redis;
use redis_support::{client, config, holder_and_waiter_across, Inspect, Redis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_conformance() {
    let cluster = Arc::new(ClusterDeployment::start().await.expect("the cluster forms"));
    let url = cluster.url();
    let backend = Redis::new("redis-cluster", Inspect::Cluster(cluster.clone()), url);
    let backend = Arc::new(backend);
    let report = run_suite(backend.clone()).await;
    assert!(report.failed.is_empty(), "{}", report.summary());
    checker::check(backend, Budget::seeds(checker::SERVER_SEEDS))
        .await
        .assert_ok();
}

/// Names with braces would hash the bare key by the braces inside the name; they are
/// encoded instead: each lock works (every key in one slot), and two names that share
/// a `{tag}` stay two locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_braces_stay_distinct_locks_in_one_slot() {
    let cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let ns = format!("braces-{}", std::process::id());
    let a = client(config(&cluster.url()), &ns);
    let b = client(config(&cluster.url()), &ns);
    let names = ["a{b}c", "x{b}y", "}{", "{}", "a%7Bb%7Dc"];
    let mut guards = Vec::new();
    for name in names {
        let guard = a
            .lock(name)
            .unwrap()
            .try_acquire()
            .await
            .expect("no CROSSSLOT");
        guards.push(guard.unwrap_or_else(|| panic!("{name} was free")));
        assert!(b.lock(name).unwrap().is_locked().await.unwrap(), "{name}");
        let fair = a.fair_lock(name).unwrap().try_acquire().await.unwrap();
        fair.expect("the fair lock of the name is free")
            .release()
            .await
            .unwrap();
    }
    for (name, guard) in names.iter().zip(guards) {
        assert!(b.lock(name).unwrap().try_acquire().await.unwrap().is_none());
        guard.release().await.unwrap();
        assert!(!b.lock(name).unwrap().is_locked().await.unwrap(), "{name}");
    }
}

/// Connections each node has accepted since it started (`total_connections_received`).
async fn connections_received(port: u16) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut conn)
        .await
        .unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// A fresh client whose first calls all start at once connects to the cluster once,
/// not once per call: otherwise a burst of acquires (a storm of waiters) opens a
/// cluster connection each, to every node, and over TLS the handshakes alone outlast
/// the calls' timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_start_together_share_one_connection() {
    const CALLS: usize = 200;
    let cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let ports = cluster.primaries().await.unwrap();
    let mut before = Vec::new();
    for port in &ports {
        before.push(connections_received(*port).await);
    }
    let locks = client(config(&cluster.url()), "burst");
    let calls = (0..CALLS).map(|i| {
        let lock = locks.lock(&format!("name-{i}")).unwrap();
        async move { lock.is_locked().await }
    });
    for answer in futures::future::join_all(calls).await {
        assert!(!answer.expect("an answer"));
    }
    let mut made = 0;
    for (port, before) in ports.iter().zip(before) {
        // Less our own INFO connection.
        made += connections_received(*port).await - before - 1;
    }
    println!(
        "{CALLS} first calls at once made {made} connections to {} primaries",
        ports.len()
    );
    assert!(
        made <= 2 * ports.len() as u64,
        "{CALLS} first calls at once made {made} connections to {} primaries",
        ports.len()
    );
}

/// Script calls each primary has served since its stats were reset.
async fn script_calls(port: u16) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn reset_stats(port: u16) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// Locks spread over every primary stay held across many renewal ticks, and each tick
/// is one script call per node whatever the number of locks: counted by the servers.
/// The scripts are flushed from every node first, so the calls also load them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_locks_on_every_node() {
    renews_on_every_node(false).await;
}

/// The same with read locks, whose leases are entries of a hash (issue 29).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_read_locks_on_every_node() {
    renews_on_every_node(true).await;
}

async fn renews_on_every_node(read: bool) {
    use lock_core::prelude::*;

    let cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let ns = format!("renew-{}-{read}", std::process::id());
    let backend = lock_redis::RedisBackend::new(config(&cluster.url()).build().unwrap()).unwrap();
    let holder = lock_core::LockClient::builder(backend)
        .namespace(&ns)
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .unwrap();
    let mut guards = Vec::new();
    let mut owners = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..60 {
        let name = format!("lock-{i}");
        let owner = cluster.owner_of(&format!("{ns}:{name}")).await.unwrap();
        *owners.entry(owner).or_default() += 1;
        let guard = if read {
            holder.rw_lock(&name).unwrap().read().await
        } else {
            holder.lock(&name).unwrap().acquire().await
        };
        guards.push(guard.unwrap());
    }
    assert_eq!(
        owners.len(),
        3,
        "the locks should spread over every primary"
    );
    for &primary in owners.keys() {
        reset_stats(primary).await;
        let client = redis::Client::open(format!("redis://127.0.0.1:{primary}")).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // Four lease lengths: without renewals every lease would have run out. A tick
    // every third of the lease: about 12 ticks.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    for (&primary, &locks) in &owners {
        let calls = script_calls(primary).await;
        let what = if read { "read" } else { "exclusive" };
        println!("primary {primary}: {calls} script calls over about 12 renewal ticks of its {locks} {what} locks");
        // One call per lock per tick would be about 12 times the locks.
        assert!(
            calls <= 40,
            "primary {primary}: {calls} script calls for {locks} locks"
        );
    }
    for guard in &guards {
        assert!(guard.is_held(), "{} lost", guard.name());
    }
    let other = client(config(&cluster.url()), &ns);
    for i in 0..60 {
        let name = format!("lock-{i}");
        let taken = if read {
            other.rw_lock(&name).unwrap().try_write().await
        } else {
            other.lock(&name).unwrap().try_acquire().await
        };
        assert!(taken.unwrap().is_none(), "{name} taken");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_of_the_slot_owner_keeps_the_lock() {
    let cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let url = cluster.url();
    let key = format!("failover-{}:job", std::process::id());
    holder_and_waiter_across(&url, "job", || async {
        let old = cluster.owner_of(&key).await.expect("an owner");
        let replica = cluster.replica_of(old).await.expect("a replica");
        cluster.failover(replica).await.expect("CLUSTER FAILOVER");
        let new = cluster
            .wait_for_new_owner(&key, old)
            .await
            .expect("a new owner");
        format!("CLUSTER FAILOVER of the slot from port {old} to {new}")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_slot_owner_is_replaced_and_the_waiter_still_gets_the_lock() {
    let mut cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let url = cluster.url();
    let key = format!("failover-{}:job", std::process::id());
    holder_and_waiter_across(&url, "job", || async {
        let old = cluster.owner_of(&key).await.expect("an owner");
        cluster.kill(old);
        let new = cluster
            .wait_for_new_owner(&key, old)
            .await
            .expect("a new owner");
        format!("SIGKILL of the slot owner on port {old}; new owner {new}")
    })
    .await;
}
