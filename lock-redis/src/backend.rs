//! [`RedisBackend`]: the lock-core primitive on one Redis server.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Capabilities, Error, LockFamily, LockInfo, LockKey, Result};

use lock_core::backend::{AcquireRequest, Grant, HeldLease, LockBackend, Renewal};
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio::time::Instant;

use crate::calls::{self, Invocation, Request, Undo};
use crate::config::{RedisConfig, ReplicaAcks, TooFewReplicas};
use crate::error::{self as err, BACKEND};
use crate::holder_watch::HolderWatch;
use crate::keys::{lease_value, Keys, RedisLease, Stored};
use crate::node::Node;
use crate::scripts::{Attempt, Blocker};

/// Leases per renewal script call; larger batches are split so one call never blocks
/// the server for long.
pub(crate) const RENEW_CHUNK: usize = 1000;

/// Locks on one Redis server (or one primary with its replicas; see the crate docs for
/// what a failover means).
///
/// Cloning is cheap and shares the connections: one multiplexed command connection
/// and one pub/sub connection, both made on first use and remade after a failure.
///
/// ```no_run
/// use lock_core::{DistributedLockExt, LockClient};
/// use lock_redis::RedisBackend;
///
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// let backend = RedisBackend::connect_url("redis://127.0.0.1:6379").await?;
/// let client = LockClient::new(backend);
/// let guard = client.lock("orders/42")?.acquire().await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    node: Node,
    next_waiter: Arc<AtomicU64>,
    /// This backend's random id: its waiters' ids start with it, and an exclusive
    /// lock's releases reach them on a channel of the lock named after it.
    inbox: Arc<str>,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", self.node.config())
            .finish()
    }
}

impl RedisBackend {
    /// A backend for the server `config` describes. No I/O: connections are made on
    /// first use, so an unreachable server shows up as [`Error::Unavailable`] from the
    /// first lock call.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a setting that is out of range, or if the
    /// settings cannot make a client.
    pub fn new(config: RedisConfig) -> Result<Self> {
        Ok(RedisBackend {
            node: Node::new(config)?,
            next_waiter: Arc::new(AtomicU64::new(1)),
            inbox: format!("{:016x}", rand::random::<u64>()).into(),
        })
    }

    /// A backend whose server has answered a `PING`.
    ///
    /// ```no_run
    /// # use lock_redis::{RedisBackend, RedisConfig};
    /// # #[tokio::main] async fn main() -> lock_core::Result<()> {
    /// let backend = RedisBackend::connect(RedisConfig::from_url("redis://127.0.0.1")?).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad settings; [`Error::Unavailable`] if the server
    /// does not answer within the connect and request timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is held yet.
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        let backend = RedisBackend::new(config)?;
        backend.ping().await?;
        Ok(backend)
    }

    /// [`connect`](Self::connect) with [`RedisConfig::from_url`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid URL, else as [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        RedisBackend::connect(RedisConfig::from_url(url)?).await
    }

    /// Sends a `PING` on the command connection.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the server does not answer in time.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn ping(&self) -> Result<()> {
        let _: String = self.node.query("PING", &redis::cmd("PING")).await?;
        Ok(())
    }

    /// The settings this backend was made with.
    pub fn config(&self) -> &RedisConfig {
        self.node.config()
    }

    /// How many pub/sub channels this backend is subscribed to right now, for waiters
    /// and for holders listening for a force-unlock (zero when nobody waits and no lock
    /// is held: a dropped acquire or a release leaves no subscription behind).
    pub fn waiting_channels(&self) -> usize {
        self.node.pubsub().channels()
    }

    /// The keys of `key` on this deployment.
    fn keys(&self, key: &LockKey) -> Keys {
        Keys::for_deployment(key, self.node.is_cluster())
    }

    fn request(&self, req: &AcquireRequest<'_>) -> Request {
        let n = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        Request {
            keys: self.keys(req.key),
            kind: req.kind,
            permits: req.permits,
            owner: req.owner.as_str().to_owned(),
            ttl: req.ttl,
            waiter: {
                let mut waiter = crate::keys::concat(&[&self.inbox, "/"]);
                lock_core::backend::push_decimal(&mut waiter, n);
                waiter
            },
            inbox: self.inbox.clone(),
            waiter_lease: self.node.config().waiter_lease(),
        }
    }
}

