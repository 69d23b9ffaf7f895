//! The lease strategy's statements: lease rows, the wait queue, releases and the
//! operator's reads and force-unlocks.

use super::fast_grant::{fast_grants, sqlite_one_calls, FastGrant};
use super::{s, Statements, Stmt, Tables};
use crate::dialect::Dialect;

/// The lease strategy's statements.
#[derive(Debug)]
pub(crate) struct LeaseStatements {
    pub(crate) live_leases: Stmt,
    pub(crate) live_queue: Stmt,
    pub(crate) put_lease: Stmt,
    /// The fence of one lease row: tells whether `put_lease` wrote it.
    pub(crate) lease_fence: Stmt,
    pub(crate) clean_expired: Stmt,
    /// The uncontended grant of each kind (indexed by
    /// [`kind_code`](crate::key::kind_code)): see [`FastGrant`].
    pub(crate) fast_grant: [FastGrant; 4],
    /// SQLite: the whole uncontended acquisition in one call, for the kinds that have
    /// one (indexed as `fast_grant`); see [`super::fast_grant::sqlite_one_calls`].
    pub(crate) sqlite_one_call: [Option<FastGrant>; 4],
    pub(crate) ticket_bump: Stmt,
    pub(crate) enqueue: Stmt,
    pub(crate) refresh_ticket: Stmt,
    pub(crate) dequeue: Stmt,
    /// Deletes one live lease; PostgreSQL's version also notifies waiters and
    /// returns the count as a row, MariaDB's returns the deleted row.
    pub(crate) release: Stmt,
    /// Deletes the live lease of one owner whatever its fence (an owner is one
    /// acquisition): undoes a grant whose reply, and so its fence, was lost.
    pub(crate) undo_grant: Stmt,
    pub(crate) force_unlock: Stmt,
    /// Sets the description of one live lease (an election leader's value).
    pub(crate) proclaim: Stmt,
    /// Whether one live lease is there: tells a proclaim that changed no row (MySQL
    /// counts a value written again as no change) from one whose lease is gone.
    pub(crate) lease_live: Stmt,
    /// Deletes the live lease of a family with one fence (PostgreSQL: and notifies).
    pub(crate) force_unlock_holder: Stmt,
    pub(crate) count_live: Stmt,
    /// The live leases of a family, with what `inspect` reports.
    pub(crate) inspect_leases: Stmt,
    /// How many live queue tickets a family has.
    pub(crate) count_waiters: Stmt,
}

