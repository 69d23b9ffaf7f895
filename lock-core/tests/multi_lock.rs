//! MultiLock rules that need no particular server: what `build` refuses, the one
//! order, capability checks before anything is taken, clean-up after a failed member,
//! and release reports. The behaviour under contention runs on every backend in the
//! conformance suite (`multi::` cases).

use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::prelude::*;
use lock_core::{AcquireOptions, Capabilities, Error, LockClient, LockKind, MultiLock};

mod support;

use support::Wrapped;

fn invalid(result: lock_core::Result<MultiLock>) -> String {
    match result {
        Err(Error::InvalidArgument { message }) => message,
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

#[tokio::test]
async fn unsupported_members_are_refused_before_anything_is_taken() {
    let caps = Capabilities::ALL
        .with_fair(false)
        .with_read_write(false)
        .with_fixed_lease(false);
    let backend = Wrapped::default().with_capabilities(caps);
    let calls = backend.calls.clone();
    let client = LockClient::new(backend);

    let a = || client.lock("a").unwrap();
    let fair = MultiLock::builder()
        .lock(a())
        .lock(client.fair_lock("b").unwrap());
    let read = MultiLock::builder()
        .lock(a())
        .read(client.rw_lock("b").unwrap());
    for (builder, missing) in [(fair, "fair locks"), (read, "read-write locks")] {
        let built = builder.build();
        assert!(
            matches!(built, Err(Error::Unsupported { operation, .. }) if operation == missing),
            "{built:?}"
        );
    }

    let plain = MultiLock::builder()
        .lock(client.lock("a").unwrap())
        .lock(client.lock("b").unwrap())
        .build()
        .unwrap();
    let fixed = plain
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(1)))
        .await;
    assert!(
        matches!(
            fixed,
            Err(Error::Unsupported {
                operation: "fixed leases",
                ..
            })
        ),
        "{fixed:?}"
    );
    assert_eq!(
        calls.acquire.load(Ordering::SeqCst),
        0,
        "something was taken"
    );
}

