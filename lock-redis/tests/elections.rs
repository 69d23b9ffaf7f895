//! Elections on a real redis-server: hand-over, and where a proclaimed value lives.

mod common;

use std::time::{Duration, Instant};

use common::{client, keys, RedisServer};
use lock_core::{prelude::*, AcquireOptions};
use redis::AsyncCommands;

const LONG: Duration = Duration::from_secs(30);

/// A leader that resigns hands over to the waiting candidate through the election's
/// channel, not at the end of a lease or a poll (both far longer here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigning_leader_hands_over_at_once() {
    let server = RedisServer::start();
    let client = client(server.backend(), "elect-handoff");
    let election = client.election("e").unwrap();
    let leader = election
        .campaign_with("a", AcquireOptions::try_once().lease(LONG))
        .await
        .unwrap();
    let candidate = client.election("e").unwrap();
    let task = tokio::spawn(async move {
        let leadership = candidate
            .campaign_with("b", AcquireOptions::wait_for(LONG).lease(LONG))
            .await;
        (Instant::now(), leadership)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resigned_at = Instant::now();
    leader.resign().await.unwrap();
    let (led_at, leadership) = task.await.unwrap();
    let handoff = led_at - resigned_at;
    println!("hand-over took {handoff:?}");
    assert!(
        handoff < Duration::from_secs(5),
        "hand-over took {handoff:?}"
    );
    leadership.unwrap().resign().await.unwrap();
}

/// A proclaimed value lives beside the leader's key, is renewed with it, is read only as
/// the lease it was proclaimed for, and goes with the leadership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaimed_value_lives_and_goes_with_its_leadership() {
    let server = RedisServer::start();
    let client = client(server.backend(), "elect-value");
    let mut raw = server.raw().await;
    let election = client.election("e").unwrap();
    let short = Duration::from_secs(5);
    let leadership = election
        .campaign_with("10.0.0.1:80", AcquireOptions::try_once().lease(short))
        .await
        .unwrap();
    leadership.proclaim("10.0.0.1:81").await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.value, "10.0.0.1:81");
    assert_eq!(leader.term, leadership.term());
    let value_key = "{elect-value:e}:elect:value";
    let ttl: i64 = raw.pttl(value_key).await.unwrap();
    assert!(ttl > 0 && ttl <= 5_000, "the value's expiry: {ttl} ms");
    leadership.guard().extend(LONG).await.unwrap();
    let ttl: i64 = raw.pttl(value_key).await.unwrap();
    assert!(
        ttl > 5_000,
        "the value was not renewed with the leader: {ttl} ms"
    );

    // A value proclaimed for another lease (an earlier leader's) is not this leader's.
    let _: () = raw
        .hset(value_key, "lease", "someone:else:1")
        .await
        .unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        leader.value, "10.0.0.1:80",
        "an earlier leader's value was read"
    );

    leadership.resign().await.unwrap();
    assert!(election.leader().await.unwrap().is_none());
    let left: Vec<String> = keys(&mut raw)
        .await
        .into_iter()
        .filter(|k| !k.ends_with("}:fence") && !k.contains("}:released:"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
