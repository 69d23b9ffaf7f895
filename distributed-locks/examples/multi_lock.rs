//! Two locks held as one, all or nothing, in an order that cannot deadlock: a cache
//! entry's lock and its table's write lock (here both on one backend; they may be on
//! two, e.g. Redis for the cache and PostgreSQL for the table).
//!
//! ```sh
//! cargo run -p distributed-locks --example multi_lock                           # in memory
//! cargo run -p distributed-locks --features redis --example multi_lock -- redis://127.0.0.1:6379
//! ```

use std::time::Duration;

use distributed_locks::{connect, AcquireOptions, ConnectOptions, MultiLock};

#[tokio::main]
async fn main() -> distributed_locks::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let locks = connect(&url, ConnectOptions::default().namespace("shop")).await?;
    let both = MultiLock::builder()
        .lock(locks.lock("cache:user:42")?)
        .write(locks.rw_lock("users")?)
        .build()?;

    let guard = both
        .acquire_with(AcquireOptions::wait_for(Duration::from_secs(5)))
        .await?;
    for (lock, token) in guard.fencing_tokens() {
        println!("{lock}: fencing token {token}");
    }
    tokio::select! {
        () = update_user_and_cache() => {}
        loss = guard.lost() => eprintln!("lost {loss}; stopped"),
    }
    guard.release().await?;
    locks.shutdown().await
}

async fn update_user_and_cache() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}
