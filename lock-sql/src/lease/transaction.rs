//! The general path of an acquire attempt: one transaction that locks the key row by
//! bumping its fence, reads the key's live leases and queue, applies the grant rules
//! and writes the grant or the ticket, up to (not including) its commit.

use lock_core::LockKind;

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Row, Transaction};

use crate::db::{q, Db};
use crate::decide::{blocking_lease, decide, Decision, LiveLease, LiveTicket};
use crate::dialect::Dialect;
use crate::key::{holder_of, kind_code, kind_of, KeyId};

use super::acquire::{bind_args, fast_grant_of};
use super::{Ask, Blocker, Outcome};

/// What one attempt's transaction decided, not yet committed.
pub(super) struct Prepared {
    /// The transaction to commit; `None` when it was rolled back (nothing written).
    pub(super) tx: Option<Transaction<'static, Any>>,
    pub(super) outcome: Outcome,
    /// The lease the commit grants.
    pub(super) fence: Option<i64>,
    /// The queue ticket the commit creates.
    pub(super) new_ticket: Option<i64>,
    /// The caller's ticket once committed.
    pub(super) ticket: Option<i64>,
}

impl Prepared {
    /// A grant of `fence`, which also removes the caller's ticket.
    fn granted(tx: Transaction<'static, Any>, fence: i64) -> Self {
        Prepared {
            tx: Some(tx),
            outcome: Outcome::Granted(fence as u64),
            fence: Some(fence),
            new_ticket: None,
            ticket: None,
        }
    }
}

/// Runs one attempt's transaction up to its commit: reads the key's leases and queue,
/// decides, and writes the grant, the new ticket or the ticket's refresh.
pub(super) async fn prepare(
    db: &Db,
    ask: &Ask,
    mut ticket: Option<i64>,
    enqueue: bool,
) -> std::result::Result<Prepared, sqlx::Error> {
    let mut tx = db.begin().await?;
    let fence = bump_key(&mut tx, db, &ask.key).await?;
    if db.dialect != Dialect::Postgres
        && ticket.is_none()
        && upsert_granted(&mut tx, db, ask, fence).await?
    {
        return Ok(Prepared::granted(tx, fence));
    }
    let (leases, queue) = live_rows(&mut tx, db, ask).await?;
    // A ticket that expired (its waiter too slow to refresh it) is gone: queue anew.
    if let Some(id) = ticket {
        if !queue.iter().any(|t| t.kind == ask.kind && t.ticket == id) {
            ticket = None;
        }
    }
    match decide(ask.kind, &ask.owner, ticket, &leases, &queue, ask.permits) {
        Decision::Grant => grant(tx, db, ask, fence, ticket).await,
        Decision::OtherCount(count) => {
            tx.rollback().await?;
            Ok(Prepared {
                tx: None,
                outcome: Outcome::OtherCount(count),
                fence: None,
                new_ticket: None,
                ticket,
            })
        }
        Decision::Blocked { wake_in_ms } => {
            // Only MariaDB's doorbells need it.
            let blocker = db
                .bells
                .as_ref()
                .and_then(|_| blocking_lease(ask.kind, &ask.owner, &leases))
                .map(|blocking| Blocker {
                    kind: blocking.lease.kind,
                    owner: blocking.lease.owner.clone(),
                    one_of_several: blocking.one_of_several,
                });
            wait(
                tx,
                db,
                ask,
                ticket,
                enqueue,
                Outcome::Blocked {
                    wake_in_ms,
                    blocker,
                },
            )
            .await
        }
    }
}

/// MySQL and SQLite: the conditional upsert inside the transaction, with the key row
/// locked, so it sees the key's current rows. Whether it granted (then the reads of
/// the general path are not needed).
async fn upsert_granted(
    tx: &mut Transaction<'static, Any>,
    db: &Db,
    ask: &Ask,
    fence: i64,
) -> std::result::Result<bool, sqlx::Error> {
    if matches!(ask.kind, LockKind::Read | LockKind::Write) {
        q(&db.sql.lease.clean_expired)
            .bind(ask.key.hash.clone())
            .execute(&mut **tx)
            .await?;
    }
    let Some(grant) = fast_grant_of(db, ask.kind) else {
        return Ok(false);
    };
    let row = bind_args(grant, ask, fence)
        .fetch_optional(&mut **tx)
        .await?;
    // MySQL returns the row it kept, ours or not: ours has the fence just bumped.
    Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()? == Some(fence))
}

