//! The uncontended grant of each lock kind in one statement ([`FastGrant`]).

use lock_core::LockKind;

use super::{s, Stmt, Tables};
use crate::dialect::Dialect;
use crate::key::kind_code;

/// What a statement's bind markers stand for, in order: the caller binds the values
/// of one request in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    Key,
    Namespace,
    Name,
    Kind,
    Holder,
    Owner,
    /// The fence the transaction's key bump returned (MySQL and SQLite).
    Fence,
    Ttl,
    /// What the requesting client says about itself (for `inspect`).
    Description,
}

/// The grant of an uncontended request: one statement that writes the lease only if
/// the request may have it, and returns the row's fence if it did.
///
/// * PostgreSQL: the whole acquisition in one autocommitted statement. A
///   data-modifying CTE bumps the key's fence (and so locks the key row, like the
///   general transaction), then inserts the lease row or takes over an expired one
///   (`ON CONFLICT ... DO UPDATE ... WHERE` expired, judged on the newest row version).
///   Kinds whose rule looks at other rows (fair: the queue; read and write: the other
///   side) read them in the statement's snapshot, which is only current if no other
///   acquisition committed on the key between the snapshot and the key row lock:
///   every acquisition bumps the fence under that lock, so the grant also requires
///   the bumped fence to be exactly one above the snapshot's. Otherwise nothing is
///   written but the fence (gaps are allowed) and the caller takes the general path.
/// * MySQL and SQLite: run after the key bump in the acquiring transaction (the key
///   row lock makes every statement after it current), in place of reading the live
///   leases and queue. MySQL has no `WHERE` on `ON DUPLICATE KEY UPDATE`, so the
///   assignments keep the row unless it expired; `RETURNING` gives the row's fence
///   either way, and the lease is ours if it is the fence this transaction bumped.
#[derive(Debug)]
pub(crate) struct FastGrant {
    pub(crate) stmt: Stmt,
    pub(crate) args: Vec<Arg>,
}

/// The rule of [`crate::decide::decide`] for a request without a queue ticket, as an
/// SQL condition over the key's other rows (the lease row of the request itself is
/// judged by the upsert).
pub(super) fn fast_condition(kind: LockKind, t: &Tables, now: &str) -> (String, Vec<Arg>) {
    let (leases, queue) = (&t.leases, &t.queue);
    let (fair, read, write) = (
        kind_code(LockKind::Fair),
        kind_code(LockKind::Read),
        kind_code(LockKind::Write),
    );
    match kind {
        LockKind::Exclusive => ("1 = 1".to_owned(), vec![]),
        // A fair request never overtakes a live ticket. (Permits and leaders have no
        // one-row grant: `fast_grants` builds none for them.)
        LockKind::Fair | LockKind::Permit | LockKind::Leader => (
            format!(
                "NOT EXISTS (SELECT 1 FROM {queue} x WHERE x.khash = ? AND x.kind = {fair} AND x.expires_ms > {now})"
            ),
            vec![Arg::Key],
        ),
        // No live reader (the write row itself is the upsert's business).
        LockKind::Write => (
            format!(
                "NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.khash = ? AND x.kind = {read} AND x.expires_ms > {now})"
            ),
            vec![Arg::Key],
        ),
        // No live writer and no waiting writer but the requester itself (downgrade).
        LockKind::Read => (
            format!(
                "NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.khash = ? AND x.kind = {write} AND x.owner <> ? AND x.expires_ms > {now}) \
                 AND NOT EXISTS (SELECT 1 FROM {queue} x WHERE x.khash = ? AND x.kind = {write} AND x.owner <> ? AND x.expires_ms > {now})"
            ),
            vec![Arg::Key, Arg::Owner, Arg::Key, Arg::Owner],
        ),
    }
}

/// The first key of the two-key advisory locks that gate PostgreSQL's exclusive fast
/// grants ("LOCK" in ASCII). Two-key advisory locks never collide with one-key ones; a
/// collision with an application's two-key lock would only send our attempts down the
/// general path.
const GATE_CLASS: i32 = 0x4c4f_434b;

pub(super) fn fast_grants(dialect: Dialect, t: &Tables) -> [FastGrant; 4] {
    [
        LockKind::Exclusive,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ]
    .map(|kind| fast_grant(dialect, t, kind))
}

fn fast_grant(dialect: Dialect, t: &Tables, kind: LockKind) -> FastGrant {
    let now = dialect.now_ms();
    let (cond, cond_args) = fast_condition(kind, t, now);
    let (sql, args) = match dialect {
        Dialect::Postgres => postgres_grant(t, kind, now, cond, cond_args),
        Dialect::MySql => mysql_grant(t, now, cond, cond_args),
        Dialect::Sqlite => sqlite_grant(t, now, cond, cond_args),
    };
    FastGrant {
        stmt: s(dialect, sql),
        args,
    }
}

