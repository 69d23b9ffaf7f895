//! A Sentinel-managed Redis deployment for tests: one primary, its replicas and three
//! sentinels, all redis-server processes on free loopback ports with their data in
//! one temporary directory, killed by PID when dropped.
//!
//! They run as local processes also when `LOCK_TEST_SERVERS=containers`: a sentinel
//! hands clients the primary's address as the sentinel itself reaches it, so clients
//! and sentinels must share one network view, and loopback is the one every machine
//! has.
//!
//! ```no_run
//! use conformance_tests::server::sentinel::SentinelDeployment;
//!
//! # async fn demo() -> Result<(), String> {
//! let deployment = SentinelDeployment::start(1).await?;
//! println!("locks at {}", deployment.url());
//! let old = deployment.primary_port().await?;
//! deployment.failover().await?;
//! let new = deployment.wait_for_new_primary(old).await?;
//! assert_ne!(old, new);
//! # Ok(()) }
//! ```

use std::time::Duration;

use lock_redis::redis;
use tokio::time::Instant;

use super::redis_procs::{data_args, query, tls_args, Proc};

/// The Sentinel service name the deployment's URL names.
pub const SERVICE: &str = "locks";
/// How many sentinels watch the primary; two must agree that it is down.
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
/// How long a primary must be silent before the sentinels call it down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);
/// How long everything may take to start and find each other.
const READY_LIMIT: Duration = Duration::from_secs(60);
/// How long a failover may take, from the call or the kill to the new primary.
const FAILOVER_LIMIT: Duration = Duration::from_secs(60);

/// A primary, `replicas` replicas and three sentinels, started and ready.
#[derive(Debug)]
pub struct SentinelDeployment {
    /// Primary first, then the replicas.
    data: Vec<Proc>,
    sentinels: Vec<Proc>,
    /// With TLS: the TLS port of each data node (in `data`'s order) and sentinel.
    tls: Option<TlsPorts>,
    dir: tempfile::TempDir,
}

/// The TLS ports of a deployment started by [`SentinelDeployment::start_tls`].
#[derive(Debug)]
struct TlsPorts {
    data: Vec<u16>,
    sentinels: Vec<u16>,
}

impl SentinelDeployment {
    /// Starts the primary, `replicas` replicas and the sentinels, and waits until every
    /// replica is in sync and every sentinel knows the replicas and the other
    /// sentinels (so a failover can be elected).
    ///
    /// # Errors
    /// What did not start or did not get ready, with the logs.
    pub async fn start(replicas: usize) -> Result<Self, String> {
        Self::start_with(replicas, false).await
    }

    /// [`start`](Self::start), with every data node and sentinel also serving clients
    /// over TLS on a port of its own (asking them for a certificate of the test CA,
    /// see [`test_certs`](super::tls::test_certs)), replication and the sentinels'
    /// connections to the data nodes over TLS, so the sentinels name the primary's TLS
    /// port. The harness's own queries keep to the plain ports;
    /// [`tls_url`](Self::tls_url) is the `rediss+sentinel://` URL.
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub async fn start_tls(replicas: usize) -> Result<Self, String> {
        Self::start_with(replicas, true).await
    }

