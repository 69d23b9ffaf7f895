//! Nothing the machinery does may hang or hold a lock longer than it must: a shutdown
//! beside an acquire future that is never polled again, a release retried against a
//! backend that is down, a fair waiter behind a holder that overran its lease, a
//! release whose future is dropped half way.

mod support;

use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::prelude::*;
use lock_core::{AcquireOptions, Error, LockClient};
use support::Wrapped;

/// A task that holds an acquire future pinned (a `select!` loop) and calls `shutdown`
/// without polling it again: the shutdown must still end.
#[tokio::test(start_paused = true)]
async fn shutdown_ends_beside_an_acquire_future_that_is_never_polled_again() {
    let backend = MemoryBackend::new();
    let client = LockClient::new(backend.clone());
    let holder = LockClient::new(backend);
    let held = holder.lock("busy").unwrap().acquire().await.unwrap();
    let lock = client.lock("busy").unwrap();
    let mut waiting = Box::pin(lock.acquire());
    assert!(
        futures::poll!(&mut waiting).is_pending(),
        "waits for the holder"
    );
    tokio::time::timeout(Duration::from_secs(60), client.shutdown())
        .await
        .expect("shutdown waited for a future nobody polls")
        .unwrap();
    assert!(matches!(waiting.await, Err(Error::Closed)));
    held.release().await.unwrap();
}

/// A release against a backend that stays down is retried only while the lease can
/// still be held at the server: a fixed lease of 5 s is gone by then, so a shutdown
/// returns within it, not after minutes of pointless retries.
#[tokio::test(start_paused = true)]
async fn release_retries_end_when_the_lease_has_run_out() {
    let backend = Wrapped::default();
    let client = LockClient::new(backend.clone());
    let lock = client.lock("down").unwrap();
    let fixed = AcquireOptions::try_once().lease(Duration::from_secs(5));
    let guard = lock.acquire_with(fixed).await.unwrap();
    backend.releases_down(true);
    let err = guard.release().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), client.shutdown())
        .await
        .expect("shutdown kept retrying a release for a lease long gone")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "retried for {:?}",
        started.elapsed()
    );
}

/// The head of a fair queue is granted with a fixed lease and overruns it (never
/// releases); the next waiter, queued while nobody held the lock, must be woken when
/// that lease runs out, not wait for ever.
#[tokio::test(start_paused = true)]
async fn a_fair_waiter_behind_a_holder_that_overran_its_lease_is_granted() {
    let backend = MemoryBackend::new();
    let clients: Vec<_> = (0..3).map(|_| LockClient::new(backend.clone())).collect();
    let first = clients[0]
        .fair_lock("queue")
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let head = clients[1].fair_lock("queue").unwrap();
    let head = tokio::spawn(async move {
        let fixed = AcquireOptions::wait_forever().lease(Duration::from_secs(1));
        head.acquire_with(fixed).await.unwrap()
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    first.release().await.unwrap();
    // Before the woken head runs, the next waiter queues and finds nobody holding.
    let next = clients[2].fair_lock("queue").unwrap();
    let mut next = Box::pin(next.acquire_timeout(Duration::from_secs(30)));
    assert!(futures::poll!(&mut next).is_pending());
    let overrun = head.await.unwrap(); // granted; it never releases
    let granted = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the next waiter was never woken after the head's lease ran out")
        .unwrap();
    assert!(!overrun.is_held());
    granted.release().await.unwrap();
}

/// A `release` whose future is dropped after its first poll (a timeout around it)
/// still gives the lock back, rather than leaving it to run out unrenewed.
#[tokio::test(start_paused = true)]
async fn a_release_dropped_half_way_still_releases() {
    let backend = Wrapped::default();
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(Duration::from_secs(60))
        .build()
        .unwrap();
    let guard = client.lock("half").unwrap().acquire().await.unwrap();
    backend.delay_release_requests(Duration::from_millis(500));
    let cut = tokio::time::timeout(Duration::from_millis(100), guard.release()).await;
    assert!(cut.is_err(), "the release was still under way");
    let other = LockClient::new(backend).lock("half").unwrap();
    let next = other
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("the dropped release left the lock held until its lease ran out");
    next.release().await.unwrap();
}

/// A waiter that looked while another waiter ahead of it was about to be granted must
/// learn of that grant's lease: when the new holder overruns its fixed lease, the
/// waiter behind gets the lock at that lease's end, not at the end of the lease it saw
/// before (or never, had it seen none).
async fn second_waiter_follows_the_new_holders_lease(semaphore: bool) {
    let backend = MemoryBackend::new();
    let clients: Vec<_> = (0..3).map(|_| LockClient::new(backend.clone())).collect();
    let acquire = |client: &LockClient<MemoryBackend>, options: AcquireOptions| {
        let client = client.clone();
        async move {
            if semaphore {
                client.semaphore("narrow", 1)?.acquire_with(options).await
            } else {
                client.fair_lock("narrow")?.acquire_with(options).await
            }
        }
    };
    let started = tokio::time::Instant::now();
    let first = acquire(
        &clients[0],
        AcquireOptions::try_once().lease(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    // The next holder overruns its 500 ms fixed lease: it never releases.
    let overrunning = tokio::spawn(acquire(
        &clients[1],
        AcquireOptions::wait_for(Duration::from_secs(60)).lease(Duration::from_millis(500)),
    ));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let behind = tokio::spawn(acquire(
        &clients[2],
        AcquireOptions::wait_for(Duration::from_secs(60)),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.release().await.unwrap();
    let second = overrunning.await.unwrap().unwrap();
    let third = behind.await.unwrap().unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2_500),
        "the waiter behind was granted {took:?} in: it slept past the 500 ms lease that ended at 1.5 s"
    );
    drop(second);
    third.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_waiter_follows_the_new_holders_lease() {
    second_waiter_follows_the_new_holders_lease(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_fair_waiter_follows_the_new_holders_lease() {
    second_waiter_follows_the_new_holders_lease(false).await;
}
