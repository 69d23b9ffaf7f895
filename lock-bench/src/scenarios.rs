//! The measured scenarios, each over any backend through `LockProvider`.

use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Who held the lock last, and when they let go.
#[derive(Default)]
struct Baton {
    last_holder: Option<usize>,
    released_at: Option<Instant>,
}

/// `clients.len()` workers, each on its own client, take turns on one lock for
/// `cycles` acquisitions each. A worker that just released does not ask again until
/// someone else has had the lock, so every sample is a real handoff to a waiter: the
/// time from the previous holder's release call to the next holder's grant.
pub async fn contended(clients: &[&dyn LockProvider], cycles: usize) -> Result<Samples> {
    let baton = Arc::new(Mutex::new(Baton::default()));
    let samples = Arc::new(Mutex::new(Samples::default()));
    let done = Arc::new(AtomicUsize::new(0));
    let workers = clients.len();
    let mut tasks = Vec::new();
    for (me, client) in clients.iter().enumerate() {
        let lock = client.lock("bench-contended")?;
        let (baton, samples, done) = (baton.clone(), samples.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..cycles {
                // Not our own lock again while others still want it (no barging).
                while baton.lock().unwrap().last_holder == Some(me)
                    && done.load(Ordering::SeqCst) < workers - 1
                {
                    tokio::time::sleep(Duration::from_micros(100)).await;
                }
                let guard = lock.acquire_timeout(Duration::from_secs(60)).await?;
                let now = Instant::now();
                {
                    let mut baton = baton.lock().unwrap();
                    if let (Some(at), true) =
                        (baton.released_at.take(), baton.last_holder != Some(me))
                    {
                        samples.lock().unwrap().push(now - at);
                    }
                    baton.last_holder = Some(me);
                }
                // Hold briefly so the others are queued when it is released.
                tokio::time::sleep(Duration::from_millis(1)).await;
                baton.lock().unwrap().released_at = Some(Instant::now());
                guard.release().await?;
            }
            done.fetch_add(1, Ordering::SeqCst);
            Ok::<(), distributed_locks::Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked")?;
    }
    let samples = samples.lock().unwrap().clone();
    Ok(samples)
}
