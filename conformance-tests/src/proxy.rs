//! A TCP proxy on loopback between clients and a server, for tests that cut a client off
//! the way a network does: [`Blackhole::cut`] stops every byte both ways while the
//! connections stay open (no reset, no FIN: a side's close reaches the other only once
//! the network heals), as when packets are silently dropped;
//! [`Blackhole::cut_replies`] stops only what the server sends (its close included), so
//! requests still act on the server but their replies are lost;
//! [`Blackhole::delay_replies`] holds every reply back for a while (a congested or
//! flapping link), in order;
//! [`Blackhole::heal`] lets new connections through again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
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
    /// How long, in ms, bytes from the server are held back before they go on.
    reply_delay_ms: Arc<AtomicU64>,
    /// Counts heals: a connection made before the last heal may have lost bytes, so it
    /// is closed when it next carries any.
    heals: Arc<AtomicU64>,
    /// When bytes from a client last reached the server: the server's "last heard".
    last_to_server: Arc<Mutex<Option<Instant>>>,
    /// How many chunks clients' bytes reached the server in.
    chunks_to_server: Arc<AtomicU64>,
    /// How many chunks the server's bytes reached clients in.
    chunks_to_client: Arc<AtomicU64>,
    /// Dropped with the proxy, which ends every connection through it.
    _gone: watch::Sender<()>,
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
        let reply_delay_ms = Arc::new(AtomicU64::new(0));
        let last_to_server = Arc::new(Mutex::new(None));
        let chunks_to_server = Arc::new(AtomicU64::new(0));
        let chunks_to_client = Arc::new(AtomicU64::new(0));
        let (up, down) = (requests_open.clone(), replies_open.clone());
        let delay = reply_delay_ms.clone();
        let (heard, healed) = (last_to_server.clone(), heals.clone());
        let (gone_sender, gone) = watch::channel(());
        let (sent, received) = (chunks_to_server.clone(), chunks_to_client.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let epoch = Epoch {
                    heals: healed.clone(),
                    at: healed.load(Ordering::SeqCst),
                    gone: gone.clone(),
                };
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(
                    Box::new(client_read),
                    Box::new(server_write),
                    Direction {
                        open: up.clone(),
                        delay_ms: None,
                        heard: Some(heard.clone()),
                        chunks: Some(sent.clone()),
                    },
                    epoch.clone(),
                ));
                tokio::spawn(pump(
                    Box::new(server_read),
                    Box::new(client_write),
                    Direction {
                        open: down.clone(),
                        delay_ms: Some(delay.clone()),
                        heard: None,
                        chunks: Some(received.clone()),
                    },
                    epoch,
                ));
            }
        });
        Ok(Blackhole {
            _gone: gone_sender,
            port,
            requests_open,
            replies_open,
            reply_delay_ms,
            heals,
            last_to_server,
            chunks_to_server,
            chunks_to_client,
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

    /// How many chunks clients' bytes have reached the server in so far. A client that
    /// waits for each reply before it sends again (as the SQL drivers do) sends each
    /// request in one chunk on loopback, so this counts its round trips.
    pub fn chunks_to_server(&self) -> u64 {
        self.chunks_to_server.load(Ordering::SeqCst)
    }

    /// How many chunks the server's bytes have reached clients in so far: replies, and
    /// whatever the server sends unasked (notifications).
    pub fn chunks_to_client(&self) -> u64 {
        self.chunks_to_client.load(Ordering::SeqCst)
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

    /// From now on what the server sends reaches the client `delay` later, in order:
    /// nothing is lost, so connections stay usable, but replies come after the
    /// client's call timeout and after requests the client sent meanwhile acted.
    /// [`undelay`](Self::undelay) ends it.
    pub fn delay_replies(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.reply_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Ends [`delay_replies`](Self::delay_replies): bytes read from now on go on at
    /// once (behind those still held back).
    pub fn undelay(&self) {
        self.reply_delay_ms.store(0, Ordering::SeqCst);
    }

    /// Ends [`cut`](Self::cut): bytes flow again on connections made from now on.
    /// Connections made before may have lost bytes (their streams are broken), so each
    /// is closed the next time either side sends on it, and the client reconnects.
    pub fn heal(&self) {
        self.heals.fetch_add(1, Ordering::SeqCst);
        self.reply_delay_ms.store(0, Ordering::SeqCst);
        self.requests_open.store(true, Ordering::SeqCst);
        self.replies_open.store(true, Ordering::SeqCst);
    }
}

/// The heal count when a connection was made.
#[derive(Clone, Debug)]
struct Epoch {
    heals: Arc<AtomicU64>,
    at: u64,
    /// Ends (its sender dropped) when the proxy is dropped.
    gone: watch::Receiver<()>,
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

/// One direction of a proxied connection.
struct Direction {
    /// Whether bytes go on (otherwise they are dropped).
    open: Arc<AtomicBool>,
    /// How long bytes are held back, if this direction can be delayed.
    delay_ms: Option<Arc<AtomicU64>>,
    /// Set to the time of every byte passed on (the server's "last heard").
    heard: Option<Arc<Mutex<Option<Instant>>>>,
    /// Counts the chunks passed on.
    chunks: Option<Arc<AtomicU64>>,
}

/// Copies one direction while the proxy is open, and drops the bytes once it is cut.
/// Each chunk goes to a writer task that sends it at its time, so a delay holds bytes
/// back without slowing the reads.
async fn pump(
    mut from: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    mut to: Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
    direction: Direction,
    epoch: Epoch,
) {
    let (chunks, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let (heard, passed) = (direction.heard, direction.chunks);
    let writer = tokio::spawn(async move {
        while let Some((at, bytes)) = queued.recv().await {
            if at > Instant::now() {
                tokio::time::sleep_until(at).await;
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
            if let Some(heard) = &heard {
                *heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            }
            if let Some(passed) = &passed {
                passed.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    let mut gone = epoch.gone.clone();
    loop {
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = gone.changed() => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            // Made before a heal: closed (both directions, as each side sees the other
            // side's end).
            Ok(_) if epoch.is_stale() => break,
            Ok(n) if direction.open.load(Ordering::SeqCst) => {
                let delay = direction
                    .delay_ms
                    .as_ref()
                    .map_or(0, |ms| ms.load(Ordering::SeqCst));
                let at = Instant::now() + Duration::from_millis(delay);
                if chunks.send((at, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
            Ok(_) => {} // dropped on the floor
        }
    }
    // An end read while this direction is cut is lost like its bytes: the other side
    // learns of it once the network heals (the connection, made before, then closes)
    // or the proxy goes.
    while !direction.open.load(Ordering::SeqCst) && !epoch.is_stale() {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = gone.changed() => break,
        }
    }
    // What was read before the end still goes on at its time; then the writer drops
    // its half, which closes it.
    drop(chunks);
    let _ = writer.await;
}