/// The lease row's columns, in the order the grants bind them.
const LEASE_COLUMNS: &str =
    "(khash, kind, holder, owner, fence, expires_ms, description, acquired_ms)";

/// PostgreSQL: the whole acquisition in one statement (see [`FastGrant`]).
fn postgres_grant(
    t: &Tables,
    kind: LockKind,
    now: &str,
    cond: String,
    cond_args: Vec<Arg>,
) -> (String, Vec<Arg>) {
    let (keys, leases, cols) = (&t.keys, &t.leases, LEASE_COLUMNS);
    let mut args = Vec::new();
    let looks_around = kind != LockKind::Exclusive;
    let mut sql = String::from("WITH ");
    if looks_around {
        sql.push_str(&format!(
            "s AS (SELECT fence FROM {keys} WHERE khash = ?), "
        ));
        args.push(Arg::Key);
    }
    // The key row is bumped only if the request's own lease row is not live:
    // when it is, the upsert below cannot grant, and a bump would make a
    // blocked attempt a write, with its commit flushed to disk. (A row that
    // changes meanwhile is judged by the upsert on its newest version.)
    //
    // An exclusive request also needs the key's advisory gate, held until
    // this statement commits: the waiters a release wakes (one per client
    // and kind, in each process) try at once,
    // and without it each one that read the lease row before the winner's
    // commit would bump the key and flush a commit of its own, one after
    // another behind the winner's row lock. Those that find the gate taken
    // write nothing and go on to the general path, which decides on the
    // committed rows.
    let gate = if kind == LockKind::Exclusive {
        format!("AND pg_try_advisory_xact_lock({GATE_CLASS}, hashtext(?))")
    } else {
        String::new()
    };
    sql.push_str(&format!(
        "k AS (INSERT INTO {keys} AS kr (khash, fence, ticket, namespace, name) SELECT ?, 1, 0, ?, ? \
         WHERE NOT EXISTS (SELECT 1 FROM {leases} x WHERE x.khash = ? AND x.kind = {} \
         AND x.holder = ? AND x.expires_ms > {now}) {gate} \
         ON CONFLICT (khash) DO UPDATE SET fence = kr.fence + 1 RETURNING kr.fence), \
         g AS (INSERT INTO {leases} AS l {cols} SELECT ?, ?, ?, ?, k.fence, {now} + ?, ?, {now} FROM k WHERE ",
        kind_code(kind)
    ));
    args.extend([Arg::Key, Arg::Namespace, Arg::Name, Arg::Key, Arg::Holder]);
    if kind == LockKind::Exclusive {
        args.push(Arg::Key);
    }
    args.extend([
        Arg::Key,
        Arg::Kind,
        Arg::Holder,
        Arg::Owner,
        Arg::Ttl,
        Arg::Description,
    ]);
    if looks_around {
        sql.push_str("k.fence = COALESCE((SELECT fence FROM s), 0) + 1 AND ");
    }
    sql.push_str(&cond);
    args.extend(cond_args);
    sql.push_str(&format!(
        " ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
         fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
         acquired_ms = excluded.acquired_ms WHERE l.expires_ms <= {now} \
         RETURNING l.fence)"
    ));
    if matches!(kind, LockKind::Read | LockKind::Write) {
        // Dead readers' rows would otherwise pile up (the general path cleans
        // them too). Never the row the upsert may take over: one statement
        // must not change a row twice.
        sql.push_str(&format!(
            ", c AS (DELETE FROM {leases} WHERE khash = ? AND kind = {} AND holder <> ? \
             AND expires_ms <= {now})",
            kind_code(LockKind::Read)
        ));
        args.extend([Arg::Key, Arg::Holder]);
    }
    if kind == LockKind::Exclusive {
        // Always one row: the grant's fence, or how long the live lease (as
        // this statement's snapshot sees it) has left; both empty while
        // another request holds the gate. An exclusive request needs
        // nothing else to decide, so a blocked waiter costs one statement
        // that writes nothing.
        sql.push_str(&format!(
            " SELECT (SELECT fence FROM g) AS fence, (SELECT MAX(x.expires_ms) - {now} \
             FROM {leases} x WHERE x.khash = ? AND x.kind = {} AND x.expires_ms > {now}) AS left_ms",
            kind_code(kind)
        ));
        args.push(Arg::Key);
    } else {
        sql.push_str(" SELECT fence FROM g");
    }
    (sql, args)
}

/// What the MySQL and SQLite upserts bind: the lease row's values (its fence is the
/// one the transaction's key bump drew), then the condition's.
fn upsert_args(cond_args: Vec<Arg>) -> Vec<Arg> {
    let mut args = vec![
        Arg::Key,
        Arg::Kind,
        Arg::Holder,
        Arg::Owner,
        Arg::Fence,
        Arg::Ttl,
        Arg::Description,
    ];
    args.extend(cond_args);
    args
}

