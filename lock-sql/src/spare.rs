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
    let mut running = ReaperFlag {
        slot: slot.clone(),
        armed: true,
    };
    loop {
        let due = {
            let Some(slot) = slot.upgrade() else {
                return;
            };
            let mut slot = lock(&slot);
            match &slot.spare {
                Some(kept) if kept.since.elapsed() < FRESH => kept.since + FRESH,
                _ => {
                    // Under the lock, so a connection kept from now on starts a new
                    // reaper.
                    slot.reaping = false;
                    running.armed = false;
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

/// Clears `reaping` if the reaper is dropped mid-sleep (its runtime shut down), so the
/// next kept connection starts another.
struct ReaperFlag {
    slot: Weak<Mutex<Slot>>,
    armed: bool,
}

impl Drop for ReaperFlag {
    fn drop(&mut self) {
        if let (true, Some(slot)) = (self.armed, self.slot.upgrade()) {
            lock(&slot).reaping = false;
        }
    }
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // The slot holds no invariant a panic elsewhere could break.
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use sqlx::any::AnyPoolOptions;

    async fn pool_of_one(dir: &tempfile::TempDir) -> AnyPool {
        sqlx::any::install_default_drivers();
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("spare.db").display()
        );
        AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&url)
            .await
            .expect("pool")
    }

    /// A pool of one whose connection is kept as the spare.
    async fn kept(dir: &tempfile::TempDir) -> (AnyPool, SpareConnection) {
        let pool = pool_of_one(dir).await;
        let spare = SpareConnection::default();
        spare.keep(pool.acquire().await.unwrap());
        (pool, spare)
    }

    #[tokio::test]
    async fn a_kept_connection_is_the_next_pin_and_stays_counted_by_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, spare) = kept(&dir).await;
        assert_eq!((pool.size(), pool.num_idle()), (1, 0), "kept, not idle");
        let conn = tokio::time::timeout(Duration::from_secs(5), spare.pin(&pool))
            .await
            .expect("the spare, without waiting for the pool")
            .unwrap();
        drop(conn);
        spare.give_back();
    }

    #[tokio::test]
    async fn a_caller_waiting_for_a_full_pool_takes_a_kept_connection() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool_of_one(&dir).await;
        let spare = Arc::new(SpareConnection::default());
        let held = pool.acquire().await.unwrap();
        let waiting = tokio::spawn({
            let (spare, pool) = (spare.clone(), pool.clone());
            async move { spare.pin(&pool).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "the pool's one connection is taken");
        spare.keep(held);
        let got = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("woken by the kept connection")
            .unwrap();
        assert!(got.is_ok());
        assert!(lock(&spare.slot).spare.is_none(), "the waiter took it");
    }

    #[tokio::test]
    async fn the_reaper_gives_an_unused_spare_back_to_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let (pool, spare) = kept(&dir).await;
        let started = Instant::now();
        while lock(&spare.slot).spare.is_some() {
            assert!(started.elapsed() < FRESH * 6, "never given back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(started.elapsed() >= FRESH - Duration::from_millis(100));
        let idle = tokio::time::timeout(Duration::from_secs(30), pool.acquire()).await;
        assert!(idle.expect("back in the pool").is_ok());
        assert!(!lock(&spare.slot).reaping, "the reaper ended");
    }
}
