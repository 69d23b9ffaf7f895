//! What a lock promises when the server's wall clock steps forward (an NTP step, `date
//! -s`, a VM resumed with its clock set), against a real redis-server whose clock a
//! preloaded shim moves.
//!
//! Redis expires keys by its wall clock and has no monotonic expiry to use instead, so
//! a forward step frees every lock at once while clients, counting on their monotonic
//! clocks, still hold. What the library promises then (README, "Semantics"): the next
//! holder's fencing token is higher, a watched lease is reported lost at its next
//! renewal, and a stale guard can neither release nor renew the new holder's lock. A
//! fixed lease learns nothing before its own end: only the fencing token protects it.

mod common;

use std::time::Duration;

use common::{client, RedisServer};
use lock_core::{prelude::*, AcquireOptions, Error, LeaseLoss, LockClient};
use redis::AsyncCommands;

const STEP: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_frees_a_watched_lock_and_the_holder_learns_at_its_next_renewal() {
    let server = RedisServer::start_with_clock_step();
    let watched = LockClient::builder(server.backend())
        .namespace("clock")
        .watchdog_lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let other = client(server.backend(), "clock");
    let mut raw = server.raw().await;

    let stale = watched.lock("job").unwrap().acquire().await.unwrap();
    server.step_clock(STEP);
    let exists: bool = raw.exists("clock:job").await.unwrap();
    assert!(!exists, "the step expired the key on the server");

    let next = other
        .lock("job")
        .unwrap()
        .acquire_with(AcquireOptions::wait_for(Duration::from_secs(10)))
        .await
        .expect("the step freed the lock");
    assert!(
        next.fencing_token() > stale.fencing_token(),
        "the next holder's token {} is above the stale one {}",
        next.fencing_token(),
        stale.fencing_token()
    );

    // The watchdog renews every lease/3 = 1 s; its next renewal finds another owner.
    let loss = tokio::time::timeout(Duration::from_secs(10), stale.lost())
        .await
        .expect("the stale holder is told at its next renewal");
    assert_eq!(loss, LeaseLoss::Revoked);
    assert!(!stale.is_held());
    let err = stale.release().await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let value: String = raw.get("clock:job").await.unwrap();
    assert!(
        value.ends_with(&format!(":{}", next.fencing_token())),
        "the new holder's key is untouched: {value}"
    );
    assert!(next.is_held());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_under_a_fixed_lease_is_caught_only_by_the_fencing_token() {
    let server = RedisServer::start_with_clock_step();
    let ours = client(server.backend(), "clock");
    let other = client(server.backend(), "clock");
    let mut raw = server.raw().await;

    let stale = ours
        .lock("job")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(60)))
        .await
        .unwrap();
    server.step_clock(STEP);
    let next = other
        .lock("job")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("the step freed the lock");

    // Two holders: the fixed lease counts 60 s on the client's monotonic clock and
    // nothing renews it, so the stale guard still says held.
    assert!(stale.is_held() && next.is_held());
    // A store that keeps the highest token it accepted refuses the stale holder.
    let mut highest = 0;
    let mut accept = |token: u64| {
        let fresh = token > highest;
        highest = highest.max(token);
        fresh
    };
    assert!(accept(next.fencing_token()));
    assert!(!accept(stale.fencing_token()), "the stale write is refused");

    // Neither its extend nor its release touches the new holder's key.
    let err = stale.extend(Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let err = stale.release().await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let value: String = raw.get("clock:job").await.unwrap();
    assert!(
        value.ends_with(&format!(":{}", next.fencing_token())),
        "{value}"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_whose_queue_entry_a_step_expired_still_gets_the_lock() {
    let server = RedisServer::start_with_clock_step();
    let holder = client(server.backend(), "clock");
    let waiter = client(server.backend(), "clock");

    let held = holder.fair_lock("queue").unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .fair_lock("queue")
            .unwrap()
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(20)))
            .await?;
        let token = guard.fencing_token();
        guard.release().await?;
        Ok::<u64, Error>(token)
    });
    // Let the waiter queue, then step past the holder's lease and the waiter's entry.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.step_clock(STEP);
    let token = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter is not stranded by its expired queue entry")
        .unwrap()
        .expect("granted");
    assert!(token > held.fencing_token());
    let loss = tokio::time::timeout(Duration::from_secs(40), held.lost())
        .await
        .expect("the stale holder learns it lost the lock");
    assert_eq!(loss, LeaseLoss::Revoked);
}
