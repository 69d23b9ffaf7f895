//! The waiters of this process, in line per lock. An announcement that a lock may be
//! free wakes one waiter of each kind only one can take (the holder of the oldest queue
//! ticket, else the first to come) and every reader: a release costs one attempt, not
//! one per waiting handle. A woken waiter that leaves before it tries hands its wake-up
//! on, so none is lost; one woken again while it looks looks once more; one that looks
//! and is blocked needs no more, as whoever blocks it announces in turn (or is seen at
//! the next poll or at its expiry).
//!
//! Only the first of a line (of each kind; every reader) needs to poll for what no
//! announcement tells (a release in another process without notifications, a holder's
//! expiry): it [`leads`](Place::leads), and when it leaves, the next is told it leads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lock_core::LockKind;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A waiter's place before any queue ticket of its own.
const NO_TICKET: i64 = i64::MAX;

/// Waiters one announcement wakes one of: of one kind, in one backend (whose settings,
/// such as how often it polls, its first waiter keeps). Readers are never grouped: an
/// announcement wakes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    kind: LockKind,
    /// Which backend of the process (its address).
    backend: usize,
}

impl Group {
    /// The waiters for a lock of `kind` in `backend`.
    pub(crate) fn of<T>(kind: LockKind, backend: &Arc<T>) -> Self {
        Group {
            kind,
            backend: Arc::as_ptr(backend) as *const () as usize,
        }
    }
}

/// Every line of one announcer (this process's announcements, or one PostgreSQL
/// listener's notifications), by topic.
#[derive(Debug, Default)]
pub(crate) struct WaitLines {
    lines: Mutex<HashMap<Arc<str>, Vec<Arc<Waiter>>>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    group: Group,
    /// Its queue ticket, which orders waiters of a queued kind as the database does.
    ticket: AtomicI64,
    /// Set when a wake-up was handed to this waiter, until the look it called for is
    /// over: one that leaves before then hands the wake-up on.
    pending: AtomicBool,
    /// Wake-ups handed to it, and how many of them its current look answers: one
    /// that came during the look calls for another.
    wakes: AtomicU64,
    answered: AtomicU64,
    notify: Notify,
    /// Told when it became the first of its group.
    lead: Notify,
}

impl Waiter {
    fn wake(&self) {
        self.pending.store(true, Ordering::Release);
        self.wakes.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_one();
    }

    fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Where it stands: the oldest queue ticket first, then the first to come.
    fn rank(&self) -> (i64, u64) {
        (self.ticket.load(Ordering::Acquire), self.id)
    }
}

/// The first waiter of `group` in `line`.
fn first_of(line: &[Arc<Waiter>], group: Group) -> Option<&Arc<Waiter>> {
    line.iter()
        .filter(|w| w.group == group)
        .min_by_key(|w| w.rank())
}

/// Wakes the first waiter of `group` in `line`: one woken already and looking then
/// looks once more, as its look may have begun before this news.
fn wake_first(line: &[Arc<Waiter>], group: Group) {
    if let Some(waiter) = first_of(line, group) {
        waiter.wake();
    }
}

/// Runs `change` on `line`, and tells the first waiter of `group` if it is a new one:
/// that it leads, or, with `look`, to look at once as well.
fn keeping_the_lead(
    line: &mut Vec<Arc<Waiter>>,
    group: Group,
    look: bool,
    change: impl FnOnce(&mut Vec<Arc<Waiter>>),
) {
    let before = first_of(line, group).map(|w| w.id);
    change(line);
    match first_of(line, group) {
        Some(first) if Some(first.id) != before => {
            first.lead.notify_one();
            if look {
                first.wake();
            }
        }
        _ => {}
    }
}

/// What ended a wait.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// An announcement, or the time: look at the lock again.
    Look,
    /// The waiter became the first of its group: it polls for the group from now on.
    Lead,
}

impl WaitLines {
    /// Puts a waiter of `group` in `topic`'s line. Join before looking at the lock, so
    /// that a release right after the look is not missed.
    pub(crate) fn join(self: &Arc<Self>, topic: Arc<str>, group: Group) -> Place {
        let waiter = Arc::new(Waiter {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            group,
            ticket: AtomicI64::new(NO_TICKET),
            pending: AtomicBool::new(false),
            wakes: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            notify: Notify::new(),
            lead: Notify::new(),
        });
        self.locked()
            .entry(topic.clone())
            .or_default()
            .push(waiter.clone());
        Place {
            lines: self.clone(),
            topic,
            waiter,
        }
    }

