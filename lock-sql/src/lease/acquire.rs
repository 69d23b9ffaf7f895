//! Taking a lease: the wait loop; one attempt, whose one-call grant (PostgreSQL's
//! statement, MariaDB's procedure, SQLite's statements sent together) runs in the
//! caller's task on a server when the hot connection is ready, else in a task of its
//! own, as does the general transaction that decides on the key's rows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, LockKind, Result};

use lock_core::backend::{AcquireRequest, Grant};
use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, Row};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::bells::{Watch, SECOND_WATCH_AFTER};
use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::error::{classify, procedure_unusable, timed_out, Class};
use crate::key::{holder_of, kind_code, KeyId};
use crate::listen::Listener;
use crate::local_wake;
use crate::sql::{Arg, FastGrant};
use crate::wait::Backoff;
use crate::wait_line::{Group, Wake};
use crate::SqlLease;

use super::finished_if_left::FinishedIfLeft;
use super::transaction::prepare;
use super::undo::{may_have_landed, PendingWrite, Ticket};
use super::{millis, Ask, Blocker, Outcome, Timing};
use crate::hot::{HotError, ReadyHot};

/// How long an acquire whose wait ran out waits for its queue ticket's removal before
/// it answers.
const TICKET_REMOVAL_GRACE: Duration = Duration::from_millis(500);

/// How many watches in a row may find no doorbell before the waiter polls at its own
/// pace again: until then it looks again within [`SECOND_WATCH_AFTER`].
const SHORT_LOOKS: u32 = 4;

/// The least time an attempt of an acquire that may wait gets, however near its
/// deadline it begins.
const ATTEMPT_GRACE: Duration = Duration::from_millis(250);

