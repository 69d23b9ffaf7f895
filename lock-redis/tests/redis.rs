//! The single-server backend against a real redis-server.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::silent_subscribers::SilentSubscribers;
use common::{client, keys, RedisServer};
use lock_core::backend::{HeldLease, LockBackend, OwnerToken, Renewal};
use lock_core::{
    prelude::*, AcquireOptions, Error, LockClient, LockKey, LockKind, LockName, Namespace,
};
use lock_redis::{RedisBackend, RedisConfig, RedisLease};
use redis::AsyncCommands;

const LONG: Duration = Duration::from_secs(30);

/// The lease a stored value `owner:request:fence` stands for.
fn lease_of(namespace: &str, name: &str, kind: LockKind, value: &str) -> HeldLease<RedisLease> {
    let (rest, fence) = value.rsplit_once(':').expect("owner:request:fence");
    let (owner, request) = rest.rsplit_once(':').expect("owner:request");
    HeldLease {
        key: LockKey::new(
            Namespace::new(namespace).unwrap(),
            LockName::new(name).unwrap(),
        ),
        kind,
        owner: OwnerToken::from_string(owner.to_owned()),
        fence: fence.parse().unwrap(),
        data: RedisLease::new(request),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_fences_increase() {
    let server = RedisServer::start();
    let client = client(server.backend(), "t1");
    let mut raw = server.raw().await;
    let lock = client.lock("job").unwrap();

    let first = lock.acquire().await.unwrap();
    let value: String = raw.get("t1:job").await.unwrap();
    assert!(
        value.ends_with(&format!(":{}", first.fencing_token())),
        "{value}"
    );
    let pttl: i64 = raw.pttl("t1:job").await.unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "watchdog lease set: {pttl}");
    assert!(lock.is_locked().await.unwrap());
    let other = client.lock("job").unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    let fence = first.fencing_token();
    first.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    let exists: bool = raw.exists("t1:job").await.unwrap();
    assert!(!exists, "released key is gone");

    let second = other.try_acquire().await.unwrap().expect("free again");
    assert!(second.fencing_token() > fence);
    second.release().await.unwrap();
    // Fair and read-write grants share the counter: still increasing.
    let fair = client.fair_lock("job").unwrap().acquire().await.unwrap();
    assert!(fair.fencing_token() > fence + 1);
    fair.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_set_nx_px_holders_and_ours_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(server.backend(), "interop");
    let mut raw = server.raw().await;
    let lock = client.lock("shared").unwrap();

    // Another client (redis-py Lock, redsync, ...) holds the key.
    let set: Option<String> = redis::cmd("SET")
        .arg("interop:shared")
        .arg("8f4c2a90d1e311eeb4c1")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(set.as_deref(), Some("OK"));
    assert!(lock.try_acquire().await.unwrap().is_none());
    let started = Instant::now();
    let err = lock
        .acquire_with(AcquireOptions::wait_for(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // Their release (GET-compare-DEL) frees it for us.
    let _: i64 = raw.del("interop:shared").await.unwrap();
    let guard = lock.try_acquire().await.unwrap().expect("free");

    // And while we hold it, their SET NX fails.
    let set: Option<String> = redis::cmd("SET")
        .arg("interop:shared")
        .arg("theirs")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(set, None);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lease_can_neither_release_nor_renew_the_new_one() {
    let server = RedisServer::start();
    let backend = server.backend();
    let client = client(backend.clone(), "stale");
    let mut raw = server.raw().await;

    let opts = AcquireOptions::try_once().lease(Duration::from_millis(50));
    let old = client.lock("k").unwrap().acquire_with(opts).await.unwrap();
    let old_value: String = raw.get("stale:k").await.unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let new = client
        .lock("k")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    let new_value: String = raw.get("stale:k").await.unwrap();
    assert_ne!(old_value, new_value);

    let stale = lease_of("stale", "k", LockKind::Exclusive, &old_value);
    let err = backend.release(&stale).await.unwrap_err();
    assert!(matches!(err, Error::NotOwner { .. }), "{err}");
    assert_eq!(
        backend.renew(&[&stale], LONG).await.unwrap(),
        [Renewal::Lost]
    );
    // Same owner, wrong fence: still not ours.
    let mut wrong_fence = lease_of("stale", "k", LockKind::Exclusive, &new_value);
    wrong_fence.fence += 1;
    assert!(backend.release(&wrong_fence).await.is_err());
    let value: String = raw.get("stale:k").await.unwrap();
    assert_eq!(value, new_value, "the new lease is untouched");
    assert!(old.release().await.is_err());
    new.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_renewal_call_reports_each_lease_and_a_deleted_key_as_lost() {
    let server = RedisServer::start();
    let backend = server.backend();
    let client = client(backend.clone(), "renew");
    let mut raw = server.raw().await;
    let opts = AcquireOptions::try_once().lease(Duration::from_secs(5));

    let a = client.lock("a").unwrap().acquire_with(opts).await.unwrap();
    let b = client
        .fair_lock("b")
        .unwrap()
        .acquire_with(opts)
        .await
        .unwrap();
    let c = client.rw_lock("c").unwrap().read_with(opts).await.unwrap();
    let d = client.rw_lock("d").unwrap().write_with(opts).await.unwrap();
    let va: String = raw.get("renew:a").await.unwrap();
    let vb: String = raw.get("{renew:b}:fair").await.unwrap();
    let readers: Vec<String> = raw.hkeys("{renew:c}:rw:read").await.unwrap();
    let vd: String = raw.get("{renew:d}:rw:write").await.unwrap();
    let leases = [
        lease_of("renew", "a", LockKind::Exclusive, &va),
        lease_of("renew", "b", LockKind::Fair, &vb),
        lease_of("renew", "c", LockKind::Read, &readers[0]),
        lease_of("renew", "d", LockKind::Write, &vd),
    ];
    let refs: Vec<&HeldLease<RedisLease>> = leases.iter().collect();

    let _: i64 = raw.del("{renew:b}:fair").await.unwrap();
    let renewed = backend.renew(&refs, LONG).await.unwrap();
    use Renewal::*;
    assert_eq!(renewed, [Renewed, Lost, Renewed, Renewed]);
    for key in ["renew:a", "{renew:c}:rw:read", "{renew:d}:rw:write"] {
        let pttl: i64 = raw.pttl(key).await.unwrap();
        assert!(pttl > 20_000, "{key} renewed to 30 s: {pttl}");
    }

    // Large batches are split, but still answer in order.
    let many: Vec<&HeldLease<RedisLease>> = (0..2500).map(|i| refs[i % 4]).collect();
    let renewed = backend.renew(&many, LONG).await.unwrap();
    assert_eq!(renewed.len(), 2500);
    assert_eq!(renewed[1], Lost);
    assert_eq!(renewed[2498], Renewed);
    for guard in [a, c, d] {
        guard.release().await.unwrap();
    }
    assert!(b.release().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_without_waiting_for_the_lease() {
    let server = RedisServer::start();
    let client = client(server.backend(), "handoff");
    let holder = client
        .lock("h")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(LONG))
        .await
        .unwrap();
    let waiter = client.lock("h").unwrap();
    let task = tokio::spawn(async move {
        let guard = waiter
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(10)))
            .await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (acquired_at, guard) = task.await.unwrap();
    let handoff = acquired_at - released_at;
    assert!(
        handoff < Duration::from_millis(500),
        "handoff took {handoff:?}"
    );
    guard.unwrap().release().await.unwrap();
}

/// A pub/sub connection that goes silent (its packets dropped, nothing closed: a
/// firewall or NAT that forgot it) is noticed and replaced, so a waiter still hears of
/// a release within seconds instead of waiting out the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_pubsub_connection_went_silent_still_hears_the_release() {
    let server = RedisServer::start();
    let proxy = SilentSubscribers::to(server.port()).await;
    let holder = client(server.backend(), "silent-pubsub");
    let config = RedisConfig::from_url(&proxy.url()).unwrap();
    let waiters = client(RedisBackend::new(config).unwrap(), "silent-pubsub");
    let guard = holder
        .lock("job")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(LONG))
        .await
        .unwrap();
    let lock = waiters.lock("job").unwrap();
    let waiting = tokio::spawn(async move {
        let guard = lock.acquire_timeout(LONG * 2).await;
        (guard, Instant::now())
    });
    proxy.wait_for_subscribers(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.silence();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (granted, at) = tokio::time::timeout(LONG * 2, waiting)
        .await
        .expect("the waiter ended")
        .unwrap();
    let took = at - released;
    println!("the waiter was granted {took:?} after the release");
    assert!(
        took < Duration::from_secs(10),
        "the waiter heard of the release only {took:?} after it (its pub/sub connection had gone silent)"
    );
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_grants_in_request_order() {
    let server = RedisServer::start();
    let client = client(server.backend(), "fair");
    let mut raw = server.raw().await;
    let holder = client.fair_lock("q").unwrap().acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let lock = client.fair_lock("q").unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }));
        // Wait until this waiter is queued before starting the next.
        let started = Instant::now();
        loop {
            let len: usize = raw.llen("{fair:q}:fair:queue").await.unwrap();
            if len == i + 1 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "waiter {i} not queued"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // A single try does not jump the queue even when the lock is free.
    holder.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    assert!(keys(&mut raw)
        .await
        .iter()
        .all(|k| k.ends_with(":fence") || k.contains("}:released:")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fair_waiter_leaves_no_queue_entry_or_subscription() {
    let server = RedisServer::start();
    let backend = server.backend();
    let client = client(backend.clone(), "drop");
    let mut raw = server.raw().await;
    let holder = client.fair_lock("q").unwrap().acquire().await.unwrap();
    let waiter = client.fair_lock("q").unwrap();
    let pending = tokio::time::timeout(Duration::from_millis(200), waiter.acquire()).await;
    assert!(pending.is_err(), "still waiting when dropped");
    let started = Instant::now();
    loop {
        let len: usize = raw.llen("{drop:q}:fair:queue").await.unwrap();
        if len == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "queue entry left behind"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The holder, held past 0.2 s, listens on the lock's channel for a force-unlock;
    // once it lets go, nobody does.
    holder.release().await.unwrap();
    let started = Instant::now();
    loop {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query_async(&mut raw)
            .await
            .unwrap();
        if channels.is_empty() && backend.waiting_channels() == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "still subscribed: {channels:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The next fair request is granted at once: nobody is in front of it.
    assert!(waiter.try_acquire().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_shares_readers_excludes_writers_and_downgrades() {
    let server = RedisServer::start();
    let client = client(server.backend(), "rw");
    let a = client.rw_lock("doc").unwrap();
    let b = client.rw_lock("doc").unwrap();
    let c = client.rw_lock("doc").unwrap();

    let write = a.write().await.unwrap();
    // Downgrade: the writer may read; others may not.
    let read = write.downgrade().await.unwrap();
    assert!(b.try_read().await.unwrap().is_none());
    assert!(b.try_write().await.unwrap().is_none());
    let waiter = tokio::spawn(async move {
        let guard = b.read().await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released_at = Instant::now();
    write.release().await.unwrap();
    let (at, b_read) = waiter.await.unwrap();
    assert!(
        at - released_at < Duration::from_millis(500),
        "reader woken by the writer's release"
    );
    // Two readers share; a writer waits for both.
    assert!(c.try_write().await.unwrap().is_none());
    let writer = tokio::spawn(async move { c.write().await.map(|g| (Instant::now(), g)) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    read.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!writer.is_finished(), "one reader left");
    let released_at = Instant::now();
    b_read.release().await.unwrap();
    let (at, w) = writer.await.unwrap().unwrap();
    assert!(
        at - released_at < Duration::from_millis(500),
        "writer woken by the last reader"
    );
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_back_new_readers() {
    let server = RedisServer::start();
    let client = client(server.backend(), "pref");
    let reader = client.rw_lock("doc").unwrap().read().await.unwrap();
    let writer = client.rw_lock("doc").unwrap();
    let w = tokio::spawn(async move { writer.write().await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let late = client.rw_lock("doc").unwrap();
    assert!(
        late.try_read().await.unwrap().is_none(),
        "writers are preferred"
    );
    reader.release().await.unwrap();
    let w = w.await.unwrap().unwrap();
    w.release().await.unwrap();
    assert!(late.try_read().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_and_is_locked_per_family() {
    let server = RedisServer::start();
    let client = client(server.backend(), "force");
    let ex = client.lock("x").unwrap().acquire().await.unwrap();
    let rw = client.rw_lock("x").unwrap();
    assert!(!rw.is_locked().await.unwrap(), "families are separate");
    let r = rw.read().await.unwrap();
    assert!(rw.is_locked().await.unwrap());
    assert!(rw.force_unlock().await.unwrap());
    assert!(!rw.is_locked().await.unwrap());
    let other = client.lock("x").unwrap();
    assert!(other.is_locked().await.unwrap());
    assert!(other.force_unlock().await.unwrap());
    assert!(!other.force_unlock().await.unwrap());
    assert!(other.try_acquire().await.unwrap().is_some());
    assert!(ex.release().await.is_err());
    assert!(r.release().await.is_err());
}

/// Waits until the backend listens on `n` channels, for up to 10 s.
async fn until_channels(backend: &RedisBackend, n: usize) {
    let started = Instant::now();
    while backend.waiting_channels() != n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "listening on {} channels, not {n}",
            backend.waiting_channels()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_still_holding_listen_for_a_force_unlock_until_they_let_go() {
    let server = RedisServer::start();
    let backend = server.backend();
    let client = client(backend.clone(), "listen");
    // Locks taken and given back in a loop never listen.
    let brief = client.lock("brief").unwrap();
    for _ in 0..50 {
        brief.acquire().await.unwrap().release().await.unwrap();
    }
    until_channels(&backend, 0).await;
    let kept = client.lock("kept").unwrap().acquire().await.unwrap();
    let forced = client.lock("forced").unwrap().acquire().await.unwrap();
    let dropped = client.lock("dropped").unwrap().acquire().await.unwrap();
    let released = client.lock("released").unwrap().acquire().await.unwrap();
    released.release().await.unwrap();
    // Each lease still held listens on its lock's channel.
    until_channels(&backend, 3).await;
    assert!(client.lock("forced").unwrap().force_unlock().await.unwrap());
    let loss = tokio::time::timeout(Duration::from_secs(10), forced.lost())
        .await
        .expect("the holder hears of its force-unlock");
    assert_eq!(loss, lock_core::LeaseLoss::Revoked);
    until_channels(&backend, 2).await;
    drop(dropped);
    until_channels(&backend, 1).await;
    assert!(kept.is_held());
    kept.release().await.unwrap();
    until_channels(&backend, 0).await;
}

/// Two runtimes using one client at once: when the runtime that was to start the
/// listening of held locks shuts down, a lock held on the other still listens for a
/// force-unlock. (The client's connections are made on the runtime that stays: they
/// live on the runtime that made them.)
#[test]
fn a_holder_listens_when_another_runtime_of_its_client_shuts_down() {
    let server = RedisServer::start();
    let backend = server.backend();
    let client = client(backend.clone(), "runtimes");
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let (first, second) = (runtime(), runtime());
    second.block_on(async {
        let warm = client.lock("warm").unwrap().acquire().await.unwrap();
        warm.release().await.unwrap();
        // Past its due time, so that what it started has ended.
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    // A lock held on the first runtime starts there what starts the listening.
    let early = first
        .block_on(client.lock("early").unwrap().acquire())
        .unwrap();
    let kept = second
        .block_on(client.lock("kept").unwrap().acquire())
        .unwrap();
    drop(first);
    second.block_on(async {
        until_channels(&backend, 1).await;
        assert!(client.lock("kept").unwrap().force_unlock().await.unwrap());
        let loss = tokio::time::timeout(Duration::from_secs(10), kept.lost())
            .await
            .expect("the holder hears of its force-unlock");
        assert_eq!(loss, lock_core::LeaseLoss::Revoked);
    });
    drop(early);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_behind_the_holders_back_is_reported_lost() {
    let server = RedisServer::start();
    let backend = server.backend();
    let client = lock_core::LockClient::builder(backend)
        .namespace("lost")
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut raw = server.raw().await;
    let guard = client.lock("k").unwrap().acquire().await.unwrap();
    let _: i64 = raw.del("lost:k").await.unwrap();
    let loss = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("loss reported by the next renewal");
    assert_eq!(loss, lock_core::LeaseLoss::Revoked);
    assert!(!guard.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_quick_retryable_error() {
    let port = common::free_port();
    let config = RedisConfig::from_url(&format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .with_connect_timeout(Duration::from_millis(300))
        .with_request_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let err = RedisBackend::connect(config.clone()).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let client = client(RedisBackend::new(config).unwrap(), "down");
    let err = client.lock("k").unwrap().acquire().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let err = client.fair_lock("k").unwrap().acquire().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // A non-routable address: the connect timeout bounds it.
    let config = RedisConfig::from_url("redis://10.255.255.1:6379")
        .unwrap()
        .with_connect_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let err = RedisBackend::connect(config).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_recovers_after_the_server_restarts() {
    let mut server = RedisServer::start();
    let client = client(server.backend(), "restart");
    let lock = client.lock("k").unwrap();
    lock.try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    server.stop();
    let err = lock.try_acquire().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    server.restart();
    let started = Instant::now();
    let guard = loop {
        match lock.try_acquire().await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody holds it"),
            Err(err) => {
                assert!(err.is_retryable(), "{err}");
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "no reconnect: {err}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    guard.release().await.unwrap();
}

/// An acquire that times out on the client but runs on the server later (the server
/// was busy past the command timeout) is undone when its late grant arrives, instead of
/// holding the lock for its whole lease. `DEBUG SLEEP` keeps the server busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_timed_out_but_ran_later_is_undone() {
    let server = RedisServer::start();
    let client = client(server.backend(), "late");
    let other = common::client(server.backend(), "late");
    let long = AcquireOptions::try_once().lease(Duration::from_secs(600));
    let exclusive = client.lock("x").unwrap();
    let fair = client.fair_lock("x").unwrap();
    let locks: [(&str, &dyn DistributedLock); 2] = [("exclusive", &exclusive), ("fair", &fair)];
    for (kind, lock) in locks {
        // Connect first: a connection made during the sleep would time out instead.
        lock.try_acquire()
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap();
        let mut raw = server.raw().await;
        let busy_until = Instant::now() + Duration::from_millis(2_500);
        // The raw client gives up waiting for the reply; the server sleeps on.
        let sleep = tokio::spawn(async move {
            let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(2.5)
                .query_async(&mut raw)
                .await;
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let err = lock.acquire_with(long).await.unwrap_err();
        assert!(err.is_retryable(), "{kind}: {err}");
        sleep.await.unwrap();
        tokio::time::sleep_until(busy_until.into()).await;
        // The server has now run the acquire: the late grant must be given back.
        let free_again = Instant::now();
        loop {
            let probe = match kind {
                "exclusive" => other.lock("x").unwrap().try_acquire().await,
                _ => other.fair_lock("x").unwrap().try_acquire().await,
            };
            if let Some(guard) = probe.unwrap() {
                guard.release().await.unwrap();
                break;
            }
            assert!(
                free_again.elapsed() < Duration::from_secs(5),
                "{kind}: the timed-out acquire still holds the lock"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_serves_the_next_call_of_an_old_client() {
    let mut server = RedisServer::start();
    let client = client(server.backend(), "restart");
    let lock = client.lock("job").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    server.restart();
    // The old connection is dead; the first call after the restart must not fail on it.
    let guard = lock
        .try_acquire()
        .await
        .expect("the call after a restart reconnects")
        .expect("free");
    guard.release().await.unwrap();
    let fair = client.fair_lock("job").unwrap();
    server.restart();
    assert!(fair.is_locked().await.is_ok_and(|held| !held));
}

/// The same under replica acknowledgement, whose grants run on pooled connections of
/// their own (issue 29): after a restart every pooled connection is dead, and the
/// acquires after it must not fail one by one on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_serves_the_next_acknowledged_grant_of_an_old_client() {
    let mut server = RedisServer::start();
    let config = RedisConfig::from_url(&server.url())
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_request_timeout(Duration::from_millis(500))
        // No replica here: keep the grant whatever WAIT answers.
        .with_replica_acks(
            1,
            Duration::from_millis(10),
            lock_redis::TooFewReplicas::KeepAndWarn,
        );
    let client = client(RedisBackend::new(config).unwrap(), "ackrestart");
    // Several grants at once fill the pool with as many connections.
    let guards = futures::future::join_all((0..8).map(|i| {
        let lock = client.lock(&format!("k{i}")).unwrap();
        async move { lock.acquire().await.unwrap() }
    }))
    .await;
    for guard in guards {
        guard.release().await.unwrap();
    }
    server.restart();
    let mut failed = Vec::new();
    for i in 0..20 {
        match client.lock("after").unwrap().try_acquire().await {
            Ok(guard) => {
                guard.unwrap().release().await.unwrap();
                break;
            }
            Err(err) => failed.push(format!("#{i}: {err}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} acquires in a row failed after the restart: {failed:#?}",
        failed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_is_granted_when_it_runs_again() {
    let server = RedisServer::start();
    let proxy = common::reply_cut::ReplyCut::to(server.port()).await;
    let config = RedisConfig::from_url(&proxy.url())
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_request_timeout(Duration::from_millis(500));
    let client = client(RedisBackend::new(config).unwrap(), "cut");
    let mut raw = server.raw().await;
    for kind in [
        LockKind::Exclusive,
        LockKind::Fair,
        LockKind::Write,
        LockKind::Read,
        LockKind::Permit,
        LockKind::Leader,
    ] {
        let name = format!("{kind:?}");
        let is_locked = || async {
            match kind {
                LockKind::Exclusive => client.lock(&name).unwrap().is_locked().await,
                LockKind::Fair => client.fair_lock(&name).unwrap().is_locked().await,
                LockKind::Leader => client
                    .election(&name)
                    .unwrap()
                    .leader()
                    .await
                    .map(|leader| leader.is_some()),
                LockKind::Permit => client
                    .semaphore(&name, 1)
                    .unwrap()
                    .available()
                    .await
                    .map(|free| free == 0),
                _ => client.rw_lock(&name).unwrap().is_locked().await,
            }
            .unwrap()
        };
        let try_acquire = || async {
            match kind {
                LockKind::Exclusive => client.lock(&name).unwrap().try_acquire().await,
                LockKind::Fair => client.fair_lock(&name).unwrap().try_acquire().await,
                LockKind::Write => client.rw_lock(&name).unwrap().try_write().await,
                LockKind::Read => client.rw_lock(&name).unwrap().try_read().await,
                LockKind::Permit => client.semaphore(&name, 1).unwrap().try_acquire().await,
                LockKind::Leader => client
                    .election(&name)
                    .unwrap()
                    .try_campaign("v")
                    .await
                    .map(|leadership| leadership.map(|l| l.into_guard())),
            }
            .unwrap_or_else(|err| panic!("{kind:?}: {err}"))
        };
        // Once through, so the server has the script: the reply lost below is then the
        // script's own, not a NOSCRIPT before it ran.
        try_acquire().await.unwrap().release().await.unwrap();
        assert!(!is_locked().await, "{kind:?} free");
        // The acquire runs on the server, its reply is lost with the connection, and
        // the call runs again on a new one: it must get the grant, not wait on it.
        proxy.lose_next_reply();
        let guard = try_acquire()
            .await
            .unwrap_or_else(|| panic!("{kind:?}: its own lost grant blocked it"));
        assert!(proxy.has_cut(), "{kind:?}: the reply was lost");
        guard.release().await.unwrap();
        assert!(
            !is_locked().await,
            "{kind:?}: nothing held after the release"
        );
        let left: Vec<String> = keys(&mut raw)
            .await
            .into_iter()
            .filter(|k| !k.ends_with(":fence") && !k.contains("}:released:"))
            .collect();
        assert!(left.is_empty(), "{kind:?}: left behind {left:?}");
    }
}

/// A write request from an owner that has a live read entry must leave the entry alone
/// and wait like any other writer while it lives (issue 26, item 3). Sent to the
/// backend directly: lock-core refuses such an upgrade itself, and the backend must not
/// depend on it (a downgrade's read entry carries the write's owner token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_request_never_drops_a_live_read_entry_of_its_own_owner() {
    let server = RedisServer::start();
    let direct = common::Direct::new(server.backend()).await;
    let mut raw = server.raw().await;
    let key = common::lock_key("own-read", "doc");
    let readers_key = "{own-read:doc}:rw:read";
    let owner = OwnerToken::from_string("client-a:1".to_owned());
    let other = OwnerToken::from_string("client-b:1".to_owned());

    let read = direct
        .acquire(&key, LockKind::Read, &owner, LONG, None)
        .await
        .unwrap()
        .expect("the read side is free");
    let before: Vec<String> = raw.hkeys(readers_key).await.unwrap();
    let write = direct
        .acquire(&key, LockKind::Write, &owner, LONG, None)
        .await
        .unwrap();
    let after: Vec<String> = raw.hkeys(readers_key).await.unwrap();
    println!(
        "read entries before the owner's write request: {before:?}; after it: {after:?}; \
         the write was granted with fence {:?}",
        write.as_ref().map(|g| g.fence)
    );
    assert!(
        write.is_none(),
        "the write was granted while the owner's own read entry was live"
    );
    assert_eq!(after, before, "the live read entry was dropped");
    // It waits like any writer: not granted within a wait while the read lives...
    let waited = direct
        .acquire(
            &key,
            LockKind::Write,
            &owner,
            LONG,
            Some(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert!(waited.is_none(), "granted while the read entry lives");
    assert!(direct
        .acquire(&key, LockKind::Write, &other, LONG, None)
        .await
        .unwrap()
        .is_none());
    // ...and granted once the read is released.
    direct
        .release(&key, LockKind::Read, &owner, read)
        .await
        .expect("the read entry is still there to release");
    let write = direct
        .acquire(&key, LockKind::Write, &owner, LONG, None)
        .await
        .unwrap()
        .expect("free once the read is released");
    direct
        .release(&key, LockKind::Write, &owner, write)
        .await
        .unwrap();
}

/// What holds lock `name` of `kind` in namespace `ns`: the string key's value, or the
/// reader entries.
async fn stored(
    raw: &mut redis::aio::MultiplexedConnection,
    ns: &str,
    name: &str,
    kind: LockKind,
) -> Vec<String> {
    let key = match kind {
        LockKind::Exclusive => format!("{ns}:{name}"),
        LockKind::Fair => format!("{{{ns}:{name}}}:fair"),
        LockKind::Write => format!("{{{ns}:{name}}}:rw:write"),
        LockKind::Read => return raw.hkeys(format!("{{{ns}:{name}}}:rw:read")).await.unwrap(),
        LockKind::Permit => {
            let fields: Vec<String> = raw
                .hkeys(format!("{{{ns}:{name}}}:sem:holders"))
                .await
                .unwrap();
            return fields.into_iter().filter(|f| f != "#permits").collect();
        }
        LockKind::Leader => format!("{{{ns}:{name}}}:elect"),
    };
    let value: Option<String> = raw.get(key).await.unwrap();
    value.into_iter().collect()
}

/// Issue 26, item 2. A request abandoned at the call timeout still runs on the server
/// and undoes whatever it is granted there. If another request of the same owner was
/// granted meanwhile (a retry after the timeout, a ride-out under Sentinel or Cluster),
/// the late one must not take that grant over: its undo would then delete a live
/// grant. The server is kept busy (`DEBUG SLEEP`) so each late request runs after the
/// other request's grant, as when it reaches the server second (a reconnect, a
/// `NOSCRIPT` reload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_request_never_takes_over_a_live_grant_of_its_owner() {
    let server = RedisServer::start();
    let backend = server.backend();
    let direct = common::Direct::new(backend.clone()).await;
    let mut raw = server.raw().await;
    let owner = OwnerToken::from_string("client-a:1".to_owned());
    let other = OwnerToken::from_string("client-b:1".to_owned());
    let ns = "abandoned";
    let kinds = [
        LockKind::Exclusive,
        LockKind::Fair,
        LockKind::Write,
        LockKind::Read,
        LockKind::Permit,
        LockKind::Leader,
    ];
    let mut live = Vec::new();
    for kind in kinds {
        let name = format!("{kind:?}");
        let key = common::lock_key(ns, &name);
        let grant = direct
            .acquire(&key, kind, &owner, LONG, None)
            .await
            .unwrap()
            .expect("free");
        let before = stored(&mut raw, ns, &name, kind).await;
        live.push((kind, name, key, grant, before));
    }

    let busy = server.busy_for(4.0).await;
    let late = futures::future::join_all(
        live.iter()
            .map(|(kind, _, key, _, _)| direct.acquire(key, *kind, &owner, LONG, None)),
    )
    .await;
    for ((kind, ..), late) in live.iter().zip(late) {
        match late {
            // Abandoned at the call timeout (1 s), long before the server wakes.
            Err(err) => assert!(err.is_retryable(), "{kind:?}: {err}"),
            // Only if this machine was too slow to time it out before the server woke.
            Ok(None) => println!("{kind:?}: the late request was answered: blocked"),
            Ok(Some(grant)) => panic!(
                "{kind:?}: granted again (fence {}) while the live grant holds",
                grant.fence
            ),
        }
    }
    busy.await.unwrap();
    // The late requests have run by now; whatever they were granted is given back.
    backend.settle().await;

    let mut taken = Vec::new();
    for (kind, name, _, _, before) in &live {
        let after = stored(&mut raw, ns, name, *kind).await;
        println!("{kind:?}: the live grant stored {before:?}; after the late request: {after:?}");
        if &after != before {
            taken.push(*kind);
        }
    }
    assert!(
        taken.is_empty(),
        "the late request took over (and its undo removed) the live grant of {taken:?}"
    );
    for (kind, _, key, grant, _) in live {
        let conflicting = if kind == LockKind::Read {
            LockKind::Write
        } else {
            kind
        };
        assert!(
            direct
                .acquire(&key, conflicting, &other, LONG, None)
                .await
                .unwrap()
                .is_none(),
            "{kind:?}: another owner got in"
        );
        direct
            .release(&key, kind, &owner, grant)
            .await
            .unwrap_or_else(|err| panic!("{kind:?}: {err}"));
    }
}

/// A client with a short waiter lease that queues and gives up must not cut the
/// queue's expiry below the waiter lease of a client that still waits: that waiter
/// would lose its place (until its next refresh) and a later arrival overtake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_waiter_lease_never_shortens_another_waiters_place() {
    let server = RedisServer::start();
    for semaphore in [false, true] {
        let ns = format!("waiter-leases-{semaphore}");
        let with_lease = |lease: Duration| {
            let backend = RedisBackend::new(server.config().with_waiter_lease(lease)).unwrap();
            client(backend, &ns)
        };
        let long = Duration::from_secs(30);
        let (holder, first, short, late) = (
            with_lease(long),
            with_lease(long),
            with_lease(Duration::from_millis(900)),
            with_lease(long),
        );
        let acquire = move |client: LockClient<RedisBackend>, options: AcquireOptions| async move {
            if semaphore {
                client.semaphore("queue", 1)?.acquire_with(options).await
            } else {
                client.fair_lock("queue")?.acquire_with(options).await
            }
        };
        let held = acquire(holder, AcquireOptions::try_once()).await.unwrap();
        let first = tokio::spawn(acquire(first, AcquireOptions::wait_for(long)));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let gave_up = acquire(short, AcquireOptions::wait_for(Duration::from_millis(300))).await;
        assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
        // Past the short waiter lease from the short client's last refresh.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let late = tokio::spawn(acquire(late, AcquireOptions::wait_for(long)));
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(5), first)
            .await
            .unwrap_or_else(|_| {
                panic!("semaphore {semaphore}: the first waiter lost its place to a later one")
            })
            .unwrap()
            .unwrap();
        assert!(
            !late.is_finished(),
            "semaphore {semaphore}: the later waiter went first"
        );
        granted.release().await.unwrap();
        late.await.unwrap().unwrap().release().await.unwrap();
    }
}

/// Redis refuses a script's first write that may grow memory (SET, HSET, ZADD) once
/// past `maxmemory` under `noeviction`, the usual policy for a lock store; a DEL,
/// HDEL or PEXPIRE goes through, and so do the writes after it. Releases and renewals
/// free or keep memory, so they must work there: every kind is released (the next
/// try, once memory is back, finds it free) and watchdog leases stay renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_and_renewals_work_when_the_server_is_out_of_memory() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.backend())
        .namespace("oom")
        .watchdog_lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let fixed = AcquireOptions::try_once().lease(Duration::from_secs(60));
    let watched = AcquireOptions::try_once();
    let exclusive = client.lock("x").unwrap().acquire_with(fixed).await.unwrap();
    let fair = client
        .fair_lock("f")
        .unwrap()
        .acquire_with(fixed)
        .await
        .unwrap();
    let write = client
        .rw_lock("w")
        .unwrap()
        .write_with(fixed)
        .await
        .unwrap();
    let read = client.rw_lock("r").unwrap().read_with(fixed).await.unwrap();
    let permit = client
        .semaphore("s", 2)
        .unwrap()
        .acquire_with(fixed)
        .await
        .unwrap();
    let leader = client
        .election("e")
        .unwrap()
        .campaign_with("a", fixed)
        .await
        .unwrap();
    // Renewed together, the reader's entry first.
    let watched_read = client
        .rw_lock("wr")
        .unwrap()
        .read_with(watched)
        .await
        .unwrap();
    let watched_lock = client
        .lock("wx")
        .unwrap()
        .acquire_with(watched)
        .await
        .unwrap();

    let mut raw = server.raw().await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut raw)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("used_memory in INFO");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .arg("maxmemory")
        .arg(used + 1_000_000)
        .query_async(&mut raw)
        .await
        .unwrap();
    let filler = "x".repeat(10_000);
    let mut full = false;
    for i in 0..1_000 {
        let set: redis::RedisResult<()> = raw.set(format!("fill:{i}"), &filler).await;
        if let Err(err) = set {
            assert!(err.to_string().contains("OOM"), "{err}");
            full = true;
            break;
        }
    }
    assert!(full, "the server never ran out of memory");

    // Three renewals of the watchdog leases come due meanwhile.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(watched_read.is_held(), "a reader's renewal was refused");
    assert!(watched_lock.is_held(), "a renewal batch was refused");
    for (what, released) in [
        ("exclusive", exclusive.release().await),
        ("fair", fair.release().await),
        ("write", write.release().await),
        ("read", read.release().await),
        ("permit", permit.release().await),
        ("leadership", leader.resign().await),
        ("watched read", watched_read.release().await),
        ("watched exclusive", watched_lock.release().await),
    ] {
        assert!(released.is_ok(), "{what} release refused: {released:?}");
    }

    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    let other = common::client(server.backend(), "oom");
    let now = AcquireOptions::try_once();
    let free = [
        other.lock("x").unwrap().acquire_with(now).await.is_ok(),
        other
            .fair_lock("f")
            .unwrap()
            .acquire_with(now)
            .await
            .is_ok(),
        other.rw_lock("w").unwrap().write_with(now).await.is_ok(),
        other.rw_lock("r").unwrap().write_with(now).await.is_ok(),
        other
            .semaphore("s", 1)
            .unwrap()
            .acquire_with(now)
            .await
            .is_ok(),
        other
            .election("e")
            .unwrap()
            .campaign_with("b", now)
            .await
            .is_ok(),
        other.rw_lock("wr").unwrap().write_with(now).await.is_ok(),
        other.lock("wx").unwrap().acquire_with(now).await.is_ok(),
    ];
    assert_eq!(free, [true; 8], "locks still held after their release");
}
