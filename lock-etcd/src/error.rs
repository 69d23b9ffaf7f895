//! The crate's private error type and its mapping onto [`lock_core::Error`].
//!
//! A caller only needs to tell "try again later" (etcd unreachable, no leader, no
//! answer in time: [`lock_core::Error::Unavailable`]) from "retrying will not fix it"
//! (bad credentials, a refused request: [`lock_core::Error::Backend`]).

use std::future::Future;
use std::time::Duration;

use tonic::Code;

/// The name every error and trace of this crate carries.
pub(crate) const BACKEND: &str = "etcd";

/// What went wrong talking to etcd.
#[derive(Debug)]
pub(crate) enum Error {
    /// The client library's error.
    Client(etcd_client::Error),
    /// No answer within the configured time.
    TimedOut { what: &'static str, after: Duration },
    /// etcd answered something this crate never asks for.
    Unexpected(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Client(err) => write!(f, "{err}"),
            Error::TimedOut { what, after } => write!(f, "{what} got no answer within {after:?}"),
            Error::Unexpected(what) => write!(f, "unexpected answer from etcd: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Client(err) => Some(err),
            _ => None,
        }
    }
}

impl Error {
    /// Whether the same call may work later: transport trouble, timeouts, and the gRPC
    /// codes etcd uses for "no leader", "overloaded" or "stream ended".
    fn is_retryable(&self) -> bool {
        match self {
            Error::TimedOut { .. } => true,
            Error::Unexpected(_) => false,
            Error::Client(err) => match err {
                etcd_client::Error::TransportError(_)
                | etcd_client::Error::IoError(_)
                | etcd_client::Error::WatchError(_)
                | etcd_client::Error::LeaseKeepAliveError(_)
                | etcd_client::Error::EndpointError(_) => true,
                etcd_client::Error::GRpcStatus(status) => matches!(
                    status.code(),
                    Code::Unavailable
                        | Code::DeadlineExceeded
                        | Code::Unknown
                        | Code::ResourceExhausted
                        | Code::Aborted
                        | Code::Cancelled
                ),
                _ => false,
            },
        }
    }
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

/// Maps a client error straight to the lock-core error.
pub(crate) fn map(err: etcd_client::Error) -> lock_core::Error {
    Error::Client(err).into()
}

/// An answer etcd should never give, as a lock-core error.
pub(crate) fn unexpected(what: impl Into<String>) -> lock_core::Error {
    Error::Unexpected(what.into()).into()
}

/// Whether etcd refused a request because the lease it names is gone (expired or
/// revoked): the caller then takes a new lease.
pub(crate) fn is_lease_gone(err: &lock_core::Error) -> bool {
    let (lock_core::Error::Backend { source, .. } | lock_core::Error::Unavailable { source, .. }) =
        err
    else {
        return false;
    };
    match source.downcast_ref::<Error>() {
        Some(Error::Client(etcd_client::Error::GRpcStatus(status))) => {
            status.code() == Code::NotFound && status.message().contains("lease not found")
        }
        Some(Error::Client(etcd_client::Error::LeaseKeepAliveError(msg))) => {
            msg.contains("lease not found")
        }
        _ => false,
    }
}

/// Runs one request, turning a missing answer after `after` into a retryable error.
/// Every unary call goes through here, so no call outlives the request timeout (the
/// channel itself has no timeout: it would cut the long-lived watch streams).
pub(crate) async fn within<T>(
    what: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T, etcd_client::Error>>,
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
    fn connection_trouble_is_retryable_and_refusals_are_not() {
        let unavailable = etcd_client::Error::GRpcStatus(tonic::Status::unavailable("down"));
        assert!(map(unavailable).is_retryable());
        let timeout = Error::TimedOut {
            what: "txn",
            after: Duration::from_millis(5),
        };
        assert!(lock_core::Error::from(timeout).is_retryable());
        let denied =
            etcd_client::Error::GRpcStatus(tonic::Status::permission_denied("no such user"));
        assert!(!map(denied).is_retryable());
        let gone = map(etcd_client::Error::GRpcStatus(tonic::Status::not_found(
            "etcdserver: requested lease not found",
        )));
        assert!(is_lease_gone(&gone));
        assert!(!is_lease_gone(&map(etcd_client::Error::InvalidArgs(
            "x".into()
        ))));
    }
}
