//! Real servers for tests, from one of three sources:
//!
//! * **local processes** (the default): started on free loopback ports with temporary
//!   data directories, stopped by PID when dropped (also when a test panics);
//! * **containers** (`LOCK_TEST_SERVERS=containers`): images built here by
//!   `scripts/images`, started through testcontainers, published on loopback ports
//!   only, removed when dropped (see [`container`]);
//! * **a running server** named by an environment variable ([`ServerSpec::env_url`]).
//!
//! An adapter describes its server once ([`ServerSpec`]) and calls [`TestServer::start`];
//! tests use [`TestServer::url`] and the fault hooks ([`TestServer::kill`],
//! [`restart`](TestServer::restart), [`pause`](TestServer::pause),
//! [`resume`](TestServer::resume)), which work the same on a process and a container.
//!
//! ```no_run
//! use std::process::Command;
//! use conformance_tests::server::{Probe, ServerSpec, TestServer};
//!
//! # async fn demo() -> Result<(), String> {
//! let spec = ServerSpec {
//!     name: "redis",
//!     env_url: "LOCK_TEST_REDIS_URL",
//!     command: |port, dir| {
//!         let mut cmd = Command::new("redis-server");
//!         cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""]);
//!         cmd.arg("--dir").arg(dir);
//!         cmd
//!     },
//!     url: |port| format!("redis://127.0.0.1:{port}"),
//!     ready: Probe::Redis,
//!     container: None,
//! };
//! let server = TestServer::start(&spec).await?;
//! println!("testing against {}", server.url());
//! # Ok(()) }
//! ```

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

pub mod container;
mod probe;
mod process_tree;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(feature = "redis")]
mod redis_procs;
#[cfg(feature = "redis")]
pub mod sentinel;
mod shared;
pub mod specs;
pub mod tls;
pub mod tls_specs;

pub use container::{ContainerSpec, ServerContainer};
pub use probe::Probe;
pub use shared::SharedServer;

/// How to start one kind of server.
#[derive(Clone, Copy, Debug)]
pub struct ServerSpec {
    /// A short name for messages and the log file.
    pub name: &'static str,
    /// If this environment variable is set, its value is used as the URL and nothing
    /// is started.
    pub env_url: &'static str,
    /// The command that runs the server in the foreground on `port`, with its data in
    /// `dir`. It must bind to 127.0.0.1 only.
    pub command: fn(port: u16, dir: &Path) -> Command,
    /// The URL clients use for a server on `port`.
    pub url: fn(port: u16) -> String,
    /// How to tell that it serves.
    pub ready: Probe,
    /// How it runs in a container, for `LOCK_TEST_SERVERS=containers`.
    pub container: Option<ContainerSpec>,
}

/// How long a server may take to serve.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// How long [`ServerProcess::stop`] waits for a killed server's processes to go.
const STOP_LIMIT: Duration = Duration::from_secs(5);

/// How many times to try another port if the server dies at start (a port taken
/// between picking and binding).
pub(crate) const START_ATTEMPTS: usize = 3;

/// Where [`TestServer::start`] gets servers from when no URL is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Local processes (`LOCK_TEST_SERVERS` unset or `local`).
    Local,
    /// Containers (`LOCK_TEST_SERVERS=containers`).
    Containers,
}

impl Source {
    /// The source `LOCK_TEST_SERVERS` names.
    ///
    /// # Errors
    /// A value that names no source.
    pub fn from_env() -> Result<Source, String> {
        match std::env::var("LOCK_TEST_SERVERS").as_deref() {
            Err(_) | Ok("") | Ok("local") => Ok(Source::Local),
            Ok("containers") => Ok(Source::Containers),
            Ok(other) => Err(format!(
                "LOCK_TEST_SERVERS={other:?}: expected `local` or `containers`"
            )),
        }
    }
}

/// A free TCP port on 127.0.0.1, as the OS hands them out.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// A server the tests may use.
#[derive(Debug)]
pub enum TestServer {
    /// Started here as a process; stopped on drop.
    Spawned(ServerProcess),
    /// Started here in a container; removed on drop.
    Container(Box<ServerContainer>),
    /// Given by the environment; left alone.
    External {
        /// The URL from the environment.
        url: String,
    },
}

