//! A Redis Cluster for tests: six redis-server processes on free loopback ports (three
//! primaries, each with a replica), joined by `redis-cli --cluster create`, with their
//! data in one temporary directory and killed by PID when dropped.
//!
//! Local processes also when `LOCK_TEST_SERVERS=containers`: cluster nodes hand
//! clients the addresses they announce (`MOVED`, `CLUSTER SLOTS`), so clients and
//! nodes must share one network view, and loopback is the one every machine has.
//!
//! ```no_run
//! use conformance_tests::server::redis_cluster::ClusterDeployment;
//!
//! # async fn demo() -> Result<(), String> {
//! let cluster = ClusterDeployment::start().await?;
//! println!("locks at {}", cluster.url());
//! let owner = cluster.owner_of("ns:job").await?;
//! let replica = cluster.replica_of(owner).await?;
//! cluster.failover(replica).await?;
//! assert_eq!(cluster.wait_for_new_owner("ns:job", owner).await?, replica);
//! # Ok(()) }
//! ```

use std::time::Duration;

use lock_redis::redis;
use tokio::time::Instant;

use super::redis_procs::{data_args, query, tls_args, Proc};

/// Three primaries, each with one replica.
const NODES: usize = 6;
/// How long a node must be silent before the others call it failed.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long the cluster may take to form, or to fail over.
const LIMIT: Duration = Duration::from_secs(60);

/// A running cluster.
#[derive(Debug)]
pub struct ClusterDeployment {
    nodes: Vec<Proc>,
    /// With TLS: each node's TLS port, beside the plain one the harness uses.
    tls_ports: Option<Vec<u16>>,
    dir: tempfile::TempDir,
}

/// The primaries' slot ranges and replicas, from `CLUSTER SLOTS`:
/// `(first slot, last slot, primary port, replica ports)`.
type Slots = Vec<(i64, i64, u16, Vec<u16>)>;

fn parse_slots(reply: &[redis::Value]) -> Slots {
    let port = |node: &redis::Value| match node {
        redis::Value::Array(fields) => match fields.get(1) {
            Some(redis::Value::Int(port)) => u16::try_from(*port).ok(),
            _ => None,
        },
        _ => None,
    };
    reply
        .iter()
        .filter_map(|range| {
            let redis::Value::Array(fields) = range else {
                return None;
            };
            let (Some(redis::Value::Int(start)), Some(redis::Value::Int(end))) =
                (fields.first(), fields.get(1))
            else {
                return None;
            };
            let primary = port(fields.get(2)?)?;
            let replicas = fields[3..].iter().filter_map(port).collect();
            Some((*start, *end, primary, replicas))
        })
        .collect()
}

impl ClusterDeployment {
    /// Starts six nodes, joins them into a cluster with one replica per primary, and
    /// waits until every node sees all 16384 slots served and every replica is in sync.
    ///
    /// # Errors
    /// What did not start or did not get ready, with the logs.
    pub async fn start() -> Result<Self, String> {
        Self::start_with(false).await
    }

    /// [`start`](Self::start), with every node also serving clients over TLS on a port
    /// of its own (asking them for a certificate of the test CA, see
    /// [`test_certs`](super::tls::test_certs)) and the cluster bus and replication over
    /// TLS. Nodes tell TLS clients their TLS ports (`CLUSTER SLOTS`, `MOVED`); the
    /// harness's own queries keep to the plain ports. [`tls_url`](Self::tls_url) is the
    /// `rediss+cluster://` URL.
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub async fn start_tls() -> Result<Self, String> {
        Self::start_with(true).await
    }

    async fn start_with(tls: bool) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("lock-test-redis-cluster-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let mut nodes = Vec::new();
        let mut tls_ports = Vec::new();
        for i in 0..NODES {
            // The TLS port the last start attempt asked for.
            let tls_port = std::sync::Mutex::new(0);
            let node_args = |port: u16, bus: u16| {
                let mut args = data_args(port, dir.path(), None);
                let conf = dir.path().join(format!("nodes-{port}.conf"));
                args.extend([
                    "--cluster-enabled".into(),
                    "yes".into(),
                    "--cluster-config-file".into(),
                    conf.display().to_string(),
                    "--cluster-port".into(),
                    bus.to_string(),
                    "--cluster-node-timeout".into(),
                    NODE_TIMEOUT.as_millis().to_string(),
                ]);
                if tls {
                    let port = super::free_port().map_err(|e| e.to_string())?;
                    *tls_port.lock().unwrap_or_else(|p| p.into_inner()) = port;
                    args.extend(tls_args(port));
                    args.extend(["--tls-cluster".into(), "yes".into()]);
                }
                Ok(args)
            };
            nodes.push(Proc::start(&format!("node{i}"), dir.path(), node_args).await?);
            tls_ports.push(tls_port.into_inner().unwrap_or_else(|p| p.into_inner()));
        }
        let tls_ports = tls.then_some(tls_ports);
        let mut cluster = ClusterDeployment {
            nodes,
            tls_ports,
            dir,
        };
        cluster.create().await?;
        cluster.wait(|c| Box::pin(c.formed())).await?;
        Ok(cluster)
    }

