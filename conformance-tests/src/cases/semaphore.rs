//! Semaphore cases: at most N holders, request order, the count checked, permits
//! leased, fenced and freed like locks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, LeaseLoss, LockGuard, MultiLock};

use crate::check::{
    expect_err, got, is_invalid, is_lease_lost, is_timeout, ok, refused, settle, within,
};
use crate::runner::Ctx;

const NAME: &str = "permits";

async fn semaphore(ctx: &Ctx, permits: u32) -> Arc<dyn Semaphore> {
    ok("semaphore", ctx.client().await.semaphore(NAME, permits))
}

/// Takes every permit of `sem`, one guard each.
async fn take_all(sem: &Arc<dyn Semaphore>) -> Vec<LockGuard> {
    let mut guards = Vec::new();
    for i in 0..sem.permits() {
        guards.push(got(&format!("permit {i}"), sem.try_acquire().await));
    }
    guards
}

/// Tasks of several clients loop taking a permit: never more than N hold at once, and
/// the permits are held side by side.
pub(crate) async fn never_more_than_n_holders(ctx: &Ctx) {
    const PERMITS: u32 = 3;
    const CLIENTS: usize = 3;
    const TASKS: usize = 3;
    const ROUNDS: usize = 4;
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let sem = semaphore(ctx, PERMITS).await;
        for _ in 0..TASKS {
            let (sem, in_use, most, tokens) =
                (sem.clone(), in_use.clone(), most.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = ok(
                        "acquire",
                        sem.acquire_timeout(Duration::from_secs(60)).await,
                    );
                    let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(
                        now <= PERMITS as usize,
                        "{now} holders of {PERMITS} permits"
                    );
                    tokens.lock().unwrap().push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    assert!(guard.is_held(), "a permit was lost while held");
                    in_use.fetch_sub(1, Ordering::SeqCst);
                    ok("release", guard.release().await);
                }
            }));
        }
    }
    for task in tasks {
        within("holders", ctx.slack() * 30, task)
            .await
            .0
            .expect("holder task");
    }
    assert!(
        most.load(Ordering::SeqCst) > 1,
        "permits were never held side by side"
    );
    let mut tokens = tokens.lock().unwrap().clone();
    let all = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), all, "two grants had one fencing token");
}

/// Waiters queued one after another are granted in that order, and a single try does
/// not overtake them.
pub(crate) async fn fifo_order(ctx: &Ctx) {
    const WAITERS: usize = 4;
    let sem = semaphore(ctx, 2).await;
    let mut held = take_all(&sem).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let sem = semaphore(ctx, 2).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = ok("waiter", sem.acquire_timeout(Duration::from_secs(60)).await);
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(50)).await;
            ok("waiter release", guard.release().await);
        }));
        // Let this waiter queue before the next one asks.
        settle().await;
    }
    // One permit goes round the queue (the other stays held), so the waiters are
    // admitted one at a time and their order shows.
    let newcomer = semaphore(ctx, 2).await;
    ok("release", held.pop().expect("a permit").release().await);
    refused(
        "a newcomer overtakes the queue",
        newcomer.try_acquire().await,
    );
    for task in tasks {
        within("waiters", ctx.slack() * 10, task)
            .await
            .0
            .expect("waiter task");
    }
    ok("release", held.pop().expect("a permit").release().await);
    assert_eq!(
        *order.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "not granted in request order"
    );
}

/// A single try takes a free permit and is refused at once when none is free; a wait
/// with a limit ends in `Timeout` near its limit; `available` counts free permits.
pub(crate) async fn try_and_wait_limit(ctx: &Ctx) {
    let sem = semaphore(ctx, 2).await;
    assert_eq!(ok("available", sem.available().await), 2);
    let held = take_all(&sem).await;
    assert_eq!(ok("available", sem.available().await), 0);
    let (refusal, took) = within("try", ctx.slack(), sem.try_acquire()).await;
    refused("try with no permit free", refusal);
    assert!(took < ctx.slack(), "a single try took {took:?}");
    let limit = Duration::from_millis(400);
    let (waited, took) = within("wait", limit + ctx.slack(), sem.acquire_timeout(limit)).await;
    expect_err("wait with no permit free", waited, is_timeout);
    assert!(
        took >= limit,
        "gave up after {took:?}, before its limit {limit:?}"
    );
    assert_eq!(sem.hold_count(), 2);
    for guard in held {
        ok("release", guard.release().await);
    }
    assert_eq!(ok("available", sem.available().await), 2);
}

