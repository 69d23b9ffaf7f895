//! The ringer: the task that holds a client's doorbells on one connection of its own,
//! taking and freeing them in batches as its leases ask.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Row};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

/// How long the ringer keeps its connection once it holds no doorbell.
const LINGER: Duration = Duration::from_secs(2);

/// How much earlier than its time the ringer may take a doorbell it takes later.
const LATER_SLACK: Duration = Duration::from_millis(2);

/// Doorbells taken and freed per ringer statement at most.
const PER_STATEMENT: usize = 500;

/// How long the ringer waits before it takes its doorbells again on a new connection
/// after the last one failed.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// A doorbell to take at a time, unless its state says it was freed first.
pub(super) type LaterTake = (Instant, Arc<str>, Arc<AtomicU8>);

/// What a client asks of its ringer.
pub(super) enum Ring {
    Take(Arc<str>),
    Free(Arc<str>),
    /// Doorbells wait in [`Later`]: take them when their time comes.
    Tick,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ring::Take(name) => write!(f, "Take({name})"),
            Ring::Free(name) => write!(f, "Free({name})"),
            Ring::Tick => write!(f, "Tick"),
        }
    }
}

/// A doorbell to take later is not taken yet; taken by the ringer; or freed before it
/// was taken (then never taken).
pub(super) const PENDING: u8 = 0;
pub(super) const TAKEN: u8 = 1;
pub(super) const FREED: u8 = 2;

/// The doorbells a client takes later, in the order of their time, shared by its
/// leases and its ringer: a lease released before its time costs the ringer nothing.
#[derive(Debug, Default)]
pub(super) struct Later {
    pub(super) queue: Mutex<VecDeque<LaterTake>>,
    /// Whether the ringer was told of the queue and will look at it until it is empty.
    pub(super) told: AtomicBool,
}

/// The ringer: holds this client's doorbells on one connection, taking and freeing
/// them in batches as asked, until every sender is gone.
pub(super) async fn ring(
    pool: AnyPool,
    mut asked: UnboundedReceiver<Ring>,
    later: Arc<Later>,
    request_timeout: Duration,
) {
    let mut ringer = Ringer {
        pool,
        conn: None,
        wanted: HashSet::new(),
        on_conn: HashSet::new(),
        changed: HashSet::new(),
        later,
        idle_since: None,
        request_timeout,
    };
    let mut failed = false;
    loop {
        let wake_at = [
            // Try again on a new connection, unless asked for more first.
            failed.then(|| Instant::now() + RETRY_AFTER),
            ringer.next_later(),
            ringer.idle_since.map(|since| since + LINGER),
        ]
        .into_iter()
        .flatten()
        .min();
        let asked_for = match wake_at {
            Some(at) => tokio::time::timeout_at(at, asked.recv()).await,
            None => Ok(asked.recv().await),
        };
        match asked_for {
            Ok(Some(first)) => {
                // Everything asked meanwhile, in order: a doorbell taken and freed
                // within one batch is never sent.
                let mut next = Some(first);
                while let Some(op) = next {
                    ringer.apply(op);
                    next = asked.try_recv().ok();
                }
            }
            Ok(None) => break,
            Err(_) => {}
        }
        ringer.take_due();
        if ringer
            .idle_since
            .is_some_and(|since| since.elapsed() >= LINGER)
        {
            // It holds no doorbell: back to the pool, which closes it once idle.
            ringer.conn = None;
            ringer.idle_since = None;
        }
        failed = !ringer.sync().await;
    }
}

/// The ringer's state.
struct Ringer {
    pool: AnyPool,
    conn: Option<PoolConnection<Any>>,
    /// The doorbells asked for.
    wanted: HashSet<Arc<str>>,
    /// The doorbells `conn` holds.
    on_conn: HashSet<Arc<str>>,
    /// The doorbells asked for or freed since the last sync.
    changed: HashSet<Arc<str>>,
    later: Arc<Later>,
    /// Since when the connection holds no doorbell.
    idle_since: Option<Instant>,
    request_timeout: Duration,
}

