//! `LockClient::shutdown`: what a program calls before it exits, so that nothing it
//! took or queued for is left to run out on the server.

use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::prelude::*;
use lock_core::{AcquireOptions, Error, LeaseLoss, LockClient};

mod support;

use support::Wrapped;

#[tokio::test]
async fn shutdown_releases_every_hold_and_refuses_later_acquires() {
    let backend = MemoryBackend::new();
    let client = LockClient::builder(backend.clone()).build().unwrap();
    let other = LockClient::builder(backend).build().unwrap();

    let lock = client.lock("a").unwrap();
    let first = lock.acquire().await.unwrap();
    let reentered = first.reenter().unwrap();
    let fixed = client
        .fair_lock("b")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(600)))
        .await
        .unwrap();
    let rw = client.rw_lock("c").unwrap();
    let read = rw.read().await.unwrap();

    client.shutdown().await.unwrap();

    for guard in [&first, &reentered, &fixed, &read] {
        assert!(!guard.is_held());
        assert_eq!(guard.lost().await, LeaseLoss::Released);
    }
    // Others get every lock at once, though the fixed lease had ten minutes left.
    for name in ["a"] {
        assert!(other
            .lock(name)
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .is_some());
    }
    assert!(other
        .fair_lock("b")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_some());
    assert!(other
        .rw_lock("c")
        .unwrap()
        .try_write()
        .await
        .unwrap()
        .is_some());

    // The client takes nothing more, and its stale guards say the lease is gone.
    assert!(matches!(lock.try_acquire().await, Err(Error::Closed)));
    assert!(matches!(
        client.lock("new").unwrap().acquire().await,
        Err(Error::Closed)
    ));
    let err = first.release().await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    drop(reentered);
}

#[tokio::test]
async fn shutdown_ends_waits_in_progress() {
    let backend = MemoryBackend::new();
    let client = LockClient::builder(backend.clone()).build().unwrap();
    let other = LockClient::builder(backend).build().unwrap();
    let held = other.fair_lock("busy").unwrap().acquire().await.unwrap();

    let waiting = {
        let lock = client.fair_lock("busy").unwrap();
        tokio::spawn(async move { lock.acquire().await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    tokio::time::timeout(Duration::from_secs(10), client.shutdown())
        .await
        .expect("shutdown does not wait for the lock")
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the wait ended")
        .unwrap();
    assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");

    // The waiter's queue place went with it: the next in line gets the lock at once.
    held.release().await.unwrap();
    let next = other.fair_lock("busy").unwrap();
    assert!(next.try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn shutdown_waits_for_releases_retried_in_the_background() {
    let backend = Wrapped::default();
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(Duration::from_secs(600))
        .build()
        .unwrap();
    let lock = client.lock("flaky").unwrap();
    let guard = lock.acquire().await.unwrap();
    // The release made on drop fails twice; it is retried with backoff.
    backend.fail_next_releases(2);
    drop(guard);
    tokio::time::timeout(Duration::from_secs(30), client.shutdown())
        .await
        .expect("the retries end")
        .unwrap();
    // Free now, though the lease had ten minutes left: the retry finished before
    // shutdown returned.
    let other = LockClient::builder(backend).build().unwrap();
    assert!(other
        .lock("flaky")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_some());
}

/// Once a release may have reached the backend, no guard or watch of that lease says
/// held: another owner may have the lock before the release's reply comes back. Here
/// the reply takes a second, and another client is granted the lock meanwhile.
#[tokio::test]
async fn a_lease_whose_release_was_sent_is_no_longer_held() {
    let backend = Wrapped::default();
    backend.delay_release_replies(Duration::from_secs(1));
    let client = LockClient::builder(backend.clone()).build().unwrap();
    let other = LockClient::builder(backend).build().unwrap();
    let wait = AcquireOptions::wait_for(Duration::from_secs(5));

    // By shutdown.
    let guard = client.lock("a").unwrap().acquire().await.unwrap();
    let watch = guard.watch();
    let shutdown = tokio::spawn({
        let client = client.clone();
        async move { client.shutdown().await }
    });
    let theirs = other.lock("a").unwrap().acquire_with(wait).await.unwrap();
    assert!(
        !guard.is_held() && !watch.is_held(),
        "the shut-down client still believes it holds `a` while another client does"
    );
    assert!(guard.expires_at().is_none());
    // `lost()` (what `run_exclusive` stops a job on) says so too, before the reply.
    let told = tokio::time::timeout(Duration::from_millis(300), watch.lost()).await;
    assert_eq!(told, Ok(LeaseLoss::Released), "lost() waited for the reply");
    shutdown.await.unwrap().unwrap();
    assert_eq!(guard.lost().await, LeaseLoss::Released);
    theirs.release().await.unwrap();

    // By a release whose reply is slow: its watch says not held while it is on its way.
    let client = LockClient::builder(other.backend().clone())
        .build()
        .unwrap();
    let guard = client.lock("b").unwrap().acquire().await.unwrap();
    let watch = guard.watch();
    let release = tokio::spawn(guard.release());
    let theirs = other.lock("b").unwrap().acquire_with(wait).await.unwrap();
    assert!(
        !watch.is_held(),
        "a released lease still looks held while another client holds `b`"
    );
    release.await.unwrap().unwrap();
    assert_eq!(watch.lost().await, LeaseLoss::Released);
    theirs.release().await.unwrap();
}

/// A release under way when another task shuts the client down is waited for: once
/// `shutdown` returns, the lock is free at the server, as for every other hold.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_a_release_under_way() {
    let backend = Wrapped::default();
    let client = LockClient::builder(backend.clone()).build().unwrap();
    let other = LockClient::builder(backend.clone()).build().unwrap();
    let guard = client.lock("slow").unwrap().acquire().await.unwrap();
    backend.delay_release_requests(Duration::from_secs(2));
    let releasing = tokio::spawn(guard.release());
    // The release is on its way to the server.
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.shutdown().await.unwrap();
    assert!(
        !other.lock("slow").unwrap().is_locked().await.unwrap(),
        "shutdown returned with a release still under way"
    );
    releasing.await.unwrap().unwrap();
}

/// A shutdown dropped while its first release is under way (a `timeout` around it):
/// the releases it had not sent yet are still made, and a second shutdown waits for
/// them, so nothing the client took is left held.
#[tokio::test(start_paused = true)]
async fn a_shutdown_dropped_midway_still_releases_every_hold() {
    let backend = Wrapped::default();
    let client = LockClient::builder(backend.clone()).build().unwrap();
    let first = client.lock("first").unwrap().acquire().await.unwrap();
    let second = client.lock("second").unwrap().acquire().await.unwrap();
    backend.delay_release_requests(Duration::from_secs(5));
    let cut = tokio::time::timeout(Duration::from_secs(1), client.shutdown()).await;
    assert!(cut.is_err(), "the first release was still under way");
    client.shutdown().await.expect("the second shutdown");
    for guard in [&first, &second] {
        assert!(!guard.is_held(), "a hold outlived the shutdown");
    }
    backend.delay_release_requests(Duration::ZERO);
    let other = LockClient::builder(backend).build().unwrap();
    for name in ["first", "second"] {
        let taken = other.lock(name).unwrap().try_acquire().await.unwrap();
        assert!(taken.is_some(), "`{name}` was left held after the shutdown");
    }
}
