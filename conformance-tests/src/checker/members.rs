//! Faults on one member of a cluster during a checker run, on the topologies of the
//! fault suite (`tests/cluster.rs`): the leader or a follower cut off, the leader
//! frozen, the leader killed and started again with its data. On RedLock's masters,
//! which elect nobody, the first master takes the leader's faults.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::gen::{MemberFault, MemberPlan};
use super::history::{History, What};
use crate::cluster::Cluster;

/// How long the cluster has to have a leader: before a fault (to know whom it acts on)
/// and after its heal (so the next run starts on a whole cluster).
const LEADER_LIMIT: Duration = Duration::from_secs(45);

/// The longest one fault's or heal's step may take (a restart waits up to a minute
/// for the member to serve).
const STEP_LIMIT: Duration = Duration::from_secs(90);

/// How long one leader must lead, with every member serving, before a healed cluster
/// counts as whole again.
const SETTLED: Duration = Duration::from_secs(2);

/// How a cluster elects, and so how to ask it who leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consensus {
    /// An etcd cluster (raft).
    Etcd,
    /// A ZooKeeper ensemble (zab).
    ZooKeeper,
    /// Masters that elect nobody, each deciding alone (RedLock's): the first counts as
    /// the leader, the second as a follower.
    Independent,
}

/// A cluster whose members a run may fault, one at a time.
#[derive(Debug)]
pub struct Members {
    cluster: Arc<Cluster>,
    consensus: Consensus,
}

impl Members {
    /// The members of `cluster`, which elects as `consensus` says.
    pub fn new(cluster: Arc<Cluster>, consensus: Consensus) -> Self {
        Members { cluster, consensus }
    }

    async fn leader(&self) -> Option<usize> {
        match self.consensus {
            Consensus::Etcd => self.cluster.etcd_leader().await,
            Consensus::ZooKeeper => self.cluster.zookeeper_leader().await,
            Consensus::Independent => Some(0),
        }
    }

    /// The leader, once there is one, within [`LEADER_LIMIT`].
    async fn elected(&self) -> Result<usize, String> {
        let since = Instant::now();
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(leader);
            }
            if since.elapsed() > LEADER_LIMIT {
                return Err(format!("the cluster had no leader for {LEADER_LIMIT:?}"));
            }
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits, within [`LEADER_LIMIT`], until every member serves and one leader has
    /// led for [`SETTLED`]: a member back from a partition may call an election a
    /// moment after it rejoins, and a run that starts then fails to make its clients.
    async fn settled(&self) -> Result<(), String> {
        let since = Instant::now();
        let mut steady: Option<(usize, Instant)> = None;
        loop {
            let mut serving = true;
            for node in &self.cluster.nodes {
                serving &= node.serves().await;
            }
            let leader = self.leader().await;
            steady = match (serving, leader, steady) {
                (true, Some(now), Some((was, from))) if now == was => Some((was, from)),
                (true, Some(now), _) => Some((now, Instant::now())),
                _ => None,
            };
            if steady.is_some_and(|(_, from)| from.elapsed() >= SETTLED) {
                return Ok(());
            }
            if since.elapsed() > LEADER_LIMIT {
                return Err(format!(
                    "the cluster did not settle under one leader within {LEADER_LIMIT:?}"
                ));
            }
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// Runs `plan` into a run whose history is `history`: faults the member at its
    /// time, heals it when the fault's time is up, and returns once the cluster has
    /// settled again. An error leaves the cluster as it is: later runs would fail on it.
    pub(crate) async fn run(
        &self,
        history: Arc<History>,
        record_as: usize,
        plan: MemberPlan,
    ) -> Result<(), String> {
        sleep(Duration::from_millis(plan.at_ms)).await;
        let leader = self.elected().await?;
        let nodes = &self.cluster.nodes;
        let member = match plan.fault {
            MemberFault::IsolateFollower => (leader + 1) % nodes.len(),
            _ => leader,
        };
        let node = &nodes[member];
        let fault = format!("{} (member {member})", describe(plan.fault));
        history.record(
            record_as,
            What::Member {
                fault: fault.clone(),
                ms: plan.for_ms,
            },
        );
        let failed = |what: &str, err: String| {
            let message = format!("could not {what} for '{fault}': {err}");
            history.record(record_as, What::Note(message.clone()));
            Err(message)
        };
        let done = bounded(async {
            match plan.fault {
                MemberFault::IsolateLeader | MemberFault::IsolateFollower => node.isolate().await,
                MemberFault::PauseLeader => node.pause().await,
                MemberFault::KillLeader => node.kill().await,
            }
        })
        .await;
        let heal = || {
            bounded(async {
                match plan.fault {
                    MemberFault::IsolateLeader | MemberFault::IsolateFollower => node.heal().await,
                    MemberFault::PauseLeader => node.resume().await,
                    MemberFault::KillLeader => node.restart().await,
                }
            })
        };
        if let Err(err) = done {
            // Half done perhaps (one of two firewall rules): undone as far as it goes.
            let _ = heal().await;
            return failed("start the fault", err);
        }
        sleep(Duration::from_millis(plan.for_ms)).await;
        // Once more if the first heal failed: a member left faulted fails every
        // later run.
        let healed = match heal().await {
            Err(_) => heal().await,
            healed => healed,
        };
        if let Err(err) = healed {
            return failed("heal", err);
        }
        history.record(record_as, What::MemberBack { fault });
        self.settled().await
    }
}

/// `step` (a docker command, and for a restart the wait until the member serves),
/// within [`STEP_LIMIT`]: a wedged docker must not hang the run.
async fn bounded(
    step: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(), String> {
    tokio::time::timeout(STEP_LIMIT, step)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {STEP_LIMIT:?}")))
}

fn describe(fault: MemberFault) -> &'static str {
    match fault {
        MemberFault::IsolateLeader => "the leader cut off",
        MemberFault::IsolateFollower => "a follower cut off",
        MemberFault::PauseLeader => "the leader frozen",
        MemberFault::KillLeader => "the leader killed, to start again",
    }
}
