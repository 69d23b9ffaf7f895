//! MariaDB's doorbells: how a release in one process wakes the waiters of another for
//! the lease strategy's locks, where MariaDB has no notifications.
//!
//! While a client holds a lease (of any kind: a reader's, a permit's, a leader's alike)
//! it also holds a doorbell: a MariaDB user lock (`GET_LOCK`) named after the
//! database, the table prefix, the key, the lease's kind and its owner, on one
//! connection of the client's own (the ringer) that holds all its doorbells. The
//! release frees the doorbell as it deletes the lease row. A waiter in another process
//! that finds the lock taken learns with the refusal the lease that blocks it (the
//! grant procedure's answer to an exclusive request; for the other kinds, of the
//! leases that block it, the one that expires last), checks that its doorbell is held,
//! and blocks in `GET_LOCK` on it on a connection of its own (a watch); the doorbell's
//! freeing ends the watch, which lets go of it at once and wakes the client's first
//! waiter of the key of each kind, and every reader, to look again.
//!
//! - A waiter kept waiting only by other waiters' queue tickets (a fair waiter behind
//!   another's ticket, a reader behind a waiting writer) has no doorbell to watch: it
//!   polls until a lease blocks it. A waiter of a semaphore of more than one permit
//!   watches one holder and polls as well: any holder's release, or a waiter ahead
//!   that leaves, may free a place.
//! - The first waiter of a key in a client (every reader) takes its own doorbell as
//!   soon as it finds the doorbell of a lease of another process held (waiters there
//!   watch), so that once granted the waiters of that process can watch at once. A
//!   lease granted otherwise takes its doorbell [`TAKE_AFTER`] the grant, if still
//!   held then: a shorter lease costs no doorbell at all.
//! - A watch that finds no doorbell held (a holder that keeps none or has not taken it
//!   yet, or one just freed) has the waiter look once more at once; the next three in
//!   a row, again within [`SECOND_WATCH_AFTER`]; after that it polls as without
//!   doorbells, and each blocked look after a poll watches again.
//! - A waiter blocked by a lease of its own process watches nothing: the release is
//!   announced in the process, and it polls as without doorbells.
//! - A watch lasts at most as long as the waiter would otherwise sleep (four poll caps,
//!   the holder's expiry, the waiter's deadline), so a lease that ends with its doorbell
//!   still held (an expiry, a forced unlock from another process) is seen by then.
//! - Costs: the ringer connection while the client holds doorbells (given back to the
//!   pool 2 s after the last), one statement on it per lease
//!   held longer than [`TAKE_AFTER`] and one per its release (batched); one watch
//!   connection per doorbell the client's blocked waiters watch, at most
//!   [`MAX_WATCHES`] (waiters of further doorbells poll).

mod ringer;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use lock_core::LockKind;
use sha2::{Digest, Sha256};
use sqlx::AnyPool;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::key::kind_code;
use ringer::{ring, Later, Ring, FREED, PENDING};
pub(crate) use watch::Watch;
use watch::{Watches, Watching};

/// How long after its grant a lease granted without a wait takes its doorbell.
const TAKE_AFTER: Duration = Duration::from_millis(5);

/// How long a waiter whose watch twice found no doorbell of the same holder sleeps at
/// most before it looks and watches again: well after the holder's [`TAKE_AFTER`].
pub(crate) const SECOND_WATCH_AFTER: Duration = Duration::from_millis(25);

/// The most watches of one client at once.
pub(crate) const MAX_WATCHES: u32 = 8;

/// One client's doorbells: the ringer that holds its own, and its watches of others'.
#[derive(Debug)]
pub(crate) struct Bells {
    ringer: UnboundedSender<Ring>,
    later: Arc<Later>,
    watches: Arc<Watches>,
    space: String,
    request_timeout: Duration,
}

/// A doorbell this client holds until dropped.
#[derive(Debug)]
pub(crate) struct BellHold {
    name: Arc<str>,
    ringer: UnboundedSender<Ring>,
    /// A doorbell to take later: where it stands ([`PENDING`], [`TAKEN`], [`FREED`]).
    later: Option<Arc<AtomicU8>>,
    here: Option<Here>,
}

impl BellHold {
    /// Frees the doorbell now, and gives back the mark of the lease as this process's,
    /// to be dropped once the lease row is gone: a waiter here that meets the row
    /// meanwhile must not watch for it.
    pub(crate) fn free(mut self) -> Option<Here> {
        self.here.take()
    }
}

