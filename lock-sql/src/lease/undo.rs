//! What an acquire attempt leaves behind until its caller takes it over: a queue
//! ticket, a grant armed before its commit, and the undo that removes them.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockKind, Result};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::db::{q, Db};
use crate::error::{classify, Class};
use crate::key::kind_code;

use super::blind_undos::BlindSwitch;
use super::release::{delete_lease, notify};
use super::Ask;

/// A queue ticket this acquire holds; removed (by a spawned task if need be) however
/// the acquire ends.
pub(super) struct Ticket {
    pub(super) db: Arc<Db>,
    pub(super) key: String,
    pub(super) kind: LockKind,
    pub(super) id: Option<i64>,
    /// How long the ticket lives past its last refresh, by the server's clock.
    pub(super) queue_ttl: Duration,
}

impl Ticket {
    /// Removes the ticket, and waits for that. The removal runs in a task of its own,
    /// so a caller that stops polling holds nothing the client's other calls need (a
    /// pool connection, or the head of the pool's queue), and one that leaves lets it
    /// finish.
    pub(super) async fn remove(&mut self) {
        if let Some(removed) = self.spawn_removal() {
            let _ = removed.await;
        }
    }

    /// Starts the ticket's removal, retried while the server cannot be reached until
    /// the ticket expires on its own: nothing refreshes it after this acquire, and every
    /// writer or permit waiter behind it waits for it until then. Tells when done.
    fn spawn_removal(&mut self) -> Option<oneshot::Receiver<()>> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let id = self.id.take()?;
        let until = Instant::now() + self.queue_ttl + EXPIRY_MARGIN;
        let undo = Undo {
            db: self.db.clone(),
            key: self.key.clone(),
            kind: self.kind,
            owner: String::new(),
            grant: None,
            ticket: Some(id),
            blind: None,
        };
        let (done, removed) = oneshot::channel();
        self.db.cleanups.spawn_on(&rt, async move {
            undo.run(false, until).await;
            let _ = done.send(());
        });
        Some(removed)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.spawn_removal();
    }
}

/// Past the time a lease or ticket lives by the server's clock, counted here from a
/// moment after its statement ran: room for the two clocks' rates to differ.
const EXPIRY_MARGIN: Duration = Duration::from_secs(1);

/// Deletes one queue ticket and tells whoever was behind it; returns whether it was
/// there.
pub(super) async fn remove_ticket(db: &Db, key: &str, kind: LockKind, id: i64) -> Result<bool> {
    let done = q(&db.sql.lease.dequeue)
        .bind(key.to_owned())
        .bind(kind_code(kind))
        .bind(id)
        .execute(&db.pool);
    let done = db
        .timed("removing a queue ticket", async {
            done.await.map_err(|e| db.err(e))
        })
        .await?;
    let removed = done.rows_affected() > 0;
    if removed {
        // Whoever was behind this ticket may go now (or at its next poll, if this
        // fails: the ticket is gone either way).
        if let Err(err) = notify(db, key).await {
            tracing::debug!(error = %err, "telling waiters of a removed ticket failed");
        }
    }
    Ok(removed)
}

/// What an attempt wrote that its caller has not taken over yet: a granted lease, a
/// new queue ticket. Armed before the commit, so that whatever happens to the reply,
/// dropping it undoes the write (in a spawned task).
pub(super) struct PendingWrite {
    pub(super) db: Arc<Db>,
    pub(super) key: String,
    pub(super) kind: LockKind,
    pub(super) owner: String,
    pub(super) ttl_ms: i64,
    pub(super) queue_ttl_ms: i64,
    pub(super) fence: Option<i64>,
    pub(super) ticket: Option<i64>,
    /// A grant may have committed although its reply never came back, so its fence is
    /// unknown: the undo removes this owner's lease whatever its fence.
    pub(super) unknown_grant: bool,
    /// The acquire's switch, which stops an undo by owner alone (see [`BlindSwitch`]).
    pub(super) blind: Arc<BlindSwitch>,
    /// Whether the write may still land after the undo starts (a commit or statement
    /// that failed or timed out at the client, not at the server).
    pub(super) uncertain: bool,
}

