//! A client's durations written as the servers' time limits: PostgreSQL counts whole
//! milliseconds up to `i32::MAX`, MariaDB whole seconds up to a year. Both round up, so
//! a server never ends anything before the client's duration.

use std::time::Duration;

use crate::dialect::Dialect;

/// MariaDB's largest `wait_timeout` and `idle_*transaction_timeout`: with the session
/// strategy, the longest lease a session can be held to, so the longest the client may
/// count on ([`crate::SqlBackend`]'s `lease_validity`).
pub(crate) const LONGEST_MYSQL_LIMIT: Duration = Duration::from_secs(31_536_000);

/// PostgreSQL's largest `idle_session_timeout` and `idle_in_transaction_session_timeout`
/// (`i32::MAX` ms, about 24.8 days): with a strategy that pins a connection, the
/// longest lease a session can be held to, so the longest the client may count on
/// ([`crate::SqlBackend`]'s `lease_validity`).
pub(crate) const LONGEST_POSTGRES_LIMIT: Duration = Duration::from_millis(i32::MAX as u64);

/// A PostgreSQL limit in whole milliseconds, from one to [`LONGEST_POSTGRES_LIMIT`]:
/// never none, so the server always ends a silent holder's session in the end.
pub(crate) fn limit_ms(limit: Duration) -> String {
    let ms = limit.as_nanos().div_ceil(1_000_000);
    ms.clamp(1, LONGEST_POSTGRES_LIMIT.as_millis()).to_string()
}

/// PostgreSQL's `lock_timeout` for a wait of `remaining` (none: until granted), in
/// whole milliseconds. A wait longer than the server's largest limit sets none: the
/// client's own timer ends it at its deadline, where the largest limit would end it
/// early, and a larger value would be refused.
pub(crate) fn postgres_wait_limit_ms(remaining: Option<Duration>) -> String {
    match remaining {
        Some(wait) if wait <= LONGEST_POSTGRES_LIMIT => limit_ms(wait),
        _ => "0".to_owned(),
    }
}

/// `limit` in whole seconds, rounded up.
pub(crate) fn whole_secs(limit: Duration) -> u64 {
    limit
        .as_secs()
        .saturating_add(u64::from(limit.subsec_nanos() > 0))
}

/// What an [`idle_transaction_limit`] applies to on PostgreSQL (MariaDB's is always
/// the session's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitScope {
    /// The transaction the statement runs in.
    Transaction,
    /// Every transaction of the session.
    Session,
}

/// The statement after which the server ends a session left idle inside a
/// transaction for `limit` (whole seconds on MariaDB, never less than one); a limit
/// beyond the server's largest sets PostgreSQL's largest, and none on MariaDB (whose
/// largest is the longest lease a client may ask for).
pub(crate) fn idle_transaction_limit(
    dialect: Dialect,
    limit: Duration,
    scope: LimitScope,
) -> String {
    match dialect {
        Dialect::Postgres => {
            let scope = match scope {
                LimitScope::Transaction => "LOCAL",
                LimitScope::Session => "SESSION",
            };
            format!(
                "SET {scope} idle_in_transaction_session_timeout = {}",
                limit_ms(limit)
            )
        }
        _ => {
            let secs = whole_secs(limit);
            let secs = if secs > LONGEST_MYSQL_LIMIT.as_secs() {
                0
            } else {
                secs.max(1)
            };
            format!(
                "SET SESSION idle_transaction_timeout = {secs}, \
                 idle_readonly_transaction_timeout = {secs}, \
                 idle_write_transaction_timeout = {secs}"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_up_and_saturate() {
        assert_eq!(limit_ms(Duration::from_micros(1500)), "2");
        assert_eq!(limit_ms(Duration::ZERO), "1");
        // Past the largest, the largest: a lease longer than that is counted only to
        // it (`lease_validity`), and the server still ends a silent holder's session.
        assert_eq!(limit_ms(Duration::from_secs(10_000_000)), "2147483647");
        assert_eq!(LONGEST_POSTGRES_LIMIT.as_millis(), 2_147_483_647);
        assert_eq!(whole_secs(Duration::from_millis(2001)), 3);
        assert_eq!(whole_secs(Duration::ZERO), 0);
        assert_eq!(whole_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_wait_past_the_largest_limit_sets_none() {
        let days = |n: u64| Some(Duration::from_secs(n * 24 * 60 * 60));
        assert_eq!(
            postgres_wait_limit_ms(Some(Duration::from_micros(1500))),
            "2"
        );
        assert_eq!(postgres_wait_limit_ms(Some(Duration::ZERO)), "1");
        assert_eq!(postgres_wait_limit_ms(days(24)), "2073600000");
        assert_eq!(
            postgres_wait_limit_ms(Some(LONGEST_POSTGRES_LIMIT)),
            "2147483647"
        );
        // Past the largest, the server would end the wait early: the client ends it.
        assert_eq!(postgres_wait_limit_ms(days(30)), "0");
        assert_eq!(postgres_wait_limit_ms(days(365)), "0");
        assert_eq!(postgres_wait_limit_ms(None), "0");
    }

    #[test]
    fn an_idle_transaction_limit_is_set_where_it_is_asked_and_rounded_up() {
        let pg = |limit, scope| idle_transaction_limit(Dialect::Postgres, limit, scope);
        assert_eq!(
            pg(Duration::from_micros(1500), LimitScope::Transaction),
            "SET LOCAL idle_in_transaction_session_timeout = 2"
        );
        assert_eq!(
            pg(Duration::from_secs(3), LimitScope::Session),
            "SET SESSION idle_in_transaction_session_timeout = 3000"
        );
        assert_eq!(
            pg(Duration::MAX, LimitScope::Session),
            "SET SESSION idle_in_transaction_session_timeout = 2147483647"
        );
        let mariadb = |limit| idle_transaction_limit(Dialect::MySql, limit, LimitScope::Session);
        assert!(mariadb(Duration::from_millis(1001)).contains("idle_transaction_timeout = 2,"));
        assert!(mariadb(Duration::from_millis(1)).contains("idle_write_transaction_timeout = 1"));
        assert!(mariadb(Duration::MAX).ends_with("idle_write_transaction_timeout = 0"));
    }
}
