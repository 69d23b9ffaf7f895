//! A virtual address in front of a replicated server: a TCP proxy on 127.0.0.1 that
//! forwards every connection to the node that is primary now. A failover moves it to
//! another node and cuts the connections it carried, as a floating IP or a DNS switch
//! does, so clients that know one address follow the primary.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The proxy; dropping it closes every connection.
#[derive(Debug)]
pub struct VirtualAddress {
    port: u16,
    target: Arc<AtomicU16>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl VirtualAddress {
    /// Listens on a free loopback port, forwarding to `target` (a host port).
    ///
    /// # Errors
    /// The listener could not be bound.
    pub async fn to(target: u16) -> Result<Self, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("bind the virtual address: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("virtual address: {e}"))?
            .port();
        let target = Arc::new(AtomicU16::new(target));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn({
            let target = target.clone();
            let connections = connections.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let to = target.load(Ordering::SeqCst);
                    let forward = tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(("127.0.0.1", to)).await else {
                            return;
                        };
                        let mut client = client;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    });
                    let mut open = connections.lock().expect("connections");
                    open.retain(|c: &JoinHandle<()>| !c.is_finished());
                    open.push(forward);
                }
            }
        });
        Ok(VirtualAddress {
            port,
            target,
            connections,
            accept,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Points the address at `target` and cuts the connections to the old one.
    pub fn move_to(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        for connection in self.connections.lock().expect("connections").drain(..) {
            connection.abort();
        }
    }
}

impl Drop for VirtualAddress {
    fn drop(&mut self) {
        self.accept.abort();
        for connection in self.connections.lock().expect("connections").drain(..) {
            connection.abort();
        }
    }
}
