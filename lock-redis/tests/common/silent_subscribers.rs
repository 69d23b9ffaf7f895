//! A TCP proxy in front of a server that can make its subscriber connections go silent:
//! every byte of a connection that has sent `SUBSCRIBE` is then dropped both ways, and
//! nothing is closed (a firewall or NAT that forgot the connection). Other connections,
//! and connections made later, are proxied as usual.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct SilentSubscribers {
    port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    /// Bumped by [`SilentSubscribers::silence`]: subscribers of an older round go silent.
    round: AtomicU64,
    /// How many connections have subscribed so far.
    subscribers: AtomicU64,
}

impl SilentSubscribers {
    pub async fn to(server_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let for_accept = shared.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, for_accept.clone()));
            }
        });
        SilentSubscribers {
            port,
            shared,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Waits (up to 10 s) until `n` connections have subscribed.
    pub async fn wait_for_subscribers(&self, n: u64) {
        for _ in 0..500 {
            if self.shared.subscribers.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("fewer than {n} connections subscribed within 10 s");
    }

    /// Every connection that has subscribed so far drops all its bytes from now on.
    pub fn silence(&self) {
        self.shared.round.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for SilentSubscribers {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The round in which a connection subscribed, if it has.
#[derive(Default)]
struct Subscribed {
    yes: AtomicBool,
    round: AtomicU64,
}

impl Subscribed {
    fn silenced(&self, shared: &Shared) -> bool {
        self.yes.load(Ordering::SeqCst)
            && self.round.load(Ordering::SeqCst) < shared.round.load(Ordering::SeqCst)
    }
}

async fn pipe(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let subscribed = Arc::new(Subscribed::default());
    let (up_shared, up_subscribed) = (shared.clone(), subscribed.clone());
    let requests = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if up_subscribed.silenced(&up_shared) {
                continue;
            }
            if !up_subscribed.yes.load(Ordering::SeqCst)
                && buf[..n]
                    .windows(9)
                    .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
            {
                up_subscribed
                    .round
                    .store(up_shared.round.load(Ordering::SeqCst), Ordering::SeqCst);
                up_subscribed.yes.store(true, Ordering::SeqCst);
                up_shared.subscribers.fetch_add(1, Ordering::SeqCst);
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if subscribed.silenced(&shared) {
            continue;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    requests.abort();
}
