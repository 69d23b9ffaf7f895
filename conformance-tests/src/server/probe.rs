//! Whether a server serves requests, asked in its own protocol.
//!
//! An open port is not enough: Docker's port proxy accepts connections before the
//! server in the container listens, and some servers accept before they serve. Each
//! probe sends the smallest request its server answers and checks the answer.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a harness tells that a server on a loopback port is ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The port accepts a connection (enough for a local process, never for a container).
    Open,
    /// Redis answers `PING` with `+PONG`.
    Redis,
    /// ZooKeeper answers the `srvr` four-letter word with its mode.
    ZooKeeper,
    /// etcd answers `GET /health` with a healthy status.
    Etcd,
    /// PostgreSQL answers an SSL request with `N` or `S`.
    Postgres,
    /// MariaDB (or MySQL) greets a new connection with a protocol-10 handshake.
    MariaDb,
}

/// Reads a reply so far: `Some(ready)` once it decides, `None` to read on.
type Verdict = fn(&[u8]) -> Option<bool>;

/// The longest one probe waits for an answer.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

impl Probe {
    /// Whether the server on `127.0.0.1:port` is ready, by one request.
    pub async fn ready(self, port: u16) -> bool {
        tokio::time::timeout(PROBE_LIMIT, self.ask(port))
            .await
            .unwrap_or(false)
    }

    async fn ask(self, port: u16) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
            return false;
        };
        let (request, accept): (&[u8], Verdict) = match self {
            Probe::Open => return true,
            Probe::Redis => (b"PING\r\n", |r| {
                contains(r, b"+PONG").then_some(true).or(ended(r, b"\r\n"))
            }),
            Probe::ZooKeeper => (b"srvr", |r| contains(r, b"Mode:").then_some(true)),
            Probe::Etcd => (
                b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                |r| contains(r, b"\"health\":\"true\"").then_some(true),
            ),
            // An SSLRequest: length 8, code 80877103.
            Probe::Postgres => (&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f], |r| {
                r.first().map(|b| *b == b'N' || *b == b'S')
            }),
            // The server speaks first: a packet header, then protocol version 10.
            Probe::MariaDb => (b"", |r| (r.len() > 4).then(|| r[4] == 10)),
        };
        if !request.is_empty() && stream.write_all(request).await.is_err() {
            return false;
        }
        let mut reply = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return accept(&reply).unwrap_or(false),
                Ok(n) => reply.extend_from_slice(&buf[..n]),
            }
            if let Some(ready) = accept(&reply) {
                return ready;
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `Some(false)` once a whole line that is not the answer has arrived.
fn ended(reply: &[u8], end: &[u8]) -> Option<bool> {
    reply.ends_with(end).then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A one-shot server that answers every connection with `reply` after reading
    /// what the client sent (or at once, for servers that speak first).
    async fn answering(reply: &'static [u8], read_first: bool) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                if read_first {
                    let mut buf = [0u8; 64];
                    let _ = s.read(&mut buf).await;
                }
                let _ = s.write_all(reply).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn a_connection_closed_at_once_is_not_ready() {
        // What Docker's proxy does while nothing listens in the container.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                drop(s);
            }
        });
        for probe in [Probe::Redis, Probe::Postgres, Probe::MariaDb, Probe::Etcd] {
            assert!(!probe.ready(port).await, "{probe:?}");
        }
        assert!(Probe::Open.ready(port).await);
    }

    #[tokio::test]
    async fn each_probe_accepts_its_servers_answer() {
        assert!(
            Probe::Redis
                .ready(answering(b"+PONG\r\n", true).await)
                .await
        );
        assert!(
            !Probe::Redis
                .ready(answering(b"-LOADING loading\r\n", true).await)
                .await
        );
        assert!(Probe::Postgres.ready(answering(b"N", true).await).await);
        assert!(
            Probe::MariaDb
                .ready(answering(b"\x5b\0\0\0\x0a10.11", false).await)
                .await
        );
        assert!(
            !Probe::MariaDb
                .ready(answering(b"\x17\0\0\0\xffHost blocked", false).await)
                .await
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_not_ready() {
        let port = super::super::free_port().unwrap();
        assert!(!Probe::Open.ready(port).await);
    }
}
