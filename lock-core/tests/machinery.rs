//! The shared machinery, observed through a backend that counts the calls it passes
//! on to the in-memory backend (`support::Wrapped`): re-entry costs no round trip, the watchdog renews all
//! leases in one call per tick, and the public types are `Send + Sync`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::prelude::*;
use lock_core::{Capabilities, LockClient, LockGuard, Result};

mod support;

use support::Wrapped;

#[tokio::test]
async fn reentry_costs_no_round_trip() {
    let backend = Wrapped::default();
    let calls = backend.calls.clone();
    let client = LockClient::new(backend);
    let lock = client.lock("r").unwrap();
    let mut guards = vec![lock.acquire().await.unwrap()];
    for _ in 0..10 {
        guards.push(lock.acquire().await.unwrap());
    }
    let read_write = client.rw_lock("rw").unwrap();
    guards.push(read_write.write().await.unwrap());
    guards.push(read_write.write().await.unwrap());
    guards.push(read_write.read().await.unwrap()); // the downgrade is a real acquisition
    guards.push(read_write.read().await.unwrap());
    assert_eq!(calls.acquire.load(Ordering::SeqCst), 3);
    assert_eq!(lock.hold_count(), 11);
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(
        calls.release.load(Ordering::SeqCst),
        3,
        "one release per acquisition"
    );
}

#[tokio::test]
async fn watchdog_renews_every_lease_in_one_call_per_tick() {
    const LOCKS: usize = 10_000;
    let backend = Wrapped::default();
    let calls = backend.calls.clone();
    let client = LockClient::builder(backend)
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .unwrap();
    let mut guards: Vec<LockGuard> = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(
            client
                .lock(&format!("many-{i}"))
                .unwrap()
                .acquire()
                .await
                .unwrap(),
        );
    }
    assert_eq!(client.watched_leases(), LOCKS);
    // Ticks that ran while the locks were still being taken renewed only those taken
    // by then (on a loaded machine taking 10,000 locks outlasts a tick): count from
    // one tick interval after the last one, when every tick sees all of them.
    tokio::time::sleep(Duration::from_millis(400)).await;
    calls.renew.store(0, Ordering::SeqCst);
    calls.renew_sizes.lock().unwrap().clear();
    // Three lease lengths: about nine ticks.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    assert!(
        guards.iter().all(LockGuard::is_held),
        "a lease was not kept"
    );
    let ticks = calls.renew.load(Ordering::SeqCst);
    assert!(
        (3..=12).contains(&ticks),
        "{ticks} renewal calls for 9 ticks"
    );
    let sizes = calls.renew_sizes.lock().unwrap().clone();
    assert!(
        sizes.iter().all(|&n| n == LOCKS),
        "renewal batches {sizes:?}"
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(client.watched_leases(), 0);
}

#[tokio::test]
async fn fixed_leases_are_not_watched_and_extend_unwatches() {
    let client = LockClient::builder(MemoryBackend::new())
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let lock = client.lock("f").unwrap();
    let fixed = lock
        .acquire_with(lock_core::AcquireOptions::try_once().lease(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(client.watched_leases(), 0);
    fixed.release().await.unwrap();
    let kept = lock.acquire().await.unwrap();
    assert_eq!(client.watched_leases(), 1);
    kept.extend(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        client.watched_leases(),
        0,
        "an extended lease is fixed from then on"
    );
    kept.release().await.unwrap();
}

#[tokio::test]
async fn unsupported_capabilities_are_refused_before_the_backend() {
    let backend = Wrapped::default().with_capabilities(
        Capabilities::ALL
            .with_fair(false)
            .with_read_write(false)
            .with_fixed_lease(false),
    );
    let calls = backend.calls.clone();
    let client = LockClient::new(backend);
    let unsupported = |r: Result<LockGuard>| matches!(r, Err(lock_core::Error::Unsupported { .. }));
    assert!(unsupported(client.fair_lock("x").unwrap().acquire().await));
    assert!(unsupported(client.rw_lock("x").unwrap().read().await));
    let fixed = lock_core::AcquireOptions::try_once().lease(Duration::from_secs(1));
    assert!(unsupported(
        client.lock("x").unwrap().acquire_with(fixed).await
    ));
    assert_eq!(calls.acquire.load(Ordering::SeqCst), 0);
}

#[test]
fn public_types_are_send_and_sync() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<LockGuard>();
    is_send_sync::<LockClient<MemoryBackend>>();
    is_send_sync::<lock_core::Mutex<MemoryBackend>>();
    is_send_sync::<lock_core::Error>();
    let client = LockClient::new(MemoryBackend::new());
    let lock = client.lock("b").unwrap();
    let dyn_lock: &dyn DistributedLock = &lock;
    fn send<T: Send>(_: T) {}
    send(dyn_lock.acquire());
    send(dyn_lock.try_acquire());
    let rw = client.rw_lock("b").unwrap();
    send(rw.read());
    send(async move {
        let guard = lock.acquire().await.unwrap();
        send(guard.lost());
        guard.release().await
    });
}

/// A client used from one runtime after another (as `#[tokio::test]`s sharing a client
/// do) keeps renewing: a watchdog whose runtime shut down is replaced.
#[test]
fn watchdog_survives_its_runtime() {
    let client = LockClient::builder(MemoryBackend::new())
        .watchdog_lease(Duration::from_millis(150))
        .build()
        .unwrap();
    for round in 0..2 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let guard = client.lock("survivor").unwrap().acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert!(guard.is_held(), "round {round}: lease not renewed");
            guard.release().await.unwrap();
            // Leave a lease behind when the runtime goes, as a test that fails would.
            let name = format!("left-behind-{round}");
            std::mem::forget(client.lock(&name).unwrap().acquire().await.unwrap());
        });
    }
}