/// MySQL: the upsert after the transaction's key bump; the lease is ours if the row
/// carries the bumped fence.
fn mysql_grant(t: &Tables, now: &str, cond: String, cond_args: Vec<Arg>) -> (String, Vec<Arg>) {
    let (upsert, args) = mysql_upsert(t, now, cond, cond_args);
    (format!("{upsert} RETURNING fence"), args)
}

/// MySQL: [`mysql_grant`] without the row it returns, for the grant procedure
/// ([`super::grant_procedure`]), where a statement cannot return rows.
pub(super) fn mysql_upsert(
    t: &Tables,
    now: &str,
    cond: String,
    cond_args: Vec<Arg>,
) -> (String, Vec<Arg>) {
    let (leases, cols) = (&t.leases, LEASE_COLUMNS);
    let args = upsert_args(cond_args);
    // Assignments run left to right on the updated values: the fence decides
    // once (the server clock is read anew at every call), the rest follow it.
    let sql = format!(
        "INSERT INTO {leases} {cols} SELECT ?, ?, ?, ?, ?, {now} + ?, ?, {now} FROM DUAL WHERE {cond} \
         ON DUPLICATE KEY UPDATE fence = IF(expires_ms <= {now}, VALUES(fence), fence), \
         owner = IF(fence = VALUES(fence), VALUES(owner), owner), \
         description = IF(fence = VALUES(fence), VALUES(description), description), \
         acquired_ms = IF(fence = VALUES(fence), VALUES(acquired_ms), acquired_ms), \
         expires_ms = IF(fence = VALUES(fence), VALUES(expires_ms), expires_ms)"
    );
    (sql, args)
}

/// SQLite: the upsert after the transaction's key bump, taking over only an expired
/// row.
fn sqlite_grant(t: &Tables, now: &str, cond: String, cond_args: Vec<Arg>) -> (String, Vec<Arg>) {
    let (leases, cols) = (&t.leases, LEASE_COLUMNS);
    let args = upsert_args(cond_args);
    let sql = format!(
        "INSERT INTO {leases} AS l {cols} SELECT ?, ?, ?, ?, ?, {now} + ?, ?, {now} WHERE {cond} \
         ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
         fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
         acquired_ms = excluded.acquired_ms WHERE l.expires_ms <= {now} \
         RETURNING fence"
    );
    (sql, args)
}

/// SQLite: the whole uncontended acquisition of an exclusive or fair lock in one
/// call, where [`fast_grants`] has only the upsert inside the client's transaction.
/// The statements go to the connection's worker thread together and run there one
/// after another, under the database's write lock from `BEGIN IMMEDIATE` to `COMMIT`:
/// the key row is made if missing, the lease is written only if the request may have
/// it, with the fence one above the key's, and the key's fence is bumped only if the
/// lease row now carries that fence (no earlier row can: every grant bumps the key).
/// A blocked request writes nothing and returns no row; it then takes the
/// transaction, which learns how long to wait. A failed call leaves its transaction
/// open on the connection, which is then closed (see [`crate::hot`]), rolling it back.
pub(super) fn sqlite_one_calls(t: &Tables) -> [Option<FastGrant>; 4] {
    [
        LockKind::Exclusive,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ]
    .map(|kind| {
        matches!(kind, LockKind::Exclusive | LockKind::Fair).then(|| sqlite_one_call(t, kind))
    })
}

fn sqlite_one_call(t: &Tables, kind: LockKind) -> FastGrant {
    let (keys, leases, cols) = (&t.keys, &t.leases, LEASE_COLUMNS);
    let now = Dialect::Sqlite.now_ms();
    let (cond, cond_args) = fast_condition(kind, t, now);
    let sql = format!(
        "BEGIN IMMEDIATE; \
         INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, 0, 0, ?, ?) \
         ON CONFLICT (khash) DO NOTHING; \
         INSERT INTO {leases} AS l {cols} SELECT ?, ?, ?, ?, (SELECT fence + 1 FROM {keys} WHERE khash = ?), \
         {now} + ?, ?, {now} WHERE {cond} \
         ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
         fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
         acquired_ms = excluded.acquired_ms WHERE l.expires_ms <= {now} \
         RETURNING fence; \
         UPDATE {keys} SET fence = fence + 1 WHERE khash = ? AND EXISTS (SELECT 1 FROM {leases} x \
         WHERE x.khash = {keys}.khash AND x.kind = ? AND x.holder = ? AND x.fence = {keys}.fence + 1); \
         COMMIT"
    );
    let mut args = vec![
        Arg::Key,
        Arg::Namespace,
        Arg::Name,
        Arg::Key,
        Arg::Kind,
        Arg::Holder,
        Arg::Owner,
        Arg::Key,
        Arg::Ttl,
        Arg::Description,
    ];
    args.extend(cond_args);
    args.extend([Arg::Key, Arg::Kind, Arg::Holder]);
    FastGrant {
        stmt: s(Dialect::Sqlite, sql),
        args,
    }
}