/// Runs one acquire call for a lease of `lease`. If the caller's future is dropped
/// while the call is in flight, or the call outlasts the node's call timeout (the
/// server busy or paused: the script may still run later), the call is finished in a
/// spawned task and a grant it brings is released, rather than left held until its
/// lease runs out. A call that fails after it may have reached the server (its
/// connection dropped, and the call run again on a new one failed too) may have been
/// granted without anyone hearing of it: `undo` (which frees whatever this call's
/// request holds, whatever its fence) is then run in a spawned task, again until it
/// gets through or that grant would have run out. The common path spawns nothing.
///
/// `permit` is held until the call has finished, so a queue clean-up waiting for it
/// never runs before a call that might queue the waiter again. Calls never wait for
/// each other: the next attempt of a waiter whose last one was abandoned at its
/// timeout goes out at once (see [`Place`]).
pub(crate) async fn attempt(
    node: &Node,
    call: Invocation,
    lease: Duration,
    undo: Undo,
    permit: Option<Permit>,
) -> Result<Attempt> {
    let call_node = node.clone();
    let acks = node.config().replica_acks();
    let acks_wait = acks.map_or(Duration::ZERO, |acks| acks.timeout);
    let call_timeout = node.call_timeout() + acks_wait;
    // A grant that arrives after its lease would have run out needs no undo.
    let reply_limit = call_timeout + lease;
    let call_undo = undo.clone();
    let mut in_flight = InFlight {
        call: Some(Box::pin(async move {
            match acks {
                None => call_node
                    .call_within::<Vec<i64>>("acquire", &call, reply_limit)
                    .await
                    .and_then(|reply| Attempt::from_reply(reply).map_err(Error::from)),
                Some(acks) => acquire_acked(&call_node, &call, acks, reply_limit, &call_undo).await,
            }
        })),
        node: node.clone(),
        undo: Some(undo.clone()),
        lease,
        permit,
    };
    let call = in_flight.call.as_mut().expect("set above");
    let result = tokio::time::timeout(call_timeout, call)
        .await
        .map_err(|_| {
            Error::from(crate::error::Error::TimedOut {
                what: "acquire",
                after: call_timeout,
            })
        })?;
    in_flight.call = None;
    if let Err(error) = &result {
        if err::may_have_run(error) {
            tracing::debug!(%error, "acquire failed after it may have reached the server; undoing whatever it was granted");
            let node = node.clone();
            let give_up = Instant::now() + lease;
            let runtime = tokio::runtime::Handle::current();
            node.cleanups().clone().spawn_on(&runtime, async move {
                undo_until(&node, &undo, give_up).await
            });
        }
    }
    result
}