    /// Tells `topic`'s waiters that its lock may be free: every reader, and the first
    /// of each other group.
    pub(crate) fn announce(&self, topic: &str) {
        let lines = self.locked();
        let Some(line) = lines.get(topic) else {
            return;
        };
        let mut groups: Vec<Group> = Vec::new();
        for waiter in line {
            if waiter.group.kind == LockKind::Read {
                waiter.wake();
            } else if !groups.contains(&waiter.group) {
                groups.push(waiter.group);
                wake_first(line, waiter.group);
            }
        }
    }

    /// Wakes every waiter: announcements may have been missed (a notification
    /// connection was lost, or only just made).
    pub(crate) fn wake_all(&self) {
        for waiter in self.locked().values().flatten() {
            waiter.wake();
        }
    }

    fn locked(&self) -> MutexGuard<'_, HashMap<Arc<str>, Vec<Arc<Waiter>>>> {
        // A panic cannot leave the map half changed: each change is one call.
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A waiter's place in its line; leaving the line is dropping it.
#[derive(Debug)]
pub(crate) struct Place {
    lines: Arc<WaitLines>,
    topic: Arc<str>,
    waiter: Arc<Waiter>,
}

impl Place {
    /// Records that the waiter looked and is blocked, holding queue ticket `ticket` now
    /// if any. The wake-ups handed to it before the look are used up; one handed to it
    /// since calls for another look.
    pub(crate) fn looked(&self, ticket: Option<i64>) {
        let waiter = &self.waiter;
        waiter.pending.store(false, Ordering::Release);
        if waiter.wakes.load(Ordering::Acquire) != waiter.answered.load(Ordering::Acquire) {
            // Its notification is still stored: the next wait ends at once.
            waiter.pending.store(true, Ordering::Release);
        }
        let ticket = ticket.unwrap_or(NO_TICKET);
        if self.waiter.ticket.load(Ordering::Acquire) == ticket {
            return;
        }
        let mut lines = self.lines.locked();
        if let Some(line) = lines.get_mut(&self.topic) {
            // A waiter behind a ticket that ran out may have moved ahead, and may be
            // the one the lock is free for.
            keeping_the_lead(line, self.waiter.group, true, |_| {
                self.waiter.ticket.store(ticket, Ordering::Release);
            });
        }
    }

    /// Whether this waiter is the first of its group (every reader is), which polls
    /// for the group.
    pub(crate) fn leads(&self) -> bool {
        let group = self.waiter.group;
        let lines = self.lines.locked();
        let first = lines
            .get(&self.topic)
            .and_then(|line| first_of(line, group));
        group.kind == LockKind::Read || first.is_none_or(|w| w.id == self.waiter.id)
    }

