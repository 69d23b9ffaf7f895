//! etcd leases: the client's one session lease that every watchdog-kept lock shares,
//! and the fixed leases of single acquisitions.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use lock_core::backend::LossNotifier;
use lock_core::{LeaseLoss, Result};
use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;

use crate::error::{self, within};
use crate::gate::GateSlot;

/// The session lease outlives the watchdog lease by this fraction, so an acquire finds
/// it fresh enough (etcd keeps it at least one watchdog lease longer) for a third of a
/// lease after each keep-alive, without a keep-alive of its own.
const SESSION_MARGIN_DIVISOR: u32 = 3;

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every update under these mutexes is a single assignment or push.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whole seconds, rounded up: etcd's TTLs are whole seconds, and rounding down would
/// let etcd drop a lease the client still counts as held.
fn whole_seconds(d: Duration) -> i64 {
    let secs = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// One etcd lease and what the client knows of it.
pub(crate) struct Lease {
    id: i64,
    /// The TTL etcd granted (it raises a TTL below its minimum, about 2 s).
    granted: Duration,
    /// For a session lease, the watchdog lease it serves; `None` for a fixed lease.
    session_for: Option<Duration>,
    /// When the last successful keep-alive (or the grant) was sent: etcd keeps the
    /// lease at least until this plus `granted`.
    refreshed_at: StdMutex<Instant>,
    /// When the last keep-alive was sent, answered or not: etcd may keep the lease
    /// until this plus `granted`.
    attempted_at: StdMutex<Instant>,
    /// The keep-alive stream, opened on first use and reopened after a failure.
    keeper: AsyncMutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
    dead: AtomicBool,
    /// The guards of grants on this lease, told when the lease is found gone.
    notifiers: StdMutex<Vec<LossNotifier>>,
    /// The turns of this client's owners whose keys hang on this lease.
    gates: StdMutex<Vec<Weak<GateSlot>>>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("id", &format_args!("{:x}", self.id))
            .field("granted", &self.granted)
            .field("session", &self.session_for.is_some())
            .field("dead", &self.is_dead())
            .finish()
    }
}

impl Lease {
    /// Grants a lease of at least `ttl` (rounded up to whole seconds).
    async fn grant(
        client: &Client,
        timeout: Duration,
        ttl: Duration,
        session_for: Option<Duration>,
    ) -> Result<Arc<Lease>> {
        let sent = Instant::now();
        let mut leases = client.lease_client();
        let reply = within(
            "lease grant",
            timeout,
            leases.grant(whole_seconds(ttl), None),
        )
        .await?;
        if !reply.error().is_empty() || reply.ttl() <= 0 {
            return Err(error::unexpected(format!(
                "lease grant answered ttl {} error {:?}",
                reply.ttl(),
                reply.error()
            )));
        }
        let granted = Duration::from_secs(reply.ttl().unsigned_abs());
        tracing::debug!(
            lease = format_args!("{:x}", reply.id()),
            ?granted,
            session = session_for.is_some(),
            "lease granted"
        );
        Ok(Arc::new(Lease {
            id: reply.id(),
            granted,
            session_for,
            refreshed_at: StdMutex::new(sent),
            attempted_at: StdMutex::new(sent),
            keeper: AsyncMutex::new(None),
            dead: AtomicBool::new(false),
            notifiers: StdMutex::new(Vec::new()),
            gates: StdMutex::new(Vec::new()),
        }))
    }

    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// For a session lease, the watchdog lease it serves.
    pub(crate) fn session_for(&self) -> Option<Duration> {
        self.session_for
    }

    pub(crate) fn is_session(&self) -> bool {
        self.session_for.is_some()
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// The earliest moment etcd may drop this lease, as far as the client knows.
    pub(crate) fn kept_until(&self) -> Instant {
        *lock(&self.refreshed_at) + self.granted
    }

    /// The latest moment etcd may still keep this lease, as far as the client knows:
    /// a keep-alive whose answer never came may have renewed it.
    pub(crate) fn may_live_until(&self) -> Instant {
        let attempted = *lock(&self.attempted_at) + self.granted;
        attempted.max(self.kept_until())
    }

    /// How often a waiter refreshes the lease its key hangs on.
    pub(crate) fn refresh_interval(&self) -> Duration {
        self.granted / 3
    }

    /// Reports a grant's guard when this lease is found gone.
    pub(crate) fn watch(&self, notifier: LossNotifier) {
        let mut notifiers = lock(&self.notifiers);
        notifiers.retain(LossNotifier::is_live);
        notifiers.push(notifier);
    }

    /// Ends the turn kept in `gate` if this lease is lost: the key it guards is gone
    /// with the lease, and the next owner of this client must not wait for the stale
    /// guard to be dropped.
    pub(crate) fn open_on_loss(&self, gate: Weak<GateSlot>) {
        if self.is_dead() {
            if let Some(gate) = gate.upgrade() {
                lock(&gate).take();
            }
            return;
        }
        let mut gates = lock(&self.gates);
        gates.retain(|g| g.strong_count() > 0);
        gates.push(gate);
    }

    /// The lease is gone: every guard on it learns it now, not at its next renewal.
    pub(crate) fn lost(&self) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(
            lease = format_args!("{:x}", self.id),
            "etcd lease is gone; its locks are lost"
        );
        for notifier in lock(&self.notifiers).drain(..) {
            notifier.notify(LeaseLoss::SessionLost);
        }
        let gates: Vec<_> = lock(&self.gates).drain(..).collect();
        for gate in gates.iter().filter_map(Weak::upgrade) {
            lock(&gate).take();
        }
    }

