//! The state of every lock in the in-memory backend, and the grant rules: the
//! reference semantics, with no I/O and no waiting.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use std::time::SystemTime;
use tokio::sync::Notify;

use tokio::time::Instant;

use crate::backend::{LossNotifier, OwnerToken};
use crate::info::{HolderInfo, LockInfo};
use crate::kinds::{LockFamily, LockKind};
use crate::name::LockKey;

#[derive(Debug)]
struct Holder {
    owner: OwnerToken,
    fence: u64,
    expires_at: Instant,
    description: Arc<str>,
    /// When it was granted, by the wall clock (for `inspect`).
    acquired_at: SystemTime,
    /// Tells its guard when an operator takes the lease away.
    loss: LossNotifier,
}

impl Holder {
    fn is(&self, owner: &OwnerToken, fence: u64) -> bool {
        self.owner == *owner && self.fence == fence
    }

    fn info(&self, kind: LockKind, now: Instant) -> HolderInfo {
        let left = self.expires_at.saturating_duration_since(now);
        HolderInfo::new(kind)
            .with_owner(self.owner.as_str())
            .with_fencing_token(self.fence)
            .with_description(&*self.description)
            .with_acquired_at(self.acquired_at)
            .with_expires_at(SystemTime::now() + left)
    }
}

/// A fair-lock waiter's place in the queue, with its own wake-up so a release wakes
/// only the head of the queue.
#[derive(Debug)]
pub(super) struct Ticket {
    id: u64,
    wake: Arc<Notify>,
}

/// Why a request was not granted, and until when nothing can change without a
/// notification.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Granted(u64),
    Blocked {
        wake_at: Option<Instant>,
    },
    /// A semaphore request named another count than its holders and waiters use.
    OtherCount(u32),
}

/// A one-holder lock granted in request order: a fair lock, or an election.
#[derive(Debug, Default)]
struct Line {
    holder: Option<Holder>,
    queue: VecDeque<Ticket>,
}

/// Everything the backend knows about one key.
#[derive(Debug, Default)]
pub(super) struct KeyState {
    exclusive: Option<Holder>,
    fair: Line,
    /// An election's leader and candidates: a fair lock of its own.
    leader: Line,
    writer: Option<Holder>,
    readers: Vec<Holder>,
    waiting_writers: usize,
    /// A semaphore's permit holders, its waiters in request order, and its count (set
    /// by whoever finds it unused).
    permit_holders: Vec<Holder>,
    permit_queue: VecDeque<Ticket>,
    permits: u32,
    /// Acquires waiting for this key now, of any kind (for `inspect`).
    waiting: usize,
    /// Wakes exclusive and read-write waiters on any release.
    changed: Arc<Notify>,
}

impl KeyState {
    fn purge(&mut self, now: Instant) {
        let live = |h: &Option<Holder>| h.as_ref().is_some_and(|h| h.expires_at > now);
        let holders = [
            &mut self.exclusive,
            &mut self.fair.holder,
            &mut self.leader.holder,
            &mut self.writer,
        ];
        for holder in holders {
            if !live(holder) {
                *holder = None;
            }
        }
        self.readers.retain(|r| r.expires_at > now);
        self.permit_holders.retain(|p| p.expires_at > now);
    }

    /// Whether a semaphore's count is in force: someone holds or waits.
    fn permits_in_use(&self) -> bool {
        !self.permit_holders.is_empty() || !self.permit_queue.is_empty()
    }

    /// How many permits are free now.
    fn free_permits(&self) -> usize {
        (self.permits as usize).saturating_sub(self.permit_holders.len())
    }

    fn queue(&mut self, kind: LockKind) -> &mut VecDeque<Ticket> {
        match kind {
            LockKind::Permit => &mut self.permit_queue,
            LockKind::Leader => &mut self.leader.queue,
            _ => &mut self.fair.queue,
        }
    }

    /// The line of a fair lock or an election.
    fn line(&mut self, kind: LockKind) -> &mut Line {
        match kind {
            LockKind::Leader => &mut self.leader,
            _ => &mut self.fair,
        }
    }

    /// Nothing held, queued or waiting: the entry can go.
    fn is_idle(&self) -> bool {
        self.exclusive.is_none()
            && self.fair.holder.is_none()
            && self.fair.queue.is_empty()
            && self.leader.holder.is_none()
            && self.leader.queue.is_empty()
            && self.writer.is_none()
            && self.readers.is_empty()
            && !self.permits_in_use()
            && self.waiting_writers == 0
            && self.waiting == 0
            && Arc::strong_count(&self.changed) == 1
    }

