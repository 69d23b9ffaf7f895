//! The lease strategy: lock rows with owner, fencing token and a server-clock expiry.
//!
//! Every grant first writes the key's row in the keys table: that creates it or bumps
//! its fence, and locks it, so acquisitions of one key run one after another and each
//! sees what the previous committed (read-committed isolation; SQLite has one writer
//! at a time anyway).
//!
//! An uncontended request is granted by one conditional upsert
//! ([`crate::sql::FastGrant`]): on PostgreSQL the bump and the upsert are one
//! autocommitted statement; on MySQL and SQLite the upsert follows the bump in a short
//! transaction. If it does not grant, the general path applies the rules in
//! [`crate::decide`] to the key's live leases and queue, read under the key row lock:
//! it learns how long to wait, queues fair and write requests, and grants what the
//! upsert could not judge (requests holding a ticket). Renewals and releases are single
//! statements guarded by owner and fence (the lease's version).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use lock_core::{Error, HolderInfo, LockFamily, LockInfo, LockKind, Result};

use lock_core::backend::{AcquireRequest, Grant, HeldLease, Renewal};
use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Row};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::db::{q, Db};
use crate::decide::{decide, Decision, LiveLease, LiveTicket};
use crate::dialect::Dialect;
use crate::error::{classify, timed_out, Class};
use crate::key::{family_range, holder_of, kind_code, kind_of, KeyId};
use crate::listen::Listener;
use crate::local_wake;
use crate::sql::{Arg, FastGrant};
use crate::wait::{until_released, Backoff};
use crate::SqlLease;

/// Leases renewed per statement; more are split into several statements.
const RENEW_CHUNK: usize = 100;

/// Waiting settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) queue_ttl: Duration,
}

/// A duration as whole milliseconds for the database, rounded up and at least 1.
pub(crate) fn millis(d: Duration) -> i64 {
    let ms = d.as_micros().div_ceil(1000).max(1);
    i64::try_from(ms).unwrap_or(i64::MAX / 4)
}

/// One acquisition request, as the transaction needs it.
struct Ask {
    key: KeyId,
    kind: LockKind,
    owner: String,
    ttl_ms: i64,
    queue_ttl_ms: i64,
    /// What the client says about itself, stored with the lease for `inspect`.
    description: String,
}

enum Outcome {
    Granted(u64),
    Blocked { wake_in_ms: Option<i64> },
}

/// A queue ticket this acquire holds; removed (by a spawned task if need be) however
/// the acquire ends.
struct Ticket {
    db: Arc<Db>,
    key: String,
    kind: LockKind,
    id: Option<i64>,
}

impl Ticket {
    /// Removes the ticket. The id is forgotten only once the delete is done: dropped
    /// half-way, or failed, the ticket is removed again in the background on drop.
    async fn remove(&mut self) {
        if let Some(id) = self.id {
            if dequeue(&self.db, &self.key, self.kind, id).await.is_ok() {
                self.id = None;
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let (db, key, kind) = (self.db.clone(), self.key.clone(), self.kind);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let cleanups = db.cleanups.clone();
                cleanups.spawn_on(&rt, async move {
                    let _ = dequeue(&db, &key, kind, id).await;
                });
            }
        }
    }
}

async fn dequeue(db: &Db, key: &str, kind: LockKind, id: i64) -> Result<()> {
    remove_ticket(db, key, kind, id).await.map(drop)
}

/// Deletes one queue ticket and tells whoever was behind it; returns whether it was
/// there.
async fn remove_ticket(db: &Db, key: &str, kind: LockKind, id: i64) -> Result<bool> {
    let done = q(&db.sql.dequeue)
        .bind(key.to_owned())
        .bind(kind_code(kind))
        .bind(id)
        .execute(&db.pool);
    let done = db
        .timed("removing a queue ticket", async {
            done.await.map_err(|e| db.err(e))
        })
        .await?;
    // Whoever was behind this ticket may go now.
    notify(db, key).await?;
    Ok(done.rows_affected() > 0)
}

/// What an attempt wrote that its caller has not taken over yet: a granted lease, a
/// new queue ticket. Armed before the commit, so that whatever happens to the reply,
/// dropping it undoes the write (in a spawned task).
struct PendingWrite {
    db: Arc<Db>,
    key: String,
    kind: LockKind,
    owner: String,
    ttl_ms: i64,
    queue_ttl_ms: i64,
    fence: Option<i64>,
    ticket: Option<i64>,
    /// A grant may have committed although its reply never came back, so its fence is
    /// unknown: the undo removes this owner's lease whatever its fence.
    unknown_grant: bool,
    /// Whether the write may still land after the undo starts (a commit or statement
    /// that failed or timed out at the client, not at the server).
    uncertain: bool,
}

