//! Waiting behind a holder that does not announce its release: another client on the
//! shared `namespace:name` layout (redis-py's `Lock`, redsync, a raw `SET NX PX`)
//! deletes the key and publishes nothing. Our waiter must still notice within a
//! bounded time, and must not poll while the holder is one of ours (which publishes).

mod common;

use std::time::{Duration, Instant};

use common::{client, scripts_run, RedisServer};
use lock_core::{prelude::*, AcquireOptions, LockClient};
use lock_redis::RedLockBackend;
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

/// The goal is a median under 100 ms; the assertion only keeps a generous
/// bound that a loaded machine still meets, and the numbers are printed.
const NOTICED_WITHIN: Duration = Duration::from_secs(1);
const ROUNDS: usize = 5;

/// What redis-py's `Lock.acquire` does: `SET key token NX PX ms` (or no expiry).
async fn foreign_set(raw: &mut MultiplexedConnection, key: &str, px: Option<u64>) {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg("0b6c1d2e3f40aa11bb22cc33dd44ee55")
        .arg("NX");
    if let Some(px) = px {
        cmd.arg("PX").arg(px);
    }
    let set: Option<String> = cmd.query_async(raw).await.unwrap();
    assert_eq!(set.as_deref(), Some("OK"), "the foreign client got the key");
}

fn report(what: &str, mut delays: Vec<Duration>) {
    delays.sort();
    println!(
        "{what}: noticed a silent release after median {:?}, worst {:?} ({} rounds)",
        delays[delays.len() / 2],
        delays[delays.len() - 1],
        delays.len()
    );
    for delay in &delays {
        assert!(*delay < NOTICED_WITHIN, "{what}: {delays:?}");
    }
}

/// One round: our waiter waits on `lock` while a foreign holder has it; `release`
/// deletes the key as that client would. Returns how long the waiter took to notice.
async fn time_a_silent_release<B, F>(
    lock: lock_core::LockHandle<B>,
    settle: Duration,
    release: F,
) -> Duration
where
    B: lock_core::backend::LockBackend,
    F: std::future::Future<Output = ()>,
{
    let waiter = tokio::spawn(async move {
        let guard = lock
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(20)))
            .await;
        (Instant::now(), guard)
    });
    // Long enough for the waiter to settle into its wait.
    tokio::time::sleep(settle).await;
    release.await;
    let released = Instant::now();
    let (granted, guard) = waiter.await.unwrap();
    guard
        .expect("granted after the silent release")
        .release()
        .await
        .unwrap();
    granted - released
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_notices_a_silent_release_within_a_second() {
    let server = RedisServer::start();
    let client = client(server.backend(), "silent");
    let mut raw = server.raw().await;
    let mut delays = Vec::new();
    for round in 0..ROUNDS {
        // Every other round the foreign holder sets no expiry (redis-py, timeout=None).
        let px = (round % 2 == 0).then_some(30_000);
        foreign_set(&mut raw, "silent:job", px).await;
        let settle = Duration::from_millis(700 + 300 * round as u64);
        let release = async {
            let _: i64 = raw.del("silent:job").await.unwrap();
        };
        let lock = client.lock("job").unwrap();
        delays.push(time_a_silent_release(lock, settle, release).await);
    }
    report("single server", delays);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_waiter_notices_a_silent_release_within_a_second() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let backend = RedLockBackend::new(servers.iter().map(RedisServer::config)).unwrap();
    let client = LockClient::builder(backend)
        .namespace("silent")
        .build()
        .unwrap();
    let mut raws = Vec::new();
    for server in &servers {
        raws.push(server.raw().await);
    }
    let mut delays = Vec::new();
    for round in 0..ROUNDS {
        // A RedLock peer (redsync, rslock) holding every master.
        for raw in &mut raws {
            foreign_set(raw, "silent:job", Some(30_000)).await;
        }
        let settle = Duration::from_millis(700 + 300 * round as u64);
        let release = async {
            for raw in &mut raws {
                let _: i64 = raw.del("silent:job").await.unwrap();
            }
        };
        let lock = client.lock("job").unwrap();
        delays.push(time_a_silent_release(lock, settle, release).await);
    }
    report("RedLock, 3 masters", delays);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_one_of_ours_waits_for_the_message_without_polling() {
    let server = RedisServer::start();
    let holder = client(server.backend(), "quiet");
    // A waiter refreshes its entry every third of its waiter lease: a long one here,
    // so every script counted is a try or a poll.
    let long_entry = server.config().with_waiter_lease(Duration::from_secs(60));
    let waiting = client(lock_redis::RedisBackend::new(long_entry).unwrap(), "quiet");
    let mut raw = server.raw().await;
    let guard = holder
        .lock("job")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let lock = waiting.lock("job").unwrap();
    let before = scripts_run(&mut raw).await;
    let waiter = tokio::spawn(async move {
        let guard = lock
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(20)))
            .await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = scripts_run(&mut raw).await - before;
    // A try, and one more once subscribed; a poll every 150 ms would be 20 more.
    assert!(
        during <= 4,
        "{during} scripts while one of ours held the lock"
    );
    let released = Instant::now();
    guard.release().await.unwrap();
    let (granted, next) = waiter.await.unwrap();
    assert!(
        granted - released < NOTICED_WITHIN,
        "woken by the release message"
    );
    next.unwrap().release().await.unwrap();
}
