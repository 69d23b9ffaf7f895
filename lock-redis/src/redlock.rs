//! [`RedLockBackend`]: exclusive locks over N independent Redis masters.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::{AcquireRequest, Grant, HeldLease, LockBackend, Renewal};
use lock_core::{Capabilities, Error, LockFamily, LockKey, LockKind, Result};
use rand::Rng;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{attempt, renew_on, sleep_for, Outage, SilentPoll};
use crate::calls::{self, Call, Request, Undo};
use crate::config::RedisConfig;
use crate::error::{self as err, BACKEND};
use crate::keys::{lease_value, Keys, RedisLease};
use crate::node::Node;
use crate::pubsub::Interest;
use crate::scripts::{self, Attempt, Blocker};

/// The longest random pause between two rounds that found no holder but no majority
/// either (split votes, masters down), so competing clients fall out of step.
const MAX_JITTER: Duration = Duration::from_millis(50);

/// What a lease of `ttl` guarantees from the moment its request was sent: `ttl` less
/// the clock-drift margin (1 % of it plus 2 ms).
fn drift_validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(ttl / 100 + Duration::from_millis(2))
}

/// The least validity a round may leave for its grant to count: a tenth of the lease.
/// A grant with less would expire about as soon as the caller sees it.
fn min_validity(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(1))
}

/// Exclusive locks over N independent Redis masters (the RedLock algorithm): a lock
/// is held when the same acquire script granted it on a majority of them within the
/// validity time. Use an odd N, e.g. 5: it keeps working with up to `(N - 1) / 2`
/// masters down.
///
/// * **Acquire:** the exclusive script on every master in parallel. Granted on a
///   majority with `validity = lease - elapsed - drift` left (drift is 1 % of the
///   lease plus 2 ms), and at least a tenth of the lease, it holds; otherwise every
///   master that granted it is released, and the next round starts after a random
///   pause (or, when another owner holds it, on its release message or lease end),
///   until the deadline.
/// * **Validity:** the guard counts `lease - drift` from the start of the winning
///   round (and of each renewal), never the whole lease: the masters' clocks may run
///   up to the drift margin fast against this one. lock-core keeps that margin on
///   every backend ([`LockClientBuilder::clock_drift`](lock_core::LockClientBuilder::clock_drift),
///   1 % plus 2 ms by default), so RedLock's guards need nothing more.
/// * **Fencing tokens** strictly increase: each master's script takes one more than the
///   larger of its counter and its clock in microseconds, the grant takes the
///   majority's maximum `F`, and a second step moves each master of the majority that
///   issued less to `F` (its lease value and counter) before the grant is returned.
///   Any two majorities share a master, whose counter is then at least every earlier
///   `F`, so the next grant's maximum is larger. The masters' clocks differ by
///   microseconds at least, so almost every grant takes that second round trip (to
///   those masters at once). A master that restarts empty forgets its counter but not
///   its clock; RedLock still assumes masters that persist (or wait a lease before
///   rejoining), since it also forgets the locks.
/// * **Masters down:** a round that fewer than a majority of masters answer is tried
///   again after a pause that doubles from 50 ms to 500 ms, for up to the
///   [failover grace](crate::RedisConfig::with_failover_grace) of the first master's
///   settings (within the wait limit); then the acquire fails with a retryable
///   [`Error::Unavailable`].
/// * **Renewal** counts as renewed on a majority, and is decided as soon as every
///   lease is renewed on a majority or can no longer be (a master that does not
///   answer is waited for a fiftieth of the lease more, never longer than the lease).
/// * **Release** runs on all masters and succeeds only if a majority still had the
///   lock (else the lease is reported lost).
/// * Fair and read-write locks are not offered
///   ([`Capabilities::fair`] and [`Capabilities::read_write`] are false).
///
/// The fencing counters (`{namespace:name}:fence`) stay on the masters by design; a
/// failed acquire leaves no lock key behind on the masters that answer.
///
/// ```no_run
/// use lock_core::{DistributedLockExt, LockClient};
/// use lock_redis::{RedLockBackend, RedisConfig};
///
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// let masters = ["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"];
/// let backend = RedLockBackend::new(
///     masters.iter().map(|url| RedisConfig::from_url(url)).collect::<Result<Vec<_>, _>>()?,
/// )?;
/// let client = LockClient::new(backend);
/// let guard = client.lock("payments")?.acquire().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedLockBackend {
    nodes: Arc<[Node]>,
    next_waiter: Arc<AtomicU64>,
}

