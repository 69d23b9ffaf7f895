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
    let backend = lock_redis::RedisBackend::new(config(&cluster.url())).unwrap();
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

/// Two waiters of one client wait on locks served by two primaries. The client's
/// pub/sub connection to one primary is killed: the waiter there still hears its
/// release (the cluster client reconnects and subscribes there again), and the other
/// primary sees nothing of it: no new connection, no extra acquire attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_disconnection_wakes_only_the_waiters_on_that_node() {
    let cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let ns = format!("disconnect-{}", std::process::id());
    // Two names whose locks live on two different primaries.
    let mut names: Vec<(String, u16)> = Vec::new();
    for i in 0..200 {
        let name = format!("n{i}");
        let owner = cluster.owner_of(&format!("{ns}:{name}")).await.unwrap();
        if names.iter().all(|(_, o)| *o != owner) {
            names.push((name, owner));
        }
        if names.len() == 2 {
            break;
        }
    }
    let [(cut_name, cut_port), (other_name, other_port)] = &names[..] else {
        panic!("no two names on two primaries");
    };
    let holder = client(config(&cluster.url()), &ns);
    let waiters = client(config(&cluster.url()), &ns);
    let lease = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(60));
    let mut held = Vec::new();
    for name in [cut_name, other_name] {
        let guard = holder.lock(name).unwrap().acquire_with(lease).await;
        held.push(guard.expect("free"));
    }
    let waiting: Vec<_> = [cut_name, other_name]
        .into_iter()
        .map(|name| {
            let lock = waiters.lock(name).unwrap();
            tokio::spawn(async move {
                let guard = lock.acquire_timeout(Duration::from_secs(60)).await;
                (guard, tokio::time::Instant::now())
            })
        })
        .collect();
    // Both waiters subscribed and asleep: on each primary the holder's pub/sub client
    // (it watches its lock) and the waiters'.
    let started = tokio::time::Instant::now();
    while pubsub_clients(*cut_port).await < 2 || pubsub_clients(*other_port).await < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    reset_stats(*other_port).await;
    let subscriber = pubsub_client_ids(*other_port).await;
    kill_pubsub_clients(*cut_port).await;
    // Time for the cluster client to reconnect and subscribe again.
    let started = tokio::time::Instant::now();
    while pubsub_clients(*cut_port).await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the cluster client did not subscribe again on port {cut_port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (calls, subscriber_after) = (
        script_calls(*other_port).await,
        pubsub_client_ids(*other_port).await,
    );
    let mut held = held.into_iter();
    let mut waiting = waiting.into_iter();
    for name in [cut_name, other_name] {
        let released = tokio::time::Instant::now();
        held.next().unwrap().release().await.unwrap();
        let (guard, at) = tokio::time::timeout(Duration::from_secs(30), waiting.next().unwrap())
            .await
            .expect("the waiter ended")
            .unwrap();
        let took = at - released;
        assert!(
            took < Duration::from_secs(10),
            "the waiter of {name} got the lock {took:?} after its release"
        );
        guard.unwrap().release().await.unwrap();
    }
    assert!(
        calls == 0 && subscriber_after == subscriber,
        "killing the pub/sub connection to port {cut_port} made the primary on port \
         {other_port} serve {calls} acquire attempts, and its pub/sub clients went from \
         {subscriber:?} to {subscriber_after:?}"
    );
}

/// How many pub/sub clients a node has.
async fn pubsub_clients(port: u16) -> usize {
    pubsub_client_ids(port).await.len()
}

/// The ids of a node's pub/sub clients.
async fn pubsub_client_ids(port: u16) -> Vec<String> {
    pubsub_client_field(port, "id").await
}

/// One field of each of a node's pub/sub clients (`CLIENT LIST TYPE pubsub`).
async fn pubsub_client_field(port: u16, field: &str) -> Vec<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
    let prefix = format!("{field}=");
    list.lines()
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix(prefix.as_str())))
        .map(str::to_owned)
        .collect()
}

async fn kill_pubsub_clients(port: u16) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// Drops every packet from one loopback port to another while it lives (an iptables
/// rule, removed on drop): a connection that goes silent without closing, as behind a
/// firewall or NAT that forgot it. Rules carry a comment, so a run killed before it
/// removed its own has them removed by the next.
struct Silenced(Vec<String>);

/// The comment on every rule these tests add.
const RULE_TAG: &str = "distributed-locks-test";

impl Silenced {
    fn from_to(from: u16, to: u16) -> Self {
        let (from, to) = (from.to_string(), to.to_string());
        let rule: Vec<String> = [
            "OUTPUT",
            "-o",
            "lo",
            "-p",
            "tcp",
            "--sport",
            &from,
            "--dport",
            &to,
            "-m",
            "comment",
            "--comment",
            RULE_TAG,
            "-j",
            "DROP",
        ]
        .map(str::to_owned)
        .to_vec();
        let added = std::process::Command::new("iptables")
            .arg("-I")
            .args(&rule)
            .status()
            .expect("iptables runs (scripts/test installs it; the test needs root)");
        assert!(
            added.success(),
            "iptables -I {rule:?} failed (the test needs root)"
        );
        Silenced(rule)
    }

