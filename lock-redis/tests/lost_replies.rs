//! Calls that ran on the server but whose replies were lost with their connection (a
//! proxy in front of the server drops the reply and closes the connection): a release
//! run again must report what the first run did, and a grant nobody heard of must not
//! hold the lock for its whole lease.

mod common;

use std::time::{Duration, Instant};

use common::reply_cut::ReplyCut;
use common::{client, keys, RedisServer};
use lock_core::{prelude::*, AcquireOptions, Error, LockClient, LockGuard, LockKind};
use lock_redis::{RedisBackend, RedisConfig, TooFewReplicas};

const KINDS: [LockKind; 5] = [
    LockKind::Exclusive,
    LockKind::Fair,
    LockKind::Write,
    LockKind::Read,
    LockKind::Permit,
];

fn proxied(proxy: &ReplyCut) -> RedisConfig {
    RedisConfig::from_url(&proxy.url())
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_request_timeout(Duration::from_millis(500))
}

async fn try_acquire(
    client: &LockClient<RedisBackend>,
    kind: LockKind,
    name: &str,
    options: AcquireOptions,
) -> lock_core::Result<LockGuard> {
    match kind {
        LockKind::Exclusive => client.lock(name).unwrap().acquire_with(options).await,
        LockKind::Fair => client.fair_lock(name).unwrap().acquire_with(options).await,
        LockKind::Write => client.rw_lock(name).unwrap().write_with(options).await,
        LockKind::Read => client.rw_lock(name).unwrap().read_with(options).await,
        LockKind::Permit => {
            let semaphore = client.semaphore(name, 1).unwrap();
            semaphore.acquire_with(options).await
        }
        LockKind::Leader => {
            let election = client.election(name).unwrap();
            Ok(election.campaign_with("", options).await?.into_guard())
        }
    }
}

async fn is_locked(client: &LockClient<RedisBackend>, kind: LockKind, name: &str) -> bool {
    match kind {
        LockKind::Exclusive => client.lock(name).unwrap().is_locked().await,
        LockKind::Fair => client.fair_lock(name).unwrap().is_locked().await,
        LockKind::Permit => client
            .semaphore(name, 1)
            .unwrap()
            .available()
            .await
            .map(|free| free == 0),
        _ => client.rw_lock(name).unwrap().is_locked().await,
    }
    .unwrap()
}

/// Deletes every key of `namespace` but its fencing counters, behind the holders' backs.
async fn delete_leases(raw: &mut redis::aio::MultiplexedConnection, namespace: &str) {
    for key in keys(raw).await {
        if key.contains(namespace) && !key.ends_with(":fence") {
            let _: i64 = redis::cmd("DEL").arg(&key).query_async(raw).await.unwrap();
        }
    }
}

/// A release that ran on the server but whose reply was lost with the connection is
/// run again on a new one (issue 29). The lease was released by this very request, so
/// the release succeeded: reporting the lease lost would be wrong. A lease that was
/// really gone before the release is still reported lost, reply lost or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_succeeds_when_it_runs_again() {
    let server = RedisServer::start();
    let proxy = ReplyCut::to(server.port()).await;
    let client = client(RedisBackend::new(proxied(&proxy)).unwrap(), "relcut");
    let mut raw = server.raw().await;
    let options = AcquireOptions::try_once().lease(Duration::from_secs(60));
    let mut wrong = Vec::new();
    for kind in KINDS {
        let name = format!("{kind:?}");
        // Once through, so the server has every script before a reply is lost.
        let guard = try_acquire(&client, kind, &name, options).await.unwrap();
        guard.release().await.unwrap();

        let guard = try_acquire(&client, kind, &name, options).await.unwrap();
        proxy.lose_next_reply();
        let released = guard.release().await;
        assert!(proxy.has_cut(), "{kind:?}: the release's reply was lost");
        if released.is_err() {
            wrong.push(format!(
                "{kind:?}: a release that ran is reported as {released:?}"
            ));
        }
        assert!(!is_locked(&client, kind, &name).await, "{kind:?}: released");

        // A lease lost before its release is reported lost, also when the release's
        // reply is lost and it runs again.
        let guard = try_acquire(&client, kind, &name, options).await.unwrap();
        delete_leases(&mut raw, "relcut").await;
        proxy.lose_next_reply();
        let released = guard.release().await;
        assert!(proxy.has_cut(), "{kind:?}: the release's reply was lost");
        assert!(
            matches!(released, Err(Error::LeaseLost { .. })),
            "{kind:?}: a lease deleted before its release is reported as {released:?}"
        );
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Waits until `probe` can take the lock of `kind` (taking and releasing it; the write
/// side for a read lock), for at most `within`; returns how long that took, or None.
async fn free_within(
    probe: &LockClient<RedisBackend>,
    kind: LockKind,
    name: &str,
    within: Duration,
) -> Option<Duration> {
    let kind = match kind {
        LockKind::Read => LockKind::Write,
        other => other,
    };
    let started = Instant::now();
    loop {
        if let Ok(guard) = try_acquire(probe, kind, name, AcquireOptions::try_once()).await {
            guard.release().await.unwrap();
            return Some(started.elapsed());
        }
        if started.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An acquire that ran on the server, whose reply was lost to a connection error and
/// whose second run failed too (the network stayed down a moment), fails; the grant it
/// may have brought must then be given back like one that arrives after a timeout,
/// not block everyone for its ten-minute lease (issue 29). Also with replica
/// acknowledgement, whose grants run on a connection of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_was_lost_and_whose_retry_failed_is_undone() {
    let server = RedisServer::start();
    let proxy = ReplyCut::to(server.port()).await;
    let plain = client(RedisBackend::new(proxied(&proxy)).unwrap(), "acqcut");
    let acked_config = RedisConfig::from_url(&proxy.url())
        .unwrap()
        .with_connect_timeout(Duration::from_millis(500))
        .with_request_timeout(Duration::from_millis(500))
        .with_replica_acks(1, Duration::from_millis(10), TooFewReplicas::KeepAndWarn);
    let acked = client(RedisBackend::new(acked_config).unwrap(), "acqcut");
    let probe = client(server.backend(), "acqcut");
    let long = AcquireOptions::try_once().lease(Duration::from_secs(600));
    let cases = KINDS
        .iter()
        .map(|kind| (&plain, *kind, format!("{kind:?}")))
        .chain([(&acked, LockKind::Exclusive, "acked".to_owned())]);
    let mut held = Vec::new();
    for (client, kind, name) in cases {
        // Once through, so the server has every script and the connections exist.
        let guard = try_acquire(client, kind, &name, long).await.unwrap();
        guard.release().await.unwrap();

        proxy.lose_next_reply_then_refuse_for(Duration::from_millis(1_500));
        let result = try_acquire(client, kind, &name, long).await;
        assert!(proxy.has_cut(), "{name}: the acquire's reply was lost");
        let err = result.expect_err("the second run cannot get through");
        assert!(err.is_retryable(), "{name}: {err}");
        proxy.outage_over().await;
        // The grant ran on the server; once the network is back, it must be undone.
        match free_within(&probe, kind, &name, Duration::from_secs(8)).await {
            Some(after) => println!("{name}: free again after {after:?}"),
            None => held.push(format!(
                "{name}: the grant whose reply was lost still holds the lock 8 s later"
            )),
        }
    }
    assert!(held.is_empty(), "{held:#?}");
    // Nothing else of the locks stays behind.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut raw = server.raw().await;
    let left: Vec<String> = keys(&mut raw)
        .await
        .into_iter()
        .filter(|k| !k.ends_with(":fence") && !k.contains(":released:"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
