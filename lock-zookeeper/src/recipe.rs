//! The lock recipe: an ephemeral sequential node per contender, the lowest holds, each
//! waiter watches only the node it waits for (no herd), and a dropped acquire deletes
//! its node.
//!
//! A semaphore of `n` permits: the first `n` nodes hold, if they all carry the count
//! `n`. The first waiter (exactly `n` before it) watches the path's children; each
//! later one watches its predecessor, whose grant writes its node (the fencing write)
//! or whose leaving deletes it. So a release wakes the first waiter, and each grant the
//! one behind it.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::backend::{AcquireRequest, Grant};
use lock_core::{Error, LeaseLoss, LockKind, Result};
use tokio::time::Instant;
use zookeeper_client::{
    Client, Error as ZkError, EventType, MultiWriteError, MultiWriteResult, OneshotWatcher,
    SessionState, Stat, WatchedEvent,
};

use crate::backend::Inner;
use crate::error::{self, is_connection_loss};
use crate::lease::{self, LeaseFlags, ZkLease};
use crate::node_data;
use crate::path::{self, Contender};
use crate::session::{self, Session};
use crate::stats::Count;

/// How often a lock path may vanish under a create (a container reaped in between)
/// before we give up.
const CREATE_ATTEMPTS: usize = 5;
/// Pause between retries of a request that lost its connection.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How one attempt with one node ended.
enum Attempt {
    Granted(Grant<ZkLease>),
    TimedOut,
    /// Our node disappeared while we waited (deleted by an operator): queue again.
    NodeVanished,
    /// A downgrade found the owner's write node gone; nothing was created.
    WriteGone,
}

/// How long each request of an acquire may wait for its answer: the request timeout,
/// and no later than the acquire's deadline while it may still wait (a single try is
/// bounded by the request timeout alone).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    request_timeout: Duration,
    deadline: Option<Instant>,
}

impl Limits {
    fn of(inner: &Inner, req: &AcquireRequest<'_>) -> Self {
        Limits {
            request_timeout: inner.sessions.config().request_timeout(),
            deadline: if req.deadline.has_passed() {
                None
            } else {
                req.deadline.instant()
            },
        }
    }

    /// When a request sent now must have been answered.
    fn next(&self) -> Instant {
        let timeout = Instant::now() + self.request_timeout;
        self.deadline
            .map_or(timeout, |deadline| deadline.min(timeout))
    }

    /// Whether the acquire's wait ran out: a request that failed for want of an answer
    /// then means "not acquired within the limit".
    fn ran_out(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
    }
}

/// Runs one request, failing it with `Timeout` if it is not answered by `until`. The
/// request may still reach the server later: callers treat a timeout as a lost
/// connection (the request may or may not have happened).
pub(crate) async fn bounded<T>(
    until: Instant,
    request: impl std::future::Future<Output = Result<T, ZkError>>,
) -> Result<T, ZkError> {
    tokio::time::timeout_at(until, request)
        .await
        .unwrap_or(Err(ZkError::Timeout))
}

/// Takes the lock `req` asks for, waiting until its deadline.
pub(crate) async fn acquire(
    inner: &Inner,
    req: &AcquireRequest<'_>,
) -> Result<Option<Grant<ZkLease>>> {
    let limits = Limits::of(inner, req);
    match acquire_within(inner, req, limits).await {
        // A request cut short by the deadline (or failed after it): the wait ran out.
        Err(err) if err.is_retryable() && limits.ran_out() => {
            tracing::debug!(error = %err, "zookeeper acquire ran out of time in a request");
            Ok(None)
        }
        other => other,
    }
}