    /// Removes the rules a killed earlier run left behind.
    fn remove_stale() {
        let Ok(listed) = std::process::Command::new("iptables")
            .args(["-S", "OUTPUT"])
            .output()
        else {
            return;
        };
        for rule in String::from_utf8_lossy(&listed.stdout).lines() {
            let Some(spec) = rule.strip_prefix("-A ") else {
                continue;
            };
            if spec.contains(RULE_TAG) {
                let args: Vec<&str> = spec
                    .split_whitespace()
                    .map(|a| a.trim_matches('"'))
                    .collect();
                let _ = std::process::Command::new("iptables")
                    .arg("-D")
                    .args(args)
                    .status();
            }
        }
    }
}

impl Drop for Silenced {
    fn drop(&mut self) {
        let _ = std::process::Command::new("iptables")
            .arg("-D")
            .args(&self.0)
            .status();
    }
}

/// The client ports of a node's pub/sub clients.
async fn pubsub_client_ports(port: u16) -> Vec<u16> {
    pubsub_client_field(port, "addr")
        .await
        .iter()
        .filter_map(|addr| addr.rsplit_once(':')?.1.parse().ok())
        .collect()
}

/// The waiter's sharded subscription goes silent (its node's packets to it dropped,
/// nothing closed). The pub/sub connection is pinged, found silent and replaced, so
/// the waiter still hears the release instead of waiting out the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_subscription_went_silent_still_hears_the_release() {
    let cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let ns = format!("silent-{}", std::process::id());
    let owner = cluster.owner_of(&format!("{ns}:job")).await.unwrap();
    let holder = client(config(&cluster.url()), &ns);
    let waiters = client(config(&cluster.url()), &ns);
    let lease = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(60));
    let held = holder.lock("job").unwrap().acquire_with(lease).await;
    let held = held.expect("free");
    let lock = waiters.lock("job").unwrap();
    let waiting = tokio::spawn(async move {
        let guard = lock.acquire_timeout(Duration::from_secs(90)).await;
        (guard, tokio::time::Instant::now())
    });
    // The holder's pub/sub client (it watches its lock) and the waiter's.
    let started = tokio::time::Instant::now();
    let mut subscribers = pubsub_client_ports(owner).await;
    while subscribers.len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "not subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        subscribers = pubsub_client_ports(owner).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Silenced::remove_stale();
    let _silenced: Vec<Silenced> = subscribers
        .iter()
        .map(|port| Silenced::from_to(owner, *port))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = tokio::time::Instant::now();
    held.release().await.unwrap();
    let (guard, at) = tokio::time::timeout(Duration::from_secs(90), waiting)
        .await
        .expect("the waiter ended")
        .unwrap();
    let took = at - released;
    println!("the waiter was granted {took:?} after the release");
    assert!(
        took < Duration::from_secs(15),
        "the waiter heard of the release only {took:?} after it (its subscription had gone \
         silent; the holder's lease was 60 s)"
    );
    guard.unwrap().release().await.unwrap();
}

/// A query to one node of the cluster, by port.
async fn node_query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    cmd.query_async(&mut conn).await.unwrap()
}

/// One primary dies and stays down for two lease lengths (its replica told not to
/// take over, and the others serving their slots meanwhile): only the leases it kept
/// are lost, and the locks on the other primaries stay held, renewed all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_costs_only_the_leases_it_keeps() {
    use lock_core::prelude::*;

    let mut cluster = ClusterDeployment::start().await.expect("the cluster forms");
    let ns = format!("down-{}", std::process::id());
    let primaries = cluster.primaries().await.unwrap();
    for &primary in &primaries {
        let replica = cluster.replica_of(primary).await.unwrap();
        for port in [primary, replica] {
            let _: () = node_query(
                port,
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("cluster-require-full-coverage")
                    .arg("no"),
            )
            .await;
        }
    }
    let lease = Duration::from_secs(6);
    let backend = lock_redis::RedisBackend::new(config(&cluster.url())).unwrap();
    let holder = lock_core::LockClient::builder(backend)
        .namespace(&ns)
        .watchdog_lease(lease)
        .build()
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..12 {
        let name = format!("lock-{i}");
        let owner = cluster.owner_of(&format!("{ns}:{name}")).await.unwrap();
        guards.push((owner, holder.lock(&name).unwrap().acquire().await.unwrap()));
    }
    let down = guards[0].0;
    assert!(
        guards.iter().any(|(owner, _)| *owner != down),
        "every lock landed on one primary"
    );
    let replica = cluster.replica_of(down).await.unwrap();
    let _: () = node_query(
        replica,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-replica-no-failover")
            .arg("yes"),
    )
    .await;
    cluster.kill(down);
    tokio::time::sleep(lease * 2).await;
    let kept: Vec<bool> = guards
        .iter()
        .filter(|(owner, _)| *owner != down)
        .map(|(_, guard)| guard.is_held())
        .collect();
    let cut_off: Vec<bool> = guards
        .iter()
        .filter(|(owner, _)| *owner == down)
        .map(|(_, guard)| guard.is_held())
        .collect();
    assert!(
        kept.iter().all(|held| *held),
        "locks on primaries that answered were lost with the dead one's: {kept:?}"
    );
    assert!(
        cut_off.iter().all(|held| !held),
        "a lease nobody renewed for two lease lengths is still held: {cut_off:?}"
    );
    println!(
        "PASS a_node_down_costs_only_the_leases_it_keeps ({} kept, {} lost with the dead node)",
        kept.len(),
        cut_off.len()
    );
}
