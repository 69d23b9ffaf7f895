//! The storage a lock protects, never faulted: a fenced register that refuses writes
//! carrying an older token, and beside it a plain counter that does not look at tokens
//! and so shows when two holders overlap.

use std::sync::Mutex;

/// What the fenced register said to one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Accepted: the token is at least the highest accepted so far.
    Accepted,
    /// Refused: a write with a higher token was accepted before.
    Refused {
        /// The highest token accepted so far.
        highest: u64,
    },
}

#[derive(Debug, Default)]
struct State {
    highest: u64,
    accepted: u64,
    refused: u64,
    /// Refused first writes of a fresh grant: its token was lower than one already
    /// accepted, so tokens did not increase in grant order.
    inversions: u64,
    plain: u64,
    plain_writes: u64,
    inside: u32,
    overlaps: u64,
}

/// A fenced register and a plain counter, shared by every client of a run.
#[derive(Debug, Default)]
pub struct FencedStore {
    state: Mutex<State>,
}

/// What a run did to the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Writes accepted by the fenced register.
    pub accepted: u64,
    /// Writes refused as stale (a later holder had written).
    pub refused: u64,
    /// Fresh grants whose first write was refused: tokens out of grant order.
    pub inversions: u64,
    /// Times a holder entered the plain critical section while another was inside.
    pub overlaps: u64,
    /// Increments of the plain counter lost to an overlap.
    pub lost_updates: u64,
}

impl FencedStore {
    /// A write under `token`. `first` marks a holder's first write after its grant.
    pub fn write(&self, token: u64, first: bool) -> Write {
        let mut s = self.state.lock().expect("store lock");
        if token >= s.highest {
            s.highest = token;
            s.accepted += 1;
            Write::Accepted
        } else {
            s.refused += 1;
            if first {
                s.inversions += 1;
            }
            Write::Refused { highest: s.highest }
        }
    }

    /// Enters the plain critical section: reads the counter.
    pub fn enter(&self) -> u64 {
        let mut s = self.state.lock().expect("store lock");
        if s.inside > 0 {
            s.overlaps += 1;
        }
        s.inside += 1;
        s.plain
    }

    /// Leaves it, writing back what was read plus one (a lost update if another holder
    /// wrote meanwhile).
    pub fn leave(&self, read: u64) {
        let mut s = self.state.lock().expect("store lock");
        s.inside -= 1;
        s.plain = read + 1;
        s.plain_writes += 1;
    }

    /// The counts so far.
    pub fn counts(&self) -> StoreCounts {
        let s = self.state.lock().expect("store lock");
        StoreCounts {
            accepted: s.accepted,
            refused: s.refused,
            inversions: s.inversions,
            overlaps: s.overlaps,
            lost_updates: s.plain_writes - s.plain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_older_tokens_and_counts_overlaps() {
        let store = FencedStore::default();
        assert_eq!(store.write(5, true), Write::Accepted);
        assert_eq!(store.write(5, false), Write::Accepted);
        assert_eq!(store.write(4, false), Write::Refused { highest: 5 });
        assert_eq!(store.write(3, true), Write::Refused { highest: 5 });
        let a = store.enter();
        let b = store.enter();
        store.leave(a);
        store.leave(b);
        let c = store.counts();
        assert_eq!((c.accepted, c.refused, c.inversions), (2, 2, 1));
        assert_eq!((c.overlaps, c.lost_updates), (1, 1));
    }
}
