//! The metrics and events a client reports, checked against a recorder that keeps what
//! it is given: every metric the README lists moves with the operations done, and the
//! events say what happened to which lock.
//!
//! One test: the recorder is global to this binary, a snapshot drains its counters, and
//! some metrics (renewals) are labelled by backend alone.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, LeaseLoss, LockClient, LockEvent, LockEventKind};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use support::Wrapped;

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
        snapshotter
    })
}

/// Every metric now, by name and sorted labels.
#[derive(Debug, Default)]
struct Seen(HashMap<(String, Vec<(String, String)>), DebugValue>);

impl Seen {
    fn now() -> Seen {
        let mut seen = Seen::default();
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let (_, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            seen.0.insert((key.name().to_owned(), labels), value);
        }
        seen
    }

    /// The counter `name` (0 if never touched) with at least these labels, summed.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|v| match v {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// How many values the histogram `name` with these labels recorded.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.matching(name, labels)
            .map(|v| match v {
                DebugValue::Histogram(values) => values.len(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, labels).find_map(|v| match v {
            DebugValue::Gauge(g) => Some(g.into_inner()),
            _ => None,
        })
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a DebugValue> + 'a {
        self.0.iter().filter_map(move |((n, have), value)| {
            let all = labels
                .iter()
                .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v));
            (n == name && all).then_some(value)
        })
    }
}

/// What this binary's log says at `warn` and above, as an operator's log file would.
fn log() -> &'static Mutex<Vec<u8>> {
    static LOG: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
    LOG.get_or_init(|| {
        tracing_subscriber::fmt()
            .with_writer(|| LogWriter)
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .init();
        Mutex::default()
    })
}

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        log().lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log line with `message` about `lock`.
fn logged(message: &str, lock: &str) -> String {
    let text = String::from_utf8_lossy(&log().lock().unwrap()).into_owned();
    text.lines()
        .find(|line| line.contains(message) && line.contains(&format!("lock={lock} ")))
        .unwrap_or_else(|| panic!("no `{message}` line names {lock}; the log:\n{text}"))
        .to_owned()
}

fn lock_label(name: &str) -> String {
    format!("locks/{name}")
}