/// A release wakes a waiter promptly.
pub(crate) async fn waiter_woken_on_release(ctx: &Ctx) {
    let sem = semaphore(ctx, 1).await;
    let waiter = semaphore(ctx, 1).await;
    let guard = ok("acquire", sem.acquire().await);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire_timeout(Duration::from_secs(60)).await;
        (guard, tokio::time::Instant::now())
    });
    settle().await;
    let released_at = tokio::time::Instant::now();
    ok("release", guard.release().await);
    let (joined, _) = within("waiter", ctx.slack() * 2, waiting).await;
    let (next, granted_at) = joined.expect("task");
    let next = ok("waiter", next);
    let took = granted_at - released_at;
    assert!(
        took < ctx.slack(),
        "the waiter was granted {took:?} after the release"
    );
    ok("release", next.release().await);
}

/// A fixed lease runs out on its own and frees its permit for a waiter; the stale
/// guard can then neither extend nor release the newer holder's permit.
pub(crate) async fn expired_permit_is_freed_and_stale_guard_refused(ctx: &Ctx) {
    let lease = ctx.short_lease();
    let sem = semaphore(ctx, 1).await;
    let other = semaphore(ctx, 1).await;
    let stale = ok(
        "acquire",
        sem.acquire_with(AcquireOptions::wait_forever().lease(lease))
            .await,
    );
    let (next, _) = within(
        "waiter",
        lease + ctx.slack() * 2,
        other.acquire_timeout(lease + ctx.slack()),
    )
    .await;
    let next = ok("waiter after the lease ran out", next);
    let (loss, _) = within("stale guard notices", ctx.slack(), stale.lost()).await;
    assert_eq!(loss, LeaseLoss::Expired);
    assert!(next.fencing_token() > stale.fencing_token());
    expect_err(
        "stale extend",
        stale.extend(Duration::from_secs(60)).await,
        is_lease_lost,
    );
    expect_err("stale release", stale.release().await, is_lease_lost);
    assert!(next.is_held(), "the new holder lost its permit");
    refused("the permit is still taken", sem.try_acquire().await);
    ok("release", next.release().await);
}

/// Two handles that disagree on the count: the second is refused while the first's
/// holders (or waiters) are there, and may set its own count once they are gone.
pub(crate) async fn other_count_is_refused(ctx: &Ctx) {
    let two = semaphore(ctx, 2).await;
    let three = semaphore(ctx, 3).await;
    let held = got("first", two.try_acquire().await);
    expect_err("another count, try", three.try_acquire().await, is_invalid);
    expect_err(
        "another count, wait",
        three.acquire_timeout(Duration::from_millis(300)).await,
        is_invalid,
    );
    assert_eq!(two.hold_count(), 1, "the refusal touched the holder");
    assert!(held.is_held());
    ok("release", held.release().await);
    let now_three = got("the count set anew", three.try_acquire().await);
    expect_err("the old count now", two.try_acquire().await, is_invalid);
    ok("release", now_three.release().await);
}