async fn acquire_within(
    inner: &Inner,
    req: &AcquireRequest<'_>,
    limits: Limits,
) -> Result<Option<Grant<ZkLease>>> {
    let dir = path::lock_path(req.key, req.kind.family());
    let mut may_downgrade = req.kind == LockKind::Read;
    loop {
        let session = inner.sessions.get().await?;
        // A read request of the holder of the write lock: a downgrade, granted at once.
        let downgrade = if may_downgrade {
            inner.held_write(&dir, req.owner)
        } else {
            None
        };
        if req.deadline.has_passed()
            && downgrade.is_none()
            && blocked_now(inner, &session, req, &dir, limits).await?
        {
            // A single try on a held lock: no node needed to say no.
            return Ok(None);
        }
        match attempt(inner, &session, req, &dir, downgrade.as_deref(), limits).await? {
            Attempt::Granted(grant) => return Ok(Some(grant)),
            Attempt::TimedOut => return Ok(None),
            Attempt::NodeVanished if req.deadline.has_passed() => return Ok(None),
            Attempt::NodeVanished => {
                tracing::debug!(%dir, "our waiting node was deleted; queueing again");
            }
            Attempt::WriteGone => {
                tracing::debug!(%dir, "the write lock went before its downgrade; reading as an ordinary reader");
                may_downgrade = false;
            }
        }
    }
}

/// Whether a contender that would block `req` exists right now.
async fn blocked_now(
    inner: &Inner,
    session: &Session,
    req: &AcquireRequest<'_>,
    dir: &str,
    limits: Limits,
) -> Result<bool> {
    let children = match read_children(inner, &session.client, dir, limits.next()).await {
        Ok((children, _)) => children,
        Err(ZkError::NoNode) => return Ok(false),
        Err(err) => return Err(error::map(err)),
    };
    let queue = path::contenders(&children, req.kind.family());
    if req.kind == LockKind::Permit {
        // Another count is refused by the attempt, with the error.
        let turn = permit_turn(&queue, queue.len(), req.permits);
        return Ok(!matches!(turn, PermitTurn::Holds | PermitTurn::Refused(_)));
    }
    Ok(blocker(req.kind, &queue, queue.len(), false).is_some())
}

/// The contender that the one at `pos` in `queue` must wait for, if any; `downgrade`:
/// the one at `pos` is our downgrade reader.
fn blocker(kind: LockKind, queue: &[Contender], pos: usize, downgrade: bool) -> Option<&Contender> {
    let before = &queue[..pos];
    match kind {
        // The holder of the write lock takes the read lock at once: its write lock
        // keeps every other writer out, and readers share.
        LockKind::Read if downgrade => None,
        // Other readers wait only for writers queued before them. The nearest such
        // writer is the one to watch: when it goes after holding, every node before it
        // is gone too.
        LockKind::Read => before.iter().rev().find(|c| c.writer),
        // A writer waits for every node before it, and then for every downgrade
        // reader wherever it stands: one made after this writer queued (while the
        // write lock was held) still holds the read side.
        LockKind::Write => before
            .last()
            .or_else(|| queue.iter().skip(pos).find(|c| c.downgrade)),
        // Permits wait by `permit_turn`.
        LockKind::Exclusive | LockKind::Fair | LockKind::Permit | LockKind::Leader => before.last(),
    }
}

/// Where a semaphore's contender stands.
#[derive(Debug, PartialEq, Eq)]
enum PermitTurn {
    /// Fewer contenders before it than its count, all of its count: it holds.
    Holds,
    /// The oldest contender has another count (`None`: a node that carries none).
    Refused(Option<u32>),
    /// Exactly as many before it as its count: the first waiter, woken when any
    /// child of the path goes.
    First,
    /// Waits for this node to be granted or to go: its predecessor, or the nearest
    /// contender of another count before it (which leaves when it sees the oldest's).
    Behind(String),
}

/// Where the contender at `pos` of `queue` stands in a semaphore of `permits`. Holding
/// needs every node before to carry the same count: two holders of different counts
/// could otherwise each count only their own kind.
fn permit_turn(queue: &[Contender], pos: usize, permits: u32) -> PermitTurn {
    let own = Some(permits);
    match queue.first() {
        Some(oldest) if oldest.permits != own => return PermitTurn::Refused(oldest.permits),
        _ => {}
    }
    let before = &queue[..pos];
    if let Some(other) = before.iter().rev().find(|c| c.permits != own) {
        return PermitTurn::Behind(other.name.clone());
    }
    match pos.cmp(&usize::try_from(permits).unwrap_or(usize::MAX)) {
        std::cmp::Ordering::Less => PermitTurn::Holds,
        std::cmp::Ordering::Equal => PermitTurn::First,
        std::cmp::Ordering::Greater => match before.last() {
            Some(predecessor) => PermitTurn::Behind(predecessor.name.clone()),
            None => PermitTurn::Holds,
        },
    }
}