impl PendingWrite {
    pub(super) fn new(db: &Arc<Db>, ask: &Ask) -> Self {
        PendingWrite {
            db: db.clone(),
            key: ask.key.hash.clone(),
            kind: ask.kind,
            owner: ask.owner.clone(),
            ttl_ms: ask.ttl_ms,
            queue_ttl_ms: ask.queue_ttl_ms,
            blind: ask.blind.clone(),
            fence: None,
            ticket: None,
            unknown_grant: false,
            uncertain: false,
        }
    }

    /// The write's outcome is unknown: it may have landed, or may land later.
    pub(super) fn outcome_unknown(&mut self) {
        self.uncertain = true;
    }

    /// The caller has taken over what was written.
    pub(super) fn disarm(&mut self) {
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
            blind: matches!(grant, Some(None)).then(|| self.blind.clone()),
            grant,
            ticket,
        };
        // A write that may still land is undone again until it could no longer
        // matter: a lease or ticket expires by the server's clock, counted from its
        // statement, which ran before now.
        let lives_ms = match (undo.grant.is_some(), undo.ticket.is_some()) {
            (true, true) => self.ttl_ms.max(self.queue_ttl_ms),
            (true, false) => self.ttl_ms,
            _ => self.queue_ttl_ms,
        };
        let until = Instant::now() + Duration::from_millis(lives_ms as u64) + EXPIRY_MARGIN;
        let uncertain = self.uncertain;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let cleanups = self.db.cleanups.clone();
            cleanups.spawn_on(&rt, undo.run(uncertain, until));
        }
    }
}

/// Removes what an attempt wrote and nobody took over.
pub(super) struct Undo {
    db: Arc<Db>,
    key: String,
    kind: LockKind,
    owner: String,
    /// The granted lease: `Some(fence)`, or `None` when its fence is unknown.
    grant: Option<Option<i64>>,
    ticket: Option<i64>,
    /// For a grant whose fence is unknown: its acquire's switch, turned when the same
    /// owner asks again.
    blind: Option<Arc<BlindSwitch>>,
}

