//! MariaDB: the uncontended grant of a lease in one call ([`GrantProcedure`]).

use std::time::Duration;

use lock_core::LockKind;

use super::fast_grant::{fast_condition, mysql_upsert, Arg, FastGrant};
use super::{s, Procedure, Tables};
use crate::dialect::Dialect;
use crate::key::kind_code;

/// A stored procedure that runs on the server what the general transaction's first
/// statements do for a request without a queue ticket (bump the key's fence, which
/// locks the key row; the kind's one-row grant of [`FastGrant`]), and commits if the
/// lease row came out carrying the bumped fence, else rolls back: nothing is written
/// for a refusal. One round trip, where the transaction takes four (BEGIN, the bump,
/// the grant, COMMIT).
///
/// It answers one row: the granted fence, or NULL, how long a live lease of another
/// owner of the requested kind has left and that owner (what an exclusive request
/// needs to know to wait, and whose doorbell to watch: [`crate::bells`]; the other
/// kinds take the general path to queue).
#[derive(Debug)]
pub(crate) struct GrantProcedure {
    pub(crate) procedure: Procedure,
    /// Calls it with a request's values.
    pub(crate) call: FastGrant,
}

/// The kinds the procedure grants: those with a one-row grant.
const KINDS: [LockKind; 4] = [
    LockKind::Exclusive,
    LockKind::Fair,
    LockKind::Read,
    LockKind::Write,
];

/// The procedure's parameters, in the order of the call's bind markers.
const PARAMETERS: [(Arg, &str); 8] = [
    (Arg::Key, "VARCHAR(64)"),
    (Arg::Namespace, "TEXT"),
    (Arg::Name, "TEXT"),
    (Arg::Kind, "BIGINT"),
    (Arg::Holder, "VARCHAR(128)"),
    (Arg::Owner, "VARCHAR(128)"),
    (Arg::Ttl, "BIGINT"),
    (Arg::Description, "VARCHAR(1024)"),
];

/// The name a value goes by inside the procedure. None is a column's name: a local
/// name would win over a column's in the statements.
fn variable(arg: Arg) -> &'static str {
    match arg {
        Arg::Key => "a_key",
        Arg::Namespace => "a_namespace",
        Arg::Name => "a_name",
        Arg::Kind => "a_kind",
        Arg::Holder => "a_holder",
        Arg::Owner => "a_owner",
        Arg::Fence => "a_fence",
        Arg::Ttl => "a_ttl",
        Arg::Description => "a_description",
    }
}

/// `sql` with its bind markers replaced, in order, by the variables of `args`. The
/// statements hold no `?` but their markers (no string literal has one).
fn with_variables(sql: &str, args: &[Arg]) -> String {
    let mut names = args.iter().map(|arg| variable(*arg));
    sql.chars()
        .map(|c| match c {
            '?' => names
                .next()
                .expect("a variable for every marker")
                .to_owned(),
            c => c.to_string(),
        })
        .collect()
}

