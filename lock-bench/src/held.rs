//! One client holding many locks at once: what each held lock costs the client in
//! heap, and what its watchdog sends and receives to keep them all, per renewal tick
//! (through a [`CountingProxy`] in front of the server).

use std::time::Duration;

use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions, LockProvider};
use tokio::time::Instant;

use crate::allocated;
use crate::contender::BenchError;
use crate::counting_proxy::{in_front_of, CountingProxy};

/// The watchdog lease of the holding client: it renews every third of it.
const LEASE: Duration = Duration::from_secs(3);
/// Renewal ticks the traffic is counted over.
const TICKS: u32 = 5;

/// What holding `locks` locks cost.
#[derive(Debug, Clone)]
pub struct Held {
    /// How many locks the client held.
    pub locks: usize,
    /// How long acquiring them one after another took.
    pub acquired_in: Duration,
    /// Client heap per held lock (its guard and the client's state for it), in bytes.
    pub heap_per_lock: f64,
    /// How often the watchdog renews.
    pub tick: Duration,
    /// Bytes per tick to and from the server, while the client only held; `None` where
    /// the backend has no server to count at (in-memory, SQLite).
    pub per_tick: Option<(f64, f64)>,
}

/// Holds `locks` locks of one client at `url`, counts, and gives them back.
pub async fn measure(url: &str, locks: usize) -> Result<Held, BenchError> {
    let (proxy, client_url) = in_front_of(url).await?;
    let options = ConnectOptions::default()
        .namespace(format!("bench-held-{}", std::process::id()))
        .watchdog_lease(LEASE);
    let client = connect(&client_url, options).await?;
    let held = hold(&*client, proxy.as_ref(), locks).await;
    // Whatever happened, the client gives back what it still holds.
    let shut = client.shutdown().await;
    let held = held?;
    shut?;
    Ok(held)
}

async fn hold(
    client: &dyn LockProvider,
    proxy: Option<&CountingProxy>,
    locks: usize,
) -> Result<Held, BenchError> {
    let proxy_buffers = || proxy.map_or(0, |p| p.carried.buffers());
    let (heap_before, buffers_before) = (allocated::in_use(), proxy_buffers());
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for i in 0..locks {
        guards.push(client.lock(&format!("held-{i}"))?.acquire().await?);
    }
    let acquired_in = started.elapsed();

    let tick = LEASE / 3;
    // One tick for the renewals of the acquire phase (and etcd's key watches, which
    // start a moment after each grant) to settle; then the heap is read, and the
    // traffic counted over the next ticks.
    tokio::time::sleep(tick).await;
    let grown = allocated::in_use() - heap_before;
    let proxy_grown = proxy_buffers() - buffers_before;
    let heap_per_lock = (grown as f64 - proxy_grown as f64) / locks.max(1) as f64;
    let per_tick = match proxy {
        Some(proxy) => {
            let (sent, received) = proxy.carried.read();
            tokio::time::sleep(tick * TICKS).await;
            let (sent_after, received_after) = proxy.carried.read();
            Some((
                (sent_after - sent) as f64 / f64::from(TICKS),
                (received_after - received) as f64 / f64::from(TICKS),
            ))
        }
        None => None,
    };
    if guards.iter().any(|guard| !guard.is_held()) {
        return Err("a held lock was lost while its client only renewed".into());
    }
    for guard in guards {
        guard.release().await?;
    }
    Ok(Held {
        locks,
        acquired_in,
        heap_per_lock,
        tick,
        per_tick,
    })
}