/// The error of a permit whose count is not the semaphore's (see [`PermitTurn::Refused`]).
fn other_count(req: &AcquireRequest<'_>, in_force: Option<u32>) -> Error {
    match in_force {
        Some(in_force) => Error::other_permit_count(req.key, in_force, req.permits),
        None => Error::invalid_argument(format!(
            "semaphore `{}` has a contender node that carries no permit count",
            req.key.name()
        )),
    }
}

/// What a waiter waits for.
enum Wait {
    /// The deletion of the node at this path.
    Deletion(String),
    /// A permit's turn.
    Permit(PermitTurn),
}

async fn read_children(
    inner: &Inner,
    client: &Client,
    dir: &str,
    until: Instant,
) -> Result<(Vec<String>, Stat), ZkError> {
    inner.counters.bump(Count::ChildrenRead);
    bounded(until, client.get_children(dir)).await
}

/// One node's life in the queue: create it, wait for its turn, hand it over.
/// `downgrade_from`: the owner's write node, for a read request that downgrades.
async fn attempt(
    inner: &Inner,
    session: &Session,
    req: &AcquireRequest<'_>,
    dir: &str,
    downgrade_from: Option<&str>,
    limits: Limits,
) -> Result<Attempt> {
    let protect = uuid::Uuid::new_v4();
    // Armed before the create is sent: if this future is dropped from here on, the node
    // is deleted (found by its uuid if the create's reply never came).
    let mut pending = Pending::new(
        session.client.clone(),
        inner.cleanups.clone(),
        dir,
        &protect,
        inner.sessions.config().request_timeout(),
    );
    let outcome = queue(
        inner,
        session,
        req,
        dir,
        downgrade_from,
        limits,
        &protect,
        &mut pending,
    )
    .await;
    match outcome {
        Err(err) if err.is_retryable() && limits.ran_out() => {
            // A request cut short by the deadline: leave the queue before saying so.
            tracing::debug!(error = %err, "zookeeper acquire ran out of time in a request");
            pending.remove().await;
            Ok(Attempt::TimedOut)
        }
        other => other,
    }
}