/// A waiter whose acquire is dropped leaves no queue place behind: a later release
/// goes to the next waiter at once, and nothing is left at the end.
pub(crate) async fn cancelled_waiter_leaves_nothing(ctx: &Ctx) {
    let sem = semaphore(ctx, 1).await;
    let quitter = semaphore(ctx, 1).await;
    let patient = semaphore(ctx, 1).await;
    let guard = ok("acquire", sem.acquire().await);
    for _ in 0..3 {
        let attempt = tokio::time::timeout(Duration::from_millis(150), quitter.acquire()).await;
        assert!(attempt.is_err(), "acquired a taken permit");
    }
    let waiting =
        tokio::spawn(async move { patient.acquire_timeout(Duration::from_secs(60)).await });
    settle().await;
    ok("release", guard.release().await);
    let (next, took) = within("patient waiter", ctx.slack() * 2, waiting).await;
    assert!(
        took < ctx.slack(),
        "a dropped waiter held the queue up for {took:?}"
    );
    ok(
        "release",
        ok("patient", next.expect("task")).release().await,
    );
    assert_eq!(quitter.hold_count(), 0);
    got(
        "the dropped waiter's handle later",
        quitter.try_acquire().await,
    )
    .release()
    .await
    .expect("release");
}

/// Fencing tokens strictly increase in grant order, across permits and holders.
pub(crate) async fn tokens_increase(ctx: &Ctx) {
    let sem = semaphore(ctx, 2).await;
    let mut last = 0;
    for round in 0..3 {
        let a = got("a", sem.try_acquire().await);
        let b = got("b", sem.try_acquire().await);
        assert!(a.fencing_token() > last, "round {round}: token went back");
        assert!(
            b.fencing_token() > a.fencing_token(),
            "round {round}: tokens not in grant order"
        );
        last = b.fencing_token();
        ok("release", a.release().await);
        ok("release", b.release().await);
    }
}

/// `inspect` lists every permit holder with its token; force-unlocking one frees only
/// that permit and its holder learns of it.
pub(crate) async fn holders_listed_and_broken_one_at_a_time(ctx: &Ctx) {
    let sem = semaphore(ctx, 2).await;
    let operator = semaphore(ctx, 2).await;
    let held = take_all(&sem).await;
    let info = ok("inspect", operator.inspect().await);
    let mut listed: Vec<u64> = info
        .holders
        .iter()
        .filter_map(|h| h.fencing_token)
        .collect();
    listed.sort_unstable();
    let mut tokens: Vec<u64> = held.iter().map(LockGuard::fencing_token).collect();
    tokens.sort_unstable();
    assert_eq!(listed, tokens, "inspect: {info:?}");
    let broken = &held[0];
    assert!(ok(
        "force unlock one",
        operator.force_unlock_holder(broken.fencing_token()).await
    ));
    assert!(!ok(
        "again",
        operator.force_unlock_holder(broken.fencing_token()).await
    ));
    assert_eq!(ok("available", operator.available().await), 1);
    assert!(held[1].is_held(), "the other holder lost its permit");
    let replacement = got("the freed permit", operator.try_acquire().await);
    assert!(ok("force unlock all", operator.force_unlock().await));
    assert_eq!(ok("available", operator.available().await), 2);
    drop(replacement);
    for guard in held {
        let _ = guard.release().await;
    }
}

/// A multi-lock may hold a permit beside a lock: all or nothing.
pub(crate) async fn multi_lock_with_a_permit(ctx: &Ctx) {
    let client = ctx.client().await;
    let sem = semaphore(ctx, 1).await;
    let multi = ok(
        "build",
        MultiLock::builder()
            .lock(ok("lock", client.lock("beside-permits")))
            .permit(ok("semaphore", client.semaphore(NAME, 1)))
            .build(),
    );
    let guard = ok(
        "multi acquire",
        multi.acquire_timeout(Duration::from_secs(30)).await,
    );
    refused("the permit is taken", sem.try_acquire().await);
    guard.release().await.expect("multi release");
    let permit = got("the permit is free", sem.try_acquire().await);
    let attempt = multi.try_acquire().await;
    assert!(
        matches!(attempt, Ok(None)),
        "multi-lock with its permit taken: {attempt:?}"
    );
    let lock = ok("lock", client.lock("beside-permits"));
    got("the lock was not kept", lock.try_acquire().await)
        .release()
        .await
        .expect("release");
    ok("release", permit.release().await);
}
