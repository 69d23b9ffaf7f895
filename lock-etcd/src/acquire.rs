//! One acquisition: place the key, wait behind the predecessor, re-check, and clean up
//! however it ends.
//!
//! The whole acquisition runs in a task of its own and answers through a oneshot
//! channel. When the caller's future is dropped, the channel closes; the task notices
//! at its next wait, deletes its key (or revokes its fixed lease) and only then lets
//! the next owner of this client through the gate. A grant that arrives after the
//! caller left is released the same way. So a dropped acquire leaves nothing behind.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions};
use lock_core::backend::{
    AcquireRequest, Deadline, Grant, LossNotifier, OwnerToken, PendingCleanup,
};
use lock_core::{LockKey, LockKind, Result};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{EtcdLease, Inner};
use crate::error::{self, within};
use crate::gate::GatePermit;
use crate::keys::Prefix;
use crate::lease::Lease;
use crate::queries::{self, HeldWrite, Placed, Position};

/// How long etcd may take to catch up a watch that missed being registered as
/// current: its catch-up loop runs every 100 ms.
const CATCH_UP: Duration = Duration::from_millis(120);
/// How soon a waiter first looks for itself meanwhile; each later look waits twice as
/// long, so a thousand waiters arriving at once make a few looks each, not a storm.
const RECHECK: Duration = Duration::from_millis(8);
/// The first pause before a waiter asks a busy or briefly unreachable etcd again; it
/// doubles up to [`PATIENCE_MAX_PAUSE`].
const PATIENCE_PAUSE: Duration = Duration::from_millis(50);
const PATIENCE_MAX_PAUSE: Duration = Duration::from_secs(1);

type Reply = oneshot::Sender<Result<Option<Grant<EtcdLease>>>>;

/// A key this acquisition wrote.
struct Contender {
    key: String,
    /// Its create revision: its place in the queue, and the guard of its removal.
    revision: i64,
    /// The grant's fencing token: the create revision when granted on the first look,
    /// else the revision of a write at grant time (see [`queries::claim`] and
    /// [`queries::restamp`]).
    fence: i64,
    lease: Arc<Lease>,
}

/// What may cut one of a waiter's requests short (see [`Job::patiently_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interrupt {
    /// The caller leaving or the deadline passing, at any moment: for reads.
    Anytime,
    /// Only between requests: for writes, whose outcome must be known.
    BetweenRequests,
}

/// How a wait for the turn ended.
enum Turn {
    /// The contender holds the lock; a grant after a wait still needs its fence.
    Granted,
    /// The contender holds the lock, fenced by the revision of the claim that found it.
    Claimed(i64),
    /// Its own key is gone.
    Vanished,
}

/// How waiting ended, short of a grant.
enum Stop {
    Deadline,
    /// The caller dropped the acquire future.
    Abandoned,
    Failed(lock_core::Error),
}

impl From<lock_core::Error> for Stop {
    fn from(err: lock_core::Error) -> Self {
        Stop::Failed(err)
    }
}

/// Everything the task needs, owned.
struct Job {
    inner: Arc<Inner>,
    key: LockKey,
    kind: LockKind,
    /// A semaphore's count, for a permit.
    permits: u32,
    owner: OwnerToken,
    ttl: Duration,
    deadline: Deadline,
    /// The deadline had passed when the acquire began: look once, and let nothing but
    /// a conflicting key say no. Such a look may take a second request (keys of a
    /// nested lock name in the exclusive range), which must not count as waiting.
    try_once: bool,
    watchdog: bool,
    loss: LossNotifier,
    /// What the client says about itself, in the key's value.
    description: String,
}

