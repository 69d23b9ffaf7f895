//! Test harness: real redis-server processes on free loopback ports, each in its own
//! temporary directory, killed by PID when dropped (also when a test panics).

#![allow(dead_code)]

pub mod reply_cut;
pub mod silent_subscribers;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::backend::{
    AcquireRequest, Deadline, Grant, HeldLease, LockBackend, LossNotifier, OwnerToken, Renewal,
};
use lock_core::memory::MemoryBackend;
use lock_core::{
    Capabilities, DistributedLockExt, LockClient, LockFamily, LockKey, LockKind, LockName,
    Namespace,
};
use lock_redis::{RedisBackend, RedisConfig};

/// One redis-server started for a test.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// The file whose milliseconds are added to the server's wall clock, when it runs
    /// with `clock_step.c` preloaded.
    clock_step: Option<PathBuf>,
}

/// A free loopback port (the OS picks one; a race with another process is possible
/// but unlikely, and shows up as a start failure).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = RedisServer {
            port: free_port(),
            child: None,
            dir,
            clock_step: None,
        };
        server.restart();
        server
    }

    /// Starts a server whose wall clock [`step_clock`](Self::step_clock) can move: the
    /// shim in `clock_step.c`, built here with the C compiler every Rust build already
    /// needs, is preloaded into it.
    pub fn start_with_clock_step() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let shim = dir.path().join("clock_step.so");
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/clock_step.c");
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&shim)
            .arg(source)
            .status()
            .expect("a C compiler (cc) must be installed");
        assert!(built.success(), "cc could not build {source}");
        let step = dir.path().join("clock_step");
        std::fs::write(&step, "0").expect("clock step file");
        let mut server = RedisServer {
            port: free_port(),
            child: None,
            dir,
            clock_step: Some(step),
        };
        server.restart();
        server
    }

    /// Moves the server's wall clock `ahead` of the real one (from the real one, not
    /// from the last step), as an NTP step would; its monotonic clock does not move.
    pub fn step_clock(&self, ahead: Duration) {
        let step = self.clock_step.as_ref().expect("started with a clock step");
        std::fs::write(step, ahead.as_millis().to_string()).expect("write the clock step");
    }

    /// Starts the server again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.stop();
        let mut command = Command::new("redis-server");
        if let Some(step) = &self.clock_step {
            command
                .env("LD_PRELOAD", self.dir.path().join("clock_step.so"))
                .env("CLOCK_STEP_FILE", step);
        }
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--loglevel", "warning"])
            // DEBUG SLEEP keeps the server busy past a client's timeout.
            .args(["--enable-debug-command", "local"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let started = Instant::now();
        while !self.answers_ping() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the server (SIGKILL, by PID) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers, as
    /// with a partition that drops packets.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Keeps the server busy for `seconds` (`DEBUG SLEEP`: it answers nothing
    /// meanwhile, then carries on), and returns once it is: a `PING` on another
    /// connection goes unanswered. The returned task ends when the sleep does.
    pub async fn busy_for(&self, seconds: f64) -> tokio::task::JoinHandle<()> {
        let mut probe = self.raw().await;
        let mut sleeper = self.raw().await;
        let sleep = tokio::spawn(async move {
            let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(seconds)
                .query_async(&mut sleeper)
                .await;
        });
        let started = Instant::now();
        loop {
            let ping = redis::cmd("PING");
            let ping = ping.query_async::<String>(&mut probe);
            if tokio::time::timeout(Duration::from_millis(100), ping)
                .await
                .is_err()
            {
                return sleep;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the server never went busy"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Thaws it after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut buf).is_ok()
            && &buf == b"+PONG\r\n"
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn config(&self) -> RedisConfig {
        RedisConfig::from_url(&self.url())
            .expect("valid test config")
            .with_connect_timeout(Duration::from_millis(500))
            .with_request_timeout(Duration::from_millis(500))
            .with_waiter_lease(Duration::from_millis(900))
    }

    pub fn backend(&self) -> RedisBackend {
        RedisBackend::new(self.config()).expect("backend")
    }

    /// A plain connection for looking behind the backend's back.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client in a namespace of its own, so tests never see each other's keys.
pub fn client(backend: RedisBackend, namespace: &str) -> LockClient<RedisBackend> {
    LockClient::builder(backend)
        .namespace(namespace)
        .build()
        .expect("client")
}

/// How many scripts the server has run so far.
pub async fn scripts_run(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Every key on the server.
pub async fn keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.sort();
    keys
}

/// The key of lock `name` in `namespace`.
pub fn lock_key(namespace: &str, name: &str) -> LockKey {
    LockKey::new(
        Namespace::new(namespace).expect("valid namespace"),
        LockName::new(name).expect("valid name"),
    )
}

/// Calls a backend's [`LockBackend::acquire`] and `release` directly, with any owner
/// token: the requests lock-core would send, without its bookkeeping in between (so
/// a test can send what lock-core's own checks would hold back).
pub struct Direct<B: LockBackend> {
    pub backend: B,
    loss: LossNotifier,
}

impl<B: LockBackend> Direct<B> {
    pub async fn new(backend: B) -> Self {
        Direct {
            backend,
            loss: loss_notifier().await,
        }
    }

    /// One request; `wait` None tries once.
    pub async fn acquire(
        &self,
        key: &LockKey,
        kind: LockKind,
        owner: &OwnerToken,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> lock_core::Result<Option<Grant<B::Lease>>> {
        let deadline = match wait {
            None => Deadline::at(tokio::time::Instant::now()),
            Some(wait) => Deadline::after(wait),
        };
        self.backend
            .acquire(AcquireRequest {
                key,
                kind,
                permits: 1,
                owner,
                ttl,
                deadline,
                watchdog: false,
                loss: &self.loss,
                holder: "lock-redis test",
            })
            .await
    }

    /// Releases what `grant` was granted.
    pub async fn release(
        &self,
        key: &LockKey,
        kind: LockKind,
        owner: &OwnerToken,
        grant: Grant<B::Lease>,
    ) -> lock_core::Result<()> {
        self.backend
            .release(&HeldLease {
                key: key.clone(),
                kind,
                owner: owner.clone(),
                fence: grant.fence,
                data: grant.data,
            })
            .await
    }
}

/// A loss notifier, which an [`AcquireRequest`] needs and only lock-core makes: taken
/// from one acquisition on an in-memory backend. Redis leases never use it.
async fn loss_notifier() -> LossNotifier {
    let seen = Arc::new(Mutex::new(None));
    let client = LockClient::new(Capture {
        inner: MemoryBackend::new(),
        seen: seen.clone(),
    });
    let guard = client
        .lock("notifier")
        .expect("valid name")
        .acquire()
        .await
        .expect("in-memory acquire");
    guard.release().await.expect("in-memory release");
    let loss = seen.lock().unwrap().take();
    loss.expect("the acquire passed a notifier")
}

/// An in-memory backend that keeps the loss notifier of the last request.
#[derive(Debug)]
struct Capture {
    inner: MemoryBackend,
    seen: Arc<Mutex<Option<LossNotifier>>>,
}

impl LockBackend for Capture {
    type Lease = <MemoryBackend as LockBackend>::Lease;

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn acquire(
        &self,
        req: AcquireRequest<'_>,
    ) -> lock_core::Result<Option<Grant<Self::Lease>>> {
        *self.seen.lock().unwrap() = Some(req.loss.clone());
        self.inner.acquire(req).await
    }

    async fn release(&self, lease: &HeldLease<Self::Lease>) -> lock_core::Result<()> {
        self.inner.release(lease).await
    }

    async fn renew(
        &self,
        leases: &[&HeldLease<Self::Lease>],
        ttl: Duration,
    ) -> lock_core::Result<Vec<Renewal>> {
        self.inner.renew(leases, ttl).await
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> lock_core::Result<bool> {
        self.inner.is_locked(key, family).await
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> lock_core::Result<bool> {
        self.inner.force_unlock(key, family).await
    }
}
