//! The mutex contract: exclusion, fencing, waiting, leases, ownership, reentrancy,
//! loss reporting and cancel safety. Each case takes the lock type as a [`Flavor`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, LeaseLoss, LockKey, LockName, Namespace};
use tokio::time::Instant;

use super::flavor::Flavor;
use crate::check::{expect_err, got, is_lease_lost, is_timeout, ok, refused, settle, within};
use crate::log_capture;
use crate::runner::Ctx;

const NAME: &str = "subject";

fn key(ctx: &Ctx) -> LockKey {
    LockKey::new(
        Namespace::new(ctx.namespace()).expect("valid namespace"),
        LockName::new(NAME).expect("valid name"),
    )
}

/// Many clients update a shared counter by read, pause, write under the lock: the
/// count ends exact, no two are ever inside at once, and the fencing tokens seen inside
/// strictly increase.
pub(crate) async fn mutual_exclusion(ctx: &Ctx, flavor: Flavor) {
    const WORKERS: u64 = 6;
    const ROUNDS: u64 = 15;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let lock = flavor.lock(&*ctx.client().await, NAME);
        let (counter, inside, fences) = (counter.clone(), inside.clone(), fences.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = ok("acquire", lock.acquire().await);
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                fences.lock().unwrap().push(guard.fencing_token());
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                ok("release", guard.release().await);
            }
        }));
    }
    let limit = ctx.slack() * 30;
    for task in tasks {
        within("workers", limit, task)
            .await
            .0
            .expect("worker panicked");
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        WORKERS * ROUNDS,
        "lost updates"
    );
    let fences = fences.lock().unwrap();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not strictly increasing in lock order: {fences:?}"
    );
}

