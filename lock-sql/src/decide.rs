//! The grant rules of the lease strategy, on a snapshot of one key's live rows read
//! inside the key's transaction: pure, so they are tested without a database.
//!
//! Read-write policy: writers are preferred. A waiting writer holds a queue ticket,
//! and new readers wait while one exists (the owner of the write lock may still take
//! the read lock: downgrade). So a stream of readers cannot starve a writer; a writer
//! that gives up or dies stops blocking readers when its ticket is removed (at once)
//! or expires (after the queue ttl).

use lock_core::LockKind;

/// A live lease row of the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LiveLease {
    pub(crate) kind: LockKind,
    pub(crate) owner: String,
    /// Milliseconds until it expires, by the database's clock.
    pub(crate) remaining_ms: i64,
    /// A permit's semaphore count (0 for locks).
    pub(crate) permits: i64,
}

/// A live queue ticket of the key (fair-lock and semaphore waiters, waiting writers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LiveTicket {
    pub(crate) kind: LockKind,
    pub(crate) ticket: i64,
    pub(crate) owner: String,
    pub(crate) remaining_ms: i64,
    /// A semaphore waiter's count (0 for locks).
    pub(crate) permits: i64,
}

/// What a request gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Grant,
    /// Blocked; nothing changes without a release before `wake_in_ms` (the first
    /// blocker's expiry), if there is such a bound.
    Blocked {
        wake_in_ms: Option<i64>,
    },
    /// A semaphore's holders or other waiters use this count, not the request's.
    OtherCount(u32),
}

/// The live lease whose release a blocked request waits for (MariaDB watches its
/// doorbell, [`crate::bells`]).
#[derive(Debug)]
pub(crate) struct Blocking<'a> {
    /// Of the leases that block the request, the one that expires last.
    pub(crate) lease: &'a LiveLease,
    /// Whether something else may let the request in first: a semaphore of more than
    /// one permit, where any holder's release, or a waiter ahead that leaves, frees a
    /// place. Else the other blocking leases must go too (a writer's readers), or
    /// there are none.
    pub(crate) one_of_several: bool,
}

/// Of the live leases that keep a request of `kind` by `owner` waiting, the one that
/// expires last. None when only queue tickets block it.
pub(crate) fn blocking_lease<'a>(
    kind: LockKind,
    owner: &str,
    leases: &'a [LiveLease],
) -> Option<Blocking<'a>> {
    let blocks = |lease: &LiveLease| match kind {
        LockKind::Exclusive | LockKind::Fair | LockKind::Leader | LockKind::Permit => {
            lease.kind == kind
        }
        // Its own write lock lets a reader in (downgrade).
        LockKind::Read => lease.kind == LockKind::Write && lease.owner != owner,
        LockKind::Write => matches!(lease.kind, LockKind::Read | LockKind::Write),
    };
    let lease = leases
        .iter()
        .filter(|lease| blocks(lease))
        .max_by_key(|lease| lease.remaining_ms)?;
    let blocking = leases.iter().filter(|lease| blocks(lease)).count();
    Some(Blocking {
        lease,
        one_of_several: kind == LockKind::Permit && (blocking > 1 || lease.permits > 1),
    })
}

fn blocked(remaining: impl Iterator<Item = i64>) -> Decision {
    Decision::Blocked {
        wake_in_ms: remaining.min(),
    }
}

/// Decides a request of `kind` by `owner`, holding queue ticket `ticket` if it has one;
/// `permits` is a semaphore's count (1 for locks).
pub(crate) fn decide(
    kind: LockKind,
    owner: &str,
    ticket: Option<i64>,
    leases: &[LiveLease],
    queue: &[LiveTicket],
    permits: u32,
) -> Decision {
    let leases_of = |k: LockKind| leases.iter().filter(move |l| l.kind == k);
    match kind {
        LockKind::Exclusive => {
            if leases_of(LockKind::Exclusive).next().is_some() {
                return blocked(leases_of(LockKind::Exclusive).map(|l| l.remaining_ms));
            }
        }
        LockKind::Permit => return decide_permit(permits, ticket, leases, queue),
        LockKind::Fair | LockKind::Leader => {
            let ahead =
                |t: &&LiveTicket| t.kind == kind && ticket.is_none_or(|mine| t.ticket < mine);
            let holder = leases_of(kind).map(|l| l.remaining_ms);
            let queued = queue.iter().filter(ahead).map(|t| t.remaining_ms);
            if leases_of(kind).next().is_some() || queue.iter().any(|t| ahead(&t)) {
                return blocked(holder.chain(queued));
            }
        }
        LockKind::Read => {
            let writer = leases_of(LockKind::Write).next();
            match writer {
                Some(w) if w.owner == owner => {} // downgrade
                Some(w) => return blocked(std::iter::once(w.remaining_ms)),
                None => {
                    let writers_waiting = queue
                        .iter()
                        .filter(|t| t.kind == LockKind::Write && t.owner != owner);
                    if writers_waiting.clone().next().is_some() {
                        return blocked(writers_waiting.map(|t| t.remaining_ms));
                    }
                }
            }
        }
        LockKind::Write => {
            let busy = leases
                .iter()
                .filter(|l| matches!(l.kind, LockKind::Read | LockKind::Write));
            if busy.clone().next().is_some() {
                return blocked(busy.map(|l| l.remaining_ms));
            }
        }
    }
    Decision::Grant
}

