//! MariaDB's doorbells: how a release in one process wakes the waiters of another for
//! the lease strategy's exclusive locks, where MariaDB has no notifications.
//!
//! While a client holds an exclusive lease it also holds a doorbell: a MariaDB user
//! lock (`GET_LOCK`) named after the tables, the key and the lease's owner, on one
//! connection of the client's own (the ringer) that holds all its doorbells. The
//! release frees the doorbell once the lease row is gone. A waiter in another process
//! that finds the lock taken learns the holder's owner with the refusal, and blocks in
//! `GET_LOCK` on that doorbell on a connection of its own (a watch); the doorbell's
//! freeing ends the watch, which lets go of it at once and wakes the client's first
//! waiter of the key to look again.
//!
//! - The first waiter of a key in a client takes its own doorbell as soon as it is
//!   blocked, so that once granted its own waiters can watch at once. A lease granted
//!   otherwise takes its doorbell [`TAKE_AFTER`] the grant, if still held then: a
//!   shorter lease costs no doorbell at all.
//! - A watch that finds no doorbell held (a holder that keeps none, one whose doorbell
//!   is not taken yet, or was just freed) wakes the waiter to look. If the same holder
//!   still blocks it, the next watch waits until [`SECOND_WATCH_AFTER`] the first; if
//!   that one too finds none, the holder keeps none, and its waiters poll as without
//!   doorbells.
//! - A watch lasts at most as long as the waiter would otherwise sleep (four poll caps,
//!   the holder's expiry, the waiter's deadline), so a lease that ends with its doorbell
//!   still held (an expiry, a forced unlock from another process) is seen by then.
//! - Costs: the ringer connection while the client holds or waits for exclusive leases
//!   (closed [`LINGER`] after the last), one statement on it per grant and per release
//!   (batched, and none at all for a lease released before its doorbell was sent); one
//!   watch connection per key with blocked waiters in the client, at most
//!   [`MAX_WATCHES`] (waiters of further keys poll).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Row};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

use crate::local_wake;

/// How long the ringer keeps its connection once it holds no doorbell.
const LINGER: Duration = Duration::from_secs(2);

/// How long after its grant a lease granted without a wait takes its doorbell.
const TAKE_AFTER: Duration = Duration::from_millis(5);

/// How long after a watch that found no doorbell the next watch of that doorbell
/// begins: well after the holder's [`TAKE_AFTER`].
const SECOND_WATCH_AFTER: Duration = Duration::from_millis(25);

/// How long a holder found twice without its doorbell is taken to keep none.
const BELL_LESS_FOR: Duration = Duration::from_secs(10);

/// The most watches of one client at once.
pub(crate) const MAX_WATCHES: u32 = 8;

/// Doorbells taken and freed per ringer statement at most.
const PER_STATEMENT: usize = 500;

/// How long the ringer waits before it takes its doorbells again on a new connection
/// after the last one failed.
const RETRY_AFTER: Duration = Duration::from_millis(200);

enum Ring {
    /// Take it now, or at the given time unless it is freed before.
    Take(Arc<str>, Option<Instant>),
    Free(Arc<str>),
}

/// One client's doorbells: the ringer that holds its own, and its watches of others'.
#[derive(Debug)]
pub(crate) struct Bells {
    ringer: UnboundedSender<Ring>,
    /// The ringer's end of the channel, until the first doorbell starts it.
    unstarted: Mutex<Option<UnboundedReceiver<Ring>>>,
    ring_pool: AnyPool,
    watches: Arc<Watches>,
    scope: String,
    request_timeout: Duration,
}

#[derive(Debug)]
struct Watches {
    pool: AnyPool,
    /// The doorbells being watched.
    on: Mutex<HashSet<Arc<str>>>,
    /// Doorbells watches found free: when last, and how many times in a row.
    free_at: Mutex<HashMap<Arc<str>, (Instant, u32)>>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ring::Take(name, at) => write!(f, "Take({name}, {at:?})"),
            Ring::Free(name) => write!(f, "Free({name})"),
        }
    }
}

/// A doorbell this client holds until dropped.
#[derive(Debug)]
pub(crate) struct BellHold {
    name: Arc<str>,
    ringer: UnboundedSender<Ring>,
}

impl Drop for BellHold {
    fn drop(&mut self) {
        held_here()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.name);
        let _ = self.ringer.send(Ring::Free(self.name.clone()));
    }
}

/// The doorbells held by this process's clients: a waiter blocked by a lease of this
/// process needs no watch, as the release is announced here.
fn held_here() -> &'static Mutex<HashSet<Arc<str>>> {
    static HELD: OnceLock<Mutex<HashSet<Arc<str>>>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
}

