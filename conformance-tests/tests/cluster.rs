//! The fault suite: locks on real servers in containers (etcd and ZooKeeper clusters of
//! three, RedLock over five Redis masters, a Redis primary whose replica is promoted,
//! PostgreSQL and MariaDB restarted), under partitions, pauses, kills and restarts,
//! with a fenced store that must never accept a stale write. Prints one table row per
//! topology and fault; docs/faults.md keeps the full run's table.
//!
//! Runs with `LOCK_TEST_SERVERS=containers` (it needs Docker; images come from
//! `scripts/images`). By default a bounded set of faults runs, one or two per
//! topology, as CI does; `LOCK_FAULTS=full` runs every fault:
//!
//! ```text
//! LOCK_TEST_SERVERS=containers LOCK_FAULTS=full \
//!   cargo test -p conformance-tests --all-features --test cluster -- --nocapture --test-threads 1
//! ```

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::checker::{self, Budget, Consensus, CutOff, Members};
use conformance_tests::cluster::vip::VirtualAddress;
use conformance_tests::cluster::workload::{Report, Workload, WorkloadConfig};
use conformance_tests::cluster::Cluster;
use conformance_tests::server::Source;

#[path = "etcd_support/mod.rs"]
mod etcd_support;
#[path = "redis_support/mod.rs"]
mod redis_support;
#[path = "sql_support/servers.rs"]
mod servers;
#[path = "zookeeper/backend.rs"]
mod zookeeper_backend;

/// The lease every client uses: short, as Jepsen's lock tests use.
const LEASE: Duration = Duration::from_secs(2);
/// How long the workload runs before the fault, and how long the fault lasts.
const BEFORE: Duration = Duration::from_secs(3);
const FAULT: Duration = Duration::from_secs(6);
/// How long after the heal the cluster has to grant again.
const RECOVERY_LIMIT: Duration = Duration::from_secs(45);

/// One fault, acting on one topology and healed before the run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Cut one member that does not lead off from its peers and the clients.
    IsolateFollower,
    /// Cut the leader off.
    IsolateLeader,
    /// Freeze the leader (`docker pause`) past the lease.
    PauseLeader,
    /// SIGKILL the leader, then start it again with its data.
    KillLeader,
    /// Cut this many RedLock masters off.
    IsolateMasters(usize),
    /// Freeze one RedLock master past the lease.
    PauseMaster,
    /// SIGKILL one RedLock master, then start it again with its data.
    KillMaster,
    /// Stop the database server with this signal (its normal shutdown), then start it.
    StopServer(&'static str),
    /// SIGKILL the database server, then start it.
    KillServer,
    /// Freeze the database server past the lease.
    PauseServer,
    /// Cut the database server off from its clients.
    IsolateServer,
    /// SIGKILL the Redis primary, promote its replica and move the clients' address.
    KillPrimaryPromoteReplica,
    /// Cut the Redis primary off, promote its replica and move the clients' address.
    IsolatePrimaryPromoteReplica,
    /// Freeze a client that holds the lock (its watchdog too) for twice the lease.
    PauseHolder,
}

impl Fault {
    fn name(self) -> String {
        match self {
            Fault::IsolateFollower => "isolate a follower".into(),
            Fault::IsolateLeader => "isolate the leader".into(),
            Fault::PauseLeader => "pause the leader".into(),
            Fault::KillLeader => "kill the leader, restart".into(),
            Fault::IsolateMasters(n) => format!("isolate {n} masters"),
            Fault::PauseMaster => "pause a master".into(),
            Fault::KillMaster => "kill a master, restart".into(),
            Fault::StopServer(signal) => format!("shutdown (SIG{signal}), restart"),
            Fault::KillServer => "SIGKILL, restart".into(),
            Fault::PauseServer => "pause the server".into(),
            Fault::IsolateServer => "isolate the server".into(),
            Fault::KillPrimaryPromoteReplica => "kill the primary, promote the replica".into(),
            Fault::IsolatePrimaryPromoteReplica => {
                "isolate the primary, promote the replica".into()
            }
            Fault::PauseHolder => "pause a holder".into(),
        }
    }
}