/// The body of [`attempt`], with its node's clean-up in `pending`.
#[allow(clippy::too_many_arguments)]
async fn queue(
    inner: &Inner,
    session: &Session,
    req: &AcquireRequest<'_>,
    dir: &str,
    downgrade_from: Option<&str>,
    limits: Limits,
    protect: &uuid::Uuid,
    pending: &mut Pending,
) -> Result<Attempt> {
    let client = &session.client;
    let prefix = match downgrade_from {
        Some(_) => format!("{dir}/{}", path::downgrade_prefix(protect)),
        None if req.kind == LockKind::Permit => {
            format!("{dir}/{}", path::permit_prefix(protect, req.permits))
        }
        None => format!("{dir}/{}", path::node_prefix(protect, req.kind)),
    };
    let data = match req.kind {
        // A candidate's value alone, as Curator's `LeaderLatch` writes its id.
        LockKind::Leader => req.holder.as_bytes().to_vec(),
        _ => node_data::encode(req.owner.as_str(), req.holder),
    };
    let owner = data.as_slice();
    let (node, created) = match downgrade_from {
        Some(write) => {
            match create_downgrade(inner, client, dir, &prefix, owner, write, limits).await? {
                Some(made) => made,
                None => {
                    // The multi-op failed as a whole: there is no node to delete.
                    pending.disarm();
                    return Ok(Attempt::WriteGone);
                }
            }
        }
        None => create(inner, client, dir, &prefix, owner, limits).await?,
    };
    pending.node = Some(node.clone());
    let name = node[dir.len() + 1..].to_owned();

    // Our own node is watched once we wait (a waiter whose node goes must know), or,
    // granted at once, from `lease::WATCH_AFTER` on: a short hold sets no watch, and
    // its release fires none.
    let mut listing = read_children(inner, client, dir, limits.next()).await;
    let mut own_deleted: Option<BoxFuture<'static, WatchedEvent>> = None;
    let mut first_check = true;
    // A permit's watch, with the turn it was set for.
    let mut armed: Option<(PermitTurn, OneshotWatcher)> = None;
    loop {
        let (children, parent) = match listing {
            Ok(found) => found,
            Err(ZkError::NoNode) => return Ok(Attempt::NodeVanished),
            Err(err) => return Err(error::map(err)),
        };
        let queue = path::contenders(&children, req.kind.family());
        let Some(pos) = queue.iter().position(|c| c.name == name) else {
            return Ok(Attempt::NodeVanished);
        };
        let downgrade = downgrade_from.is_some();
        let waiting = match req.kind {
            LockKind::Permit => match permit_turn(&queue, pos, req.permits) {
                PermitTurn::Holds => None,
                PermitTurn::Refused(in_force) => {
                    pending.remove().await;
                    return Err(other_count(req, in_force));
                }
                turn => Some(Wait::Permit(turn)),
            },
            kind => blocker(kind, &queue, pos, downgrade)
                .map(|ahead| Wait::Deletion(format!("{dir}/{}", ahead.name))),
        };
        let Some(waiting) = waiting else {
            let fresh = first_check && (downgrade || parent.pzxid == created.czxid);
            let own_deleted = match own_deleted {
                Some(watched) => watched.map(lease::loss_of).boxed(),
                None => lease::deleted_later(client.clone(), node.clone()),
            };
            let granted = Granted {
                dir,
                node,
                owner,
                created: &created,
                fresh,
                own_deleted,
            };
            return granted.finish(inner, session, req, limits, pending).await;
        };
        if req.deadline.has_passed() {
            pending.remove().await;
            return Ok(Attempt::TimedOut);
        }
        let own_deleted = match &mut own_deleted {
            Some(watched) => watched,
            None => {
                let watched = bounded(limits.next(), client.list_and_watch_children(&node)).await;
                match watched {
                    Ok((_, watcher)) => own_deleted.insert(watcher.changed().boxed()),
                    Err(ZkError::NoNode) => return Ok(Attempt::NodeVanished),
                    Err(err) => return Err(error::map(err)),
                }
            }
        };
        let waited = match &waiting {
            Wait::Deletion(ahead_path) => {
                Some(wait_for_deletion(inner, session, req, ahead_path, limits, own_deleted).await?)
            }
            Wait::Permit(turn) => match armed.take() {
                Some((watched, watcher)) if watched == *turn => {
                    // A look now and then: a predecessor granted by the count but
                    // stalled before its fencing write must not hold up this waiter
                    // until its session ends.
                    let recheck = inner.sessions.config().session_timeout() / 3;
                    let woken =
                        wait_for_event(inner, session, req, watcher, own_deleted, Some(recheck));
                    Some(woken.await?)
                }
                // Not watching yet: set the watch below, then look.
                _ => None,
            },
        };
        match waited {
            Some(Waited::OwnNodeGone) => return Ok(Attempt::NodeVanished),
            Some(Waited::TimedOut) => {
                pending.remove().await;
                return Ok(Attempt::TimedOut);
            }
            Some(Waited::Deleted) | None => {}
        }
        first_check = false;
        listing = match waiting {
            Wait::Deletion(_) => read_children(inner, client, dir, limits.next()).await,
            // Watch, and look again in the same round trip (one session's requests are
            // served in order): the look tells whether what the watch waits for
            // happened before it was set.
            Wait::Permit(turn) => {
                let (watcher, fresh) = arm(inner, client, dir, &turn, limits).await?;
                armed = watcher.map(|watcher| (turn, watcher));
                fresh
            }
        };
    }
}

/// A contender that found itself first in line.
struct Granted<'a> {
    dir: &'a str,
    node: String,
    owner: &'a [u8],
    created: &'a Stat,
    /// Nothing was granted on the lock path since the node was made (see [`fence`]).
    fresh: bool,
    /// Resolves when our node goes (or its session ends).
    own_deleted: BoxFuture<'static, LeaseLoss>,
}

