//! Maps the ZooKeeper client's errors onto lock-core's, in one place.

use lock_core::Error;
use zookeeper_client::Error as ZkError;

/// The backend's name in errors and traces.
pub(crate) const BACKEND: &str = "zookeeper";

/// Whether retrying the same request on the same session may succeed.
///
/// zookeeper-client fails the requests in flight with `ConnectionLoss` only when the
/// server closes the connection; when the connection breaks with an I/O error
/// (a reset), or the client gives up on a silent one (its idle timeout), or it leaves
/// a read-only server for a writable one, they fail with a `Custom` error instead.
/// Each of these is the connection's loss, not the request's fault: the session
/// lives on, and the same request may succeed once the client has reconnected.
pub(crate) fn is_connection_loss(err: &ZkError) -> bool {
    matches!(
        err,
        ZkError::ConnectionLoss | ZkError::Throttled | ZkError::Custom(_)
    )
}

/// Classifies a client error: cluster trouble is retryable, our own bad request is an
/// invalid argument, everything else is a backend error that retrying will not fix.
pub(crate) fn map(err: ZkError) -> Error {
    match err {
        // Our own bound on a request (see `recipe::bounded`), or the client's.
        ZkError::Timeout => unavailable("zookeeper did not answer within the request timeout"),
        ZkError::ConnectionLoss
        | ZkError::NoHosts
        | ZkError::SessionExpired
        | ZkError::SessionMoved
        | ZkError::ClientClosed
        | ZkError::Throttled
        | ZkError::NotReadOnly
        // A connection lost to an I/O error or the idle timeout: see
        // `is_connection_loss`.
        | ZkError::Custom(_) => Error::unavailable(BACKEND, err),
        ZkError::BadArguments(_) => Error::invalid_argument(format!("zookeeper: {err}")),
        other => Error::backend(BACKEND, other),
    }
}

/// An [`Error::Unavailable`] with a message of ours.
pub(crate) fn unavailable(message: impl Into<String>) -> Error {
    Error::unavailable(BACKEND, message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_trouble_is_retryable() {
        assert!(map(ZkError::ConnectionLoss).is_retryable());
        assert!(map(ZkError::SessionExpired).is_retryable());
        assert!(!map(ZkError::NoAuth).is_retryable());
        assert!(matches!(
            map(ZkError::BadArguments(&"x")),
            Error::InvalidArgument { .. }
        ));
    }
}