impl TestServer {
    /// Uses `spec.env_url` if set, else starts the server from the [`Source`]
    /// `LOCK_TEST_SERVERS` names and waits until it serves. A spec without a
    /// container (the TLS servers, whose certificates are made by the test) runs as a
    /// local process in either mode.
    ///
    /// # Errors
    /// Why it could not start, with the end of its log.
    pub async fn start(spec: &ServerSpec) -> Result<Self, String> {
        if let Ok(url) = std::env::var(spec.env_url) {
            return Ok(TestServer::External { url });
        }
        if Source::from_env()? == Source::Containers && spec.container.is_some() {
            return ServerContainer::start(spec)
                .await
                .map(|c| TestServer::Container(Box::new(c)));
        }
        Self::start_local(spec).await
    }

    /// Starts `spec`'s server as a local process, whatever `LOCK_TEST_SERVERS` says
    /// (for the harness's own tests, whose made-up servers have no image).
    ///
    /// # Errors
    /// Why the server did not start, with the end of its log.
    pub async fn start_local(spec: &ServerSpec) -> Result<Self, String> {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            match ServerProcess::start(spec).await {
                Ok(server) => return Ok(TestServer::Spawned(server)),
                Err(err) => last_error = err,
            }
        }
        Err(last_error)
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        match self {
            TestServer::Spawned(server) => server.url(),
            TestServer::Container(server) => server.url(),
            TestServer::External { url } => url.clone(),
        }
    }

    /// The loopback port it serves on, if it was started here.
    pub fn port(&self) -> Option<u16> {
        match self {
            TestServer::Spawned(server) => Some(server.port()),
            TestServer::Container(server) => Some(server.port()),
            TestServer::External { .. } => None,
        }
    }

    /// The process, if this server was started here as one.
    pub fn process(&mut self) -> Option<&mut ServerProcess> {
        match self {
            TestServer::Spawned(server) => Some(server),
            _ => None,
        }
    }

    /// Whether the fault hooks below can act on it (it was started here).
    pub fn can_fault(&self) -> bool {
        !matches!(self, TestServer::External { .. })
    }

    /// Kills the server at once (SIGKILL; `docker kill` for a container). Its data
    /// stays for [`restart`](Self::restart).
    ///
    /// # Errors
    /// A server given by URL, or what Docker said.
    pub async fn kill(&mut self) -> Result<(), String> {
        match self {
            TestServer::Spawned(server) => {
                server.stop();
                Ok(())
            }
            TestServer::Container(server) => server.kill().await,
            TestServer::External { url } => Err(format!("{url} was not started here")),
        }
    }

    /// Starts it again on the same port with the same data (killing it first if it
    /// runs) and waits until it serves.
    ///
    /// # Errors
    /// Why it could not start again.
    pub async fn restart(&mut self) -> Result<(), String> {
        match self {
            TestServer::Spawned(server) => server.restart().await,
            TestServer::Container(server) => server.restart().await,
            TestServer::External { url } => Err(format!("{url} was not started here")),
        }
    }

    /// Freezes the server (SIGSTOP; `docker pause` for a container): connections
    /// stay open and nothing answers.
    ///
    /// # Errors
    /// A server given by URL, or what Docker or `kill` said.
    pub async fn pause(&mut self) -> Result<(), String> {
        match self {
            TestServer::Spawned(server) => server.signal("STOP").await,
            TestServer::Container(server) => server.pause().await,
            TestServer::External { url } => Err(format!("{url} was not started here")),
        }
    }

    /// Thaws it after [`pause`](Self::pause).
    ///
    /// # Errors
    /// A server given by URL, or what Docker or `kill` said.
    pub async fn resume(&mut self) -> Result<(), String> {
        match self {
            TestServer::Spawned(server) => server.signal("CONT").await,
            TestServer::Container(server) => server.resume().await,
            TestServer::External { url } => Err(format!("{url} was not started here")),
        }
    }

    /// A handle that freezes and thaws this server without borrowing it, for checks
    /// that hold it elsewhere or thaw it from `Drop`; `None` for a server given by URL.
    pub fn freezer(&self) -> Option<Freezer> {
        match self {
            TestServer::Spawned(server) => server.pid().map(Freezer::Process),
            TestServer::Container(server) => Some(Freezer::Container(server.id().to_owned())),
            TestServer::External { .. } => None,
        }
    }

    /// The last lines of its log, if it was started here.
    pub async fn log_tail(&self) -> String {
        match self {
            TestServer::Spawned(server) => server.log_tail(),
            TestServer::Container(server) => server.log_tail().await,
            TestServer::External { .. } => String::new(),
        }
    }
}

