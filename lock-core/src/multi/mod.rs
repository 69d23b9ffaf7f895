//! Several locks, on any backends, held as one: all or nothing.

mod guard;
mod member;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::api::{DistributedLock, ReadWriteLock};
use crate::backend::LockKind;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::OVERDUE_GRACE;
use crate::id::LockId;
use crate::options::{AcquireOptions, Deadline, Lease, Wait};
use crate::semaphore::Semaphore;
pub use guard::{MemberError, MemberLoss, MultiGuard, MultiReleaseError};
use member::Member;

/// Several locks held as one: an acquire takes all of them or none.
///
/// Members are any mix of exclusive locks, fair locks and either side of read-write
/// locks, from one client or several, on one backend or several (a Redis lock for a
/// cache and a PostgreSQL lock for its table, say). Build one with
/// [`MultiLock::builder`]; cloning is cheap.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{memory::MemoryBackend, AcquireOptions, LockClient, MultiLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let cache = LockClient::new(MemoryBackend::new()); // e.g. a Redis client
/// let table = LockClient::new(MemoryBackend::new()); // e.g. a PostgreSQL client
/// let both = MultiLock::builder()
///     .lock(cache.lock("user:42")?)
///     .write(table.rw_lock("users")?)
///     .build()?;
///
/// let guard = both.acquire_with(AcquireOptions::wait_for(Duration::from_secs(5))).await?;
/// for (lock, token) in guard.fencing_tokens() {
///     println!("{lock}: fencing token {token}");
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Order, and why it cannot deadlock
///
/// Members are taken one after another in one canonical order, by [`LockId`]: by
/// namespace and name, then lock family, backend and location. Every process computes
/// the same order whatever order the builder was given, so two multi-locks over
/// overlapping sets never wait for each other in a cycle. (Two members that differ only
/// in location, the same name on two servers of one backend type, are ordered by the
/// location text: give every process the same server addresses.) A member is waited
/// for only while no later member is held.
///
/// # Waiting and leases
///
/// An acquire takes the same [`AcquireOptions`] as one lock:
/// * [`Wait::No`]: each member is tried once; the first held by someone else ends it.
/// * [`Wait::For`]: one limit shared by all members, counted from the call.
/// * [`Wait::Forever`]: waits for each member in turn.
/// * [`Lease::Watchdog`]: each member's client watchdog keeps its lease.
/// * [`Lease::Fixed`]: every member's lease ends that long after **all** are held. While
///   later members are awaited, earlier ones are kept by their watchdog, so a long wait
///   cannot let them run out; then each is set to the fixed lease (one
///   [`LockGuard::extend`] per member but the last, which is taken with the fixed lease
///   directly).
///
/// When an acquire fails (a member held, the wait limit reached, a backend error), every
/// member taken so far is released before it returns. A wait limit holds all the same:
/// fixed leases a slow server has not set a second past the limit fail the acquire
/// with [`Error::Timeout`], and releases it has not answered by then go on in the
/// background, as a dropped guard's do.
///
/// # Owners and re-entry
///
/// Each acquire of a multi-lock is an owner of its own, on every member, as an acquire
/// of one lock is: two acquires that run at the same time, of one `MultiLock` or of two
/// over overlapping members, exclude each other. Code that holds the multi-lock
/// re-enters it through its guard ([`MultiGuard::reenter`]): no round trip, and every
/// member stays held until the last guard of the acquisition goes.
///
/// One lock listed twice, even through two handles, is refused by
/// [`build`](MultiLockBuilder::build): one owner would wait for the other forever.
pub struct MultiLock {
    members: Arc<[Member]>,
}

impl MultiLock {
    /// A builder to list the members.
    pub fn builder() -> MultiLockBuilder {
        MultiLockBuilder {
            members: Vec::new(),
        }
    }

    /// The members, in the order they are taken: each lock's id and side.
    pub fn members(&self) -> impl ExactSizeIterator<Item = (&LockId, LockKind)> {
        self.members.iter().map(|m| (m.id(), m.kind()))
    }

    /// Whether every member's handle holds its lock on a live lease (through any
    /// acquire made with it). No round trip.
    pub fn is_held_by_me(&self) -> bool {
        self.members.iter().all(|m| m.hold_count() > 0)
    }

