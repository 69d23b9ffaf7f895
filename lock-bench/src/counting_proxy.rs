//! A TCP proxy on a free 127.0.0.1 port that counts the bytes each way: what the
//! held-locks measurement reads a watchdog's renewal traffic from, and the crowd
//! measurement a handoff's.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::contender::BenchError;

/// Bytes carried so far, and the proxy's own buffers (not the client's heap).
#[derive(Default)]
pub struct Carried {
    sent: AtomicU64,
    received: AtomicU64,
    buffers: AtomicI64,
}

impl Carried {
    /// (client to server, server to client) so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }

    /// Bytes of buffer the proxy holds now, one per direction of each connection.
    pub fn buffers(&self) -> i64 {
        self.buffers.load(Ordering::Relaxed)
    }
}

/// Each direction's buffer.
const BUFFER: usize = 16 * 1024;

/// A running proxy; dropping it closes everything it carries.
pub struct CountingProxy {
    /// The proxy's port.
    pub port: u16,
    /// What it carried.
    pub carried: Arc<Carried>,
    accepting: JoinHandle<()>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        // The accepting task owns the pipes: aborting it drops them all.
        self.accepting.abort();
    }
}

impl CountingProxy {
    /// A proxy to `target` (`host:port`).
    pub async fn to(target: String) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let carried = Arc::new(Carried::default());
        let counters = carried.clone();
        let accepting = tokio::spawn(async move {
            let mut pipes = JoinSet::new();
            loop {
                let client = match listener.accept().await {
                    Ok((client, _)) => client,
                    // Out of descriptors, say: try again in a moment.
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let up = counters.clone();
                pipes.spawn(async move { pipe(client_read, server_write, &up, true).await });
                let down = counters.clone();
                pipes.spawn(async move { pipe(server_read, client_write, &down, false).await });
            }
        });
        Ok(CountingProxy {
            port,
            carried,
            accepting,
        })
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    carried: &Carried,
    upward: bool,
) {
    carried.buffers.fetch_add(BUFFER as i64, Ordering::Relaxed);
    let count = if upward {
        &carried.sent
    } else {
        &carried.received
    };
    let mut buf = vec![0u8; BUFFER];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::Relaxed);
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
    carried.buffers.fetch_sub(BUFFER as i64, Ordering::Relaxed);
}

/// A proxy in front of the server `url` names, and the URL that reaches it through
/// the proxy; no proxy (and `url` itself) where there is no server to count at
/// (in-memory, SQLite).
pub async fn in_front_of(url: &str) -> Result<(Option<CountingProxy>, String), BenchError> {
    match local_server(url)? {
        Some(server) => {
            let proxy = CountingProxy::to(server.address.clone()).await?;
            let through = server.url_through(proxy.port);
            Ok((Some(proxy), through))
        }
        None => Ok((None, url.to_owned())),
    }
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
        format!("the bench counts the traffic of {url:?} only {why}").into()
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
