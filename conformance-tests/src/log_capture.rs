//! The test processes' tracing subscriber: `RUST_LOG`'s output through the test
//! writer, and a record of every warning, so that a test can check what an operator's
//! log would show (a lost lease or a failed renewal names its lock, backend, kind,
//! owner and token).
//!
//! A subscriber is process-wide and set once: [`init`] sets this one, and every test
//! entry point of this crate calls it before any lock is made.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The most warnings kept; older ones are dropped first.
const KEPT: usize = 10_000;

/// One warning (or error) event as it was logged.
#[derive(Clone, Debug)]
pub struct Warning {
    /// The event's message.
    pub message: String,
    /// Its other fields, formatted as the log shows them (`Display` for `%` fields).
    pub fields: BTreeMap<String, String>,
}

impl Warning {
    /// The field `name`, if the event had it.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// Panics unless the event has each of `names`, none of them empty.
    pub fn assert_has(&self, names: &[&str]) {
        for name in names {
            assert!(
                self.field(name).is_some_and(|v| !v.is_empty()),
                "no {name} in {self:?}"
            );
        }
    }
}

static WARNINGS: OnceLock<Mutex<VecDeque<Warning>>> = OnceLock::new();

fn warnings() -> &'static Mutex<VecDeque<Warning>> {
    WARNINGS.get_or_init(|| Mutex::new(VecDeque::new()))
}

/// Whether [`init`] set this process's subscriber.
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// Sets this process's subscriber, once; later calls do nothing.
pub fn init() {
    INSTALLED.get_or_init(|| {
        let fmt = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(EnvFilter::from_default_env());
        let capture = Capture.with_filter(LevelFilter::WARN);
        tracing_subscriber::registry()
            .with(fmt)
            .with(capture)
            .try_init()
            .is_ok()
    });
}

/// Whether warnings are recorded: [`init`] set this process's subscriber, and nothing
/// had set another before it.
pub fn capturing() -> bool {
    init();
    INSTALLED.get() == Some(&true)
}

/// The warnings logged so far whose `lock` field is `lock` (a lock key as lock-core
/// shows it: `namespace/name`).
pub fn warnings_about(lock: &str) -> Vec<Warning> {
    warnings()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|w| w.field("lock") == Some(lock))
        .cloned()
        .collect()
}

/// Waits up to `limit` for a warning about `lock` whose message contains `message`.
pub async fn wait_for_warning(lock: &str, message: &str, limit: Duration) -> Option<Warning> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let found = warnings_about(lock)
            .into_iter()
            .find(|w| w.message.contains(message));
        if found.is_some() || tokio::time::Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// As [`wait_for_warning`], and panics, listing the warnings about `lock`, if none
/// comes.
pub async fn expect_warning(lock: &str, message: &str, limit: Duration) -> Warning {
    match wait_for_warning(lock, message, limit).await {
        Some(warning) => warning,
        None => panic!(
            "no `{message}` warning names {lock} within {limit:?}; its warnings: {:?}",
            warnings_about(lock)
        ),
    }
}

/// The layer that keeps warnings.
struct Capture;

impl<S: Subscriber> Layer<S> for Capture {
    // Only warnings and errors get here (the layer's `LevelFilter::WARN`).
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut warning = Warning {
            message: String::new(),
            fields: BTreeMap::new(),
        };
        event.record(&mut Fields(&mut warning));
        let mut kept = warnings().lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back(warning);
    }
}

struct Fields<'a>(&'a mut Warning);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

impl Fields<'_> {
    fn record(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.0.message = value;
        } else {
            self.0.fields.insert(field.name().to_owned(), value);
        }
    }
}