    async fn create(&self) -> Result<(), String> {
        let mut cmd = tokio::process::Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for node in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", node.port));
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = cmd
            .output()
            .await
            .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    async fn wait(
        &mut self,
        ready: impl for<'a> Fn(
            &'a Self,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>,
        >,
    ) -> Result<(), String> {
        let started = Instant::now();
        loop {
            for node in &mut self.nodes {
                if node.exited() {
                    return Err(format!("{} exited; {}", node.name, node.log_tail()));
                }
            }
            let why = match ready(self).await {
                Ok(true) => return Ok(()),
                Ok(false) => "not formed yet".to_owned(),
                Err(err) => err,
            };
            if started.elapsed() > LIMIT {
                return Err(format!(
                    "the Redis Cluster was not ready within {LIMIT:?}: {why}\n{}",
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn formed(&self) -> Result<bool, String> {
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            let info: String = query(node.port, redis::cmd("CLUSTER").arg("INFO")).await?;
            let every_node = format!("cluster_known_nodes:{NODES}");
            if !info.contains("cluster_state:ok")
                || !info.contains("cluster_slots_ok:16384")
                || !info.contains(&every_node)
            {
                return Ok(false);
            }
            let replication: String =
                query(node.port, redis::cmd("INFO").arg("replication")).await?;
            if replication.contains("role:slave") && !replication.contains("master_link_status:up")
            {
                return Ok(false);
            }
        }
        Ok(self.slots().await?.len() >= 3)
    }

    /// The logs' last lines, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(Proc::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The URL clients use: `redis+cluster://` with every node.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The URL of a client over TLS: `rediss+cluster://` with every node's TLS port and
    /// the `tls_*` settings of the test client certificate; `None` unless started by
    /// [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> Option<String> {
        let ports = self.tls_ports.as_ref()?;
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        Some(format!(
            "rediss+cluster://{}?{}",
            nodes.join(","),
            super::tls::test_certs().url_settings()
        ))
    }

    /// The temporary directory everything lives in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    async fn slots(&self) -> Result<Slots, String> {
        let mut last = String::from("no node alive");
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            match query::<Vec<redis::Value>>(node.port, redis::cmd("CLUSTER").arg("SLOTS")).await {
                Ok(reply) => return Ok(parse_slots(&reply)),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    /// The ports of the primaries serving slots now.
    ///
    /// # Errors
    /// No node answered.
    pub async fn primaries(&self) -> Result<Vec<u16>, String> {
        let mut ports: Vec<u16> = self.slots().await?.into_iter().map(|s| s.2).collect();
        ports.sort_unstable();
        ports.dedup();
        Ok(ports)
    }

    /// The port of the primary serving `key`'s slot now.
    ///
    /// # Errors
    /// No node answered, or no primary serves the slot.
    pub async fn owner_of(&self, key: &str) -> Result<u16, String> {
        let port = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .map(|n| n.port);
        let slot: i64 = query(
            port.ok_or("no node alive")?,
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
        )
        .await?;
        self.slots()
            .await?
            .into_iter()
            .find(|(start, end, _, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, primary, _)| primary)
            .ok_or_else(|| format!("no primary serves slot {slot}"))
    }

    /// A replica of the primary on `primary` (waiting, up to a minute, until the
    /// node asked has heard of one).
    ///
    /// # Errors
    /// No node answered, or it has no replica.
    pub async fn replica_of(&self, primary: u16) -> Result<u16, String> {
        let started = Instant::now();
        loop {
            let replica = self
                .slots()
                .await?
                .into_iter()
                .find(|(_, _, p, replicas)| *p == primary && !replicas.is_empty())
                .map(|(_, _, _, replicas)| replicas[0]);
            match replica {
                Some(replica) => return Ok(replica),
                None if started.elapsed() > LIMIT => {
                    return Err(format!("no replica of {primary}"))
                }
                None => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Promotes the replica on `replica` (`CLUSTER FAILOVER`: its primary hands over
    /// its slots once the replica has caught up).
    ///
    /// # Errors
    /// What the node said.
    pub async fn failover(&self, replica: u16) -> Result<(), String> {
        let _: String = query(replica, redis::cmd("CLUSTER").arg("FAILOVER")).await?;
        Ok(())
    }

    /// Kills the node on `port` (SIGKILL); its replica takes over after about
    /// [`NODE_TIMEOUT`].
    pub fn kill(&mut self, port: u16) {
        if let Some(node) = self.nodes.iter_mut().find(|n| n.port == port) {
            node.kill();
        }
    }

    /// Waits until a primary other than `old` serves `key`'s slot.
    ///
    /// # Errors
    /// None within a minute.
    pub async fn wait_for_new_owner(&self, key: &str, old: u16) -> Result<u16, String> {
        let started = Instant::now();
        loop {
            if let Ok(owner) = self.owner_of(key).await {
                if owner != old {
                    return Ok(owner);
                }
            }
            if started.elapsed() > LIMIT {
                return Err(format!(
                    "{key} still served by {old} after {LIMIT:?}\n{}",
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