    fn holds(&self, family: LockFamily) -> bool {
        match family {
            LockFamily::Exclusive => self.exclusive.is_some(),
            LockFamily::Fair => self.fair.holder.is_some(),
            LockFamily::Election => self.leader.holder.is_some(),
            LockFamily::ReadWrite => self.writer.is_some() || !self.readers.is_empty(),
            LockFamily::Semaphore => !self.permit_holders.is_empty(),
        }
    }

    /// Wakes whoever may now be granted `family`.
    fn wake(&self, family: LockFamily) {
        match family {
            LockFamily::Fair | LockFamily::Election => {
                let line = if family == LockFamily::Fair {
                    &self.fair
                } else {
                    &self.leader
                };
                if let Some(head) = line.queue.front() {
                    head.wake.notify_one();
                }
            }
            // Only the waiters a free permit can admit (no herd), and at least the
            // first: after a grant it learns the new holder's lease, whose end is its
            // next chance, rather than sleeping to the end of one it saw before.
            LockFamily::Semaphore => {
                let admitted = self.free_permits().max(1);
                for ticket in self.permit_queue.iter().take(admitted) {
                    ticket.wake.notify_one();
                }
            }
            LockFamily::Exclusive | LockFamily::ReadWrite => self.changed.notify_waiters(),
        }
    }
}

/// All keys, and the fence counter. One global counter keeps every key's tokens
/// strictly increasing even after its idle entry is dropped.
#[derive(Debug, Default)]
pub(super) struct Table {
    keys: HashMap<LockKey, KeyState>,
    last_fence: u64,
    last_ticket: u64,
}

/// One grant attempt.
pub(super) struct Attempt<'a> {
    pub(super) key: &'a LockKey,
    pub(super) kind: LockKind,
    pub(super) permits: u32,
    pub(super) owner: &'a OwnerToken,
    pub(super) ttl: Duration,
    pub(super) ticket: Option<u64>,
    pub(super) description: &'a str,
    pub(super) loss: &'a LossNotifier,
}

impl Table {
    fn entry(&mut self, key: &LockKey, now: Instant) -> &mut KeyState {
        let state = self.keys.entry(key.clone()).or_default();
        state.purge(now);
        state
    }

    fn tidy(&mut self, key: &LockKey) {
        if self.keys.get(key).is_some_and(KeyState::is_idle) {
            self.keys.remove(key);
        }
    }

    /// The notification exclusive and read-write waiters of `key` wait on.
    pub(super) fn changed(&mut self, key: &LockKey) -> Arc<Notify> {
        self.entry(key, Instant::now()).changed.clone()
    }

    /// Puts a fair or semaphore waiter at the back of its queue. A semaphore waiter
    /// whose count differs from the one in force is refused with that count.
    pub(super) fn enqueue(
        &mut self,
        key: &LockKey,
        kind: LockKind,
        permits: u32,
    ) -> Result<(u64, Arc<Notify>), u32> {
        let state = self.entry(key, Instant::now());
        if kind == LockKind::Permit {
            if state.permits_in_use() && state.permits != permits {
                return Err(state.permits);
            }
            state.permits = permits;
        }
        self.last_ticket += 1;
        let id = self.last_ticket;
        let wake = Arc::new(Notify::new());
        let state = self.keys.get_mut(key).expect("entry made above");
        state.queue(kind).push_back(Ticket {
            id,
            wake: wake.clone(),
        });
        Ok((id, wake))
    }

    /// Takes a waiter out of its queue (it gave up, or was granted) and wakes whoever
    /// may go now.
    pub(super) fn dequeue(&mut self, key: &LockKey, kind: LockKind, ticket: u64) {
        if let Some(state) = self.keys.get_mut(key) {
            state.queue(kind).retain(|t| t.id != ticket);
            state.wake(kind.family());
        }
        self.tidy(key);
    }

    /// Counts an acquire waiting for `key` (or one that stopped waiting).
    pub(super) fn waiting(&mut self, key: &LockKey, delta: isize) {
        let state = self.entry(key, Instant::now());
        state.waiting = state.waiting.saturating_add_signed(delta);
        if delta < 0 {
            self.tidy(key);
        }
    }

    /// Counts a waiting writer, so new readers wait behind it.
    pub(super) fn writer_waiting(&mut self, key: &LockKey, delta: isize) {
        let state = self.entry(key, Instant::now());
        state.waiting_writers = state.waiting_writers.saturating_add_signed(delta);
        if delta < 0 {
            state.wake(LockFamily::ReadWrite);
            self.tidy(key);
        }
    }