impl Granted<'_> {
    /// Reads the fencing token and hands the node over to the lease's watch.
    async fn finish(
        self,
        inner: &Inner,
        session: &Session,
        req: &AcquireRequest<'_>,
        limits: Limits,
        pending: &mut Pending,
    ) -> Result<Attempt> {
        let client = &session.client;
        // Granted: finish within the request timeout, whatever the deadline.
        let until = Instant::now() + limits.request_timeout;
        let fence = match req.kind {
            LockKind::Leader => term(client, &self.node, self.created, until).await,
            _ => {
                fence(
                    inner,
                    client,
                    &self.node,
                    self.owner,
                    self.created,
                    self.fresh,
                    until,
                )
                .await
            }
        };
        let fence = match fence {
            Ok(fence) => fence,
            Err(ZkError::NoNode) => return Ok(Attempt::NodeVanished),
            Err(err) => return Err(error::map(err)),
        };
        pending.disarm();
        let flags = Arc::new(LeaseFlags::default());
        if req.kind == LockKind::Write {
            inner.register_writer(self.dir, req.owner, &flags, &self.node);
        }
        lease::watch(
            flags.clone(),
            self.own_deleted,
            session.dead_signal(),
            req.loss.clone(),
        );
        Ok(Attempt::Granted(Grant {
            fence,
            // The session, not this instant, keeps the lease; see `ZkBackend::renew`.
            started_at: tokio::time::Instant::now(),
            data: ZkLease {
                path: self.node,
                generation: session.generation,
                flags,
            },
        }))
    }
}

/// How a wait for the node ahead ended.
enum Waited {
    /// It was deleted (or already gone), or a permit's predecessor was granted: look
    /// at the queue again.
    Deleted,
    /// Our own node went.
    OwnNodeGone,
    /// The acquire's deadline passed.
    TimedOut,
}

/// Waits until the node at `ahead_path` is deleted, our own node goes, the session
/// ends (an error) or the acquire's deadline passes.
async fn wait_for_deletion(
    inner: &Inner,
    session: &Session,
    req: &AcquireRequest<'_>,
    ahead_path: &str,
    limits: Limits,
    own_deleted: &mut BoxFuture<'static, WatchedEvent>,
) -> Result<Waited> {
    // A child watch on the node ahead: it fires only when that node is deleted
    // (ephemeral nodes have no children), not when its holder writes its data.
    let client = &session.client;
    let watcher = match bounded(limits.next(), client.list_and_watch_children(ahead_path)).await {
        Err(ZkError::NoNode) => return Ok(Waited::Deleted), // Already gone.
        Err(err) => return Err(error::map(err)),
        Ok((_, watcher)) => watcher,
    };
    wait_for_event(inner, session, req, watcher, own_deleted, None).await
}

/// Sets the watch a permit's `turn` waits on, and lists the path's children right
/// behind it. No watcher if the predecessor is already gone (the listing shows it).
async fn arm(
    inner: &Inner,
    client: &Client,
    dir: &str,
    turn: &PermitTurn,
    limits: Limits,
) -> Result<(Option<OneshotWatcher>, Result<(Vec<String>, Stat), ZkError>)> {
    let until = limits.next();
    match turn {
        PermitTurn::Behind(name) => {
            let ahead = format!("{dir}/{name}");
            let watch = bounded(until, client.check_and_watch_stat(&ahead));
            let (watched, listing) =
                futures::join!(watch, read_children(inner, client, dir, until));
            match watched {
                Ok((Some(_), watcher)) => Ok((Some(watcher), listing)),
                Ok((None, _)) => Ok((None, listing)),
                Err(err) => Err(error::map(err)),
            }
        }
        _ => {
            inner.counters.bump(Count::ChildrenRead);
            match bounded(until, client.get_and_watch_children(dir)).await {
                Ok((children, stat, watcher)) => Ok((Some(watcher), Ok((children, stat)))),
                Err(err) => Ok((None, Err(err))),
            }
        }
    }
}

