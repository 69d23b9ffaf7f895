//! Our semaphore (`--permits N`): the uncontended permit cycle, and a contended run of
//! workers, each a client of its own, that take a permit in turn while counting how
//! many hold at once (never more than N may).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions, LockProvider};
use tokio::time::Instant;

use crate::contender::BenchError;
use crate::stats::Samples;

/// What a semaphore run measured.
#[derive(Debug, Clone)]
pub struct Permits {
    /// The semaphore's count.
    pub permits: u32,
    /// Uncontended acquire + release of one permit.
    pub cycle: Samples,
    /// Workers in the contended run, and permits each took.
    pub workers: usize,
    pub cycles: usize,
    /// Contended permits granted per second.
    pub throughput: f64,
    /// The most holders at once in the contended run, as the workers counted them.
    pub most_at_once: usize,
    /// Grants that found N or more holders already in: must be 0.
    pub over: u64,
}

/// The semaphore of `permits` at `url`: `iterations` uncontended cycles, then
/// `workers` clients taking `cycles` permits each.
pub async fn measure(
    url: &str,
    permits: u32,
    iterations: usize,
    workers: usize,
    cycles: usize,
) -> Result<Permits, BenchError> {
    let namespace = format!("bench-permits-{}", std::process::id());
    // In-memory backends live per `connect` call: their workers share one client.
    let shared = match url.starts_with("memory:") {
        true => Some(client(url, &namespace).await?),
        false => None,
    };
    let first = match &shared {
        Some(shared) => shared.clone(),
        None => client(url, &namespace).await?,
    };
    let semaphore = first.semaphore("cycle", permits)?;
    let mut cycle = Samples::default();
    for _ in 0..iterations {
        let started = Instant::now();
        semaphore.acquire().await?.release().await?;
        cycle.push(started.elapsed());
    }
    let mut clients = Vec::with_capacity(workers);
    for _ in 0..workers {
        clients.push(match &shared {
            Some(shared) => shared.clone(),
            None => client(url, &namespace).await?,
        });
    }
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let over = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in &clients {
        let semaphore = client.semaphore("contended", permits)?;
        let (in_use, most, over) = (in_use.clone(), most.clone(), over.clone());
        tasks.spawn(async move {
            for _ in 0..cycles {
                let permit = semaphore.acquire().await?;
                let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if now > permits as usize {
                    over.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                in_use.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = started.elapsed().max(Duration::from_micros(1));
    for client in clients.iter().chain([&first]) {
        client.shutdown().await?;
    }
    Ok(Permits {
        permits,
        cycle,
        workers,
        cycles,
        throughput: (workers * cycles) as f64 / elapsed.as_secs_f64(),
        most_at_once: most.load(Ordering::SeqCst),
        over: over.load(Ordering::SeqCst),
    })
}

async fn client(url: &str, namespace: &str) -> Result<Arc<dyn LockProvider>, BenchError> {
    let options = ConnectOptions::default()
        .namespace(namespace)
        .watchdog_lease(Duration::from_secs(30));
    Ok(connect(url, options).await?)
}
