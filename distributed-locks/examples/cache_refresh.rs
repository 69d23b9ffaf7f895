//! A read-write lock around a cache: many readers share it, one refresher writes, and
//! the refresher downgrades to a read lock to check what it wrote while readers come
//! back in (writers that queued meanwhile wait for it).
//!
//! ```sh
//! cargo run -p distributed-locks --example cache_refresh                        # in memory
//! cargo run -p distributed-locks --features zookeeper --example cache_refresh -- zk://127.0.0.1:2181
//! ```

use std::sync::Arc;
use std::time::Duration;

use distributed_locks::{connect, prelude::*, AcquireOptions, ConnectOptions};
use tokio::sync::RwLock as Cache;

#[tokio::main]
async fn main() -> distributed_locks::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let locks = connect(&url, ConnectOptions::default().namespace("cache")).await?;
    let cache = Arc::new(Cache::new(String::from("v1")));

    let mut readers = Vec::new();
    for reader in 0..3 {
        let (lock, cache) = (locks.rw_lock("prices")?, cache.clone());
        readers.push(tokio::spawn(async move {
            let seen = lock
                .run_read(
                    AcquireOptions::wait_for(Duration::from_secs(5)),
                    |_| async { cache.read().await.clone() },
                )
                .await?;
            println!("reader {reader} saw {seen}");
            Ok::<(), distributed_locks::Error>(())
        }));
    }

    let lock = locks.rw_lock("prices")?;
    let write = lock.write().await?;
    *cache.write().await = String::from("v2");
    let read = write.downgrade().await?; // keep reading what was written...
    write.release().await?; // ...while readers come back in
    println!("refreshed to {}", cache.read().await);
    read.release().await?;

    for reader in readers {
        reader.await.expect("reader task")?;
    }
    locks.shutdown().await
}
