//! Runs the cases against one backend and reports.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use lock_core::{Capabilities, LockProvider};
use tokio::time::Instant;

use crate::backend::{Backend, ClientOptions};
use crate::cases::{all_cases, Case};

/// How long one case may run before it counts as hung.
const CASE_LIMIT: Duration = Duration::from_secs(120);

/// How many cases run at once (`LOCK_TEST_CONCURRENCY`, default 4; 1 runs them one by
/// one, in order).
fn concurrency() -> usize {
    std::env::var("LOCK_TEST_CONCURRENCY")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(4)
}

/// A case's outcome: how long it took, or why it failed.
fn judge(
    outcome: Result<std::thread::Result<()>, tokio::time::error::Elapsed>,
    took: Duration,
) -> Result<Duration, String> {
    match outcome {
        Ok(Ok(())) => Ok(took),
        Ok(Err(panic)) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".into());
            Err(format!("({took:.2?}) {message}"))
        }
        Err(_) => Err(format!("still running after {CASE_LIMIT:?}")),
    }
}

/// What a case gets: the backend, a namespace of its own, and the timings to use.
pub struct Ctx {
    backend: Arc<dyn Backend>,
    namespace: String,
    capabilities: Capabilities,
}

impl Ctx {
    /// The backend under test.
    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// This case's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// See [`Backend::short_lease`].
    pub fn short_lease(&self) -> Duration {
        self.backend.short_lease()
    }

    /// See [`Backend::slack`].
    pub fn slack(&self) -> Duration {
        self.backend.slack()
    }

    /// What the server keeps for this case's namespace ([`Backend::leftovers`]),
    /// sorted; the case fails if the backend cannot look.
    pub async fn leftovers(&self) -> Vec<String> {
        let mut left = self
            .backend
            .leftovers(&self.namespace)
            .await
            .unwrap_or_else(|err| panic!("looking for leftovers: {err}"));
        left.sort();
        left
    }

    /// A new client in this case's namespace with a watchdog lease of 10 s, so only
    /// tests that mean to see renewals do.
    pub async fn client(&self) -> Arc<dyn LockProvider> {
        self.client_with(&self.namespace, Duration::from_secs(10))
            .await
    }

    /// A new client in this case's namespace that describes itself as `description`.
    pub async fn client_described(&self, description: &str) -> Arc<dyn LockProvider> {
        self.make_client(ClientOptions {
            namespace: self.namespace.clone(),
            watchdog_lease: Duration::from_secs(10),
            holder_description: Some(description.to_owned()),
        })
        .await
    }

    /// A new client with the given namespace and watchdog lease.
    pub async fn client_with(
        &self,
        namespace: &str,
        watchdog_lease: Duration,
    ) -> Arc<dyn LockProvider> {
        self.make_client(ClientOptions {
            namespace: namespace.to_owned(),
            watchdog_lease,
            holder_description: None,
        })
        .await
    }

    async fn make_client(&self, options: ClientOptions) -> Arc<dyn LockProvider> {
        match self.backend.client(options).await {
            Ok(client) => client,
            Err(err) => panic!("could not make a {} client: {err}", self.backend.name()),
        }
    }
}

/// The outcome of a suite run.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases that passed.
    pub passed: Vec<String>,
    /// Cases that failed, with why.
    pub failed: Vec<(String, String)>,
    /// Cases skipped, with why.
    pub skipped: Vec<(String, String)>,
}

impl Report {
    /// `N passed, M failed, K skipped`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed.len(),
            self.failed.len(),
            self.skipped.len()
        )
    }
}

/// Runs every case of [`all_cases`] against `backend` (or those `LOCK_TEST_CASES`
/// selects), several at once (see [`Case::alone`]), each in a fresh namespace, and prints a line per case
/// and a summary. Panics at the end if any case failed, naming them.
pub async fn run_suite(backend: Arc<dyn Backend>) -> Report {
    let cases = selected(all_cases(), &*backend);
    run_cases(backend, cases).await
}

