//! The cases, and the list the runner goes through.

mod args;
mod cancel;
mod election;
mod fair;
mod flavor;
mod inspect;
mod loss_notice;
mod multi;
mod mutex;
mod process;
mod rwlock;
mod semaphore;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::Capabilities;

use crate::backend::{Backend, HolderSpec};
use crate::runner::Ctx;
use cancel::Storm;
use flavor::Flavor;

/// What a case needs from the backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Needs {
    /// Fair locks.
    pub fair: bool,
    /// Read-write locks.
    pub read_write: bool,
    /// Semaphores.
    pub semaphore: bool,
    /// Elections.
    pub election: bool,
    /// Fixed leases.
    pub fixed_lease: bool,
    /// A holder in another process ([`Backend::holder_command`]).
    pub holder_process: bool,
    /// Holders reported and broken one at a time (`inspect`, `force_unlock_holder`).
    pub inspect: bool,
    /// Holders told at once of a lease taken away behind their back.
    pub loss_notice: bool,
}

impl Needs {
    /// Why the case cannot run on this backend, if it cannot.
    pub fn missing(&self, backend: &dyn Backend, caps: Capabilities) -> Option<String> {
        let probe = HolderSpec {
            namespace: "probe".into(),
            name: "probe".into(),
            watchdog_lease: std::time::Duration::from_secs(1),
        };
        let lacks = [
            (self.fair && !caps.fair, "backend has no fair locks"),
            (
                self.read_write && !caps.read_write,
                "backend has no read-write locks",
            ),
            (
                self.semaphore && !caps.semaphore,
                "backend has no semaphores",
            ),
            (self.election && !caps.election, "backend has no elections"),
            (
                self.fixed_lease && !caps.fixed_lease,
                "backend has no fixed leases",
            ),
            (
                self.inspect && !caps.inspect,
                "backend does not report its holders",
            ),
            (
                self.loss_notice && !caps.loss_notice,
                "backend finds a lease taken away only at its next renewal",
            ),
            (
                self.holder_process
                    && (!caps.cross_process || backend.holder_command(&probe).is_none()),
                "backend cannot hold a lock from another process",
            ),
        ];
        let reasons: Vec<&str> = lacks.iter().filter(|(l, _)| *l).map(|(_, r)| *r).collect();
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    fn and(self, other: Needs) -> Needs {
        Needs {
            fair: self.fair || other.fair,
            read_write: self.read_write || other.read_write,
            semaphore: self.semaphore || other.semaphore,
            election: self.election || other.election,
            fixed_lease: self.fixed_lease || other.fixed_lease,
            holder_process: self.holder_process || other.holder_process,
            inspect: self.inspect || other.inspect,
            loss_notice: self.loss_notice || other.loss_notice,
        }
    }
}

const NOTHING: Needs = Needs {
    fair: false,
    read_write: false,
    semaphore: false,
    election: false,
    fixed_lease: false,
    holder_process: false,
    inspect: false,
    loss_notice: false,
};
const FIXED: Needs = Needs {
    fixed_lease: true,
    ..NOTHING
};
const FAIR: Needs = Needs {
    fair: true,
    ..NOTHING
};
const INSPECT: Needs = Needs {
    inspect: true,
    ..NOTHING
};
const LOSS_NOTICE: Needs = Needs {
    loss_notice: true,
    ..NOTHING
};
const RW: Needs = Needs {
    read_write: true,
    ..NOTHING
};
const SEMAPHORE: Needs = Needs {
    semaphore: true,
    ..NOTHING
};
const ELECTION: Needs = Needs {
    election: true,
    ..NOTHING
};
const PROCESS: Needs = Needs {
    holder_process: true,
    ..NOTHING
};

type CaseFn = Box<dyn for<'a> Fn(&'a Ctx) -> BoxFuture<'a, ()> + Send + Sync>;
type MutexCaseFn = for<'a> fn(&'a Ctx, Flavor) -> BoxFuture<'a, ()>;

/// One conformance case.
pub struct Case {
    /// `group::case`, also part of the case's namespace.
    pub name: String,
    /// What it needs.
    pub needs: Needs,
    /// Whether it runs with no other case beside it: heavy ones (a thousand waiters)
    /// and those that time processes.
    pub alone: bool,
    /// The test.
    pub run: CaseFn,
}

fn case(name: &str, needs: Needs, run: CaseFn) -> Case {
    Case {
        name: name.to_owned(),
        needs,
        alone: name.starts_with("cancel::storm")
            || name.starts_with("process::")
            || name == "multi::overlapping_sets_do_not_deadlock",
        run,
    }
}

