//! A release of an exclusive lock wakes one waiter among all the clients that wait for
//! it, not every one: the others would each run a refused acquire script for nothing.

mod common;

use std::time::{Duration, Instant};

use common::{client, scripts_run, RedisServer};
use lock_core::{prelude::*, AcquireOptions, LockClient, LockGuard};
use lock_redis::RedisBackend;
use redis::aio::MultiplexedConnection;

const WAITERS: usize = 4;
const WAITING: &str = "{wake:job}:waiting";
const CHANNEL: &str = "{wake:job}:channel:*";

/// A client of its own (its own connections) whose waiters refresh their entry only
/// every 20 s, so every script a test counts was caused by a release.
fn waiting_client(server: &RedisServer) -> LockClient<RedisBackend> {
    let config = server.config().with_waiter_lease(Duration::from_secs(60));
    client(RedisBackend::new(config).unwrap(), "wake")
}

/// The lock `job` of `holder`'s namespace, held for 30 s.
async fn hold(holder: &LockClient<RedisBackend>) -> LockGuard {
    holder
        .lock("job")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(30)))
        .await
        .unwrap()
}

/// Waits up to 30 s for `lock` in a task of its own, which ends with when it was
/// granted.
fn wait_in_task(
    lock: lock_core::LockHandle<RedisBackend>,
) -> tokio::task::JoinHandle<(Instant, lock_core::Result<LockGuard>)> {
    tokio::spawn(async move {
        let guard = lock
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(30)))
            .await;
        (Instant::now(), guard)
    })
}

async fn zcard(raw: &mut MultiplexedConnection) -> usize {
    redis::cmd("ZCARD")
        .arg(WAITING)
        .query_async(raw)
        .await
        .unwrap()
}

