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
    let first = lock.acquire().await.unwrap();
    let mut guards = Vec::new();
    for _ in 0..10 {
        guards.push(first.reenter().unwrap());
    }
    guards.push(first);
    let read_write = client.rw_lock("rw").unwrap();
    let write = read_write.write().await.unwrap();
    guards.push(write.reenter().unwrap());
    let read = write.downgrade().await.unwrap(); // the downgrade is a real acquisition
    guards.push(read.reenter().unwrap());
    guards.push(read);
    guards.push(write);
    assert_eq!(calls.acquire.load(Ordering::SeqCst), 3);
    assert_eq!(lock.hold_count(), 11);
    assert_eq!(
        (read_write.write_hold_count(), read_write.read_hold_count()),
        (2, 2)
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(
        calls.release.load(Ordering::SeqCst),
        3,
        "one release per acquisition"
    );
    assert_eq!(lock.hold_count(), 0);
}

/// Tasks sharing one handle, and futures joined in one task on one handle, are owners
/// of their own: each waits for the others, and the counter they share ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_through_one_handle_exclude_each_other() {
    use std::sync::atomic::{AtomicU32, AtomicU64};
    use std::sync::Arc;
    async fn bump(lock: &dyn DistributedLock, counter: &AtomicU64, inside: &AtomicU32) {
        let guard = lock.acquire().await.unwrap();
        assert_eq!(
            inside.fetch_add(1, Ordering::SeqCst),
            0,
            "two inside at once"
        );
        let seen = counter.load(Ordering::SeqCst);
        tokio::task::yield_now().await;
        counter.store(seen + 1, Ordering::SeqCst);
        inside.fetch_sub(1, Ordering::SeqCst);
        guard.release().await.unwrap();
    }
    let client = LockClient::new(MemoryBackend::new());
    let shared: Arc<dyn DistributedLock> = Arc::new(client.lock("shared").unwrap());
    let (counter, inside) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU32::new(0)));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (lock, counter, inside) = (shared.clone(), counter.clone(), inside.clone());
            tokio::spawn(async move {
                for _ in 0..10 {
                    bump(&*lock, &counter, &inside).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 160);

    let joined = futures::future::join_all((0..16).map(|_| async {
        for _ in 0..10 {
            bump(&*shared, &counter, &inside).await;
        }
    }));
    joined.await;
    assert_eq!(counter.load(Ordering::SeqCst), 320);
}

// Paused time: the count of ticks is exact whatever the machine's load.
#[tokio::test(start_paused = true)]
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
    is_send_sync::<lock_core::LockHandle<MemoryBackend>>();
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

/// Two runtimes using one client at once (as `#[tokio::test]`s sharing a client do,
/// each on a thread of its own): when the runtime the watchdog happened to start on
/// shuts down, the other's leases go on being renewed.
#[test]
fn watchdog_moves_to_a_runtime_still_running() {
    let client = LockClient::builder(MemoryBackend::new())
        .watchdog_lease(Duration::from_millis(150))
        .build()
        .unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (first, second) = (runtime(), runtime());
    // The first lease starts the watchdog on the first runtime.
    let early = first
        .block_on(client.lock("early").unwrap().acquire())
        .unwrap();
    let kept = second
        .block_on(client.lock("kept").unwrap().acquire())
        .unwrap();
    drop(first);
    second.block_on(async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            kept.is_held(),
            "lease not renewed once the first runtime was gone"
        );
        kept.release().await.unwrap();
    });
    drop(early);
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
