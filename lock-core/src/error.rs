//! The one error type every lock operation returns.

use std::time::Duration;

/// A boxed error from a backend client, kept as the [`source`](std::error::Error::source)
/// of [`Error::Unavailable`] and [`Error::Backend`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of every fallible lock operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong with a distributed lock.
///
/// The variants tell apart what a caller reacts to differently: fix the call
/// ([`InvalidArgument`](Error::InvalidArgument)), stop trusting the critical section
/// ([`LeaseLost`](Error::LeaseLost)), try later ([`Timeout`](Error::Timeout),
/// [`Unavailable`](Error::Unavailable)), or give up. [`Error::is_retryable`] sums it up.
///
/// ```
/// use lock_core::Error;
/// let err = Error::invalid_argument("lease must be at least 1 ms");
/// assert!(!err.is_retryable());
/// assert_eq!(err.to_string(), "invalid argument: lease must be at least 1 ms");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, duration, URL or option is not acceptable; the message says what and why.
    /// Nothing was sent to the backend and nothing already held changed.
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What is wrong with the argument.
        message: String,
    },

    /// The caller asked to release or extend a lease it does not hold: the backend's
    /// record names another owner, or another acquisition of this owner. Nothing changed.
    #[error("lock `{name}` is not held by this owner")]
    NotOwner {
        /// The lock's name.
        name: String,
    },

    /// The lease behind a guard was lost (it expired, was revoked, or renewal failed
    /// until it ran out): another owner may hold the lock now.
    #[error("the lease on lock `{name}` was lost")]
    LeaseLost {
        /// The lock's name.
        name: String,
    },

    /// The lock was not acquired within the wait limit (for a single try: it was held).
    #[error("lock `{name}` was not acquired within {waited:?}")]
    Timeout {
        /// The lock's name.
        name: String,
        /// The wait limit that ran out (zero for a single try).
        waited: Duration,
    },

    /// The backend could not be reached or did not answer in time. Retrying later may
    /// succeed; locks already held are unaffected until their lease runs out.
    #[error("{backend} is unavailable: {source}")]
    Unavailable {
        /// Which backend (`"redis"`, `"memory"`, ...).
        backend: &'static str,
        /// The client's error.
        #[source]
        source: BoxError,
    },

    /// The backend cannot do this (for example a fixed lease on a backend whose leases
    /// are sessions). The capabilities value says so up front.
    #[error("{backend} does not support {operation}")]
    Unsupported {
        /// Which backend.
        backend: &'static str,
        /// What was asked for.
        operation: &'static str,
    },

    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// it takes no more locks, and a wait in progress ended with this. Nothing is held.
    #[error("the lock client was shut down")]
    Closed,

    /// The backend answered with an error that retrying will not fix.
    #[error("{backend} error: {source}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// The client's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// An [`Error::InvalidArgument`] with the given message.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            message: message.into(),
        }
    }

    /// An [`Error::NotOwner`] for the lock of `key`: a release or an extend found
    /// another lease than the caller's.
    pub fn not_owner(key: &crate::LockKey) -> Self {
        Error::NotOwner {
            name: key.name().to_string(),
        }
    }

    /// An [`Error::InvalidArgument`] for a semaphore request whose count, `asked`,
    /// differs from the count `in_force` among the semaphore's holders and waiters.
    pub fn other_permit_count(key: &crate::LockKey, in_force: u32, asked: u32) -> Self {
        Error::invalid_argument(format!(
            "semaphore `{}` has {in_force} permits for its holders and waiters; this handle was made with {asked}",
            key.name()
        ))
    }

    /// An [`Error::Unavailable`] from any client error.
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Unavailable {
            backend,
            source: source.into(),
        }
    }

    /// An [`Error::Backend`] from any client error.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            backend,
            source: source.into(),
        }
    }

    /// Whether the same call may succeed if made again later: true for
    /// [`Timeout`](Error::Timeout) and [`Unavailable`](Error::Unavailable).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::Unavailable { .. })
    }
}