impl PendingWrite {
    fn new(db: &Arc<Db>, ask: &Ask) -> Self {
        PendingWrite {
            db: db.clone(),
            key: ask.key.hash.clone(),
            kind: ask.kind,
            owner: ask.owner.clone(),
            ttl_ms: ask.ttl_ms,
            queue_ttl_ms: ask.queue_ttl_ms,
            fence: None,
            ticket: None,
            unknown_grant: false,
            uncertain: false,
        }
    }

    /// The write's outcome is unknown: it may have landed, or may land later.
    fn outcome_unknown(&mut self) {
        self.uncertain = true;
    }

    /// The caller has taken over what was written.
    fn disarm(&mut self) {
        self.fence = None;
        self.ticket = None;
        self.unknown_grant = false;
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        let grant = match (self.fence.take(), std::mem::take(&mut self.unknown_grant)) {
            (Some(fence), _) => Some(Some(fence)),
            (None, true) => Some(None),
            (None, false) => None,
        };
        let ticket = self.ticket.take();
        if grant.is_none() && ticket.is_none() {
            return;
        }
        let undo = Undo {
            db: self.db.clone(),
            key: self.key.clone(),
            kind: self.kind,
            owner: self.owner.clone(),
            grant,
            ticket,
        };
        // A write that may still land is undone again until it could no longer
        // matter: a lease or ticket expires by the server's clock, counted from its
        // statement, which ran before now.
        let margin = Duration::from_secs(1);
        let lives_ms = match (undo.grant.is_some(), undo.ticket.is_some()) {
            (true, true) => self.ttl_ms.max(self.queue_ttl_ms),
            (true, false) => self.ttl_ms,
            _ => self.queue_ttl_ms,
        };
        let until = Instant::now() + Duration::from_millis(lives_ms as u64) + margin;
        let uncertain = self.uncertain;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let cleanups = self.db.cleanups.clone();
            cleanups.spawn_on(&rt, undo.run(uncertain, until));
        }
    }
}

/// Removes what an attempt wrote and nobody took over.
struct Undo {
    db: Arc<Db>,
    key: String,
    kind: LockKind,
    owner: String,
    /// The granted lease: `Some(fence)`, or `None` when its fence is unknown.
    grant: Option<Option<i64>>,
    ticket: Option<i64>,
}

