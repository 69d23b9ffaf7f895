//! A thousand fair waiters on one healthy etcd: waiting must not turn into errors under
//! load, every waiter gets its turn in queue order, and nothing is left behind.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{backend, key, start};
use lock_core::backend::LockBackend;
use lock_core::prelude::*;
use lock_core::{LockClient, LockFamily};
use tokio::time::Instant;

const NS: &str = "crowd";
const CLIENTS: usize = 10;
const WAITERS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_fair_waiters_all_get_their_turn_without_errors() {
    let (server, admin) = start().await;
    let url = server.url();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            LockClient::builder(backend(&url).await)
                .namespace(NS)
                .build()
                .unwrap(),
        );
    }
    let holder = LockClient::builder(backend(&url).await)
        .namespace(NS)
        .build()
        .unwrap();
    let held = holder.fair_lock("crowd").unwrap().acquire().await.unwrap();

    let grants = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % CLIENTS].fair_lock("crowd").unwrap();
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire_timeout(Duration::from_secs(240)).await?;
            grants.lock().unwrap().push(guard.fencing_token());
            guard.release().await
        }));
    }
    // Every waiter queued: 1,001 keys under the lock's prefix.
    loop {
        let mut kv = admin.client().kv_client();
        let count = kv
            .get(
                format!("{NS}/crowd\u{1f}fair/"),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap()
            .count();
        if count as usize == WAITERS + 1 {
            break;
        }
        // A waiter that ended while the lock is held failed: say how.
        if let Some(done) = tasks.iter().position(tokio::task::JoinHandle::is_finished) {
            let outcome = tasks.swap_remove(done).await.unwrap();
            panic!("a waiter ended while the lock was held: {outcome:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {count} of {} keys after 120 s",
            WAITERS + 1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let queued = started.elapsed();
    held.release().await.unwrap();

    let mut errors = Vec::new();
    for task in tasks {
        if let Err(err) = task.await.unwrap() {
            errors.push(err.to_string());
        }
    }
    println!(
        "{WAITERS} fair waiters: queued in {queued:?}, all served in {:?}",
        started.elapsed()
    );
    assert!(
        errors.is_empty(),
        "{} of {WAITERS} waiters failed, first: {}",
        errors.len(),
        errors[0]
    );
    let grants = grants.lock().unwrap().clone();
    assert_eq!(grants.len(), WAITERS);
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens follow the grant order"
    );
    assert!(!admin
        .is_locked(&key(NS, "crowd"), LockFamily::Fair)
        .await
        .unwrap());
}