impl fmt::Debug for RedLockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockBackend")
            .field(
                "masters",
                &self
                    .nodes
                    .iter()
                    .map(|n| n.config().address())
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum())
            .finish()
    }
}

impl RedLockBackend {
    /// A backend over the masters `configs` describe. No I/O.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty list, a setting out of range, settings
    /// that cannot make a client, or a master that is a Redis Cluster or asks for
    /// replica acknowledgement (RedLock's masters are independent single servers).
    pub fn new(configs: impl IntoIterator<Item = RedisConfig>) -> Result<Self> {
        let nodes = configs
            .into_iter()
            .map(|config| {
                if config.is_cluster() || config.replica_acks().is_some() {
                    return Err(Error::invalid_argument(
                        "RedLock masters are independent servers: no Redis Cluster and no \
                         replica acknowledgement",
                    ));
                }
                Node::new(config)
            })
            .collect::<Result<Vec<_>>>()?;
        if nodes.is_empty() {
            return Err(Error::invalid_argument(
                "RedLock needs at least one Redis master (an odd number such as 3 or 5 is usual)",
            ));
        }
        Ok(RedLockBackend {
            nodes: nodes.into(),
            next_waiter: Arc::new(AtomicU64::new(1)),
        })
    }

    /// [`RedLockBackend::new`] from URLs with default timeouts.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an invalid URL or an empty list.
    pub fn from_urls<S: AsRef<str>>(urls: impl IntoIterator<Item = S>) -> Result<Self> {
        let configs = urls
            .into_iter()
            .map(|url| RedisConfig::from_url(url.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        RedLockBackend::new(configs)
    }

    /// How many masters must agree: a strict majority.
    pub fn quorum(&self) -> usize {
        majority_of(self.nodes.len())
    }

    /// How many masters there are.
    pub fn masters(&self) -> usize {
        self.nodes.len()
    }

    fn no_quorum(&self, answered: usize) -> Error {
        err::Error::NoQuorum {
            answered,
            needed: self.quorum(),
        }
        .into()
    }

    /// How long to wait for one master in a round: its own call timeout, but never
    /// longer than the lease, which would be gone by then anyway.
    /// Runs one [`round`] in a task of its own, counted as a clean-up: if the acquire
    /// future is dropped meanwhile, the task gives back what the round won. The outcome,
    /// and the lease the round used.
    async fn one_round(
        &self,
        request: &Request,
        timeouts: &[Duration],
        holder: &str,
    ) -> Result<(Round, RedisLease)> {
        let (tx, rx) = oneshot::channel();
        let nodes = self.nodes.clone();
        let attempt_request = request.clone();
        let attempt_timeouts = timeouts.to_vec();
        // A new id per round: rounds of one owner may overlap (a round abandoned by a
        // dropped acquire still runs), and must not act on each other's keys.
        let lease = RedisLease::fresh(holder);
        let round_lease = lease.clone();
        let cleanups = self.nodes[0].cleanups().clone();
        cleanups.spawn_on(&tokio::runtime::Handle::current(), async move {
            let outcome = round(
                nodes.clone(),
                attempt_request.clone(),
                round_lease.clone(),
                attempt_timeouts,
            )
            .await;
            if let Err(Ok(Round::Granted(fence))) = tx.send(outcome) {
                // The acquire future is gone: give the majority back.
                let (keys, owner) = (&attempt_request.keys, &attempt_request.owner);
                give_back(&nodes, keys, owner, &round_lease, fence).await;
            }
        });
        let mut answer = RoundAnswer {
            rx,
            nodes: self.nodes.clone(),
            keys: request.keys.clone(),
            owner: request.owner.clone(),
            lease: lease.clone(),
            read: false,
        };
        let outcome = (&mut answer.rx).await;
        answer.read = true;
        let outcome = outcome
            .map_err(|_| Error::backend(BACKEND, "the RedLock round ended without an answer"))??;
        Ok((outcome, lease))
    }

    fn per_node_timeout(&self, node: &Node, ttl: Duration) -> Duration {
        node.config().call_timeout().min(ttl)
    }
}

/// The acquire's end of a round's answer. Dropped unread (the acquire future dropped
/// just as the round answered, e.g. by lock-core's shutdown racing it), it gives back
/// a grant the round already sent, which the round took as delivered.
struct RoundAnswer {
    rx: oneshot::Receiver<Result<Round>>,
    nodes: Arc<[Node]>,
    keys: Keys,
    owner: String,
    lease: RedisLease,
    read: bool,
}

impl Drop for RoundAnswer {
    fn drop(&mut self) {
        if self.read {
            return;
        }
        // From here on the round's send fails, and the round gives the grant back.
        self.rx.close();
        let Ok(Ok(Round::Granted(fence))) = self.rx.try_recv() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (nodes, keys, owner, lease) = (
            self.nodes.clone(),
            self.keys.clone(),
            self.owner.clone(),
            self.lease.clone(),
        );
        let cleanups = nodes[0].cleanups().clone();
        cleanups.spawn_on(&runtime, async move {
            give_back(&nodes, &keys, &owner, &lease, fence).await;
        });
    }
}

/// Releases on every master the grant a round won with `lease` for `owner`, which
/// nobody will hold.
async fn give_back(nodes: &[Node], keys: &Keys, owner: &str, lease: &RedisLease, fence: u64) {
    let value = lease_value(owner, lease, fence);
    release_everywhere(nodes, keys, value, None).await;
}

/// What one round across the masters found.
enum Round {
    Granted(u64),
    /// No majority. `holder`: the shortest remaining lease of another holder seen
    /// (negative: a holder without expiry), and whether any holder seen publishes
    /// nothing when it releases, if any was seen; `answered`: masters that replied.
    Failed {
        holder: Option<Blocker>,
        answered: usize,
    },
}

/// One RedLock round, run in its own task by [`RedLockBackend::acquire`] so that a
/// dropped acquire future never leaves a majority grant behind. `lease` identifies the
/// round: every value it writes, settles or releases carries its request id, so
/// nothing here ever matches another round's key, even one of the same owner with an
/// equal fence on that master.
async fn round(
    nodes: Arc<[Node]>,
    request: Request,
    lease: RedisLease,
    timeouts: Vec<Duration>,
) -> Result<Round> {
    let request = Arc::new(request);
    let quorum = majority_of(nodes.len());
    let started = Instant::now();
    let phase1 = nodes.iter().zip(&timeouts).map(|(node, timeout)| {
        let call = request.acquire_with(&lease, false);
        // A grant that arrives after the timeout is released by attempt()'s task.
        tokio::time::timeout(
            *timeout,
            attempt(node, call, request.ttl, Undo::new(&request, &lease), None),
        )
    });
    // Done shortly after the outcome is decided: masters still silent then (down, or
    // behind a partition) must not use up the lease. Their calls are dropped; a grant
    // one of them makes later is released by attempt()'s task.
    // Decided once a majority granted, or once so many did not that no majority can.
    let masters = nodes.len();
    let replies = until(phase1, straggler_grace(request.ttl), |replies| {
        let granted = replies
            .iter()
            .filter(|(_, r)| matches!(r, Ok(Ok(Attempt::Granted(_)))))
            .count();
        granted >= quorum || replies.len() - granted > masters - quorum
    })
    .await;
    let mut granted = Vec::new();
    let mut answered = 0;
    let mut holder: Option<Blocker> = None;
    for (i, reply) in replies {
        match reply {
            Ok(Ok(Attempt::Granted(fence))) => {
                answered += 1;
                granted.push((i, fence));
            }
            Ok(Ok(Attempt::Blocked(blocker))) => {
                answered += 1;
                holder = Some(match holder {
                    Some(prev) => sooner(prev, blocker),
                    None => blocker,
                });
            }
            // Only an exclusive lock is asked of the masters.
            Ok(Ok(Attempt::OtherCount(_))) => {}
            Ok(Err(error)) => tracing::debug!(master = i, %error, "RedLock master failed"),
            Err(_) => tracing::debug!(master = i, "RedLock master did not answer in time"),
        }
    }
    let fence = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
    let won = RoundGrants {
        nodes: &nodes,
        request: &request,
        lease: &lease,
        timeouts: &timeouts,
        granted,
        fence,
    };
    let settled = if won.granted.len() >= quorum {
        won.settle().await
    } else {
        0
    };
    let validity = drift_validity(request.ttl).saturating_sub(started.elapsed());
    if settled >= quorum && validity >= min_validity(request.ttl) {
        return Ok(Round::Granted(fence));
    }
    // No valid majority: release every grant of this round, whichever fence it is at.
    won.release().await;
    Ok(Round::Failed { holder, answered })
}

/// Of two masters' blockers, the soonest end of a lease (a lease without expiry never
/// ends); silent if either master's holder is.
fn sooner(a: Blocker, b: Blocker) -> Blocker {
    Blocker {
        ms: if a.ms >= 0 && (b.ms < 0 || a.ms < b.ms) {
            a.ms
        } else {
            b.ms
        },
        silent: a.silent || b.silent,
    }
}

/// What one round won: the masters that granted it, each at its own fence, and the
/// fence the round settles on (the highest).
struct RoundGrants<'a> {
    nodes: &'a [Node],
    request: &'a Request,
    lease: &'a RedisLease,
    timeouts: &'a [Duration],
    /// Master index and the fence it granted at.
    granted: Vec<(usize, u64)>,
    fence: u64,
}

impl RoundGrants<'_> {
    /// The lease's value at the chosen fence.
    fn chosen(&self) -> String {
        lease_value(&self.request.owner, self.lease, self.fence)
    }