/// Waits until `waiters` are registered.
async fn until_waiting(raw: &mut MultiplexedConnection, waiters: usize) {
    while zcard(raw).await < waiters {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the server has run `scripts` more than `base`, or panics after 20 s.
async fn until_scripts(raw: &mut MultiplexedConnection, base: u64, scripts: u64) {
    let started = Instant::now();
    while scripts_run(raw).await - base < scripts {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the waiters never settled: {} scripts, not {scripts}",
            scripts_run(raw).await - base
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_one_of_the_waiting_clients() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let holder = client(server.backend(), "wake");
    // Loads the scripts, whose first call is answered `NOSCRIPT` and sent again.
    let warm = holder.lock("warm-up").unwrap().acquire().await.unwrap();
    warm.release().await.unwrap();
    let base = scripts_run(&mut raw).await;
    let first = hold(&holder).await;
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for _ in 0..WAITERS {
        let waiting = waiting_client(&server);
        let lock = waiting.lock("job").unwrap();
        let granted = granted.clone();
        tokio::spawn(async move {
            let guard = lock
                .acquire_with(AcquireOptions::wait_for(Duration::from_secs(30)))
                .await;
            let _ = granted.send(guard);
        });
        clients.push(waiting);
    }
    // The holder's acquire, each waiter's try and its try once subscribed, and the
    // holder's look at its lease when it starts listening for a force-unlock.
    until_scripts(&mut raw, base, 1 + 2 * WAITERS as u64 + 1).await;
    assert_eq!(zcard(&mut raw).await, WAITERS);
    let info = holder.lock("job").unwrap().inspect().await.unwrap();
    assert_eq!(info.waiters, Some(WAITERS), "inspect counts them: {info:?}");

    let before = scripts_run(&mut raw).await;
    first.release().await.unwrap();
    for left in (0..WAITERS).rev() {
        let guard = tokio::time::timeout(Duration::from_secs(10), grants.recv())
            .await
            .expect("a waiter was woken")
            .unwrap()
            .expect("granted");
        assert_eq!(
            zcard(&mut raw).await,
            left,
            "the one granted left the waiters"
        );
        guard.release().await.unwrap();
    }
    // A moment for any other waiter the releases woke to try (and be refused).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let scripts = scripts_run(&mut raw).await - before;
    println!("{WAITERS} handoffs took {scripts} scripts");
    // Each release and each grant: 9. Every waiter woken by every release would be
    // 1 + 4 + 1 + 3 + 1 + 2 + 1 + 1 + 1 = 15. A grant held past 0.2 s on a loaded
    // machine adds its holder's look at its lease: two such are allowed.
    let each_once = 2 * WAITERS as u64 + 1;
    assert!(
        (each_once..=each_once + 2).contains(&scripts),
        "{scripts} scripts"
    );
    assert_eq!(zcard(&mut raw).await, 0);
    drop(clients);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_passes_over_a_waiter_whose_client_is_gone() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let base = scripts_run(&mut raw).await;
    let holder = client(server.backend(), "wake");
    let first = hold(&holder).await;
    let waiting = waiting_client(&server);
    let lock = waiting.lock("job").unwrap();
    let waiter = wait_in_task(lock);
    until_scripts(&mut raw, base, 4).await;
    // The entries of waiters whose processes died, older than the live one's: they
    // live for another 50 s, and nobody listens for their wake-ups. More of them than
    // a release would try if it stopped after a few.
    let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    for ghost in 0..8 {
        let _: i64 = redis::cmd("ZADD")
            .arg(WAITING)
            .arg(now * 1000 + 50_000 + ghost)
            .arg(format!("ghost{ghost}/1"))
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let listening: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(CHANNEL)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(listening.len(), 1, "the live waiter's backend listens");

    let released = Instant::now();
    first.release().await.unwrap();
    let (granted, guard) = waiter.await.unwrap();
    let guard = guard.expect("granted");
    // Without passing over the ghost, the live waiter would wait for its next
    // refresh, 20 s away.
    assert!(
        granted - released < Duration::from_secs(5),
        "woken {:?} after the release",
        granted - released
    );
    assert_eq!(zcard(&mut raw).await, 0, "the ghosts' entries went too");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_that_gives_up_passes_the_wake_up_on() {
    const ROUNDS: u64 = 12;
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let holder = client(server.backend(), "wake");
    let (first, second) = (waiting_client(&server), waiting_client(&server));
    for round in 0..ROUNDS {
        let guard = hold(&holder).await;
        // The first waiter registers before the second, so a release wakes it first.
        let lock = first.lock("job").unwrap();
        let gives_up = wait_in_task(lock);
        until_waiting(&mut raw, 1).await;
        let lock = second.lock("job").unwrap();
        let stays = wait_in_task(lock);
        until_waiting(&mut raw, 2).await;
        // The release and the first waiter's end, a little apart or at once.
        let released = Instant::now();
        let release = tokio::spawn(guard.release());
        tokio::time::sleep(Duration::from_micros(250 * (round % 4))).await;
        gives_up.abort();
        release.await.unwrap().unwrap();
        if let Ok((_, Ok(guard))) = gives_up.await {
            // It won before it was stopped: it lets go, which wakes the second.
            guard.release().await.unwrap();
        }
        let (granted, guard) = stays.await.unwrap();
        // A lost wake-up would leave it waiting for its refresh, 20 s away.
        assert!(
            granted - released < Duration::from_secs(5),
            "round {round}: granted {:?} after the release",
            granted - released
        );
        guard.expect("granted").release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(zcard(&mut raw).await, 0, "nothing left waiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_up_for_a_waiter_of_the_same_client_that_is_gone_is_passed_on() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let holder = client(server.backend(), "wake");
    let first = hold(&holder).await;
    let waiting = waiting_client(&server);
    let lock = waiting.lock("job").unwrap();
    let waiter = wait_in_task(lock);
    until_waiting(&mut raw, 1).await;
    // An entry of the same client, older than the live one's, whose waiter is gone
    // without removing it (its removal failed): the client still listens on the
    // channel the release wakes it on.
    let live: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(WAITING)
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query_async(&mut raw)
        .await
        .unwrap();
    let (live, expiry) = &live[0];
    let (inbox, _) = live.split_once('/').expect("an id of the client's inbox");
    let _: i64 = redis::cmd("ZADD")
        .arg(WAITING)
        .arg(expiry - 1_000)
        .arg(format!("{inbox}/999999"))
        .query_async(&mut raw)
        .await
        .unwrap();
    // Let the live waiter finish its try once subscribed.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let released = Instant::now();
    first.release().await.unwrap();
    let (granted, guard) = waiter.await.unwrap();
    let guard = guard.expect("granted");
    // The wake-up went to the stale entry; its client passed it on. Otherwise the
    // live waiter would wait for its refresh, 20 s away.
    assert!(
        granted - released < Duration::from_secs(5),
        "woken {:?} after the release",
        granted - released
    );
    assert_eq!(zcard(&mut raw).await, 0, "the stale entry went too");
    guard.release().await.unwrap();
}
