//! Semaphores (`--permits N`): the uncontended permit cycle, and a contended run of
//! workers, each a client of its own, that take a permit in turn while counting how
//! many hold at once (never more than N may). Ours, and the peers' where they run on
//! that server (kazoo's `Semaphore` and Curator's `InterProcessSemaphoreV2` on
//! ZooKeeper).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::{BenchError, Contender, Role};
use crate::scenarios;
use crate::stats::Samples;

/// What a semaphore run measured.
#[derive(Debug, Clone)]
pub struct Permits {
    /// Whose semaphore.
    pub name: String,
    pub role: Role,
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

/// `semaphore`'s permits (a contender whose lock is a semaphore of `permits`):
/// `iterations` uncontended cycles, then `workers` workers taking `cycles` permits
/// each. The bench counts a worker as holding from its `acquire`'s return to its
/// `release` call, within the time the semaphore has it hold.
pub async fn measure(
    semaphore: &dyn Contender,
    permits: u32,
    iterations: usize,
    workers: usize,
    cycles: usize,
) -> Result<Permits, BenchError> {
    let cycle = scenarios::uncontended(semaphore, iterations).await?;
    let mut all = Vec::with_capacity(workers);
    for _ in 0..workers {
        all.push(semaphore.worker("contended").await?);
    }
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let over = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut worker in all {
        let (in_use, most, over) = (in_use.clone(), most.clone(), over.clone());
        tasks.spawn(async move {
            for _ in 0..cycles {
                worker.acquire().await?;
                let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if now > permits as usize {
                    over.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                in_use.fetch_sub(1, Ordering::SeqCst);
                worker.release().await?;
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = started.elapsed().max(Duration::from_micros(1));
    Ok(Permits {
        name: semaphore.name(),
        role: semaphore.role(),
        permits,
        cycle,
        workers,
        cycles,
        throughput: (workers * cycles) as f64 / elapsed.as_secs_f64(),
        most_at_once: most.load(Ordering::SeqCst),
        over: over.load(Ordering::SeqCst),
    })
}
