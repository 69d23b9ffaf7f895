//! The library's metrics in Prometheus form while a few tasks contend for a lock.
//!
//! ```sh
//! cargo run -p distributed-locks --example metrics                    # in memory
//! cargo run -p distributed-locks --features redis --example metrics -- redis://127.0.0.1:6379
//! ```
//!
//! A service would serve `handle.render()` on its `/metrics` endpoint (or install the
//! exporter's own HTTP listener); here it is printed once the tasks are done.

use std::time::Duration;

use distributed_locks::{connect, prelude::*, AcquireOptions, ConnectOptions};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> distributed_locks::Result<()> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("no other recorder is installed");
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let locks = connect(&url, ConnectOptions::default().namespace("metrics-example")).await?;

    let mut tasks = Vec::new();
    for _ in 0..4 {
        let lock = locks.lock("report")?;
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                // Some waits run out while another task holds the lock.
                let options = AcquireOptions::wait_for(Duration::from_millis(30));
                if let Ok(guard) = lock.acquire_with(options).await {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    guard.release().await?;
                }
            }
            Ok::<(), distributed_locks::Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("task")?;
    }
    locks.shutdown().await?;

    for line in handle.render().lines() {
        // The counters and the histograms' counts and sums, without the buckets.
        if !line.starts_with('#') && !line.contains("quantile") {
            println!("{line}");
        }
    }
    Ok(())
}
