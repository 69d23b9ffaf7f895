//! Leader election: the user trait, its shorthands, the leadership a campaign wins and
//! the handle that implements it, all over the lock machinery.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;

use crate::api::delegate_to_target;
use crate::backend::{Capabilities, LockBackend};
use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::guard::{LeaseWatch, LockGuard};
use crate::handle::Handle;
use crate::id::LockId;
use crate::info::{check_description, LockInfo};
use crate::kinds::{LockFamily, LockKind};
use crate::lease::LeaseLoss;
use crate::name::{LockKey, LockName};
use crate::options::AcquireOptions;

/// How often [`Election::observe`] asks who leads.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(200);

/// The leader of an election as everyone can read it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader published: its campaign's, or its last
    /// [`proclaim`](Leadership::proclaim)'s.
    pub value: String,
    /// Its term: strictly greater than the terms of every earlier leader of this
    /// election, the same number the leader's [`Leadership::term`] gives. Hand it to
    /// storage that refuses writes from older terms.
    pub term: u64,
}

impl Leader {
    /// A leader with this value and term.
    pub fn new(value: impl Into<String>, term: u64) -> Self {
        Leader {
            value: value.into(),
            term,
        }
    }
}

/// Leader changes as [`Election::observe`] sees them.
pub type LeaderChanges = Pin<Box<dyn Stream<Item = Result<Leader>> + Send>>;

/// A leader election: one leader at a time among the candidates of every process that
/// campaigns on the name, candidates served in the order they came.
///
/// A campaign is an acquisition like a lock's: the leadership it wins is a lease kept
/// by the client's watchdog, lost (and reported through [`Leadership::lost`]) when the
/// lease cannot be kept, and its [`term`](Leadership::term) is a fencing token. The
/// value a candidate campaigns with is what everyone reads as the leader's value once
/// it leads (a host and port to send work to, say): [`leader`](Self::leader) reads it,
/// [`observe`](Self::observe) follows it.
///
/// ```
/// use lock_core::{memory::MemoryBackend, Election, ElectionExt, LockClient};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// let client = LockClient::new(MemoryBackend::new());
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("10.0.0.7:8080").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.value, "10.0.0.7:8080");
/// assert_eq!(leader.term, leadership.term());
/// leadership.proclaim("10.0.0.7:9090").await?;
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Election: Send + Sync + fmt::Debug {
    /// The election's name.
    fn name(&self) -> &LockName;

    /// Which election this is, the same for every candidate on the same store.
    fn lock_id(&self) -> LockId;

    /// What the backend under it supports.
    fn capabilities(&self) -> Capabilities;

    /// Campaigns with `value` and waits, as `options` say, until this candidate leads.
    ///
    /// # Errors
    /// [`Error::Timeout`] if it does not lead in time (or, for a single try, someone
    /// else leads or waits first); [`Error::InvalidArgument`] for a value longer than
    /// [`MAX_HOLDER_DESCRIPTION_BYTES`](crate::MAX_HOLDER_DESCRIPTION_BYTES) or with
    /// control characters, or bad durations; [`Error::Unsupported`] where the backend
    /// has no elections; [`Error::Unavailable`] if the backend cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, the candidacy is withdrawn and nothing is
    /// left behind.
    async fn campaign_with(&self, value: &str, options: AcquireOptions) -> Result<Leadership>;

    /// The current leader's value and term, or `None` if nobody leads.
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the backend has no elections;
    /// [`Error::Unavailable`] if the backend cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn leader(&self) -> Result<Option<Leader>>;

    /// Every change of leader or of the leader's value, in order, for followers: the
    /// current leader first (once someone leads), then each new term or newly
    /// proclaimed value. It asks the backend every [`OBSERVE_EVERY`]: a leader that
    /// comes and goes between two looks is not seen, and terms only increase from one
    /// item to the next. A failed look is an `Err` item, and the stream goes on.
    fn observe(&self) -> LeaderChanges;

    /// **For operators:** removes the leader, whose [`Leadership::lost`] reports it;
    /// the candidates keep their places, and the next one leads. Returns whether
    /// anyone led.
    ///
    /// # Cancel safety
    /// If dropped, the removal may or may not have happened.
    async fn force_unlock(&self) -> Result<bool>;

    /// The leader and how many candidates wait, as far as the backend keeps them.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn inspect(&self) -> Result<LockInfo>;
}

