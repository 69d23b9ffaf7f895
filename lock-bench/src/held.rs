//! One client holding many locks at once: what each held lock costs the client in
//! heap, and what its watchdog sends and receives to keep them all, per renewal tick
//! (through a [`CountingProxy`] in front of the server).

use std::time::Duration;

use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions};
use tokio::time::Instant;

use crate::allocated;
use crate::contender::BenchError;
use crate::counting_proxy::CountingProxy;

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
    let proxy = match server_address(url) {
        Some((address, _)) => Some(CountingProxy::to(address.to_owned()).await?),
        None => None,
    };
    let client_url = match (&proxy, server_address(url)) {
        (Some(proxy), Some((address, at))) => format!(
            "{}127.0.0.1:{}{}",
            &url[..at],
            proxy.port,
            &url[at + address.len()..]
        ),
        _ => url.to_owned(),
    };
    let options = ConnectOptions::default()
        .namespace(format!("bench-held-{}", std::process::id()))
        .watchdog_lease(LEASE);
    let client = connect(&client_url, options).await?;

    let before = allocated::in_use();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(locks);
    for i in 0..locks {
        guards.push(client.lock(&format!("held-{i}"))?.acquire().await?);
    }
    let acquired_in = started.elapsed();
    let heap_per_lock = (allocated::in_use() - before) as f64 / locks.max(1) as f64;

    let tick = LEASE / 3;
    // One tick for renewals of the acquire phase to settle, then count.
    tokio::time::sleep(tick).await;
    let per_tick = match &proxy {
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
    client.shutdown().await?;
    Ok(Held {
        locks,
        acquired_in,
        heap_per_lock,
        tick,
        per_tick,
    })
}

/// The `host:port` of the server in `url` and where it starts, for a server on this
/// machine (`127.0.0.1` or `localhost`), which the bench can put a proxy in front of.
fn server_address(url: &str) -> Option<(&str, usize)> {
    ["127.0.0.1:", "localhost:"].iter().find_map(|host| {
        let at = url.find(host)?;
        let digits = url[at + host.len()..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        (digits > 0).then(|| (&url[at..at + host.len() + digits], at))
    })
}

#[cfg(test)]
mod tests {
    use super::server_address;

    #[test]
    fn finds_the_local_server_in_a_url() {
        assert_eq!(
            server_address("postgres://u:p@127.0.0.1:5432/db"),
            Some(("127.0.0.1:5432", 15))
        );
        assert_eq!(
            server_address("redis://localhost:6379"),
            Some(("localhost:6379", 8))
        );
        assert_eq!(server_address("sqlite:///tmp/x.db"), None);
        assert_eq!(server_address("memory://"), None);
    }
}