impl Undo {
    /// Deletes the lease and the ticket. A write known to have landed is deleted once
    /// (again only on errors); one that may still land (`uncertain`) is deleted again
    /// and again until a delete finds it or `until` passes: a COMMIT the server still
    /// holds (a synchronous standby that does not answer, a stalled disk) lands after a
    /// first delete found nothing, and would then block the lock for its whole lease.
    async fn run(mut self, uncertain: bool, until: Instant) {
        let mut pause = Duration::from_millis(100);
        loop {
            let mut again = false;
            if let Some(fence) = self.grant {
                match delete_lease(&self.db, &self.key, self.kind, &self.owner, fence).await {
                    Ok(true) => self.grant = None,
                    Ok(false) if !uncertain => self.grant = None,
                    _ => again = true,
                }
            }
            if let Some(id) = self.ticket {
                match remove_ticket(&self.db, &self.key, self.kind, id).await {
                    Ok(true) => self.ticket = None,
                    Ok(false) if !uncertain => self.ticket = None,
                    _ => again = true,
                }
            }
            if !again || Instant::now() + pause > until {
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

/// Takes a lease, waiting until the request's deadline.
pub(crate) async fn acquire(
    db: &Arc<Db>,
    listener: Option<&Listener>,
    timing: Timing,
    req: AcquireRequest<'_>,
) -> Result<Option<Grant<SqlLease>>> {
    let ask = Arc::new(Ask {
        key: KeyId::of(req.key),
        kind: req.kind,
        owner: req.owner.as_str().to_owned(),
        ttl_ms: millis(req.ttl),
        queue_ttl_ms: millis(timing.queue_ttl),
        description: req.holder.to_owned(),
    });
    let key = &ask.key;
    let waits = !req.deadline.has_passed();
    let queued_kind = matches!(req.kind, LockKind::Fair | LockKind::Write);
    let mut ticket = Ticket {
        db: db.clone(),
        key: key.hash.clone(),
        kind: req.kind,
        id: None,
    };
    let mut backoff = Backoff::new(timing.poll_min, timing.poll_max);
    let wake_topic: Arc<str> = match listener {
        Some(_) => key.hash.as_str().into(),
        None => local_wake::topic(&db.scope, &key.hash),
    };
    loop {
        // Subscribe before looking, so a release right after the look is not missed:
        // PostgreSQL's notifications, else this process's own announcements.
        let mut wake = listener.map_or_else(local_wake::subscribe, Listener::subscribe);
        let enqueue = waits && queued_kind;
        // The lease's expiry is set by the database during this attempt.
        let attempt_sent = Instant::now();
        let outcome = attempt(db, &ask, &mut ticket.id, enqueue).await?;
        let wake_in_ms = match outcome {
            Outcome::Granted(fence) => {
                // The grant removed the ticket in its transaction.
                ticket.id = None;
                return Ok(Some(Grant {
                    fence,
                    started_at: attempt_sent,
                    data: SqlLease::lease(key.clone()),
                }));
            }
            Outcome::Blocked { wake_in_ms } => wake_in_ms,
        };
        if req.deadline.has_passed() {
            ticket.remove().await;
            return Ok(None);
        }
        let mut nap = match listener {
            // Notified on release; the timeout only covers a lost notification.
            Some(_) => timing.poll_max * 4,
            // Only releases in this process are announced: keep polling for the rest.
            None => backoff.next_pause(),
        };
        if let Some(ms) = wake_in_ms {
            // Never sleep past the blocker's expiry (by the server's clock).
            nap = nap.min(Duration::from_millis(ms.max(0) as u64 + 1));
        }
        if ticket.id.is_some() {
            // Keep the ticket alive.
            nap = nap.min(timing.queue_ttl / 3);
        }
        let until = req.deadline.min(Instant::now() + nap);
        until_released(&mut wake, &wake_topic, until).await;
    }
}

/// One try, retried on transient conflicts.
async fn attempt(
    db: &Arc<Db>,
    ask: &Arc<Ask>,
    ticket: &mut Option<i64>,
    enqueue: bool,
) -> Result<Outcome> {
    let mut tries = 0;
    loop {
        let (outcome, next, mut pending) = match tokio::time::timeout(
            db.request_timeout,
            attempt_in_task(db, ask, *ticket, enqueue),
        )
        .await
        {
            Ok(answer) => answer?,
            Err(_) => return Err(timed_out(db.name(), "acquiring a lock", db.request_timeout)),
        };
        match outcome {
            Ok(outcome) => {
                *ticket = next;
                pending.disarm();
                return Ok(outcome);
            }
            Err(e) if classify(&e) == Class::Transient && tries < 20 => {
                // A deadlock or a busy database file: the transaction rolled back
                // (dropping `pending` undoes anything it may have committed).
                tries += 1;
                drop(pending);
                let pause = rand::random_range(1..=5 * tries);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            Err(e) => return Err(db.err(e)),
        }
    }
}

type AttemptAnswer = (
    std::result::Result<Outcome, sqlx::Error>,
    Option<i64>,
    PendingWrite,
);

/// Runs one attempt in a task of its own, which always sees how its commit ended: it
/// hands back the outcome, the ticket, and what it wrote armed for undoing. A caller
/// that went away before the commit was sent costs nothing (the transaction is rolled
/// back); one that went away later leaves the answer untaken, and dropping it undoes
/// the grant or removes the new ticket, after the commit, so a commit can never land
/// after its clean-up.
async fn attempt_in_task(
    db: &Arc<Db>,
    ask: &Arc<Ask>,
    ticket: Option<i64>,
    enqueue: bool,
) -> Result<AttemptAnswer> {
    let (mut reply, answer) = oneshot::channel();
    let (task_db, task_ask) = (db.clone(), ask.clone());
    // Counted as a clean-up: a caller that leaves mid-attempt leaves this task to undo
    // what the attempt commits.
    db.cleanups
        .spawn_on(&tokio::runtime::Handle::current(), async move {
            if let Some(answer) =
                run_attempt(&task_db, &task_ask, ticket, enqueue, &mut reply).await
            {
                let _ = reply.send(answer);
            }
        });
    answer
        .await
        .map_err(|_| Error::backend(db.name(), "an acquire attempt ended without an answer"))
}

/// The body of [`attempt_in_task`]; `None` if the caller went away before anything
/// was committed.
async fn run_attempt(
    db: &Arc<Db>,
    ask: &Ask,
    ticket: Option<i64>,
    enqueue: bool,
    reply: &mut oneshot::Sender<AttemptAnswer>,
) -> Option<AttemptAnswer> {
    let mut pending = PendingWrite::new(db, ask);
    if db.dialect == Dialect::Postgres && ticket.is_none() {
        // The statement commits by itself: once sent, wait for its answer.
        if reply.is_closed() {
            return None;
        }
        match fast_grant_postgres(db, ask, &mut pending).await {
            Ok(Some(outcome)) => return Some((Ok(outcome), ticket, pending)),
            Ok(None) => {} // Blocked: the transaction below learns how long, and queues.
            Err(e) => {
                if may_have_landed(&e) {
                    // Granted perhaps, with a fence we never learnt.
                    pending.unknown_grant = true;
                    pending.outcome_unknown();
                }
                return Some((Err(e), ticket, pending));
            }
        }
    }
    // Nothing is committed before `commit` below: dropping the transaction on the
    // way there rolls it back.
    let prepared = tokio::select! {
        prepared = prepare(db, ask, ticket, enqueue) => prepared,
        () = reply.closed() => return None,
    };
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(e) => return Some((Err(e), ticket, pending)),
    };
    pending.fence = prepared.fence;
    pending.ticket = prepared.new_ticket;
    if let Some(tx) = prepared.tx {
        // Bounded, so a server that never answers cannot keep the task forever.
        let committed = tokio::time::timeout(db.request_timeout * 3, tx.commit())
            .await
            .unwrap_or_else(|_| {
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "COMMIT did not answer",
                )))
            });
        if let Err(e) = committed {
            if may_have_landed(&e) {
                pending.outcome_unknown();
            }
            return Some((Err(e), ticket, pending));
        }
    }
    Some((Ok(prepared.outcome), prepared.ticket, pending))
}

/// Whether a statement or COMMIT that failed with `e` may have been carried out all
/// the same, now or later: the connection failed or timed out, or the server ended
/// the session (SQLSTATE class 57: a session terminated while its COMMIT waited for
/// a synchronous standby has committed). Any other error from the server rolled the
/// transaction back.
fn may_have_landed(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("57") || code.starts_with("08")),
        // No connection was had: nothing was sent.
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => false,
        _ => true,
    }
}