    /// Moves every grant to the chosen fence; how many masters hold it there.
    async fn settle(&self) -> usize {
        let chosen = self.chosen();
        let settle = self.granted.iter().map(|(i, f)| {
            let node = &self.nodes[*i];
            let timeout = self.timeouts[*i];
            let call = Call {
                script: scripts::REDLOCK_SETTLE.get(false),
                keys: vec![self.request.keys.lock.clone(), self.request.keys.fence()],
                args: vec![
                    lease_value(&self.request.owner, self.lease, *f),
                    chosen.clone(),
                    self.fence.to_string(),
                ],
            };
            async move {
                if *f == self.fence {
                    // Already at the chosen fence (and its counter is at least that).
                    return true;
                }
                let settled =
                    tokio::time::timeout(timeout, node.call::<i64>("settle", &call)).await;
                matches!(settled, Ok(Ok(1)))
            }
        });
        join_all(settle).await.into_iter().filter(|ok| *ok).count()
    }

    /// Releases every grant, at its own fence or the chosen one.
    async fn release(&self) {
        let chosen = self.chosen();
        let release = self.granted.iter().map(|(i, f)| {
            let values = [
                lease_value(&self.request.owner, self.lease, *f),
                chosen.clone(),
            ];
            let call = calls::release(&self.request.keys, LockKind::Exclusive, &values);
            let node = &self.nodes[*i];
            let timeout = self.timeouts[*i];
            async move {
                let _ = tokio::time::timeout(timeout, node.call::<i64>("release", &call)).await;
            }
        });
        join_all(release).await;
    }
}