/// A shared election is the election.
#[async_trait]
impl<T: Election + ?Sized> Election for Arc<T> {
    delegate_to_target!();

    async fn campaign_with(&self, value: &str, options: AcquireOptions) -> Result<Leadership> {
        (**self).campaign_with(value, options).await
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        (**self).leader().await
    }

    fn observe(&self) -> LeaderChanges {
        (**self).observe()
    }

    async fn force_unlock(&self) -> Result<bool> {
        (**self).force_unlock().await
    }

    async fn inspect(&self) -> Result<LockInfo> {
        (**self).inspect().await
    }
}

/// Shorthands for [`Election`]. Implemented for every election; you MUST NOT implement
/// it yourself.
pub trait ElectionExt: Election {
    /// Campaigns with `value` and waits without limit to lead; the watchdog keeps the
    /// leadership's lease.
    ///
    /// # Cancel safety
    /// As [`Election::campaign_with`]: nothing is left behind.
    fn campaign<'a>(
        &'a self,
        value: &'a str,
    ) -> impl Future<Output = Result<Leadership>> + Send + 'a {
        self.campaign_with(value, AcquireOptions::wait_forever())
    }

    /// Leads if nobody leads or waits: `Ok(None)` otherwise.
    ///
    /// # Cancel safety
    /// As [`Election::campaign_with`]: nothing is left behind.
    fn try_campaign<'a>(
        &'a self,
        value: &'a str,
    ) -> impl Future<Output = Result<Option<Leadership>>> + Send + 'a {
        let fut = self.campaign_with(value, AcquireOptions::try_once());
        async move {
            match fut.await {
                Ok(leadership) => Ok(Some(leadership)),
                Err(Error::Timeout { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        }
    }

    /// Waits up to `limit` to lead: [`Error::Timeout`] after that.
    ///
    /// # Cancel safety
    /// As [`Election::campaign_with`]: nothing is left behind.
    fn campaign_timeout<'a>(
        &'a self,
        value: &'a str,
        limit: Duration,
    ) -> impl Future<Output = Result<Leadership>> + Send + 'a {
        self.campaign_with(value, AcquireOptions::wait_for(limit))
    }
}

impl<T: Election + ?Sized> ElectionExt for T {}

