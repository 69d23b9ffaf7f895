//! PostgreSQL `LISTEN`: while a backend has blocked waiters, one connection receives the
//! release notifications and wakes them.
//!
//! A backend none of whose waiters is blocked does not listen. PostgreSQL signals every
//! listening session of the database at each notification, and each one listening on
//! the tables' channel (every client of those tables) passes it on to its client: a
//! process that only takes free locks would otherwise be woken by every release of
//! every other process.
//!
//! A waiter whose look finds the lock taken [`hears`](Listener::hear) releases from
//! then on, and relies on them only if the listening was on from before that look to
//! after it asked (a release in between would otherwise go unheard); otherwise it
//! looks again, or polls while the listening starts. The connection is made in a task
//! of its own, so a slow connect never keeps a waiter from looking, and every waiter
//! is woken to look once the listening is on. It is closed within half a [`LINGER`]
//! once no waiter has needed it for a [`LINGER`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lock_core::Result;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{convert, timed_out};
use crate::wait_line::WaitLines;

/// How long the connection is kept at least once no waiter needs it (at most half as
/// long again: the reaper looks every half of it): waits that follow each other
/// closely reuse it, and a process that stopped waiting soon stops being woken.
const LINGER: Duration = Duration::from_secs(2);

/// How long after a failed start waiters poll before it is tried again, so a server
/// that refuses `LISTEN` does not cost every blocked look a connection attempt.
const RETRY_AFTER: Duration = Duration::from_secs(1);

#[cfg(feature = "postgres")]
type Connection = sqlx::postgres::PgListener;
#[cfg(not(feature = "postgres"))]
type Connection = std::convert::Infallible;

/// This backend's listening, on while it has blocked waiters; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Listener {
    /// The waiters, by the hash of the key each waits for.
    lines: Arc<WaitLines>,
    target: Arc<Target>,
    /// The serial number of the listening that is on, 0 if none: set once `LISTEN`
    /// succeeded; cleared under `state`'s lock by a stop, or by its receiver as it
    /// ends.
    live: Arc<AtomicU64>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: Option<Running>,
    starting: Option<JoinHandle<()>>,
    failed_at: Option<Instant>,
    /// Waiters holding a [`Hearing`].
    hearing: usize,
    /// Since when none has.
    unneeded_since: Option<Instant>,
    /// The last listening's serial number.
    serial: u64,
}

/// The listening connection's task and the task that closes it once unneeded.
#[derive(Debug)]
struct Running {
    receiver: JoinHandle<()>,
    reaper: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.receiver.abort();
        self.reaper.abort();
    }
}

impl Drop for State {
    fn drop(&mut self) {
        if let Some(starting) = &self.starting {
            starting.abort();
        }
    }
}

/// A blocked waiter's claim on the listening: kept on while any lives.
#[derive(Debug)]
pub(crate) struct Hearing {
    listener: Arc<Listener>,
}

impl Drop for Hearing {
    fn drop(&mut self) {
        let mut state = self.listener.locked();
        state.hearing -= 1;
        if state.hearing == 0 {
            state.unneeded_since = Some(Instant::now());
        }
    }
}