/// What one attempt's transaction decided, not yet committed.
struct Prepared {
    /// The transaction to commit; `None` when it was rolled back (nothing written).
    tx: Option<sqlx::Transaction<'static, Any>>,
    outcome: Outcome,
    /// The lease the commit grants.
    fence: Option<i64>,
    /// The queue ticket the commit creates.
    new_ticket: Option<i64>,
    /// The caller's ticket once committed.
    ticket: Option<i64>,
}

/// Runs one attempt's transaction up to its commit: reads the key's leases and queue,
/// decides, and writes the grant, the new ticket or the ticket's refresh.
async fn prepare(
    db: &Db,
    ask: &Ask,
    mut ticket: Option<i64>,
    enqueue: bool,
) -> std::result::Result<Prepared, sqlx::Error> {
    let sql = &db.sql;
    let khash = &ask.key.hash;
    let mut tx = db.begin().await?;
    let fence = bump_key(&mut tx, db, &ask.key).await?;
    if db.dialect != Dialect::Postgres && ticket.is_none() {
        // The key row is locked: the grant statement sees the key's current rows, so
        // when it grants, the reads below are not needed.
        if matches!(ask.kind, LockKind::Read | LockKind::Write) {
            q(&sql.clean_expired)
                .bind(khash.clone())
                .execute(&mut *tx)
                .await?;
        }
        let row = bind_args(fast_grant_of(db, ask.kind), ask, fence)
            .fetch_optional(&mut *tx)
            .await?;
        // MySQL returns the row it kept, ours or not: ours has the fence just bumped.
        if row.map(|r| r.try_get::<i64, _>(0)).transpose()? == Some(fence) {
            return Ok(Prepared {
                tx: Some(tx),
                outcome: Outcome::Granted(fence as u64),
                fence: Some(fence),
                new_ticket: None,
                ticket: None,
            });
        }
    }
    let leases: Vec<LiveLease> = q(&sql.live_leases)
        .bind(khash.clone())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .filter_map(|row| {
            Some(LiveLease {
                kind: kind_of(row.try_get(0).ok()?)?,
                owner: row.try_get(1).ok()?,
                remaining_ms: row.try_get(2).ok()?,
            })
        })
        .collect();
    let queue: Vec<LiveTicket> = if ask.kind == LockKind::Exclusive {
        Vec::new()
    } else {
        q(&sql.live_queue)
            .bind(khash.clone())
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .filter_map(|row| {
                Some(LiveTicket {
                    kind: kind_of(row.try_get(0).ok()?)?,
                    ticket: row.try_get(1).ok()?,
                    owner: row.try_get(2).ok()?,
                    remaining_ms: row.try_get(3).ok()?,
                })
            })
            .collect()
    };
    // A ticket that expired (its waiter too slow to refresh it) is gone: queue anew.
    if let Some(id) = ticket {
        if !queue.iter().any(|t| t.kind == ask.kind && t.ticket == id) {
            ticket = None;
        }
    }
    match decide(ask.kind, &ask.owner, ticket, &leases, &queue) {
        Decision::Grant => {
            if matches!(ask.kind, LockKind::Read | LockKind::Write) {
                // Dead readers' rows would otherwise pile up.
                q(&sql.clean_expired)
                    .bind(khash.clone())
                    .execute(&mut *tx)
                    .await?;
            }
            q(&sql.put_lease)
                .bind(khash.clone())
                .bind(kind_code(ask.kind))
                .bind(holder_of(ask.kind, &ask.owner).to_owned())
                .bind(ask.owner.to_owned())
                .bind(fence)
                .bind(ask.ttl_ms)
                .bind(ask.description.clone())
                .execute(&mut *tx)
                .await?;
            let written: Option<i64> = q(&sql.lease_fence)
                .bind(khash.clone())
                .bind(kind_code(ask.kind))
                .bind(holder_of(ask.kind, &ask.owner).to_owned())
                .fetch_optional(&mut *tx)
                .await?
                .map(|row| row.try_get(0))
                .transpose()?;
            if written != Some(fence) {
                // The row was renewed after the leases were read: it is live after all.
                tx.rollback().await?;
                return Ok(Prepared {
                    tx: None,
                    outcome: Outcome::Blocked { wake_in_ms: None },
                    fence: None,
                    new_ticket: None,
                    ticket,
                });
            }
            if let Some(id) = ticket {
                q(&sql.dequeue)
                    .bind(khash.clone())
                    .bind(kind_code(ask.kind))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            // The grant removes the ticket in the same commit.
            Ok(Prepared {
                tx: Some(tx),
                outcome: Outcome::Granted(fence as u64),
                fence: Some(fence),
                new_ticket: None,
                ticket: None,
            })
        }
        Decision::Blocked { wake_in_ms } => {
            let outcome = Outcome::Blocked { wake_in_ms };
            match ticket {
                Some(id) => {
                    q(&sql.refresh_ticket)
                        .bind(ask.queue_ttl_ms)
                        .bind(khash.clone())
                        .bind(kind_code(ask.kind))
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    Ok(Prepared {
                        tx: Some(tx),
                        outcome,
                        fence: None,
                        new_ticket: None,
                        ticket,
                    })
                }
                None if enqueue => {
                    let id = next_ticket(&mut tx, db, khash).await?;
                    q(&sql.enqueue)
                        .bind(khash.clone())
                        .bind(kind_code(ask.kind))
                        .bind(id)
                        .bind(ask.owner.to_owned())
                        .bind(ask.queue_ttl_ms)
                        .execute(&mut *tx)
                        .await?;
                    Ok(Prepared {
                        tx: Some(tx),
                        outcome,
                        fence: None,
                        new_ticket: Some(id),
                        ticket: Some(id),
                    })
                }
                None => {
                    tx.rollback().await?;
                    Ok(Prepared {
                        tx: None,
                        outcome,
                        fence: None,
                        new_ticket: None,
                        ticket: None,
                    })
                }
            }
        }
    }
}

fn fast_grant_of(db: &Db, kind: LockKind) -> &FastGrant {
    &db.sql.fast_grant[kind_code(kind) as usize]
}

/// `grant`'s statement with the request's values bound in its order.
fn bind_args(grant: &FastGrant, ask: &Ask, fence: i64) -> Query<'static, Any, AnyArguments> {
    grant
        .args
        .iter()
        .fold(q(&grant.stmt), |query, arg| match arg {
            Arg::Key => query.bind(ask.key.hash.clone()),
            Arg::Namespace => query.bind(ask.key.namespace.clone()),
            Arg::Name => query.bind(ask.key.name.clone()),
            Arg::Kind => query.bind(kind_code(ask.kind)),
            Arg::Holder => query.bind(holder_of(ask.kind, &ask.owner).to_owned()),
            Arg::Owner => query.bind(ask.owner.to_owned()),
            Arg::Fence => query.bind(fence),
            Arg::Ttl => query.bind(ask.ttl_ms),
            Arg::Description => query.bind(ask.description.clone()),
        })
}