/// Runs one acquisition in its own task; see the module docs.
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    req: AcquireRequest<'_>,
) -> Result<Option<Grant<EtcdLease>>> {
    let job = Job {
        inner: inner.clone(),
        key: req.key.clone(),
        kind: req.kind,
        permits: req.permits,
        owner: req.owner.clone(),
        ttl: req.ttl,
        deadline: req.deadline,
        try_once: req.deadline.has_passed(),
        watchdog: req.watchdog,
        loss: req.loss.clone(),
        description: req.holder.to_owned(),
    };
    let (tx, rx) = oneshot::channel();
    // If this future is dropped before the answer, the job cleans up after noticing:
    // count that from the drop on, so a shutdown right after it waits for the job.
    let abandoned = Arc::new(StdMutex::new(None));
    let mut answer = Answer {
        rx,
        abandoned: abandoned.clone(),
        inner: inner.clone(),
        prefix: Prefix::new(req.key, req.kind.family()),
        owner: req.owner.clone(),
        read: false,
    };
    let run = job.run(tx);
    tokio::spawn(async move {
        run.await;
        drop(abandoned);
    });
    let outcome = (&mut answer.rx)
        .await
        .map_err(|_| error::unexpected("the acquire task ended without an answer"));
    answer.read = true;
    outcome?
}

/// The caller's end of the job's answer. If the caller's future is dropped before it
/// read the answer:
/// * a job still running cleans up once it notices, so it counts as a clean-up from
///   the drop on (the job and this share `abandoned`; whichever lets go last drops the
///   count), and a shutdown right after waits for it;
/// * a grant the job already sent (a timeout racing the grant) would be taken as
///   delivered, so this gives it back, in the background, as the job does for a grant
///   whose caller had already gone.
struct Answer {
    rx: oneshot::Receiver<Result<Option<Grant<EtcdLease>>>>,
    abandoned: Arc<StdMutex<Option<PendingCleanup>>>,
    inner: Arc<Inner>,
    prefix: Prefix,
    owner: OwnerToken,
    read: bool,
}

impl Drop for Answer {
    fn drop(&mut self) {
        if self.read {
            return;
        }
        if Arc::strong_count(&self.abandoned) > 1 {
            *self.abandoned.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(self.inner.cleanups.begin());
        }
        // From here on the job's send fails, and the job gives the grant back itself.
        self.rx.close();
        let Ok(Ok(Some(grant))) = self.rx.try_recv() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::debug!(key = %grant.data.key(), "acquire dropped with its grant unread; releasing");
        let (inner, prefix, owner) = (self.inner.clone(), self.prefix.clone(), self.owner.clone());
        let cleanups = inner.cleanups.clone();
        cleanups.spawn_on(&runtime, async move {
            give_back(&inner, &prefix, &owner, grant).await;
        });
    }
}

/// Removes the key of a grant nobody will hold, then lets the next owner of this
/// client through the gate.
async fn give_back(inner: &Inner, prefix: &Prefix, owner: &OwnerToken, grant: Grant<EtcdLease>) {
    let fence = grant.fence as i64;
    let revision = grant.data.revision();
    let (key, lease, gate) = grant.data.into_parts();
    inner.writes.forget_key(prefix, owner, &key, revision);
    let contender = Contender {
        key,
        revision,
        fence,
        lease,
    };
    contender.clean_up(inner).await;
    drop(gate);
}

impl Job {
    async fn run(self, mut reply: Reply) {
        let prefix = Prefix::new(&self.key, self.kind.family());
        // Owners sharing the session lease would share the exclusive key: one at a time.
        // An election's key is the exclusive lock's (etcd's layout): the same turns.
        let one_key = matches!(self.kind, LockKind::Exclusive | LockKind::Leader);
        let gate = if one_key && self.watchdog {
            tokio::select! {
                permit = self.inner.gates.enter(prefix.range(), self.deadline, &*self.inner) => match permit {
                    Some(permit) => Some(permit),
                    None => {
                        let _ = reply.send(Ok(None));
                        return;
                    }
                },
                () = reply.closed() => return,
            }
        } else {
            None
        };
        match self.contend(&prefix, &mut reply).await {
            Ok(contender) => self.grant(contender, gate, reply).await,
            Err((stop, mut contender)) => {
                match stop {
                    Stop::Abandoned => {}
                    Stop::Deadline => {
                        // Remove our key before saying so, as etcd's own client does: a
                        // program that ends right after a timeout must not leave it
                        // queued ahead of everyone until the lease runs out. One try,
                        // bounded: the retries below wait while etcd is down.
                        if let Some(placed) = &contender {
                            if placed.remove(&self.inner).await.is_ok() {
                                contender = None;
                            }
                        }
                        let _ = reply.send(Ok(None));
                    }
                    Stop::Failed(err) => {
                        // Answer first: removing the key may take retries.
                        let _ = reply.send(Err(err));
                    }
                }
                if let Some(contender) = contender {
                    contender.clean_up(&self.inner).await;
                }
                // Only now may the next owner of this client write the same key.
                drop(gate);
            }
        }
    }