    /// Waits without limit for every member; watchdog leases.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with).
    ///
    /// # Cancel safety
    /// As [`acquire_with`](Self::acquire_with): nothing is left held.
    pub async fn acquire(&self) -> Result<MultiGuard> {
        self.acquire_with(AcquireOptions::wait_forever()).await
    }

    /// Tries each member once: `Ok(None)` if one is held by someone else, and then
    /// nothing is held.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), but for the timeout.
    ///
    /// # Cancel safety
    /// As [`acquire_with`](Self::acquire_with): nothing is left held.
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        match self.acquire_with(AcquireOptions::try_once()).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Waits up to `limit`, in all, for every member: [`Error::Timeout`] after that.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with).
    ///
    /// # Cancel safety
    /// As [`acquire_with`](Self::acquire_with): nothing is left held.
    pub async fn acquire_timeout(&self, limit: Duration) -> Result<MultiGuard> {
        self.acquire_with(AcquireOptions::wait_for(limit)).await
    }

    /// Acquires every member, waiting and leasing as `options` say (see
    /// [Waiting and leases](Self#waiting-and-leases)).
    ///
    /// # Errors
    /// * [`Error::Timeout`] naming the member not granted in time (for a single try:
    ///   held), with the multi-lock's wait limit;
    /// * [`Error::InvalidArgument`] for bad durations;
    /// * [`Error::Unsupported`] if a member's backend cannot keep a fixed lease, before
    ///   anything is taken;
    /// * any member's error ([`Error::Unavailable`], [`Error::Closed`], ...).
    ///
    /// Whatever the error, the members taken by this call were released first, or, for
    /// a wait limit, are being released in the background if the server had not
    /// answered a second past the limit.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, the member being waited for is left as
    /// its own acquire leaves it (nothing held or queued), and the members already taken
    /// are released in the background as dropped guards are.
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<MultiGuard> {
        let deadline = options.validate(Instant::now())?;
        for member in self.members.iter() {
            member.check_supported(options.lease_policy())?;
        }
        let span = tracing::debug_span!("lock.multi_acquire", members = self.members.len());
        async {
            let mut taken = Vec::with_capacity(self.members.len());
            let last = self.members.len() - 1;
            for (index, member) in self.members.iter().enumerate() {
                let wait = match options.wait() {
                    Wait::For(_) => Wait::For(deadline.remaining().unwrap_or_default()),
                    other => other,
                };
                // Earlier members keep a watchdog lease until the last is in: a fixed
                // lease must not run out while later members are awaited.
                let lease = if index == last {
                    options.lease_policy()
                } else {
                    Lease::Watchdog
                };
                let member_options = AcquireOptions::default().with_wait(wait).with_lease(lease);
                match member.acquire(member_options).await {
                    Ok(guard) => taken.push((member.id().clone(), guard)),
                    Err(err) => {
                        tracing::debug!(lock = %member.id(), error = %err, "multi-lock member not acquired");
                        release_all(taken, options.wait(), deadline).await;
                        return Err(with_wait_limit(err, options.wait()));
                    }
                }
            }
            if let Lease::Fixed(ttl) = options.lease_policy() {
                let earlier = taken[..last].iter();
                let extends = join_all(earlier.map(|(_, guard)| guard.extend(ttl)));
                let failed = match within_limit(options.wait(), deadline, extends).await {
                    Some(extended) => extended.into_iter().find_map(Result::err),
                    // A server too slow to set the fixed leases within the limit.
                    None => Some(with_wait_limit(
                        Error::Timeout {
                            name: taken[0].0.name().to_string(),
                            waited: Duration::ZERO,
                        },
                        options.wait(),
                    )),
                };
                if let Some(err) = failed {
                    release_all(taken, options.wait(), deadline).await;
                    return Err(err);
                }
            }
            tracing::debug!("multi-lock acquired");
            Ok(MultiGuard::new(taken))
        }
        .instrument(span)
        .await
    }
}

