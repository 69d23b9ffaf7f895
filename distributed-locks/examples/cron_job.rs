//! A job that many replicas schedule but only one may run at a time: the replica that
//! gets the lock runs it, the others skip this round. If the lock is lost mid-way (the
//! server lost the lease, an operator broke it), the job stops at once rather than run
//! beside the next holder, and every write carries the fencing token so a store that
//! checks it refuses a stale writer.
//!
//! ```sh
//! cargo run -p distributed-locks --example cron_job                              # in memory
//! cargo run -p distributed-locks --features redis --example cron_job -- redis://127.0.0.1:6379
//! cargo run -p distributed-locks --features sql --example cron_job -- postgres://app@db/app
//! ```

use std::time::Duration;

use distributed_locks::{connect, prelude::*, AcquireOptions, ConnectOptions, Error, LeaseWatch};

#[tokio::main]
async fn main() -> distributed_locks::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://".into());
    let locks = connect(&url, ConnectOptions::default().namespace("cron")).await?;
    let lock = locks.lock("nightly-invoices")?;

    // Try once: another replica running it this round is not an error.
    match lock
        .run_exclusive(AcquireOptions::try_once(), nightly_invoices)
        .await
    {
        Ok(written) => println!("wrote {written} invoices"),
        Err(Error::Timeout { .. }) => println!("another replica runs it this round"),
        Err(Error::LeaseLost { .. }) => eprintln!("the lock was lost; the job was stopped"),
        Err(other) => return Err(other),
    }
    locks.shutdown().await
}

/// The job: every write carries the fencing token.
async fn nightly_invoices(lease: LeaseWatch) -> u32 {
    let mut written = 0;
    for batch in 0..3 {
        // A store that keeps the highest token it saw refuses writes with a lower one.
        println!("batch {batch}, fencing token {}", lease.fencing_token());
        tokio::time::sleep(Duration::from_millis(50)).await;
        written += 100;
    }
    written
}
