//! The session strategy: a lock is a session-level advisory lock (PostgreSQL's
//! `pg_advisory_lock`, MariaDB's `GET_LOCK`) held by a connection pinned to the lease.
//!
//! Acquire pins a connection and sends one statement that tries the lock and, if it
//! got it, sets the session's silence limit and draws the fence. Only if the lock is
//! busy and the caller waits does it send more: the connection's id (so an abandoned
//! wait can be cancelled, as [`crate::pessimistic`] does) and the waiting statement,
//! which the server wakes on release. The fence lives in a table the server keeps off
//! the disk and is floored by the server clock ([`crate::sql::AdvisoryStatements`]), so
//! no grant waits for a disk.
//!
//! Release lets go of the lock and clears the silence limit in one statement; the
//! connection is kept for the next lock ([`crate::spare`]), not handed back to the
//! pool, which would ping it. Renewal and loss detection are the FOR UPDATE
//! strategy's: a statement per held lock that moves the silence limit on, and a
//! connection found dead is a lost lock ([`crate::pessimistic::renew`]).

mod acquire;
mod admin;
mod names;
mod release;

use std::time::Duration;

use lock_core::LockKind;

use crate::dialect::Dialect;
use crate::server_limits::{limit_ms, whole_secs, LONGEST_MYSQL_LIMIT};

pub(crate) use acquire::acquire;
pub(crate) use admin::{force_unlock, inspect, is_locked};
pub(crate) use names::{lock_space, Register};
pub(crate) use release::release;

/// The kinds the strategy can hold on `dialect`: exclusive locks, and on PostgreSQL
/// fair ones (its lock queue grants in request order, and a try never passes a waiter).
pub(crate) fn supports(dialect: Dialect, kind: LockKind) -> bool {
    match kind {
        LockKind::Exclusive => true,
        LockKind::Fair => dialect == Dialect::Postgres,
        _ => false,
    }
}

/// The server-side silence limit of a session (see [`crate::pessimistic`]'s
/// `silence_limit` for the idea): MariaDB's `wait_timeout` in whole seconds, rounded
/// up, at most [`LONGEST_MYSQL_LIMIT`] (PostgreSQL's `idle_session_timeout` is
/// [`limit_ms`]).
fn limit_secs(ttl: Duration) -> u64 {
    whole_secs(ttl).clamp(1, LONGEST_MYSQL_LIMIT.as_secs())
}

/// The statement that moves a held session's silence limit to `ttl` from now.
pub(crate) fn silence_limit(dialect: Dialect, ttl: Duration) -> String {
    match dialect {
        Dialect::Postgres => format!("SET idle_session_timeout = {}", limit_ms(ttl)),
        _ => format!("SET SESSION wait_timeout = {}", limit_secs(ttl)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_and_stay_in_range() {
        assert_eq!(limit_secs(Duration::from_millis(600)), 1);
        assert_eq!(limit_secs(Duration::from_millis(2001)), 3);
        assert_eq!(limit_secs(Duration::from_secs(u32::MAX as u64)), 31_536_000);
        assert_eq!(limit_secs(Duration::MAX), 31_536_000);
    }

    #[test]
    fn only_postgres_has_fair_session_locks() {
        assert!(supports(Dialect::Postgres, LockKind::Fair));
        assert!(!supports(Dialect::MySql, LockKind::Fair));
        assert!(supports(Dialect::MySql, LockKind::Exclusive));
        assert!(!supports(Dialect::Postgres, LockKind::Read));
    }
}