    /// Grants the request if the rules allow, else says until when it is blocked.
    pub(super) fn try_grant(&mut self, req: &Attempt<'_>, now: Instant) -> Outcome {
        let state = self.entry(req.key, now);
        let expiry = |h: &Option<Holder>| h.as_ref().map(|h| h.expires_at);
        let blocked_until = match req.kind {
            LockKind::Exclusive => state.exclusive.as_ref().map(|h| Some(h.expires_at)),
            LockKind::Fair | LockKind::Leader => {
                let line = state.line(req.kind);
                let my_turn = match req.ticket {
                    Some(id) => line.queue.front().is_some_and(|t| t.id == id),
                    None => line.queue.is_empty(),
                };
                match (&line.holder, my_turn) {
                    (None, true) => None,
                    (holder, _) => Some(expiry(holder)),
                }
            }
            LockKind::Read => {
                let downgrade = state.writer.as_ref().is_some_and(|w| w.owner == *req.owner);
                match &state.writer {
                    Some(w) if !downgrade => Some(Some(w.expires_at)),
                    _ if state.waiting_writers > 0 && !downgrade => Some(None),
                    _ => None,
                }
            }
            LockKind::Write => {
                let busy = state.writer.is_some() || !state.readers.is_empty();
                busy.then(|| {
                    let readers = state.readers.iter().map(|r| r.expires_at);
                    expiry(&state.writer).into_iter().chain(readers).min()
                })
            }
            LockKind::Permit => {
                if state.permits_in_use() && state.permits != req.permits {
                    return Outcome::OtherCount(state.permits);
                }
                state.permits = req.permits;
                // Granted while among the first waiters the free permits admit; a
                // single try only if every waiter can be admitted before it.
                let ahead = match req.ticket {
                    Some(id) => state.permit_queue.iter().position(|t| t.id == id),
                    None => Some(state.permit_queue.len()),
                };
                let ahead = ahead.unwrap_or(usize::MAX);
                (ahead >= state.free_permits())
                    .then(|| state.permit_holders.iter().map(|p| p.expires_at).min())
            }
        };
        if let Some(wake_at) = blocked_until {
            return Outcome::Blocked { wake_at };
        }
        self.last_fence += 1;
        let holder = Holder {
            owner: req.owner.clone(),
            fence: self.last_fence,
            expires_at: now + req.ttl,
            description: req.description.into(),
            acquired_at: SystemTime::now(),
            loss: req.loss.clone(),
        };
        let state = self.keys.get_mut(req.key).expect("entry made above");
        match req.kind {
            LockKind::Exclusive => state.exclusive = Some(holder),
            LockKind::Fair | LockKind::Leader => {
                let line = state.line(req.kind);
                if req.ticket.is_some() {
                    line.queue.pop_front();
                }
                line.holder = Some(holder);
            }
            LockKind::Read => state.readers.push(holder),
            LockKind::Write => state.writer = Some(holder),
            LockKind::Permit => {
                if let Some(id) = req.ticket {
                    state.permit_queue.retain(|t| t.id != id);
                }
                state.permit_holders.push(holder);
            }
        }
        Outcome::Granted(self.last_fence)
    }

    /// Removes the lease if it is the live one of `owner` and `fence`.
    pub(super) fn release(
        &mut self,
        key: &LockKey,
        kind: LockKind,
        owner: &OwnerToken,
        fence: u64,
    ) -> bool {
        let Some(state) = self.keys.get_mut(key) else {
            return false;
        };
        state.purge(Instant::now());
        let removed = match kind {
            LockKind::Exclusive => take_if(&mut state.exclusive, owner, fence),
            LockKind::Fair | LockKind::Leader => {
                take_if(&mut state.line(kind).holder, owner, fence)
            }
            LockKind::Write => take_if(&mut state.writer, owner, fence),
            LockKind::Read => take_from(&mut state.readers, owner, fence),
            LockKind::Permit => take_from(&mut state.permit_holders, owner, fence),
        };
        if removed {
            state.wake(kind.family());
            self.tidy(key);
        }
        removed
    }

    /// Extends the lease if it is the live one of `owner` and `fence`.
    pub(super) fn renew(
        &mut self,
        key: &LockKey,
        kind: LockKind,
        owner: &OwnerToken,
        fence: u64,
        ttl: Duration,
    ) -> bool {
        let now = Instant::now();
        let Some(state) = self.keys.get_mut(key) else {
            return false;
        };
        state.purge(now);
        let holder = match kind {
            LockKind::Exclusive => state.exclusive.as_mut(),
            LockKind::Fair | LockKind::Leader => state.line(kind).holder.as_mut(),
            LockKind::Write => state.writer.as_mut(),
            LockKind::Read => state.readers.iter_mut().find(|r| r.is(owner, fence)),
            LockKind::Permit => state.permit_holders.iter_mut().find(|p| p.is(owner, fence)),
        };
        match holder {
            Some(h) if h.is(owner, fence) => {
                h.expires_at = now + ttl;
                true
            }
            _ => false,
        }
    }

