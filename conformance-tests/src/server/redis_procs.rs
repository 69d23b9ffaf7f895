//! redis-server processes on loopback ports for the multi-node Redis deployments
//! ([`super::sentinel`], [`super::redis_cluster`]), killed by PID when dropped.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lock_redis::redis;

/// One redis-server process.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    log: PathBuf,
}

/// How many times a node is started on other ports when its port was taken between
/// picking it and binding it (by another process, or an outgoing connection's
/// ephemeral port).
const START_ATTEMPTS: usize = 5;
/// How long a node may take to answer `PING` after it is started.
const START_LIMIT: Duration = Duration::from_secs(30);

impl Proc {
    /// Starts `name` on a free port (plus a second free port for its own use, such as
    /// a cluster bus), with the arguments `args(port, second)` gives, and waits until
    /// it answers `PING`. A start that fails because a port was taken is tried again
    /// on other ports.
    ///
    /// # Errors
    /// It did not start, with its log.
    pub(crate) async fn start(
        name: &str,
        dir: &std::path::Path,
        args: impl Fn(u16, u16) -> Result<Vec<String>, String>,
    ) -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = super::free_port().map_err(|e| e.to_string())?;
            let second = loop {
                let second = super::free_port().map_err(|e| e.to_string())?;
                if second != port {
                    break second;
                }
            };
            let mut proc = Proc::spawn(name.to_owned(), port, dir, &args(port, second)?)?;
            let started = tokio::time::Instant::now();
            loop {
                if proc.exited() {
                    last = proc.log_tail();
                    break;
                }
                if query::<String>(port, &redis::cmd("PING")).await.is_ok() {
                    return Ok(proc);
                }
                if started.elapsed() > START_LIMIT {
                    return Err(format!(
                        "{name} did not answer within {START_LIMIT:?}; {}",
                        proc.log_tail()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if !last.contains("Address already in use") {
                return Err(format!("{name} exited at start; {last}"));
            }
        }
        Err(format!(
            "{name} found no free port in {START_ATTEMPTS} tries; {last}"
        ))
    }

    fn spawn(
        name: String,
        port: u16,
        dir: &std::path::Path,
        args: &[String],
    ) -> Result<Self, String> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log).map_err(|e| format!("log file: {e}"))?;
        let err = out.try_clone().map_err(|e| format!("log file: {e}"))?;
        let child = Command::new("redis-server")
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("could not run redis-server for {name}: {e}"))?;
        Ok(Proc {
            name,
            port,
            child: Some(child),
            log,
        })
    }

    pub(crate) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "{} log:\n{}",
            self.name,
            lines[lines.len().saturating_sub(15)..].join("\n")
        )
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process, by PID.
    pub(crate) fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status();
        }
    }

    pub(crate) fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The arguments of a data node on `port`, replicating `primary` if given.
pub(crate) fn data_args(port: u16, dir: &std::path::Path, primary: Option<u16>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let data = dir.join(format!("data-{port}"));
    let _ = std::fs::create_dir_all(&data);
    args.extend(["--dir".into(), data.display().to_string()]);
    if let Some(primary) = primary {
        args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.to_string(),
        ]);
    }
    args
}

pub(crate) async fn connect(port: u16) -> Result<redis::aio::MultiplexedConnection, String> {
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .map_err(|_| format!("no connection to port {port} within 2 s"))?
    .map_err(|e| format!("port {port}: {e}"))
}

pub(crate) async fn query<T: redis::FromRedisValue>(
    port: u16,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    let mut conn = connect(port).await?;
    tokio::time::timeout(Duration::from_secs(2), cmd.query_async(&mut conn))
        .await
        .map_err(|_| format!("no answer from port {port} within 2 s"))?
        .map_err(|e| format!("port {port}: {e}"))
}

/// A node's TLS settings, as command-line arguments: clients on `port` with a
/// certificate of the test CA (see [`test_certs`](super::tls::test_certs)), and
/// replication and the sentinels' links over TLS.
pub(crate) fn tls_args(port: u16) -> Vec<String> {
    let certs = super::tls::test_certs();
    let path = |p: std::path::PathBuf| p.display().to_string();
    vec![
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        path(certs.server_cert()),
        "--tls-key-file".into(),
        path(certs.server_key()),
        "--tls-ca-cert-file".into(),
        path(certs.ca()),
        // The nodes' own connections to each other are clients too.
        "--tls-client-cert-file".into(),
        path(certs.client_cert()),
        "--tls-client-key-file".into(),
        path(certs.client_key()),
        "--tls-auth-clients".into(),
        "yes".into(),
        "--tls-replication".into(),
        "yes".into(),
    ]
}