/// Runs `undo` (the release of whatever one acquire call's request holds) until it
/// gets through, with backoff, or until `give_up`, when the grant it would free has
/// run out anyway.
async fn undo_until(node: &Node, undo: &Undo, give_up: Instant) {
    let undo = undo.call();
    let mut pause = Duration::from_millis(50);
    loop {
        match node.call::<i64>("undo", &undo).await {
            Ok(_) => return,
            Err(error) if error.is_retryable() && Instant::now() + pause < give_up => {
                tracing::debug!(%error, "could not undo a grant nobody heard of yet; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(error) => {
                tracing::warn!(%error, "could not undo a grant nobody heard of; its lease will run out");
                return;
            }
        }
    }
}

/// An acquire under replica acknowledgement: the script, then, after a grant,
/// `WAIT n timeout`, both on one connection that nothing else uses meanwhile (`WAIT`
/// counts what that connection wrote, and blocks it until the replicas answer). A
/// grant too few replicas acknowledged (or whose `WAIT` failed) is released here and
/// reported as [`err::Error::TooFewReplicas`], unless the configuration keeps it. `WAIT`
/// is never sent on another connection: it would count nothing and pass.
async fn acquire_acked(
    node: &Node,
    invocation: &Invocation,
    acks: ReplicaAcks,
    limit: Duration,
    undo: &Undo,
) -> Result<Attempt> {
    let mut conn = node.acks_conn().await?;
    let mut reply: Result<redis::RedisResult<Vec<i64>>, _> =
        tokio::time::timeout(limit, invocation.invoke_async(conn.get())).await;
    let dead = matches!(&reply, Ok(Err(error))
        if conn.pooled() && (error.is_connection_dropped() || error.is_io_error()));
    if dead {
        // An idle connection that died (the server restarted, or closed it): run again
        // on a new one, as `Node::run` does. Safe: a run after a lost reply takes its
        // own grant over. If no new one can be made, the first run's error stands (it
        // may have reached the server).
        tracing::debug!("pooled connection dropped; calling again on a new one");
        conn.failed();
        if let Ok(fresh) = node.acks_conn().await {
            conn = fresh;
            reply = tokio::time::timeout(limit, invocation.invoke_async(conn.get())).await;
        }
    }
    let attempt = match reply {
        Ok(Ok(reply)) => Attempt::from_reply(reply).map_err(Error::from)?,
        Ok(Err(error)) => {
            conn.failed();
            return Err(err::map(error));
        }
        Err(_) => {
            conn.failed();
            return Err(err::Error::TimedOut {
                what: "acquire",
                after: limit,
            }
            .into());
        }
    };
    let Attempt::Granted(fence) = attempt else {
        return Ok(attempt);
    };
    let timeout_ms = u64::try_from(acks.timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut wait = redis::cmd("WAIT");
    wait.arg(acks.replicas).arg(timeout_ms);
    let waited = node.config().request_timeout() + acks.timeout;
    let acked: Result<i64> = err::within("WAIT", waited, wait.query_async(conn.get())).await;
    let shortfall = match acked {
        Ok(n) if n >= i64::from(acks.replicas) => return Ok(attempt),
        Ok(n) => format!(
            "only {n} of {} replicas acknowledged the grant within {:?}",
            acks.replicas, acks.timeout
        ),
        Err(error) => {
            conn.failed();
            format!("could not learn whether replicas have the grant: {error}")
        }
    };
    drop(conn);
    if acks.on_too_few == TooFewReplicas::KeepAndWarn {
        tracing::warn!(fence, "{shortfall}; keeping the lock as configured");
        return Ok(attempt);
    }
    // Inside the call: a dropped acquire finishes this release in its spawned task.
    if let Err(error) = node.call::<i64>("release", &undo.call()).await {
        tracing::warn!(%error, "could not release a grant too few replicas have; its lease will run out");
    }
    Err(err::Error::TooFewReplicas(format!("{shortfall}; released it")).into())
}

type AttemptCall = Pin<Box<dyn Future<Output = Result<Attempt>> + Send>>;

/// An acquire call that may be abandoned half way; see [`attempt`].
struct InFlight {
    call: Option<AttemptCall>,
    node: Node,
    /// Frees whatever the call's request holds.
    undo: Option<Undo>,
    lease: Duration,
    permit: Option<Permit>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (Some(call), Some(undo)) = (self.call.take(), self.undo.take()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let node = self.node.clone();
        let permit = self.permit.take();
        let lease = self.lease;
        self.node.cleanups().spawn_on(&runtime, async move {
            let _permit = permit;
            match call.await {
                Ok(Attempt::Granted(fence)) => {
                    tracing::debug!(fence, "acquire abandoned after it was granted; releasing");
                }
                Err(error) if err::may_have_run(&error) => {
                    tracing::debug!(%error, "abandoned acquire failed after it may have reached the server; undoing whatever it was granted");
                }
                _ => return,
            }
            undo_until(&node, &undo, Instant::now() + lease).await;
        });
    }
}

/// What each acquire call of a waiter that registers holds until it has finished; see
/// [`Place`].
pub(crate) type Permit = OwnedRwLockReadGuard<()>;

/// A fair waiter's queue place or a writer's waiting entry: removed however the
/// acquire ends (in a spawned task if its future is dropped, or if a call is still in
/// flight then).
///
/// Every acquire call holds a shared [`Permit`] until it has finished (an abandoned
/// one, in its background task, until its late reply or its limit); the removal takes
/// the lock exclusively, so it never runs before a call that might queue the waiter
/// again. Calls share it: a waiter never waits for its own abandoned call (which may
/// take a call timeout plus the lease) before its next attempt, and so never past its
/// deadline.
pub(crate) struct Place {
    node: Node,
    /// The request whose place this is, until a grant consumed it: its removal
    /// ([`Request::leave`]) is built only if it is needed.
    leave: Option<Arc<Request>>,
    in_flight: Arc<RwLock<()>>,
}

impl Place {
    pub(crate) fn new(node: &Node, leave: Option<Arc<Request>>) -> Self {
        Place {
            node: node.clone(),
            leave,
            in_flight: Arc::new(RwLock::new(())),
        }
    }

    /// Held by each acquire call, see [`attempt`]. Waits only while the place is
    /// being removed, which happens once, after the last attempt.
    pub(crate) async fn permit(&self) -> Permit {
        self.in_flight.clone().read_owned().await
    }

    /// The place was consumed by a grant: nothing to remove.
    pub(crate) fn disarm(&mut self) {
        self.leave = None;
    }

    /// Removes the place now, or, while an abandoned call is still in flight, in a
    /// spawned task once it has finished (the caller does not wait for it).
    pub(crate) async fn leave(mut self) {
        let Ok(_permit) = self.in_flight.clone().try_write_owned() else {
            // Dropping the place hands the removal to a task.
            return;
        };
        if let Some(call) = self.leave.take().and_then(|request| request.leave()) {
            if let Err(error) = self.node.call::<i64>("leave", &call).await {
                tracing::debug!(%error, "could not leave the wait queue; the place expires on its own");
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let Some(call) = self.leave.take().and_then(|request| request.leave()) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let node = self.node.clone();
        let in_flight = self.in_flight.clone();
        self.node.cleanups().spawn_on(&runtime, async move {
            let _permit = in_flight.write_owned().await;
            let _ = node.call::<i64>("leave", &call).await;
        });
    }
}

/// The first pause after a failed call while a Sentinel failover may be under way.
const FIRST_OUTAGE_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between calls during one.
const MAX_OUTAGE_PAUSE: Duration = Duration::from_millis(500);

/// A waiter's calls failing in a row. Under Sentinel, a waiter rides out retryable
/// failures (the primary down, the sentinels electing another) for up to the
/// [failover grace](crate::RedisConfig::with_failover_grace), within its own wait
/// limit; then, and at once for a one-shot try or on a single server, the error is
/// the caller's.
pub(crate) struct Outage {
    since: Option<Instant>,
    pause: Duration,
    grace: Option<Duration>,
}

impl Outage {
    fn new(node: &Node) -> Self {
        Outage::with_grace(
            node.follows_failover()
                .then(|| node.config().failover_grace()),
        )
    }

    /// Rides out failures for up to `grace` (none: never).
    pub(crate) fn with_grace(grace: Option<Duration>) -> Self {
        Outage {
            since: None,
            pause: FIRST_OUTAGE_PAUSE,
            grace,
        }
    }

    /// Returns `error` if it is not to be ridden out; else sleeps before the next try.
    pub(crate) async fn ride_out(&mut self, error: Error, req: &AcquireRequest<'_>) -> Result<()> {
        let since = *self.since.get_or_insert_with(Instant::now);
        let ride = self.grace.is_some_and(|grace| since.elapsed() < grace)
            && error.is_retryable()
            && !err::is_replica_shortfall(&error)
            && !req.deadline.has_passed();
        if !ride {
            return Err(error);
        }
        tracing::debug!(%error, "call failed during a wait; trying again (the primary may be failing over)");
        tokio::time::sleep_until(req.deadline.min(Instant::now() + self.pause)).await;
        self.pause = (self.pause * 2).min(MAX_OUTAGE_PAUSE);
        Ok(())
    }

    /// A call went through: the next failure starts a new outage.
    pub(crate) fn over(&mut self) {
        self.since = None;
        self.pause = FIRST_OUTAGE_PAUSE;
    }
}

/// The first look again at a lock whose holder publishes nothing.
const FIRST_SILENT_POLL: Duration = Duration::from_millis(20);

/// How often a waiter looks again at a lock whose holder publishes nothing when it
/// releases (see [`Blocker::silent`]): after 20 ms, then twice as long each time up to
/// a cap, so a short hold is noticed at once and a long one costs a few calls a
/// second. A holder that publishes resets it: its waiters need no polling.
pub(crate) struct SilentPoll {
    next: Duration,
    cap: Duration,
}

impl SilentPoll {
    pub(crate) fn new(cap: Duration) -> Self {
        SilentPoll {
            next: FIRST_SILENT_POLL.min(cap),
            cap,
        }
    }

    /// `pause`, shortened to the next poll interval when the blocker is silent.
    pub(crate) fn bound(&mut self, pause: Duration, blocker: Blocker) -> Duration {
        if !blocker.silent {
            self.next = FIRST_SILENT_POLL.min(self.cap);
            return pause;
        }
        let poll = self.next;
        self.next = (self.next * 2).min(self.cap);
        pause.min(poll)
    }
}

/// How long to sleep after a blocked attempt: until the blocker's lease may end, but
/// at most `cap` when nothing may end on its own (`ms < 0`) or when the waiter must
/// refresh its place.
pub(crate) fn sleep_for(ms: i64, cap: Duration, registers: bool) -> Duration {
    // One extra ms: PTTL rounds down, and waking a hair early only costs a retry.
    let lease = Duration::from_millis(ms.max(0) as u64 + 1);
    match (ms >= 0, registers) {
        (true, false) => lease,
        (true, true) => lease.min(cap),
        (false, _) => cap,
    }
}

impl LockBackend for RedisBackend {
    type Lease = RedisLease;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn location(&self) -> String {
        self.node.config().location()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ALL
    }

    async fn settle(&self) {
        self.node.cleanups().settled().await;
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<RedisLease>>> {
        let request = Arc::new(self.request(&req));
        let waits = !req.deadline.has_passed();
        let registers = waits && request.registers();
        let mut place = Place::new(&self.node, registers.then(|| request.clone()));
        let refresh = self.node.config().waiter_lease() / 3;
        let mut poll = SilentPoll::new(self.node.config().silent_holder_poll());
        let mut registration = None;
        let mut outage = Outage::new(&self.node);
        loop {
            if let Some(registration) = &registration {
                if let Err(error) = crate::pubsub::Registration::ready(registration).await {
                    outage.ride_out(error, &req).await?;
                    continue;
                }
            }
            let permit = if registers {
                Some(place.permit().await)
            } else {
                None
            };
            // A new id per call: a call abandoned at its timeout may still run later,
            // and must then neither take over nor undo what a later call is granted.
            let lease = RedisLease::fresh(req.holder);
            let attempt_sent = Instant::now();
            let attempt = attempt(
                &self.node,
                request.acquire_with(&lease, registers),
                request.ttl,
                Undo::new(&request, &lease),
                permit,
            )
            .await;
            let attempt = match attempt {
                Ok(attempt) => attempt,
                Err(error) => {
                    outage.ride_out(error, &req).await?;
                    continue;
                }
            };
            outage.over();
            let blocker = match attempt {
                Attempt::Granted(fence) => {
                    place.disarm();
                    let value = lease_value(&request.owner, &lease, fence);
                    let watch = HolderWatch::start(
                        &self.node,
                        request.keys.clone(),
                        req.kind,
                        value,
                        req.loss.clone(),
                    );
                    return Ok(Some(Grant {
                        fence,
                        data: lease.watched(watch),
                        started_at: attempt_sent,
                    }));
                }
                Attempt::Blocked(blocker) => blocker,
                Attempt::OtherCount(count) => {
                    place.leave().await;
                    return Err(Error::other_permit_count(req.key, count, req.permits));
                }
            };
            if req.deadline.has_passed() {
                place.leave().await;
                return Ok(None);
            }
            let Some(registration) = &registration else {
                // Subscribe, then try again: a release between the first try and the
                // subscription would otherwise go unnoticed.
                let (channel, interest) = request.wake_on();
                let registered = self.node.pubsub().register(channel, interest);
                if let Some(pass_on) = request.pass_on(&self.node) {
                    registered.on_unclaimed(pass_on);
                }
                registration = Some(registered);
                continue;
            };
            let pause = sleep_for(blocker.ms, refresh, request.registers());
            let wake_at = Instant::now() + poll.bound(pause, blocker);
            tokio::select! {
                () = registration.notified() => {}
                () = tokio::time::sleep_until(req.deadline.min(wake_at)) => {}
            }
        }
    }

    async fn release(&self, lease: &HeldLease<RedisLease>) -> Result<()> {
        lease.data.stop_watch();
        let keys = self.keys(&lease.key);
        let value = lease_value(lease.owner.as_str(), &lease.data, lease.fence);
        let call = calls::release_with_receipt(&keys, lease.kind, &lease.data, &value);
        let released: i64 = self.node.eval("release", &call).await?;
        if released == 1 {
            Ok(())
        } else {
            Err(Error::not_owner(&lease.key))
        }
    }

    async fn renew(
        &self,
        leases: &[&HeldLease<RedisLease>],
        ttl: Duration,
    ) -> Result<Vec<Renewal>> {
        renew_on(&self.node, leases, ttl).await
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        let call = calls::inspect(&self.keys(key), family, calls::Inspect::Look);
        let held: i64 = self.node.call("is_locked", &call).await?;
        Ok(held == 1)
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        let call = calls::inspect(&self.keys(key), family, calls::Inspect::RemoveAll);
        let held: i64 = self.node.call("force_unlock", &call).await?;
        Ok(held == 1)
    }

    async fn force_unlock_holder(
        &self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> Result<bool> {
        let call = calls::inspect(&self.keys(key), family, calls::Inspect::RemoveToken(fence));
        let removed: i64 = self.node.call("force_unlock_holder", &call).await?;
        Ok(removed == 1)
    }

    async fn proclaim(&self, lease: &HeldLease<RedisLease>, value: &str) -> Result<()> {
        let stored = lease_value(lease.owner.as_str(), &lease.data, lease.fence);
        let call = calls::proclaim(&self.keys(&lease.key), &stored, value);
        let there: i64 = self.node.call("proclaim", &call).await?;
        if there == 1 {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                name: lease.key.name().to_string(),
            })
        }
    }

    async fn inspect(&self, key: &LockKey, family: LockFamily) -> Result<LockInfo> {
        let call = calls::holders(&self.keys(key), family);
        let reply: Vec<Vec<u8>> = self.node.call("inspect", &call).await?;
        crate::holders::lock_info(&reply)
    }
}

/// Renews `leases` on one server, [`RENEW_CHUNK`] per script call (on a cluster,
/// per node: see [`renew_on_cluster`]).
pub(crate) async fn renew_on(
    node: &Node,
    leases: &[&HeldLease<RedisLease>],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    if node.is_cluster() {
        return renew_on_cluster(node, leases, ttl).await;
    }
    let mut out = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(RENEW_CHUNK) {
        let values: Vec<String> = chunk
            .iter()
            .map(|l| lease_value(l.owner.as_str(), &l.data, l.fence))
            .collect();
        let call = calls::renew(
            chunk.iter().zip(&values).map(|(lease, value)| {
                let (key, stored) = Keys::new(&lease.key).lease_key(lease.kind);
                (key, stored, value.as_str())
            }),
            ttl,
        );
        let renewed: Vec<i64> = node.call("renew", &call).await?;
        if renewed.len() != chunk.len() {
            return Err(err::Error::UnexpectedReply(format!(
                "{} renewals for {} leases",
                renewed.len(),
                chunk.len()
            ))
            .into());
        }
        out.extend(renewed.into_iter().map(|r| {
            if r == 1 {
                Renewal::Renewed
            } else {
                Renewal::Lost
            }
        }));
    }
    Ok(out)
}

/// Renews `leases` on a cluster: one `CLUSTER SLOTS`, then one script call per node
/// (per [`RENEW_CHUNK`] leases) for the leases whose slots it serves, all nodes at
/// once. A node's call that fails (slots moved since the map was read, or the node
/// down) renews its leases one by one instead, each routed by its own key. A node that does not
/// answer costs only its own leases ([`Renewal::Unanswered`]); without a slot map
/// (the node asked is down), every lease is renewed on its own.
async fn renew_on_cluster(
    node: &Node,
    leases: &[&HeldLease<RedisLease>],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    let entries: Vec<(String, Stored, String)> = leases
        .iter()
        .map(|lease| {
            let (key, stored) = Keys::in_cluster(&lease.key).lease_key(lease.kind);
            (
                key,
                stored,
                lease_value(lease.owner.as_str(), &lease.data, lease.fence),
            )
        })
        .collect();
    let entry = |i: usize| {
        let (key, stored, value) = &entries[i];
        (key.clone(), *stored, value.as_str())
    };
    // One lease on its own, routed by its key (slots may have moved).
    let renew_one = |i: usize| async move {
        let one: Result<Vec<i64>> = node.call("renew", &calls::renew([entry(i)], ttl)).await;
        match one {
            Ok(one) => renewal_of(one.first().copied().unwrap_or(0)),
            Err(error) => {
                tracing::debug!(%error, "a lease's node did not answer its renewal");
                Renewal::Unanswered
            }
        }
    };
    // Answered well within the lease (the watchdog gives up on the whole call at its
    // end): a lease whose node has not answered by then is `Unanswered`.
    let started = tokio::time::Instant::now();
    let deadline = started + ttl * 3 / 4;
    let within = |i: usize| async move {
        tokio::time::timeout_at(deadline, renew_one(i))
            .await
            .unwrap_or(Renewal::Unanswered)
    };
    let slots = tokio::time::timeout_at(
        started + ttl / 4,
        node.query::<redis::Value>("CLUSTER SLOTS", redis::cmd("CLUSTER").arg("SLOTS")),
    )
    .await;
    let owners = match slots {
        Ok(Ok(slots)) => crate::cluster::slot_owners(&slots)
            .ok_or_else(|| err::Error::UnexpectedReply(format!("CLUSTER SLOTS: {slots:?}")))?,
        failed => {
            let error = failed.map_or_else(|_| "no answer".to_owned(), |e| format!("{e:?}"));
            tracing::debug!(%error, "no slot map for the renewals; renewing each lease on its own");
            let each = (0..leases.len()).map(within);
            return Ok(futures::future::join_all(each).await);
        }
    };
    let keys: Vec<&str> = entries.iter().map(|(key, _, _)| key.as_str()).collect();
    let groups: Vec<Vec<usize>> = crate::cluster::nodes_of(&owners, &keys)
        .into_iter()
        .flat_map(|group| {
            group
                .chunks(RENEW_CHUNK)
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
    let renew_group = |group: Vec<usize>| async move {
        let call = calls::renew_on_node(group.iter().map(|&i| entry(i)), ttl);
        let renewed = match node.call::<Vec<i64>>("renew", &call).await {
            Ok(renewed) if renewed.len() == group.len() => renewed,
            Ok(renewed) => {
                tracing::warn!(
                    "a node answered {} renewals for {} leases; renewing them one by one",
                    renewed.len(),
                    group.len()
                );
                vec![-1; group.len()]
            }
            Err(error) => {
                tracing::debug!(%error, "batched renewal failed (slots moving, or the node down); renewing one by one");
                vec![-1; group.len()]
            }
        };
        // Leases whose slot this node no longer serves: renewed where they went, all
        // at once, so that a node that stopped answering costs one call's time.
        let each = renewed.iter().zip(&group).map(|(&r, &i)| async move {
            match r {
                -1 => within(i).await,
                r => renewal_of(r),
            }
        });
        let renewed = futures::future::join_all(each).await;
        (group, renewed)
    };
    let results = futures::future::join_all(groups.into_iter().map(|group| async move {
        let unanswered = vec![Renewal::Unanswered; group.len()];
        let indices = group.clone();
        match tokio::time::timeout_at(deadline, renew_group(group)).await {
            Ok(renewed) => renewed,
            Err(_) => (indices, unanswered),
        }
    }))
    .await;
    let mut out = vec![Renewal::Lost; leases.len()];
    for (group, renewed) in results {
        for (i, r) in group.into_iter().zip(renewed) {
            out[i] = r;
        }
    }
    Ok(out)
}

/// A renewal script's answer for one lease: 1 renewed, anything else lost.
fn renewal_of(answer: i64) -> Renewal {
    if answer == 1 {
        Renewal::Renewed
    } else {
        Renewal::Lost
    }
}