/// Freezes and thaws a server started here, synchronously: SIGSTOP and SIGCONT for a
/// process, `docker pause` and `docker unpause` for a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Freezer {
    /// The server process's id.
    Process(u32),
    /// The container's id.
    Container(String),
}

impl Freezer {
    /// Freezes the server: connections stay open and nothing answers.
    ///
    /// # Errors
    /// What `kill` or `docker` said.
    pub fn freeze(&self) -> Result<(), String> {
        self.run("STOP", "pause")
    }

    /// Thaws it.
    ///
    /// # Errors
    /// What `kill` or `docker` said.
    pub fn thaw(&self) -> Result<(), String> {
        self.run("CONT", "unpause")
    }

    fn run(&self, signal: &str, docker: &str) -> Result<(), String> {
        let mut command = match self {
            Freezer::Process(pid) => {
                // The whole tree: PostgreSQL serves each connection from a child of
                // the process started here, which would answer on otherwise.
                let mut c = Command::new("kill");
                c.arg(format!("-{signal}"));
                c.args(process_tree::tree(*pid).iter().map(u32::to_string));
                c
            }
            Freezer::Container(id) => {
                let mut c = Command::new("docker");
                c.args([docker, id]);
                c
            }
        };
        let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{command:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// A server process started for tests.
#[derive(Debug)]
pub struct ServerProcess {
    spec: ServerSpec,
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts `spec` on a free port in a fresh temporary directory and waits until the
    /// port accepts connections.
    ///
    /// # Errors
    /// Why it could not start, with the end of its log.
    pub async fn start(spec: &ServerSpec) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("lock-test-{}-", spec.name))
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let port = free_port().map_err(|e| format!("free port: {e}"))?;
        let mut server = ServerProcess {
            spec: *spec,
            child: None,
            port,
            dir,
        };
        server.spawn()?;
        server.wait_ready(READY_LIMIT).await?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = File::create(self.log_path()).map_err(|e| format!("log file: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
        let mut command = (self.spec.command)(self.port, self.dir.path());
        command.stdin(Stdio::null()).stdout(log).stderr(log_err);
        let child = command
            .spawn()
            .map_err(|e| format!("could not run {} ({command:?}): {e}", self.spec.name))?;
        self.child = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        let probe = self.spec.ready;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "{} exited with {status} at start; log:\n{}",
                    self.spec.name,
                    self.log_tail()
                ));
            }
            if probe.ready(self.port).await {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(format!(
                    "{} did not serve on port {} within {limit:?}; log:\n{}",
                    self.spec.name,
                    self.port,
                    self.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        (self.spec.url)(self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.spec.name))
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kills it (SIGKILL, by PID) with every process it started, reaps it and waits
    /// (at most 5 s) until those are gone too; its data directory stays until
    /// drop.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Reaped already (it died at start): its PID may be another process's by now.
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        // Frozen, the tree stops growing while it is read; children first, so one that
        // exits meanwhile stays a zombie of a live parent and its PID is not reused.
        let frozen = process_tree::freeze(child.id());
        for &pid in frozen.iter().skip(1).rev() {
            process_tree::signal(pid, libc::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
        process_tree::wait_gone(frozen.get(1..).unwrap_or_default(), STOP_LIMIT);
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the server's process.
    ///
    /// # Errors
    /// It is not running, or `kill` failed.
    pub async fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self
            .pid()
            .ok_or_else(|| format!("{} is not running", self.spec.name))?;
        let status = tokio::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .await
            .map_err(|e| format!("kill: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -{signal} {pid}: {status}"))
        }
    }

    /// Starts it again on the same port and data directory, after [`stop`](Self::stop),
    /// trying again a second later if it exits at start (a killed server's children may
    /// still hold its resources for a moment). A server that did not come back is left
    /// stopped, so no PID of it is handed out.
    ///
    /// # Errors
    /// Why it could not start.
    pub async fn restart(&mut self) -> Result<(), String> {
        let mut last_error = String::new();
        for attempt in 0..START_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            self.stop();
            self.spawn()?;
            match self.wait_ready(READY_LIMIT).await {
                Ok(()) => return Ok(()),
                Err(err) => last_error = err,
            }
        }
        self.stop();
        Err(last_error)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    /// A stand-in server that any Debian machine has: python3's HTTP server.
    const HTTP: ServerSpec = ServerSpec {
        name: "http",
        env_url: "LOCK_TEST_HTTP_URL_UNSET",
        command: |port, dir| {
            let mut cmd = Command::new("python3");
            cmd.args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(dir);
            cmd
        },
        url: |port| format!("http://127.0.0.1:{port}"),
        ready: Probe::Open,
        container: None,
    };

    #[tokio::test]
    async fn starts_serves_and_stops_by_pid() {
        if Command::new("python3").arg("--version").output().is_err() {
            println!("SKIP starts_serves_and_stops_by_pid: python3 is not installed");
            return;
        }
        let mut server = TestServer::start_local(&HTTP).await.expect("start");
        let url = server.url();
        let process = server.process().expect("spawned");
        let port = process.port();
        assert_eq!(url, format!("http://127.0.0.1:{port}"));
        let pid = process.pid().expect("running");
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok());
        process.restart().await.expect("restart");
        assert_ne!(process.pid(), Some(pid), "restart made a new process");
        let pid = process.pid().expect("running");
        drop(server);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z")),
            "server still running after drop"
        );
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err());
    }

