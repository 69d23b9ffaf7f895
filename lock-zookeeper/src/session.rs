//! The ZooKeeper session that carries every lock of a backend: connecting (and
//! reconnecting with a new session once one has ended), and watching its state.
//!
//! The session is the lease. While the connection is lost the session may still be
//! alive on the server, so locks are *uncertain*; once the client has been
//! disconnected long enough that the server may have expired the session and handed
//! the locks on ([`loss_after_disconnect`]), the session is declared lost here and
//! dropped (if the
//! server still had it, closing it deletes the nodes), whatever the server says later.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client::{Client, SessionState, StateWatcher};

use crate::config::ZkConfig;
use crate::error::{self, BACKEND};
use lock_core::{Error, Result};

/// What the backend's session can promise right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Connected: locks held through this backend are held.
    Connected,
    /// Connection lost, session maybe still alive: locks are uncertain. Stop work
    /// that needs them until `Connected` again, or until the guards report the loss.
    Suspended,
    /// No live session (none yet, or it expired, closed or was declared lost): no lock
    /// is held through it. The next request starts a new session.
    Lost,
}

/// One ZooKeeper session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) client: Client,
    /// Tells leases and waiters apart from those of an earlier session.
    pub(crate) generation: u64,
    dead: watch::Sender<bool>,
}

impl Session {
    pub(crate) fn is_dead(&self) -> bool {
        *self.dead.borrow()
    }

    fn mark_dead(&self) -> bool {
        self.dead
            .send_if_modified(|dead| !std::mem::replace(dead, true))
    }

    /// A receiver that turns true once the session has ended. Holds no reference to
    /// the session, so it does not keep the session open.
    pub(crate) fn dead_signal(&self) -> watch::Receiver<bool> {
        self.dead.subscribe()
    }

    pub(crate) fn state(&self) -> ConnectionState {
        if self.is_dead() {
            return ConnectionState::Lost;
        }
        match self.client.state() {
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                ConnectionState::Connected
            }
            SessionState::Disconnected => ConnectionState::Suspended,
            _ => ConnectionState::Lost,
        }
    }
}

/// Waits until `signal` says the session ended.
pub(crate) async fn ended(mut signal: watch::Receiver<bool>) {
    // An error means the session is gone altogether, which is an end too.
    let _ = signal.wait_for(|dead| *dead).await;
}

/// The backend's current session, made on first use and again after one ends.
#[derive(Debug)]
pub(crate) struct Sessions {
    config: ZkConfig,
    current: Arc<Mutex<Option<Arc<Session>>>>,
    /// Serialises connecting so concurrent requests share one new session.
    connecting: tokio::sync::Mutex<()>,
    generation: std::sync::atomic::AtomicU64,
}

impl Sessions {
    pub(crate) fn new(config: ZkConfig) -> Self {
        Sessions {
            config,
            current: Arc::new(Mutex::new(None)),
            connecting: tokio::sync::Mutex::new(()),
            generation: std::sync::atomic::AtomicU64::new(1),
        }
    }

    pub(crate) fn config(&self) -> &ZkConfig {
        &self.config
    }

    /// The current session if it is alive, without connecting.
    pub(crate) fn peek(&self) -> Option<Arc<Session>> {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current.as_ref().filter(|s| !s.is_dead()).cloned()
    }

    /// The live session, connecting a new one if needed.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if no session could be made within the connect timeout.
    pub(crate) async fn get(&self) -> Result<Arc<Session>> {
        if let Some(session) = self.peek() {
            return Ok(session);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(session) = self.peek() {
            return Ok(session);
        }
        let connect = async {
            refuse_if_every_host_refuses(self.config.hosts()).await?;
            self.connect().await
        };
        let client = tokio::time::timeout(self.config.connect_timeout(), connect)
            .await
            .map_err(|_| {
                // The client retries a failed TLS handshake without saying why: name
                // the likely causes.
                let tls = match self.config.tls() {
                    Some(_) => " (over TLS: a server certificate the CA did not sign, or a client certificate the server refuses, looks like this)",
                    None => "",
                };
                error::unavailable(format!(
                    "no session with {} within the connect timeout {:?}{tls}",
                    self.config.connect_string(),
                    self.config.connect_timeout()
                ))
            })??;
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = Arc::new(Session {
            client,
            generation,
            dead: watch::Sender::new(false),
        });
        tracing::debug!(session = ?session.client.session_id(), timeout = ?session.client.session_timeout(), "zookeeper session started");
        tokio::spawn(monitor(
            Arc::downgrade(&session),
            Arc::downgrade(&self.current),
            session.client.state_watcher(),
            session.client.session_timeout(),
        ));
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.clone());
        Ok(session)
    }

