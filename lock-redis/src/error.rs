//! The crate's private error type and its mapping onto [`lock_core::Error`].
//!
//! Only two outcomes matter to a caller: "try again later" (the server could not be
//! reached or did not answer in time: [`lock_core::Error::Unavailable`]) and
//! "something is wrong that retrying will not fix" ([`lock_core::Error::Backend`]).

use std::time::Duration;

use redis::{RedisError, RetryMethod};

/// The name every error and trace of this crate carries.
pub(crate) const BACKEND: &str = "redis";

/// What went wrong talking to Redis.
#[derive(Debug)]
pub(crate) enum Error {
    /// The client library's error.
    Redis(RedisError),
    /// No answer within the configured time.
    TimedOut { what: &'static str, after: Duration },
    /// The server answered something a script of ours never returns.
    UnexpectedReply(String),
    /// Too few RedLock masters answered.
    NoQuorum { answered: usize, needed: usize },
    /// A RedLock release freed the lock on fewer masters than a majority, and with the
    /// masters that did not answer it may still have been held by one.
    ReleaseUndecided {
        released: usize,
        silent: usize,
        needed: usize,
    },
    /// A grant fewer replicas acknowledged than configured; it was released.
    TooFewReplicas(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Redis(err) => write!(f, "{err}"),
            Error::TimedOut { what, after } => {
                write!(f, "{what} did not complete within {after:?}")
            }
            Error::UnexpectedReply(reply) => write!(f, "unexpected reply from Redis: {reply}"),
            Error::NoQuorum { answered, needed } => write!(
                f,
                "only {answered} Redis masters answered; a majority of {needed} is needed"
            ),
            Error::TooFewReplicas(what) => write!(f, "{what}"),
            Error::ReleaseUndecided {
                released,
                silent,
                needed,
            } => write!(
                f,
                "released on {released} Redis masters and {silent} did not answer: whether \
                 a majority of {needed} still held the lock is unknown"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(err) => Some(err),
            _ => None,
        }
    }
}

impl From<RedisError> for Error {
    fn from(err: RedisError) -> Self {
        Error::Redis(err)
    }
}

impl Error {
    /// Whether the same call may work later: connection trouble, timeouts and the
    /// server's own "busy, try again" answers (LOADING, TRYAGAIN, MASTERDOWN, ...).
    fn is_retryable(&self) -> bool {
        match self {
            Error::TimedOut { .. }
            | Error::NoQuorum { .. }
            | Error::ReleaseUndecided { .. }
            | Error::TooFewReplicas(_) => true,
            Error::UnexpectedReply(_) => false,
            Error::Redis(err) => {
                err.is_io_error()
                    || err.is_timeout()
                    || err.is_connection_dropped()
                    || err.is_connection_refusal()
                    || is_read_only(err)
                    || matches!(
                        err.retry_method(),
                        RetryMethod::Reconnect
                            | RetryMethod::ReconnectFromInitialConnections
                            | RetryMethod::WaitAndRetry
                            | RetryMethod::RetryImmediately
                            // A cluster's slot moving (resharding, failover).
                            | RetryMethod::MovedRedirect
                            | RetryMethod::AskRedirect
                            | RetryMethod::RefreshSlotsAndRetry
                    )
            }
        }
    }
}

/// `READONLY`: the server is a replica now (a demoted primary after a failover).
/// A script's write on a replica may come back as a script error that only quotes it.
fn is_read_only(err: &RedisError) -> bool {
    err.code() == Some("READONLY")
        || err
            .detail()
            .is_some_and(|detail| detail.contains("read only replica"))
}

/// Whether `err` may mean that the primary moved (a failover): the connection was
/// refused or dropped, the server says it is a replica now, or it cannot serve
/// because its primary is down.
pub(crate) fn may_have_moved(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || is_read_only(err)
        || err.code() == Some("MASTERDOWN")
}

impl From<Error> for lock_core::Error {
    fn from(err: Error) -> Self {
        if err.is_retryable() {
            lock_core::Error::unavailable(BACKEND, err)
        } else {
            lock_core::Error::backend(BACKEND, err)
        }
    }
}

/// Whether `err` is a grant given back because too few replicas had it: retryable, but
/// not a sign of a failover, so a waiter does not ride it out.
pub(crate) fn is_replica_shortfall(err: &lock_core::Error) -> bool {
    match err {
        lock_core::Error::Unavailable { source, .. } => matches!(
            source.downcast_ref::<Error>(),
            Some(Error::TooFewReplicas(_))
        ),
        _ => false,
    }
}

/// Whether a failed acquire call may still have run on the server (and been granted
/// without anyone hearing of it): every retryable failure but a refused connection, a
/// time limit that ran out before the call was sent (connecting, asking Sentinel), and
/// a grant too few replicas had (which the call gave back itself). A refused reconnection after a dropped connection is
/// reported as the drop (see `Node::run`), so it counts.
pub(crate) fn may_have_run(err: &lock_core::Error) -> bool {
    let lock_core::Error::Unavailable { source, .. } = err else {
        return false;
    };
    match source.downcast_ref::<Error>() {
        Some(Error::Redis(err)) => !err.is_connection_refusal(),
        // Only the call's own time limit: the others ran out before it was sent.
        Some(Error::TimedOut { what, .. }) => *what == "acquire",
        Some(Error::TooFewReplicas(_)) => false,
        Some(_) | None => true,
    }
}

/// Maps a client error straight to the lock-core error.
pub(crate) fn map(err: RedisError) -> lock_core::Error {
    Error::Redis(err).into()
}

/// Runs `fut`, turning a missing answer after `after` into a retryable error.
pub(crate) async fn within<T>(
    what: &'static str,
    after: Duration,
    fut: impl std::future::Future<Output = Result<T, RedisError>>,
) -> lock_core::Result<T> {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(map(err)),
        Err(_) => Err(Error::TimedOut { what, after }.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_trouble_is_retryable_and_script_errors_are_not() {
        let io: RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into();
        assert!(lock_core::Error::from(Error::Redis(io)).is_retryable());
        let timeout = Error::TimedOut {
            what: "acquire",
            after: Duration::from_millis(5),
        };
        assert!(lock_core::Error::from(timeout).is_retryable());
        let undecided = Error::ReleaseUndecided {
            released: 1,
            silent: 2,
            needed: 3,
        };
        assert!(lock_core::Error::from(undecided).is_retryable());
        let reply = Error::UnexpectedReply("nil".into());
        assert!(!lock_core::Error::from(reply).is_retryable());
        let wrong_type: RedisError = (redis::ErrorKind::UnexpectedReturnType, "WRONGTYPE").into();
        assert!(!lock_core::Error::from(Error::Redis(wrong_type)).is_retryable());
        let demoted = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(may_have_moved(&demoted), "{demoted:?}");
        assert!(lock_core::Error::from(Error::Redis(demoted)).is_retryable());
    }
}