impl Listener {
    /// The listening for `channel` at `url`, not started: the payload of each
    /// notification is the released key's hash.
    pub(crate) fn new(url: &str, channel: &str, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Listener {
            lines: Arc::default(),
            target: Arc::new(Target {
                url: url.to_owned(),
                channel: channel.to_owned(),
                connect_timeout,
            }),
            live: Arc::default(),
            state: Mutex::default(),
        })
    }

    /// The waiters this listener wakes, by key hash.
    pub(crate) fn lines(&self) -> &Arc<WaitLines> {
        &self.lines
    }

    /// The listening on now, if any. Read before a look and again after
    /// [`hear`](Self::hear): the same value both times means every release after the
    /// look is heard.
    pub(crate) fn live(&self) -> Option<u64> {
        match self.live.load(Ordering::SeqCst) {
            0 => None,
            serial => Some(serial),
        }
    }

    /// Keeps the listening from being closed for want of waiters while the returned
    /// claim lives, and starts it if it is off, unless a start failed within
    /// [`RETRY_AFTER`] (in a task of its own: [`live`](Self::live) tells when it is on,
    /// and every waiter is woken then).
    pub(crate) fn hear(self: &Arc<Self>) -> Hearing {
        let mut state = self.locked();
        state.hearing += 1;
        self.start_if_off(&mut state);
        Hearing {
            listener: self.clone(),
        }
    }

    /// Starts the listening if it is off and not starting, unless a start failed
    /// lately.
    pub(crate) fn start_if_needed(self: &Arc<Self>) {
        let mut state = self.locked();
        self.start_if_off(&mut state);
    }

    fn start_if_off(self: &Arc<Self>, state: &mut State) {
        // A receiver that lost its connection cleared the serial number, and ends.
        let running = self.live().is_some()
            && state
                .running
                .as_ref()
                .is_some_and(|running| !running.receiver.is_finished());
        // A start's task ends early only if its runtime shut down.
        let starting = state
            .starting
            .as_ref()
            .is_some_and(|starting| !starting.is_finished());
        let failed_lately = state.failed_at.is_some_and(|at| at.elapsed() < RETRY_AFTER);
        if running || starting || failed_lately {
            return;
        }
        state.running = None;
        state.starting = Some(tokio::spawn(start(
            Arc::downgrade(self),
            self.target.clone(),
        )));
    }

    fn locked(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock can panic, so a poisoned lock's state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where to listen.
#[derive(Debug)]
struct Target {
    url: String,
    channel: String,
    connect_timeout: Duration,
}

impl Target {
    /// Connects and listens on the channel.
    #[cfg(feature = "postgres")]
    async fn connect(&self) -> Result<Connection> {
        let connect = async {
            let mut listener = sqlx::postgres::PgListener::connect(&self.url).await?;
            listener.listen(&self.channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| {
                timed_out(
                    "postgres",
                    "connecting the LISTEN connection",
                    self.connect_timeout,
                )
            })?
            .map_err(|e| convert("postgres", e))
    }

    /// Without the `postgres` feature no PostgreSQL URL gets this far (see
    /// [`Dialect::check_compiled`](crate::Dialect::check_compiled)).
    #[cfg(not(feature = "postgres"))]
    async fn connect(&self) -> Result<Connection> {
        let _ = (
            &self.url,
            &self.channel,
            self.connect_timeout,
            convert,
            timed_out,
        );
        Err(lock_core::Error::invalid_argument(
            "PostgreSQL needs lock-sql's `postgres` feature",
        ))
    }
}

/// Connects, then turns the listening on and wakes every waiter to look. Holds no
/// reference to the listener while it connects, so a backend dropped meanwhile is not
/// kept for it.
async fn start(listener: Weak<Listener>, target: Arc<Target>) {
    let connected = target.connect().await;
    let Some(listener) = listener.upgrade() else {
        return;
    };
    let mut state = listener.locked();
    state.starting = None;
    match connected {
        Ok(connection) => {
            state.serial += 1;
            let serial = state.serial;
            let live = listener.live.clone();
            live.store(serial, Ordering::SeqCst);
            let ends = LiveUntilDropped {
                live,
                serial,
                waiters: listener.lines.clone(),
            };
            state.running = Some(Running {
                receiver: tokio::spawn(receive(connection, ends)),
                reaper: tokio::spawn(reap(Arc::downgrade(&listener))),
            });
            state.failed_at = None;
            if state.hearing == 0 {
                state.unneeded_since = Some(Instant::now());
            }
            drop(state);
            // Their looks may have come before the listening: a release between went
            // unheard.
            listener.lines.wake_all();
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot LISTEN for releases; waiters poll");
            state.failed_at = Some(Instant::now());
        }
    }
}

/// Ends the listening when its receiver ends for any reason (a lost connection, or its
/// runtime shutting down) while it is still on: clears its serial number, then wakes
/// every waiter to look, so none relies on it. A stop cleared the number first, and a
/// later listening has another.
struct LiveUntilDropped {
    live: Arc<AtomicU64>,
    serial: u64,
    waiters: Arc<WaitLines>,
}

impl Drop for LiveUntilDropped {
    fn drop(&mut self) {
        let ended = self
            .live
            .compare_exchange(self.serial, 0, Ordering::SeqCst, Ordering::SeqCst);
        if ended.is_ok() {
            self.waiters.wake_all();
        }
    }
}

/// Wakes the waiters of each released key, until aborted or the connection is lost,
/// which ends the listening (`live`): the next blocked look starts a new one.
#[cfg(feature = "postgres")]
async fn receive(mut listener: Connection, live: LiveUntilDropped) {
    let lost = loop {
        match listener.try_recv().await {
            Ok(Some(n)) => live.waiters.announce(n.payload()),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    tracing::debug!(error = ?lost, "LISTEN connection lost; the listening ends");
    drop(live);
}

#[cfg(not(feature = "postgres"))]
async fn receive(never: Connection, _: LiveUntilDropped) {
    match never {}
}

/// Closes the listening connection once no waiter has needed it for [`LINGER`];
/// ends with it.
async fn reap(listener: Weak<Listener>) {
    loop {
        tokio::time::sleep(LINGER / 2).await;
        let Some(listener) = listener.upgrade() else {
            return;
        };
        let mut state = listener.locked();
        let unneeded = state.hearing == 0
            && state
                .unneeded_since
                .is_some_and(|since| since.elapsed() >= LINGER);
        if unneeded {
            // Under the lock, so a waiter asking from now on finds it off.
            listener.live.store(0, Ordering::SeqCst);
            let stopped = state.running.take();
            drop(state);
            // Aborts this task too, which ends here without another await.
            drop(stopped);
            return;
        }
    }
}
