//! The metrics a client reports on a real backend (a SQLite file), against a recorder
//! that keeps what it is given: acquisitions by outcome with their waits, holds,
//! renewals, and a force-unlocked lease counted as a loss with its reason, every one
//! labelled with the backend's name.
//!
//! One test: the recorder is global to this binary.

use std::collections::HashMap;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{LeaseLoss, LockClient, LockEventKind};
use lock_sql::SqlBackend;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// The counters' values and the histograms' sample counts, by name and labels.
fn seen(snapshotter: &metrics_util::debugging::Snapshotter) -> HashMap<(String, String), u64> {
    let mut out = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let n = match value {
            DebugValue::Counter(n) => n,
            DebugValue::Histogram(values) => values.len() as u64,
            DebugValue::Gauge(_) => continue,
        };
        *out.entry((key.name().to_owned(), labels.join(",")))
            .or_default() += n;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_what_the_locks_do_on_sqlite() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let backend = SqlBackend::connect_url(&url).await.expect("connect");
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .unwrap();
    let operator = LockClient::new(backend);
    let mut events = client.events();

    let lock = client.lock("jobs").unwrap();
    let guard = lock.acquire().await.unwrap();
    assert!(operator
        .lock("jobs")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // A few watchdog ticks (a third of the lease each).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    guard.release().await.unwrap();

    let lost = lock.acquire().await.unwrap();
    assert!(operator.lock("jobs").unwrap().force_unlock().await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), lost.lost())
        .await
        .expect("the loss is found at the next renewal");
    assert_eq!(reason, LeaseLoss::Revoked);
    // The guard hears of the loss first; its metrics and event follow at once.
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("the loss event")
            .expect("events go on");
        if matches!(event.what, LockEventKind::Lost { .. }) {
            break;
        }
    }

    let seen = seen(&snapshotter);
    let at = |name: &str, labels: &str| seen.get(&(name.to_owned(), labels.to_owned())).copied();
    let exclusive = "backend=sqlite,kind=exclusive";
    assert_eq!(
        at(
            "lock_acquire_total",
            &format!("{exclusive},outcome=granted")
        ),
        Some(2),
        "{seen:#?}"
    );
    assert_eq!(
        at(
            "lock_acquire_total",
            &format!("{exclusive},outcome=refused")
        ),
        Some(1),
        "{seen:#?}"
    );
    assert_eq!(
        at("lock_wait_seconds", &format!("{exclusive},outcome=granted")),
        Some(2)
    );
    assert_eq!(at("lock_hold_seconds", exclusive), Some(2), "{seen:#?}");
    assert!(
        at("lock_renewals_total", "backend=sqlite").unwrap_or(0) >= 2,
        "{seen:#?}"
    );
    assert_eq!(
        at("lock_losses_total", &format!("{exclusive},reason=revoked")),
        Some(1),
        "{seen:#?}"
    );
    let _ = lost.release().await;
}
