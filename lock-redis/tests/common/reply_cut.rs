//! A TCP proxy in front of a server that can lose one reply: when armed, the next bytes
//! the server sends are thrown away and that connection is closed, so the request ran
//! on the server but its client never hears of it (a server or network dying at the
//! worst moment). Later connections are proxied as usual.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct ReplyCut {
    port: u16,
    armed: Arc<AtomicBool>,
    accept: JoinHandle<()>,
}

impl ReplyCut {
    pub async fn to(server_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let armed_for_accept = armed.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, armed_for_accept.clone()));
            }
        });
        ReplyCut {
            port,
            armed,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Loses the next reply of any connection, and closes that connection.
    pub fn lose_next_reply(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Whether the armed cut has happened.
    pub fn has_cut(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

async fn pipe(client: TcpStream, server: TcpStream, armed: Arc<AtomicBool>) {
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