/// Waits until `watcher` fires, our own node goes, the session ends (an error), the
/// acquire's deadline passes or `recheck` has passed (then as if woken).
async fn wait_for_event(
    inner: &Inner,
    session: &Session,
    req: &AcquireRequest<'_>,
    watcher: OneshotWatcher,
    own_deleted: &mut BoxFuture<'static, WatchedEvent>,
    recheck: Option<Duration>,
) -> Result<Waited> {
    let recheck = async {
        match recheck {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
    };
    let deadline = async {
        match req.deadline.instant() {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let _waiting = inner.counters.waiting();
    tokio::select! {
        event = watcher.changed() => {
            if event.event_type == EventType::Session {
                return Err(session::ended_error());
            }
            inner.counters.bump(Count::Wakeup);
            Ok(Waited::Deleted)
        }
        event = own_deleted => {
            if event.event_type == EventType::Session {
                return Err(session::ended_error());
            }
            Ok(Waited::OwnNodeGone)
        }
        () = session::ended(session.dead_signal()) => Err(session::ended_error()),
        () = deadline => Ok(Waited::TimedOut),
        () = recheck => Ok(Waited::Deleted),
    }
}

/// The fencing token of a grant: a zxid greater than every token granted before.
///
/// The node's czxid is one (`fresh`) when the grant came on the first look and no
/// child of the lock path changed since our create (the parent's pzxid is our czxid):
/// nothing was granted on this path after it; or for a downgrade, whose create is its
/// grant. Otherwise (we waited, or others came and went) an earlier holder may have
/// drawn a later zxid, so write our node's data and take that write's zxid: one more
/// round trip, only for contended grants (and a multi-op's create whose stat the
/// server left invalid, ZOOKEEPER-4026).
async fn fence(
    inner: &Inner,
    client: &Client,
    node: &str,
    data: &[u8],
    created: &Stat,
    fresh: bool,
    until: Instant,
) -> Result<u64, ZkError> {
    let zxid = if fresh && !created.is_invalid() {
        created.czxid
    } else {
        inner.counters.bump(Count::FenceWrite);
        // The same data again: only the write's zxid matters.
        bounded(until, client.set_data(node, data, None))
            .await?
            .mzxid
    };
    // Zxids are positive; a negative one would be a server bug, not a reason to panic.
    u64::try_from(zxid).map_err(|_| ZkError::UnexpectedError(format!("negative zxid {zxid}")))
}

/// An election leader's term: its node's czxid, which every reader of the election
/// (Curator's too) sees, and a proclaim's write leaves alone. Candidates lead in
/// sequence order, which is czxid order, so terms increase from leader to leader.
async fn term(client: &Client, node: &str, created: &Stat, until: Instant) -> Result<u64, ZkError> {
    let czxid = if created.is_invalid() {
        // ZOOKEEPER-4026: read the stat the create's answer left out.
        match bounded(until, client.check_stat(node)).await? {
            Some(stat) => stat.czxid,
            None => return Err(ZkError::NoNode),
        }
    } else {
        created.czxid
    };
    u64::try_from(czxid).map_err(|_| ZkError::UnexpectedError(format!("negative zxid {czxid}")))
}

/// Creates our contender node, with the parents it needs. A create whose connection
/// dropped may still have happened: the node is then found by its uuid rather than
/// created twice (Curator's protected mode). Bounded by one request timeout (or the
/// deadline) in all.
async fn create(
    inner: &Inner,
    client: &Client,
    dir: &str,
    prefix: &str,
    data: &[u8],
    limits: Limits,
) -> Result<(String, Stat)> {
    let secured = inner.secured();
    let options = crate::acl::contender_options(secured);
    let give_up = limits.next();
    let mut parents_made = 0;
    loop {
        inner.counters.bump(Count::Create);
        let err = match bounded(give_up, client.create(prefix, data, &options)).await {
            Ok((stat, seq)) => return Ok((format!("{prefix}{seq}"), stat)),
            Err(err) => err,
        };
        match err {
            ZkError::NoNode if parents_made < CREATE_ATTEMPTS => {
                parents_made += 1;
                let dir_options = crate::acl::directory_options(secured, true);
                match bounded(give_up, client.mkdir(dir, &dir_options)).await {
                    Ok(()) => {}
                    Err(ZkError::Timeout) => return Err(error::map(ZkError::Timeout)),
                    Err(err) if is_connection_loss(&err) => tokio::time::sleep(RETRY_PAUSE).await,
                    Err(err) => return Err(error::map(err)),
                }
            }
            err if is_connection_loss(&err) || err == ZkError::Timeout => {
                if let Some(found) = find_own(client, dir, prefix, give_up).await? {
                    return Ok(found);
                }
                if Instant::now() >= give_up {
                    return Err(error::map(err));
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            err => return Err(error::map(err)),
        }
    }
}

/// Creates a downgrade reader's node in one multi-op with a check that the owner's write
/// node `write` still exists, so the read side is taken only while the write side is
/// held. `None` if the write node is gone (then nothing was created). A multi-op whose
/// connection dropped may still have happened: the node is then found by its uuid.
async fn create_downgrade(
    inner: &Inner,
    client: &Client,
    dir: &str,
    prefix: &str,
    data: &[u8],
    write: &str,
    limits: Limits,
) -> Result<Option<(String, Stat)>> {
    let options = crate::acl::contender_options(inner.secured());
    let give_up = limits.next();
    loop {
        inner.counters.bump(Count::Create);
        let mut multi = client.new_multi_writer();
        multi.add_check_version(write, -1).map_err(error::map)?;
        multi
            .add_create(prefix, data, &options)
            .map_err(error::map)?;
        let committed = tokio::time::timeout_at(give_up, multi.commit()).await;
        let err = match committed {
            Err(_) => ZkError::Timeout,
            Ok(Ok(results)) => {
                return match results.into_iter().nth(1) {
                    Some(MultiWriteResult::Create { path, stat }) => Ok(Some((path, stat))),
                    other => Err(lock_core::Error::backend(
                        crate::error::BACKEND,
                        format!("a downgrade's multi-op answered {other:?}"),
                    )),
                };
            }
            // The check (the first operation) failed: the write node is gone.
            Ok(Err(MultiWriteError::OperationFailed { index: 0, .. })) => return Ok(None),
            Ok(Err(
                MultiWriteError::OperationFailed { source, .. }
                | MultiWriteError::RequestFailed { source },
            )) => source,
        };
        if !is_connection_loss(&err) && err != ZkError::Timeout {
            return Err(error::map(err));
        }
        if let Some(found) = find_own(client, dir, prefix, give_up).await? {
            return Ok(Some(found));
        }
        if Instant::now() >= give_up {
            return Err(error::map(err));
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Our node under `dir`, found by the uuid in `prefix`, if it exists, after a create
/// whose answer did not come. Only a lookup that answered may say it does not: a failed
/// one is tried again until `until`, then the acquire fails (and its clean-up removes
/// whatever the create left). Creating again on a failed lookup would queue a second
/// node of ours behind the first, which then blocks us and everyone else until the
/// session ends.
async fn find_own(
    client: &Client,
    dir: &str,
    prefix: &str,
    until: Instant,
) -> Result<Option<(String, Stat)>> {
    loop {
        let err = match look_up(client, dir, prefix, until).await {
            Ok(found) => return Ok(found),
            Err(err) => err,
        };
        if Instant::now() >= until || !(is_connection_loss(&err) || err == ZkError::Timeout) {
            return Err(error::map(err));
        }
        tracing::debug!(%dir, error = %err, "could not look for our node after a lost create answer; looking again");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// One lookup for [`find_own`]. The create may have been served by a server other than
/// the one this session is connected to now (it reconnected), which may not have
/// applied it yet: `sync` first has that server catch up with the leader.
async fn look_up(
    client: &Client,
    dir: &str,
    prefix: &str,
    until: Instant,
) -> Result<Option<(String, Stat)>, ZkError> {
    match bounded(until, client.sync(dir)).await {
        Ok(()) | Err(ZkError::NoNode) => {}
        Err(err) => return Err(err),
    }
    let head = &prefix[dir.len() + 1..];
    let children = match bounded(until, client.list_children(dir)).await {
        Ok(children) => children,
        Err(ZkError::NoNode) => return Ok(None),
        Err(err) => return Err(err),
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(head)) else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    Ok(bounded(until, client.check_stat(&path))
        .await?
        .map(|stat| (path, stat)))
}

/// How long an acquire whose wait ran out waits for its node's removal before it
/// answers; the rest of the removal goes on in the background.
const REMOVE_GRACE: Duration = Duration::from_millis(500);

/// Deletes a contender node when its acquire ends without a grant, including when the
/// acquire future is dropped (the delete is spawned, since drop cannot wait).
struct Pending {
    client: Client,
    cleanups: lock_core::backend::Cleanups,
    dir: String,
    /// `_c_<uuid>`: finds the node if the create's reply was lost.
    tag: String,
    node: Option<String>,
    armed: bool,
    /// How long [`remove`](Self::remove) waits.
    request_timeout: Duration,
}

impl Pending {
    fn new(
        client: Client,
        cleanups: lock_core::backend::Cleanups,
        dir: &str,
        protect: &uuid::Uuid,
        request_timeout: Duration,
    ) -> Self {
        Pending {
            client,
            cleanups,
            dir: dir.to_owned(),
            tag: format!("_c_{}", protect.hyphenated()),
            node: None,
            armed: true,
            request_timeout,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Pending {
    /// Deletes the node now, before the acquire answers, so that a program that ends
    /// right after a timeout leaves no node queued ahead of others. Bounded by
    /// [`REMOVE_GRACE`] (a slow server must not stretch the wait limit), and not tried
    /// while the connection is lost (the acquire would only wait for it to come back);
    /// what is not done is left to `drop`, which deletes the node in the background.
    async fn remove(&mut self) {
        if !matches!(
            self.client.state(),
            SessionState::SyncConnected | SessionState::ConnectedReadOnly
        ) {
            return;
        }
        let removed = tokio::time::timeout(
            self.request_timeout.min(REMOVE_GRACE),
            delete_node(&self.client, &self.dir, &self.tag, self.node.clone()),
        )
        .await;
        if removed == Ok(true) {
            self.disarm();
        }
    }
}

/// Deletes our contender node, and every other node with its tag (a create whose
/// answer was lost may have made one); returns whether none is left.
async fn delete_node(client: &Client, dir: &str, tag: &str, node: Option<String>) -> bool {
    // Requests of one session are served in order, so a create still in flight is
    // visible to the listing sent after it.
    let mut nodes: Vec<String> = node.into_iter().collect();
    let listed = match client.list_children(dir).await {
        Ok(children) => {
            for name in children.into_iter().filter(|c| c.starts_with(tag)) {
                let path = format!("{dir}/{name}");
                if !nodes.contains(&path) {
                    nodes.push(path);
                }
            }
            true
        }
        // No lock path: no node of ours either.
        Err(ZkError::NoNode) => return true,
        Err(_) => false,
    };
    let mut gone = listed;
    for node in nodes {
        gone &= delete_one(client, &node).await;
    }
    gone
}

/// Deletes one node; whether it is gone.
async fn delete_one(client: &Client, node: &str) -> bool {
    for _ in 0..3 {
        match client.delete(node, None).await {
            Ok(()) | Err(ZkError::NoNode) => return true,
            Err(err) if is_connection_loss(&err) => tokio::time::sleep(RETRY_PAUSE).await,
            Err(_) => return false,
        }
    }
    false
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to delete from: the node goes when the session ends.
            return;
        };
        let client = self.client.clone();
        let dir = std::mem::take(&mut self.dir);
        let tag = std::mem::take(&mut self.tag);
        let node = self.node.take();
        self.cleanups.spawn_on(&runtime, async move {
            // Asked again while the session lives: a node left in the queue would be
            // granted the lock in its turn with nobody holding it, and keep it for as
            // long as the session lasts.
            let mut pause = Duration::from_millis(100);
            let until = tokio::time::Instant::now() + BACKGROUND_DELETE_LIMIT;
            while !delete_node(&client, &dir, &tag, node.clone()).await {
                let gone = matches!(
                    client.state(),
                    SessionState::Closed | SessionState::Expired | SessionState::AuthFailed
                );
                if gone || tokio::time::Instant::now() + pause >= until {
                    break;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        });
    }
}

/// How long a dropped or timed-out acquire's node is asked to go, at most.
const BACKGROUND_DELETE_LIMIT: Duration = Duration::from_secs(20);
