//! The measured scenarios, each over any backend through `LockProvider`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributed_locks::prelude::*;
use distributed_locks::{LockProvider, Result};
use tokio::time::Instant;

use crate::stats::Samples;

/// Acquire and release by one owner with nobody else around: the cost of the two
/// round trips. Returns (acquire, release, acquire + release).
pub async fn uncontended(provider: &dyn LockProvider, iterations: usize) -> Result<[Samples; 3]> {
    let lock = provider.lock("bench-uncontended")?;
    let (mut acquire, mut release, mut both) =
        (Samples::default(), Samples::default(), Samples::default());
    // Warm up connections and scripts.
    for _ in 0..iterations.min(50) {
        lock.acquire().await?.release().await?;
    }
    for _ in 0..iterations {
        let started = Instant::now();
        let guard = lock.acquire().await?;
        let acquired = Instant::now();
        guard.release().await?;
        let done = Instant::now();
        acquire.push(acquired - started);
        release.push(done - acquired);
        both.push(done - started);
    }
    Ok([acquire, release, both])
}

/// Two clients pass one lock back and forth: each handoff is the time from the
/// holder calling `release` to the waiter's `acquire` returning.
pub async fn handoff(
    a: &dyn LockProvider,
    b: &dyn LockProvider,
    handoffs: usize,
) -> Result<Samples> {
    contended(&[a, b], handoffs.div_ceil(2)).await
}

/// `clients.len()` workers, each on its own client, take turns on one lock for
/// `cycles` acquisitions each. Every acquisition after the first is a handoff, timed
/// from the previous holder's release call.
pub async fn contended(clients: &[&dyn LockProvider], cycles: usize) -> Result<Samples> {
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let samples = Arc::new(Mutex::new(Samples::default()));
    let mut tasks = Vec::new();
    for client in clients {
        let lock = client.lock("bench-contended")?;
        let (released_at, samples) = (released_at.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..cycles {
                let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
                let now = Instant::now();
                if let Some(at) = released_at.lock().unwrap().take() {
                    samples.lock().unwrap().push(now - at);
                }
                // Hold briefly so the others are queued when it is released.
                tokio::time::sleep(Duration::from_millis(1)).await;
                *released_at.lock().unwrap() = Some(Instant::now());
                guard.release().await?;
            }
            Ok::<(), distributed_locks::Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked")?;
    }
    let samples = samples.lock().unwrap().clone();
    Ok(samples)
}
