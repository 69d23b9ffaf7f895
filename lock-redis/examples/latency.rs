//! Uncontended acquire + release latency on one Redis server, next to the raw `PING`
//! round trip and a raw `SET NX PX` + `EVALSHA` release, and the handoff latency from
//! a release to the next waiter's grant.
//!
//! ```text
//! cargo run --release -p lock-redis --example latency -- redis://127.0.0.1:6379 [iterations]
//! ```

use std::time::{Duration, Instant};

use lock_core::{prelude::*, AcquireOptions, LockClient};
use lock_redis::RedisBackend;

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pct = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize];
    println!(
        "| {name:<42} | {:>9.1} | {:>9.1} | {:>9.1} |",
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        pct(0.999).as_secs_f64() * 1e6
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(5000);

    let mut raw = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let release = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    );
    // lock-redis's own scripts called directly: what the server costs, without the
    // client-side machinery.
    let our_acquire = redis::Script::new(concat!(
        include_str!("../src/lua/next_fence.lua"),
        include_str!("../src/lua/exclusive_acquire.lua")
    ));
    let our_release = redis::Script::new(concat!(
        include_str!("../src/lua/release_common.lua"),
        include_str!("../src/lua/exclusive_release.lua")
    ));
    let client = LockClient::builder(RedisBackend::connect_url(&url).await?)
        .namespace("latency")
        .build()?;
    let lock = client.lock("bench")?;
    let fixed = AcquireOptions::try_once().lease(Duration::from_secs(10));

    // Warm up connections and script caches.
    for _ in 0..200 {
        let _: String = redis::cmd("PING").query_async(&mut raw).await?;
        lock.acquire_with(fixed).await?.release().await?;
    }

    let (mut ping, mut two_pings, mut raw_pair, mut ours) = (vec![], vec![], vec![], vec![]);
    let mut our_scripts = vec![];
    for _ in 0..n {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut raw).await?;
        ping.push(t.elapsed());

        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut raw).await?;
        let _: String = redis::cmd("PING").query_async(&mut raw).await?;
        two_pings.push(t.elapsed());

        let t = Instant::now();
        let _: Option<String> = redis::cmd("SET")
            .arg("latency:raw")
            .arg("token")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query_async(&mut raw)
            .await?;
        let _: i64 = release
            .key("latency:raw")
            .arg("token")
            .invoke_async(&mut raw)
            .await?;
        raw_pair.push(t.elapsed());

        let t = Instant::now();
        let (_, fence): (i64, i64) = our_acquire
            .key("latency:scripts")
            .key("{latency:scripts}:fence")
            .key("{latency:scripts}:waiting")
            .arg("owner")
            .arg(10_000)
            .arg("request")
            .arg("inbox/1")
            .arg(6_000)
            .arg("0")
            .invoke_async(&mut raw)
            .await?;
        let _: i64 = our_release
            .key("latency:scripts")
            .key("{latency:scripts}:waiting")
            .key("{latency:scripts}:released:request")
            .arg("{latency:scripts}:channel")
            .arg(5_000)
            .arg(format!("owner:request:{fence}"))
            .invoke_async(&mut raw)
            .await?;
        our_scripts.push(t.elapsed());

        let t = Instant::now();
        let guard = lock.acquire_with(fixed).await?;
        guard.release().await?;
        ours.push(t.elapsed());
    }

    // Handoff: a waiter blocked on the lock, then the holder releases.
    let mut handoff = vec![];
    let waiter_lock = client.lock("bench")?;
    for _ in 0..n.min(500) {
        let held = lock.acquire_with(fixed).await?;
        let waiter = waiter_lock.clone();
        let task = tokio::spawn(async move {
            let g = waiter
                .acquire_with(
                    AcquireOptions::wait_for(Duration::from_secs(10))
                        .lease(Duration::from_secs(10)),
                )
                .await;
            (Instant::now(), g)
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        let released = Instant::now();
        held.release().await?;
        let (at, g) = task.await?;
        handoff.push(at - released);
        g?.release().await?;
    }

    println!("{n} iterations against {url}");
    println!(
        "| {:<42} | {:>9} | {:>9} | {:>9} |",
        "operation (us)", "median", "p99", "p99.9"
    );
    println!("|{:-<44}|{:-<11}|{:-<11}|{:-<11}|", "", "", "", "");
    stats("PING", ping);
    stats("2 x PING (the floor)", two_pings);
    stats("raw SET NX PX + EVALSHA release", raw_pair);
    stats("lock-redis's two scripts, called raw", our_scripts);
    stats("lock-redis acquire + release", ours);
    stats("handoff: release -> waiter granted", handoff);
    Ok(())
}