/// PostgreSQL: the whole uncontended acquisition in one statement (see
/// [`FastGrant`]). `Some` outcome if the statement decided: a grant, or for an
/// exclusive request also a refusal with how long the live lease has left; `None` if
/// the general path must decide.
///
/// The fence is only known from the reply, so nothing could clean up a grant whose
/// reply would be lost to a dropped future: it runs inside [`attempt_in_task`], and a
/// grant is armed in `pending` as soon as it is known.
async fn fast_grant_postgres(
    db: &Db,
    ask: &Ask,
    pending: &mut PendingWrite,
) -> std::result::Result<Option<Outcome>, sqlx::Error> {
    let grant = fast_grant_of(db, ask.kind);
    let row = db
        .hot
        .fetch_optional(&db.pool, || bind_args(grant, ask, 0))
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let fence: Option<i64> = row.try_get(0)?;
    pending.fence = fence;
    if let Some(fence) = fence {
        return Ok(Some(Outcome::Granted(fence as u64)));
    }
    // Only the exclusive statement answers a refusal (with a row of its own).
    let left_ms: Option<i64> = row.try_get(1)?;
    Ok(Some(Outcome::Blocked {
        wake_in_ms: left_ms,
    }))
}

/// Creates the key's row or bumps its fence; returns the new fence. The row stays
/// locked until the transaction ends.
pub(crate) async fn bump_key(
    conn: &mut AnyConnection,
    db: &Db,
    key: &KeyId,
) -> std::result::Result<i64, sqlx::Error> {
    let bump = q(&db.sql.key_bump)
        .bind(key.hash.clone())
        .bind(key.namespace.clone())
        .bind(key.name.clone());
    bump_counter(conn, db, bump).await
}

