//! Measures uncontended acquire+release and handoff latency against a database, and on
//! PostgreSQL the `pg_advisory_lock`/`pg_advisory_unlock` round trip as the floor.
//!
//! ```sh
//! cargo run --release -p lock-sql --example latency -- postgres://postgres@127.0.0.1:5432/postgres lease for-update
//! cargo run --release -p lock-sql --example latency -- sqlite:///tmp/locks.db lease
//! ```
//! Arguments: a URL, then the strategies to measure (default: `lease`).

use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockClient;
use lock_sql::{sqlx, Dialect, SqlBackend, SqlConfig, Strategy};
use tokio::time::Instant;

const UNCONTENDED: usize = 2000;
const HANDOFFS: usize = 200;

fn stats(mut samples: Vec<Duration>) -> String {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:>9.1} us   p99 {:>9.1} us   (n={})",
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        samples.len()
    )
}

async fn client(url: &str, strategy: Strategy) -> LockClient<SqlBackend> {
    let options = SqlConfig::from_url(url)
        .expect("database URL")
        .with_strategy(strategy)
        // One table set per strategy: the tables refuse a client of the other.
        .with_table_prefix(match strategy {
            Strategy::ForUpdate => "latency_for_update",
            _ => "latency",
        });
    let backend = SqlBackend::connect(options).await.expect("connect");
    LockClient::builder(backend)
        .namespace(format!("latency-{}", std::process::id()))
        .build()
        .expect("client")
}

async fn measure(url: &str, strategy: Strategy) {
    let a = client(url, strategy).await;
    let b = client(url, strategy).await;
    let lock = a.lock("uncontended").expect("lock");
    for _ in 0..50 {
        lock.acquire()
            .await
            .expect("warm up")
            .release()
            .await
            .expect("release");
    }
    let mut samples = Vec::with_capacity(UNCONTENDED);
    for _ in 0..UNCONTENDED {
        let started = Instant::now();
        let guard = lock.acquire().await.expect("acquire");
        guard.release().await.expect("release");
        samples.push(started.elapsed());
    }
    let name = format!("{} {strategy:?}", a.backend().dialect().name());
    println!("{name:<22} acquire+release  {}", stats(samples));

    let holder = a.lock("handoff").expect("lock");
    let waiter = Arc::new(b.lock("handoff").expect("lock"));
    let mut samples = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let guard = holder.acquire().await.expect("holder");
        let w = waiter.clone();
        let task = tokio::spawn(async move {
            let guard = w.acquire().await.expect("waiter");
            let at = Instant::now();
            (guard, at)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        guard.release().await.expect("release");
        let (next, acquired) = task.await.expect("task");
        samples.push(acquired.saturating_duration_since(released));
        next.release().await.expect("release");
    }
    println!("{name:<22} handoff          {}", stats(samples));
}

async fn advisory_floor(url: &str) {
    use sqlx::Connection as _;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(url).await.expect("connect");
    let (mut pair, mut single) = (Vec::new(), Vec::new());
    for i in 0..UNCONTENDED + 50 {
        let started = Instant::now();
        sqlx::query("SELECT 1 FROM (SELECT pg_advisory_lock(4242)) AS l")
            .execute(&mut conn)
            .await
            .expect("lock");
        let locked = started.elapsed();
        sqlx::query("SELECT pg_advisory_unlock(4242)")
            .execute(&mut conn)
            .await
            .expect("unlock");
        if i >= 50 {
            single.push(locked);
            pair.push(started.elapsed());
        }
    }
    println!(
        "{:<22} lock+unlock      {}",
        "pg_advisory (floor)",
        stats(pair)
    );
    println!(
        "{:<22} one round trip   {}",
        "pg_advisory (floor)",
        stats(single)
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .expect("usage: latency URL [lease|for-update]...");
    let mut strategies: Vec<Strategy> = args
        .map(|s| match s.as_str() {
            "lease" => Strategy::Lease,
            "for-update" => Strategy::ForUpdate,
            other => panic!("unknown strategy {other}"),
        })
        .collect();
    if strategies.is_empty() {
        strategies.push(Strategy::Lease);
    }
    let dialect = SqlBackend::connect(
        SqlConfig::from_url(&url)
            .expect("database URL")
            .with_table_prefix("latency"),
    )
    .await
    .expect("connect")
    .dialect();
    if dialect == Dialect::Postgres {
        advisory_floor(&url).await;
    }
    for strategy in strategies {
        measure(&url, strategy).await;
    }
}