impl Drop for BellHold {
    fn drop(&mut self) {
        let never_taken = self.later.as_ref().is_some_and(|state| {
            state
                .compare_exchange(PENDING, FREED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if !never_taken {
            let _ = self.ringer.send(Ring::Free(self.name.clone()));
        }
    }
}

/// The doorbell names of the leases this process's clients hold or ask for, each with
/// how many marks it has: a waiter blocked by a lease of this process needs no watch,
/// as its release is announced here.
fn held_here() -> &'static Mutex<HashMap<Arc<str>, usize>> {
    static HELD: OnceLock<Mutex<HashMap<Arc<str>, usize>>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
}

/// A lease of this process, asked for or held, by its doorbell's name: marked before
/// the grant is sent, so that a waiter here that meets the lease before its holder has
/// read the grant does not watch for it.
#[derive(Debug)]
pub(crate) struct Here {
    name: Arc<str>,
}

impl Here {
    fn mark(name: Arc<str>) -> Self {
        *held_here()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.clone())
            .or_default() += 1;
        Here { name }
    }
}

impl Drop for Here {
    fn drop(&mut self) {
        let mut held = held_here().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(marks) = held.get_mut(&self.name) {
            *marks -= 1;
            if *marks == 0 {
                held.remove(&self.name);
            }
        }
    }
}

impl Bells {
    /// The doorbells of the tables at `space` (the database and the table prefix, as
    /// the server names them, so that every client of those tables, whatever URL it
    /// came by, makes the same names): the ringer's connection from `ring_pool` (of
    /// one connection, opened at its first doorbell), the watches' from `watch_pool`.
    /// Starts the ringer, which ends once the doorbells and their holds are dropped.
    pub(crate) fn new(
        space: &str,
        ring_pool: AnyPool,
        watch_pool: AnyPool,
        request_timeout: Duration,
    ) -> Self {
        let (ringer, asked) = mpsc::unbounded_channel();
        let later = Arc::<Later>::default();
        tokio::spawn(ring(ring_pool, asked, later.clone(), request_timeout));
        Bells {
            ringer,
            later,
            watches: Arc::new(Watches {
                pool: watch_pool,
                on: Mutex::default(),
            }),
            space: space.to_owned(),
            request_timeout,
        }
    }

    /// The doorbell of `owner`'s lease of `kind` of key `khash` (a write lock's owner
    /// also holds the read lock it downgrades to): MariaDB's user locks are the
    /// server's, so the name holds the tables' place too; a digest keeps it within
    /// MariaDB's 64 characters and to characters that need no quoting.
    fn name(&self, khash: &str, kind: LockKind, owner: &str) -> Arc<str> {
        let mut digest = Sha256::new();
        digest.update(kind_code(kind).to_be_bytes());
        for part in [self.space.as_str(), khash, owner] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part.as_bytes());
        }
        crate::key::push_hex("lock_sql_bell_".to_owned(), &digest.finalize()[..20]).into()
    }

    /// Takes the doorbell of the request marked `here`, freed when the hold is
    /// dropped: at once for a waiter (`waited`), else [`TAKE_AFTER`] if still held
    /// then. The call returns at once: the ringer takes it in the background.
    pub(crate) fn take(&self, here: &Here, waited: bool) -> BellHold {
        let name = here.name.clone();
        let later = if waited {
            let _ = self.ringer.send(Ring::Take(name.clone()));
            None
        } else {
            let state = Arc::new(AtomicU8::new(PENDING));
            self.later
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back((Instant::now() + TAKE_AFTER, name.clone(), state.clone()));
            if !self.later.told.swap(true, Ordering::AcqRel) {
                let _ = self.ringer.send(Ring::Tick);
            }
            Some(state)
        };
        BellHold {
            here: Some(Here::mark(name.clone())),
            name,
            ringer: self.ringer.clone(),
            later,
        }
    }

    /// Marks `owner`'s request for a lease of `kind` of key `khash` as this process's
    /// until dropped.
    pub(crate) fn mark_here(&self, khash: &str, kind: LockKind, owner: &str) -> Here {
        Here::mark(self.name(khash, kind, owner))
    }

    /// Watches the doorbell of `blocker`'s lease of `kind` of key `khash` for at most
    /// `lasts`: its end wakes this client's waiters of `topic`. Answers once the watch
    /// knows whether the doorbell is held (a round trip), or at once if a watch of it
    /// waits already (`On`) or still checks (`Off`: poll), or if the lease is this
    /// process's (`Here`: its release is announced here).
    pub(crate) async fn watch(
        &self,
        topic: Arc<str>,
        khash: &str,
        kind: LockKind,
        blocker: &str,
        lasts: Duration,
    ) -> Watch {
        let name = self.name(khash, kind, blocker);
        if held_here()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&name)
        {
            return Watch::Here;
        }
        let watches = &self.watches;
        {
            let mut on = watches.on.lock().unwrap_or_else(PoisonError::into_inner);
            match on.get(&name) {
                // Waiting in `GET_LOCK`: its end wakes the waiters.
                Some(true) => return Watch::On,
                // Still checking: it may find none and tell no one.
                Some(false) => return Watch::Off,
                None if on.len() >= MAX_WATCHES as usize => return Watch::Off,
                None => {
                    on.insert(name.clone(), false);
                }
            }
        }
        let (checked, check) = oneshot::channel();
        let watch = Watching {
            watches: watches.clone(),
            name,
        };
        tokio::spawn(watch.run(topic, lasts, self.request_timeout, checked));
        check.await.unwrap_or(Watch::Off)
    }
}