impl Ringer {
    fn apply(&mut self, op: Ring) {
        match op {
            Ring::Take(name) => {
                self.wanted.insert(name.clone());
                self.changed.insert(name);
            }
            Ring::Free(name) => {
                self.wanted.remove(&name);
                self.changed.insert(name);
            }
            Ring::Tick => {}
        }
    }

    /// When the first doorbell to take later is due, if the ringer was told of any.
    fn next_later(&self) -> Option<Instant> {
        if !self.later.told.load(Ordering::Acquire) {
            return None;
        }
        let queue = self
            .later
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Told of an empty queue: look at once, to stop looking.
        Some(queue.front().map_or_else(Instant::now, |(at, _, _)| *at))
    }

    /// Moves the doorbells to take later whose time came (or comes within
    /// [`LATER_SLACK`], so that one wake-up serves several) to the wanted ones,
    /// unless they were freed first.
    fn take_due(&mut self) {
        let due = Instant::now() + LATER_SLACK;
        let mut queue = self
            .later
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while let Some((at, name, state)) = queue.front() {
            if *at > due {
                break;
            }
            if state
                .compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.wanted.insert(name.clone());
                self.changed.insert(name.clone());
            }
            queue.pop_front();
        }
        if queue.is_empty() {
            // Pushed after this, a doorbell tells the ringer again.
            self.later.told.store(false, Ordering::Release);
        }
    }

    /// Makes the connection hold the doorbells wanted; whether it does. A failed
    /// connection is closed, and the next sync takes them all on a new one.
    async fn sync(&mut self) -> bool {
        if self.conn.is_none() {
            // A new connection holds none of them.
            self.on_conn.clear();
            self.changed = self.wanted.clone();
            if self.changed.is_empty() {
                return true;
            }
            match tokio::time::timeout(self.request_timeout, self.pool.acquire()).await {
                Ok(Ok(conn)) => self.conn = Some(conn),
                _ => return false,
            }
        }
        let mut calls: Vec<(Arc<str>, bool)> = Vec::new();
        for name in self.changed.drain() {
            match (self.wanted.contains(&name), self.on_conn.contains(&name)) {
                (true, false) => calls.push((name, true)),
                (false, true) => calls.push((name, false)),
                _ => {}
            }
        }
        for chunk in calls.chunks(PER_STATEMENT) {
            // The names are hex and letters of ours: nothing to quote.
            let calls: Vec<String> = chunk
                .iter()
                .map(|(name, take)| match take {
                    true => format!("GET_LOCK('{name}', 0)"),
                    false => format!("RELEASE_LOCK('{name}')"),
                })
                .collect();
            let sql = format!("SELECT {}", calls.join(", "));
            let Some(conn) = self.conn.as_mut() else {
                return false;
            };
            let done = tokio::time::timeout(
                self.request_timeout,
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_one(&mut **conn),
            )
            .await;
            let Ok(Ok(row)) = done else {
                if let Some(mut conn) = self.conn.take() {
                    conn.close_on_drop();
                }
                self.idle_since = None;
                return false;
            };
            for (at, (name, take)) in chunk.iter().enumerate() {
                if *take {
                    // Another session may hold the name (one of ours the server has
                    // not ended yet): waiters then wait on that one, until their
                    // watch's end.
                    if row.try_get::<Option<i64>, _>(at).ok().flatten() == Some(1) {
                        self.on_conn.insert(name.clone());
                    }
                } else {
                    self.on_conn.remove(name);
                }
            }
        }
        if !self.on_conn.is_empty() {
            self.idle_since = None;
        } else if self.conn.is_some() && self.idle_since.is_none() {
            self.idle_since = Some(Instant::now());
        }
        true
    }
}
