//! How the waiters of one lock in one process wait, on a real backend (a SQLite file):
//! only the first of them polls; a release wakes one waiter, not every one; and the
//! wake-up is passed on, so a crowd still drains without polling.
//!
//! The statements the database runs are counted through sqlx's own statement log; the
//! subscriber is global to this binary, so it holds one test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockClient;
use lock_sql::SqlBackend;
use tokio::time::Instant;
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// How many handles wait.
const CROWD: usize = 40;

/// How long the polls of a waiting crowd are counted.
const WATCHED: Duration = Duration::from_secs(2);

/// Counts the statements sqlx logs.
struct Statements(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A crowd waits for a lock held elsewhere (polling as a waiter must, since nothing
/// here announces that lock's releases): the polls are one waiter's, not the crowd's.
async fn only_the_first_waiter_polls(dir: &tempfile::TempDir, statements: &AtomicUsize) {
    let url = format!("sqlite://{}", dir.path().join("polled.db").display());
    let holder = LockClient::new(SqlBackend::connect_url(&url).await.expect("connect"));
    let crowd = LockClient::new(SqlBackend::connect_url(&url).await.expect("connect"));
    let guard = holder.lock("polled").unwrap().acquire().await.unwrap();
    let waiters: Vec<_> = (0..CROWD)
        .map(|_| {
            let lock = crowd.lock("polled").unwrap();
            tokio::spawn(async move { lock.acquire().await })
        })
        .collect();
    // Each looks once as it comes; then only polls run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = statements.load(Ordering::Relaxed);
    tokio::time::sleep(WATCHED).await;
    let ran = statements.load(Ordering::Relaxed) - before;
    // One waiter polling at the longest pause runs 3 statements every 250 ms.
    assert!(
        ran < CROWD * 3,
        "{ran} statements ran in {WATCHED:?} while {CROWD} waited: the crowd polls"
    );
    for waiter in waiters {
        waiter.abort();
    }
    guard.release().await.unwrap();
}

/// Waits until no statement has run for a while (every waiter sleeps), within a bound.
async fn settled(count: &AtomicUsize) -> usize {
    let give_up = Instant::now() + Duration::from_secs(30);
    let mut last = count.load(Ordering::Relaxed);
    let mut quiet = 0;
    while quiet < 5 && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = count.load(Ordering::Relaxed);
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_waiter_polls_and_a_release_wakes_one_and_the_crowd_still_drains_on_sqlite() {
    let statements = Arc::new(AtomicUsize::new(0));
    tracing_subscriber::registry()
        .with(Statements(statements.clone()).with_filter(LevelFilter::TRACE))
        .init();
    let dir = tempfile::tempdir().unwrap();
    only_the_first_waiter_polls(&dir, &statements).await;
    // Polls so far apart that none falls within the test: only wake-ups move the crowd.
    let url = format!(
        "sqlite://{}?poll_min=60s&poll_max=60s",
        dir.path().join("locks.db").display()
    );
    let holder = LockClient::new(SqlBackend::connect_url(&url).await.expect("connect"));
    let crowd = LockClient::new(SqlBackend::connect_url(&url).await.expect("connect"));
    let guard = holder.lock("crowded").unwrap().acquire().await.unwrap();

    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    let (go_tx, go) = tokio::sync::watch::channel(false);
    let mut waiters = Vec::new();
    for i in 0..CROWD {
        let lock = crowd.lock("crowded").unwrap();
        let (granted_tx, mut go) = (granted_tx.clone(), go.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            granted_tx.send(i).unwrap();
            // The first one holds on until told, so its wake-up is counted alone.
            let _ = go.wait_for(|go| *go).await;
            guard.release().await.unwrap();
        }));
    }
    drop(granted_tx);
    let before = settled(&statements).await;

    guard.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(20), granted.recv())
        .await
        .expect("a release wakes a waiter, without waiting for a poll")
        .unwrap();
    let after = settled(&statements).await;
    let ran = after - before;
    assert!(
        ran < CROWD / 2,
        "one release woke the crowd: {ran} statements ran for {CROWD} waiters \
         (waiter {first} got the lock)"
    );

    // Each holder lets go as it gets the lock: every release wakes the next waiter.
    go_tx.send(true).unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(60), async {
        for waiter in waiters {
            waiter.await.unwrap();
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "the crowd did not drain: a wake-up was lost"
    );
}