/// Runs a counter bump and returns the new value: from the statement's row, or on
/// MySQL from its `LAST_INSERT_ID(expr)`.
async fn bump_counter(
    conn: &mut AnyConnection,
    db: &Db,
    bump: Query<'static, Any, AnyArguments>,
) -> std::result::Result<i64, sqlx::Error> {
    if db.dialect == Dialect::MySql {
        let done = bump.execute(&mut *conn).await?;
        last_insert_id(conn, db, done.last_insert_id()).await
    } else {
        bump.fetch_one(&mut *conn).await?.try_get(0)
    }
}

/// MySQL: the counter value a `LAST_INSERT_ID(expr)` bump left, from its OK packet or,
/// if the server did not put it there, from the same connection.
async fn last_insert_id(
    conn: &mut AnyConnection,
    db: &Db,
    reported: Option<i64>,
) -> std::result::Result<i64, sqlx::Error> {
    match reported {
        Some(id) if id > 0 => Ok(id),
        _ => q(&db.sql.last_insert_id)
            .fetch_one(&mut *conn)
            .await?
            .try_get(0),
    }
}

async fn next_ticket(
    conn: &mut AnyConnection,
    db: &Db,
    khash: &str,
) -> std::result::Result<i64, sqlx::Error> {
    bump_counter(conn, db, q(&db.sql.ticket_bump).bind(khash.to_owned())).await
}

/// Deletes one live lease if key, kind, owner and fence match (any fence if `fence`
/// is `None`: an owner is one acquisition); tells waiters. Returns whether it was
/// there.
async fn delete_lease(
    db: &Db,
    khash: &str,
    kind: LockKind,
    owner: &str,
    fence: Option<i64>,
) -> Result<bool> {
    let query = || {
        let stmt = match fence {
            Some(_) => &db.sql.release,
            None => &db.sql.undo_grant,
        };
        let query = q(stmt)
            .bind(khash.to_owned())
            .bind(kind_code(kind))
            .bind(holder_of(kind, owner).to_owned())
            .bind(owner.to_owned());
        match fence {
            Some(fence) => query.bind(fence),
            None => query,
        }
    };
    let deleted = db
        .timed("releasing a lock", async {
            if db.dialect == Dialect::Postgres {
                let with_channel = || query().bind(db.sql.tables.channel.clone());
                let row = db
                    .hot
                    .fetch_optional(&db.pool, with_channel)
                    .await
                    .and_then(|row| row.ok_or(sqlx::Error::RowNotFound))
                    .map_err(|e| db.err(e))?;
                row.try_get::<i64, _>(0).map_err(|e| db.err(e))
            } else {
                let done = query().execute(&db.pool).await.map_err(|e| db.err(e))?;
                Ok(done.rows_affected() as i64)
            }
        })
        .await?;
    if deleted > 0 && db.dialect != Dialect::Postgres {
        local_wake::announce(local_wake::topic(&db.scope, khash));
    }
    Ok(deleted > 0)
}

