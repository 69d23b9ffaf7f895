//! Calls that ran on the server but whose replies were lost with their connection (a
//! proxy in front of the server drops the reply and closes the connection): a release
//! run again must report what the first run did, and a grant nobody heard of must not
//! hold the lock for its whole lease.

mod common;

use std::time::Duration;

use common::reply_cut::ReplyCut;
use common::{client, keys, RedisServer};
use lock_core::{prelude::*, AcquireOptions, Error, LockClient, LockGuard, LockKind};
use lock_redis::{RedisBackend, RedisConfig};

const KINDS: [LockKind; 4] = [
    LockKind::Exclusive,
    LockKind::Fair,
    LockKind::Write,
    LockKind::Read,
];

fn proxied(proxy: &ReplyCut) -> RedisConfig {
    RedisConfig::builder(&proxy.url())
        .connect_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
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
    }
}

async fn is_locked(client: &LockClient<RedisBackend>, kind: LockKind, name: &str) -> bool {
    match kind {
        LockKind::Exclusive => client.lock(name).unwrap().is_locked().await,
        LockKind::Fair => client.fair_lock(name).unwrap().is_locked().await,
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
