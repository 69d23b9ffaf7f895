//! Turning driver errors into lock-core errors: what is worth retrying at once, what
//! means the database is unreachable, and what is a bug or a bad setting.

use lock_core::Error;

/// How the lock code reacts to a driver error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// A conflict between transactions (deadlock, serialization failure, SQLite busy):
    /// retrying the same transaction soon is correct.
    Transient,
    /// A row lock was not available at once (`NOWAIT`) or within the wait limit.
    LockNotAvailable,
    /// The database cannot be reached, or dropped the connection.
    Unavailable,
    /// A setting the driver refused.
    Invalid,
    /// Anything else.
    Other,
}

/// Classifies a driver error.
pub(crate) fn classify(err: &sqlx::Error) -> Class {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Class::Unavailable,
        sqlx::Error::Configuration(_) | sqlx::Error::InvalidArgument(_) => Class::Invalid,
        sqlx::Error::Database(db) => classify_database(db.as_ref()),
        _ => Class::Other,
    }
}

fn classify_database(db: &dyn sqlx::error::DatabaseError) -> Class {
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return match my.number() {
            // Deadlock found; lock wait timeout; lock wait aborted by NOWAIT (MySQL).
            1213 => Class::Transient,
            1205 | 3572 => Class::LockNotAvailable,
            // Too many connections; server shutdown; connection or query killed.
            1040 | 1053 | 1077 | 1317 | 1927 => Class::Unavailable,
            _ => Class::Other,
        };
    }
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // The primary result code is the low byte: SQLITE_BUSY (5), SQLITE_LOCKED (6).
        return match code.parse::<u32>().map(|c| c & 0xff) {
            Ok(5 | 6) => Class::Transient,
            Ok(10 | 14) => Class::Unavailable, // I/O error, cannot open
            _ => Class::Other,
        };
    }
    // PostgreSQL SQLSTATE codes.
    match code.as_str() {
        "40001" | "40P01" => Class::Transient,
        "55P03" => Class::LockNotAvailable,
        // The server ended a session idle in a transaction, or a transaction that
        // outlived its limit: the connection is gone.
        "25P03" | "25P04" => Class::Unavailable,
        c if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") => {
            Class::Unavailable
        }
        _ => Class::Other,
    }
}

/// Whether a call of a MariaDB procedure (the lease grant, the session strategy's try
/// and release) failed because the procedure cannot be called (dropped, the user may
/// not execute it, or tables converted to another collation than its parameters'): it
/// changed nothing.
pub(crate) fn procedure_unusable(err: &sqlx::Error) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(my) = err
        .as_database_error()
        .and_then(|db| db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
    {
        // No such procedure; execute denied on it; illegal mix of collations (two or
        // three operands).
        return matches!(my.number(), 1305 | 1370 | 1267 | 1270 | 1271);
    }
    let _ = err;
    false
}

/// Converts a driver error for `backend`.
pub(crate) fn convert(backend: &'static str, err: sqlx::Error) -> Error {
    match classify(&err) {
        Class::Unavailable | Class::Transient | Class::LockNotAvailable => {
            Error::unavailable(backend, err)
        }
        Class::Invalid => Error::invalid_argument(format!("{backend}: {err}")),
        Class::Other => Error::backend(backend, err),
    }
}

/// An [`Error::Unavailable`] for a request that did not answer in time.
pub(crate) fn timed_out(backend: &'static str, what: &str, limit: std::time::Duration) -> Error {
    Error::unavailable(backend, format!("{what} did not complete within {limit:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_are_retryable() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&io), Class::Unavailable);
        assert!(convert("postgres", io).is_retryable());
        assert!(convert("postgres", sqlx::Error::PoolTimedOut).is_retryable());
        let bad = convert("mysql", sqlx::Error::Configuration("bad option".into()));
        assert!(matches!(bad, Error::InvalidArgument { .. }));
        assert!(matches!(
            convert("sqlite", sqlx::Error::RowNotFound),
            Error::Backend { .. }
        ));
    }
}