/// Tells waiters that `khash` may be free: PostgreSQL's through a notification, this
/// process's elsewhere (other processes see it at their next poll).
async fn notify(db: &Db, khash: &str) -> Result<()> {
    if db.dialect != Dialect::Postgres {
        local_wake::announce(local_wake::topic(&db.scope, khash));
        return Ok(());
    }
    let send = q(&db.sql.notify)
        .bind(db.sql.tables.channel.clone())
        .bind(khash.to_owned())
        .execute(&db.pool);
    db.timed("notifying waiters", async {
        send.await.map(drop).map_err(|e| db.err(e))
    })
    .await
}

/// Releases one lease: [`Error::NotOwner`] if it is not the live lease of this owner
/// and fence.
pub(crate) async fn release(db: &Db, lease: &HeldLease<SqlLease>) -> Result<()> {
    let fence = i64::try_from(lease.fence).unwrap_or(-1);
    let khash = &lease.data.key.hash;
    if delete_lease(db, khash, lease.kind, lease.owner.as_str(), Some(fence)).await? {
        Ok(())
    } else {
        Err(Error::NotOwner {
            name: lease.key.name().to_string(),
        })
    }
}

/// Renews every lease in one statement per [`RENEW_CHUNK`] leases.
pub(crate) async fn renew(
    db: &Db,
    leases: &[&HeldLease<SqlLease>],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    let mut out = Vec::with_capacity(leases.len());
    for chunk in leases.chunks(RENEW_CHUNK) {
        let renewed = db
            .timed("renewing leases", renew_chunk(db, chunk, millis(ttl)))
            .await?;
        out.extend(chunk.iter().map(|l| {
            let id = (l.data.key.hash.as_str(), kind_code(l.kind), l.fence as i64);
            if renewed.iter().any(|(h, k, f)| (h.as_str(), *k, *f) == id) {
                Renewal::Renewed
            } else {
                Renewal::Lost
            }
        }));
    }
    Ok(out)
}

fn bind_leases<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    leases: &[&HeldLease<SqlLease>],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    for l in leases {
        query = query
            .bind(l.data.key.hash.clone())
            .bind(kind_code(l.kind))
            .bind(holder_of(l.kind, l.owner.as_str()).to_owned())
            .bind(l.owner.as_str().to_owned())
            .bind(i64::try_from(l.fence).unwrap_or(-1));
    }
    query
}

/// The (key hash, kind, fence) of each lease of `chunk` that was renewed.
async fn renew_chunk(
    db: &Db,
    chunk: &[&HeldLease<SqlLease>],
    ttl_ms: i64,
) -> Result<Vec<(String, i64, i64)>> {
    let stmt = db.sql.renew(chunk.len());
    let query = bind_leases(q(&stmt).bind(ttl_ms), chunk);
    let rows = if db.dialect == Dialect::MySql {
        let done = query.execute(&db.pool).await.map_err(|e| db.err(e))?;
        if done.rows_affected() as usize == chunk.len() {
            return Ok(chunk
                .iter()
                .map(|l| (l.data.key.hash.clone(), kind_code(l.kind), l.fence as i64))
                .collect());
        }
        // Some were not found: ask which are live (just renewed) to tell them apart.
        let stmt = db.sql.live_of(chunk.len());
        bind_leases(q(&stmt), chunk)
            .fetch_all(&db.pool)
            .await
            .map_err(|e| db.err(e))?
    } else {
        query.fetch_all(&db.pool).await.map_err(|e| db.err(e))?
    };
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<std::result::Result<_, sqlx::Error>>()
        .map_err(|e| db.err(e))
}

/// Whether any live lease of `family` exists on the key.
pub(crate) async fn is_locked(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    let (lo, hi) = family_range(family);
    let count = q(&db.sql.count_live)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .fetch_one(&db.pool);
    db.timed("checking a lock", async {
        let row = count.await.map_err(|e| db.err(e))?;
        Ok(row.try_get::<i64, _>(0).map_err(|e| db.err(e))? > 0)
    })
    .await
}

