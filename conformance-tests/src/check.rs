//! Small helpers the cases share.

use std::future::Future;
use std::time::Duration;

use lock_core::{Error, LockGuard, Result};
use tokio::time::Instant;

/// Awaits `fut`, failing the case if it takes longer than `limit`; returns its output
/// and how long it took.
pub(crate) async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = T>,
) -> (T, Duration) {
    let started = Instant::now();
    match tokio::time::timeout(limit, fut).await {
        Ok(out) => (out, started.elapsed()),
        Err(_) => panic!("{what}: did not finish within {limit:?}"),
    }
}

/// Unwraps a lock result with a message naming the step.
pub(crate) fn ok<T>(what: &str, result: Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(err) => panic!("{what}: unexpected error: {err} ({err:?})"),
    }
}

/// Unwraps `Ok(Some(guard))` from a single try.
pub(crate) fn got(what: &str, result: Result<Option<LockGuard>>) -> LockGuard {
    match ok(what, result) {
        Some(guard) => guard,
        None => panic!("{what}: the lock was held by someone else"),
    }
}

/// Checks a single try found the lock held.
pub(crate) fn refused(what: &str, result: Result<Option<LockGuard>>) {
    if let Some(guard) = ok(what, result) {
        panic!(
            "{what}: acquired a lock that should be held elsewhere (fencing token {})",
            guard.fencing_token()
        );
    }
}

/// Checks `result` is the error `expected` describes.
pub(crate) fn expect_err<T: std::fmt::Debug>(
    what: &str,
    result: Result<T>,
    expected: fn(&Error) -> bool,
) -> Error {
    match result {
        Ok(value) => panic!("{what}: expected an error, got {value:?}"),
        Err(err) if expected(&err) => err,
        Err(err) => panic!("{what}: wrong error: {err} ({err:?})"),
    }
}

pub(crate) fn is_lease_lost(err: &Error) -> bool {
    matches!(err, Error::LeaseLost { .. })
}

pub(crate) fn is_invalid(err: &Error) -> bool {
    matches!(err, Error::InvalidArgument { .. })
}

pub(crate) fn is_timeout(err: &Error) -> bool {
    matches!(err, Error::Timeout { .. })
}

/// Lets spawned tasks and in-flight requests run for a moment: used only to make sure
/// a waiter has queued before the next step, never to wait for an outcome.
pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}
