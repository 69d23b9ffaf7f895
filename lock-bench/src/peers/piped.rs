//! Contenders whose workers are each a process of its own, driven over a pipe, a line
//! at a time: peers in other languages, kazoo's `Lock` and `Semaphore` (Python,
//! Debian's python3-kazoo) and Apache Curator's `InterProcessMutex` and
//! `InterProcessSemaphoreV2` (Java, Debian's libcurator-recipes-java), the most used
//! ZooKeeper recipes; and this library, as the bench's own binary
//! ([`crate::piped_ours`]).
//!
//! A worker answers `ok ready` once connected, then each command with `ok ...` or
//! `err ...`: `acquire`, `release`, and `cycles N` (N uncontended acquire + release,
//! timed inside the worker, so the pipe does not count against the peer; contended runs
//! pay one pipe round trip, tens of microseconds, per call).

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::contender::{BenchError, Contender, Role, Worker};

#[cfg(feature = "zookeeper")]
const KAZOO_SCRIPT: &str = include_str!("kazoo_worker.py");

/// Debian's interpreter, where python3-kazoo is installed (a `python3` earlier on
/// `PATH` may lack it).
#[cfg(feature = "zookeeper")]
const PYTHON: &str = "/usr/bin/python3";

/// The Curator worker, run as a source file.
#[cfg(feature = "zookeeper")]
const CURATOR_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/peers/CuratorWorker.java");

/// A peer whose workers are processes speaking the protocol above.
pub struct Piped {
    name: &'static str,
    role: Role,
    program: String,
    /// The arguments before the worker's own: the hosts, its lock path and, for a
    /// semaphore, the count follow.
    args: Vec<String>,
    hosts: String,
    /// Where this peer's locks live, under the server's root.
    root: &'static str,
    permits: Option<u32>,
    install_hint: &'static str,
}

impl Piped {
    #[cfg(feature = "zookeeper")]
    /// kazoo's `Lock` at `url` (`zk://host:port[,host:port][/chroot]`), or its
    /// `Semaphore` of `permits` leases.
    pub fn kazoo(url: &str, permits: Option<u32>) -> Self {
        Piped {
            name: match permits {
                None => "kazoo (Python)",
                Some(_) => "kazoo Semaphore (Python)",
            },
            role: Role::Peer,
            program: PYTHON.to_owned(),
            args: vec!["-c".to_owned(), KAZOO_SCRIPT.to_owned()],
            hosts: url.trim_start_matches("zk://").to_owned(),
            root: "/bench-kazoo",
            permits,
            install_hint: "apt-get install python3-kazoo",
        }
    }

    #[cfg(feature = "zookeeper")]
    /// Curator's `InterProcessMutex` at `url`, or its `InterProcessSemaphoreV2` of
    /// `permits` leases.
    pub fn curator(url: &str, permits: Option<u32>) -> Self {
        Piped {
            name: match permits {
                None => "Curator InterProcessMutex (Java)",
                Some(_) => "Curator InterProcessSemaphoreV2 (Java)",
            },
            role: Role::Peer,
            program: "java".to_owned(),
            args: vec![
                // Nothing but the protocol on stdout.
                "-XX:+DisplayVMOutputToStderr".to_owned(),
                "-cp".to_owned(),
                conformance_tests::curator::classpath(),
                CURATOR_SOURCE.to_owned(),
            ],
            hosts: url.trim_start_matches("zk://").to_owned(),
            root: "/bench-curator",
            permits,
            install_hint: conformance_tests::curator::INSTALL_HINT,
        }
    }

    #[cfg(feature = "sql")]
    /// Our lock at `url`, each worker this bench's binary in a process of its own
    /// (`None` if the binary's path cannot be read).
    pub fn ours(url: &str) -> Option<Self> {
        let program = std::env::current_exe().ok()?;
        Some(Piped {
            name: "ours (a process per worker)",
            role: Role::Ours,
            program: program.to_string_lossy().into_owned(),
            args: vec!["--piped-worker".to_owned()],
            hosts: url.to_owned(),
            root: "bench-processes",
            permits: None,
            install_hint: "the bench's own binary",
        })
    }
}

#[async_trait]
impl Contender for Piped {
    fn name(&self) -> String {
        self.name.into()
    }

    fn role(&self) -> Role {
        self.role
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let mut args = self.args.clone();
        args.push(self.hosts.clone());
        args.push(format!("{}/{name}", self.root));
        args.extend(self.permits.map(|n| n.to_string()));
        let mut child = Command::new(&self.program)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e} ({})", self.name, self.install_hint))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut worker = PipedWorker {
            name: self.name,
            _child: child,
            stdin,
            stdout,
        };
        tokio::time::timeout(Duration::from_secs(60), worker.answer())
            .await
            .map_err(|_| format!("{} did not connect within 60 s", self.name))??;
        Ok(Box::new(worker))
    }
}

struct PipedWorker {
    name: &'static str,
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl PipedWorker {
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
            .ok_or_else(|| format!("the {} worker exited", self.name))?;
        match line.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => Err(format!("{}: {line}", self.name).into()),
        }
    }
}

#[async_trait]
impl Worker for PipedWorker {
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
