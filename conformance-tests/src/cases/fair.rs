//! Fair-lock cases: grants in request order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::prelude::*;

use crate::check::{ok, settle, within};
use crate::runner::Ctx;

const NAME: &str = "queue";

/// Waiters queued one after another are granted in that order.
pub(crate) async fn fifo_order(ctx: &Ctx) {
    const WAITERS: usize = 5;
    let holder = ctx.client().await.fair_lock(NAME).expect("lock");
    let guard = ok("acquire", holder.acquire().await);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = ctx.client().await.fair_lock(NAME).expect("lock");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = ok(
                "waiter",
                lock.acquire_timeout(Duration::from_secs(60)).await,
            );
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            ok("waiter release", guard.release().await);
        }));
        // Let this waiter queue before the next one asks.
        settle().await;
    }
    ok("release", guard.release().await);
    for task in tasks {
        within("waiters", ctx.slack() * 10, task)
            .await
            .0
            .expect("waiter task");
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "not granted in FIFO order"
    );
}

/// A waiter that gives up leaves the queue: the one behind it is granted at once.
pub(crate) async fn cancelled_waiter_is_skipped(ctx: &Ctx) {
    let holder = ctx.client().await.fair_lock(NAME).expect("lock");
    let quitter = ctx.client().await.fair_lock(NAME).expect("lock");
    let patient = ctx.client().await.fair_lock(NAME).expect("lock");
    let guard = ok("acquire", holder.acquire().await);
    let quitting = tokio::spawn(async move {
        let result = quitter.acquire_timeout(Duration::from_millis(600)).await;
        assert!(result.is_err(), "the quitter got a held lock");
    });
    settle().await;
    let waiting =
        tokio::spawn(async move { patient.acquire_timeout(Duration::from_secs(60)).await });
    within("quitter", ctx.slack() * 2, quitting)
        .await
        .0
        .expect("quitter task");
    ok("release", guard.release().await);
    let (next, took) = within("patient waiter", ctx.slack() * 2, waiting).await;
    assert!(
        took < ctx.slack(),
        "the cancelled waiter held the queue for {took:?}"
    );
    ok(
        "release",
        ok("patient waiter", next.expect("task")).release().await,
    );
}

/// Fencing tokens of one name increase in grant order across lock kinds: a fair waiter
/// that queued before an exclusive lock of the same name was taken and released is
/// granted later, so its token must be greater than the exclusive lock's.
pub(crate) async fn tokens_follow_grant_order_across_kinds(ctx: &Ctx) {
    let holder = ctx.client().await.fair_lock(NAME).expect("lock");
    let held = ok("fair holder", holder.acquire().await);
    let waiter = ctx.client().await.fair_lock(NAME).expect("lock");
    let waiting =
        tokio::spawn(async move { waiter.acquire_timeout(Duration::from_secs(60)).await });
    // Let the waiter queue before the exclusive lock is taken.
    settle().await;
    let exclusive = ctx.client().await.lock(NAME).expect("lock");
    let taken = ok("exclusive", exclusive.acquire().await);
    let exclusive_token = taken.fencing_token();
    ok("exclusive release", taken.release().await);
    ok("fair holder release", held.release().await);
    let granted = ok(
        "fair waiter",
        within("fair waiter", ctx.slack() * 5, waiting)
            .await
            .0
            .expect("waiter task"),
    );
    assert!(
        granted.fencing_token() > exclusive_token,
        "the fair lock granted after the exclusive one got token {} <= {exclusive_token}",
        granted.fencing_token()
    );
    ok("fair waiter release", granted.release().await);
}