    /// Sets the published value of the leader of `key` if it is the live lease of
    /// `owner` and `fence`.
    pub(super) fn proclaim(
        &mut self,
        key: &LockKey,
        owner: &OwnerToken,
        fence: u64,
        value: &str,
    ) -> bool {
        let Some(state) = self.keys.get_mut(key) else {
            return false;
        };
        state.purge(Instant::now());
        match state.leader.holder.as_mut() {
            Some(h) if h.is(owner, fence) => {
                h.description = value.into();
                true
            }
            _ => false,
        }
    }

    pub(super) fn is_locked(&mut self, key: &LockKey, family: LockFamily) -> bool {
        let locked = self.entry(key, Instant::now()).holds(family);
        self.tidy(key);
        locked
    }

    /// Who holds `family` on `key`, and how many wait.
    pub(super) fn inspect(&mut self, key: &LockKey, family: LockFamily) -> LockInfo {
        let now = Instant::now();
        let state = self.entry(key, now);
        let mut holders = Vec::new();
        match family {
            LockFamily::Exclusive => holders.extend(
                state
                    .exclusive
                    .as_ref()
                    .map(|h| h.info(LockKind::Exclusive, now)),
            ),
            LockFamily::Fair => holders.extend(
                state
                    .fair
                    .holder
                    .as_ref()
                    .map(|h| h.info(LockKind::Fair, now)),
            ),
            LockFamily::Election => holders.extend(
                state
                    .leader
                    .holder
                    .as_ref()
                    .map(|h| h.info(LockKind::Leader, now)),
            ),
            LockFamily::ReadWrite => {
                holders.extend(state.writer.as_ref().map(|h| h.info(LockKind::Write, now)));
                holders.extend(state.readers.iter().map(|h| h.info(LockKind::Read, now)));
            }
            LockFamily::Semaphore => holders.extend(
                state
                    .permit_holders
                    .iter()
                    .map(|h| h.info(LockKind::Permit, now)),
            ),
        }
        let waiters = state.waiting;
        self.tidy(key);
        LockInfo::new(holders, Some(waiters))
    }

    /// Removes the lease of `family` on `key` whose fence is `fence`; returns what
    /// tells its guard, if there was one (the caller tells it once the table is free).
    pub(super) fn force_unlock_holder(
        &mut self,
        key: &LockKey,
        family: LockFamily,
        fence: u64,
    ) -> Option<LossNotifier> {
        let state = self.entry(key, Instant::now());
        let is = |h: &Option<Holder>| h.as_ref().is_some_and(|h| h.fence == fence);
        let removed = match family {
            LockFamily::Exclusive if is(&state.exclusive) => state.exclusive.take(),
            LockFamily::Fair if is(&state.fair.holder) => state.fair.holder.take(),
            LockFamily::Election if is(&state.leader.holder) => state.leader.holder.take(),
            LockFamily::ReadWrite if is(&state.writer) => state.writer.take(),
            LockFamily::ReadWrite => state
                .readers
                .iter()
                .position(|r| r.fence == fence)
                .map(|at| state.readers.remove(at)),
            LockFamily::Semaphore => state
                .permit_holders
                .iter()
                .position(|p| p.fence == fence)
                .map(|at| state.permit_holders.remove(at)),
            _ => None,
        };
        if removed.is_some() {
            state.wake(family);
        }
        self.tidy(key);
        removed.map(|holder| holder.loss)
    }

    /// Removes every lease of `family` on `key`; returns whether there was any, and
    /// what tells the guards of those still live (the caller tells them once the table
    /// is free).
    pub(super) fn force_unlock(
        &mut self,
        key: &LockKey,
        family: LockFamily,
    ) -> (bool, Vec<LossNotifier>) {
        let state = self.entry(key, Instant::now());
        let held = state.holds(family);
        let removed: Vec<Holder> = match family {
            LockFamily::Exclusive => state.exclusive.take().into_iter().collect(),
            LockFamily::Fair => state.fair.holder.take().into_iter().collect(),
            LockFamily::Election => state.leader.holder.take().into_iter().collect(),
            LockFamily::ReadWrite => {
                let mut all: Vec<Holder> = state.readers.drain(..).collect();
                all.extend(state.writer.take());
                all
            }
            LockFamily::Semaphore => state.permit_holders.drain(..).collect(),
        };
        state.wake(family);
        self.tidy(key);
        (held, removed.into_iter().map(|h| h.loss).collect())
    }

    /// How many keys have any state (held, queued or waited on).
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.keys.keys()
    }
}

fn take_from(holders: &mut Vec<Holder>, owner: &OwnerToken, fence: u64) -> bool {
    let before = holders.len();
    holders.retain(|h| !h.is(owner, fence));
    holders.len() < before
}

fn take_if(holder: &mut Option<Holder>, owner: &OwnerToken, fence: u64) -> bool {
    if holder.as_ref().is_some_and(|h| h.is(owner, fence)) {
        *holder = None;
        true
    } else {
        false
    }
}