/// Tokens strictly increase across owners and clients; a re-entry through the guard
/// shares its acquisition's token.
pub(crate) async fn fencing_tokens_increase(ctx: &Ctx, flavor: Flavor) {
    let a = flavor.lock(&*ctx.client().await, NAME);
    let b = flavor.lock(&*ctx.client().await, NAME);
    let mut last = 0;
    for round in 0..6 {
        let lock = if round % 2 == 0 { &a } else { &b };
        let guard = ok("acquire", lock.acquire().await);
        let again = ok("re-enter", guard.reenter());
        assert_eq!(
            again.fencing_token(),
            guard.fencing_token(),
            "re-entry got a new token"
        );
        assert!(
            guard.fencing_token() > last,
            "token {} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        ok("release re-entry", again.release().await);
        ok("release", guard.release().await);
    }
}

/// A single try on a held lock returns at once without the lock.
pub(crate) async fn try_acquire_fails_fast(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let (result, took) = within("try", ctx.slack(), other.try_acquire()).await;
    refused("try while held", result);
    assert!(took < ctx.slack(), "a single try took {took:?}");
    let err = expect_err(
        "acquire_with(try_once)",
        other.acquire_with(AcquireOptions::try_once()).await,
        is_timeout,
    );
    assert!(err.is_retryable());
    ok("release", guard.release().await);
    got("try after release", other.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// Waiting with a limit on a held lock fails with a timeout no earlier than the limit
/// and not much later.
pub(crate) async fn wait_limit_honoured(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let limit = Duration::from_millis(400);
    let started = Instant::now();
    let result = other.acquire_timeout(limit).await;
    let took = started.elapsed();
    expect_err("acquire_timeout while held", result, is_timeout);
    assert!(
        took >= limit,
        "gave up after {took:?}, before the {limit:?} limit"
    );
    assert!(
        took <= limit + ctx.slack(),
        "gave up after {took:?} for a {limit:?} limit"
    );
    assert!(guard.is_held(), "the holder lost the lock");
    ok("release", guard.release().await);
}

/// A waiter whose limit ran out has left the queue by the time it hears `Timeout`: a
/// program that ends right after must not leave a place (a node, a key, a ticket)
/// queued ahead of everyone until its session or lease runs out.
pub(crate) async fn timed_out_waiter_leaves_nothing(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let guard = got("holder", holder.try_acquire().await);
    let before = ctx.leftovers().await;
    let waiter = flavor.lock(&*ctx.client().await, NAME);
    let result = waiter.acquire_timeout(Duration::from_millis(300)).await;
    expect_err("acquire_timeout while held", result, is_timeout);
    assert_eq!(
        ctx.leftovers().await,
        before,
        "the timed-out waiter left its place behind"
    );
    ok("release", guard.release().await);
}

/// A waiter is handed the lock soon after the release, by notification: well before
/// the holder's lease (10 s here) would have run out.
pub(crate) async fn waiter_woken_on_release(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let waiter = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let first = guard.fencing_token();
    let wait = tokio::spawn(async move {
        let guard = waiter.acquire_timeout(Duration::from_secs(30)).await;
        (guard, Instant::now())
    });
    settle().await;
    let released = Instant::now();
    ok("release", guard.release().await);
    let (joined, _) = within("waiter", ctx.slack() * 2, wait).await;
    let (result, acquired) = joined.expect("waiter task");
    let next = ok("waiter acquire", result);
    let handoff = acquired - released;
    assert!(
        handoff < ctx.slack(),
        "handoff took {handoff:?}: not woken by the release"
    );
    assert!(next.fencing_token() > first);
    ok("release", next.release().await);
}

/// A waiter granted the lock after waiting longer than its own lease gets a live
/// lease, counted from the grant rather than from the start of the wait, and the
/// watchdog keeps it.
pub(crate) async fn grant_after_long_wait_is_fresh(ctx: &Ctx, flavor: Flavor) {
    let lease = ctx.short_lease();
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let waiter = flavor.lock(&*ctx.client_with(ctx.namespace(), lease).await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let limit = lease * 10 + ctx.slack() * 2;
    let wait = tokio::spawn(async move { waiter.acquire_timeout(limit).await });
    tokio::time::sleep(lease * 2).await;
    ok("release", guard.release().await);
    let (joined, _) = within("waiter", limit, wait).await;
    let granted = ok("waiter acquire", joined.expect("waiter task"));
    assert!(
        granted.is_held(),
        "a grant after a wait longer than the lease came back expired"
    );
    tokio::time::sleep(lease * 2).await;
    assert!(
        granted.is_held(),
        "the watchdog let a lease granted after a long wait lapse"
    );
    refused("other while held", other.try_acquire().await);
    ok("release", granted.release().await);
}

/// A holder that vanishes without releasing (its guard forgotten, nothing renews a
/// fixed lease) blocks others only until its lease runs out.
pub(crate) async fn vanished_holder_expires(ctx: &Ctx, flavor: Flavor) {
    let lease = ctx.short_lease();
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = with_fixed_lease("acquire", &holder, lease).await;
    let first = guard.fencing_token();
    let acquired_at = Instant::now();
    std::mem::forget(guard);
    let next = ok(
        "acquire after the holder vanished",
        other.acquire_timeout(lease + ctx.slack() * 2).await,
    );
    let took = acquired_at.elapsed();
    assert!(
        took <= lease + ctx.slack(),
        "freed after {took:?} for a {lease:?} lease"
    );
    assert!(next.fencing_token() > first);
    ok("release", next.release().await);
}

/// Acquires `lock` with a fixed lease of `lease` (waiting as long as it takes).
async fn with_fixed_lease(
    what: &str,
    lock: &Arc<dyn DistributedLock>,
    lease: Duration,
) -> lock_core::LockGuard {
    ok(
        what,
        lock.acquire_with(AcquireOptions::wait_forever().lease(lease))
            .await,
    )
}

/// Waits until `guard`'s fixed lease has run out as the client sees it.
async fn wait_out(ctx: &Ctx, guard: &lock_core::LockGuard) {
    let (loss, _) = within("lease end", ctx.short_lease() + ctx.slack(), guard.lost()).await;
    assert_eq!(loss, LeaseLoss::Expired);
    assert!(!guard.is_held());
}

/// A guard whose lease expired and whose lock another owner took cannot extend or
/// release that owner's lock.
pub(crate) async fn stale_guard_of_other_owner_is_refused(ctx: &Ctx, flavor: Flavor) {
    let lease = ctx.short_lease();
    let a = flavor.lock(&*ctx.client().await, NAME);
    let b = flavor.lock(&*ctx.client().await, NAME);
    let c = flavor.lock(&*ctx.client().await, NAME);
    let stale = with_fixed_lease("a acquires", &a, lease).await;
    wait_out(ctx, &stale).await;
    let current = ok("b acquires", b.acquire_timeout(ctx.slack() * 2).await);
    expect_err(
        "stale extend",
        stale.extend(Duration::from_secs(60)).await,
        is_lease_lost,
    );
    expect_err("stale release", stale.release().await, is_lease_lost);
    assert!(current.is_held(), "the new holder lost its lease");
    assert!(
        ok("is_locked", c.is_locked().await),
        "the stale guard unlocked the new holder"
    );
    refused("c tries", c.try_acquire().await);
    ok("b releases", current.release().await);
}

/// Same as above with the stale guard and the new lease both acquired through one
/// handle: the stale guard must not touch the newer acquisition.
pub(crate) async fn stale_guard_of_same_owner_is_refused(ctx: &Ctx, flavor: Flavor) {
    let lease = ctx.short_lease();
    let owner = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let stale = with_fixed_lease("first acquire", &owner, lease).await;
    wait_out(ctx, &stale).await;
    let current = ok("second acquire", owner.acquire_timeout(ctx.slack()).await);
    assert!(
        current.fencing_token() > stale.fencing_token(),
        "expired lease was re-entered"
    );
    assert_eq!(owner.hold_count(), 1);
    expect_err(
        "stale extend",
        stale.extend(Duration::from_secs(60)).await,
        is_lease_lost,
    );
    expect_err("stale release", stale.release().await, is_lease_lost);
    assert!(current.is_held());
    assert_eq!(
        owner.hold_count(),
        1,
        "the stale release changed the hold count"
    );
    refused("other tries", other.try_acquire().await);
    ok("release", current.release().await);
    got("other after release", other.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// Re-entry through the guard: no wait, further guards on the one acquisition, and the
/// lock freed at the last release. Another acquire through the same handle, a clone of
/// it or another handle of the same client is another owner, and is refused.
pub(crate) async fn reentrancy_counts(ctx: &Ctx, flavor: Flavor) {
    let client = ctx.client().await;
    let handle = flavor.lock(&*client, NAME);
    let clone = handle.clone();
    let other = flavor.lock(&*client, NAME);
    assert_eq!(handle.hold_count(), 0);
    let first = ok("acquire", handle.acquire().await);
    let second = ok("re-enter", first.reenter());
    let third = ok("re-enter the re-entry", second.reenter());
    assert_eq!(handle.hold_count(), 3);
    assert_eq!(clone.hold_count(), 3, "a clone shares the hold count");
    assert!(handle.is_held_by_me());
    refused("the same handle again", handle.try_acquire().await);
    refused("a clone of the handle", clone.try_acquire().await);
    refused(
        "another handle of the same client",
        other.try_acquire().await,
    );
    assert_eq!(handle.hold_count(), 3, "refused tries changed the count");
    ok("release 1", first.release().await);
    ok("release 2", second.release().await);
    assert_eq!(handle.hold_count(), 1);
    refused("still held once", other.try_acquire().await);
    ok("release 3", third.release().await);
    assert_eq!(handle.hold_count(), 0);
    got("free after the last release", other.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// An acquire by code that already holds, through the same handle, waits for the
/// holder like any other owner (re-entry goes through the guard): it ends at its wait
/// limit, and the holder's guard is untouched.
pub(crate) async fn nested_acquire_waits_for_the_holder(ctx: &Ctx, flavor: Flavor) {
    let handle = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", handle.acquire().await);
    let limit = Duration::from_millis(300);
    let (nested, took) = within(
        "nested acquire",
        limit + ctx.slack(),
        handle.acquire_timeout(limit),
    )
    .await;
    expect_err("nested acquire", nested, is_timeout);
    assert!(took >= limit, "gave up after {took:?}");
    assert!(guard.is_held());
    assert_eq!(handle.hold_count(), 1);
    let inner = ok("re-enter through the guard", guard.reenter());
    ok("release inner", inner.release().await);
    ok("release", guard.release().await);
    assert!(!ok("is_locked", handle.is_locked().await));
}

/// A fixed lease ends on its own and is not renewed: the guard says so, and another
/// owner gets the lock.
pub(crate) async fn fixed_lease_expires_unrenewed(ctx: &Ctx, flavor: Flavor) {
    let lease = ctx.short_lease();
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = with_fixed_lease("acquire", &holder, lease).await;
    assert!(guard.is_held());
    wait_out(ctx, &guard).await;
    assert_eq!(
        holder.hold_count(),
        0,
        "an expired lease still counts as held"
    );
    let next = ok("other acquires", other.acquire_timeout(ctx.slack()).await);
    assert!(next.fencing_token() > guard.fencing_token());
    expect_err("release after expiry", guard.release().await, is_lease_lost);
    assert!(next.is_held());
    ok("release", next.release().await);
}

/// Extending a lease moves its end: the lock stays held past the first expiry.
pub(crate) async fn extend_moves_expiry(ctx: &Ctx, flavor: Flavor) {
    let lease = ctx.short_lease();
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = with_fixed_lease("acquire", &holder, lease).await;
    ok("extend", guard.extend(lease * 4 + ctx.slack() * 2).await);
    tokio::time::sleep(lease * 2).await;
    assert!(guard.is_held(), "lease ended despite the extension");
    refused("other after the first expiry", other.try_acquire().await);
    ok("release", guard.release().await);
    got("other after release", other.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// With the watchdog, a lock outlives several watchdog leases until released.
pub(crate) async fn watchdog_keeps_lock_alive(ctx: &Ctx, flavor: Flavor) {
    let watchdog_lease = ctx.short_lease();
    let client = ctx.client_with(ctx.namespace(), watchdog_lease).await;
    let holder = flavor.lock(&*client, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    for round in 0..4 {
        tokio::time::sleep(watchdog_lease).await;
        assert!(
            guard.is_held(),
            "lease not renewed (after {} leases)",
            round + 1
        );
        refused("other while renewed", other.try_acquire().await);
    }
    ok("release", guard.release().await);
    got("other after release", other.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// A lease that vanishes from the backend is reported to its guard within the
/// watchdog lease: the loss future resolves and `is_held` turns false.
pub(crate) async fn lease_loss_is_reported(ctx: &Ctx, flavor: Flavor) {
    let watchdog_lease = ctx.short_lease();
    let client = ctx.client_with(ctx.namespace(), watchdog_lease).await;
    let holder = flavor.lock(&*client, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let lost = tokio::spawn(guard.lost());
    if let Err(err) = ctx.backend().revoke(&key(ctx), flavor.family()).await {
        panic!("revoke hook failed: {err}");
    }
    let (loss, _) = within("loss report", watchdog_lease + ctx.slack(), lost).await;
    let loss = loss.expect("loss watcher");
    assert_ne!(loss, LeaseLoss::Released, "reported as released");
    assert!(!guard.is_held());
    loss_is_logged(ctx, flavor, guard.fencing_token()).await;
    assert_eq!(holder.hold_count(), 0);
    expect_err("re-enter after loss", guard.reenter(), is_lease_lost);
    expect_err("release after loss", guard.release().await, is_lease_lost);
    let other = flavor.lock(&*ctx.client().await, NAME);
    got("other after loss", other.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// The log's warning of a lost lease names the lock, its backend, kind, owner, token
/// and the reason, whichever backend noticed the loss.
async fn loss_is_logged(ctx: &Ctx, flavor: Flavor, token: u64) {
    assert!(
        log_capture::capturing(),
        "warnings are not recorded: a tracing subscriber was set before the suite's"
    );
    let lock = key(ctx).to_string();
    let warning = log_capture::expect_warning(&lock, "lease lost", ctx.slack()).await;
    let kind = match flavor {
        Flavor::Exclusive => "exclusive",
        Flavor::Fair => "fair",
        Flavor::WriteSide => "write",
    };
    assert_eq!(warning.field("kind"), Some(kind), "{warning:?}");
    assert_eq!(
        warning.field("token"),
        Some(token.to_string().as_str()),
        "{warning:?}"
    );
    warning.assert_has(&["backend", "owner", "reason"]);
}

/// Dropping the last guard without `release` frees the lock soon (spawned release).
pub(crate) async fn drop_releases(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let other = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let extra = ok("re-enter", guard.reenter());
    drop(extra);
    assert_eq!(
        holder.hold_count(),
        1,
        "dropping a re-entry must only count down"
    );
    refused("still held", other.try_acquire().await);
    drop(guard);
    let (next, took) = within("acquire after drop", ctx.slack() * 2, other.acquire()).await;
    assert!(took < ctx.slack(), "freed {took:?} after the drop");
    ok("release", ok("acquire after drop", next).release().await);
}

/// An acquire dropped while waiting leaves nothing behind: after the holder releases,
/// a newcomer gets the lock at once, and the cancelled owner holds nothing.
pub(crate) async fn cancelled_acquire_leaves_nothing(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let cancelled = flavor.lock(&*ctx.client().await, NAME);
    let newcomer = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    for _ in 0..3 {
        let attempt = tokio::time::timeout(Duration::from_millis(150), cancelled.acquire()).await;
        assert!(attempt.is_err(), "acquired a held lock");
    }
    assert_eq!(cancelled.hold_count(), 0);
    ok("release", guard.release().await);
    let (next, took) = within("newcomer", ctx.slack() * 2, newcomer.acquire()).await;
    assert!(
        took < ctx.slack(),
        "a cancelled waiter held things up for {took:?}"
    );
    let next = ok("newcomer", next);
    assert_eq!(
        cancelled.hold_count(),
        0,
        "the cancelled owner holds the lock"
    );
    ok("release", next.release().await);
    got("cancelled owner later", cancelled.try_acquire().await)
        .release()
        .await
        .expect("release");
}

/// An operator's force-unlock frees the lock for others and the holder learns of it.
pub(crate) async fn force_unlock_frees_and_reports(ctx: &Ctx, flavor: Flavor) {
    let watchdog_lease = ctx.short_lease();
    let client = ctx.client_with(ctx.namespace(), watchdog_lease).await;
    let holder = flavor.lock(&*client, NAME);
    let operator = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    assert!(
        ok("force unlock", operator.force_unlock().await),
        "reported nothing held"
    );
    assert!(!ok("force unlock again", operator.force_unlock().await));
    let next = got("acquire after force unlock", operator.try_acquire().await);
    let (loss, _) = within("loss report", watchdog_lease + ctx.slack(), guard.lost()).await;
    assert_ne!(loss, LeaseLoss::Released);
    expect_err(
        "release after force unlock",
        guard.release().await,
        is_lease_lost,
    );
    assert!(
        next.is_held(),
        "the old holder's release touched the new lease"
    );
    ok("release", next.release().await);
}

/// `is_locked` follows acquire and release, for any observer.
pub(crate) async fn is_locked_tracks_state(ctx: &Ctx, flavor: Flavor) {
    let holder = flavor.lock(&*ctx.client().await, NAME);
    let observer = flavor.lock(&*ctx.client().await, NAME);
    assert!(!ok("is_locked", observer.is_locked().await));
    let guard = ok("acquire", holder.acquire().await);
    assert!(ok("is_locked", observer.is_locked().await));
    assert!(ok("is_locked", holder.is_locked().await));
    assert_eq!(observer.hold_count(), 0);
    ok("release", guard.release().await);
    assert!(!ok("is_locked", observer.is_locked().await));
}

/// Tasks and joined futures that share one lock.
const SHARERS: u64 = 16;
/// Rounds each sharer takes the lock.
const SHARED_ROUNDS: u64 = 5;

/// One round of a sharer: take the lock, read the counter, let others run, write it
/// back one higher. Exclusion makes the final count exact.
async fn increment_under(lock: &dyn DistributedLock, counter: &AtomicU64, inside: &AtomicU32) {
    let guard = ok("acquire", lock.acquire().await);
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two acquisitions of one shared handle inside at once"
    );
    let seen = counter.load(Ordering::SeqCst);
    tokio::task::yield_now().await;
    counter.store(seen + 1, Ordering::SeqCst);
    inside.fetch_sub(1, Ordering::SeqCst);
    ok("release", guard.release().await);
}

/// Tasks sharing one handle (an `Arc<dyn DistributedLock>` and its clones) exclude
/// each other: sharing a handle is not re-entry.
pub(crate) async fn shared_handle_excludes_tasks(ctx: &Ctx, flavor: Flavor) {
    let lock = flavor.lock(&*ctx.client().await, NAME);
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..SHARERS {
        let (lock, counter, inside) = (lock.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..SHARED_ROUNDS {
                increment_under(&*lock, &counter, &inside).await;
            }
        }));
    }
    for task in tasks {
        within("sharing tasks", ctx.slack() * 30, task)
            .await
            .0
            .expect("sharing task panicked");
    }
    assert_eq!(counter.load(Ordering::SeqCst), SHARERS * SHARED_ROUNDS);
}

/// Futures joined in one task, all on one handle, exclude each other too.
pub(crate) async fn joined_acquires_exclude(ctx: &Ctx, flavor: Flavor) {
    let lock = flavor.lock(&*ctx.client().await, NAME);
    let counter = AtomicU64::new(0);
    let inside = AtomicU32::new(0);
    let sharers = (0..SHARERS).map(|_| async {
        for _ in 0..SHARED_ROUNDS {
            increment_under(&*lock, &counter, &inside).await;
        }
    });
    within(
        "joined acquires",
        ctx.slack() * 30,
        futures::future::join_all(sharers),
    )
    .await;
    assert_eq!(counter.load(Ordering::SeqCst), SHARERS * SHARED_ROUNDS);
}
