//! Latency of this crate's etcd lock next to etcd's own v3lock service (called through
//! etcd-client's lock API): uncontended acquire + release, and the handoff of a
//! contended lock (8 workers x 100 cycles by default), with the tail over 20 ms.
//!
//! ```text
//! cargo run --release -p lock-etcd --example handoff -- etcd://127.0.0.1:2379 [workers] [cycles]
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, LockOptions};
use lock_core::{DistributedLockExt, LockClient};
use lock_etcd::{EtcdBackend, EtcdConfig};
use tokio::time::Instant;

const TAIL: Duration = Duration::from_millis(20);

/// Latencies, printed as one table row.
#[derive(Default)]
struct Samples(Vec<Duration>);

impl Samples {
    fn row(&mut self, what: &str) {
        self.0.sort_unstable();
        let n = self.0.len();
        let at = |p: f64| self.0[((n as f64 * p / 100.0).ceil() as usize).clamp(1, n) - 1];
        let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
        let over = self.0.iter().filter(|d| **d > TAIL).count();
        println!(
            "| {what} | {n} | {} | {} | {} | {} | {over} |",
            ms(at(50.0)),
            ms(at(90.0)),
            ms(at(99.0)),
            ms(self.0[n - 1])
        );
    }
}

fn header() {
    println!("| what | count | p50 ms | p90 ms | p99 ms | max ms | over 20 ms |");
    println!("|---|---|---|---|---|---|---|");
}

async fn ours(url: &str, namespace: &str) -> LockClient<EtcdBackend> {
    let backend = EtcdBackend::connect(EtcdConfig::from_url(url).expect("etcd:// URL"))
        .await
        .expect("connect");
    LockClient::builder(backend)
        .namespace(namespace)
        .build()
        .expect("client")
}

/// An etcd-client handle with a lease of its own, as the v3lock service needs.
async fn v3lock(url: &str) -> (Client, i64) {
    let config = EtcdConfig::from_url(url).expect("etcd:// URL");
    let mut client = Client::connect(config.endpoints(), None)
        .await
        .expect("connect");
    let lease = client.lease_grant(60, None).await.expect("lease").id();
    (client, lease)
}

async fn uncontended(url: &str, n: usize) {
    let client = ours(url, "bench-uncontended").await;
    let lock = client.lock("solo").expect("lock");
    let mut samples = Samples::default();
    for _ in 0..n {
        let started = Instant::now();
        lock.acquire()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
        samples.0.push(started.elapsed());
    }
    samples.row("ours: uncontended acquire + release");

    let (mut client, lease) = v3lock(url).await;
    let mut samples = Samples::default();
    for _ in 0..n {
        let started = Instant::now();
        let key = client
            .lock(
                "bench-uncontended/v3lock",
                Some(LockOptions::new().with_lease(lease)),
            )
            .await
            .expect("lock")
            .key()
            .to_vec();
        client.unlock(key).await.expect("unlock");
        samples.0.push(started.elapsed());
    }
    samples.row("v3lock: uncontended lock + unlock");
}

/// `workers` tasks each take the lock `cycles` times; a handoff is the time from one
/// holder starting its release to the next holder being granted.
async fn contended(url: &str, workers: usize, cycles: usize) {
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Samples>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let lock = ours(url, "bench-contended")
            .await
            .lock("hot")
            .expect("lock");
        let (last_release, handoffs) = (last_release.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..cycles {
                let guard = lock.acquire().await.expect("acquire");
                if let Some(at) = last_release.lock().unwrap().take() {
                    handoffs.lock().unwrap().0.push(at.elapsed());
                }
                *last_release.lock().unwrap() = Some(Instant::now());
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    handoffs
        .lock()
        .unwrap()
        .row(&format!("ours: handoff, {workers} workers x {cycles}"));

    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Samples>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (mut client, lease) = v3lock(url).await;
        let (last_release, handoffs) = (last_release.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..cycles {
                let options = LockOptions::new().with_lease(lease);
                let reply = client.lock("bench-contended/v3lock", Some(options)).await;
                let key = reply.expect("lock").key().to_vec();
                if let Some(at) = last_release.lock().unwrap().take() {
                    handoffs.lock().unwrap().0.push(at.elapsed());
                }
                *last_release.lock().unwrap() = Some(Instant::now());
                client.unlock(key).await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    handoffs
        .lock()
        .unwrap()
        .row(&format!("v3lock: handoff, {workers} workers x {cycles}"));
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let Some(url) = args.next() else {
        eprintln!("usage: handoff etcd://HOST:PORT [workers] [cycles]");
        std::process::exit(2);
    };
    let workers = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let cycles = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    header();
    uncontended(&url, 1000).await;
    contended(&url, workers, cycles).await;
}