/// Cases that time the lock logic at length (waiting out leases, extensions, storms
/// of cancelled waits) and use a connection no differently from the others: the same
/// logic over another transport needs them once, not again.
const TIMING_ONLY: &[&str] = &[
    "::grant_after_long_wait_is_fresh",
    "::extend_moves_expiry",
    "cancel::storm_",
    "fair::watchdog_keeps_lock_alive",
    "write::watchdog_keeps_lock_alive",
    "multi::fixed_lease_counts_from_the_last_grant",
    "args::nested_names_do_not_block",
];

/// As [`run_suite`], for a backend whose whole suite already ran over its plain
/// transport, now over another (TLS): every case but a few that only time the lock
/// logic at length (`TIMING_ONLY`).
pub async fn run_transport_suite(backend: Arc<dyn Backend>) -> Report {
    let mut cases = all_cases();
    cases.retain(|case| !TIMING_ONLY.iter().any(|t| case.name.contains(t)));
    let cases = selected(cases, &*backend);
    run_cases(backend, cases).await
}

/// The cases `LOCK_TEST_CASES` selects (a comma-separated list of name parts), or all.
fn selected(mut cases: Vec<Case>, backend: &dyn Backend) -> Vec<Case> {
    if let Ok(filter) = std::env::var("LOCK_TEST_CASES") {
        let parts: Vec<&str> = filter.split(',').filter(|p| !p.is_empty()).collect();
        cases.retain(|case| parts.iter().any(|part| case.name.contains(part)));
        println!(
            "conformance[{}]: LOCK_TEST_CASES={filter:?} selects {} cases",
            backend.name(),
            cases.len()
        );
    }
    cases
}

/// Runs the given cases; see [`run_suite`].
pub async fn run_cases(backend: Arc<dyn Backend>, cases: Vec<Case>) -> Report {
    // `RUST_LOG=lock_core=debug` shows what the locks did in a failing case.
    crate::log_capture::init();
    let name = backend.name().to_owned();
    let probe = backend
        .client(ClientOptions {
            namespace: "conformance-probe".into(),
            watchdog_lease: Duration::from_secs(10),
            holder_description: None,
        })
        .await
        .unwrap_or_else(|err| panic!("could not make a {name} client: {err}"));
    let capabilities = probe.capabilities();
    drop(probe);
    let mut report = Report::default();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let (mut together, mut alone) = (Vec::new(), Vec::new());
    for case in cases {
        if let Some(reason) = case.needs.missing(&*backend, capabilities) {
            println!("conformance[{name}] SKIP {}: {reason}", case.name);
            report.skipped.push((case.name.to_owned(), reason));
        } else if case.alone {
            alone.push(case);
        } else {
            together.push(case);
        }
    }
    let one = |case: Case| {
        let ctx = Ctx {
            backend: backend.clone(),
            namespace: format!("conformance-{run}-{}", case.name.replace("::", ".")),
            capabilities,
        };
        let name = name.clone();
        async move {
            let started = Instant::now();
            let outcome = tokio::time::timeout(
                CASE_LIMIT,
                AssertUnwindSafe((case.run)(&ctx)).catch_unwind(),
            )
            .await;
            let outcome = judge(outcome, started.elapsed());
            match &outcome {
                Ok(took) => println!("conformance[{name}] PASS {} ({took:.2?})", case.name),
                Err(why) => println!("conformance[{name}] FAIL {}: {why}", case.name),
            }
            (case.name, outcome)
        }
    };
    // Cases have namespaces of their own, so most run side by side (they mostly wait);
    // the heavy or timing-critical ones run alone afterwards.
    let concurrent = futures::stream::iter(together.into_iter().map(one))
        .buffer_unordered(concurrency())
        .collect::<Vec<_>>()
        .await;
    let mut outcomes = concurrent;
    for case in alone {
        outcomes.push(one(case).await);
    }
    for (case, outcome) in outcomes {
        match outcome {
            Ok(_) => report.passed.push(case),
            Err(why) => report.failed.push((case, why)),
        }
    }
    println!("conformance[{name}]: {}", report.summary());
    for (case, reason) in &report.skipped {
        println!("conformance[{name}]   skipped {case}: {reason}");
    }
    if !report.failed.is_empty() {
        let names: Vec<_> = report
            .failed
            .iter()
            .map(|(n, m)| format!("{n}: {m}"))
            .collect();
        panic!("conformance[{name}] failures:\n  {}", names.join("\n  "));
    }
    report
}