    /// Hands the grant over, or takes it back if the caller has gone.
    async fn grant(self, contender: Contender, gate: Option<GatePermit>, reply: Reply) {
        contender.lease.watch(self.loss.clone());
        let Contender {
            key,
            revision,
            fence,
            lease,
        } = contender;
        let prefix = Prefix::new(&self.key, self.kind.family());
        if self.kind == LockKind::Write {
            // Before the caller hears of it: its read requests are downgrades from now.
            let write = HeldWrite {
                key: key.clone(),
                revision,
            };
            self.inner.writes.register(&prefix, &self.owner, write);
        }
        let value = self.value();
        let grant = Grant {
            fence: fence.unsigned_abs(),
            // etcd keeps the lease until `kept_until`: count the ttl back from there.
            started_at: lease
                .kept_until()
                .checked_sub(self.ttl)
                .unwrap_or_else(tokio::time::Instant::now),
            data: EtcdLease::new(
                &self.inner,
                key,
                revision,
                value,
                lease,
                gate,
                self.loss.clone(),
            ),
        };
        if let Err(Ok(Some(grant))) = reply.send(Ok(Some(grant))) {
            tracing::debug!(key = %grant.data.key(), "acquire abandoned after it was granted; releasing");
            give_back(&self.inner, &prefix, &self.owner, grant).await;
        }
    }

    /// The owner token and the client's description, for operators and `inspect`
    /// (etcd's recipe reads keys and revisions only; `etcdctl lock` leaves it empty).
    fn value(&self) -> Vec<u8> {
        if self.kind == LockKind::Leader {
            // The campaign's value alone, as etcd's `Election` writes it.
            return self.description.clone().into_bytes();
        }
        crate::inspect::value(self.owner.as_str(), &self.description)
    }

    /// Places a key and waits until it is first, the deadline passes or the caller
    /// leaves. A key that vanishes while waiting (its lease ended, or the lock was
    /// force-unlocked) is replaced by a new one at the back of the queue.
    /// On failure, returns what is left to clean up.
    async fn contend(
        &self,
        prefix: &Prefix,
        reply: &mut Reply,
    ) -> Result<Contender, (Stop, Option<Contender>)> {
        loop {
            let (mut contender, position) = self.place(prefix, reply).await?;
            let waited = position != Position::Granted;
            let held = match self.wait(prefix, &contender, position, reply).await {
                Ok(Turn::Claimed(fence)) => {
                    contender.fence = fence;
                    Ok(true)
                }
                Ok(Turn::Granted) if waited => self.restamp(&mut contender).await,
                Ok(Turn::Granted) => Ok(true),
                Ok(Turn::Vanished) => Ok(false),
                Err(stop) => Err(stop),
            };
            match held {
                Ok(true) => return Ok(contender),
                Ok(false) => {
                    tracing::debug!(key = %contender.key, "own key vanished while waiting; queueing again");
                    if !contender.lease.is_session() {
                        contender.clean_up(&self.inner).await;
                    }
                }
                Err(stop) => return Err((stop, Some(contender))),
            }
        }
    }

