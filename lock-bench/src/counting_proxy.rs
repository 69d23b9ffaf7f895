//! A TCP proxy on a free 127.0.0.1 port that counts the bytes each way: what the
//! held-locks measurement reads a watchdog's renewal traffic from.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

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