/// Takes a lease, waiting until the request's deadline.
pub(crate) async fn acquire(
    db: &Arc<Db>,
    listener: Option<&Arc<Listener>>,
    timing: Timing,
    req: AcquireRequest<'_>,
) -> Result<Option<Grant<SqlLease>>> {
    let key = KeyId::of(req.key);
    // Before any call: a downgrade asked again carries the owner of an earlier one,
    // whose grant may still be being undone, or its call still be under way.
    let blind = db
        .blind_undos
        .arm(&key.hash, req.kind, req.owner.as_str(), db.request_timeout)
        .await
        .ok_or_else(|| {
            timed_out(
                db.name(),
                "the clean-up of this owner's earlier try",
                db.request_timeout,
            )
        })?;
    let ask = Arc::new(Ask {
        key,
        kind: req.kind,
        owner: req.owner.as_str().to_owned(),
        ttl_ms: millis(req.ttl),
        queue_ttl_ms: millis(timing.queue_ttl),
        description: req.holder.to_owned(),
        permits: req.permits,
        blind,
    });
    let key = &ask.key;
    let waits = !req.deadline.has_passed();
    let queued_kind = matches!(
        req.kind,
        LockKind::Fair | LockKind::Write | LockKind::Permit | LockKind::Leader
    );
    let mut ticket = Ticket {
        db: db.clone(),
        key: key.hash.clone(),
        kind: req.kind,
        id: None,
        queue_ttl: timing.queue_ttl,
    };
    let mut backoff = Backoff::new(timing.poll_min, timing.poll_max);
    // In line before the first look, so a release right after a look is not missed:
    // woken by PostgreSQL's notifications once listening, else by this process's own
    // announcements.
    let group = Group::of(req.kind, db);
    let topic = local_wake::topic(&db.scope, &key.hash);
    let place = match listener {
        Some(listener) => listener.lines().join(key.hash.as_str().into(), group),
        None => local_wake::lines().join(topic.clone(), group),
    };
    // MariaDB's leases: this request's doorbell, taken once it leads the waiters of
    // its client and is blocked by another process's lease, so that the waiters of
    // other processes can watch it once it is granted.
    let bells = db.bells.as_ref();
    let here = bells.map(|bells| bells.mark_here(&key.hash, req.kind, &ask.owner));
    let mut own_bell = None;
    // How many watches since the last one that found a doorbell held (or a lease of
    // this process) found none.
    let mut not_held = 0_u32;
    // A blocked waiter's claim on PostgreSQL's listening, from its first blocked look.
    let mut hearing = None;
    loop {
        let enqueue = waits && queued_kind;
        // The listening on as the look begins.
        let live_at_look = listener.and_then(|listener| listener.live());
        // The lease's expiry is set by the database during this attempt.
        let attempt_sent = Instant::now();
        // While it may wait, an attempt is cut short at the deadline (what finishes
        // it undoes whatever it still commits), so a slow server cannot stretch the
        // wait limit; a look begun at or near the deadline still gets a moment.
        let cut_at = waits
            .then(|| req.deadline.instant())
            .flatten()
            .map(|at| at.max(Instant::now() + ATTEMPT_GRACE));
        let outcome = attempt(db, &ask, &mut ticket.id, enqueue, cut_at).await?;
        let (wake_in_ms, blocker) = match outcome {
            Outcome::Granted(fence) => {
                // The grant removed the ticket in its transaction.
                ticket.id = None;
                let bell = own_bell.take().or_else(|| {
                    let (bells, here) = bells.zip(here.as_ref())?;
                    Some(bells.take(here, false))
                });
                return Ok(Some(Grant {
                    fence,
                    started_at: attempt_sent,
                    data: SqlLease::lease(key.clone(), bell),
                }));
            }
            Outcome::Blocked {
                wake_in_ms,
                blocker,
            } => (wake_in_ms, blocker),
            Outcome::OtherCount(count) => {
                let _ = tokio::time::timeout(TICKET_REMOVAL_GRACE, ticket.remove()).await;
                return Err(Error::other_permit_count(req.key, count, req.permits));
            }
        };
        if req.deadline.has_passed() {
            // Briefly: a slow server must not stretch the wait limit; a removal not
            // done by then goes on in its own task. A wake-up this look was for is
            // handed on as the place is left.
            let _ = tokio::time::timeout(TICKET_REMOVAL_GRACE, ticket.remove()).await;
            return Ok(None);
        }
        // Whether every release from the look on is heard.
        let heard = match listener {
            Some(listener) => {
                match &hearing {
                    None => hearing = Some(listener.hear()),
                    Some(_) => listener.start_if_needed(),
                }
                match listener.live() {
                    // On from before the look, and kept on by this waiter's claim.
                    Some(live) if live_at_look == Some(live) => true,
                    // On since the look began: a release before went unheard.
                    Some(_) => continue,
                    // Starting (everyone is woken once it is on), or failing: poll.
                    None => false,
                }
            }
            None => false,
        };
        // MariaDB: the blocker's doorbell, if it keeps one, rings at its release.
        let rung = match (bells, blocker.as_ref()) {
            (Some(bells), Some(blocker)) => {
                // No longer than the waiter would sleep without it.
                let mut lasts = timing.poll_max * 4;
                if let Some(ms) = wake_in_ms {
                    lasts = lasts.min(Duration::from_millis(ms.max(0) as u64 + 1));
                }
                if let Some(at) = req.deadline.instant() {
                    lasts = lasts.min(at.saturating_duration_since(Instant::now()));
                }
                // Only the first waiter of the client of each kind (every reader)
                // watches (the rest are woken in turn), and its check does not
                // outlast its wait.
                let watch = if place.leads() {
                    let check = bells.watch(
                        topic.clone(),
                        &key.hash,
                        blocker.kind,
                        &blocker.owner,
                        lasts,
                    );
                    tokio::time::timeout(lasts, check)
                        .await
                        .unwrap_or(Watch::Off)
                } else {
                    Watch::Off
                };
                if let (Watch::On, None, Some(here)) = (watch, &own_bell, &here) {
                    // Another process holds it and rings: once granted, this request
                    // rings at once for the waiters there.
                    own_bell = Some(bells.take(here, true));
                }
                match watch {
                    Watch::On | Watch::Here => not_held = 0,
                    Watch::NotHeld => not_held += 1,
                    Watch::Off => {}
                }
                match watch {
                    // Unless something else may let it in first (a semaphore of
                    // more than one permit): then poll too.
                    Watch::On => !blocker.one_of_several,
                    // Announced here; polled for as before, in case it is not.
                    Watch::Here => false,
                    // Freed since the look, or not taken yet: look once more at once;
                    // then, a few times, once its holder has surely taken it, if it
                    // keeps one; then poll (holders that keep none, or a stream of
                    // leases shorter than 5 ms).
                    Watch::NotHeld if not_held == 1 => continue,
                    Watch::NotHeld | Watch::Off => false,
                }
            }
            _ => false,
        };
        place.looked(ticket.id);
        let poll = if heard || rung {
            // Notified (or rung) on release; the timeout only covers a lost one.
            timing.poll_max * 4
        } else if (2..=SHORT_LOOKS).contains(&not_held) {
            // Its holder, or the next, may take its doorbell soon.
            backoff.next_pause().min(SECOND_WATCH_AFTER)
        } else {
            // Only releases in this process are announced (or, while PostgreSQL's
            // listening is off, none): keep polling for the rest.
            backoff.next_pause()
        };
        let looked = Instant::now();
        // Never sleep past the blocker's expiry (by the server's clock).
        let expires_at = wake_in_ms.map(|ms| looked + Duration::from_millis(ms.max(0) as u64 + 1));
        // Polls are counted from the look, or from when the waiter came to lead.
        let mut since = looked;
        loop {
            // The first in line polls for this process's waiters of the lock; the rest
            // are woken in turn, and look once a queue ttl in case a wake-up went astray.
            let mut until = if place.leads() {
                let polled = since + poll;
                expires_at.map_or(polled, |at| polled.min(at))
            } else {
                since + timing.queue_ttl.mul_f64(rand::random_range(0.5..=1.0))
            };
            if ticket.id.is_some() {
                // Keep the ticket alive.
                until = until.min(looked + timing.queue_ttl / 3);
            }
            match place.until_woken(req.deadline.min(until)).await {
                Wake::Look => break,
                Wake::Lead => since = Instant::now(),
            }
        }
    }
}

