//! Prints median and p99 latency of uncontended acquire + release, and of handing a
//! lock from one client (session) to another.
//!
//! `cargo run --release -p lock-zookeeper --example latency -- [URL] [ITERATIONS] [HANDOFFS]`
//!
//! Without a URL (or `LOCK_ZOOKEEPER_URL`) it starts its own ZooKeeper from Debian's
//! jar on a free loopback port, prints how long that took, and kills it at the end.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lock_core::{DistributedLockExt, LockClient};
use lock_zookeeper::ZkBackend;
use tokio::time::Instant;

fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name:<30} n={:<5} median {:>9.1?}  p99 {:>9.1?}",
        samples.len(),
        pick(0.5),
        pick(0.99)
    );
}

/// A ZooKeeper started here; killed (by PID) when dropped, then its data dir removed.
struct Server(Child, #[allow(dead_code)] tempfile::TempDir);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> std::io::Result<(Server, String)> {
    let dir = tempfile::tempdir()?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    let config = dir.path().join("zoo.cfg");
    std::fs::write(
        &config,
        format!(
            "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n",
            dir.path().display()
        ),
    )?;
    let started = Instant::now();
    let child = Command::new("java")
        .args([
            "-Xmx256m",
            "-cp",
            "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        ])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let server = Server(child, dir);
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            return Err(std::io::Error::other("zookeeper did not start within 30 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "zookeeper started in {:.0?} (port accepting)",
        started.elapsed()
    );
    Ok((
        server,
        format!("zk://127.0.0.1:{port}?connect_timeout_ms=30000"),
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let given = args
        .next()
        .filter(|a| a.starts_with("zk://"))
        .or_else(|| std::env::var("LOCK_ZOOKEEPER_URL").ok());
    let iterations: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let handoffs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let (_server, url) = match given {
        Some(url) => (None, url),
        None => {
            let (server, url) = start_server()?;
            (Some(server), url)
        }
    };
    let namespace = format!("latency-{}", uuid::Uuid::new_v4().simple());
    let started = Instant::now();
    let backend_a = ZkBackend::connect_url(&url).await?;
    println!("first session in {:.0?}", started.elapsed());
    let backend_b = ZkBackend::connect_url(&url).await?;
    let a = LockClient::builder(backend_a)
        .namespace(namespace.as_str())
        .build()?;
    let b = LockClient::builder(backend_b.clone())
        .namespace(namespace.as_str())
        .build()?;

    let lock = a.lock("uncontended")?;
    lock.acquire().await?.release().await?; // creates the lock path
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let began = Instant::now();
        lock.acquire().await?.release().await?;
        samples.push(began.elapsed());
    }
    summary("uncontended acquire+release", samples);

    // From a's release call to b's acquire returning, b already queued and watching.
    let lock_a = a.lock("handoff")?;
    let lock_b = b.lock("handoff")?;
    let mut samples = Vec::with_capacity(handoffs);
    for _ in 0..handoffs {
        let held = lock_a.acquire().await?;
        let waiter = tokio::spawn({
            let lock_b = lock_b.clone();
            async move {
                let guard = lock_b.acquire().await?;
                let acquired = Instant::now();
                guard.release().await?;
                Ok::<_, lock_core::Error>(acquired)
            }
        });
        while backend_b.stats().waiting == 0 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let released = Instant::now();
        held.release().await?;
        let acquired = waiter.await??;
        samples.push(acquired - released);
    }
    summary("handoff between two clients", samples);
    Ok(())
}