impl LeaseStatements {
    pub(crate) fn new(dialect: Dialect, t: &Tables) -> Self {
        let now = dialect.now_ms();
        let (keys, leases, queue) = (&t.keys, &t.leases, &t.queue);
        let st = |sql: String| s(dialect, sql);
        let live_leases = st(format!(
            "SELECT kind, owner, expires_ms - {now} AS remaining, permits FROM {leases} \
             WHERE khash = ? AND expires_ms > {now}"
        ));
        let live_queue = st(format!(
            "SELECT kind, ticket, owner, expires_ms - {now} AS remaining, permits FROM {queue} \
             WHERE khash = ? AND expires_ms > {now} ORDER BY ticket"
        ));
        let lease_insert = format!(
            "INSERT INTO {leases} (khash, kind, holder, owner, fence, expires_ms, description, acquired_ms, permits) \
             VALUES (?, ?, ?, ?, ?, {now} + ?, ?, {now}, ?)"
        );
        // Takes over an existing row only if it has expired by now: a renewal that
        // committed after this transaction read the leases must win. (MySQL assigns
        // left to right, so `expires_ms` goes last: the tests read its old value.)
        let put_lease = st(match dialect {
            Dialect::MySql => format!(
                "{lease_insert} ON DUPLICATE KEY UPDATE \
                 owner = IF(expires_ms <= {now}, VALUES(owner), owner), \
                 fence = IF(expires_ms <= {now}, VALUES(fence), fence), \
                 description = IF(expires_ms <= {now}, VALUES(description), description), \
                 acquired_ms = IF(expires_ms <= {now}, VALUES(acquired_ms), acquired_ms), \
                 permits = IF(expires_ms <= {now}, VALUES(permits), permits), \
                 expires_ms = IF(expires_ms <= {now}, VALUES(expires_ms), expires_ms)"
            ),
            _ => format!(
                "{lease_insert} ON CONFLICT (khash, kind, holder) DO UPDATE SET owner = excluded.owner, \
                 fence = excluded.fence, expires_ms = excluded.expires_ms, description = excluded.description, \
                 acquired_ms = excluded.acquired_ms, permits = excluded.permits WHERE {leases}.expires_ms <= {now}"
            ),
        });
        let lease_fence = st(format!(
            "SELECT fence FROM {leases} WHERE khash = ? AND kind = ? AND holder = ?"
        ));
        let clean_expired = st(format!(
            "DELETE FROM {leases} WHERE khash = ? AND expires_ms <= {now}"
        ));
        let ticket_bump = st(match dialect {
            Dialect::MySql => {
                format!("UPDATE {keys} SET ticket = LAST_INSERT_ID(ticket + 1) WHERE khash = ?")
            }
            _ => format!("UPDATE {keys} SET ticket = ticket + 1 WHERE khash = ? RETURNING ticket"),
        });
        let enqueue = st(format!(
            "INSERT INTO {queue} (khash, kind, ticket, owner, expires_ms, permits) VALUES (?, ?, ?, ?, {now} + ?, ?)"
        ));
        let refresh_ticket = st(format!(
            "UPDATE {queue} SET expires_ms = {now} + ? WHERE khash = ? AND kind = ? AND ticket = ? AND expires_ms > {now}"
        ));
        let dequeue = st(format!(
            "DELETE FROM {queue} WHERE khash = ? AND kind = ? AND ticket = ?"
        ));
        let release_where = format!(
            "khash = ? AND kind = ? AND holder = ? AND owner = ? AND fence = ? AND expires_ms > {now}"
        );
        let force_where = format!("khash = ? AND kind >= ? AND kind <= ? AND expires_ms > {now}");
        // `commit`: what the deletion's commit waits for. An owner giving its own lease
        // back need not wait for the disk: a release lost in a crash only keeps the lock
        // taken until its lease runs out, and any later grant's synced commit writes the
        // release before it (the log is flushed in order).
        let with_notify = |cond: &str, commit: Commit| {
            let asynchronously = match commit {
                Commit::Synced => "",
                Commit::Asynchronous => {
                    ", set_config('synchronous_commit', 'off', true) IS NULL AS unsynced"
                }
            };
            match dialect {
                // pg_notify is delivered at commit, so a woken waiter sees the row gone.
                // Both functions run once per deleted row, so only a commit that frees a
                // lease is made asynchronous.
                Dialect::Postgres => format!(
                    "WITH d AS (DELETE FROM {leases} WHERE {cond} RETURNING khash) \
                     SELECT COUNT(*) AS n FROM d, LATERAL (SELECT pg_notify(?, d.khash) IS NULL AS sent{asynchronously}) AS x"
                ),
                _ => format!("DELETE FROM {leases} WHERE {cond}"),
            }
        };
        // MariaDB's and SQLite's own releases answer the rows they deleted, as
        // PostgreSQL's answer a count: a release then runs on the hot connection,
        // which answers rows.
        let own = |sql: String| match dialect {
            Dialect::MySql | Dialect::Sqlite => format!("{sql} RETURNING khash"),
            Dialect::Postgres => sql,
        };
        let release = st(own(with_notify(&release_where, Commit::Asynchronous)));
        let undo_grant = st(own(with_notify(
            &format!("khash = ? AND kind = ? AND holder = ? AND owner = ? AND expires_ms > {now}"),
            Commit::Asynchronous,
        )));
        let force_unlock = st(with_notify(&force_where, Commit::Synced));
        let proclaim = st(format!(
            "UPDATE {leases} SET description = ? WHERE {release_where}"
        ));
        let lease_live = st(format!(
            "SELECT COUNT(*) FROM {leases} WHERE {release_where}"
        ));
        let force_unlock_holder = st(with_notify(
            &format!("{force_where} AND fence = ?"),
            Commit::Synced,
        ));
        let count_live = st(format!("SELECT COUNT(*) FROM {leases} WHERE {force_where}"));
        let inspect_leases = st(format!(
            "SELECT kind, owner, fence, description, acquired_ms, expires_ms FROM {leases} \
             WHERE {force_where} ORDER BY fence"
        ));
        let count_waiters = st(format!(
            "SELECT COUNT(*) FROM {queue} WHERE khash = ? AND kind >= ? AND kind <= ? AND expires_ms > {now}"
        ));
        LeaseStatements {
            live_leases,
            live_queue,
            put_lease,
            lease_fence,
            fast_grant: fast_grants(dialect, t),
            sqlite_one_call: match dialect {
                Dialect::Sqlite => sqlite_one_calls(t),
                _ => [None, None, None, None],
            },
            clean_expired,
            ticket_bump,
            enqueue,
            refresh_ticket,
            dequeue,
            release,
            undo_grant,
            force_unlock,
            proclaim,
            lease_live,
            force_unlock_holder,
            count_live,
            inspect_leases,
            count_waiters,
        }
    }
}

impl Statements {
    /// One statement renewing `n` leases: each given as `khash, kind, holder, owner,
    /// fence` after the leading ttl parameter. PostgreSQL and SQLite return the renewed
    /// rows; on MySQL the affected-row count says whether all were found.
    pub(crate) fn renew(&self, n: usize) -> Stmt {
        let now = self.dialect.now_ms();
        let leases = &self.tables.leases;
        let returning = match self.dialect {
            Dialect::MySql => "",
            _ => " RETURNING khash, kind, fence",
        };
        s(
            self.dialect,
            format!(
                "UPDATE {leases} SET expires_ms = {now} + ? WHERE expires_ms > {now} AND ({}){returning}",
                lease_matches(n)
            ),
        )
    }

    /// MySQL only: which of `n` leases are live, after a renewal that did not find all.
    pub(crate) fn live_of(&self, n: usize) -> Stmt {
        let now = self.dialect.now_ms();
        let leases = &self.tables.leases;
        s(
            self.dialect,
            format!(
                "SELECT khash, kind, fence FROM {leases} WHERE expires_ms > {now} AND ({})",
                lease_matches(n)
            ),
        )
    }
}

fn lease_matches(n: usize) -> String {
    vec!["(khash = ? AND kind = ? AND holder = ? AND owner = ? AND fence = ?)"; n].join(" OR ")
}

/// Whether a deletion's commit waits for the disk (PostgreSQL; elsewhere every commit
/// is as the server is configured).
#[derive(Clone, Copy)]
enum Commit {
    Synced,
    Asynchronous,
}
