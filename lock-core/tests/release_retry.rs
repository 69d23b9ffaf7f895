//! A release that fails with a retryable error (a lost reply, a server failing over)
//! must not leave the lock held: lock-core keeps releasing in the background until the
//! backend lets go or says the lease is gone. On a backend whose lease is a session
//! (ZooKeeper), nothing else would ever free it while the session lives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::prelude::*;
use lock_core::{
    AcquireRequest, Capabilities, Error, Grant, HeldLease, LockBackend, LockClient, LockFamily,
    LockKey, Renewal, Result,
};

/// Passes everything to a [`MemoryBackend`], but the first `failing` releases fail
/// with `Unavailable` before reaching it.
#[derive(Debug, Clone)]
struct FlakyRelease {
    inner: MemoryBackend,
    failing: Arc<AtomicUsize>,
}

impl LockBackend for FlakyRelease {
    type Lease = ();

    fn name(&self) -> &'static str {
        "flaky-release"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<()>>> {
        self.inner.acquire(req).await
    }

    async fn release(&self, lease: &HeldLease<()>) -> Result<()> {
        let failing = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(Error::Unavailable {
                backend: "flaky-release",
                source: "the reply was lost".into(),
            });
        }
        self.inner.release(lease).await
    }

    async fn renew(&self, leases: &[&HeldLease<()>], ttl: Duration) -> Result<Vec<Renewal>> {
        self.inner.renew(leases, ttl).await
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        self.inner.is_locked(key, family).await
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        self.inner.force_unlock(key, family).await
    }
}

fn client(failing: usize) -> LockClient<FlakyRelease> {
    LockClient::builder(FlakyRelease {
        inner: MemoryBackend::new(),
        failing: Arc::new(AtomicUsize::new(failing)),
    })
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
