//! The fault suite: locks on real multi-node clusters in containers, under partitions,
//! pauses and kills, with a fenced store that must never accept a stale write.
//!
//! Runs with `LOCK_TEST_SERVERS=containers` (it needs Docker; images come from
//! `scripts/images`); prints one table row per topology and fault.

use std::time::Duration;

use conformance_tests::cluster::workload::{Report, Workload, WorkloadConfig};
use conformance_tests::cluster::Cluster;
use conformance_tests::server::Source;

/// The lease every client uses: short, as Jepsen's lock tests use.
const LEASE: Duration = Duration::from_secs(2);
/// How long the workload runs before the fault, and how long the fault lasts.
const BEFORE: Duration = Duration::from_secs(3);
const FAULT: Duration = Duration::from_secs(6);
/// How long after the heal the cluster has to grant again.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

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

/// What every row must show, whatever the fault.
fn check(topology: &str, fault: &str, r: &Report) {
    assert_eq!(
        r.stale_accepted, 0,
        "{topology}/{fault}: stale writes accepted"
    );
    assert_eq!(
        r.store.inversions, 0,
        "{topology}/{fault}: tokens out of grant order"
    );
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

/// The faults every topology goes through, one workload each.
const FAULTS: [&str; 5] = [
    "isolate a follower",
    "isolate the leader",
    "pause the leader",
    "kill the leader",
    "pause a holder",
];

/// Runs every fault on `cluster`, whose leader `leader` finds, printing a row each.
async fn faults<L, F>(topology: &str, cluster: &Cluster, url: &str, leader: L)
where
    L: Fn() -> F,
    F: std::future::Future<Output = Option<usize>>,
{
    for fault in FAULTS {
        let workload = Workload::start(config(url.to_owned(), &fault.replace(' ', "-")));
        tokio::time::sleep(BEFORE).await;
        let leader = leader()
            .await
            .unwrap_or_else(|| panic!("{topology}: no leader"));
        let follower = (leader + 1) % cluster.nodes.len();
        workload.fault_started();
        match fault {
            "isolate a follower" | "isolate the leader" => {
                let node = if fault.contains("leader") {
                    leader
                } else {
                    follower
                };
                cluster.nodes[node].isolate().await.expect("isolate");
                tokio::time::sleep(FAULT).await;
                cluster.nodes[node].heal().await.expect("heal");
            }
            "pause the leader" => {
                cluster.nodes[leader].pause().await.expect("pause");
                tokio::time::sleep(FAULT).await;
                cluster.nodes[leader].resume().await.expect("resume");
            }
            "kill the leader" => {
                cluster.nodes[leader].kill().await.expect("kill");
                tokio::time::sleep(FAULT).await;
                cluster.nodes[leader].restart().await.expect("restart");
            }
            "pause a holder" => {
                workload.pause_a_holder(LEASE * 2);
                tokio::time::sleep(FAULT).await;
            }
            _ => unreachable!(),
        }
        workload.fault_healed();
        let report = workload.finish(RECOVERY_LIMIT).await;
        row(topology, fault, &report);
        check(topology, fault, &report);
    }
}

fn containers_or_skip(what: &str) -> bool {
    // `RUST_LOG=lock_zookeeper=debug` shows what the locks did during a fault.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let yes = Source::from_env() == Ok(Source::Containers);
    if !yes {
        println!("SKIP {what}: LOCK_TEST_SERVERS is not `containers`");
    }
    yes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_three_members_under_faults() {
    if !containers_or_skip("etcd cluster faults") {
        return;
    }
    let cluster = Cluster::etcd(3).await.expect("an etcd cluster");
    header();
    faults("etcd, 3 members", &cluster, &cluster.etcd_url(), || {
        cluster.etcd_leader()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_three_members_under_faults() {
    if !containers_or_skip("zookeeper ensemble faults") {
        return;
    }
    let cluster = Cluster::zookeeper(3).await.expect("a zookeeper ensemble");
    // The session is the lease.
    let url = cluster.zookeeper_url(&format!("session_timeout_ms={}", LEASE.as_millis()));
    header();
    faults("ZooKeeper, 3 members", &cluster, &url, || {
        cluster.zookeeper_leader()
    })
    .await;
}
