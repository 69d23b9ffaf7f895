//! A TCP proxy on loopback that reads ZooKeeper's framing, to fail one chosen request
//! the way a network does: its connection reset before it reaches the server, its reply
//! lost with the connection, or everything blackholed from some moment on.
//!
//! Rules act in order: only the first one still armed is looked at, and it is spent
//! once it fired, so a test can script "lose this create's reply, then cut the next
//! listing".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// ZooKeeper's request types (`ZooDefs.OpCode`) the checks use.
pub mod op {
    pub const DELETE: i32 = 2;
    pub const GET_CHILDREN: i32 = 8;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CREATE2: i32 = 15;
}

/// What to do with the first request of a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Do not send it; reset the client's connection (an I/O error for the client).
    Reset,
    /// Do not send it; close the client's connection (end of stream for the client).
    Close,
    /// Send it; once the server answered it without error, drop the answer and close
    /// the client's connection: the request took effect, the client never heard.
    LoseReply,
}

#[derive(Debug)]
struct Rule {
    ops: &'static [i32],
    fault: Fault,
}

#[derive(Debug, Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    /// Rules that fired so far.
    fired: Mutex<Vec<(i32, Fault)>>,
    cut: AtomicBool,
}

/// The proxy; dropping it stops accepting (connections already made run on until
/// either side closes them).
#[derive(Debug)]
pub struct ZkFaults {
    port: u16,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl ZkFaults {
    /// A proxy to the server on 127.0.0.1:`server_port`.
    pub async fn to(server_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let for_task = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                tokio::spawn(connection(client, server, for_task.clone()));
            }
        });
        Ok(ZkFaults { port, shared, task })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Arms `fault` for the next request of one of the types `ops`, after every rule
    /// armed before it has fired.
    pub fn then(&self, ops: &'static [i32], fault: Fault) {
        self.shared.rules.lock().unwrap().push(Rule { ops, fault });
    }

    /// The rules that fired so far, as (request type, fault).
    pub fn fired(&self) -> Vec<(i32, Fault)> {
        self.shared.fired.lock().unwrap().clone()
    }

    /// From now on every frame is dropped, both ways (connections stay open, new ones
    /// are accepted and blackholed too).
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
    }
}

impl Drop for ZkFaults {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one frame (4-byte big-endian length, then the body), or `None` at the end.
async fn frame(from: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).await.ok()?;
    let len = usize::try_from(u32::from_be_bytes(len)).ok()?;
    let mut body = vec![0u8; len];
    from.read_exact(&mut body).await.ok()?;
    let mut whole = Vec::with_capacity(len + 4);
    whole.extend_from_slice(&(len as u32).to_be_bytes());
    whole.extend_from_slice(&body);
    Some(whole)
}

fn int_at(frame: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?))
}

/// Which request's reply to lose, as (xid, type), set by the request side for the
/// reply side.
type LoseXid = Arc<Mutex<Option<(i32, i32)>>>;

async fn connection(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let client_write = Arc::new(tokio::sync::Mutex::new(Some(client_write)));
    let lose: LoseXid = Arc::new(Mutex::new(None));
    let up = requests(
        client_read,
        server_write,
        client_write.clone(),
        shared.clone(),
        lose.clone(),
    );
    let down = replies(server_read, client_write, shared, lose);
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Client to server: the connect request, then requests `(len, xid, type, ...)`.
async fn requests(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    client: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
    shared: Arc<Shared>,
    lose: LoseXid,
) {
    let mut first = true;
    while let Some(frame) = frame(&mut from).await {
        if shared.cut.load(Ordering::SeqCst) {
            continue;
        }
        if !std::mem::take(&mut first) {
            let (xid, op) = (int_at(&frame, 4), int_at(&frame, 8));
            if let (Some(xid), Some(op)) = (xid, op) {
                let fault = {
                    let rules = shared.rules.lock().unwrap();
                    rules
                        .first()
                        .filter(|r| r.ops.contains(&op))
                        .map(|r| r.fault)
                };
                match fault {
                    Some(Fault::Reset) | Some(Fault::Close) => {
                        let fault = fault.unwrap();
                        spend(&shared, op, fault);
                        if let Some(writer) = client.lock().await.take() {
                            let mut stream = from.reunite(writer).expect("halves of one stream");
                            if fault == Fault::Reset {
                                // No lingering: closing sends a reset. (A zero linger
                                // never blocks the drop, the reason for the warning.)
                                #[allow(deprecated)]
                                let _ = stream.set_linger(Some(std::time::Duration::ZERO));
                            } else {
                                let _ = stream.shutdown().await;
                            }
                            drop(stream);
                        }
                        return;
                    }
                    Some(Fault::LoseReply) => {
                        *lose.lock().unwrap() = Some((xid, op));
                    }
                    None => {}
                }
            }
        }
        if to.write_all(&frame).await.is_err() {
            return;
        }
    }
}

/// Removes the first rule and records that it fired.
fn spend(shared: &Shared, op: i32, fault: Fault) {
    shared.rules.lock().unwrap().remove(0);
    shared.fired.lock().unwrap().push((op, fault));
}

/// Server to client: the connect response, then replies `(len, xid, zxid, err, ...)`.
async fn replies(
    mut from: OwnedReadHalf,
    client: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
    shared: Arc<Shared>,
    lose: LoseXid,
) {
    let mut first = true;
    while let Some(frame) = frame(&mut from).await {
        if shared.cut.load(Ordering::SeqCst) {
            continue;
        }
        if !std::mem::take(&mut first) {
            let xid = int_at(&frame, 4);
            let err = int_at(&frame, 16);
            let armed = *lose.lock().unwrap();
            if let Some((_, op)) = armed.filter(|(lost, _)| Some(*lost) == xid) {
                *lose.lock().unwrap() = None;
                if err == Some(0) {
                    // Taken effect: the reply goes, and the connection with it.
                    spend(&shared, op, Fault::LoseReply);
                    if let Some(mut writer) = client.lock().await.take() {
                        let _ = writer.shutdown().await;
                    }
                    return;
                }
            }
        }
        let mut guard = client.lock().await;
        let Some(writer) = guard.as_mut() else {
            return;
        };
        if writer.write_all(&frame).await.is_err() {
            return;
        }
    }
}