/// One try, retried on transient conflicts. Its answer is awaited for the request
/// timeout, and no later than `cut_at`: an attempt cut short there counts as blocked.
pub(super) async fn attempt(
    db: &Arc<Db>,
    ask: &Arc<Ask>,
    ticket: &mut Option<i64>,
    enqueue: bool,
    cut_at: Option<Instant>,
) -> Result<Outcome> {
    let mut tries = 0;
    loop {
        let timeout_at = Instant::now() + db.request_timeout;
        let until = cut_at.map_or(timeout_at, |cut| cut.min(timeout_at));
        if tries > 0 && until <= Instant::now() {
            // A retry past the cut would be sent and at once undone.
            return Ok(Outcome::Blocked {
                wake_in_ms: None,
                blocker: None,
            });
        }
        let (outcome, next, mut pending) =
            match tokio::time::timeout_at(until, attempt_once(db, ask, *ticket, enqueue)).await {
                Ok(answer) => answer?,
                Err(_) if until < timeout_at => {
                    return Ok(Outcome::Blocked {
                        wake_in_ms: None,
                        blocker: None,
                    })
                }
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

pub(super) type AttemptAnswer = (
    std::result::Result<Outcome, sqlx::Error>,
    Option<i64>,
    PendingWrite,
);

/// One attempt. A request without a ticket first tries the one-call grant: on a
/// server, in the caller's task when the hot connection is ready (see
/// [`one_call_in_caller`]); else in the attempt's task.
async fn attempt_once(
    db: &Arc<Db>,
    ask: &Arc<Ask>,
    ticket: Option<i64>,
    enqueue: bool,
) -> Result<AttemptAnswer> {
    let one_call = ticket.is_none() && one_call_grant(db, ask.kind).is_some();
    // Not SQLite's: a call that fails between its `BEGIN IMMEDIATE` and `COMMIT`
    // holds the file's write lock, for every process, until its connection is
    // closed, which a caller that keeps its acquire without polling it would delay.
    let in_caller = one_call && db.dialect != Dialect::Sqlite;
    let hot = in_caller.then(|| db.hot.take_ready()).flatten();
    let tried = hot.is_some();
    if let Some(hot) = hot {
        let call = one_call_in_caller(db.clone(), ask.clone(), hot);
        if let Some(answer) = FinishedIfLeft::new(db, call).await {
            return Ok(answer);
        }
    }
    attempt_in_task(db, ask, ticket, enqueue, one_call && !tried).await
}

/// The one-call grant on the hot connection, in the caller's task: it waits for
/// nothing but the server (no pool, no ping), and a caller that leaves after its first
/// poll leaves the rest to a task of its own ([`FinishedIfLeft`]), which drops its
/// answer, undoing a grant, only once the call ended. A caller that keeps it without
/// polling keeps the hot connection: the client's other calls use the pool meanwhile.
/// `None` if the transaction must decide.
async fn one_call_in_caller(db: Arc<Db>, ask: Arc<Ask>, hot: ReadyHot) -> Option<AttemptAnswer> {
    let grant = one_call_grant(&db, ask.kind)?;
    let mut pending = PendingWrite::new(&db, &ask);
    let answer = decide_one_call(&db, grant, &ask, Some(hot), &mut pending).await?;
    Some((answer, None, pending))
}

/// Runs one attempt in a task of its own, which always sees how its commit ended: it
/// hands back the outcome, the ticket, and what it wrote armed for undoing. A caller
/// that went away before the commit was sent costs nothing (the transaction is rolled
/// back); one that went away later leaves the answer untaken, and dropping it undoes
/// the grant or removes the new ticket, after the commit, so a commit can never land
/// after its clean-up. With `one_call`, it first tries the one-call grant.
pub(super) async fn attempt_in_task(
    db: &Arc<Db>,
    ask: &Arc<Ask>,
    ticket: Option<i64>,
    enqueue: bool,
    one_call: bool,
) -> Result<AttemptAnswer> {
    let (mut reply, answer) = oneshot::channel();
    let (task_db, task_ask) = (db.clone(), ask.clone());
    // Counted as a clean-up: a caller that leaves mid-attempt leaves this task to undo
    // what the attempt commits.
    db.cleanups
        .spawn_on(&tokio::runtime::Handle::current(), async move {
            if let Some(answer) =
                run_attempt(&task_db, &task_ask, ticket, enqueue, one_call, &mut reply).await
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
pub(super) async fn run_attempt(
    db: &Arc<Db>,
    ask: &Ask,
    ticket: Option<i64>,
    enqueue: bool,
    one_call: bool,
    reply: &mut oneshot::Sender<AttemptAnswer>,
) -> Option<AttemptAnswer> {
    let mut pending = PendingWrite::new(db, ask);
    if let Some(grant) = one_call.then(|| one_call_grant(db, ask.kind)).flatten() {
        // The statement commits by itself: once sent, wait for its answer.
        if reply.is_closed() {
            return None;
        }
        if let Some(answer) = decide_one_call(db, grant, ask, None, &mut pending).await {
            return Some((answer, ticket, pending));
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
            .unwrap_or_else(|_| Err(did_not_answer("COMMIT")));
        if let Err(e) = committed {
            if may_have_landed(&e) {
                pending.outcome_unknown();
            }
            return Some((Err(e), ticket, pending));
        }
    }
    Some((Ok(prepared.outcome), prepared.ticket, pending))
}

/// What the one-call grant answers the caller: `None` if the general transaction must
/// decide (a refusal it must learn more of, or a procedure that can no longer be
/// called). A grant, or one that may have landed, is armed in `pending`.
async fn decide_one_call(
    db: &Db,
    grant: &FastGrant,
    ask: &Ask,
    hot: Option<ReadyHot>,
    pending: &mut PendingWrite,
) -> Option<std::result::Result<Outcome, sqlx::Error>> {
    match fast_grant_one_call(db, grant, ask, hot, pending).await {
        Ok(Some(outcome)) => Some(Ok(outcome)),
        Ok(None) => None, // Blocked: the transaction learns how long, and queues.
        Err(HotError { error, .. }) if procedure_unusable(&error) => {
            // Dropped or forbidden since connect: it did not run. The transaction
            // grants, now and from now on.
            tracing::warn!(
                error = %error,
                "{}: the lease grant procedure cannot be called; acquires take the transaction",
                db.scope
            );
            db.grant_procedure.store(false, Ordering::Relaxed);
            None
        }
        Err(HotError { error, sent }) => {
            if sent && may_have_landed(&error) {
                // Granted perhaps, with a fence we never learnt.
                pending.unknown_grant = true;
                pending.outcome_unknown();
            }
            Some(Err(error))
        }
    }
}

/// The one-statement grant of `kind`, if it has one (a permit's rule counts rows, which
/// no one-row upsert can).
pub(super) fn fast_grant_of(db: &Db, kind: LockKind) -> Option<&FastGrant> {
    usize::try_from(kind_code(kind))
        .ok()
        .and_then(|at| db.sql.lease.fast_grant.get(at))
}

/// What grants `kind` in one call that commits by itself: PostgreSQL's
/// one-statement grant, MariaDB's grant procedure while it can be called, SQLite's
/// statements sent together.
fn one_call_grant(db: &Db, kind: LockKind) -> Option<&FastGrant> {
    match db.dialect {
        Dialect::Postgres => fast_grant_of(db, kind),
        Dialect::MySql if db.grant_procedure.load(Ordering::Relaxed) => {
            let procedure = db.sql.grant_procedure.as_ref()?;
            fast_grant_of(db, kind).map(|_| &procedure.call)
        }
        Dialect::MySql => None,
        Dialect::Sqlite => usize::try_from(kind_code(kind))
            .ok()
            .and_then(|at| db.sql.lease.sqlite_one_call.get(at))
            .and_then(Option::as_ref),
    }
}

/// `grant`'s statement with the request's values bound in its order.
pub(super) fn bind_args(
    grant: &FastGrant,
    ask: &Ask,
    fence: i64,
) -> Query<'static, Any, AnyArguments> {
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

/// The whole uncontended acquisition in one call (`grant`: see [`FastGrant`] and
/// [`GrantProcedure`](crate::sql::GrantProcedure)). `Some` outcome if the call
/// decided: a grant, or for an exclusive request also a refusal with how long the
/// live lease has left; `None` if the general path must decide.
///
/// The fence is only known from the reply, so nothing could clean up a grant whose
/// reply would be lost to a dropped future: it runs in a task of its own
/// ([`attempt_in_task`]), or in a [`FinishedIfLeft`], and a grant is armed in
/// `pending` as soon as it is known. It runs on `hot` if given, else on the hot
/// connection if free, else on a pooled one.
pub(super) async fn fast_grant_one_call(
    db: &Db,
    grant: &FastGrant,
    ask: &Ask,
    hot: Option<ReadyHot>,
    pending: &mut PendingWrite,
) -> std::result::Result<Option<Outcome>, HotError> {
    let make = || bind_args(grant, ask, 0);
    let statement = async {
        match hot {
            Some(hot) => hot.fetch_optional(make()).await,
            None => {
                db.hot
                    .fetch_optional(&db.pool, db.request_timeout, make)
                    .await
            }
        }
    };
    // Bounded like a COMMIT (the call commits), so a server that never answers
    // cannot keep the call's task, and the client's shutdown, for ever.
    let row = tokio::time::timeout(db.request_timeout * 3, statement)
        .await
        .unwrap_or_else(|_| {
            Err(HotError {
                error: did_not_answer("the grant statement"),
                sent: true,
            })
        })?;
    let Some(row) = row else {
        return Ok(None);
    };
    let decoded = |error| HotError { error, sent: true };
    let fence: Option<i64> = row.try_get(0).map_err(decoded)?;
    pending.fence = fence;
    if let Some(fence) = fence {
        return Ok(Some(Outcome::Granted(fence as u64)));
    }
    let left_ms: Option<i64> = row.try_get(1).map_err(decoded)?;
    Ok(match db.dialect {
        // Only the exclusive statement answers a refusal (with a row of its own).
        Dialect::Postgres => Some(Outcome::Blocked {
            wake_in_ms: left_ms,
            blocker: None,
        }),
        // The procedure answers every refusal: an exclusive request blocked by
        // another owner's live lease has what it needs to wait; the rest (its own
        // row, a kind that queues) go on to the general path.
        _ => match left_ms.filter(|_| ask.kind == LockKind::Exclusive) {
            Some(ms) => Some(Outcome::Blocked {
                wake_in_ms: Some(ms),
                // The procedure's third column (SQLite's statements have none).
                blocker: match db.dialect {
                    Dialect::MySql => {
                        row.try_get::<Option<String>, _>(2)
                            .map_err(decoded)?
                            .map(|owner| Blocker {
                                kind: LockKind::Exclusive,
                                owner,
                                one_of_several: false,
                            })
                    }
                    _ => None,
                },
            }),
            None => None,
        },
    })
}

/// The error of a statement or COMMIT that got no answer in time: it may still land.
pub(super) fn did_not_answer(what: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} did not answer"),
    ))
}
