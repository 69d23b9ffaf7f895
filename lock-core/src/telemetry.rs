//! What a client tells the world about its locks: metrics through the `metrics` facade,
//! lock events (a stream and callbacks), and who a lease is, for every log line that
//! speaks of one.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{counter, histogram, Label};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::backend::OwnerToken;
use crate::kinds::LockKind;
use crate::lease::LeaseLoss;
use crate::name::LockKey;

/// How many events a subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 1024;

/// A callback [`LockClientBuilder::on_event`](crate::LockClientBuilder::on_event) installs.
pub(crate) type EventHook = Arc<dyn Fn(&LockEvent) + Send + Sync>;

/// Something that happened to a lock of a client, for code that must react: log it,
/// page someone, stop work. See [`LockClient::events`](crate::LockClient::events) and
/// [`LockClientBuilder::on_event`](crate::LockClientBuilder::on_event).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LockEvent {
    /// What happened.
    pub what: LockEventKind,
    /// Which lock: namespace and name.
    pub lock: LockKey,
    /// Which side or type of lock.
    pub kind: LockKind,
    /// The backend's short name (`"redis"`, ...).
    pub backend: &'static str,
    /// The acquisition's owner token, as the backend stores it.
    pub owner: String,
    /// The acquisition's fencing token.
    pub fencing_token: u64,
}

/// What a [`LockEvent`] reports.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LockEventKind {
    /// The lock was granted after waiting this long.
    Acquired {
        /// From the acquire call to the grant.
        waited: Duration,
    },
    /// A watchdog renewal of the lease failed; the watchdog keeps trying until the
    /// lease runs out. Reported once per run of failures.
    RenewalFailed {
        /// The renewal's error, as text.
        error: String,
    },
    /// A renewal went through after failures: the lease is kept again.
    RenewedLate {
        /// How many renewals of it had failed in a row.
        failures: u32,
    },
    /// The lease stopped protecting its holder for a reason other than a release.
    Lost {
        /// Why.
        reason: LeaseLoss,
        /// How long it had been held.
        held: Duration,
    },
    /// The holder released the lock.
    Released {
        /// How long it was held.
        held: Duration,
    },
}

impl fmt::Display for LockEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = kind_label(self.kind);
        let lock = &self.lock;
        let token = self.fencing_token;
        match &self.what {
            LockEventKind::Acquired { waited } => {
                write!(
                    f,
                    "{kind} lock {lock} acquired (token {token}) after {waited:?}"
                )
            }
            LockEventKind::RenewalFailed { error } => {
                write!(
                    f,
                    "{kind} lock {lock} (token {token}): renewal failed: {error}"
                )
            }
            LockEventKind::RenewedLate { failures } => write!(
                f,
                "{kind} lock {lock} (token {token}) renewed after {failures} failed renewals"
            ),
            LockEventKind::Lost { reason, held } => {
                write!(
                    f,
                    "{kind} lock {lock} (token {token}) lost after {held:?}: {reason}"
                )
            }
            LockEventKind::Released { held } => {
                write!(
                    f,
                    "{kind} lock {lock} (token {token}) released after {held:?}"
                )
            }
        }
    }
}

/// The events of one client, as they happen (see
/// [`LockClient::events`](crate::LockClient::events)).
#[derive(Debug)]
pub struct LockEvents {
    receiver: broadcast::Receiver<LockEvent>,
    missed: u64,
}

impl LockEvents {
    /// The next event; `None` once the client is gone. A subscriber that falls more
    /// than 1,024 events behind skips the oldest ([`missed`](Self::missed) counts them).
    ///
    /// # Cancel safety
    /// Cancel safe: an event not yet returned stays queued.
    pub async fn next(&mut self) -> Option<LockEvent> {
        loop {
            match self.receiver.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(n)) => self.missed += n,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// How many events this subscriber skipped because it fell behind.
    pub fn missed(&self) -> u64 {
        self.missed
    }
}

/// How an acquire ended, for the `outcome` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Granted,
    /// A single try found the lock held.
    Refused,
    TimedOut,
    /// The client was shut down.
    Closed,
    Error,
    /// The acquire future was dropped.
    Cancelled,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Refused => "refused",
            Outcome::TimedOut => "timed_out",
            Outcome::Closed => "closed",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }
}

