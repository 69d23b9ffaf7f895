//! kazoo's `Lock` and `Semaphore` (Python, Debian's python3-kazoo), the most used
//! ZooKeeper recipes outside Java: each worker is a Python process of its own, driven
//! over a pipe.
//! Uncontended cycles are timed inside Python, so the pipe does not count against
//! kazoo; contended runs pay one pipe round trip (tens of microseconds) per call.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::contender::{BenchError, Contender, Role, Worker};

const SCRIPT: &str = include_str!("kazoo_worker.py");

/// Debian's interpreter, where python3-kazoo is installed (a `python3` earlier on
/// `PATH` may lack it).
const PYTHON: &str = "/usr/bin/python3";

/// kazoo at `url` (`zk://host:port[,host:port][/chroot]`).
pub struct Kazoo {
    hosts: String,
    /// A `Semaphore` of this many leases instead of a `Lock`.
    permits: Option<u32>,
}

impl Kazoo {
    pub fn new(url: &str) -> Self {
        let hosts = url.trim_start_matches("zk://").to_owned();
        Self {
            hosts,
            permits: None,
        }
    }

    /// kazoo's `Semaphore` of `permits` leases.
    pub fn semaphore(url: &str, permits: u32) -> Self {
        Self {
            permits: Some(permits),
            ..Self::new(url)
        }
    }
}

#[async_trait]
impl Contender for Kazoo {
    fn name(&self) -> String {
        match self.permits {
            None => "kazoo (Python)".into(),
            Some(_) => "kazoo Semaphore (Python)".into(),
        }
    }

    fn role(&self) -> Role {
        Role::Peer
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let mut args = vec![
            "-c".to_owned(),
            SCRIPT.to_owned(),
            self.hosts.clone(),
            format!("/bench-kazoo/{name}"),
        ];
        args.extend(self.permits.map(|n| n.to_string()));
        let mut child = Command::new(PYTHON)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{PYTHON}: {e} (apt-get install python3-kazoo)"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut worker = KazooWorker {
            _child: child,
            stdin,
            stdout,
        };
        tokio::time::timeout(Duration::from_secs(60), worker.answer())
            .await
            .map_err(|_| "kazoo did not connect within 60 s")??;
        Ok(Box::new(worker))
    }
}

struct KazooWorker {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl KazooWorker {
    async fn call(&mut self, command: &str) -> Result<String, BenchError> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        self.answer().await
    }

    async fn answer(&mut self) -> Result<String, BenchError> {
        let line = self
            .stdout
            .next_line()
            .await?
            .ok_or("the kazoo worker exited (is python3-kazoo installed?)")?;
        match line.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(format!("kazoo: {line}").into()),
        }
    }
}

#[async_trait]
impl Worker for KazooWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        self.call("acquire").await.map(drop)
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        self.call("release").await.map(drop)
    }

    async fn timed_cycles(&mut self, n: usize) -> Result<Option<Vec<Duration>>, BenchError> {
        let answer = self.call(&format!("cycles {n}")).await?;
        let samples = answer
            .split_whitespace()
            .map(|us| us.parse().map(Duration::from_micros))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(samples))
    }
}