    /// Takes a lease and writes the key: one transaction when the session is fresh.
    /// A read request of the owner of the write lock writes a downgrade reader, as
    /// long as the write key is still there (else an ordinary reader). A write etcd
    /// does not answer in time is asked again, [`patiently`](Self::patiently): under
    /// load the queue's first write is as slow as any later request.
    /// On failure, returns what may need cleaning up.
    async fn place(
        &self,
        prefix: &Prefix,
        reply: &mut Reply,
    ) -> Result<(Contender, Position), (Stop, Option<Contender>)> {
        let inner = &self.inner;
        let timeout = inner.config.request_timeout();
        let mut downgrade = match self.kind {
            LockKind::Read => inner.writes.held(prefix, &self.owner),
            _ => None,
        };
        loop {
            let lease = if self.watchdog {
                inner.leases.session(&inner.client, timeout, self.ttl).await
            } else {
                inner.leases.fixed(&inner.client, timeout, self.ttl).await
            };
            let lease = lease.map_err(|err| (Stop::Failed(err), None))?;
            // Attempts on this lease; a lease found gone takes a new one.
            loop {
                let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
                let key = match downgrade {
                    Some(_) => prefix.downgrade_key(lease.id(), seq),
                    None => prefix.own_key(self.kind, lease.id(), seq, self.permits),
                };
                // What to clean up if this attempt ends the wait: the write may have
                // landed unanswered.
                let placing = Contender {
                    key,
                    revision: 0,
                    fence: 0,
                    lease: lease.clone(),
                };
                let value = self.value();
                // Asked again with the same key: one that landed unanswered before is
                // found `Exists` and replaced, never queued twice.
                let write = || async {
                    let key = &placing.key;
                    let txn = match self.kind {
                        LockKind::Permit => {
                            queries::place_permit(prefix, key, &value, lease.id(), self.permits)
                        }
                        kind => queries::place(
                            prefix,
                            kind,
                            key,
                            &value,
                            lease.id(),
                            downgrade.as_ref(),
                        ),
                    };
                    let reply = inner.txn("acquire", txn).await?;
                    match self.kind {
                        LockKind::Permit => {
                            queries::placed_permit(&reply, prefix, &self.key, self.permits)
                        }
                        kind => queries::placed(&reply, kind, key, downgrade.is_some()),
                    }
                };
                // A write dropped in flight could land after the clean-up's delete:
                // it runs to its answer (or its timeout) whatever the caller does.
                let placed = self
                    .patiently_as(&placing, reply, write, Interrupt::BetweenRequests)
                    .await;
                match placed {
                    Ok(Placed::At { revision, position }) => {
                        let contender = Contender {
                            revision,
                            fence: revision,
                            ..placing
                        };
                        return Ok((contender, position));
                    }
                    Ok(Placed::Exists { revision }) => {
                        tracing::debug!(key = %placing.key, revision, "removing a leftover key of this lease");
                        let removal = queries::delete_if(placing.key.as_bytes(), revision);
                        if let Err(err) = inner.txn("remove leftover", removal).await {
                            // The clean-up removes it, asking again.
                            let left = Contender {
                                revision,
                                fence: revision,
                                ..placing
                            };
                            return Err((Stop::Failed(err), Some(left)));
                        }
                    }
                    Ok(Placed::WriteGone) => {
                        tracing::debug!(key = %placing.key, "the write lock went before its downgrade; reading as an ordinary reader");
                        downgrade = None;
                    }
                    Err(Stop::Failed(err)) if error::is_lease_gone(&err) => {
                        lease.lost();
                        break;
                    }
                    Err(stop) => return Err((stop, Some(placing))),
                }
            }
        }
    }