pub(crate) fn kind_label(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Exclusive => "exclusive",
        LockKind::Fair => "fair",
        LockKind::Read => "read",
        LockKind::Write => "write",
        LockKind::Permit => "permit",
        LockKind::Leader => "leader",
    }
}

fn reason_label(reason: &LeaseLoss) -> &'static str {
    match reason {
        LeaseLoss::Expired => "expired",
        LeaseLoss::Revoked => "revoked",
        LeaseLoss::SessionLost => "session_lost",
        LeaseLoss::RenewalFailed { .. } => "renewal_failed",
        LeaseLoss::Released => "released",
    }
}

/// A `warn` event about the lease of `$identity` (a [`LeaseIdentity`]) with the fields
/// every lock warning carries: the lock, its kind, backend, owner and token, and the
/// error.
macro_rules! warn_of_lease {
    ($identity:expr, $error:expr, $message:literal) => {
        tracing::warn!(
            lock = %$identity.key,
            kind = kind_label($identity.kind),
            backend = $identity.telemetry.backend,
            owner = %$identity.owner,
            token = $identity.fence(),
            error = %$error,
            $message
        )
    };
}

/// One client's metrics and events.
pub(crate) struct Telemetry {
    backend: &'static str,
    /// Whether metrics carry the lock's name (names can be unbounded: opt in).
    lock_names: bool,
    events: broadcast::Sender<LockEvent>,
    hooks: Vec<EventHook>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("backend", &self.backend)
            .field("lock_names", &self.lock_names)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

impl Telemetry {
    pub(crate) fn new(backend: &'static str, lock_names: bool, hooks: Vec<EventHook>) -> Self {
        Telemetry {
            backend,
            lock_names,
            events: broadcast::Sender::new(EVENT_BUFFER),
            hooks,
        }
    }

    pub(crate) fn subscribe(&self) -> LockEvents {
        LockEvents {
            receiver: self.events.subscribe(),
            missed: 0,
        }
    }

    fn labels(&self, key: &LockKey, kind: LockKind) -> Vec<Label> {
        // Room for the lock's name and one more label (an outcome, a reason), so that
        // adding them does not grow the vector again.
        let mut labels = Vec::with_capacity(4);
        labels.push(Label::new("backend", self.backend));
        labels.push(Label::new("kind", kind_label(kind)));
        if self.lock_names {
            labels.push(Label::new("lock", key.to_string()));
        }
        labels
    }

    /// An acquire call ended after `waited`.
    pub(crate) fn acquire_ended(
        &self,
        key: &LockKey,
        kind: LockKind,
        outcome: Outcome,
        waited: Duration,
    ) {
        let mut labels = self.labels(key, kind);
        labels.push(Label::new("outcome", outcome.label()));
        counter!("lock_acquire_total", labels.clone()).increment(1);
        histogram!("lock_wait_seconds", labels).record(waited.as_secs_f64());
    }

    /// Leases the watchdog renewed in one tick, and those whose renewal failed.
    pub(crate) fn renewals(&self, renewed: usize, failed: usize) {
        let labels = [Label::new("backend", self.backend)];
        if renewed > 0 {
            counter!("lock_renewals_total", labels.iter()).increment(renewed as u64);
        }
        if failed > 0 {
            counter!("lock_renewal_failures_total", labels.iter()).increment(failed as u64);
        }
    }

    /// Whether anyone takes events: a hook, or a subscriber. Without one, an event is
    /// not even built (two allocations on every grant and every release).
    fn wants_events(&self) -> bool {
        !self.hooks.is_empty() || self.events.receiver_count() > 0
    }