/// A permit is granted while the request is among the first waiters the free permits
/// admit (without a ticket: if every waiter can be admitted before it), and refused
/// if the semaphore's holders or other waiters use another count.
fn decide_permit(
    permits: u32,
    ticket: Option<i64>,
    leases: &[LiveLease],
    queue: &[LiveTicket],
) -> Decision {
    let holders: Vec<&LiveLease> = leases
        .iter()
        .filter(|l| l.kind == LockKind::Permit)
        .collect();
    let waiters = queue
        .iter()
        .filter(|t| t.kind == LockKind::Permit && Some(t.ticket) != ticket);
    let in_force = holders
        .iter()
        .map(|l| l.permits)
        .chain(waiters.clone().map(|t| t.permits))
        .find(|&count| count != i64::from(permits));
    if let Some(count) = in_force {
        return Decision::OtherCount(u32::try_from(count).unwrap_or(0));
    }
    let ahead = waiters
        .filter(|t| ticket.is_none_or(|mine| t.ticket < mine))
        .count();
    let free = (permits as usize).saturating_sub(holders.len());
    if ahead < free {
        Decision::Grant
    } else {
        blocked(holders.iter().map(|l| l.remaining_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(kind: LockKind, owner: &str, remaining_ms: i64) -> LiveLease {
        LiveLease {
            kind,
            owner: owner.into(),
            remaining_ms,
            permits: 0,
        }
    }

    fn ticket(kind: LockKind, ticket: i64, owner: &str) -> LiveTicket {
        LiveTicket {
            kind,
            ticket,
            owner: owner.into(),
            remaining_ms: 9_000,
            permits: 0,
        }
    }

    const GRANT: Decision = Decision::Grant;

    fn wake(ms: i64) -> Decision {
        Decision::Blocked {
            wake_in_ms: Some(ms),
        }
    }

    #[test]
    fn the_blocking_lease_is_of_a_kind_that_blocks_and_expires_last() {
        use LockKind::*;
        let owner = |kind, me, leases: &[LiveLease]| {
            blocking_lease(kind, me, leases).map(|blocking| blocking.lease.owner.clone())
        };
        let several = |kind, leases: &[LiveLease]| {
            blocking_lease(kind, "me", leases).map(|blocking| blocking.one_of_several)
        };
        let readers = [
            lease(Read, "r1", 300),
            lease(Read, "r2", 900),
            lease(Exclusive, "x", 5_000),
        ];
        assert_eq!(owner(Write, "w", &readers), Some("r2".into()));
        assert_eq!(owner(Read, "r3", &readers), None, "readers block no reader");
        assert_eq!(owner(Exclusive, "e", &readers), Some("x".into()));
        assert_eq!(owner(Fair, "f", &readers), None, "another kind's lease");
        let writer = [lease(Write, "w", 700)];
        assert_eq!(owner(Read, "r", &writer), Some("w".into()));
        assert_eq!(owner(Read, "w", &writer), None, "downgrade");
        let permits = [lease(Permit, "p1", 100), lease(Permit, "p2", 200)];
        assert_eq!(owner(Permit, "p3", &permits), Some("p2".into()));
        assert_eq!(
            several(Permit, &permits),
            Some(true),
            "any release frees one"
        );
        let of_one = LiveLease {
            permits: 1,
            ..lease(Permit, "p1", 100)
        };
        assert_eq!(several(Permit, std::slice::from_ref(&of_one)), Some(false));
        let of_two = LiveLease {
            permits: 2,
            ..of_one
        };
        assert_eq!(
            several(Permit, &[of_two]),
            Some(true),
            "a waiter ahead may leave"
        );
        assert_eq!(
            several(Write, &readers),
            Some(false),
            "every reader must go"
        );
        let leader = [lease(Leader, "l", 100), lease(Fair, "f", 200)];
        assert_eq!(owner(Leader, "c", &leader), Some("l".into()));
        assert_eq!(owner(Fair, "g", &leader), Some("f".into()));
    }

    #[test]
    fn exclusive_ignores_other_kinds() {
        use LockKind::*;
        assert_eq!(decide(Exclusive, "a", None, &[], &[], 1), GRANT);
        let held = [lease(Exclusive, "b", 500), lease(Fair, "c", 100)];
        assert_eq!(decide(Exclusive, "a", None, &held, &[], 1), wake(500));
        assert_eq!(
            decide(Exclusive, "b", None, &held, &[], 1),
            wake(500),
            "no re-entry here"
        );
        assert_eq!(
            decide(Exclusive, "a", None, &[lease(Write, "b", 5)], &[], 1),
            GRANT
        );
    }

    #[test]
    fn fair_goes_in_ticket_order() {
        use LockKind::*;
        let queue = [ticket(Fair, 3, "x"), ticket(Fair, 5, "y")];
        assert_eq!(decide(Fair, "x", Some(3), &[], &queue, 1), GRANT);
        assert_eq!(decide(Fair, "y", Some(5), &[], &queue, 1), wake(9_000));
        assert_eq!(
            decide(Fair, "z", None, &[], &queue, 1),
            wake(9_000),
            "try-once respects the queue"
        );
        assert_eq!(decide(Fair, "z", None, &[], &[], 1), GRANT);
        assert_eq!(
            decide(Fair, "x", Some(3), &[lease(Fair, "h", 70)], &queue, 1),
            wake(70)
        );
        assert_eq!(
            decide(Fair, "x", Some(3), &[], &[ticket(Write, 1, "w")], 1),
            GRANT,
            "writer tickets are another queue"
        );
    }

    #[test]
    fn read_write_rules() {
        use LockKind::*;
        assert_eq!(
            decide(Read, "r", None, &[lease(Read, "q", 10)], &[], 1),
            GRANT
        );
        assert_eq!(
            decide(Read, "r", None, &[lease(Write, "w", 40)], &[], 1),
            wake(40)
        );
        assert_eq!(
            decide(Read, "w", None, &[lease(Write, "w", 40)], &[], 1),
            GRANT,
            "downgrade"
        );
        let writer_waits = [ticket(Write, 1, "w")];
        assert_eq!(decide(Read, "r", None, &[], &writer_waits, 1), wake(9_000));
        assert_eq!(decide(Read, "w", None, &[], &writer_waits, 1), GRANT);
        assert_eq!(
            decide(
                Write,
                "w",
                Some(1),
                &[lease(Read, "r", 30)],
                &writer_waits,
                1
            ),
            wake(30)
        );
        assert_eq!(decide(Write, "w", Some(1), &[], &writer_waits, 1), GRANT);
        assert_eq!(
            decide(Write, "w", None, &[lease(Write, "v", 8)], &[], 1),
            wake(8)
        );
        assert_eq!(
            decide(Write, "w", None, &[lease(Exclusive, "v", 8)], &[], 1),
            GRANT
        );
    }

    #[test]
    fn permits_admit_up_to_the_count_in_request_order() {
        use LockKind::*;
        let permit = |owner: &str, ms: i64| LiveLease {
            permits: 2,
            ..lease(Permit, owner, ms)
        };
        let waiter = |id: i64, count: i64| LiveTicket {
            permits: count,
            ..ticket(Permit, id, "w")
        };
        assert_eq!(decide(Permit, "a", None, &[], &[], 2), GRANT);
        assert_eq!(
            decide(Permit, "a", None, &[permit("b", 300)], &[], 2),
            GRANT
        );
        let full = [permit("b", 300), permit("c", 100)];
        assert_eq!(decide(Permit, "a", None, &full, &[], 2), wake(100));
        // One free permit: the first waiter goes, the second and a newcomer wait.
        let one = [permit("b", 300)];
        let queue = [waiter(5, 2), waiter(7, 2)];
        assert_eq!(decide(Permit, "a", Some(5), &one, &queue, 2), GRANT);
        assert_eq!(decide(Permit, "a", Some(7), &one, &queue, 2), wake(300));
        assert_eq!(decide(Permit, "a", None, &one, &queue, 2), wake(300));
        // Locks of the name do not count.
        let others = [
            permit("b", 300),
            lease(Exclusive, "x", 50),
            lease(Read, "y", 50),
        ];
        assert_eq!(decide(Permit, "a", None, &others, &[], 2), GRANT);
        // Another count in force is refused; the request's own ticket does not count.
        assert_eq!(
            decide(Permit, "a", None, &one, &[], 3),
            Decision::OtherCount(2)
        );
        assert_eq!(
            decide(Permit, "a", None, &[], &[waiter(5, 2)], 3),
            Decision::OtherCount(2)
        );
        assert_eq!(decide(Permit, "a", Some(5), &[], &[waiter(5, 3)], 3), GRANT);
    }
}
