//! RedLock over five real redis-servers.

mod common;

use std::time::{Duration, Instant};

use common::{keys, lock_key, scripts_run, Direct, RedisServer};
use lock_core::backend::{LockBackend, OwnerToken};
use lock_core::{prelude::*, AcquireOptions, Error, LockClient, LockKind};
use lock_redis::RedLockBackend;
use redis::AsyncCommands;

fn cluster(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn client(servers: &[RedisServer], namespace: &str) -> LockClient<RedLockBackend> {
    let backend = RedLockBackend::new(servers.iter().map(RedisServer::config)).unwrap();
    LockClient::builder(backend)
        .namespace(namespace)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_grants_excludes_and_hands_over() {
    let servers = cluster(5);
    let a = client(&servers, "rl");
    let b = client(&servers, "rl");
    assert_eq!(a.backend().quorum(), 3);
    let guard = a
        .lock("k")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    for server in &servers {
        let mut raw = server.raw().await;
        let exists: bool = raw.exists("rl:k").await.unwrap();
        assert!(exists, "held on every master");
    }
    let other = b.lock("k").unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    assert!(other.is_locked().await.unwrap());
    let fence = guard.fencing_token();
    let waiter = tokio::spawn(async move {
        let g = other
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(10)))
            .await;
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (at, g) = waiter.await.unwrap();
    let g = g.unwrap();
    assert!(
        at - released_at < Duration::from_millis(500),
        "woken by the release message"
    );
    assert!(g.fencing_token() > fence);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_keeps_working_with_two_of_five_masters_down() {
    let mut servers = cluster(5);
    servers[0].stop();
    servers[3].stop();
    let a = client(&servers, "minority");
    let b = client(&servers, "minority");
    let guard = a.lock("k").unwrap().acquire().await.unwrap();
    assert!(b.lock("k").unwrap().try_acquire().await.unwrap().is_none());
    let fence = guard.fencing_token();
    guard.release().await.unwrap();
    let again = b
        .lock("k")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("free");
    assert!(again.fencing_token() > fence);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fails_cleanly_with_three_of_five_masters_down() {
    let mut servers = cluster(5);
    for i in [1, 2, 4] {
        servers[i].stop();
    }
    let a = client(&servers, "majority-down");
    let started = Instant::now();
    let err = a.lock("k").unwrap().try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("majority"), "{err}");
    let err = a
        .lock("k")
        .unwrap()
        .acquire_with(AcquireOptions::wait_for(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    for i in [0, 3] {
        let mut raw = servers[i].raw().await;
        let left = keys(&mut raw).await;
        assert!(
            left.iter().all(|k| k.ends_with(":fence")),
            "only the fencing counter stays: {left:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fences_increase_even_when_counters_disagree() {
    let mut servers = cluster(5);
    // One master's counter is far ahead (say it took part in grants the others missed;
    // counters never start below the clock in microseconds, so "far ahead" is ahead of
    // that: year 2128).
    const AHEAD: u64 = 5_000_000_000_000_000;
    let mut raw = servers[0].raw().await;
    let _: () = raw.set("{fence:k}:fence", AHEAD).await.unwrap();
    let c = client(&servers, "fence");
    let first = c.lock("k").unwrap().try_acquire().await.unwrap().unwrap();
    assert_eq!(first.fencing_token(), AHEAD + 1);
    first.release().await.unwrap();
    // Raising a counter keeps its expiry (a week after the grant, as every counter).
    for server in &servers {
        let ttl: i64 = server.raw().await.pttl("{fence:k}:fence").await.unwrap();
        assert!(
            ttl > 0,
            "a counter without expiry after the settle: PTTL {ttl}"
        );
    }
    // Without the master that had the high counter, the next grant must still be
    // larger: the grant raised the others of its majority to it.
    servers[0].stop();
    let second = c.lock("k").unwrap().try_acquire().await.unwrap().unwrap();
    assert!(
        second.fencing_token() > AHEAD + 1,
        "{}",
        second.fencing_token()
    );
    second.release().await.unwrap();
}

/// The guard counts what RedLock guarantees, `lease - drift` (1 % + 2 ms) from the
/// round's start, not the whole lease: with a 5 s lease it reports the loss no later
/// than 4,948 ms after the acquire returned (the whole lease would be 5 s less the
/// round, a few ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_guards_count_the_validity_not_the_whole_lease() {
    let servers = cluster(3);
    let client = client(&servers, "validity");
    let lock = client.lock("v").unwrap();
    let fixed = AcquireOptions::try_once().lease(Duration::from_secs(5));
    let guard = lock.acquire_with(fixed).await.unwrap();
    let acquired = Instant::now();
    guard.lost().await;
    let held = acquired.elapsed();
    assert!(
        held <= Duration::from_millis(4_948),
        "the guard reported held for {held:?}, past the validity"
    );
    assert!(held >= Duration::from_millis(4_500), "{held:?}");
}

/// Two of five masters hang (frozen: connections open, nothing answers), as behind a
/// partition that drops packets. A majority still answers at once, so grants and
/// renewals must not wait on the silent two: a round that waited for them would use
/// up a short lease before it could count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hung_masters_stall_neither_grants_nor_renewals() {
    let servers = cluster(5);
    let lease = Duration::from_millis(1500);
    let backend = RedLockBackend::new(servers.iter().map(RedisServer::config)).unwrap();
    let client = LockClient::builder(backend)
        .namespace("hung")
        .watchdog_lease(lease)
        .build()
        .unwrap();
    let lock = client.lock("k").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    servers[3].pause();
    servers[4].pause();
    let started = Instant::now();
    let guard = lock
        .acquire_with(AcquireOptions::wait_for(Duration::from_secs(5)))
        .await
        .expect("a majority answers");
    assert!(
        started.elapsed() < lease / 2,
        "the grant waited {:?} on silent masters",
        started.elapsed()
    );
    // Several renewals later it is still held.
    tokio::time::sleep(lease * 3).await;
    assert!(guard.is_held(), "renewals waited on the silent masters");
    // A waiter subscribes and is handed the lock; neither waits on the silent two.
    let waiter = client.lock("k").unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .acquire_with(AcquireOptions::wait_for(Duration::from_secs(10)))
            .await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fence = guard.fencing_token();
    let releasing = Instant::now();
    guard.release().await.unwrap();
    assert!(
        releasing.elapsed() < lease / 2,
        "the release waited {:?} on silent masters",
        releasing.elapsed()
    );
    let (granted_at, again) = waiting.await.unwrap();
    let again = again.expect("the waiter gets the lock");
    assert!(
        granted_at - releasing < lease / 2,
        "handed over after {:?}",
        granted_at - releasing
    );
    assert!(again.fencing_token() > fence);
    again.release().await.unwrap();
    servers[3].resume();
    servers[4].resume();
}

/// Issue 26, item 2, on RedLock: a round abandoned at the masters' call timeout runs on
/// them later and gives back whatever it is granted. If another round of the same
/// owner holds the lock by then, the late round must not take its keys over (and then
/// delete them). Every master is kept busy (`DEBUG SLEEP`) so the late round runs after
/// the live grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_redlock_round_never_takes_over_a_live_grant_of_its_owner() {
    let servers = cluster(3);
    let backend = RedLockBackend::new(servers.iter().map(RedisServer::config)).unwrap();
    let direct = Direct::new(backend.clone()).await;
    let owner = OwnerToken::from_string("client-a:1".to_owned());
    let other = OwnerToken::from_string("client-b:1".to_owned());
    let key = lock_key("rl-abandoned", "k");
    let lease = Duration::from_secs(60);
    let mut raws = Vec::new();
    for server in &servers {
        raws.push(server.raw().await);
    }
    let values = |raws: &mut Vec<redis::aio::MultiplexedConnection>| {
        let mut raws = raws.clone();
        async move {
            let mut values = Vec::new();
            for raw in &mut raws {
                let value: Option<String> = raw.get("rl-abandoned:k").await.unwrap();
                values.push(value);
            }
            values
        }
    };

    let grant = direct
        .acquire(&key, LockKind::Exclusive, &owner, lease, None)
        .await
        .unwrap()
        .expect("free");
    let before = values(&mut raws).await;

    let mut busy = Vec::new();
    for server in &servers {
        busy.push(server.busy_for(4.0).await);
    }
    let late = direct
        .acquire(&key, LockKind::Exclusive, &owner, lease, None)
        .await;
    match late {
        // Abandoned at the masters' call timeout (1 s), long before they wake.
        Err(err) => assert!(err.is_retryable(), "{err}"),
        // Only if this machine was too slow to time it out before they woke.
        Ok(None) => println!("the late round was answered: blocked"),
        Ok(Some(grant)) => panic!(
            "granted again (fence {}) while the live grant holds",
            grant.fence
        ),
    }
    for task in busy {
        task.await.unwrap();
    }
    backend.settle().await;

    let after = values(&mut raws).await;
    println!("the live grant stored {before:?}; after the late round: {after:?}");
    assert_eq!(
        after, before,
        "the late round took over (and its undo removed) the live grant"
    );
    assert!(direct
        .acquire(&key, LockKind::Exclusive, &other, lease, None)
        .await
        .unwrap()
        .is_none());
    direct
        .release(&key, LockKind::Exclusive, &owner, grant)
        .await
        .unwrap();
}

/// Tokens strictly increase across RedLock grants, and a guard's token is the one the
/// masters of its majority store (the lease value and at least the counter): with
/// fencing floors finer than a second the masters' counters disagree on almost every
/// grant, and the round's second step settles them on the maximum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_tokens_increase_and_the_majority_stores_the_guards_token() {
    let servers = cluster(5);
    let c = client(&servers, "settle");
    let quorum = c.backend().quorum();
    let mut raws = Vec::new();
    for server in &servers {
        raws.push(server.raw().await);
    }
    let mut last = 0;
    for _ in 0..10 {
        let guard = c.lock("k").unwrap().try_acquire().await.unwrap();
        let guard = guard.expect("free");
        let token = guard.fencing_token();
        assert!(token > last, "token {token} after {last}");
        let mut stored = Vec::new();
        for raw in &mut raws {
            let value: Option<String> = raw.get("settle:k").await.unwrap();
            let counter: Option<u64> = raw.get("{settle:k}:fence").await.unwrap();
            stored.push((value, counter));
        }
        let holding = stored
            .iter()
            .filter(|(value, counter)| {
                value
                    .as_deref()
                    .is_some_and(|v| v.ends_with(&format!(":{token}")))
                    && counter.is_some_and(|c| c >= token)
            })
            .count();
        assert!(
            holding >= quorum
                && stored.iter().all(|(value, _)| value
                    .as_deref()
                    .is_none_or(|v| v.ends_with(&format!(":{token}")))),
            "the guard's token {token} is not what the masters store: {stored:?}"
        );
        guard.release().await.unwrap();
        last = token;
    }
    println!("ten RedLock grants, each stored with its token on every master that holds it; last token {last}");
}

/// Issue 26, item 9: a lock lost on a majority of the masters (expired, deleted or
/// taken there) is no longer held, even if a minority still had it: the release must
/// say so (lock-core reports the lease lost), and still free the minority's copies. A
/// lock that a minority lost is released as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_release_with_the_majority_lost_reports_the_lease_lost() {
    let servers = cluster(5);
    let c = client(&servers, "release");
    let fixed = AcquireOptions::try_once().lease(Duration::from_secs(60));
    for lost_on in [2, 3] {
        let name = format!("lost-on-{lost_on}");
        let key = format!("release:{name}");
        let guard = c.lock(&name).unwrap().acquire_with(fixed).await.unwrap();
        for server in &servers[..lost_on] {
            let deleted: usize = server.raw().await.del(&key).await.unwrap();
            assert_eq!(deleted, 1);
        }
        let released = guard.release().await;
        println!("release with the key deleted on {lost_on} of 5 masters: {released:?}");
        if lost_on < c.backend().quorum() {
            released.expect("a majority still held it");
        } else {
            assert!(
                matches!(released, Err(Error::LeaseLost { .. })),
                "released a lock a majority had lost: {released:?}"
            );
        }
        for server in &servers {
            let exists: bool = server.raw().await.exists(&key).await.unwrap();
            assert!(!exists, "a copy was left behind");
        }
    }
}

/// Script calls a server has run since it started.
async fn script_calls(server: &RedisServer) -> u64 {
    scripts_run(&mut server.raw().await).await
}

/// One lease lost on a majority must not make the renewal of the others wait for
/// masters that do not answer (issue 29): the renewal is decided once every lease is
/// renewed on a majority or can no longer be. Here two of five masters are frozen
/// (their calls wait the default 4 s call timeout) and one of two leases is deleted
/// on the other three; the other lease, with a 2 s watchdog lease, must stay held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lost_lease_does_not_hold_back_the_renewal_of_the_others() {
    let servers = cluster(5);
    let backend = RedLockBackend::new(
        servers
            .iter()
            .map(|server| lock_redis::RedisConfig::from_url(&server.url()).unwrap()),
    )
    .unwrap();
    let client = LockClient::builder(backend)
        .namespace("renew-lost")
        .watchdog_lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let kept = client.lock("kept").unwrap().acquire().await.unwrap();
    let doomed = client.lock("doomed").unwrap().acquire().await.unwrap();
    for server in &servers[..3] {
        let mut raw = server.raw().await;
        let _: i64 = raw.del("renew-lost:doomed").await.unwrap();
    }
    servers[3].pause();
    servers[4].pause();
    let lost = tokio::time::timeout(Duration::from_secs(6), doomed.lost()).await;
    // Several more ticks.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept_held = kept.is_held();
    servers[3].resume();
    servers[4].resume();
    assert!(lost.is_ok(), "the deleted lease is reported lost");
    assert!(
        kept_held,
        "the lease held on a majority was reported lost ({:?}): its renewal waited for \
         the frozen masters",
        kept.lost().await
    );
    kept.release().await.unwrap();
}

/// With most masters down, an acquire without a wait limit rides the outage out for
/// the failover grace, with rounds spaced by a growing pause, and then fails with the
/// error (issue 29): rounds every 10-50 ms for ever would hide it from the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_most_masters_down_a_wait_without_limit_backs_off_and_ends_in_the_error() {
    let mut servers = cluster(5);
    let grace = Duration::from_secs(3);
    let backend = RedLockBackend::new(servers.iter().map(|server| {
        lock_redis::RedisConfig::from_url(&server.url())
            .unwrap()
            .with_connect_timeout(Duration::from_millis(500))
            .with_request_timeout(Duration::from_millis(500))
            .with_failover_grace(grace)
    }))
    .unwrap();
    let client = LockClient::builder(backend)
        .namespace("most-down")
        .build()
        .unwrap();
    // Once through, so the scripts are loaded and the counts below are rounds.
    let lock = client.lock("k").unwrap();
    lock.try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    for i in [1, 2, 4] {
        servers[i].stop();
    }
    let before = script_calls(&servers[0]).await;
    let started = Instant::now();
    let result = tokio::time::timeout(
        grace + Duration::from_secs(10),
        lock.acquire_with(AcquireOptions::wait_forever()),
    )
    .await;
    let took = started.elapsed();
    let rounds = script_calls(&servers[0]).await - before;
    println!("with 3 of 5 masters down: {rounds} rounds in {took:?}; {result:?}");
    let err = match result {
        Ok(Err(err)) => err,
        Ok(Ok(_)) => panic!("granted without a majority"),
        Err(_) => {
            panic!("still retrying {took:?} later ({rounds} rounds), the error never returned")
        }
    };
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(rounds <= 30, "{rounds} rounds in {took:?}: no backoff");
}