    /// Sleeps until `until`, until this waiter is woken (or was, since its last wait),
    /// or until it becomes the first of its group.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up not used stays for the next call, or is handed on when
    /// the place is dropped.
    pub(crate) async fn until_woken(&self, until: Instant) -> Wake {
        let wake = tokio::select! {
            // A wake-up first: it is also what a new first would do next.
            biased;
            () = self.waiter.notify.notified() => Wake::Look,
            () = self.waiter.lead.notified() => Wake::Lead,
            () = tokio::time::sleep_until(until) => Wake::Look,
        };
        if wake == Wake::Look {
            // The look about to begin answers every wake-up so far.
            let wakes = self.waiter.wakes.load(Ordering::Acquire);
            self.waiter.answered.store(wakes, Ordering::Release);
        }
        wake
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut lines = self.lines.locked();
        let Some(line) = lines.get_mut(&self.topic) else {
            return;
        };
        let group = self.waiter.group;
        // Leaving a semaphore's line may leave a permit free for the next (several can
        // free at once); for the other kinds, one holder at a time, the next only leads
        // (a grant leaves without a look that moves it).
        let look = group.kind == LockKind::Permit;
        keeping_the_lead(line, group, look, |line| {
            line.retain(|w| w.id != self.waiter.id);
        });
        if self.waiter.is_pending() && group.kind != LockKind::Read {
            // Woken, but gone before its look was over: the next in line looks instead.
            wake_first(line, group);
        }
        if line.is_empty() {
            lines.remove(&self.topic);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn group(kind: LockKind) -> Group {
        Group { kind, backend: 1 }
    }

    /// How `place`'s wait ends at once, if it does.
    async fn wait_of(place: &Place) -> Option<Wake> {
        let soon = Instant::now() + Duration::from_millis(20);
        tokio::time::timeout(Duration::from_millis(10), place.until_woken(soon))
            .await
            .ok()
    }

    /// Whether `place` is woken at once; if it is, it looks (and keeps its ticket).
    async fn woken(place: &Place) -> bool {
        let woken = wait_of(place).await == Some(Wake::Look);
        if woken {
            place.looked(Some(place.waiter.ticket.load(Ordering::Acquire)));
        }
        woken
    }

    #[tokio::test(start_paused = true)]
    async fn an_announcement_wakes_the_first_of_each_group_and_every_reader() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let first = lines.join(topic.clone(), group(LockKind::Exclusive));
        let second = lines.join(topic.clone(), group(LockKind::Exclusive));
        let other_backend = Group {
            backend: 2,
            ..group(LockKind::Exclusive)
        };
        let first_elsewhere = lines.join(topic.clone(), other_backend);
        let (reader_a, reader_b) = (
            lines.join(topic.clone(), group(LockKind::Read)),
            lines.join(topic.clone(), group(LockKind::Read)),
        );
        let other_lock = lines.join("db\nother".into(), group(LockKind::Exclusive));
        lines.announce(&topic);
        assert!(woken(&first).await && woken(&first_elsewhere).await);
        assert!(!woken(&second).await);
        assert!(woken(&reader_a).await && woken(&reader_b).await);
        assert!(!woken(&other_lock).await);
        // The first looked and waits again: the next announcement is its turn again.
        lines.announce(&topic);
        assert!(woken(&first).await);
        assert!(!woken(&second).await);
    }

    #[tokio::test(start_paused = true)]
    async fn queued_waiters_are_woken_in_ticket_order() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let late = lines.join(topic.clone(), group(LockKind::Fair));
        let early = lines.join(topic.clone(), group(LockKind::Fair));
        let unqueued = lines.join(topic.clone(), group(LockKind::Fair));
        late.looked(Some(9));
        early.looked(Some(4));
        while wait_of(&early).await.is_some() {} // told it leads, and to look
        early.looked(Some(4));
        lines.announce(&topic);
        assert_eq!(wait_of(&early).await, Some(Wake::Look));
        // A second announcement while the woken one looks calls for one more look (its
        // look may have begun before it), and wakes nobody behind it.
        lines.announce(&topic);
        early.looked(Some(4));
        assert!(woken(&early).await);
        assert!(!woken(&late).await && !woken(&unqueued).await);
        assert!(!woken(&early).await, "the second look answered both");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_leaves_woken_hands_its_wake_up_on() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let leaving = lines.join(topic.clone(), group(LockKind::Exclusive));
        let next = lines.join(topic.clone(), group(LockKind::Exclusive));
        lines.announce(&topic);
        // Woken, and gone in the middle of its look.
        assert_eq!(wait_of(&leaving).await, Some(Wake::Look));
        drop(leaving);
        assert!(woken(&next).await);
        // One whose look was over leaves nothing to hand on.
        let last = lines.join(topic.clone(), group(LockKind::Exclusive));
        drop(next);
        assert_eq!(wait_of(&last).await, Some(Wake::Lead));
        assert!(!woken(&last).await);
        drop(last);
        assert!(lines.locked().is_empty(), "an empty line is forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_of_a_group_leads_and_the_next_is_told_when_it_leaves() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let first = lines.join(topic.clone(), group(LockKind::Fair));
        let second = lines.join(topic.clone(), group(LockKind::Fair));
        let reader = lines.join(topic.clone(), group(LockKind::Read));
        assert!(first.leads() && !second.leads() && reader.leads());
        // An older ticket goes ahead: it leads, and looks at once (the lock may be
        // free for it).
        first.looked(Some(8));
        second.looked(Some(7));
        assert!(second.leads() && !first.leads());
        assert_eq!(wait_of(&second).await, Some(Wake::Look));
        assert_eq!(wait_of(&second).await, Some(Wake::Lead));
        second.looked(Some(7));
        assert_eq!(wait_of(&first).await, None);
        // The first leaving (granted, say) only makes the next lead.
        drop(second);
        assert!(first.leads());
        assert_eq!(wait_of(&first).await, Some(Wake::Lead));
        assert_eq!(wait_of(&first).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_waiter_that_leaves_lets_the_next_look() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let granted = lines.join(topic.clone(), group(LockKind::Permit));
        let next = lines.join(topic.clone(), group(LockKind::Permit));
        drop(granted);
        assert!(woken(&next).await, "more permits may be free");
    }

    #[tokio::test(start_paused = true)]
    async fn wake_all_wakes_every_line() {
        let lines = Arc::new(WaitLines::default());
        let a = lines.join("db\na".into(), group(LockKind::Exclusive));
        let b = lines.join("db\na".into(), group(LockKind::Exclusive));
        let c = lines.join("db\nc".into(), group(LockKind::Permit));
        lines.wake_all();
        assert!(woken(&a).await && woken(&b).await && woken(&c).await);
    }
}