/// Deletes every live lease of `family` on the key; returns whether there was any.
pub(crate) async fn force_unlock(db: &Db, key: &KeyId, family: LockFamily) -> Result<bool> {
    let (lo, hi) = family_range(family);
    let query = q(&db.sql.force_unlock)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi);
    delete_and_wake(db, key, query).await
}

/// Deletes the live lease of `family` on the key whose fencing token is `fence`;
/// returns whether there was one. A newer holder has another fence, so it is never hit.
pub(crate) async fn force_unlock_holder(
    db: &Db,
    key: &KeyId,
    family: LockFamily,
    fence: u64,
) -> Result<bool> {
    let (lo, hi) = family_range(family);
    let query = q(&db.sql.force_unlock_holder)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .bind(i64::try_from(fence).unwrap_or(i64::MAX));
    delete_and_wake(db, key, query).await
}

/// Who holds `family` on the key (every live lease, oldest grant first), and for a
/// fair lock how many wait in its queue. Other kinds' waiters leave no trace here
/// (exclusive waiters and readers do not queue), so their count is unknown.
pub(crate) async fn inspect(db: &Db, key: &KeyId, family: LockFamily) -> Result<LockInfo> {
    let (lo, hi) = family_range(family);
    let leases = q(&db.sql.inspect_leases)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .fetch_all(&db.pool);
    let waiters = q(&db.sql.count_waiters)
        .bind(key.hash.clone())
        .bind(lo)
        .bind(hi)
        .fetch_one(&db.pool);
    db.timed("inspecting a lock", async {
        let rows = leases.await.map_err(|e| db.err(e))?;
        let holders = rows
            .iter()
            .map(|row| holder_info(row).map_err(|e| db.err(e)))
            .collect::<Result<Vec<_>>>()?;
        let waiters = match family {
            LockFamily::Fair => {
                let row = waiters.await.map_err(|e| db.err(e))?;
                let n: i64 = row.try_get(0).map_err(|e| db.err(e))?;
                Some(usize::try_from(n).unwrap_or(0))
            }
            _ => None,
        };
        Ok(LockInfo::new(holders, waiters))
    })
    .await
}

/// One row of `inspect_leases`. Times are the server's milliseconds since the epoch;
/// a lease written by a release without the holder columns has no description and an
/// `acquired_ms` of 0.
fn holder_info(row: &sqlx::any::AnyRow) -> std::result::Result<HolderInfo, sqlx::Error> {
    let code: i64 = row.try_get(0)?;
    let kind =
        kind_of(code).ok_or_else(|| sqlx::Error::Protocol(format!("unknown lock kind {code}")))?;
    let owner: String = row.try_get(1)?;
    let fence: i64 = row.try_get(2)?;
    let description: String = row.try_get(3)?;
    let acquired_ms: i64 = row.try_get(4)?;
    let expires_ms: i64 = row.try_get(5)?;
    let at = |ms: i64| UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    let mut info = HolderInfo::new(kind)
        .with_owner(owner)
        .with_fencing_token(u64::try_from(fence).unwrap_or(0))
        .with_expires_at(at(expires_ms));
    if !description.is_empty() {
        info = info.with_description(description);
    }
    if acquired_ms > 0 {
        info = info.with_acquired_at(at(acquired_ms));
    }
    Ok(info)
}

/// Runs a deleting statement (`force_unlock` or `force_unlock_holder`, its key and
/// family bound) and wakes the waiters; returns whether it deleted anything.
async fn delete_and_wake(
    db: &Db,
    key: &KeyId,
    query: Query<'static, Any, AnyArguments>,
) -> Result<bool> {
    db.timed("force-unlocking a lock", async {
        let n = if db.dialect == Dialect::Postgres {
            // All rows read: the count is only true once the commit is done.
            let rows = query
                .bind(db.sql.tables.channel.clone())
                .fetch_all(&db.pool)
                .await
                .map_err(|e| db.err(e))?;
            let row = rows
                .first()
                .ok_or_else(|| db.err(sqlx::Error::RowNotFound))?;
            row.try_get::<i64, _>(0).map_err(|e| db.err(e))?
        } else {
            let n = query
                .execute(&db.pool)
                .await
                .map_err(|e| db.err(e))?
                .rows_affected() as i64;
            if n > 0 {
                local_wake::announce(local_wake::topic(&db.scope, &key.hash));
            }
            n
        };
        Ok(n > 0)
    })
    .await
}
