//! A TCP proxy on a free 127.0.0.1 port that counts the bytes each way: what the
//! held-locks measurement reads a watchdog's renewal traffic from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Bytes carried so far: (client to server, server to client).
#[derive(Default)]
pub struct Carried {
    sent: AtomicU64,
    received: AtomicU64,
}

impl Carried {
    /// (client to server, server to client) so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }
}

/// A running proxy; dropping it stops accepting (open connections end with their
/// client).
pub struct CountingProxy {
    /// The proxy's port.
    pub port: u16,
    /// What it carried.
    pub carried: Arc<Carried>,
    accepting: JoinHandle<()>,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
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
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let up = counters.clone();
                tokio::spawn(async move { pipe(client_read, server_write, &up.sent).await });
                let down = counters.clone();
                tokio::spawn(async move { pipe(server_read, client_write, &down.received).await });
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
    count: &AtomicU64,
) {
    let mut buf = vec![0u8; 64 * 1024];
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
}