    async fn start_with(replicas: usize, tls: bool) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("lock-test-redis-sentinel-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        // The TLS port each start attempt asked for; the last one's stands.
        let tls_port = std::sync::Mutex::new(0);
        let take_tls_port = || -> Result<Option<u16>, String> {
            if !tls {
                return Ok(None);
            }
            let port = super::free_port().map_err(|e| e.to_string())?;
            *tls_port.lock().unwrap_or_else(|p| p.into_inner()) = port;
            Ok(Some(port))
        };
        let last_tls_port = || *tls_port.lock().unwrap_or_else(|p| p.into_inner());
        let mut tls_data = Vec::new();
        let primary = Proc::start("primary", dir.path(), |port, _| {
            let mut args = data_args(port, dir.path(), None);
            if let Some(tls_port) = take_tls_port()? {
                args.extend(tls_args(tls_port));
            }
            Ok(args)
        })
        .await?;
        tls_data.push(last_tls_port());
        // Replicas and sentinels reach the primary where clients do: on its TLS port.
        let primary_port = if tls { last_tls_port() } else { primary.port };
        let mut data = vec![primary];
        for i in 0..replicas {
            let replica = Proc::start(&format!("replica{i}"), dir.path(), |port, _| {
                let mut args = data_args(port, dir.path(), Some(primary_port));
                if let Some(tls_port) = take_tls_port()? {
                    args.extend(tls_args(tls_port));
                }
                Ok(args)
            })
            .await?;
            tls_data.push(last_tls_port());
            data.push(replica);
        }
        let mut sentinels = Vec::new();
        let mut tls_sentinels = Vec::new();
        for i in 0..SENTINELS {
            let sentinel_args = |port: u16, _| {
                let conf = dir.path().join(format!("sentinel{i}.conf"));
                let mut text = format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                     sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {QUORUM}\n\
                     sentinel down-after-milliseconds {SERVICE} {down}\n\
                     sentinel failover-timeout {SERVICE} 10000\n\
                     sentinel parallel-syncs {SERVICE} 1\n",
                    dir = dir.path().display(),
                    down = DOWN_AFTER.as_millis(),
                );
                if let Some(tls_port) = take_tls_port()? {
                    for pair in tls_args(tls_port).chunks(2) {
                        text.push_str(&format!(
                            "{} {}\n",
                            pair[0].trim_start_matches("--"),
                            pair[1]
                        ));
                    }
                }
                std::fs::write(&conf, text).map_err(|e| format!("sentinel config: {e}"))?;
                Ok(vec![conf.display().to_string(), "--sentinel".into()])
            };
            sentinels.push(Proc::start(&format!("sentinel{i}"), dir.path(), sentinel_args).await?);
            tls_sentinels.push(last_tls_port());
        }
        let tls = tls.then_some(TlsPorts {
            data: tls_data,
            sentinels: tls_sentinels,
        });
        let mut deployment = SentinelDeployment {
            data,
            sentinels,
            tls,
            dir,
        };
        deployment.wait_ready(replicas).await?;
        Ok(deployment)
    }

    async fn wait_ready(&mut self, replicas: usize) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let mut why = String::new();
            for proc in self.data.iter_mut().chain(self.sentinels.iter_mut()) {
                if proc.exited() {
                    return Err(format!(
                        "{} exited at start; {}",
                        proc.name,
                        proc.log_tail()
                    ));
                }
            }
            match self.ready_now(replicas).await {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    why.push_str("sentinels have not found each other and the replicas yet")
                }
                Err(err) => why = err,
            }
            if started.elapsed() > READY_LIMIT {
                return Err(format!(
                    "the Sentinel deployment was not ready within {READY_LIMIT:?}: {why}\n{}",
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready_now(&self, replicas: usize) -> Result<bool, String> {
        for replica in &self.data[1..] {
            let info: String = query(replica.port, redis::cmd("INFO").arg("replication")).await?;
            if !info.contains("master_link_status:up") {
                return Ok(false);
            }
        }
        for sentinel in &self.sentinels {
            let fields: Vec<String> = query(
                sentinel.port,
                redis::cmd("SENTINEL").arg("MASTER").arg(SERVICE),
            )
            .await?;
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| kv[0] == name)
                    .and_then(|kv| kv.get(1))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0)
            };
            if field("num-slaves") < replicas || field("num-other-sentinels") < SENTINELS - 1 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The logs' last lines, for failure messages.
    pub fn logs(&self) -> String {
        self.data
            .iter()
            .chain(&self.sentinels)
            .map(Proc::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The URL clients use: `redis+sentinel://` with every sentinel and the service.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", sentinels.join(","))
    }

    /// The URL of a client over TLS: `rediss+sentinel://` with every sentinel's TLS
    /// port, the service and the `tls_*` settings of the test client certificate;
    /// `None` unless started by [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> Option<String> {
        let ports = &self.tls.as_ref()?.sentinels;
        let sentinels: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        Some(format!(
            "rediss+sentinel://{}/{SERVICE}?{}",
            sentinels.join(","),
            super::tls::test_certs().url_settings()
        ))
    }

    /// The plain port of the data node whose TLS port is `port`, or `port` itself.
    fn plain_port(&self, port: u16) -> u16 {
        self.tls
            .as_ref()
            .and_then(|tls| tls.data.iter().position(|p| *p == port))
            .map_or(port, |i| self.data[i].port)
    }

    /// The `redis://` URL of the data node on `port`.
    pub fn node_url(port: u16) -> String {
        format!("redis://127.0.0.1:{port}")
    }

    /// The temporary directory everything lives in.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The port of the primary the sentinels name now.
    ///
    /// # Errors
    /// No sentinel answered.
    pub async fn primary_port(&self) -> Result<u16, String> {
        let mut last = String::from("no sentinel");
        for sentinel in &self.sentinels {
            if sentinel.child.is_none() {
                continue;
            }
            let cmd = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(SERVICE)
                .clone();
            match query::<(String, u16)>(sentinel.port, &cmd).await {
                Ok((_, port)) => return Ok(self.plain_port(port)),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    /// The ports of the data nodes other than `primary` that were not killed.
    pub fn replica_ports(&self, primary: u16) -> Vec<u16> {
        self.data
            .iter()
            .filter(|p| p.port != primary && p.child.is_some())
            .map(|p| p.port)
            .collect()
    }

    /// Asks the sentinels for a failover now (`SENTINEL FAILOVER`: the primary is
    /// healthy, a replica is promoted and the primary becomes its replica).
    ///
    /// # Errors
    /// What the sentinel said.
    pub async fn failover(&self) -> Result<(), String> {
        let _: String = query(
            self.sentinels[0].port,
            redis::cmd("SENTINEL").arg("FAILOVER").arg(SERVICE),
        )
        .await?;
        Ok(())
    }

    /// Kills the data node on `port` (SIGKILL); the sentinels call it down after
    /// [`DOWN_AFTER`] and fail over if it was the primary.
    pub fn kill(&mut self, port: u16) {
        if let Some(proc) = self.data.iter_mut().find(|p| p.port == port) {
            proc.kill();
        }
    }

    /// Freezes the data node on `port` (SIGSTOP): its connections stay open and nothing
    /// answers, as behind a partition that drops packets. The sentinels call it down
    /// after [`DOWN_AFTER`] and fail over if it was the primary.
    pub fn pause(&self, port: u16) {
        if let Some(proc) = self.data.iter().find(|p| p.port == port) {
            proc.signal("STOP");
        }
    }

    /// Thaws it after [`pause`](Self::pause).
    pub fn resume(&self, port: u16) {
        if let Some(proc) = self.data.iter().find(|p| p.port == port) {
            proc.signal("CONT");
        }
    }

    /// Waits until the sentinels name a primary other than `old` and it serves as one.
    ///
    /// # Errors
    /// No new primary within a minute.
    pub async fn wait_for_new_primary(&self, old: u16) -> Result<u16, String> {
        let started = Instant::now();
        loop {
            if let Ok(port) = self.primary_port().await {
                if port != old {
                    let role: Result<Vec<redis::Value>, String> =
                        query(port, &redis::cmd("ROLE")).await;
                    if let Ok(role) = role {
                        if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
                        {
                            return Ok(port);
                        }
                    }
                }
            }
            if started.elapsed() > FAILOVER_LIMIT {
                return Err(format!(
                    "no new primary within {FAILOVER_LIMIT:?}\n{}",
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
