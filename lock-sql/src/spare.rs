//! The session strategy's spare connection: the connection of the last clean release,
//! kept for the next lock instead of going back to the pool. sqlx's pool pings every
//! connection it takes back, a round trip per release that a lock held on one
//! connection (the floor) does not pay.
//!
//! One connection at most, and still counted by the pool, so the pool's bound holds.
//! A caller waiting for the pool takes the spare as soon as there is one, so it never
//! sits unused while someone waits. A spare unused for [`FRESH`] goes back to the pool
//! (a reaper task runs while there is one), as it does at shutdown.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a spare is kept unused before it goes back to the pool: a busy client
/// reuses it at once; an idle one must not keep a connection from the pool's idle
/// reaping and lifetime limit.
const FRESH: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub(crate) struct SpareConnection {
    slot: Arc<Mutex<Slot>>,
    /// Wakes a caller waiting for the pool when a connection is kept.
    kept: Notify,
}

#[derive(Debug, Default)]
struct Slot {
    spare: Option<Kept>,
    /// Whether a reaper task is running.
    reaping: bool,
}

#[derive(Debug)]
struct Kept {
    conn: PoolConnection<Any>,
    since: Instant,
}

impl SpareConnection {
    /// Keeps `conn` for the next lock, or hands it back to the pool if a spare is kept
    /// already. `conn` must be clean: no lock, no transaction, no session limit left.
    pub(crate) fn keep(&self, conn: PoolConnection<Any>) {
        let mut slot = lock(&self.slot);
        if slot.spare.is_some() {
            return;
        }
        slot.spare = Some(Kept {
            conn,
            since: Instant::now(),
        });
        if !slot.reaping {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                slot.reaping = true;
                runtime.spawn(reap(Arc::downgrade(&self.slot)));
            }
        }
        drop(slot);
        self.kept.notify_one();
    }

    /// A connection for a lock: the spare if there is one, else one from `pool`,
    /// whichever comes first.
    ///
    /// # Cancel safety
    /// Cancel safe: a spare is only taken in the poll that returns it, and sqlx's
    /// acquire gives up its place when dropped.
    pub(crate) async fn pin(&self, pool: &AnyPool) -> Result<PoolConnection<Any>, sqlx::Error> {
        loop {
            let kept = self.kept.notified();
            tokio::pin!(kept);
            // Registered before the look, so a connection kept right after it wakes us.
            kept.as_mut().enable();
            if let Some(spare) = lock(&self.slot).spare.take() {
                return Ok(spare.conn);
            }
            tokio::select! {
                conn = pool.acquire() => return conn,
                () = &mut kept => {}
            }
        }
    }

    /// Hands the spare back to the pool.
    pub(crate) fn give_back(&self) {
        let spare = lock(&self.slot).spare.take();
        drop(spare);
    }
}

impl Drop for SpareConnection {
    fn drop(&mut self) {
        // Handing a connection back to the pool spawns a task: outside a runtime the
        // connection is closed instead.
        if tokio::runtime::Handle::try_current().is_err() {
            if let Some(spare) = lock(&self.slot).spare.take() {
                drop(spare.conn.detach());
            }
        }
    }
}

/// Gives the spare back once it has been unused for [`FRESH`]; ends when there is
/// none.
async fn reap(slot: Weak<Mutex<Slot>>) {
    let _running = ReaperFlag(slot.clone());
    loop {
        let due = {
            let Some(slot) = slot.upgrade() else {
                return;
            };
            let mut slot = lock(&slot);
            match &slot.spare {
                Some(kept) if kept.since.elapsed() < FRESH => kept.since + FRESH,
                _ => {
                    let stale = slot.spare.take();
                    drop(slot);
                    drop(stale);
                    return;
                }
            }
        };
        tokio::time::sleep_until(due).await;
    }
}

/// Clears `reaping` when the reaper ends, however it ends (its runtime may drop it
/// mid-sleep), so the next kept connection starts another.
struct ReaperFlag(Weak<Mutex<Slot>>);

impl Drop for ReaperFlag {
    fn drop(&mut self) {
        if let Some(slot) = self.0.upgrade() {
            lock(&slot).reaping = false;
        }
    }
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // The slot holds no invariant a panic elsewhere could break.
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
