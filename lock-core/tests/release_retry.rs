//! A release that fails with a retryable error (a lost reply, a server failing over)
//! must not leave the lock held: lock-core keeps releasing in the background until the
//! backend lets go or says the lease is gone. On a backend whose lease is a session
//! (ZooKeeper), nothing else would ever free it while the session lives.

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