impl Bells {
    /// The doorbells of the tables at `scope`: the ringer's connection from
    /// `ring_pool` (of one connection), the watches' from `watch_pool`.
    pub(crate) fn new(
        scope: &str,
        ring_pool: AnyPool,
        watch_pool: AnyPool,
        request_timeout: Duration,
    ) -> Self {
        let (ringer, unstarted) = mpsc::unbounded_channel();
        Bells {
            ringer,
            unstarted: Mutex::new(Some(unstarted)),
            ring_pool,
            watches: Arc::new(Watches {
                pool: watch_pool,
                on: Mutex::default(),
                free_at: Mutex::default(),
            }),
            scope: scope.to_owned(),
            request_timeout,
        }
    }

    /// The doorbell of `owner`'s lease of key `khash`: MariaDB's user locks are the
    /// server's, so the name holds the tables' place too; a digest keeps it within
    /// MariaDB's 64 characters and to characters that need no quoting.
    fn name(&self, khash: &str, owner: &str) -> Arc<str> {
        let mut digest = Sha256::new();
        for part in [self.scope.as_str(), khash, owner] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part.as_bytes());
        }
        crate::key::push_hex("lock_sql_bell_".to_owned(), &digest.finalize()[..20]).into()
    }

    /// Takes `owner`'s doorbell of key `khash`, freed when the hold is dropped: at
    /// once for a waiter (`waited`), else [`TAKE_AFTER`] if still held then. The call
    /// returns at once: the ringer takes it in the background.
    pub(crate) fn take(&self, khash: &str, owner: &str, waited: bool) -> BellHold {
        let name = self.name(khash, owner);
        if let Some(unstarted) = self
            .unstarted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            tokio::spawn(ring(
                self.ring_pool.clone(),
                unstarted,
                self.request_timeout,
            ));
        }
        held_here()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone());
        let at = (!waited).then(|| Instant::now() + TAKE_AFTER);
        let _ = self.ringer.send(Ring::Take(name.clone(), at));
        BellHold {
            name,
            ringer: self.ringer.clone(),
        }
    }

    /// Watches the doorbell of `blocker`'s lease of key `khash` for at most `lasts`:
    /// its end wakes this client's waiters of `topic`. Whether the release will be
    /// told: a watch is on (begun now, or before and still on: either way, any release
    /// from now on ends it), or the lease is this process's, whose release is
    /// announced here; `false` if the waiter must poll instead.
    pub(crate) fn watch(
        &self,
        topic: Arc<str>,
        khash: &str,
        blocker: &str,
        lasts: Duration,
    ) -> bool {
        let name = self.name(khash, blocker);
        if held_here()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&name)
        {
            // Its release is announced in this process.
            return true;
        }
        let watches = &self.watches;
        let delay = {
            let mut free_at = watches
                .free_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Forget old findings, so the map stays small.
            free_at.retain(|_, (at, _)| at.elapsed() < BELL_LESS_FOR);
            match free_at.get(&name) {
                None => Duration::ZERO,
                // Its doorbell may not be taken yet.
                Some((at, 1)) => {
                    (*at + SECOND_WATCH_AFTER).saturating_duration_since(Instant::now())
                }
                // It keeps none.
                Some(_) => return false,
            }
        };
        {
            let mut on = watches.on.lock().unwrap_or_else(PoisonError::into_inner);
            if on.contains(&name) {
                return true;
            }
            if on.len() >= MAX_WATCHES as usize {
                return false;
            }
            on.insert(name.clone());
        }
        tokio::spawn(watch(
            watches.clone(),
            name,
            topic,
            delay,
            lasts,
            self.request_timeout,
        ));
        true
    }
}

/// What a watch learnt.
#[derive(Debug, PartialEq, Eq)]
enum Watched {
    /// The doorbell was freed (or its holder's session ended).
    Rang,
    /// Its time ran out with the doorbell still held.
    StillHeld,
    /// No one held it.
    Free,
}

/// One watch of doorbell `name`, begun after `delay`; wakes the waiters of `topic`
/// as it ends.
async fn watch(
    watches: Arc<Watches>,
    name: Arc<str>,
    topic: Arc<str>,
    delay: Duration,
    lasts: Duration,
    request_timeout: Duration,
) {
    tokio::time::sleep(delay).await;
    let watched = watch_once(&watches.pool, &name, lasts, request_timeout).await;
    watches
        .on
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&name);
    let mut free_at = watches
        .free_at
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    match watched {
        Some(Watched::Rang | Watched::StillHeld) => {
            free_at.remove(&name);
        }
        Some(Watched::Free) | None => {
            let times = free_at.get(&name).map_or(0, |(_, times)| *times);
            free_at.insert(name, (Instant::now(), times + 1));
        }
    }
    drop(free_at);
    // Whatever it found, a release may have come since the waiter looked.
    local_wake::announce(topic);
}