    /// The stand-in with a helper process of its own, as PostgreSQL has a backend per
    /// connection: `sleep` is the HTTP server's child.
    const HTTP_WITH_HELPER: ServerSpec = ServerSpec {
        command: |port, dir| {
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(format!(
                    "sleep 300 & exec python3 -m http.server --bind 127.0.0.1 {port}"
                ))
                .current_dir(dir);
            cmd
        },
        ..HTTP
    };

    #[tokio::test]
    async fn stop_kills_the_processes_the_server_started() {
        if Command::new("python3").arg("--version").output().is_err() {
            println!("SKIP stop_kills_the_processes_the_server_started: no python3");
            return;
        }
        let mut server = ServerProcess::start(&HTTP_WITH_HELPER)
            .await
            .expect("start");
        let pid = server.pid().expect("running");
        let children = process_tree::tree(pid).split_off(1);
        assert!(!children.is_empty(), "the stand-in started no helper");
        server.stop();
        for child in children {
            assert!(
                !process_tree::running(child),
                "process {child}, started by the server, outlived stop"
            );
        }
    }

    #[tokio::test]
    async fn a_server_that_dies_at_start_is_reported_with_its_log() {
        const BROKEN: ServerSpec = ServerSpec {
            name: "broken",
            env_url: "LOCK_TEST_BROKEN_URL_UNSET",
            command: |_, _| {
                let mut cmd = Command::new("sh");
                cmd.args(["-c", "echo cannot start: bad config >&2; exit 7"]);
                cmd
            },
            url: |port| format!("broken://127.0.0.1:{port}"),
            ready: Probe::Open,
            container: None,
        };
        let err = TestServer::start_local(&BROKEN).await.unwrap_err();
        assert!(err.contains("cannot start: bad config"), "{err}");
    }
}