    /// Draws a fresh revision for a grant that came after a wait (`Ok(true)`), or finds
    /// the key gone (`Ok(false)`: its lease ended meanwhile, etcd #11456).
    async fn restamp(&self, contender: &mut Contender) -> Result<bool, Stop> {
        let txn = queries::restamp(
            contender.key.as_bytes(),
            contender.revision,
            &self.value(),
            contender.lease.id(),
        );
        let reply = self.inner.txn("fence", txn).await?;
        if !reply.succeeded() {
            return Ok(false);
        }
        if self.kind == LockKind::Leader {
            // A term is the leader key's create revision, which every reader of the
            // election (etcdctl's too) sees; queue order makes it increase.
            return Ok(true);
        }
        contender.fence = reply
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| error::unexpected("a write's answer had no revision"))?;
        Ok(true)
    }

    /// Waits until `contender` holds the lock or its key vanished.
    async fn wait(
        &self,
        prefix: &Prefix,
        contender: &Contender,
        mut position: Position,
        reply: &mut Reply,
    ) -> Result<Turn, Stop> {
        // Made once for the whole wait: the events it passes over (a holder's extend or
        // a leader's proclaim writes the watched key) and its wake-ups must not put off
        // the refresh of this waiter's lease, or it runs out while the waiter waits.
        let refresh = tokio::time::sleep(contender.lease.refresh_interval());
        tokio::pin!(refresh);
        loop {
            // What to watch: the predecessor's key, or for the first permit waiter,
            // the deletions of the whole range.
            let watched = match &position {
                Position::Granted => return Ok(Turn::Granted),
                Position::Vanished => return Ok(Turn::Vanished),
                Position::Unknown => {
                    position = self
                        .patiently(contender, reply, || self.locate(prefix, contender))
                        .await?;
                    continue;
                }
                Position::Behind(key) => (key.clone(), None),
                Position::First => {
                    let deletions = WatchOptions::new()
                        .with_prefix()
                        .with_filters([WatchFilterType::NoPut]);
                    (prefix.range().as_bytes().to_vec(), Some(deletions))
                }
            };
            let waiting_at = position.clone();
            if self.deadline.has_passed() {
                return Err(Stop::Deadline);
            }
            // Watch from now (a watcher from a past revision is caught up only every
            // 100 ms: the handoff tail of etcd's own lock service), then check the
            // predecessor is still there: it may have gone before the watch existed.
            let (mut watch, watch_revision) = self
                .patiently(contender, reply, || {
                    self.inner.watch(&watched.0, watched.1.clone())
                })
                .await?;
            let watched_at = Instant::now();
            let (now, revision) = self
                .patiently(contender, reply, || self.locate_at(prefix, contender))
                .await?;
            position = now;
            if position != waiting_at {
                continue;
            }
            // etcd registers a watch "from now" as caught up only if no write lands
            // between its reading the revision and registering the watch; otherwise the
            // watch waits for etcd's 100 ms catch-up loop. A write seen after the
            // watch's revision makes that possible, so look again every few
            // milliseconds until etcd has surely caught the watch up.
            let unsure = revision > watch_revision;
            let mut recheck_after = RECHECK;
            loop {
                let recheck = async {
                    if unsure && watched_at.elapsed() < CATCH_UP {
                        tokio::time::sleep(recheck_after).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    () = reply.closed() => return Err(Stop::Abandoned),
                    () = self.deadline.sleep() => return Err(Stop::Deadline),
                    message = watch.message() => match message {
                        Ok(Some(event)) if !event.canceled() => {
                            // A permit waiter's predecessor re-stamped its key: it was
                            // granted, so this one may be the first waiter now.
                            let granted = |e: &etcd_client::Event| {
                                self.kind == LockKind::Permit && e.event_type() == EventType::Put
                            };
                            if event.events().iter().any(|e| e.event_type() == EventType::Delete || granted(e)) {
                                self.inner.wakeups.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                        }
                        // Cancelled, closed or failed: look again (an outage shows as an error there).
                        _ => break,
                    },
                    () = recheck => {
                        recheck_after *= 2;
                        if self.moved(prefix, contender, &waiting_at).await {
                            break;
                        }
                    }
                    () = &mut refresh => {
                        refresh
                            .as_mut()
                            .reset(Instant::now() + contender.lease.refresh_interval());
                        // Nobody may be renewing the lease while this client only waits.
                        let timeout = self.inner.config.request_timeout();
                        match contender.lease.keep_fresh(&self.inner.client, timeout).await {
                            // A permit waiter looks again: a predecessor granted by the
                            // count but stalled before its re-stamp must not hold it up
                            // until that predecessor's lease ends.
                            Ok(true) if self.kind == LockKind::Permit => {
                                if self.moved(prefix, contender, &waiting_at).await {
                                    break;
                                }
                            }
                            Ok(true) => {}
                            Ok(false) => return Ok(Turn::Vanished),
                            // A slow etcd: try again at the next refresh while the
                            // lease surely lasts.
                            Err(err) if err.is_retryable()
                                && Instant::now() + contender.lease.refresh_interval()
                                    < contender.lease.kept_until() => {}
                            Err(err) => return Err(err.into()),
                        }
                    }
                }
            }
            drop(watch);
            if !self.claims() {
                position = self
                    .patiently(contender, reply, || self.locate(prefix, contender))
                    .await?;
                continue;
            }
            // One request both looks and, for a waiter found first, fences the grant.
            let (now, fence) = self
                .patiently(contender, reply, || self.claim(prefix, contender))
                .await?;
            if let Some(fence) = fence {
                return Ok(Turn::Claimed(fence));
            }
            position = now;
        }
    }

    /// Whether a wake-up looks with [`queries::claim`] rather than
    /// [`queries::locate`].
    fn claims(&self) -> bool {
        matches!(
            self.kind,
            LockKind::Exclusive | LockKind::Fair | LockKind::Read | LockKind::Write
        )
    }

    /// Where the contender stands after a wake-up and, if first, its grant's fence;
    /// see [`queries::claim`].
    async fn claim(
        &self,
        prefix: &Prefix,
        contender: &Contender,
    ) -> Result<(Position, Option<i64>)> {
        let txn = queries::claim(prefix, self.kind, &contender.key, contender.revision);
        let reply = self.inner.txn("claim", txn).await?;
        match queries::claimed(&reply, prefix, contender.revision) {
            // Keys of a nested lock name in the way: the write proves nothing, and a
            // grant found by the scan is fenced afterwards.
            (Position::Unknown, _) => Ok((self.scan(prefix, contender).await?, None)),
            answer => Ok(answer),
        }
    }

    /// Runs one of a waiter's requests to etcd, asking again after a retryable failure
    /// (no answer in time, etcd busy or briefly unreachable) for as long as the
    /// waiter's key surely still stands, that is while its lease is kept, and its
    /// deadline has not passed. Under load, with a thousand waiters, a request can
    /// take longer than the request timeout; the waiter keeps its place through that
    /// rather than failing. An etcd gone for longer than the lease still ends the wait
    /// with the error. A single try ([`Job::try_once`]) asks once and does not race its
    /// passed deadline.
    async fn patiently<T, Fut>(
        &self,
        contender: &Contender,
        reply: &mut Reply,
        request: impl Fn() -> Fut,
    ) -> Result<T, Stop>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.patiently_as(contender, reply, request, Interrupt::Anytime)
            .await
    }

    /// [`patiently`](Self::patiently), with `interrupt` saying whether a caller gone or
    /// a deadline passed may cut a request short, or only the pause between two.
    async fn patiently_as<T, Fut>(
        &self,
        contender: &Contender,
        reply: &mut Reply,
        request: impl Fn() -> Fut,
        interrupt: Interrupt,
    ) -> Result<T, Stop>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut pause = PATIENCE_PAUSE;
        loop {
            let deadline = async {
                if self.try_once || interrupt == Interrupt::BetweenRequests {
                    std::future::pending::<()>().await;
                } else {
                    self.deadline.sleep().await;
                }
            };
            let closed = async {
                match interrupt {
                    Interrupt::Anytime => reply.closed().await,
                    Interrupt::BetweenRequests => std::future::pending().await,
                }
            };
            let err = tokio::select! {
                outcome = request() => match outcome {
                    Ok(value) => return Ok(value),
                    Err(err) => err,
                },
                () = closed => return Err(Stop::Abandoned),
                () = deadline => return Err(Stop::Deadline),
            };
            let kept = contender.lease.kept_until();
            if self.try_once
                || !err.is_retryable()
                || contender.lease.is_dead()
                || Instant::now() + pause >= kept
            {
                return Err(Stop::Failed(err));
            }
            tracing::debug!(key = %contender.key, error = %err, "etcd did not answer a waiter; asking again");
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = reply.closed() => return Err(Stop::Abandoned),
                () = self.deadline.sleep() => return Err(Stop::Deadline),
            }
            pause = (pause * 2).min(PATIENCE_MAX_PAUSE);
            // The key hangs on the lease: keep it while etcd is slow to answer.
            let timeout = self.inner.config.request_timeout();
            // A lease found gone ends the patience at the next failure, or the next
            // look finds the key vanished.
            let _ = contender
                .lease
                .keep_fresh(&self.inner.client, timeout)
                .await;
        }
    }

    /// Whether a look finds the contender anywhere but `at`. A failed look counts as
    /// moved: the caller looks again, patiently.
    async fn moved(&self, prefix: &Prefix, contender: &Contender, at: &Position) -> bool {
        !matches!(self.locate(prefix, contender).await, Ok(now) if now == *at)
    }

    async fn locate(&self, prefix: &Prefix, contender: &Contender) -> Result<Position> {
        Ok(self.locate_at(prefix, contender).await?.0)
    }

    /// Where the contender stands now, and at which revision; one transaction (two if
    /// keys of a nested lock name are in the way).
    async fn locate_at(&self, prefix: &Prefix, contender: &Contender) -> Result<(Position, i64)> {
        let (key, created) = (&contender.key, contender.revision);
        let txn = match self.kind {
            LockKind::Permit => queries::locate_permit(prefix, key, created, self.permits),
            kind => queries::locate(prefix, kind, key, created),
        };
        let reply = self.inner.txn("check position", txn).await?;
        let position = match self.kind {
            LockKind::Permit => queries::located_permit(&reply, created, self.permits),
            _ => queries::located(&reply, prefix, created),
        };
        let revision = reply.header().map_or(i64::MAX, |h| h.revision());
        if position != Position::Unknown {
            return Ok((position, revision));
        }
        Ok((self.scan(prefix, contender).await?, revision))
    }

    /// Where the contender stands, found among every key of the range created before
    /// it: for when keys of a nested lock name are in the way.
    async fn scan(&self, prefix: &Prefix, contender: &Contender) -> Result<Position> {
        let (range, options) = queries::scan(prefix, contender.revision);
        let mut kv = self.inner.client.kv_client();
        let timeout = self.inner.config.request_timeout();
        let found = within("scan contenders", timeout, kv.get(range, Some(options))).await?;
        Ok(queries::scanned(found.kvs(), prefix))
    }
}