/// Lists `mutex::` cases as (name, needs, function) for [`all_cases`].
macro_rules! mutex_cases {
    ($($case:ident: $needs:expr),* $(,)?) => {
        [$(
            (stringify!($case), $needs, (|ctx, flavor| mutex::$case(ctx, flavor).boxed()) as MutexCaseFn),
        )*]
    };
}

/// Every case, in the order they run.
pub fn all_cases() -> Vec<Case> {
    let mutex_cases = mutex_cases![
        mutual_exclusion: NOTHING,
        fencing_tokens_increase: NOTHING,
        try_acquire_fails_fast: NOTHING,
        wait_limit_honoured: NOTHING,
        timed_out_waiter_leaves_nothing: NOTHING,
        waiter_woken_on_release: NOTHING,
        grant_after_long_wait_is_fresh: NOTHING,
        vanished_holder_expires: FIXED,
        stale_guard_of_other_owner_is_refused: FIXED,
        stale_guard_of_same_owner_is_refused: FIXED,
        reentrancy_counts: NOTHING,
        nested_acquire_waits_for_the_holder: NOTHING,
        shared_handle_excludes_tasks: NOTHING,
        joined_acquires_exclude: NOTHING,
        fixed_lease_expires_unrenewed: FIXED,
        extend_moves_expiry: FIXED,
        watchdog_keeps_lock_alive: NOTHING,
        lease_loss_is_reported: NOTHING,
        drop_releases: NOTHING,
        cancelled_acquire_leaves_nothing: NOTHING,
        force_unlock_frees_and_reports: NOTHING,
        is_locked_tracks_state: NOTHING,
    ];
    let mut cases = Vec::new();
    // The mutex contract, on the exclusive lock, the fair lock and the write side of
    // the read-write lock.
    for flavor in [Flavor::Exclusive, Flavor::Fair, Flavor::WriteSide] {
        for (name, needs, run) in mutex_cases {
            cases.push(Case {
                name: format!("{}::{name}", flavor.prefix()),
                needs: flavor.needs().and(needs),
                alone: false,
                run: Box::new(move |ctx| run(ctx, flavor)),
            });
        }
    }
    // Introspection and targeted force-unlock, on each lock type.
    for flavor in [Flavor::Exclusive, Flavor::Fair, Flavor::WriteSide] {
        let prefix = flavor.prefix();
        cases.push(Case {
            name: format!("inspect::{prefix}_holder_token_and_waiters"),
            needs: flavor.needs().and(INSPECT),
            alone: false,
            run: Box::new(move |ctx| inspect::holder_token_and_waiters(ctx, flavor).boxed()),
        });
        cases.push(Case {
            name: format!("inspect::{prefix}_force_unlock_one_holder"),
            needs: flavor.needs().and(INSPECT),
            alone: false,
            run: Box::new(move |ctx| inspect::force_unlock_one_holder(ctx, flavor).boxed()),
        });
    }
    // A lease taken away behind the holder's back, noticed at once.
    for flavor in [Flavor::Exclusive, Flavor::Fair, Flavor::WriteSide] {
        for (kept, lease_needs) in [
            (loss_notice::Kept::Watchdog, NOTHING),
            (loss_notice::Kept::Fixed, FIXED),
        ] {
            let suffix = match kept {
                loss_notice::Kept::Watchdog => "watchdog",
                loss_notice::Kept::Fixed => "fixed",
            };
            cases.push(Case {
                name: format!(
                    "loss_notice::{}_force_unlock_is_noticed_{suffix}",
                    flavor.prefix()
                ),
                needs: flavor.needs().and(LOSS_NOTICE).and(lease_needs),
                alone: false,
                run: Box::new(move |ctx| {
                    loss_notice::force_unlock_is_noticed(ctx, flavor, kept).boxed()
                }),
            });
        }
    }
    cases.extend([
        case(
            "inspect::readers_are_listed",
            RW.and(INSPECT),
            Box::new(|ctx| inspect::readers_are_listed(ctx).boxed()),
        ),
        case(
            "fair::fifo_order",
            FAIR,
            Box::new(|ctx| fair::fifo_order(ctx).boxed()),
        ),
        case(
            "fair::cancelled_waiter_is_skipped",
            FAIR,
            Box::new(|ctx| fair::cancelled_waiter_is_skipped(ctx).boxed()),
        ),
        case(
            "fair::tokens_follow_grant_order_across_kinds",
            FAIR,
            Box::new(|ctx| fair::tokens_follow_grant_order_across_kinds(ctx).boxed()),
        ),
        case(
            "rw::readers_share",
            RW,
            Box::new(|ctx| rwlock::readers_share(ctx).boxed()),
        ),
        case(
            "rw::writer_excludes_everyone",
            RW,
            Box::new(|ctx| rwlock::writer_excludes_everyone(ctx).boxed()),
        ),
        case(
            "rw::writer_waits_for_readers",
            RW,
            Box::new(|ctx| rwlock::writer_waits_for_readers(ctx).boxed()),
        ),
        case(
            "rw::downgrade",
            RW,
            Box::new(|ctx| rwlock::downgrade(ctx).boxed()),
        ),
        case(
            "rw::downgrade_twice",
            RW,
            Box::new(|ctx| rwlock::downgrade_twice(ctx).boxed()),
        ),
        case(
            "rw::downgrade_after_dropping_the_read_side",
            RW,
            Box::new(|ctx| rwlock::downgrade_after_dropping_the_read_side(ctx).boxed()),
        ),
        case(
            "rw::downgrade_with_queued_writer",
            RW,
            Box::new(|ctx| rwlock::downgrade_with_queued_writer(ctx).boxed()),
        ),
        case(
            "rw::no_upgrade",
            RW,
            Box::new(|ctx| rwlock::no_upgrade(ctx).boxed()),
        ),
        case(
            "rw::readers_never_see_a_writer",
            RW,
            Box::new(|ctx| rwlock::readers_never_see_a_writer(ctx).boxed()),
        ),
        case(
            "rw::cancelled_writer_leaves_nothing",
            RW,
            Box::new(|ctx| rwlock::cancelled_writer_leaves_nothing(ctx).boxed()),
        ),
        case(
            "election::one_leader_at_a_time",
            ELECTION,
            Box::new(|ctx| election::one_leader_at_a_time(ctx).boxed()),
        ),
        case(
            "election::candidates_lead_in_the_order_they_came",
            ELECTION,
            Box::new(|ctx| election::candidates_lead_in_the_order_they_came(ctx).boxed()),
        ),
        case(
            "election::value_proclaim_and_resign",
            ELECTION,
            Box::new(|ctx| election::value_proclaim_and_resign(ctx).boxed()),
        ),
        case(
            "election::lost_leadership_refuses_proclaim",
            ELECTION,
            Box::new(|ctx| election::lost_leadership_refuses_proclaim(ctx).boxed()),
        ),
        case(
            "election::observe_sees_every_change_in_order",
            ELECTION,
            Box::new(|ctx| election::observe_sees_every_change_in_order(ctx).boxed()),
        ),
        case(
            "semaphore::never_more_than_n_holders",
            SEMAPHORE,
            Box::new(|ctx| semaphore::never_more_than_n_holders(ctx).boxed()),
        ),
        case(
            "semaphore::fifo_order",
            SEMAPHORE,
            Box::new(|ctx| semaphore::fifo_order(ctx).boxed()),
        ),
        case(
            "semaphore::try_and_wait_limit",
            SEMAPHORE,
            Box::new(|ctx| semaphore::try_and_wait_limit(ctx).boxed()),
        ),
        case(
            "semaphore::waiter_woken_on_release",
            SEMAPHORE,
            Box::new(|ctx| semaphore::waiter_woken_on_release(ctx).boxed()),
        ),
        case(
            "semaphore::expired_permit_is_freed_and_stale_guard_refused",
            SEMAPHORE.and(FIXED),
            Box::new(|ctx| semaphore::expired_permit_is_freed_and_stale_guard_refused(ctx).boxed()),
        ),
        case(
            "semaphore::other_count_is_refused",
            SEMAPHORE,
            Box::new(|ctx| semaphore::other_count_is_refused(ctx).boxed()),
        ),
        case(
            "semaphore::cancelled_waiter_leaves_nothing",
            SEMAPHORE,
            Box::new(|ctx| semaphore::cancelled_waiter_leaves_nothing(ctx).boxed()),
        ),
        case(
            "semaphore::tokens_increase",
            SEMAPHORE,
            Box::new(|ctx| semaphore::tokens_increase(ctx).boxed()),
        ),
        case(
            "semaphore::holders_listed_and_broken_one_at_a_time",
            SEMAPHORE.and(INSPECT),
            Box::new(|ctx| semaphore::holders_listed_and_broken_one_at_a_time(ctx).boxed()),
        ),
        case(
            "semaphore::multi_lock_with_a_permit",
            SEMAPHORE,
            Box::new(|ctx| semaphore::multi_lock_with_a_permit(ctx).boxed()),
        ),
        case(
            "cancel::storm_exclusive",
            NOTHING,
            Box::new(|ctx| cancel::storm(ctx, Storm::Exclusive).boxed()),
        ),
        case(
            "cancel::storm_fair",
            FAIR,
            Box::new(|ctx| cancel::storm(ctx, Storm::Fair).boxed()),
        ),
        case(
            "cancel::storm_write",
            RW,
            Box::new(|ctx| cancel::storm(ctx, Storm::Write).boxed()),
        ),
        case(
            "cancel::storm_read",
            RW,
            Box::new(|ctx| cancel::storm(ctx, Storm::Read).boxed()),
        ),
        case(
            "cancel::shutdown_beside_an_acquire_polled_once",
            NOTHING,
            Box::new(|ctx| cancel::shutdown_beside_an_acquire_polled_once(ctx).boxed()),
        ),
        case(
            "args::invalid_names",
            NOTHING,
            Box::new(|ctx| args::invalid_names(ctx).boxed()),
        ),
        case(
            "args::invalid_durations_keep_holds",
            NOTHING,
            Box::new(|ctx| args::invalid_durations_keep_holds(ctx).boxed()),
        ),
        case(
            "args::invalid_client_options",
            NOTHING,
            Box::new(|ctx| args::invalid_client_options(ctx).boxed()),
        ),
        case(
            "args::hostile_names",
            NOTHING,
            Box::new(|ctx| args::hostile_names(ctx).boxed()),
        ),
        case(
            "args::nested_names_do_not_block",
            NOTHING,
            Box::new(|ctx| args::nested_names_do_not_block(ctx).boxed()),
        ),
        case(
            "args::namespaces_isolated",
            NOTHING,
            Box::new(|ctx| args::namespaces_isolated(ctx).boxed()),
        ),
        case(
            "args::lock_kinds_are_separate",
            NOTHING,
            Box::new(|ctx| args::lock_kinds_are_separate(ctx).boxed()),
        ),
        case(
            "multi::overlapping_sets_do_not_deadlock",
            NOTHING,
            Box::new(|ctx| multi::overlapping_sets_do_not_deadlock(ctx).boxed()),
        ),
        case(
            "multi::mixed_kinds",
            FAIR.and(RW),
            Box::new(|ctx| multi::mixed_kinds(ctx).boxed()),
        ),
        case(
            "multi::held_member_fails_the_whole",
            NOTHING,
            Box::new(|ctx| multi::held_member_fails_the_whole(ctx).boxed()),
        ),
        case(
            "multi::member_loss_is_reported",
            NOTHING,
            Box::new(|ctx| multi::member_loss_is_reported(ctx).boxed()),
        ),
        case(
            "multi::cancelled_acquire_leaves_nothing",
            NOTHING,
            Box::new(|ctx| multi::cancelled_acquire_leaves_nothing(ctx).boxed()),
        ),
        case(
            "multi::fixed_lease_counts_from_the_last_grant",
            FIXED,
            Box::new(|ctx| multi::fixed_lease_counts_from_the_last_grant(ctx).boxed()),
        ),
        case(
            "multi::reentry_through_the_guard",
            NOTHING,
            Box::new(|ctx| multi::reentry_through_the_guard(ctx).boxed()),
        ),
        case(
            "multi::unsupported_refused_before_anything_is_taken",
            NOTHING,
            Box::new(|ctx| multi::unsupported_refused_before_anything_is_taken(ctx).boxed()),
        ),
        case(
            "process::killed_holder_frees_lock",
            PROCESS,
            Box::new(|ctx| process::killed_holder_frees_lock(ctx).boxed()),
        ),
        case(
            "process::killed_permit_holder_frees_its_permit",
            PROCESS.and(SEMAPHORE),
            Box::new(|ctx| process::killed_permit_holder_frees_its_permit(ctx).boxed()),
        ),
        case(
            "process::killed_leader_process_is_replaced",
            PROCESS.and(ELECTION),
            Box::new(|ctx| process::killed_leader_process_is_replaced(ctx).boxed()),
        ),
        case(
            "process::timed_out_waiter_process_leaves_nothing",
            PROCESS,
            Box::new(|ctx| process::timed_out_waiter_process_leaves_nothing(ctx).boxed()),
        ),
        case(
            "process::shutdown_before_exit_leaves_nothing",
            PROCESS,
            Box::new(|ctx| process::shutdown_before_exit_leaves_nothing(ctx).boxed()),
        ),
    ]);
    cases
}

#[cfg(test)]
mod tests {
    #[test]
    fn case_names_are_unique() {
        let cases = super::all_cases();
        let mut names: Vec<_> = cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len());
    }
}
