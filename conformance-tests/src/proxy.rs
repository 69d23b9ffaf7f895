//! A TCP proxy on loopback between clients and a server, for tests that cut a client off
//! the way a network does: [`Blackhole::cut`] stops every byte both ways while the
//! connections stay open (no reset, no FIN), as when packets are silently dropped;
//! [`Blackhole::cut_replies`] stops only what the server sends, so requests still act on
//! the server but their replies are lost; [`Blackhole::heal`] lets new connections
//! through again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A proxy from a free 127.0.0.1 port to a server's port that can blackhole. Dropping
/// it closes everything.
#[derive(Debug)]
pub struct Blackhole {
    port: u16,
    /// Whether bytes from clients reach the server.
    requests_open: Arc<AtomicBool>,
    /// Whether bytes from the server reach the clients.
    replies_open: Arc<AtomicBool>,
    /// Counts heals: a connection made before the last heal may have lost bytes, so it
    /// is closed when it next carries any.
    heals: Arc<AtomicU64>,
    /// When bytes from a client last reached the server: the server's "last heard".
    last_to_server: Arc<Mutex<Option<Instant>>>,
    task: JoinHandle<()>,
}

impl Blackhole {
    /// Starts a proxy to the server on 127.0.0.1:`server_port`.
    ///
    /// # Errors
    /// The listener could not be bound.
    pub async fn to(server_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let requests_open = Arc::new(AtomicBool::new(true));
        let replies_open = Arc::new(AtomicBool::new(true));
        let heals = Arc::new(AtomicU64::new(0));
        let last_to_server = Arc::new(Mutex::new(None));
        let (up, down) = (requests_open.clone(), replies_open.clone());
        let (heard, healed) = (last_to_server.clone(), heals.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let epoch = Epoch {
                    heals: healed.clone(),
                    at: healed.load(Ordering::SeqCst),
                };
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(
                    Box::new(client_read),
                    Box::new(server_write),
                    up.clone(),
                    epoch.clone(),
                    Some(heard.clone()),
                ));
                tokio::spawn(pump(
                    Box::new(server_read),
                    Box::new(client_write),
                    down.clone(),
                    epoch,
                    None,
                ));
            }
        });
        Ok(Blackhole {
            port,
            requests_open,
            replies_open,
            heals,
            last_to_server,
            task,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// When the server last heard from a client through this proxy.
    pub fn last_to_server(&self) -> Option<Instant> {
        *self
            .last_to_server
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// From now on every byte is dropped, both ways; connections stay open, and new ones
    /// are accepted and blackholed too.
    pub fn cut(&self) {
        self.requests_open.store(false, Ordering::SeqCst);
        self.replies_open.store(false, Ordering::SeqCst);
    }

    /// From now on what the server sends is dropped: requests still reach it and act,
    /// but no reply comes back (a network that fails one way, a reply lost after the
    /// server acted). Connections stay open.
    pub fn cut_replies(&self) {
        self.replies_open.store(false, Ordering::SeqCst);
    }

    /// Ends [`cut`](Self::cut): bytes flow again on connections made from now on.
    /// Connections made before may have lost bytes (their streams are broken), so each
    /// is closed the next time either side sends on it, and the client reconnects.
    pub fn heal(&self) {
        self.heals.fetch_add(1, Ordering::SeqCst);
        self.requests_open.store(true, Ordering::SeqCst);
        self.replies_open.store(true, Ordering::SeqCst);
    }
}

/// The heal count when a connection was made.
#[derive(Clone, Debug)]
struct Epoch {
    heals: Arc<AtomicU64>,
    at: u64,
}

impl Epoch {
    fn is_stale(&self) -> bool {
        self.heals.load(Ordering::SeqCst) != self.at
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one direction while the proxy is open, and drops the bytes once it is cut.
async fn pump(
    mut from: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    mut to: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    open: Arc<AtomicBool>,
    epoch: Epoch,
    heard: Option<Arc<Mutex<Option<Instant>>>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            // Made before a heal: closed (both directions, as each side sees the other
            // side's end).
            Ok(_) if epoch.is_stale() => return,
            Ok(n) if open.load(Ordering::SeqCst) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                if let Some(heard) = &heard {
                    *heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                }
            }
            Ok(_) => {} // dropped on the floor
        }
    }
}