/// The end of the name of a topology whose database acknowledges commits before they
/// are durable: a crash may take back fencing tokens, and the row shows what fencing
/// does then.
const NOT_DURABLE: &str = "(commits not durable)";
/// The same for a Redis replica promoted after its primary failed: replication is
/// asynchronous, so the newest writes (locks and fencing counters) may be missing.
const ASYNC_REPLICATION: &str = "(asynchronous replication)";

/// How a topology finds the node a fault acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Etcd,
    ZooKeeper,
    RedLock,
    Single,
    /// A Redis primary (node 0) and its replica (node 1), behind a virtual address.
    Replicated,
}

/// The faults to run: all of them with `LOCK_FAULTS=full`, else the bounded set.
fn selected(all: &[Fault], bounded: &[Fault]) -> Vec<Fault> {
    match std::env::var("LOCK_FAULTS").as_deref() {
        Ok("full") => all.to_vec(),
        _ => bounded.to_vec(),
    }
}

fn header() {
    println!(
        "| topology | fault | grants | overlaps (plain) | lost updates (plain) | stale refused | stale accepted | token inversions | lost() fired (slowest after fault) | regranted after heal | leftover |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|---|---|");
}

fn row(topology: &str, fault: &str, r: &Report) {
    let losses = match r.slowest_loss() {
        Some(d) => format!("{} ({:.1} s)", r.losses.len(), d.as_secs_f64()),
        None => "0".to_owned(),
    };
    let recovered = r
        .recovered_after
        .map(|d| format!("{:.1} s", d.as_secs_f64()))
        .unwrap_or_else(|| "never".into());
    println!(
        "| {topology} | {fault} | {} | {} | {} | {} | {} | {} | {losses} | {recovered} | {} |",
        r.grants,
        r.store.overlaps,
        r.store.lost_updates,
        r.store.refused,
        r.stale_accepted,
        r.store.inversions,
        if r.leftover { "yes" } else { "no" },
    );
}

/// What every row must show, whatever the fault. Tokens may go back only on a
/// topology that says so (a database that acknowledges commits before they are
/// durable); fencing must still refuse every stale write there.
fn check(topology: &str, fault: &str, r: &Report) {
    assert_eq!(
        r.stale_accepted, 0,
        "{topology}/{fault}: stale writes accepted"
    );
    if !topology.ends_with(NOT_DURABLE) && !topology.ends_with(ASYNC_REPLICATION) {
        assert_eq!(
            r.store.inversions, 0,
            "{topology}/{fault}: tokens out of grant order"
        );
    }
    assert!(
        r.recovered_after.is_some(),
        "{topology}/{fault}: no grant after the heal ({})",
        r.last_error
    );
    assert!(
        !r.leftover,
        "{topology}/{fault}: the lock stayed held after the run"
    );
    assert!(
        r.grants > 0,
        "{topology}/{fault}: no grants at all ({})",
        r.last_error
    );
}