    fn emit(&self, event: LockEvent) {
        for hook in &self.hooks {
            hook(&event);
        }
        // Nobody subscribed is not an error.
        let _ = self.events.send(event);
    }
}

/// Who a lease is: every log line, metric and event about it names it from here.
#[derive(Debug)]
pub(crate) struct LeaseIdentity {
    pub(crate) key: LockKey,
    pub(crate) kind: LockKind,
    pub(crate) owner: OwnerToken,
    /// Set at the grant (0 before).
    fence: AtomicU64,
    granted_at: Mutex<Option<Instant>>,
    telemetry: Arc<Telemetry>,
}

impl LeaseIdentity {
    pub(crate) fn new(
        key: LockKey,
        kind: LockKind,
        owner: OwnerToken,
        telemetry: Arc<Telemetry>,
    ) -> Arc<Self> {
        Arc::new(LeaseIdentity {
            key,
            kind,
            owner,
            fence: AtomicU64::new(0),
            granted_at: Mutex::new(None),
            telemetry,
        })
    }

    pub(crate) fn fence(&self) -> u64 {
        self.fence.load(Ordering::Relaxed)
    }

    fn held(&self) -> Duration {
        self.granted_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(Duration::ZERO, |at| at.elapsed())
    }

    fn event(&self, what: LockEventKind) {
        if !self.telemetry.wants_events() {
            return;
        }
        self.telemetry.emit(LockEvent {
            what,
            lock: self.key.clone(),
            kind: self.kind,
            backend: self.telemetry.backend,
            owner: self.owner.to_string(),
            fencing_token: self.fence(),
        });
    }

    /// Granted with `fence` after waiting `waited`.
    pub(crate) fn granted(&self, fence: u64, waited: Duration) {
        self.fence.store(fence, Ordering::Relaxed);
        *self.granted_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.event(LockEventKind::Acquired { waited });
    }

    /// The lease ended; `reason` says why (a release, or a loss).
    pub(crate) fn ended(&self, reason: &LeaseLoss) {
        let held = self.held();
        let t = &self.telemetry;
        let labels = t.labels(&self.key, self.kind);
        histogram!("lock_hold_seconds", labels.clone()).record(held.as_secs_f64());
        if *reason == LeaseLoss::Released {
            self.event(LockEventKind::Released { held });
            return;
        }
        let mut with_reason = labels;
        with_reason.push(Label::new("reason", reason_label(reason)));
        counter!("lock_losses_total", with_reason).increment(1);
        tracing::warn!(
            lock = %self.key,
            kind = kind_label(self.kind),
            backend = t.backend,
            owner = %self.owner,
            token = self.fence(),
            %reason,
            "lease lost"
        );
        self.event(LockEventKind::Lost {
            reason: reason.clone(),
            held,
        });
    }

    /// A release could not be made (the lease expires on its own, or is retried).
    pub(crate) fn release_failed(&self, error: &crate::Error) {
        let t = &self.telemetry;
        counter!(
            "lock_release_failures_total",
            t.labels(&self.key, self.kind)
        )
        .increment(1);
        warn_of_lease!(self, error, "release failed");
    }

    /// A release that kept failing was given up; the lease expires on its own.
    pub(crate) fn release_abandoned(&self, error: &crate::Error) {
        warn_of_lease!(self, error, "gave up releasing; the lease will expire");
    }

    /// The first failed renewal of a run of them.
    pub(crate) fn renewal_failed(&self, error: &str) {
        warn_of_lease!(
            self,
            error,
            "lease renewal failed; retrying until the lease runs out"
        );
        self.event(LockEventKind::RenewalFailed {
            error: error.to_owned(),
        });
    }

    /// A renewal went through after `failures` failed ones.
    pub(crate) fn renewed_late(&self, failures: u32) {
        tracing::info!(
            lock = %self.key,
            kind = kind_label(self.kind),
            backend = self.telemetry.backend,
            owner = %self.owner,
            token = self.fence(),
            failures,
            "lease renewed after failed renewals"
        );
        self.event(LockEventKind::RenewedLate { failures });
    }
}
