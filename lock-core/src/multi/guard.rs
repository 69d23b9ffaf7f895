//! The guard of a [`MultiLock`](super::MultiLock): every member's guard as one.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures::future::{join_all, select_all, FutureExt};

use crate::backend::LockKind;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::id::LockId;
use crate::lease::LeaseLoss;

/// Proof that every member of a [`MultiLock`](super::MultiLock) is held.
///
/// It holds one [`LockGuard`] per member, in the multi-lock's order
/// ([`guards`](Self::guards)). What a single guard promises holds for each of them:
/// fencing tokens, loss reporting, release on drop.
///
/// # Dropping
///
/// Dropping it drops every member's guard, each as described under
/// [`LockGuard`'s Dropping](LockGuard#dropping): held locks are released in the
/// background. Prefer [`release`](Self::release) to learn the outcome.
#[must_use = "if unused every member is released at once (best effort)"]
#[clippy::has_significant_drop]
pub struct MultiGuard {
    members: Vec<(LockId, LockGuard)>,
}

impl MultiGuard {
    pub(super) fn new(members: Vec<(LockId, LockGuard)>) -> Self {
        MultiGuard { members }
    }

    /// Another guard on this acquisition of every member, at once and with no round
    /// trip (see [`LockGuard::reenter`]): every member stays held until the last guard
    /// of the acquisition goes.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if a member's lease is no longer held; nothing changes then.
    pub fn reenter(&self) -> Result<MultiGuard> {
        let mut members = Vec::with_capacity(self.members.len());
        for (id, guard) in &self.members {
            // A failure drops the guards made so far: each only gives up its own hold.
            members.push((id.clone(), guard.reenter()?));
        }
        Ok(MultiGuard { members })
    }

    /// Every member's guard, in the order the members were taken.
    pub fn guards(&self) -> impl ExactSizeIterator<Item = &LockGuard> {
        self.members.iter().map(|(_, guard)| guard)
    }

    /// Every member's id and fencing token, in the order the members were taken: pass
    /// each token to the store that member protects.
    pub fn fencing_tokens(&self) -> impl ExactSizeIterator<Item = (&LockId, u64)> {
        self.members
            .iter()
            .map(|(id, guard)| (id, guard.fencing_token()))
    }

    /// The fencing token of the first member named `name` (in any namespace or
    /// backend); `None` if no member has that name.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.members
            .iter()
            .find(|(id, _)| id.name().as_str() == name)
            .map(|(_, guard)| guard.fencing_token())
    }

    /// Whether every member is still held, as far as this client knows (see
    /// [`LockGuard::is_held`]). Costs no round trip.
    pub fn is_held(&self) -> bool {
        self.members.iter().all(|(_, guard)| guard.is_held())
    }

    /// Resolves when the first member stops protecting you, saying which and why
    /// (after [`release`](Self::release), with [`LeaseLoss::Released`]). The future owns
    /// what it needs, so it can be spawned or raced against work.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub fn lost(&self) -> impl Future<Output = MemberLoss> + Send + 'static {
        let watches = self.members.iter().map(|(id, guard)| {
            let (id, kind) = (id.clone(), guard.kind());
            guard
                .lost()
                .map(move |reason| MemberLoss { id, kind, reason })
                .boxed()
        });
        select_all(watches).map(|(first, _, _)| first)
    }

    /// Releases every member, all at once, and says how each went.
    ///
    /// # Errors
    /// [`MultiReleaseError`] listing each member whose release failed, with the error
    /// [`LockGuard::release`] gave (for example
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) for a member lost before). The
    /// other members were released all the same.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, every hold is given up anyway and
    /// the releases are seen through in the background, as for [`LockGuard::release`].
    pub async fn release(self) -> Result<(), MultiReleaseError> {
        let count = self.members.len();
        let releases = self.members.into_iter().map(|(id, guard)| {
            let kind = guard.kind();
            guard.release().map(move |result| (id, kind, result))
        });
        let failures: Vec<MemberError> = join_all(releases)
            .await
            .into_iter()
            .filter_map(|(id, kind, result)| {
                result.err().map(|error| MemberError { id, kind, error })
            })
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(MultiReleaseError {
                released: count - failures.len(),
                failures,
            })
        }
    }

    /// Makes every member's lease end `ttl` from now, as [`LockGuard::extend`] does for
    /// one, all at once (so for the guards [`reenter`](Self::reenter) made too).
    ///
    /// # Errors
    /// The first member's error, in member order, if any extension failed; the others
    /// were still made. An invalid `ttl` changes nothing.
    ///
    /// # Cancel safety
    /// As [`LockGuard::extend`], for each member.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        crate::options::validate_lease(ttl)?;
        let results = join_all(self.members.iter().map(|(_, guard)| guard.extend(ttl))).await;
        results.into_iter().collect()
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("members", &self.members)
            .field("held", &self.is_held())
            .finish()
    }
}

/// The first member of a [`MultiGuard`] that stopped protecting its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberLoss {
    /// Which lock.
    pub id: LockId,
    /// Which side of it (or exclusive, fair).
    pub kind: LockKind,
    /// Why.
    pub reason: LeaseLoss,
}

impl fmt::Display for MemberLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", kind_text(self.kind), self.id, self.reason)
    }
}

/// One member's failed release.
#[derive(Debug)]
#[non_exhaustive]
pub struct MemberError {
    /// Which lock.
    pub id: LockId,
    /// Which side of it (or exclusive, fair).
    pub kind: LockKind,
    /// What its release returned.
    pub error: Error,
}

/// Some members of a [`MultiGuard`] could not be released cleanly; the rest were.
///
/// Converts into the first failure's [`Error`] for `?` in functions returning
/// [`lock_core::Result`](crate::Result).
#[derive(Debug)]
pub struct MultiReleaseError {
    released: usize,
    failures: Vec<MemberError>,
}

impl MultiReleaseError {
    /// The members whose release failed, in member order (never empty).
    pub fn failures(&self) -> &[MemberError] {
        &self.failures
    }

    /// How many members were released without error.
    pub fn released(&self) -> usize {
        self.released
    }
}

impl fmt::Display for MultiReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} locks were not released cleanly",
            self.failures.len(),
            self.failures.len() + self.released
        )?;
        for failure in &self.failures {
            write!(
                f,
                "; {} {}: {}",
                kind_text(failure.kind),
                failure.id,
                failure.error
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for MultiReleaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.failures.first().map(|failure| &failure.error as _)
    }
}

impl From<MultiReleaseError> for Error {
    fn from(err: MultiReleaseError) -> Self {
        let MultiReleaseError { failures, .. } = err;
        failures
            .into_iter()
            .next()
            .map(|failure| failure.error)
            .unwrap_or_else(|| {
                Error::invalid_argument("a multi-lock release error with no failure")
            })
    }
}

fn kind_text(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Exclusive => "lock",
        LockKind::Fair => "fair lock",
        LockKind::Read => "read side of",
        LockKind::Write => "write side of",
        LockKind::Permit => "permit of",
        LockKind::Leader => "leadership of",
    }
}
