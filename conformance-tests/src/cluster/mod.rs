//! Multi-node server clusters in containers, for the fault suite (`tests/cluster.rs`).
//!
//! Each cluster gets a private Docker network of its own (created and removed by
//! testcontainers); its nodes find each other there by container name, and each node's
//! client port is published on 127.0.0.1 only. The faults act on one node at a time and
//! are healed by the test:
//!
//! * [`Node::isolate`] drops every packet on the node's network interface (iptables in
//!   its own network namespace), so it is cut off from its peers and from the clients;
//! * [`Node::pause`] freezes it (`docker pause`);
//! * [`Node::kill`] kills it, and [`Node::restart`] starts it again with its data.

pub mod fenced;
pub mod vip;
pub mod workload;

use std::time::Duration;

use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::time::Instant;

use crate::server::container::{image_of, loopback_request, remove_by_name};
use crate::server::{free_port, Probe, START_ATTEMPTS};

/// How long a node may take to serve after a start or restart.
const NODE_READY_LIMIT: Duration = Duration::from_secs(60);

/// One server of a cluster.
#[derive(Debug)]
pub struct Node {
    /// Its container name, which is also its host name on the cluster's network.
    pub name: String,
    container: ContainerAsync<GenericImage>,
    port: u16,
    probe: Probe,
}

impl Node {
    /// The host port its clients use (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether it answers its protocol's readiness probe now.
    pub async fn serves(&self) -> bool {
        self.probe.ready(self.port).await
    }