impl GrantProcedure {
    /// The procedure of the tables `t` (MySQL only), named after their prefix. A call
    /// waits at most `lock_wait` (in whole seconds, at least one) for a row lock: a
    /// grant must not commit on the server long after its caller gave up.
    pub(crate) fn new(t: &Tables, prefix: &str, lock_wait: Duration) -> Self {
        let dialect = Dialect::MySql;
        let now = dialect.now_ms();
        let (keys, leases) = (&t.keys, &t.leases);
        // Text parameters compare with the tables' columns: the same collation, or
        // MariaDB refuses to mix them.
        let parameters = PARAMETERS
            .iter()
            .map(|(arg, ty)| {
                let text = !ty.contains("INT");
                let charset = if text {
                    " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                } else {
                    ""
                };
                format!("IN {} {ty}{charset}", variable(*arg))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let branches = KINDS
            .iter()
            .map(|&kind| {
                let (cond, cond_args) = fast_condition(kind, t, now);
                let (upsert, args) = mysql_upsert(t, now, cond, cond_args);
                format!(
                    "IF a_kind = {} THEN {}; END IF;",
                    kind_code(kind),
                    with_variables(&upsert, &args)
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        let (read, write) = (kind_code(LockKind::Read), kind_code(LockKind::Write));
        // The key bump comes first, as in the general transaction, so both lock a
        // key's rows in the same order. A refusal rolls back: a blocked attempt writes
        // nothing. Any error rolls back before it reaches the caller.
        let definition = format!(
            "({parameters}) MODIFIES SQL DATA SQL SECURITY INVOKER \
             COMMENT 'lock-sql: the uncontended grant of a lease in one call' \
             BEGIN \
             DECLARE a_fence BIGINT; DECLARE a_kept BIGINT; DECLARE a_left BIGINT; \
             DECLARE a_blocker VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin; \
             DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END; \
             START TRANSACTION; \
             INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (a_key, 1, 0, a_namespace, a_name) \
             ON DUPLICATE KEY UPDATE fence = fence + 1; \
             SET a_fence = (SELECT fence FROM {keys} WHERE khash = a_key); \
             IF a_kind IN ({read}, {write}) THEN DELETE FROM {leases} WHERE khash = a_key AND expires_ms <= {now}; END IF; \
             {branches} \
             SET a_kept = (SELECT fence FROM {leases} WHERE khash = a_key AND kind = a_kind AND holder = a_holder); \
             IF a_kept <=> a_fence THEN \
             COMMIT; SELECT a_fence AS fence, CAST(NULL AS SIGNED) AS left_ms, CAST(NULL AS CHAR) AS blocker; \
             ELSE \
             SELECT expires_ms - {now}, owner INTO a_left, a_blocker FROM {leases} WHERE khash = a_key \
             AND kind = a_kind AND owner <> a_owner AND expires_ms > {now} ORDER BY expires_ms DESC LIMIT 1; \
             ROLLBACK; SELECT CAST(NULL AS SIGNED) AS fence, a_left AS left_ms, a_blocker AS blocker; \
             END IF; \
             END"
        );
        let (procedure, quoted) = Procedure::new(prefix, "grant", &definition);
        let markers = vec!["?"; PARAMETERS.len()].join(", ");
        let wait_s = lock_wait.as_secs().max(1);
        GrantProcedure {
            procedure,
            call: FastGrant {
                stmt: s(
                    dialect,
                    format!(
                        "SET STATEMENT innodb_lock_wait_timeout = {wait_s} FOR CALL {quoted}({markers})"
                    ),
                ),
                args: PARAMETERS.iter().map(|(arg, _)| *arg).collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_becomes_its_variable() {
        assert_eq!(
            with_variables(
                "a = ? AND b = ? OR c = ?",
                &[Arg::Key, Arg::Fence, Arg::Owner]
            ),
            "a = a_key AND b = a_fence OR c = a_owner"
        );
    }

    #[test]
    fn the_procedure_has_no_marker_left_and_its_call_binds_every_parameter() {
        let t = Tables::new(Dialect::MySql, "locks");
        let procedure = GrantProcedure::new(&t, "locks", Duration::from_secs(10));
        let made = &procedure.procedure;
        assert!(!made.create.contains('?'), "{}", made.create);
        assert!(made.name.starts_with("locks_grant_"), "{}", made.name);
        assert!(made.create.contains(&format!("`{}`", made.name)));
        assert!(procedure
            .call
            .stmt
            .contains("innodb_lock_wait_timeout = 10 FOR CALL"));
        let markers = procedure.call.stmt.matches('?').count();
        assert_eq!(markers, procedure.call.args.len());
    }

    #[test]
    fn the_name_follows_the_body() {
        let name = |prefix: &str| {
            let t = Tables::new(Dialect::MySql, prefix);
            GrantProcedure::new(&t, prefix, Duration::from_secs(3))
                .procedure
                .name
        };
        // The longest prefix still makes a name MariaDB takes (64 characters).
        let longest = "p".repeat(crate::MAX_TABLE_PREFIX);
        assert!(name(&longest).len() <= 64, "{}", name(&longest));
        // Other tables, another body: another digest.
        assert_ne!(name("a")[2..], name("b")[2..]);
        assert_eq!(name("a"), name("a"));
    }
}
