//! Fencing tokens across a failover that lost the counter: Sentinel promotes a replica
//! that never received the latest increments, while the old primary, cut off but not
//! yet told, keeps granting. Tokens from both must follow the order of the grants (to
//! within the servers' clock skew), or a store that keeps the highest token accepts a
//! stale holder's writes.

mod common;

use common::{client, RedisServer};
use lock_core::prelude::*;

/// The server clock's whole second.
async fn server_second(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (seconds, _micros): (u64, u64) = redis::cmd("TIME").query_async(raw).await.unwrap();
    seconds
}

/// Two redis-servers stand for the old and the new primary; the new one never had the
/// lock's counter. Grants within one server second, first on the old primary (twice:
/// its counter moves on), then on the new one: the later grant's token must be higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_the_old_and_the_new_primary_follow_grant_order_within_a_second() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let on_old = client(old.backend(), "failover");
    let on_new = client(new.backend(), "failover");
    let mut raw = old.raw().await;
    // A try that straddles a second boundary shows nothing: try again (bounded).
    for attempt in 0..50 {
        let name = format!("job{attempt}");
        let second = server_second(&mut raw).await;
        let mut earlier = Vec::new();
        for _ in 0..2 {
            let guard = on_old.lock(&name).unwrap().try_acquire().await.unwrap();
            let guard = guard.expect("free on the old primary");
            earlier.push(guard.fencing_token());
            guard.release().await.unwrap();
        }
        let guard = on_new.lock(&name).unwrap().try_acquire().await.unwrap();
        let guard = guard.expect("free on the new primary");
        let later = guard.fencing_token();
        guard.release().await.unwrap();
        if server_second(&mut raw).await != second {
            continue;
        }
        println!(
            "within server second {second}: the old primary issued {earlier:?}, then the \
             new primary (counter lost) issued {later}"
        );
        assert!(earlier[1] > earlier[0]);
        assert!(
            later > earlier[1],
            "the later grant got the lower token: {later} after {}",
            earlier[1]
        );
        return;
    }
    panic!("no try fitted in one server second");
}

/// How long a fencing counter outlives the last grant of its name (`next_fence.lua`).
const COUNTER_KEPT_MS: i64 = 7 * 24 * 3600 * 1000;

/// The counter's remaining time to live, in ms (negative: none, or no key).
async fn counter_ttl(
    raw: &mut redis::aio::MultiplexedConnection,
    namespace: &str,
    name: &str,
) -> i64 {
    redis::cmd("PTTL")
        .arg(format!("{{{namespace}:{name}}}:fence"))
        .query_async(raw)
        .await
        .unwrap()
}

/// Every name ever locked keeps a counter key, so the counter expires a week after the
/// name's last grant (a lock used once must not cost memory for ever). Tokens keep
/// increasing once it is gone: the next one comes from the server clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_counters_expire_and_tokens_still_increase_after() {
    let server = RedisServer::start();
    let locks = client(server.backend(), "counters");
    let mut raw = server.raw().await;
    let exclusive = locks
        .lock("e")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    let fair = locks
        .fair_lock("f")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    let rw = locks.rw_lock("r").unwrap();
    let write = rw.try_write().await.unwrap().unwrap();
    let first_read = write.downgrade().await.unwrap();
    let tokens = [
        ("e", exclusive.fencing_token()),
        ("f", fair.fencing_token()),
        ("r", first_read.fencing_token()),
    ];
    for (name, _) in tokens {
        let ttl = counter_ttl(&mut raw, "counters", name).await;
        assert!(
            ttl > COUNTER_KEPT_MS - 60_000 && ttl <= COUNTER_KEPT_MS,
            "the counter of `{name}` has no week-long TTL: PTTL {ttl}"
        );
    }
    exclusive.release().await.unwrap();
    fair.release().await.unwrap();
    write.release().await.unwrap();
    first_read.release().await.unwrap();
    // The counters expire (deleted here, as their TTL would): the next tokens are
    // still higher.
    for (name, before) in tokens {
        let _: () = redis::cmd("DEL")
            .arg(format!("{{counters:{name}}}:fence"))
            .query_async(&mut raw)
            .await
            .unwrap();
        let next = match name {
            "e" => locks.lock(name).unwrap().try_acquire().await,
            "f" => locks.fair_lock(name).unwrap().try_acquire().await,
            _ => locks.rw_lock(name).unwrap().try_write().await,
        };
        let next = next.unwrap().expect("free");
        assert!(
            next.fencing_token() > before,
            "`{name}`: {} after {before}",
            next.fencing_token()
        );
        next.release().await.unwrap();
    }
}
