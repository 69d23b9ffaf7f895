//! Counters of the requests and wake-ups behind the locks, so tests and operators can
//! see that a handoff costs the same whatever the queue length (no herd).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a backend has done so far; see [`ZkBackend::stats`](crate::ZkBackend::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZkStats {
    /// Contender nodes created.
    pub creates: u64,
    /// Reads of a lock path's children (one per check of a contender's place).
    pub children_reads: u64,
    /// Waiters woken by the watch on their predecessor.
    pub predecessor_wakeups: u64,
    /// Writes made to draw a fresh fencing token (grants after waiting).
    pub fence_writes: u64,
    /// Acquires waiting on a watch right now.
    pub waiting: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    creates: AtomicU64,
    children_reads: AtomicU64,
    predecessor_wakeups: AtomicU64,
    fence_writes: AtomicU64,
    waiting: AtomicU64,
}

/// Which counter to bump.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Create,
    ChildrenRead,
    Wakeup,
    FenceWrite,
}

impl Counters {
    pub(crate) fn bump(&self, count: Count) {
        let counter = match count {
            Count::Create => &self.creates,
            Count::ChildrenRead => &self.children_reads,
            Count::Wakeup => &self.predecessor_wakeups,
            Count::FenceWrite => &self.fence_writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ZkStats {
        ZkStats {
            creates: self.creates.load(Ordering::Relaxed),
            children_reads: self.children_reads.load(Ordering::Relaxed),
            predecessor_wakeups: self.predecessor_wakeups.load(Ordering::Relaxed),
            fence_writes: self.fence_writes.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    /// Counts one acquire as waiting until the returned value is dropped.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(&self.waiting)
    }
}

/// One waiting acquire; see [`Counters::waiting`].
pub(crate) struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