/// Releases what a failed acquire took; their own errors only matter to the logs. A
/// wait limit bounds it as it bounds one lock's acquire: releases still unanswered
/// [`OVERDUE_GRACE`] past the deadline are seen through in the background (a dropped
/// release future's are), so a slow server cannot stretch the limit.
async fn release_all(taken: Vec<(LockId, LockGuard)>, wait: Wait, deadline: Deadline) {
    let releases = taken.into_iter().map(|(id, guard)| async move {
        if let Err(err) = guard.release().await {
            tracing::debug!(lock = %id, error = %err, "releasing a member of a failed multi-lock acquire");
        }
    });
    if within_limit(wait, deadline, join_all(releases))
        .await
        .is_none()
    {
        tracing::debug!("members of a failed multi-lock acquire are still being released; going on in the background");
    }
}

/// Runs `work` until a wait limit's deadline plus [`OVERDUE_GRACE`], as one lock's
/// acquire is bounded (without a limit, to its end): `None` if the deadline came
/// first, and `work` was dropped.
async fn within_limit<T>(
    wait: Wait,
    deadline: Deadline,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    match (wait, deadline.instant()) {
        (Wait::For(_), Some(at)) => tokio::time::timeout_at(at + OVERDUE_GRACE, work).await.ok(),
        _ => Some(work.await),
    }
}

/// A member's timeout reports the limit the caller gave, not what was left of it.
fn with_wait_limit(err: Error, wait: Wait) -> Error {
    match (err, wait) {
        (Error::Timeout { name, .. }, Wait::For(limit)) => Error::Timeout {
            name,
            waited: limit,
        },
        (err, _) => err,
    }
}

/// A clone has the same members; acquiring through either is an owner of its own.
impl Clone for MultiLock {
    fn clone(&self) -> Self {
        MultiLock {
            members: self.members.clone(),
        }
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("members", &self.members)
            .finish()
    }
}

/// Lists the members of a [`MultiLock`]; the order given does not matter.
#[derive(Debug, Default)]
pub struct MultiLockBuilder {
    members: Vec<Member>,
}

impl MultiLockBuilder {
    /// Adds an exclusive or fair lock: a handle (`client.lock(..)?`,
    /// `client.fair_lock(..)?`) or an `Arc<dyn DistributedLock>` from a
    /// [`LockProvider`](crate::LockProvider). A fair member waits in its lock's queue.
    pub fn lock(mut self, lock: impl DistributedLock + 'static) -> Self {
        self.members.push(Member::mutex(Arc::new(lock)));
        self
    }

    /// Adds the read (shared) side of a read-write lock.
    pub fn read(mut self, lock: impl ReadWriteLock + 'static) -> Self {
        self.members.push(Member::read(Arc::new(lock)));
        self
    }

    /// Adds the write (exclusive) side of a read-write lock.
    pub fn write(mut self, lock: impl ReadWriteLock + 'static) -> Self {
        self.members.push(Member::write(Arc::new(lock)));
        self
    }

    /// Adds one permit of a semaphore: a handle (`client.semaphore(..)?`) or an
    /// `Arc<dyn Semaphore>`. A multi-lock takes at most one permit of a semaphore.
    pub fn permit(mut self, semaphore: impl Semaphore + 'static) -> Self {
        self.members.push(Member::permit(Arc::new(semaphore)));
        self
    }

    /// Checks the members and puts them in the canonical order.
    ///
    /// # Errors
    /// * [`Error::InvalidArgument`] with no member, or with one lock listed twice
    ///   (through one handle or two; for both sides of one read-write lock, list the
    ///   write side: it excludes readers too);
    /// * [`Error::Unsupported`] if a member's backend lacks its lock type (fair or
    ///   read-write locks, semaphores).
    pub fn build(mut self) -> Result<MultiLock> {
        if self.members.is_empty() {
            return Err(Error::invalid_argument(
                "a multi-lock needs at least one lock",
            ));
        }
        for member in &self.members {
            member.check_supported(Lease::Watchdog)?;
        }
        self.members.sort_by(|a, b| a.id().cmp(b.id()));
        if let Some(pair) = self.members.windows(2).find(|w| w[0].id() == w[1].id()) {
            return Err(Error::invalid_argument(format!(
                "{} is listed twice in one multi-lock; list each lock once (for both sides of a read-write lock, the write side)",
                pair[0].id()
            )));
        }
        Ok(MultiLock {
            members: self.members.into(),
        })
    }
}