/// Blocks in `GET_LOCK` on `name` for at most `lasts`, if it is held, and frees it at
/// once if granted. `None` if the watch failed (its connection is then closed).
async fn watch_once(
    pool: &AnyPool,
    name: &str,
    lasts: Duration,
    request_timeout: Duration,
) -> Option<Watched> {
    let mut conn = tokio::time::timeout(request_timeout, pool.acquire())
        .await
        .ok()?
        .ok()?;
    // The name is hex and letters of ours: nothing to quote. Checked before the wait,
    // so that a doorbell no one holds is not taken and waited on by every watcher.
    let secs = lasts.as_secs_f64().max(0.001);
    let sql = format!(
        "SELECT CAST(CASE WHEN IS_USED_LOCK('{name}') IS NULL THEN -1 \
         WHEN GET_LOCK('{name}', {secs:.3}) = 1 THEN RELEASE_LOCK('{name}') \
         ELSE 0 END AS SIGNED)"
    );
    let answer = tokio::time::timeout(
        lasts + request_timeout,
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_one(&mut *conn),
    )
    .await;
    match answer
        .ok()
        .and_then(Result::ok)
        .map(|row| row.try_get::<i64, _>(0))
    {
        Some(Ok(1)) => Some(Watched::Rang),
        Some(Ok(0)) => Some(Watched::StillHeld),
        Some(Ok(_)) => Some(Watched::Free),
        _ => {
            // It may still wait, or hold the doorbell: never give it to another use.
            conn.close_on_drop();
            None
        }
    }
}

/// The ringer: holds this client's doorbells on one connection, taking and freeing
/// them in batches as asked, until every sender is gone.
async fn ring(pool: AnyPool, mut asked: UnboundedReceiver<Ring>, request_timeout: Duration) {
    let mut ringer = Ringer {
        pool,
        conn: None,
        wanted: HashSet::new(),
        on_conn: HashSet::new(),
        changed: HashSet::new(),
        later: HashMap::new(),
        later_order: VecDeque::new(),
        idle_since: None,
        request_timeout,
    };
    let mut failed = false;
    loop {
        let wake_at = [
            // Try again on a new connection, unless asked for more first.
            failed.then(|| Instant::now() + RETRY_AFTER),
            ringer.later_order.front().map(|(at, _)| *at),
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
    /// Doorbells to take later, unless freed first, and when; in that order in
    /// `later_order` (whose entries no longer in `later` are left over).
    later: HashMap<Arc<str>, Instant>,
    later_order: VecDeque<(Instant, Arc<str>)>,
    /// Since when the connection holds no doorbell.
    idle_since: Option<Instant>,
    request_timeout: Duration,
}

impl Ringer {
    fn apply(&mut self, op: Ring) {
        match op {
            Ring::Take(name, None) => {
                self.wanted.insert(name.clone());
                self.changed.insert(name);
            }
            Ring::Take(name, Some(at)) => {
                self.later.insert(name.clone(), at);
                self.later_order.push_back((at, name));
            }
            Ring::Free(name) => {
                if self.later.remove(&name).is_none() {
                    self.wanted.remove(&name);
                    self.changed.insert(name);
                }
            }
        }
    }

    /// Moves the later takes whose time came to the wanted ones.
    fn take_due(&mut self) {
        let now = Instant::now();
        while let Some((at, name)) = self.later_order.front() {
            if *at > now {
                break;
            }
            if self.later.get(name) == Some(at) {
                self.later.remove(name);
                self.wanted.insert(name.clone());
                self.changed.insert(name.clone());
            }
            self.later_order.pop_front();
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
            let sql = format!("DO {}", calls.join(", "));
            let Some(conn) = self.conn.as_mut() else {
                return false;
            };
            let done = tokio::time::timeout(
                self.request_timeout,
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut **conn),
            )
            .await;
            if !matches!(done, Ok(Ok(_))) {
                if let Some(mut conn) = self.conn.take() {
                    conn.close_on_drop();
                }
                self.idle_since = None;
                return false;
            }
            for (name, take) in chunk {
                match take {
                    true => self.on_conn.insert(name.clone()),
                    false => self.on_conn.remove(name),
                };
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
