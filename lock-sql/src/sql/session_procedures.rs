//! MariaDB: the session strategy's try and release, one call each
//! ([`SessionProcedures`]).

use super::advisory::clock_floor;
use super::{s, Procedure, Stmt, Tables};
use crate::dialect::Dialect;
use crate::pessimistic::OWN_RELEASE_FENCE as RELEASE_FENCE;

/// Two stored procedures that do on the server what the session strategy's text
/// statements do (see [`AdvisoryStatements::mysql_lock`](super::AdvisoryStatements)
/// and [`AdvisoryStatements::mysql_unlock`](super::AdvisoryStatements)), each in one statement the server parses
/// once: MariaDB spends about as much on each statement it is sent as on what the
/// statement does, and the try and the release are two statements each as text.
#[derive(Debug)]
pub(crate) struct SessionProcedures {
    /// Tries a lock without waiting; if taken, sets the session's silence limit and
    /// draws the fence, else leaves the session without a limit, as the text does.
    /// Called with the lock's name, the limit in whole seconds and the key's hash;
    /// answers one row: the fence, or 0 if the lock is busy.
    pub(crate) take: Procedure,
    pub(crate) call_take: Stmt,
    /// Under the connection's release fence, puts the silence limit back and lets go
    /// of the lock. Called with the lock's name; answers one row: 1 if the lock was
    /// held and let go, and 1 if the fence was had (the connection may be reused).
    pub(crate) release: Procedure,
    pub(crate) call_release: Stmt,
}

impl SessionProcedures {
    /// The procedures of the tables `t`, named after their prefix.
    pub(crate) fn new(t: &Tables, prefix: &str) -> Self {
        let fences = &t.fences;
        let floor = clock_floor(Dialect::MySql);
        // The name and the hash are hex digests ([`crate::advisory`]'s lock names and
        // [`crate::key::KeyId`]), in the fence table's character set.
        let take = format!(
            "(IN a_name VARCHAR(64) CHARACTER SET ascii, IN a_limit BIGINT, \
             IN a_key VARCHAR(64) CHARACTER SET ascii) \
             MODIFIES SQL DATA SQL SECURITY INVOKER \
             COMMENT 'lock-sql: the session strategy''s try in one call' \
             BEGIN \
             IF GET_LOCK(a_name, 0) = 1 THEN \
             SET SESSION wait_timeout = a_limit; \
             INSERT INTO {fences} (khash, fence) VALUES (a_key, LAST_INSERT_ID({floor})) \
             ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(GREATEST(fence + 1, {floor})); \
             SELECT CAST(LAST_INSERT_ID() AS SIGNED) AS fence; \
             ELSE \
             SET SESSION wait_timeout = @@GLOBAL.wait_timeout; \
             SELECT CAST(0 AS SIGNED) AS fence; \
             END IF; \
             END"
        );
        let release = format!(
            "(IN a_name VARCHAR(64) CHARACTER SET ascii) \
             MODIFIES SQL DATA SQL SECURITY INVOKER \
             COMMENT 'lock-sql: the session strategy''s release in one call' \
             BEGIN \
             DECLARE a_fenced BIGINT DEFAULT COALESCE(GET_LOCK({RELEASE_FENCE}, 10), 0); \
             DECLARE a_released BIGINT DEFAULT 0; \
             SET SESSION wait_timeout = @@GLOBAL.wait_timeout; \
             SET a_released = COALESCE(RELEASE_LOCK(a_name), 0); \
             DO RELEASE_LOCK({RELEASE_FENCE}); \
             SELECT a_released AS released, a_fenced AS fenced; \
             END"
        );
        let (take, take_quoted) = Procedure::new(prefix, "take", &take);
        let (release, release_quoted) = Procedure::new(prefix, "free", &release);
        let st = |sql: String| s(Dialect::MySql, sql);
        SessionProcedures {
            call_take: st(format!("CALL {take_quoted}(?, ?, ?)")),
            take,
            call_release: st(format!("CALL {release_quoted}(?)")),
            release,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_binds_each_parameter_of_its_procedure() {
        let t = Tables::new(Dialect::MySql, "locks");
        let made = SessionProcedures::new(&t, "locks");
        for (procedure, call, role) in [
            (&made.take, &made.call_take, "take"),
            (&made.release, &made.call_release, "free"),
        ] {
            assert!(
                procedure.name.starts_with(&format!("locks_{role}_")),
                "{}",
                procedure.name
            );
            assert!(procedure.create.contains(&format!("`{}`", procedure.name)));
            assert!(call.contains(&format!("CALL `{}`(", procedure.name)));
            assert!(!procedure.create.contains('?'), "{}", procedure.create);
            assert_eq!(
                call.matches('?').count(),
                procedure.create.matches("IN a_").count(),
                "{call}"
            );
        }
    }

    #[test]
    fn the_longest_prefix_makes_names_mariadb_takes() {
        let prefix = "p".repeat(crate::MAX_TABLE_PREFIX);
        let t = Tables::new(Dialect::MySql, &prefix);
        let made = SessionProcedures::new(&t, &prefix);
        assert!(made.take.name.len() <= 64, "{}", made.take.name);
        assert!(made.release.name.len() <= 64, "{}", made.release.name);
    }
}