/// The key's live leases and, for the kinds that queue, its live tickets.
async fn live_rows(
    tx: &mut Transaction<'static, Any>,
    db: &Db,
    ask: &Ask,
) -> std::result::Result<(Vec<LiveLease>, Vec<LiveTicket>), sqlx::Error> {
    let khash = &ask.key.hash;
    let leases = q(&db.sql.lease.live_leases)
        .bind(khash.clone())
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .filter_map(|row| {
            Some(LiveLease {
                kind: kind_of(row.try_get(0).ok()?)?,
                owner: row.try_get(1).ok()?,
                remaining_ms: row.try_get(2).ok()?,
                permits: row.try_get(3).ok()?,
            })
        })
        .collect();
    if ask.kind == LockKind::Exclusive {
        return Ok((leases, Vec::new()));
    }
    let queue = q(&db.sql.lease.live_queue)
        .bind(khash.clone())
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .filter_map(|row| {
            Some(LiveTicket {
                kind: kind_of(row.try_get(0).ok()?)?,
                ticket: row.try_get(1).ok()?,
                owner: row.try_get(2).ok()?,
                remaining_ms: row.try_get(3).ok()?,
                permits: row.try_get(4).ok()?,
            })
        })
        .collect();
    Ok((leases, queue))
}

/// Writes the grant the rules allowed, and removes the caller's ticket in the same
/// commit.
async fn grant(
    mut tx: Transaction<'static, Any>,
    db: &Db,
    ask: &Ask,
    fence: i64,
    ticket: Option<i64>,
) -> std::result::Result<Prepared, sqlx::Error> {
    let (sql, khash) = (&db.sql, &ask.key.hash);
    if matches!(
        ask.kind,
        LockKind::Read | LockKind::Write | LockKind::Permit
    ) {
        // Dead readers' and permit holders' rows would otherwise pile up.
        q(&sql.lease.clean_expired)
            .bind(khash.clone())
            .execute(&mut *tx)
            .await?;
    }
    let holder = holder_of(ask.kind, &ask.owner).to_owned();
    q(&sql.lease.put_lease)
        .bind(khash.clone())
        .bind(kind_code(ask.kind))
        .bind(holder.clone())
        .bind(ask.owner.to_owned())
        .bind(fence)
        .bind(ask.ttl_ms)
        .bind(ask.description.clone())
        .bind(permits_column(ask))
        .execute(&mut *tx)
        .await?;
    let written: Option<i64> = q(&sql.lease.lease_fence)
        .bind(khash.clone())
        .bind(kind_code(ask.kind))
        .bind(holder)
        .fetch_optional(&mut *tx)
        .await?
        .map(|row| row.try_get(0))
        .transpose()?;
    if written != Some(fence) {
        // The row was renewed after the leases were read: it is live after all.
        tx.rollback().await?;
        return Ok(Prepared {
            tx: None,
            outcome: Outcome::Blocked {
                wake_in_ms: None,
                blocker: None,
            },
            fence: None,
            new_ticket: None,
            ticket,
        });
    }
    if let Some(id) = ticket {
        q(&sql.lease.dequeue)
            .bind(khash.clone())
            .bind(kind_code(ask.kind))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    Ok(Prepared::granted(tx, fence))
}

/// A blocked request: refreshes its ticket, takes one if it queues, or writes nothing.
async fn wait(
    mut tx: Transaction<'static, Any>,
    db: &Db,
    ask: &Ask,
    ticket: Option<i64>,
    enqueue: bool,
    outcome: Outcome,
) -> std::result::Result<Prepared, sqlx::Error> {
    let (sql, khash) = (&db.sql, &ask.key.hash);
    let (new_ticket, ticket) = match ticket {
        Some(id) => {
            q(&sql.lease.refresh_ticket)
                .bind(ask.queue_ttl_ms)
                .bind(khash.clone())
                .bind(kind_code(ask.kind))
                .bind(id)
                .execute(&mut *tx)
                .await?;
            (None, Some(id))
        }
        None if enqueue => {
            let id = next_ticket(&mut tx, db, khash).await?;
            q(&sql.lease.enqueue)
                .bind(khash.clone())
                .bind(kind_code(ask.kind))
                .bind(id)
                .bind(ask.owner.to_owned())
                .bind(ask.queue_ttl_ms)
                .bind(permits_column(ask))
                .execute(&mut *tx)
                .await?;
            (Some(id), Some(id))
        }
        None => {
            tx.rollback().await?;
            return Ok(Prepared {
                tx: None,
                outcome,
                fence: None,
                new_ticket: None,
                ticket: None,
            });
        }
    };
    Ok(Prepared {
        tx: Some(tx),
        outcome,
        fence: None,
        new_ticket,
        ticket,
    })
}

/// The `permits` column of a request's rows: its semaphore's count, 0 for a lock.
fn permits_column(ask: &Ask) -> i64 {
    match ask.kind {
        LockKind::Permit => i64::from(ask.permits),
        _ => 0,
    }
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
pub(super) async fn bump_counter(
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
pub(crate) async fn last_insert_id(
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

pub(super) async fn next_ticket(
    conn: &mut AnyConnection,
    db: &Db,
    khash: &str,
) -> std::result::Result<i64, sqlx::Error> {
    bump_counter(
        conn,
        db,
        q(&db.sql.lease.ticket_bump).bind(khash.to_owned()),
    )
    .await
}