#[tokio::test(start_paused = true)]
async fn metrics_and_events_follow_what_the_locks_do() {
    let _ = snapshotter();
    let _ = log();
    let _ = MetricKind::Counter; // the recorder's kinds, for readers of the snapshot
    let backend = Wrapped::default();
    let seen_by_hook: Arc<Mutex<Vec<LockEvent>>> = Arc::default();
    let hook_store = seen_by_hook.clone();
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(Duration::from_secs(3))
        .lock_names_in_metrics(true)
        .on_event(move |event| hook_store.lock().unwrap().push(event.clone()))
        .build()
        .unwrap();
    let other = LockClient::new(backend.clone());
    let mut events = client.events();

    // Acquisitions by outcome, with their waits.
    let lock = client.lock("m-outcomes").unwrap();
    let label = lock_label("m-outcomes");
    let held = lock.acquire().await.unwrap();
    let blocked = client.lock("m-outcomes").unwrap();
    assert!(blocked.try_acquire().await.unwrap().is_none());
    assert!(blocked
        .acquire_timeout(Duration::from_millis(200))
        .await
        .is_err());
    let cancelled = tokio::time::timeout(Duration::from_millis(50), blocked.acquire()).await;
    assert!(cancelled.is_err());
    tokio::time::sleep(Duration::from_secs(2)).await;
    held.release().await.unwrap();
    let seen = Seen::now();
    let by = |outcome| {
        seen.counter(
            "lock_acquire_total",
            &[
                ("lock", label.as_str()),
                ("outcome", outcome),
                ("backend", "wrapped-memory"),
                ("kind", "exclusive"),
            ],
        )
    };
    assert_eq!(
        [
            by("granted"),
            by("refused"),
            by("timed_out"),
            by("cancelled")
        ],
        [1, 1, 1, 1]
    );
    assert_eq!(
        seen.samples("lock_wait_seconds", &[("lock", label.as_str())]),
        4
    );
    assert_eq!(
        seen.samples("lock_hold_seconds", &[("lock", label.as_str())]),
        1
    );
    let acquired = events.next().await.unwrap();
    assert_eq!(acquired.lock.to_string(), label);
    assert!(matches!(acquired.what, LockEventKind::Acquired { .. }));
    match events.next().await.unwrap().what {
        LockEventKind::Released { held } => {
            assert!(held >= Duration::from_secs(2), "held {held:?}")
        }
        other => panic!("expected a release, got {other:?}"),
    }

    // Renewals, a run of failed ones (reported once), and the renewal after them.
    let renewals_before = Seen::now().counter("lock_renewals_total", &[]);
    let kept = client.lock("m-renewed").unwrap().acquire().await.unwrap();
    let _ = events.next().await; // acquired
    tokio::time::sleep(Duration::from_millis(2_100)).await; // two ticks
    let seen = Seen::now();
    assert!(seen.counter("lock_renewals_total", &[]) >= renewals_before + 2);
    backend.fail_next_renewals(2);
    tokio::time::sleep(Duration::from_millis(1_200)).await; // a failed tick and a retry
    tokio::time::sleep(Duration::from_millis(600)).await; // the retry that goes through
    assert!(kept.is_held());
    assert_eq!(Seen::now().counter("lock_renewal_failures_total", &[]), 2);
    match events.next().await.unwrap().what {
        LockEventKind::RenewalFailed { error } => assert!(error.contains("no answer"), "{error}"),
        other => panic!("expected a renewal failure, got {other:?}"),
    }
    assert_eq!(
        events.next().await.unwrap().what,
        LockEventKind::RenewedLate { failures: 2 }
    );
    // The log's warning names the lock, its backend, kind, owner and token.
    let line = logged("lease renewal failed", &lock_label("m-renewed"));
    let token = format!("token={}", kept.fencing_token());
    for field in ["backend=", "kind=", "owner=", token.as_str(), "error="] {
        assert!(line.contains(field), "no {field} in: {line}");
    }

    // A loss, by reason; its release fails as lost, which is no release failure.
    let label = lock_label("m-renewed");
    assert!(other
        .lock("m-renewed")
        .unwrap()
        .force_unlock()
        .await
        .unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!kept.is_held());
    match events.next().await.unwrap().what {
        LockEventKind::Lost { reason, .. } => assert_eq!(reason, LeaseLoss::Revoked),
        other => panic!("expected a loss, got {other:?}"),
    }
    let line = logged("lease lost", &label);
    for field in ["backend=", "kind=", "owner=", "token=", "reason="] {
        assert!(line.contains(field), "no {field} in: {line}");
    }
    assert!(kept.release().await.is_err());
    let seen = Seen::now();
    assert_eq!(
        seen.counter(
            "lock_losses_total",
            &[("lock", label.as_str()), ("reason", "revoked")]
        ),
        1
    );
    assert_eq!(seen.counter("lock_release_failures_total", &[]), 0);

    // A fixed lease that ran out unnoticed counts as expired when it is given back.
    let fixed = client
        .lock("m-expired")
        .unwrap()
        .acquire_with(AcquireOptions::try_once().lease(Duration::from_secs(1)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(fixed.release().await.is_err());
    assert_eq!(
        Seen::now().counter(
            "lock_losses_total",
            &[
                ("lock", lock_label("m-expired").as_str()),
                ("reason", "expired")
            ]
        ),
        1
    );

    // A release that fails is counted, retried in the background (a clean-up pending),
    // and the gauge returns to zero once it went through.
    let flaky = client.lock("m-flaky").unwrap().acquire().await.unwrap();
    backend.fail_next_releases(2);
    assert!(flaky.release().await.unwrap_err().is_retryable());
    let seen = Seen::now();
    assert_eq!(
        seen.counter(
            "lock_release_failures_total",
            &[("lock", lock_label("m-flaky").as_str())]
        ),
        1
    );
    assert_eq!(
        seen.gauge("lock_cleanups_pending", &[("backend", "wrapped-memory")]),
        Some(1.0)
    );
    client.shutdown().await.unwrap();
    assert_eq!(
        Seen::now().gauge("lock_cleanups_pending", &[("backend", "wrapped-memory")]),
        Some(0.0)
    );

    // The callback saw what the stream saw, lock names included.
    let hooked = seen_by_hook.lock().unwrap().clone();
    assert!(hooked
        .iter()
        .any(|e| matches!(e.what, LockEventKind::Lost { .. })
            && e.lock.to_string() == lock_label("m-renewed")));
    assert!(hooked
        .iter()
        .all(|e| e.backend == "wrapped-memory" && e.fencing_token > 0));

    // Without the opt-in, metrics never carry the lock's name (names can be unbounded).
    let anonymous = LockClient::new(lock_core::memory::MemoryBackend::new());
    anonymous
        .lock("m-anonymous")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let seen = Seen::now();
    assert!(seen.counter("lock_acquire_total", &[("backend", "memory")]) >= 1);
    assert!(!seen
        .0
        .keys()
        .any(|(_, labels)| labels.iter().any(|(_, v)| v.contains("m-anonymous"))));
}