fn config(url: String, fault: &str) -> WorkloadConfig {
    WorkloadConfig {
        url,
        namespace: format!(
            "faults-{fault}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ),
        clients: 8,
        lease: LEASE,
        hold: Duration::from_millis(150),
    }
}

/// The node leader faults act on.
async fn leader(cluster: &Cluster, kind: Kind) -> usize {
    let found = match kind {
        Kind::Etcd => cluster.etcd_leader().await,
        Kind::ZooKeeper => cluster.zookeeper_leader().await,
        Kind::RedLock | Kind::Single | Kind::Replicated => Some(0),
    };
    found.unwrap_or_else(|| panic!("{kind:?}: no leader"))
}

/// Runs each of `faults` on `cluster` with a fresh workload, printing a row each.
async fn run(topology: &str, kind: Kind, cluster: &Cluster, url: &str, faults: &[Fault]) {
    run_behind(topology, kind, cluster, url, faults, None).await;
}

/// [`run`], with the virtual address clients reach a replicated server by.
async fn run_behind(
    topology: &str,
    kind: Kind,
    cluster: &Cluster,
    url: &str,
    faults: &[Fault],
    vip: Option<&VirtualAddress>,
) {
    for &fault in faults {
        let name = fault.name();
        let workload = Workload::start(config(url.to_owned(), &name.replace([' ', ','], "-")));
        tokio::time::sleep(BEFORE).await;
        let leader = leader(cluster, kind).await;
        let follower = (leader + 1) % cluster.nodes.len();
        workload.fault_started();
        let nodes = &cluster.nodes;
        match fault {
            Fault::IsolateFollower | Fault::IsolateLeader | Fault::IsolateServer => {
                let node = if fault != Fault::IsolateFollower {
                    leader
                } else {
                    follower
                };
                nodes[node].isolate().await.expect("isolate");
                tokio::time::sleep(FAULT).await;
                nodes[node].heal().await.expect("heal");
            }
            Fault::IsolateMasters(n) => {
                for node in &nodes[..n] {
                    node.isolate().await.expect("isolate");
                }
                tokio::time::sleep(FAULT).await;
                for node in &nodes[..n] {
                    node.heal().await.expect("heal");
                }
            }
            Fault::PauseLeader | Fault::PauseMaster | Fault::PauseServer => {
                nodes[leader].pause().await.expect("pause");
                tokio::time::sleep(FAULT).await;
                nodes[leader].resume().await.expect("resume");
            }
            Fault::KillLeader | Fault::KillMaster | Fault::KillServer => {
                nodes[leader].kill().await.expect("kill");
                tokio::time::sleep(FAULT).await;
                nodes[leader].restart().await.expect("restart");
            }
            Fault::StopServer(signal) => {
                nodes[leader].stop_with(signal).await.expect("stop");
                tokio::time::sleep(FAULT).await;
                nodes[leader].restart().await.expect("restart");
            }
            Fault::KillPrimaryPromoteReplica | Fault::IsolatePrimaryPromoteReplica => {
                let vip = vip.expect("a replicated topology");
                if fault == Fault::KillPrimaryPromoteReplica {
                    nodes[0].kill().await.expect("kill");
                } else {
                    nodes[0].isolate().await.expect("isolate");
                }
                // An operator (or Sentinel) notices and promotes the replica.
                tokio::time::sleep(LEASE / 2).await;
                let promoted = nodes[1]
                    .redis_command(&["REPLICAOF", "NO", "ONE"])
                    .await
                    .expect("promote");
                assert!(promoted.starts_with("+OK"), "promote: {promoted}");
                vip.move_to(nodes[1].port());
                tokio::time::sleep(FAULT).await;
                if fault == Fault::IsolatePrimaryPromoteReplica {
                    nodes[0].heal().await.expect("heal");
                }
            }
            Fault::PauseHolder => {
                workload.pause_a_holder(LEASE * 2);
                tokio::time::sleep(FAULT).await;
            }
        }
        workload.fault_healed();
        let report = workload.finish(RECOVERY_LIMIT).await;
        row(topology, &name, &report);
        for (after, reason) in &report.losses {
            eprintln!(
                "  {}/{name}: lost {:.1} s after the fault: {reason}",
                topology,
                after.as_secs_f64()
            );
        }
        check(topology, &name, &report);
    }
}

fn containers_or_skip(what: &str) -> bool {
    // `RUST_LOG=lock_zookeeper=debug` shows what the locks did during a fault.
    conformance_tests::log_capture::init();
    let yes = Source::from_env() == Ok(Source::Containers);
    if !yes {
        println!("SKIP {what}: LOCK_TEST_SERVERS is not `containers`");
    }
    yes
}

const CONSENSUS_FAULTS: [Fault; 5] = [
    Fault::IsolateFollower,
    Fault::IsolateLeader,
    Fault::PauseLeader,
    Fault::KillLeader,
    Fault::PauseHolder,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_three_members_under_faults() {
    if !containers_or_skip("etcd cluster faults") {
        return;
    }
    let cluster = Arc::new(Cluster::etcd(3).await.expect("an etcd cluster"));
    header();
    let faults = selected(&CONSENSUS_FAULTS, &[Fault::IsolateLeader]);
    let url = cluster.etcd_url();
    run("etcd, 3 members", Kind::Etcd, &cluster, &url, &faults).await;
    // Then generated histories on the same cluster.
    let admin = etcd_support::ready(&url).await;
    let backend = Arc::new(etcd_support::Etcd {
        name: "etcd, 3 members",
        url,
        admin,
    });
    check_cluster(backend, cluster, Consensus::Etcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_three_members_under_faults() {
    if !containers_or_skip("zookeeper ensemble faults") {
        return;
    }
    let cluster = Arc::new(Cluster::zookeeper(3).await.expect("a zookeeper ensemble"));
    // The session is the lease.
    let url = cluster.zookeeper_url(&format!("session_timeout_ms={}", LEASE.as_millis()));
    header();
    let faults = selected(&CONSENSUS_FAULTS, &[Fault::IsolateLeader]);
    run(
        "ZooKeeper, 3 members",
        Kind::ZooKeeper,
        &cluster,
        &url,
        &faults,
    )
    .await;
    // Then generated histories on the same ensemble, with the checker's sessions.
    let url = cluster.zookeeper_url("").trim_end_matches('?').to_owned();
    let operator =
        lock_zookeeper::ZkBackend::connect_url(&format!("{url}?connect_timeout_ms=30000"))
            .await
            .expect("an operator's session");
    let backend = Arc::new(zookeeper_backend::Zk {
        name: "zookeeper, 3 members",
        url,
        server: None,
        operator,
    });
    check_cluster(backend, cluster, Consensus::ZooKeeper).await;
}

/// Seeds of the randomized history checker per cluster, after the cluster's faults
/// (`LOCK_CHECK_SEEDS` and `LOCK_CHECK_MINUTES` run more): most runs fault a member,
/// and each takes 5-15 s.
const CHECKER_SEEDS: u64 = 3;

/// The checker's hook on a cluster: faults of its members, and no proxy (its clients
/// reach every member).
struct MemberFaults(Arc<Members>);

#[async_trait::async_trait]
impl CutOff for MemberFaults {
    async fn cuttable(
        &self,
    ) -> Result<
        (
            Arc<dyn conformance_tests::Backend>,
            Arc<conformance_tests::proxy::Blackhole>,
        ),
        String,
    > {
        Err("a cluster's clients are not behind a proxy".into())
    }

    fn can_cut(&self) -> bool {
        false
    }

    fn members(&self) -> Option<Arc<Members>> {
        Some(self.0.clone())
    }
}

/// The randomized history checker (docs/checker.md) on a cluster, with a member cut
/// off, frozen or killed and restarted at a random moment of most runs.
async fn check_cluster(
    backend: Arc<dyn conformance_tests::Backend>,
    cluster: Arc<Cluster>,
    consensus: Consensus,
) {
    let hook = Arc::new(MemberFaults(Arc::new(Members::new(cluster, consensus))));
    checker::check_with_cut_off(backend, hook, Budget::seeds(CHECKER_SEEDS))
        .await
        .assert_ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_five_masters_under_faults() {
    if !containers_or_skip("RedLock faults") {
        return;
    }
    let cluster = Arc::new(Cluster::redis_masters(5).await.expect("five redis masters"));
    header();
    let all = [
        Fault::IsolateMasters(2),
        Fault::IsolateMasters(3),
        Fault::PauseMaster,
        Fault::KillMaster,
        Fault::PauseHolder,
    ];
    let faults = selected(&all, &[Fault::IsolateMasters(3)]);
    run(
        "RedLock, 5 masters",
        Kind::RedLock,
        &cluster,
        &cluster.redlock_url(),
        &faults,
    )
    .await;
    // Then generated histories on the same masters.
    let urls = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}", node.port()))
        .collect();
    let backend = Arc::new(redis_support::RedLock::new(urls));
    check_cluster(backend, cluster, Consensus::Independent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_primary_and_replica_under_failover() {
    if !containers_or_skip("Redis failover") {
        return;
    }
    header();
    let all = [
        Fault::KillPrimaryPromoteReplica,
        Fault::IsolatePrimaryPromoteReplica,
        Fault::PauseServer,
        Fault::PauseHolder,
    ];
    // A fresh pair for each fault: a failover leaves the old primary out.
    for fault in selected(&all, &[Fault::KillPrimaryPromoteReplica]) {
        let cluster = Cluster::redis_replicated()
            .await
            .expect("a primary and a replica");
        let vip = VirtualAddress::to(cluster.nodes[0].port())
            .await
            .expect("a virtual address");
        let url = format!("redis://127.0.0.1:{}", vip.port());
        let topology = format!("Redis, primary + replica {ASYNC_REPLICATION}");
        run_behind(
            &topology,
            Kind::Replicated,
            &cluster,
            &url,
            &[fault],
            Some(&vip),
        )
        .await;
    }
}

/// A database server stopped, killed, cut off and paused under both lock strategies, with the
/// durability a production server has (`durable`); with `LOCK_FAULTS=full`, also a
/// server that acknowledges commits before they are written anywhere (`not_durable`),
/// killed.
async fn database_under_faults(
    image: &'static str,
    url_of: fn(u16) -> String,
    stop: &'static str,
    durable: &[&str],
    not_durable: &[&str],
) {
    if !containers_or_skip(&format!("{image} restarts")) {
        return;
    }
    header();
    let all = [
        Fault::StopServer(stop),
        Fault::KillServer,
        Fault::IsolateServer,
        Fault::PauseServer,
        Fault::PauseHolder,
    ];
    let mut setups = vec![(durable, "", &all[..], &[Fault::KillServer][..])];
    if std::env::var("LOCK_FAULTS").as_deref() == Ok("full") {
        setups.push((not_durable, NOT_DURABLE, &[Fault::KillServer][..], &[][..]));
    }
    for (args, label, all, bounded) in setups {
        let cluster = Cluster::single(image, args)
            .await
            .expect("a database server");
        let url = url_of(cluster.nodes[0].port());
        servers::wait_until_ready(&url).await;
        // Tables of their own per strategy: the tables refuse a client of the other one.
        let strategies = [
            ("leases", ""),
            (
                "FOR UPDATE",
                "?lock_strategy=for-update&lock_table_prefix=lock_sql_rows",
            ),
        ];
        for (strategy, query) in strategies {
            let faults = selected(all, bounded);
            let topology = format!("{image}, {strategy} {label}");
            let url = format!("{url}{query}");
            run(topology.trim_end(), Kind::Single, &cluster, &url, &faults).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load() {
    database_under_faults(
        "postgres",
        |port| format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        "INT",
        &[
            "-c",
            "fsync=on",
            "-c",
            "synchronous_commit=on",
            "-c",
            "full_page_writes=on",
        ],
        &["-c", "synchronous_commit=off"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restarted_under_load() {
    database_under_faults(
        "mariadb",
        |port| format!("mysql://root@127.0.0.1:{port}/locktest"),
        "TERM",
        &["--innodb-flush-log-at-trx-commit=1"],
        &["--innodb-flush-log-at-trx-commit=0"],
    )
    .await;
}

/// A waiter whose watch is served by a member cut off from the leader (its peer traffic
/// dropped; its clients still reach it) must not wait in silence: it gets the lock
/// released on the majority's side, or a retryable error saying its member has no
/// leader. The member's watches see nothing while it has no leader: unless
/// they were opened requiring one, which makes the member end them, the waiter waits
/// on a silent watch until the partition heals. The waiter knows only that member at
/// first, so its watch is surely there; the other members are added to its client
/// once the member is cut off, for its next requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_waiter_on_a_member_cut_off_from_the_leader_hears_the_release() {
    use lock_core::{DistributedLockExt as _, LockClient};
    use lock_etcd::{EtcdBackend, EtcdConfig};
    use tokio::time::Instant;

    if !containers_or_skip("etcd waiter on a member cut off from the leader") {
        return;
    }
    let cluster = Cluster::etcd(3).await.expect("an etcd cluster");
    let leader = leader(&cluster, Kind::Etcd).await;
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let third = (0..3).find(|&i| i != leader && i != follower).unwrap();
    let endpoint = |i: usize| format!("127.0.0.1:{}", cluster.nodes[i].port());
    let backend = |i: usize| {
        let config = EtcdConfig::from_url(&format!("etcd://{}", endpoint(i))).expect("valid URL");
        EtcdBackend::connect(config)
    };
    let ns = "require-leader";
    let client = |backend: EtcdBackend| {
        LockClient::builder(backend)
            .namespace(ns)
            .watchdog_lease(Duration::from_secs(30))
            .build()
            .expect("client")
    };
    let holder_backend = backend(leader).await.expect("holder connects");
    let holder = client(holder_backend.clone());
    let waiter_backend = backend(follower).await.expect("waiter connects");
    let waiter = client(waiter_backend.clone());
    let guard = holder.lock("x").unwrap().acquire().await.expect("acquire");
    let lock = waiter.lock("x").unwrap();
    let waiting = tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(90)).await });
    let started = Instant::now();
    loop {
        let mut kv = holder_backend.client().kv_client();
        let options = lock_etcd::etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let queued = kv.get(format!("{ns}/x/"), Some(options)).await;
        if queued.is_ok_and(|r| r.count() == 2) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the waiter did not queue"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The waiter's watch follows its key within milliseconds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "the waiter got in while held");

    let node = &cluster.nodes[follower];
    node.isolate_port(2380).await.expect("cut the member off");
    let cut_at = Instant::now();
    while !cluster.etcd_leaderless(follower).await {
        assert!(
            cut_at.elapsed() < Duration::from_secs(30),
            "the cut-off member still knows a leader"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in [leader, third] {
        waiter_backend
            .client()
            .add_endpoint(format!("http://{}", endpoint(i)))
            .await
            .expect("add an endpoint");
    }
    guard
        .release()
        .await
        .expect("release on the majority's side");
    let released_at = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    let waited = released_at.elapsed();
    node.heal().await.expect("heal");
    // Either the waiter got the lock through another member, or its member told it at
    // once that it has no leader (its lease can then not be kept either): a retryable
    // error, which the caller can act on. Never silence.
    match got {
        Err(_) => panic!(
            "the waiter did not hear of the release within {waited:.1?} while its member was cut off from the leader"
        ),
        Ok(task) => match task.expect("the waiting task") {
            Ok(got) => {
                println!(
                    "etcd: a waiter whose member was cut off from the leader got the lock {waited:.1?} after the release"
                );
                // Just healed, its member may not have found the leader yet: a release
                // refused as retryable leaves the lease to run out, which is allowed.
                if let Err(err) = got.release().await {
                    assert!(err.is_retryable(), "release: {err}");
                    println!("etcd: the release right after the heal was refused as retryable: {err}");
                }
            }
            Err(err) if err.is_retryable() && waited < Duration::from_secs(15) => println!(
                "etcd: a waiter whose member was cut off from the leader was told so {waited:.1?} after the release: {err}"
            ),
            Err(err) => panic!(
                "the waiter's acquire failed {waited:.1?} after the release with a final error: {err}"
            ),
        },
    }
}