/// Leadership of an election, won by a campaign: held until [`resign`](Self::resign)
/// or drop (which resigns in the background, as a dropped [`LockGuard`] releases), or
/// until its lease is lost.
#[must_use = "if unused the leadership is resigned at once"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// This leader's term: strictly greater than every earlier leader's, and what
    /// [`Election::leader`] reports for it.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Whether this candidate still leads, as far as this process knows (see
    /// [`LockGuard::is_held`]).
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves when the leadership is lost (its lease ended, or it was taken away),
    /// with the reason; at once if it already was.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) -> LeaseLoss {
        self.guard.lost().await
    }

    /// A handle that reports the loss of this leadership without borrowing it.
    pub fn watch(&self) -> LeaseWatch {
        self.guard.watch()
    }

    /// Publishes `value` as the leader's value, for [`Election::leader`] and
    /// [`Election::observe`].
    ///
    /// # Errors
    /// [`Error::LeaseLost`] once the leadership is lost, and the value is not written;
    /// [`Error::InvalidArgument`] for a value too long or with control characters;
    /// [`Error::Unavailable`] if the backend cannot be reached.
    ///
    /// # Cancel safety
    /// If dropped, the new value may or may not have been published.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        self.guard.proclaim(value).await
    }

    /// Steps down, letting the next candidate lead.
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::release`]: if dropped, the resignation finishes in the background.
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// The guard under the leadership, for code written for locks.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The guard under the leadership, to hold or hand to code written for locks:
    /// releasing it resigns.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

/// A campaign value is published beside the lease like a holder description.
fn check_value(value: &str) -> Result<()> {
    check_description(value).map_err(|_| {
        Error::invalid_argument(format!(
            "a campaign value has at most {} bytes and no control characters: {value:?}",
            crate::info::MAX_HOLDER_DESCRIPTION_BYTES
        ))
    })
}

/// Whether `now` is a later leader than `seen`, or the same one with a new value.
fn is_news(seen: &Leader, now: &Leader) -> bool {
    now.term > seen.term || (now.term == seen.term && now.value != seen.value)
}

/// A handle on an election. Implements [`Election`]; made by
/// [`LockClient::election`](crate::LockClient::election).
pub struct ElectionHandle<B: LockBackend> {
    handle: Arc<Handle<B>>,
}

impl<B: LockBackend> ElectionHandle<B> {
    pub(crate) fn new(client: Arc<ClientInner<B>>, key: LockKey) -> Self {
        ElectionHandle {
            handle: Handle::new(client, key),
        }
    }

    /// Where the election lives: namespace and name.
    pub fn key(&self) -> &LockKey {
        self.handle.key()
    }
}

impl<B: LockBackend> Clone for ElectionHandle<B> {
    fn clone(&self) -> Self {
        ElectionHandle {
            handle: self.handle.clone(),
        }
    }
}

impl<B: LockBackend> fmt::Debug for ElectionHandle<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElectionHandle")
            .field("key", self.handle.key())
            .field("backend", &self.handle.backend().name())
            .finish()
    }
}

#[async_trait]
impl<B: LockBackend> Election for ElectionHandle<B> {
    fn name(&self) -> &LockName {
        self.handle.key().name()
    }

    fn lock_id(&self) -> LockId {
        self.handle.lock_id(LockFamily::Election)
    }

    fn capabilities(&self) -> Capabilities {
        self.handle.backend().capabilities()
    }

    async fn campaign_with(&self, value: &str, options: AcquireOptions) -> Result<Leadership> {
        check_value(value)?;
        let guard = self
            .handle
            .acquire_as(LockKind::Leader, options, None, Some(value))
            .await?
            .guard();
        Ok(Leadership { guard })
    }

    async fn leader(&self) -> Result<Option<Leader>> {
        self.handle
            .backend_for(LockKind::Leader)?
            .leader(self.handle.key())
            .await
    }

    fn observe(&self) -> LeaderChanges {
        let looks = futures::stream::unfold(
            (self.clone(), None::<Leader>, false),
            |(election, mut seen, started)| async move {
                if started {
                    tokio::time::sleep(OBSERVE_EVERY).await;
                }
                loop {
                    match election.leader().await {
                        Err(err) => return Some((Err(err), (election, seen, true))),
                        // A leader read behind one already seen (a lagging replica)
                        // is not news.
                        Ok(Some(now)) if seen.as_ref().is_none_or(|s| is_news(s, &now)) => {
                            seen = Some(now.clone());
                            return Some((Ok(now), (election, seen, true)));
                        }
                        Ok(_) => tokio::time::sleep(OBSERVE_EVERY).await,
                    }
                }
            },
        );
        Box::pin(looks)
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.handle
            .backend_for(LockKind::Leader)?
            .force_unlock(self.handle.key(), LockFamily::Election)
            .await
    }

    async fn inspect(&self) -> Result<LockInfo> {
        self.handle
            .backend_for(LockKind::Leader)?
            .inspect(self.handle.key(), LockFamily::Election)
            .await
    }
}
