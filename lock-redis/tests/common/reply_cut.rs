//! A TCP proxy in front of a server that can lose one reply: when armed, the next bytes
//! the server sends are thrown away and that connection is closed, so the request ran
//! on the server but its client never hears of it (a server or network dying at the
//! worst moment). Later connections are proxied as usual.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct ReplyCut {
    port: u16,
    armed: Arc<AtomicBool>,
    outage: Arc<Outage>,
    accept: JoinHandle<()>,
}

/// How long after the armed cut new connections are closed at once (none by default).
#[derive(Default)]
struct Outage {
    after_cut: Mutex<Duration>,
    until: Mutex<Option<Instant>>,
}

impl Outage {
    fn start(&self) {
        let after_cut = *self.after_cut.lock().unwrap();
        *self.until.lock().unwrap() = Some(Instant::now() + after_cut);
    }

    fn refusing(&self) -> bool {
        self.until
            .lock()
            .unwrap()
            .is_some_and(|until| Instant::now() < until)
    }
}

impl ReplyCut {
    pub async fn to(server_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let outage = Arc::new(Outage::default());
        let armed_for_accept = armed.clone();
        let outage_for_accept = outage.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if outage_for_accept.refusing() {
                    // Accepted and closed at once: the client's request goes nowhere.
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                tokio::spawn(pipe(
                    client,
                    server,
                    armed_for_accept.clone(),
                    outage_for_accept.clone(),
                ));
            }
        });
        ReplyCut {
            port,
            armed,
            outage,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Loses the next reply of any connection, and closes that connection.
    pub fn lose_next_reply(&self) {
        *self.outage.after_cut.lock().unwrap() = Duration::ZERO;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Loses the next reply like [`lose_next_reply`](Self::lose_next_reply), and then
    /// closes every new connection at once for `outage`: a call run again after the
    /// lost reply fails too (a network that stays down for a while).
    pub fn lose_next_reply_then_refuse_for(&self, outage: Duration) {
        *self.outage.after_cut.lock().unwrap() = outage;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Waits until new connections go through again after
    /// [`lose_next_reply_then_refuse_for`](Self::lose_next_reply_then_refuse_for).
    pub async fn outage_over(&self) {
        while self.outage.refusing() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the armed cut has happened.
    pub fn has_cut(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

async fn pipe(client: TcpStream, server: TcpStream, armed: Arc<AtomicBool>, outage: Arc<Outage>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if armed.swap(false, Ordering::SeqCst) {
            outage.start();
            break;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    requests.abort();
    // Dropping both halves closes the client's connection.
}

impl Drop for ReplyCut {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