    async fn connect(&self) -> Result<Client> {
        // The client's own idle timeout (2/5 of the session timeout, checked every
        // twentieth) decides when a silent connection counts as lost, and
        // `loss_after_disconnect` counts on exactly that: set no connection timeout
        // here. Our connect timeout bounds this whole call.
        let mut connector = Client::connector().with_session_timeout(self.config.session_timeout());
        if let Some((user, password)) = self.config.digest() {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let client = match self.config.tls() {
            #[cfg(feature = "tls")]
            Some(tls) => {
                connector = connector.with_tls(crate::tls::client_tls(tls)?);
                connector
                    .secure_connect(&self.config.connect_string())
                    .await
            }
            // `ZkConfig::with_tls` refuses TLS settings without the feature.
            #[cfg(not(feature = "tls"))]
            Some(_) => {
                return Err(Error::invalid_argument(
                    "TLS to ZooKeeper needs lock-zookeeper's `tls` feature",
                ))
            }
            None => connector.connect(&self.config.connect_string()).await,
        }
        .map_err(error::map)?;
        let Some(chroot) = self.config.chroot() else {
            return Ok(client);
        };
        // The chroot is the tenant's root: persistent, so it is never reaped.
        let options = crate::acl::directory_options(self.config.digest().is_some(), false);
        client.mkdir(chroot, &options).await.map_err(error::map)?;
        client.chroot(chroot.to_owned()).map_err(|_| {
            Error::invalid_argument(format!("zookeeper chroot {chroot:?} is not valid"))
        })
    }

    /// The state of the current session.
    pub(crate) fn state(&self) -> ConnectionState {
        self.peek()
            .map_or(ConnectionState::Lost, |session| session.state())
    }
}

/// Fails at once, naming the cause, when every host refuses a TCP connection: the
/// client library would try them in turn until the connect timeout and then say only
/// that no session came. Any other outcome (a host accepts, or does not answer) is left
/// to the real connect and its timeout. One extra connection per new session.
async fn refuse_if_every_host_refuses(hosts: &[String]) -> Result<()> {
    let mut refusals = Vec::new();
    for host in hosts {
        match tokio::net::TcpStream::connect(host.as_str()).await {
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                refusals.push(format!("{host}: {err}"));
            }
            _ => return Ok(()),
        }
    }
    Err(error::unavailable(format!(
        "every ZooKeeper server refused the connection ({})",
        refusals.join("; ")
    )))
}

/// Drops `session` if it is the current one, so its client closes once the last
/// in-flight request lets go of it (closing deletes its nodes if the server still has
/// them).
fn forget(current: &Mutex<Option<Arc<Session>>>, session: &Session) {
    let mut current = current.lock().unwrap_or_else(|p| p.into_inner());
    if current
        .as_ref()
        .is_some_and(|s| s.generation == session.generation)
    {
        *current = None;
    }
}

/// How long after zookeeper-client reports `Disconnected` a session's locks count as
/// lost, for a session timeout T.
///
/// The server may expire a session T after it last heard from the client (it rounds
/// the expiry up to its tick, never down), and the client's last reply from the server
/// came no earlier than that. zookeeper-client (with no connection timeout of its own,
/// as [`Sessions::connect`] sets none) checks every T/20 whether 2/5 T have passed
/// since its last reply, so it reports `Disconnected` between 2/5 T and 9/20 T after
/// the last reply, plus however late its task runs. Declaring the loss 7/20 T after the
/// report puts it at most 4/5 T after the last reply: at least T/5 before the server
/// may hand the locks on. That margin covers this task's and the client's scheduling
/// on a loaded machine and clock-rate drift between hosts (500 ppm is 1/2000 T) many
/// times over; a shorter one would cost little less uncertainty.
pub(crate) fn loss_after_disconnect(session_timeout: Duration) -> Duration {
    session_timeout * 7 / 20
}

/// The latest zookeeper-client reports `Disconnected` after its last reply, on time:
/// its idle limit (2/5 T) plus one period of its idle check (T/20).
#[cfg(test)]
fn latest_disconnect_report(session_timeout: Duration) -> Duration {
    session_timeout * 2 / 5 + session_timeout / 20
}

/// Follows a session's state: marks it dead when it expires or closes, or when it has
/// been disconnected long enough that the server may have expired it
/// ([`loss_after_disconnect`]). Ends with the session.
async fn monitor(
    session: Weak<Session>,
    current: Weak<Mutex<Option<Arc<Session>>>>,
    mut states: StateWatcher,
    timeout: Duration,
) {
    let mut disconnected_at: Option<Instant> = None;
    loop {
        let state = match disconnected_at {
            Some(at) => tokio::select! {
                state = states.changed() => Some(state),
                () = tokio::time::sleep_until(at + loss_after_disconnect(timeout)) => None,
            },
            None => Some(states.changed().await),
        };
        let Some(live) = session.upgrade() else {
            return;
        };
        match state {
            Some(SessionState::Disconnected) => {
                tracing::warn!(session = ?live.client.session_id(), "zookeeper connection lost; locks are uncertain");
                disconnected_at.get_or_insert_with(Instant::now);
            }
            Some(SessionState::SyncConnected | SessionState::ConnectedReadOnly) => {
                if disconnected_at.take().is_some() {
                    tracing::info!(session = ?live.client.session_id(), "zookeeper connection restored");
                }
            }
            Some(terminal) => {
                if live.mark_dead() {
                    tracing::warn!(session = ?live.client.session_id(), state = ?terminal, "zookeeper session ended; its locks are lost");
                }
                if let Some(current) = current.upgrade() {
                    forget(&current, &live);
                }
                return;
            }
            None => {
                if live.mark_dead() {
                    tracing::warn!(session = ?live.client.session_id(), ?timeout, "zookeeper disconnected long enough for the server to expire the session; its locks are lost");
                }
                if let Some(current) = current.upgrade() {
                    forget(&current, &live);
                }
                return;
            }
        }
    }
}

/// The error for a request that needs a session that has ended.
pub(crate) fn ended_error() -> Error {
    Error::unavailable(BACKEND, "the zookeeper session ended".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_comes_a_fifth_of_the_session_timeout_before_expiry() {
        for ms in [400, 2_000, 4_000, 10_000, 40_000] {
            let t = Duration::from_millis(ms);
            let latest = latest_disconnect_report(t) + loss_after_disconnect(t);
            assert!(
                latest + t / 5 <= t,
                "T = {t:?}: loss {latest:?} after the last reply"
            );
        }
    }
}