    /// Sends one keep-alive and waits for its answer. `Ok(false)` if etcd no longer
    /// has the lease (then every guard on it has been told).
    pub(crate) async fn keep_alive(&self, client: &Client, timeout: Duration) -> Result<bool> {
        if self.is_dead() {
            return Ok(false);
        }
        let mut slot = self.keeper.lock().await;
        // Taken out while in use: if this call is cancelled or fails, the stream is
        // dropped, so a late answer is never read as the answer to a later keep-alive.
        let stream = slot.take();
        let sent = Instant::now();
        *lock(&self.attempted_at) = sent;
        let outcome = within("lease keep-alive", timeout, async {
            match stream {
                Some((mut keeper, mut stream)) => {
                    keeper.keep_alive().await?;
                    match stream.message().await? {
                        Some(reply) => Ok((reply.ttl() > 0).then_some((keeper, stream))),
                        None => Err(etcd_client::Error::LeaseKeepAliveError(
                            "keep-alive stream closed".into(),
                        )),
                    }
                }
                // Opening the stream sends the first keep-alive and reads its answer.
                None => client.lease_client().keep_alive(self.id).await.map(Some),
            }
        })
        .await;
        match outcome {
            Ok(Some(stream)) => {
                *slot = Some(stream);
                *lock(&self.refreshed_at) = sent;
                Ok(true)
            }
            Ok(None) => {
                self.lost();
                Ok(false)
            }
            Err(err) if error::is_lease_gone(&err) => {
                self.lost();
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Keeps the lease alive while a waiter's key hangs on it and nobody else renews
    /// it: a keep-alive once a third of the TTL has passed since the last one.
    pub(crate) async fn keep_fresh(&self, client: &Client, timeout: Duration) -> Result<bool> {
        let since = lock(&self.refreshed_at).elapsed();
        if since < self.refresh_interval() {
            return Ok(!self.is_dead());
        }
        self.keep_alive(client, timeout).await
    }

    /// Revokes the lease: etcd deletes every key on it.
    pub(crate) async fn revoke(&self, client: &Client, timeout: Duration) -> Result<()> {
        self.dead.store(true, Ordering::Release);
        let mut leases = client.lease_client();
        match within("lease revoke", timeout, leases.revoke(self.id)).await {
            Err(err) if !error::is_lease_gone(&err) => Err(err),
            _ => Ok(()),
        }
    }
}

/// The client's leases: one session lease per watchdog lease length (a client has
/// one), granted on first use and replaced when found gone.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    sessions: AsyncMutex<HashMap<Duration, Arc<Lease>>>,
}

impl Leases {
    /// The session lease for watchdog-kept locks of `ttl`, fresh enough that etcd
    /// keeps it at least `ttl` from now: lock-core counts the lease from the moment the
    /// acquire was sent, and etcd must not drop it earlier than that.
    ///
    /// Its TTL is `ttl` plus a third, rounded up to whole seconds: the watchdog keeps
    /// it alive every third of `ttl`, so an acquire in between finds it fresh and
    /// needs no keep-alive of its own.
    pub(crate) async fn session(
        &self,
        client: &Client,
        timeout: Duration,
        ttl: Duration,
    ) -> Result<Arc<Lease>> {
        let mut sessions = self.sessions.lock().await;
        if let Some(lease) = sessions.get(&ttl).cloned() {
            if !lease.is_dead() && lease.kept_until() >= Instant::now() + ttl {
                return Ok(lease);
            }
            if lease.keep_alive(client, timeout).await? {
                return Ok(lease);
            }
            sessions.remove(&ttl);
        }
        let lease_ttl = ttl + ttl / SESSION_MARGIN_DIVISOR;
        let lease = Lease::grant(client, timeout, lease_ttl, Some(ttl)).await?;
        sessions.insert(ttl, lease.clone());
        Ok(lease)
    }

    /// A new lease of its own for one acquisition with a fixed lease of `ttl`.
    pub(crate) async fn fixed(
        &self,
        client: &Client,
        timeout: Duration,
        ttl: Duration,
    ) -> Result<Arc<Lease>> {
        Lease::grant(client, timeout, ttl, None).await
    }

    /// The live session leases (to revoke when the backend goes away).
    pub(crate) fn sessions_now(&self) -> Vec<Arc<Lease>> {
        match self.sessions.try_lock() {
            Ok(sessions) => sessions
                .values()
                .filter(|l| !l.is_dead())
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The session lease id for watchdog leases of `ttl`, if there is one (diagnostics).
    pub(crate) async fn session_id(&self, ttl: Duration) -> Option<i64> {
        self.sessions
            .lock()
            .await
            .get(&ttl)
            .filter(|l| !l.is_dead())
            .map(|l| l.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(2000)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(2001)), 3);
        assert_eq!(whole_seconds(Duration::MAX), i64::MAX);
    }
}
