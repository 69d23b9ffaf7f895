//! The waiters of this process, in line per lock. An announcement that a lock may be
//! free wakes one waiter of each kind only one can take (the holder of the oldest queue
//! ticket, else the first to come) and every reader: a release costs one attempt, not
//! one per waiting handle. A woken waiter that leaves before it tries hands its wake-up
//! on, so none is lost; one that tries and is blocked again needs no more, as whoever
//! blocks it announces in turn (or is seen at the next poll or at its expiry).
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

/// The kinds of which an announcement wakes one waiter.
const ONE_AT_A_TIME: [LockKind; 5] = [
    LockKind::Exclusive,
    LockKind::Fair,
    LockKind::Write,
    LockKind::Permit,
    LockKind::Leader,
];

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
    kind: LockKind,
    /// Its queue ticket, which orders waiters of a queued kind as the database does.
    ticket: AtomicI64,
    /// Set when a wake-up was handed to this waiter and not yet taken.
    pending: AtomicBool,
    notify: Notify,
    /// Told when it became the first of its line.
    lead: Notify,
}

impl Waiter {
    fn wake(&self) {
        self.pending.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

/// Where a waiter stands in its line: the oldest queue ticket first, then the first
/// to come.
fn rank(waiter: &Waiter) -> (i64, u64) {
    (waiter.ticket.load(Ordering::Acquire), waiter.id)
}

/// The first waiter of `kind` in `line` (every reader is first).
fn first_of(line: &[Arc<Waiter>], kind: LockKind) -> Option<&Arc<Waiter>> {
    line.iter()
        .filter(|w| w.kind == kind)
        .min_by_key(|w| rank(w))
}

/// Wakes the first waiter of `kind` in `line` not woken already (they try anyway).
fn wake_first(line: &[Arc<Waiter>], kind: LockKind) {
    let first = line
        .iter()
        .filter(|w| w.kind == kind && !w.is_pending())
        .min_by_key(|w| rank(w));
    if let Some(waiter) = first {
        waiter.wake();
    }
}

/// Runs `change` on `line`, and tells the first waiter of `kind` if it is a new one.
fn keeping_the_lead(
    line: &mut Vec<Arc<Waiter>>,
    kind: LockKind,
    change: impl FnOnce(&mut Vec<Arc<Waiter>>),
) {
    let before = first_of(line, kind).map(|w| w.id);
    change(line);
    match first_of(line, kind) {
        Some(first) if Some(first.id) != before => first.lead.notify_one(),
        _ => {}
    }
}

/// What ended a wait.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// An announcement, or the time: look at the lock again.
    Look,
    /// The waiter became the first of its line: it polls for the line from now on.
    Lead,
}

impl WaitLines {
    /// Puts a waiter for a lock of `kind` in `topic`'s line. Join before looking at
    /// the lock, so that a release right after the look is not missed.
    pub(crate) fn join(self: &Arc<Self>, topic: Arc<str>, kind: LockKind) -> Place {
        let waiter = Arc::new(Waiter {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            kind,
            ticket: AtomicI64::new(NO_TICKET),
            pending: AtomicBool::new(false),
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

    /// Tells `topic`'s waiters that its lock may be free.
    pub(crate) fn announce(&self, topic: &str) {
        let lines = self.locked();
        let Some(line) = lines.get(topic) else {
            return;
        };
        for waiter in line.iter().filter(|w| w.kind == LockKind::Read) {
            waiter.wake();
        }
        for kind in ONE_AT_A_TIME {
            wake_first(line, kind);
        }
    }

    /// Wakes every waiter: announcements may have been missed.
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
    /// Records the waiter's queue ticket, if it holds one now.
    pub(crate) fn holds_ticket(&self, ticket: Option<i64>) {
        let ticket = ticket.unwrap_or(NO_TICKET);
        if self.waiter.ticket.load(Ordering::Acquire) == ticket {
            return;
        }
        let mut lines = self.lines.locked();
        if let Some(line) = lines.get_mut(&self.topic) {
            keeping_the_lead(line, self.waiter.kind, |_| {
                self.waiter.ticket.store(ticket, Ordering::Release);
            });
        }
    }

    /// Whether this waiter is the first of its line, which polls for the line.
    pub(crate) fn leads(&self) -> bool {
        let lines = self.lines.locked();
        let first = lines
            .get(&self.topic)
            .and_then(|line| first_of(line, self.waiter.kind));
        self.waiter.kind == LockKind::Read || first.is_none_or(|w| w.id == self.waiter.id)
    }

    /// Sleeps until `until`, until this waiter is woken (or was, since its last wait),
    /// or until it becomes the first of its line.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up not taken stays for the next call, or is handed on when
    /// the place is dropped.
    pub(crate) async fn until_woken(&self, until: Instant) -> Wake {
        tokio::select! {
            // A wake-up first: it is also what a new first would do next.
            biased;
            () = self.waiter.notify.notified() => {
                self.waiter.pending.store(false, Ordering::Release);
                Wake::Look
            }
            () = self.waiter.lead.notified() => Wake::Lead,
            () = tokio::time::sleep_until(until) => Wake::Look,
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut lines = self.lines.locked();
        let Some(line) = lines.get_mut(&self.topic) else {
            return;
        };
        let kind = self.waiter.kind;
        keeping_the_lead(line, kind, |line| line.retain(|w| w.id != self.waiter.id));
        if self.waiter.is_pending() && self.waiter.kind != LockKind::Read {
            // Woken, but gone without trying: the next in line tries instead.
            wake_first(line, self.waiter.kind);
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

    /// How `place`'s wait ends at once, if it does.
    async fn wait_of(place: &Place) -> Option<Wake> {
        let soon = Instant::now() + Duration::from_millis(20);
        tokio::time::timeout(Duration::from_millis(10), place.until_woken(soon))
            .await
            .ok()
    }

    /// Whether `place` is woken at once.
    async fn woken(place: &Place) -> bool {
        wait_of(place).await == Some(Wake::Look)
    }

    #[tokio::test(start_paused = true)]
    async fn an_announcement_wakes_the_first_in_line_of_each_kind_and_every_reader() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let first = lines.join(topic.clone(), LockKind::Exclusive);
        let second = lines.join(topic.clone(), LockKind::Exclusive);
        let (reader_a, reader_b) = (
            lines.join(topic.clone(), LockKind::Read),
            lines.join(topic.clone(), LockKind::Read),
        );
        let elsewhere = lines.join("db\nother".into(), LockKind::Exclusive);
        lines.announce(&topic);
        assert!(woken(&first).await);
        assert!(!woken(&second).await);
        assert!(woken(&reader_a).await && woken(&reader_b).await);
        assert!(!woken(&elsewhere).await);
        // The first tried and waits again: the next announcement is its turn again.
        lines.announce(&topic);
        assert!(woken(&first).await);
        assert!(!woken(&second).await);
    }

    #[tokio::test(start_paused = true)]
    async fn queued_waiters_are_woken_in_ticket_order() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let late = lines.join(topic.clone(), LockKind::Fair);
        let early = lines.join(topic.clone(), LockKind::Fair);
        let unqueued = lines.join(topic.clone(), LockKind::Fair);
        late.holds_ticket(Some(9));
        early.holds_ticket(Some(4));
        lines.announce(&topic);
        assert!(woken(&early).await);
        assert!(!woken(&late).await && !woken(&unqueued).await);
        // A second announcement while the first woken has not tried wakes the next.
        lines.announce(&topic);
        lines.announce(&topic);
        assert!(woken(&early).await);
        assert!(woken(&late).await);
        assert!(!woken(&unqueued).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_leaves_woken_hands_its_wake_up_on() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let leaving = lines.join(topic.clone(), LockKind::Exclusive);
        let next = lines.join(topic.clone(), LockKind::Exclusive);
        lines.announce(&topic);
        drop(leaving);
        assert!(woken(&next).await);
        // One that took its wake-up leaves nothing to hand on.
        let last = lines.join(topic.clone(), LockKind::Exclusive);
        drop(next);
        assert!(!woken(&last).await);
        drop(last);
        assert!(lines.locked().is_empty(), "an empty line is forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn wake_all_wakes_every_line() {
        let lines = Arc::new(WaitLines::default());
        let a = lines.join("db\na".into(), LockKind::Exclusive);
        let b = lines.join("db\na".into(), LockKind::Exclusive);
        let c = lines.join("db\nc".into(), LockKind::Permit);
        lines.wake_all();
        assert!(woken(&a).await && woken(&b).await && woken(&c).await);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_of_a_line_leads_and_the_next_is_told_when_it_leaves() {
        let lines = Arc::new(WaitLines::default());
        let topic: Arc<str> = "db\nk".into();
        let first = lines.join(topic.clone(), LockKind::Fair);
        let second = lines.join(topic.clone(), LockKind::Fair);
        let reader = lines.join(topic.clone(), LockKind::Read);
        assert!(first.leads() && !second.leads() && reader.leads());
        // An older ticket goes ahead, and is told.
        first.holds_ticket(Some(8));
        second.holds_ticket(Some(7));
        assert!(second.leads() && !first.leads());
        assert_eq!(wait_of(&second).await, Some(Wake::Lead));
        assert_eq!(wait_of(&first).await, None);
        drop(second);
        assert!(first.leads());
        assert_eq!(wait_of(&first).await, Some(Wake::Lead));
    }
}