impl Undo {
    /// Deletes the lease and the ticket. A write known to have landed is deleted once
    /// (again only on errors); one that may still land (`uncertain`) is deleted again
    /// and again until a delete finds it or `until` passes: a COMMIT the server still
    /// holds (a synchronous standby that does not answer, a stalled disk) lands after a
    /// first delete found nothing, and would then block the lock for its whole lease.
    async fn run(mut self, uncertain: bool, until: Instant) {
        let blind = self.blind.take();
        // Held across each delete of a grant of unknown fence, and from a failed one on
        // until the undo ends: that delete may still land on the server, and must not
        // land after a grant of the same owner's next acquire, which waits for it.
        let mut deleting = None;
        let mut in_doubt = false;
        // A failed delete is given one request timeout more than the undo.
        let mut hold_until = until;
        let mut pause = Duration::from_millis(100);
        loop {
            if let (Some(switch), Some(_)) = (&blind, self.grant) {
                if deleting.is_none() {
                    deleting = Some(switch.deleting.lock().await);
                }
                // Deleting by owner alone would also delete the lease of a downgrade
                // asked again (it carries the same owner): such an acquire turns this.
                if switch.is_stopped() {
                    self.grant = None;
                }
            }
            let mut again = false;
            if let Some(fence) = self.grant {
                match delete_lease(&self.db, &self.key, self.kind, &self.owner, fence).await {
                    Ok(true) => self.grant = None,
                    Ok(false) if !uncertain => self.grant = None,
                    Ok(false) => again = true,
                    Err(_) => {
                        again = true;
                        in_doubt |= fence.is_none();
                        hold_until = hold_until.max(Instant::now() + self.db.request_timeout);
                    }
                }
            }
            if let Some(id) = self.ticket {
                match remove_ticket(&self.db, &self.key, self.kind, id).await {
                    Ok(true) => self.ticket = None,
                    Ok(false) if !uncertain => self.ticket = None,
                    _ => again = true,
                }
            }
            if !in_doubt {
                deleting = None;
            }
            if !again || Instant::now() + pause > until {
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
        if deleting.is_some() {
            tokio::time::sleep_until(hold_until).await;
        }
    }
}

/// Whether a statement or COMMIT that failed with `e` may have been carried out all
/// the same, now or later: the connection failed or timed out, or the server ended
/// the session (SQLSTATE class 57: a session terminated while its COMMIT waited for
/// a synchronous standby has committed). Any other error from the server rolled the
/// transaction back.
pub(super) fn may_have_landed(e: &sqlx::Error) -> bool {
    match e {
        // MySQL's killed or interrupted queries (70100) count as unavailable.
        sqlx::Error::Database(db) => {
            db.code()
                .is_some_and(|code| code.starts_with("57") || code.starts_with("08"))
                || classify(e) == Class::Unavailable
        }
        // No connection was had: nothing was sent.
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqlConfig;

    async fn scratch_db(max_connections: u32) -> (tempfile::TempDir, Arc<Db>) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("locks.db").display()
        );
        let options = SqlConfig::from_url(&url)
            .unwrap()
            .with_max_connections(max_connections);
        let parsed = crate::url::parse(&options.driver_url().unwrap()).unwrap();
        let db = Arc::new(Db::connect(&options, parsed).await.unwrap());
        (dir, db)
    }

    /// An undo by owner alone whose delete failed (it may still land on the server)
    /// keeps the same owner's next acquire waiting until the undo ends.
    #[tokio::test]
    async fn a_delete_that_may_still_land_holds_off_the_owner_until_the_undo_ends() {
        let (_dir, db) = scratch_db(2).await;
        let limit = Duration::from_secs(30);
        let switch = db
            .blind_undos
            .arm("a-key", LockKind::Read, "o", limit)
            .await;
        let switch = switch.unwrap();
        let undo = Undo {
            db: db.clone(),
            key: "a-key".to_owned(),
            kind: LockKind::Read,
            owner: "o".to_owned(),
            grant: Some(None),
            ticket: None,
            blind: Some(switch),
        };
        // Every delete fails.
        db.pool.close().await;
        let until = Instant::now() + Duration::from_millis(1_500);
        let run = tokio::spawn(undo.run(true, until));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let again = db
            .blind_undos
            .arm("a-key", LockKind::Read, "o", limit)
            .await;
        assert!(Instant::now() >= until, "asked again before the undo ended");
        assert!(!again.expect("within the limit").is_stopped());
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("the undo ends")
            .unwrap();
    }

    /// A caller whose wait ended asks for its ticket's removal, is polled once while
    /// every pool connection is busy, and then is kept without being polled (say, in
    /// a `select!` whose other branch runs long): the client's other calls must still
    /// get the next free connection.
    #[tokio::test]
    async fn a_removal_its_caller_stops_polling_keeps_no_connection_from_the_pool() {
        let (_dir, db) = scratch_db(1).await;
        let busy = db.pool.acquire().await.unwrap();
        let mut ticket = Ticket {
            db: db.clone(),
            key: "a-key".to_owned(),
            kind: LockKind::Write,
            id: Some(1),
            queue_ttl: Duration::from_secs(5),
        };
        let mut removal = std::pin::pin!(ticket.remove());
        assert!(futures::poll!(removal.as_mut()).is_pending());
        drop(busy);
        let next = tokio::time::timeout(Duration::from_secs(5), db.pool.acquire()).await;
        assert!(
            matches!(next, Ok(Ok(_))),
            "the pool's free connection stayed with a removal nobody polled"
        );
    }
}