/// Runs one call per master and collects the answers, by master index, until every
/// call has ended, or `grace` after `done` first says the answers settle the outcome:
/// healthy masters answering a little later still take part, and masters that are
/// silent (down, or behind a partition) cannot hold the outcome back. The calls still
/// running then are dropped.
async fn until<T, F>(
    calls: impl IntoIterator<Item = F>,
    grace: Duration,
    done: impl Fn(&[(usize, T)]) -> bool,
) -> Vec<(usize, T)>
where
    F: std::future::Future<Output = T>,
{
    let mut pending: FuturesUnordered<_> = calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| async move { (i, call.await) })
        .collect();
    let mut answers = Vec::new();
    let mut settled_at: Option<Instant> = None;
    loop {
        let next = match settled_at {
            None => pending.next().await,
            Some(at) => match tokio::time::timeout_at(at + grace, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some(answer) = next else { break };
        answers.push(answer);
        if settled_at.is_none() && done(&answers) {
            settled_at = Some(Instant::now());
        }
    }
    answers
}

/// How long a round waits for the other masters once a majority has answered: a
/// fiftieth of the lease (40 ms for a 2 s lease, 600 ms for 30 s), at least 5 ms.
fn straggler_grace(ttl: Duration) -> Duration {
    (ttl / 50).max(Duration::from_millis(5))
}

/// A strict majority of `masters`.
fn majority_of(masters: usize) -> usize {
    masters / 2 + 1
}

/// How long a release waits for the other masters once a majority has answered. A
/// master that stays silent keeps its copy of the key until the lease runs out, which
/// blocks nobody: a majority is free.
const RELEASE_GRACE: Duration = Duration::from_millis(50);

/// Releases `value` on every master; `(released, answered)`. With the `lease` that won
/// it, each master that frees it leaves a receipt, so a release run again after its
/// reply was lost still counts there (see [`calls::release_with_receipt`]).
async fn release_everywhere(
    nodes: &[Node],
    keys: &Keys,
    value: String,
    lease: Option<&RedisLease>,
) -> (usize, usize) {
    let quorum = majority_of(nodes.len());
    let call = match lease {
        Some(lease) => calls::release_with_receipt(keys, LockKind::Exclusive, lease, &value),
        None => calls::release(keys, LockKind::Exclusive, &[value]).invocation(),
    };
    let results = until(
        nodes.iter().map(|node| node.eval::<i64>("release", &call)),
        RELEASE_GRACE,
        |answers| answers.iter().filter(|(_, r)| r.is_ok()).count() >= quorum,
    )
    .await;
    let released = results.iter().filter(|(_, r)| matches!(r, Ok(1))).count();
    let answered = results.iter().filter(|(_, r)| r.is_ok()).count();
    (released, answered)
}

impl LockBackend for RedLockBackend {
    type Lease = RedisLease;

    fn name(&self) -> &'static str {
        BACKEND
    }

    fn location(&self) -> String {
        let masters: Vec<String> = self.nodes.iter().map(|n| n.config().location()).collect();
        masters.join(",")
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::ALL;
        caps.fair = false;
        caps.read_write = false;
        // A permit's count and queue cannot be agreed by a majority of independent
        // masters without a consensus round per grant.
        caps.semaphore = false;
        caps.election = false;
        caps.inspect = false;
        // A force-unlock on the masters is found at the next renewal.
        caps.loss_notice = false;
        caps
    }

    async fn settle(&self) {
        join_all(self.nodes.iter().map(|node| node.cleanups().settled())).await;
    }

    async fn acquire(&self, req: AcquireRequest<'_>) -> Result<Option<Grant<RedisLease>>> {
        if req.kind != LockKind::Exclusive {
            return Err(Error::Unsupported {
                backend: BACKEND,
                operation: "fair and read-write locks on RedLock",
            });
        }
        let n = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        let request = Request {
            keys: Keys::new(req.key),
            kind: LockKind::Exclusive,
            permits: 1,
            owner: req.owner.as_str().to_owned(),
            ttl: req.ttl,
            waiter: format!("{}:w{n}", req.owner),
            // RedLock waiters do not register: every release wakes them.
            inbox: "".into(),
            waiter_lease: self.nodes[0].config().waiter_lease(),
        };
        let timeouts: Vec<Duration> = self
            .nodes
            .iter()
            .map(|node| self.per_node_timeout(node, req.ttl))
            .collect();
        let cap = self.nodes[0].config().waiter_lease() / 3;
        let mut poll = SilentPoll::new(self.nodes[0].config().silent_holder_poll());
        let mut registrations = Vec::new();
        // Rounds that too few masters answer (most of them down or restarting) are
        // tried again with a growing pause, for up to the failover grace within the
        // wait limit; then the error is the caller's.
        let mut outage = Outage::with_grace(Some(self.nodes[0].config().failover_grace()));
        loop {
            if !registrations.is_empty() {
                // A master that is down or silent cannot publish either: wait for a
                // majority of subscriptions, not for the silent ones.
                let quorum = self.quorum();
                until(
                    registrations.iter().map(crate::pubsub::Registration::ready),
                    straggler_grace(req.ttl),
                    |ready| ready.iter().filter(|(_, r)| r.is_ok()).count() >= quorum,
                )
                .await;
            }
            let round_started = Instant::now();
            let (outcome, lease) = self.one_round(&request, &timeouts, req.holder).await?;
            let (holder, answered) = match outcome {
                Round::Granted(fence) => {
                    return Ok(Some(Grant {
                        fence,
                        data: lease,
                        started_at: round_started,
                    }))
                }
                Round::Failed { holder, answered } => (holder, answered),
            };
            if answered < self.quorum() {
                outage.ride_out(self.no_quorum(answered), &req).await?;
                continue;
            }
            outage.over();
            if req.deadline.has_passed() {
                return Ok(None);
            }
            if registrations.is_empty() {
                let channel = request.keys.exclusive_channel();
                registrations = self
                    .nodes
                    .iter()
                    .map(|node| node.pubsub().register(channel.clone(), Interest::One))
                    .collect();
                continue;
            }
            let pause = match holder {
                Some(blocker) => poll.bound(sleep_for(blocker.ms, cap, false), blocker),
                None => MAX_JITTER.mul_f64(rand::rng().random_range(0.2..1.0)),
            };
            let wake_at = req.deadline.min(Instant::now() + pause);
            let notified =
                futures::future::select_all(registrations.iter().map(|r| Box::pin(r.notified())));
            tokio::select! {
                _ = notified, if holder.is_some() => {}
                () = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }

    /// Releases the lease on every master. It was still held only if a majority had
    /// it: released on fewer, it is reported as not this owner's
    /// ([`Error::NotOwner`], which lock-core reports as a lost lease), the minority's
    /// copies freed all the same, unless the masters that did not answer could make up
    /// the majority (a retryable [`Error::Unavailable`]: whether it was held is
    /// unknown).
    async fn release(&self, lease: &HeldLease<RedisLease>) -> Result<()> {
        let keys = Keys::new(&lease.key);
        let value = lease_value(lease.owner.as_str(), &lease.data, lease.fence);
        let (released, answered) =
            release_everywhere(&self.nodes, &keys, value, Some(&lease.data)).await;
        let quorum = self.quorum();
        let silent = self.nodes.len() - answered;
        if released >= quorum {
            Ok(())
        } else if answered < quorum {
            Err(self.no_quorum(answered))
        } else if released + silent >= quorum {
            Err(err::Error::ReleaseUndecided {
                released,
                silent,
                needed: quorum,
            }
            .into())
        } else {
            Err(Error::not_owner(&lease.key))
        }
    }

    async fn renew(
        &self,
        leases: &[&HeldLease<RedisLease>],
        ttl: Duration,
    ) -> Result<Vec<Renewal>> {
        let quorum = self.quorum();
        let masters = self.nodes.len();
        // Done shortly after every lease is decided: renewed on a majority, or refused
        // (or not answered) by so many masters that no majority can renew it. A silent
        // master must not hold the renewal past the lease it renews, also when some
        // lease was lost; nor is it waited for longer than the lease.
        let results = until(
            self.nodes.iter().map(|node| {
                let limit = self.per_node_timeout(node, ttl);
                async move {
                    match tokio::time::timeout(limit, renew_on(node, leases, ttl)).await {
                        Ok(renewed) => renewed,
                        Err(_) => Err(err::Error::TimedOut {
                            what: "renew",
                            after: limit,
                        }
                        .into()),
                    }
                }
            }),
            straggler_grace(ttl),
            |answers| {
                (0..leases.len()).all(|i| {
                    let renewed = answers
                        .iter()
                        .filter(|(_, a)| {
                            a.as_ref()
                                .is_ok_and(|a| a.get(i) == Some(&Renewal::Renewed))
                        })
                        .count();
                    renewed >= quorum || answers.len() - renewed > masters - quorum
                })
            },
        )
        .await;
        let answers: Vec<Vec<Renewal>> = results.into_iter().filter_map(|(_, r)| r.ok()).collect();
        if answers.len() < self.quorum() {
            return Err(self.no_quorum(answers.len()));
        }
        Ok((0..leases.len())
            .map(|i| {
                let renewed = answers
                    .iter()
                    .filter(|a| a.get(i) == Some(&Renewal::Renewed))
                    .count();
                if renewed >= self.quorum() {
                    Renewal::Renewed
                } else {
                    Renewal::Lost
                }
            })
            .collect())
    }

    async fn is_locked(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        calls::refuse_elections(family)?;
        let call = calls::inspect(&Keys::new(key), family, calls::Inspect::Look);
        let results = join_all(
            self.nodes
                .iter()
                .map(|node| node.call::<i64>("is_locked", &call)),
        )
        .await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if answered < self.quorum() {
            return Err(self.no_quorum(answered));
        }
        let held = results.iter().filter(|r| matches!(r, Ok(1))).count();
        Ok(held >= self.quorum())
    }

    async fn force_unlock(&self, key: &LockKey, family: LockFamily) -> Result<bool> {
        calls::refuse_elections(family)?;
        let call = calls::inspect(&Keys::new(key), family, calls::Inspect::RemoveAll);
        let results = join_all(
            self.nodes
                .iter()
                .map(|node| node.call::<i64>("force_unlock", &call)),
        )
        .await;
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if answered < self.quorum() {
            return Err(self.no_quorum(answered));
        }
        Ok(results.iter().any(|r| matches!(r, Ok(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_leaves_out_the_drift_margin_and_refuses_slivers() {
        assert_eq!(
            drift_validity(Duration::from_secs(10)),
            Duration::from_millis(9_898)
        );
        assert_eq!(drift_validity(Duration::from_millis(1)), Duration::ZERO);
        assert_eq!(
            min_validity(Duration::from_secs(30)),
            Duration::from_secs(3)
        );
        assert!(Duration::from_millis(1) < min_validity(Duration::from_millis(100)));
    }
}
