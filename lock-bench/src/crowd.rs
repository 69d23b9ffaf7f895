//! A crowd on one lock (`--crowd N`): N handles of one client wait for a lock another
//! client holds; then the lock passes from waiter to waiter until every one has had it.
//! Each handoff is timed from the release call to the next grant, and the waiting
//! client's traffic (through a
//! [`CountingProxy`](crate::counting_proxy::CountingProxy)) is divided over the
//! handoffs: what a handoff costs while many wait.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions};
use tokio::time::Instant;

use crate::contender::BenchError;
use crate::counting_proxy::in_front_of;
use crate::stats::Samples;

/// How long the crowd is given to line up before the holder lets go, per waiter (and at
/// least [`SETTLE_AT_LEAST`]).
const SETTLE_PER_WAITER: Duration = Duration::from_millis(3);
const SETTLE_AT_LEAST: Duration = Duration::from_secs(2);

/// What passing one lock through a crowd cost.
#[derive(Debug, Clone)]
pub struct Crowd {
    /// How many waited.
    pub waiters: usize,
    /// From the holder's release to the last waiter's grant.
    pub drained_in: Duration,
    /// Each handoff: from a release call to the next grant.
    pub handoffs: Samples,
    /// Bytes to and from the server per handoff, for the waiting client; `None` where
    /// the backend has no server to count at (in-memory, SQLite).
    pub per_handoff: Option<(f64, f64)>,
}

/// Passes one lock at `url` through `waiters` waiting handles.
pub async fn measure(url: &str, waiters: usize) -> Result<Crowd, BenchError> {
    let (proxy, crowd_url) = in_front_of(url).await?;
    let namespace = format!("bench-crowd-{}", std::process::id());
    let holder = connect(url, ConnectOptions::default().namespace(namespace.clone())).await?;
    let crowd = connect(&crowd_url, ConnectOptions::default().namespace(namespace)).await?;
    let guard = holder.lock("crowded")?.acquire().await?;
    // When the lock was last let go, and each handoff's time.
    let released = Arc::new(Mutex::new(Instant::now()));
    let handoffs = Arc::new(Mutex::new(Samples::default()));
    let mut tasks = Vec::with_capacity(waiters);
    for _ in 0..waiters {
        let lock = crowd.lock("crowded")?;
        let (released, handoffs) = (released.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await?;
            {
                let mut last = released.lock().unwrap();
                handoffs.lock().unwrap().push(last.elapsed());
                *last = Instant::now();
            }
            guard.release().await
        }));
    }
    tokio::time::sleep(SETTLE_AT_LEAST.max(SETTLE_PER_WAITER * waiters as u32)).await;
    let before = proxy.as_ref().map(|p| p.carried.read());
    let started = Instant::now();
    *released.lock().unwrap() = started;
    guard.release().await?;
    let mut failed = None;
    for task in tasks {
        if let Err(err) = task.await? {
            failed.get_or_insert(err);
        }
    }
    let drained_in = started.elapsed();
    let per_handoff = match (&proxy, before) {
        (Some(proxy), Some((sent, received))) => {
            let (sent_after, received_after) = proxy.carried.read();
            let n = waiters.max(1) as f64;
            Some((
                (sent_after - sent) as f64 / n,
                (received_after - received) as f64 / n,
            ))
        }
        _ => None,
    };
    crowd.shutdown().await?;
    holder.shutdown().await?;
    if let Some(err) = failed {
        return Err(err.into());
    }
    let handoffs = std::mem::take(&mut *handoffs.lock().unwrap());
    Ok(Crowd {
        waiters,
        drained_in,
        handoffs,
        per_handoff,
    })
}