impl Contender {
    /// Removes what an acquisition wrote: revokes a fixed lease (etcd deletes its one
    /// key), or deletes the key from the session lease, guarded by its revision when
    /// known. Retried, with backoff, for as long as etcd may still keep the lease the
    /// key hangs on: a key left on the session lease would block others for as long as
    /// this client keeps that lease alive, which it does while it holds any lock.
    async fn clean_up(&self, inner: &Inner) {
        let mut attempt = 0u32;
        loop {
            let err = match self.remove(inner).await {
                Ok(()) => return,
                Err(err) => err,
            };
            let lease = &self.lease;
            // A session lease found gone took the key with it. (A fixed lease is marked
            // dead by the revoke being tried: it goes when it runs out.)
            let gone = lease.is_session() && lease.is_dead();
            if gone || Instant::now() >= lease.may_live_until() {
                tracing::debug!(key = %self.key, error = %err, "could not remove an abandoned key; it went with its lease");
                return;
            }
            tracing::debug!(key = %self.key, error = %err, attempt, "could not remove an abandoned key; retrying");
            tokio::time::sleep(Duration::from_millis(100) * 2u32.pow(attempt.min(5))).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// One try at removing what an acquisition wrote (see [`Contender::clean_up`]), bounded
    /// by the request timeout.
    async fn remove(&self, inner: &Inner) -> Result<()> {
        let timeout = inner.config.request_timeout();
        if !self.lease.is_session() {
            self.lease.revoke(&inner.client, timeout).await
        } else if self.revision > 0 {
            inner
                .txn(
                    "clean up",
                    queries::delete_if(self.key.as_bytes(), self.revision),
                )
                .await
                .map(drop)
        } else {
            // The write's outcome is unknown. The key is this acquisition's alone:
            // fair and read-write keys are unique, and the gate keeps other owners of
            // this client off the exclusive key meanwhile.
            let mut kv = inner.client.kv_client();
            within("clean up", timeout, kv.delete(self.key.as_str(), None))
                .await
                .map(drop)
        }
    }
}
