//! Two clients contend for one lock on the in-memory backend: fencing tokens, a
//! handoff by notification, re-entry and a read-write downgrade.

use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::prelude::*;
use lock_core::{AcquireOptions, LockClient};

#[tokio::main]
async fn main() -> lock_core::Result<()> {
    let backend = MemoryBackend::new();
    let alice = LockClient::builder(backend.clone())
        .namespace("demo")
        .build()?;
    let bob = LockClient::builder(backend).namespace("demo").build()?;

    let alice_lock = alice.lock("report")?;
    let bob_lock = bob.lock("report")?;

    let guard = alice_lock.acquire().await?;
    // Re-entry goes through the guard (no round trip): another `acquire`, even
    // through the same handle, is another owner and would wait for this one.
    let again = guard.reenter()?;
    println!(
        "alice holds `report` (token {}, {} holds)",
        guard.fencing_token(),
        alice_lock.hold_count()
    );
    assert!(bob_lock.try_acquire().await?.is_none());

    let waiter = tokio::spawn(async move {
        let guard = bob_lock.acquire_timeout(Duration::from_secs(5)).await?;
        println!("bob got `report` (token {})", guard.fencing_token());
        guard.release().await
    });
    again.release().await?;
    guard.release().await?; // the last release wakes bob
    waiter.await.expect("bob's task")?;

    let table = alice.rw_lock("table")?;
    let write = table.write().await?;
    let read = write.downgrade().await?; // the writer also takes the read side
    write.release().await?;
    println!("alice downgraded to a read lock: {}", read.is_held());
    read.release().await?;

    let short = AcquireOptions::try_once().lease(Duration::from_millis(50));
    let guard = alice.lock("brief")?.acquire_with(short).await?;
    println!("a fixed lease ends on its own: {}", guard.lost().await);
    Ok(())
}
