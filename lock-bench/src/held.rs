//! One client holding many locks at once: what each held lock costs the client in
//! heap, and what its watchdog sends and receives to keep them all, per renewal tick
//! (through a [`CountingProxy`] in front of the server).

use std::time::Duration;

use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions, LockProvider};
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
    let server = local_server(url)?;
    let proxy = match &server {
        Some(server) => Some(CountingProxy::to(server.address.clone()).await?),
        None => None,
    };
    let client_url = match (&server, &proxy) {
        (Some(server), Some(proxy)) => server.url_through(proxy.port),
        _ => url.to_owned(),
    };
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

/// The one server on this machine that a URL names, which the bench can put a proxy
/// in front of.
#[derive(Debug, PartialEq, Eq)]
struct LocalServer {
    /// `host:port`, to connect the proxy to.
    address: String,
    /// The URL up to the port, and after it.
    before_port: String,
    after_port: String,
}

impl LocalServer {
    /// The URL with the proxy's port in place of the server's.
    fn url_through(&self, port: u16) -> String {
        format!("{}{port}{}", self.before_port, self.after_port)
    }
}

/// The server `url` names, if it has one (none for `memory://` and SQLite); an error
/// for a server the bench cannot count all the traffic of: on another machine, or one
/// of several (Sentinel, Cluster, RedLock, several endpoints).
fn local_server(url: &str) -> Result<Option<LocalServer>, BenchError> {
    let (scheme, rest) = url.split_once("://").ok_or("a URL with a scheme")?;
    if scheme == "memory" || scheme.starts_with("sqlite") {
        return Ok(None);
    }
    let refuse = |why: &str| -> BenchError {
        format!("--held counts the traffic of {url:?} only {why}").into()
    };
    if scheme.contains("sentinel") || scheme.contains("cluster") || scheme.contains("redlock") {
        return Err(refuse("for a single server, not a set of them"));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let host_port = &authority[host_start..];
    if host_port.contains(',') {
        return Err(refuse("for a single server, not a set of them"));
    }
    let (host, port) = host_port
        .rsplit_once(':')
        .ok_or_else(|| refuse("with the port in the URL"))?;
    if !matches!(host, "127.0.0.1" | "localhost") || port.parse::<u16>().is_err() {
        return Err(refuse(
            "for a server on this machine (127.0.0.1 or localhost)",
        ));
    }
    let port_at = scheme.len() + 3 + host_start + host.len() + 1;
    Ok(Some(LocalServer {
        address: host_port.to_owned(),
        before_port: url[..port_at].to_owned(),
        after_port: url[port_at + port.len()..].to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::local_server;

    #[test]
    fn puts_the_proxy_port_in_place_of_the_servers_only() {
        let server = local_server("postgres://u:127.0.0.1:9@127.0.0.1:5432/db?x=localhost:1")
            .unwrap()
            .unwrap();
        assert_eq!(server.address, "127.0.0.1:5432");
        assert_eq!(
            server.url_through(7),
            "postgres://u:127.0.0.1:9@127.0.0.1:7/db?x=localhost:1"
        );
        let server = local_server("redis://localhost:6379").unwrap().unwrap();
        assert_eq!(server.url_through(7), "redis://localhost:7");
        assert!(local_server("sqlite:///tmp/x.db").unwrap().is_none());
        assert!(local_server("memory://").unwrap().is_none());
        assert!(local_server("redis://mylocalhost:6379").is_err());
        assert!(local_server("redis+sentinel://127.0.0.1:26379/m").is_err());
        assert!(local_server("etcd://127.0.0.1:2379,127.0.0.1:2380").is_err());
    }
}