#[tokio::test]
async fn one_lock_listed_twice_is_refused() {
    let backend = MemoryBackend::new();
    let client = LockClient::new(backend.clone());
    let other_client = LockClient::new(backend);

    let empty = invalid(MultiLock::builder().build());
    assert!(empty.contains("at least one"), "{empty}");

    let two_handles = invalid(
        MultiLock::builder()
            .lock(client.lock("a").unwrap())
            .lock(client.lock("b").unwrap())
            .lock(other_client.lock("a").unwrap())
            .build(),
    );
    assert!(
        two_handles.contains("locks/a") && two_handles.contains("twice"),
        "{two_handles}"
    );

    let rw = client.rw_lock("table").unwrap();
    let both_sides = invalid(MultiLock::builder().read(rw.clone()).write(rw).build());
    assert!(both_sides.contains("write side"), "{both_sides}");

    // Not the same lock: another store, another namespace, another lock family.
    let elsewhere = LockClient::new(MemoryBackend::new());
    let billing = LockClient::builder(MemoryBackend::new())
        .namespace("billing")
        .build()
        .unwrap();
    let distinct = MultiLock::builder()
        .lock(client.lock("a").unwrap())
        .lock(elsewhere.lock("a").unwrap())
        .lock(billing.lock("a").unwrap())
        .lock(client.fair_lock("a").unwrap())
        .write(client.rw_lock("a").unwrap())
        .build()
        .unwrap();
    assert_eq!(distinct.members().len(), 5);
    let guard = distinct.try_acquire().await.unwrap().expect("all free");
    assert_eq!(guard.guards().len(), 5);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn members_are_taken_in_one_order_whatever_the_builder_order() {
    let backend = MemoryBackend::new();
    let one = LockClient::new(backend.clone());
    let two = LockClient::new(backend);
    let first = MultiLock::builder()
        .lock(one.lock("c").unwrap())
        .write(one.rw_lock("a").unwrap())
        .lock(one.lock("b").unwrap())
        .build()
        .unwrap();
    let second = MultiLock::builder()
        .lock(two.lock("b").unwrap())
        .lock(two.lock("c").unwrap())
        .write(two.rw_lock("a").unwrap())
        .build()
        .unwrap();
    let order = |m: &MultiLock| -> Vec<(String, LockKind)> {
        m.members()
            .map(|(id, kind)| (id.name().to_string(), kind))
            .collect()
    };
    assert_eq!(order(&first), order(&second));
    assert_eq!(
        order(&first),
        [
            ("a".to_owned(), LockKind::Write),
            ("b".to_owned(), LockKind::Exclusive),
            ("c".to_owned(), LockKind::Exclusive)
        ]
    );
    let guard = first.acquire().await.unwrap();
    let tokens: Vec<u64> = guard.fencing_tokens().map(|(_, token)| token).collect();
    assert_eq!(tokens.len(), 3);
    assert_eq!(guard.fencing_token("b"), Some(tokens[1]));
    assert_eq!(guard.fencing_token("nope"), None);
    assert!(second.try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
}

/// A member that fails with an error other than a timeout (here: its client was shut
/// down) leaves nothing of the multi-lock held, and returns that error.
#[tokio::test]
async fn a_failing_member_gives_back_what_was_taken() {
    let backend = Wrapped::default();
    let calls = backend.calls.clone();
    let client = LockClient::new(backend.clone());
    let closed = LockClient::new(backend);
    closed.shutdown().await.unwrap();
    let first = client.lock("a").unwrap();
    let lock = MultiLock::builder()
        .lock(first.clone())
        .lock(closed.lock("b").unwrap())
        .build()
        .unwrap();
    let err = lock.acquire().await.unwrap_err();
    assert!(matches!(err, Error::Closed), "{err}");
    assert_eq!(first.hold_count(), 0);
    assert!(!first.is_locked().await.unwrap());
    assert_eq!(calls.release.load(Ordering::SeqCst), 1, "`a` released once");
}

/// A multi-lock's guard re-enters every member at once; they stay held until the last
/// guard goes.
#[tokio::test]
async fn reenter_keeps_every_member_until_the_last_guard() {
    let backend = Wrapped::default();
    let calls = backend.calls.clone();
    let client = LockClient::new(backend);
    let lock = MultiLock::builder()
        .lock(client.lock("a").unwrap())
        .write(client.rw_lock("b").unwrap())
        .build()
        .unwrap();
    let outer = lock.acquire().await.unwrap();
    let inner = outer.reenter().unwrap();
    assert_eq!(
        calls.acquire.load(Ordering::SeqCst),
        2,
        "no round trip to re-enter"
    );
    assert_eq!(
        inner.fencing_tokens().map(|(_, t)| t).collect::<Vec<_>>(),
        outer.fencing_tokens().map(|(_, t)| t).collect::<Vec<_>>()
    );
    inner.release().await.unwrap();
    assert!(outer.is_held());
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "still held once"
    );
    outer.release().await.unwrap();
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn dropping_the_guard_releases_every_member() {
    let backend = MemoryBackend::new();
    let client = LockClient::new(backend.clone());
    let lock = MultiLock::builder()
        .lock(client.lock("a").unwrap())
        .read(client.rw_lock("b").unwrap())
        .build()
        .unwrap();
    let guard = lock.acquire().await.unwrap();
    assert!(lock.is_held_by_me());
    drop(guard);
    assert!(!lock.is_held_by_me());
    let other = LockClient::new(backend);
    let a = other.lock("a").unwrap();
    let b = other.rw_lock("b").unwrap();
    let a = tokio::time::timeout(Duration::from_secs(5), a.acquire()).await;
    let b = tokio::time::timeout(Duration::from_secs(5), b.write()).await;
    a.unwrap().unwrap().release().await.unwrap();
    b.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_lost_member_is_named_by_lost_and_release() {
    let backend = MemoryBackend::new();
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let lock = MultiLock::builder()
        .lock(client.lock("a").unwrap())
        .lock(client.lock("b").unwrap())
        .build()
        .unwrap();
    let guard = lock.acquire().await.unwrap();
    let lost = guard.lost();
    assert!(LockClient::new(backend)
        .lock("b")
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    let loss = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .unwrap();
    assert_eq!(loss.id.name().as_str(), "b");
    assert_eq!(loss.kind, LockKind::Exclusive);
    assert!(
        loss.to_string()
            .starts_with("lock locks/b (exclusive, memory"),
        "{loss}"
    );
    assert!(!guard.is_held());
    let err = guard.release().await.unwrap_err();
    assert!(err.to_string().starts_with("1 of 2 locks"), "{err}");
    let err = Error::from(err);
    assert!(
        matches!(err, Error::LeaseLost { ref name } if name == "b"),
        "{err}"
    );
    assert!(!client.lock("a").unwrap().is_locked().await.unwrap());
}

#[tokio::test]
async fn released_guard_reports_released_and_extend_checks_its_ttl() {
    let client = LockClient::new(MemoryBackend::new());
    let lock = MultiLock::builder()
        .lock(client.lock("a").unwrap())
        .lock(client.lock("b").unwrap())
        .build()
        .unwrap();
    let guard = lock.acquire().await.unwrap();
    let err = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(guard.is_held(), "a refused extend changed nothing");
    guard.extend(Duration::from_secs(60)).await.unwrap();
    let lost = guard.lost();
    guard.release().await.unwrap();
    assert_eq!(lost.await.reason, lock_core::LeaseLoss::Released);
}

/// A member held by someone else ends a wait-limited acquire at its limit, even when
/// giving back the members already taken is slow (a server slow to answer): the
/// releases go on in the background, and nothing stays held.
#[tokio::test(start_paused = true)]
async fn a_slow_release_of_the_members_taken_does_not_stretch_the_wait_limit() {
    let backend = Wrapped::default();
    let client = LockClient::new(backend.clone());
    let other = LockClient::new(backend.clone());
    let held = other.lock("b").unwrap().acquire().await.unwrap();
    let first = client.lock("a").unwrap();
    let lock = MultiLock::builder()
        .lock(first.clone())
        .lock(client.lock("b").unwrap())
        .build()
        .unwrap();
    backend.delay_release_requests(Duration::from_secs(20));
    let started = tokio::time::Instant::now();
    let err = lock
        .acquire_timeout(Duration::from_secs(1))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(
        took <= Duration::from_millis(2_100),
        "a 1 s wait answered after {took:?}"
    );
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(first.hold_count(), 0);
    assert!(!first.is_locked().await.unwrap(), "`a` was left held");
    backend.delay_release_requests(Duration::ZERO);
    held.release().await.unwrap();
}

/// With a fixed lease, the members taken first are set to it once all are held; a
/// server slow to answer that must not stretch the wait limit either, and nothing
/// stays held.
#[tokio::test(start_paused = true)]
async fn a_slow_extend_to_the_fixed_lease_does_not_stretch_the_wait_limit() {
    let backend = Wrapped::default();
    let client = LockClient::new(backend.clone());
    let (a, b) = (client.lock("a").unwrap(), client.lock("b").unwrap());
    let lock = MultiLock::builder()
        .lock(a.clone())
        .lock(b.clone())
        .build()
        .unwrap();
    backend.delay_renewal_requests(Duration::from_secs(20));
    let options = AcquireOptions::wait_for(Duration::from_secs(1)).lease(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let outcome = lock.acquire_with(options).await;
    let took = started.elapsed();
    assert!(outcome.is_err(), "granted without its fixed leases set");
    assert!(
        took <= Duration::from_millis(2_100),
        "a 1 s wait answered after {took:?}"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(a.hold_count() + b.hold_count(), 0);
    assert!(!a.is_locked().await.unwrap() && !b.is_locked().await.unwrap());
}