    async fn wait_serving(&self, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        while !self.serves().await {
            if started.elapsed() > limit {
                return Err(format!("{} not serving within {limit:?}", self.name));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn docker(&self, args: &[&str]) -> Result<(), String> {
        let out = Command::new("docker")
            .args(args)
            .output()
            .await
            .map_err(|e| format!("docker {args:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "docker {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Cuts it off from its peers and its clients: every packet in or out of its
    /// network interface is dropped (connections hang, as in a real partition).
    ///
    /// # Errors
    /// What iptables or docker said.
    pub async fn isolate(&self) -> Result<(), String> {
        self.docker(&[
            "exec",
            self.container.id(),
            "sh",
            "-c",
            "iptables -I INPUT -i eth0 -j DROP && iptables -I OUTPUT -o eth0 -j DROP",
        ])
        .await
    }

    /// Cuts its traffic on one of its container's ports, both ways, and nothing else:
    /// for an etcd member, its peer port (2380) cuts it off from the other members
    /// while its clients still reach it.
    ///
    /// # Errors
    /// What iptables or docker said.
    pub async fn isolate_port(&self, port: u16) -> Result<(), String> {
        let rules = ["INPUT -i eth0", "OUTPUT -o eth0"]
            .iter()
            .flat_map(|chain| {
                ["--dport", "--sport"]
                    .map(|side| format!("iptables -I {chain} -p tcp {side} {port} -j DROP"))
            })
            .collect::<Vec<_>>()
            .join(" && ");
        self.docker(&["exec", self.container.id(), "sh", "-c", &rules])
            .await
    }

    /// Ends [`isolate`](Self::isolate) and [`isolate_port`](Self::isolate_port).
    ///
    /// # Errors
    /// What iptables or docker said.
    pub async fn heal(&self) -> Result<(), String> {
        self.docker(&[
            "exec",
            self.container.id(),
            "sh",
            "-c",
            "iptables -F INPUT && iptables -F OUTPUT",
        ])
        .await
    }

    /// Freezes every process of the node.
    ///
    /// # Errors
    /// What docker said.
    pub async fn pause(&self) -> Result<(), String> {
        self.docker(&["pause", self.container.id()]).await
    }

    /// Thaws it after [`pause`](Self::pause).
    ///
    /// # Errors
    /// What docker said.
    pub async fn resume(&self) -> Result<(), String> {
        self.docker(&["unpause", self.container.id()]).await
    }

    /// Stops the server the way `signal` asks it to (PostgreSQL's fast shutdown is
    /// `INT`, MariaDB's normal one `TERM`) and waits until it has exited; its data stays.
    ///
    /// # Errors
    /// What docker said, or it did not exit within a minute.
    pub async fn stop_with(&self, signal: &str) -> Result<(), String> {
        self.docker(&["kill", "--signal", signal, self.container.id()])
            .await?;
        let waited = tokio::time::timeout(
            NODE_READY_LIMIT,
            self.docker(&["wait", self.container.id()]),
        )
        .await;
        waited.map_err(|_| format!("{} did not stop on SIG{signal}", self.name))?
    }

    /// Sends one command to a Redis node and returns its reply as text.
    ///
    /// # Errors
    /// No reply within 2 s.
    pub async fn redis_command(&self, args: &[&str]) -> Result<String, String> {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        let ask = async {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .map_err(|e| e.to_string())?;
            stream
                .write_all(request.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut reply = vec![0u8; 64 * 1024];
            let n = stream.read(&mut reply).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(String::from_utf8_lossy(&reply[..n]).into_owned())
        };
        tokio::time::timeout(Duration::from_secs(2), ask)
            .await
            .map_err(|_| format!("{}: no reply to {args:?}", self.name))?
    }

    /// Kills the node at once (SIGKILL); its data stays.
    ///
    /// # Errors
    /// What docker said.
    pub async fn kill(&self) -> Result<(), String> {
        self.docker(&["kill", self.container.id()]).await
    }

    /// Starts it again with its data, after [`kill`](Self::kill), and waits until it
    /// serves.
    ///
    /// # Errors
    /// What docker said, or it did not serve in time.
    pub async fn restart(&self) -> Result<(), String> {
        self.docker(&["start", self.container.id()]).await?;
        self.wait_serving(NODE_READY_LIMIT).await
    }
}

/// A cluster of nodes on a private network.
#[derive(Debug)]
pub struct Cluster {
    /// Its nodes, in the order they were made.
    pub nodes: Vec<Node>,
}

/// A name no other run uses, for networks and containers.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

impl Cluster {
    /// Starts the nodes `specs` describes (name, command, environment) from `image` on
    /// one new network, each with `container_port` published, and waits until every
    /// node serves.
    async fn start(
        image: &'static str,
        container_port: u16,
        probe: Probe,
        specs: Vec<NodeSpec>,
        network: &str,
    ) -> Result<Cluster, String> {
        let (name, tag) = image_of(image).await?;
        let mut nodes = Vec::new();
        for mut spec in specs {
            let mut attempt = 1;
            let container = loop {
                let mut request = loopback_request(&name, &tag, spec.port, container_port, image)
                    .with_network(network)
                    .with_container_name(&spec.name)
                    .with_cap_add("NET_ADMIN")
                    .with_cmd(spec.args.clone());
                for (key, value) in &spec.env {
                    request = request.with_env_var(*key, value.clone());
                }
                match request.start().await {
                    Ok(container) => break container,
                    Err(e) => {
                        // Created all the same: it goes. A free port can be taken
                        // between choosing it and Docker binding it (as the local port
                        // of an outgoing connection): the node tries another.
                        remove_by_name(&spec.name);
                        let error = format!("could not start {}: {e}", spec.name);
                        if attempt >= START_ATTEMPTS || !error.contains("port is already allocated")
                        {
                            return Err(error);
                        }
                        attempt += 1;
                        spec.move_to(free_port().map_err(|e| format!("free port: {e}"))?);
                    }
                }
            };
            nodes.push(Node {
                name: spec.name,
                container,
                port: spec.port,
                probe,
            });
        }
        for node in &nodes {
            node.wait_serving(NODE_READY_LIMIT).await?;
        }
        Ok(Cluster { nodes })
    }

    /// An etcd cluster of `members` members.
    ///
    /// # Errors
    /// Why it did not start.
    pub async fn etcd(members: usize) -> Result<Cluster, String> {
        let network = unique("locks-etcd");
        let names: Vec<String> = (1..=members).map(|i| format!("{network}-{i}")).collect();
        let cluster = names
            .iter()
            .map(|n| format!("{n}=http://{n}:2380"))
            .collect::<Vec<_>>()
            .join(",");
        let mut specs = Vec::new();
        for name in &names {
            let port = free_port().map_err(|e| format!("free port: {e}"))?;
            specs.push(NodeSpec {
                name: name.clone(),
                port,
                args: vec![port.to_string()],
                env: vec![
                    ("NODE", name.clone()),
                    ("PEER_URL", format!("http://{name}:2380")),
                    ("CLUSTER", cluster.clone()),
                ],
            });
        }
        let cluster = Cluster::start("etcd", 2379, Probe::Etcd, specs, &network).await?;
        Ok(cluster)
    }

    /// A ZooKeeper ensemble of `members` members.
    ///
    /// # Errors
    /// Why it did not start.
    pub async fn zookeeper(members: usize) -> Result<Cluster, String> {
        let network = unique("locks-zk");
        let names: Vec<String> = (1..=members).map(|i| format!("{network}-{i}")).collect();
        let servers = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("server.{}={n}:2888:3888", i + 1))
            .collect::<Vec<_>>()
            .join(" ");
        let mut specs = Vec::new();
        for (i, name) in names.iter().enumerate() {
            specs.push(NodeSpec {
                name: name.clone(),
                port: free_port().map_err(|e| format!("free port: {e}"))?,
                args: Vec::new(),
                env: vec![("MYID", (i + 1).to_string()), ("SERVERS", servers.clone())],
            });
        }
        Cluster::start("zookeeper", 2181, Probe::ZooKeeper, specs, &network).await
    }

    /// `masters` independent Redis servers, for RedLock, each persisting every write
    /// before it answers (`appendfsync always`), as RedLock requires of a master that
    /// restarts.
    ///
    /// # Errors
    /// Why it did not start.
    pub async fn redis_masters(masters: usize) -> Result<Cluster, String> {
        let network = unique("locks-redis");
        let mut specs = Vec::new();
        for i in 1..=masters {
            specs.push(NodeSpec {
                name: format!("{network}-{i}"),
                port: free_port().map_err(|e| format!("free port: {e}"))?,
                args: ["--appendonly", "yes", "--appendfsync", "always"]
                    .map(String::from)
                    .to_vec(),
                env: Vec::new(),
            });
        }
        Cluster::start("redis", 6379, Probe::Redis, specs, &network).await
    }

    /// A Redis primary and one replica of it (asynchronous replication, as Redis
    /// replicates), once the replica is in sync.
    ///
    /// # Errors
    /// Why it did not start or sync.
    pub async fn redis_replicated() -> Result<Cluster, String> {
        let network = unique("locks-redis-repl");
        let primary = format!("{network}-1");
        let specs = vec![
            NodeSpec {
                name: primary.clone(),
                port: free_port().map_err(|e| format!("free port: {e}"))?,
                args: Vec::new(),
                env: Vec::new(),
            },
            NodeSpec {
                name: format!("{network}-2"),
                port: free_port().map_err(|e| format!("free port: {e}"))?,
                args: vec!["--replicaof".into(), primary, "6379".into()],
                env: Vec::new(),
            },
        ];
        let cluster = Cluster::start("redis", 6379, Probe::Redis, specs, &network).await?;
        let started = Instant::now();
        loop {
            let info = cluster.nodes[1]
                .redis_command(&["INFO", "replication"])
                .await
                .unwrap_or_default();
            if info.contains("master_link_status:up") {
                return Ok(cluster);
            }
            if started.elapsed() > NODE_READY_LIMIT {
                return Err(format!("the replica did not sync: {info}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The RedLock URL naming every master.
    pub fn redlock_url(&self) -> String {
        format!("redlock://{}", self.endpoints())
    }

    /// One server of `image` (`postgres` or `mariadb`), to stop and restart, with
    /// `args` passed to the server (its durability settings).
    ///
    /// # Errors
    /// Why it did not start.
    pub async fn single(image: &'static str, args: &[&str]) -> Result<Cluster, String> {
        let (container_port, probe) = match image {
            "postgres" => (5432, Probe::Postgres),
            "mariadb" => (3306, Probe::MariaDb),
            other => return Err(format!("no single-server topology for {other}")),
        };
        let network = unique(&format!("locks-{image}"));
        let spec = NodeSpec {
            name: format!("{network}-1"),
            port: free_port().map_err(|e| format!("free port: {e}"))?,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
        };
        Cluster::start(image, container_port, probe, vec![spec], &network).await
    }

    /// The ZooKeeper URL naming every member, with `options` (`session_timeout_ms=...`).
    pub fn zookeeper_url(&self, options: &str) -> String {
        format!("zk://{}?{options}", self.endpoints())
    }

    /// The index of the ZooKeeper leader (`srvr` says `Mode: leader`).
    pub async fn zookeeper_leader(&self) -> Option<usize> {
        for (i, node) in self.nodes.iter().enumerate() {
            if four_letter(node.port, "srvr")
                .await
                .is_some_and(|r| r.contains("Mode: leader"))
            {
                return Some(i);
            }
        }
        None
    }

    /// `127.0.0.1:port` of every node, comma-separated.
    fn endpoints(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The etcd URL naming every member.
    pub fn etcd_url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// Whether the etcd member at `index` answers and says it knows no leader.
    pub async fn etcd_leaderless(&self, index: usize) -> bool {
        let Some(reply) = etcd_status_reply(self.nodes[index].port).await else {
            return false;
        };
        json_field(&reply, "member_id").is_some()
            && json_field(&reply, "leader").is_none_or(|leader| leader == "0")
    }

    /// The index of the etcd leader, as the first member that answers says.
    pub async fn etcd_leader(&self) -> Option<usize> {
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some((member, leader)) = etcd_status(node.port).await {
                if member == leader {
                    return Some(i);
                }
                // Another member leads: find which by asking each.
                for (j, other) in self.nodes.iter().enumerate() {
                    if etcd_status(other.port)
                        .await
                        .is_some_and(|(m, _)| m == leader)
                    {
                        return Some(j);
                    }
                }
            }
        }
        None
    }
}

/// One node to start.
struct NodeSpec {
    name: String,
    port: u16,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

impl NodeSpec {
    /// Publishes the node on `port` instead, in its arguments and environment too.
    fn move_to(&mut self, port: u16) {
        let (old, new) = (self.port.to_string(), port.to_string());
        for value in self
            .args
            .iter_mut()
            .chain(self.env.iter_mut().map(|(_, v)| v))
        {
            if *value == old {
                value.clone_from(&new);
            }
        }
        self.port = port;
    }
}

/// `(member id, leader id)` from etcd's status call on `port` (its JSON gateway).
async fn etcd_status(port: u16) -> Option<(String, String)> {
    let reply = etcd_status_reply(port).await?;
    Some((
        json_field(&reply, "member_id")?,
        json_field(&reply, "leader")?,
    ))
}

/// The raw answer of etcd's status call on `port` (its JSON gateway).
async fn etcd_status_reply(port: u16) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let body = "{}";
        let request = format!(
            "POST /v3/maintenance/status HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply)
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// A ZooKeeper four-letter word's answer from `port`.
async fn four_letter(port: u16, word: &str) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream.write_all(word.as_bytes()).await.ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply)
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// The string value of the first `"field":"value"` in `json`.
fn json_field(json: &str, field: &str) -> Option<String> {
    let at = json.find(&format!("\"{field}\":\""))? + field.len() + 4;
    let end = json[at..].find('"')?;
    Some(json[at..at + end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::json_field;

    #[test]
    fn reads_etcd_status_fields() {
        let reply = r#"{"header":{"cluster_id":"1","member_id":"42","revision":"7"},"version":"3.4.23","leader":"42","raftIndex":"9"}"#;
        assert_eq!(json_field(reply, "member_id").as_deref(), Some("42"));
        assert_eq!(json_field(reply, "leader").as_deref(), Some("42"));
        assert_eq!(json_field(reply, "absent"), None);
    }
}
