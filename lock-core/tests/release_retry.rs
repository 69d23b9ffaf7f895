//! A release that fails with a retryable error (a lost reply, a server failing over)
//! must not leave the lock held: lock-core keeps releasing in the background until the
//! backend lets go or says the lease is gone. On a backend whose lease is a session
//! (ZooKeeper), nothing else would ever free it while the session lives. A lease that
//! is already lost, though, is reported as lost, not as something to retry.

use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockClient;

mod support;

use support::Wrapped;

fn client(failing: usize) -> LockClient<Wrapped> {
    let backend = Wrapped::default();
    backend.fail_next_releases(failing);
    LockClient::builder(backend)
        .watchdog_lease(Duration::from_secs(600))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_failed_release_is_retried_until_the_lock_is_free() {
    let client = client(3);
    let lock = client.lock("flaky").unwrap();
    let guard = lock.acquire().await.unwrap();
    let err = guard.release().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    // The lease is 10 minutes long: only a retried release frees it this soon.
    let other = client.lock("flaky").unwrap();
    let again = other
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock is free again after the retried release");
    again.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn a_failed_release_on_drop_is_retried_too() {
    let client = client(2);
    let lock = client.lock("dropped").unwrap();
    drop(lock.acquire().await.unwrap());
    let other = client.lock("dropped").unwrap();
    other
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the lock is free again after the retried release")
        .release()
        .await
        .unwrap();
}

/// Releasing a lease that is already lost here (it ran out, or its session ended) says
/// `LeaseLost`, never a retryable error, whatever the backend answers.
#[tokio::test(start_paused = true)]
async fn releasing_a_lost_lease_says_lease_lost_whatever_the_backend_answers() {
    let backend = Wrapped::default();
    let client = LockClient::new(backend.clone());
    let lock = client.lock("gone").unwrap();
    let fixed = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(1));
    let guard = lock.acquire_with(fixed).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!guard.is_held());
    // The server cannot be reached (a ZooKeeper session that expired answers so).
    backend.fail_next_releases(1);
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(err, lock_core::Error::LeaseLost { .. }),
        "a lost lease released: {err}"
    );
}

/// A release dropped after it reached the backend, before its reply: the background
/// sends it again and the backend, which already let go, says it no longer has the
/// lease. That is the release going through, not a lost lock: no `Lost` event, and the
/// lease reports `Released`.
#[tokio::test(start_paused = true)]
async fn a_release_sent_again_after_it_went_through_is_no_loss() {
    use lock_core::{LeaseLoss, LockEventKind};
    use std::sync::{Arc, Mutex};
    let backend = Wrapped::default();
    let events: Arc<Mutex<Vec<LockEventKind>>> = Arc::default();
    let seen = events.clone();
    let client = LockClient::builder(backend.clone())
        .on_event(move |event| seen.lock().unwrap().push(event.what.clone()))
        .build()
        .unwrap();
    let guard = client.lock("twice").unwrap().acquire().await.unwrap();
    let watch = guard.lost();
    backend.delay_release_replies(Duration::from_secs(1));
    let dropped = tokio::time::timeout(Duration::from_millis(100), guard.release()).await;
    assert!(
        dropped.is_err(),
        "the release answered before its reply delay"
    );
    backend.delay_release_replies(Duration::ZERO);
    client.shutdown().await.unwrap();
    assert_eq!(watch.await, LeaseLoss::Released);
    let events = events.lock().unwrap();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, LockEventKind::Lost { .. })),
        "a release that went through was reported as a lost lock: {events:?}"
    );
}
