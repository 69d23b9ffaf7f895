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

impl Proc {
    pub(crate) fn spawn(
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
