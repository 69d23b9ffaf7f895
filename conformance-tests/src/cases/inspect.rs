//! Introspection and targeted force-unlock: who holds a lock, with what token and
//! description, how many wait; removing exactly one holder.

use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, HolderInfo, LockInfo, LockKind};

use super::flavor::Flavor;
use crate::check::{got, ok, refused, settle, within};
use crate::runner::Ctx;

const NAME: &str = "inspected";

/// The description the case's holder client gives of itself.
const DESCRIPTION: &str = "conformance holder, pid 4242";

fn only_holder(info: &LockInfo) -> &HolderInfo {
    assert_eq!(info.holders.len(), 1, "one holder: {info:?}");
    &info.holders[0]
}

/// `inspect` names the holder (its kind, fencing token, owner and the description its
/// client gave) and counts the waiters where the backend keeps them; a free lock has no
/// holder.
pub(crate) async fn holder_token_and_waiters(ctx: &Ctx, flavor: Flavor) {
    let holder_client = ctx.client_described(DESCRIPTION).await;
    let holder = flavor.lock(&*holder_client, NAME);
    let observer = flavor.lock(&*ctx.client().await, NAME);
    let free = ok("inspect a free lock", observer.inspect().await);
    assert!(!free.is_locked(), "a free lock has holders: {free:?}");

    let guard = ok("acquire", holder.acquire().await);
    let info = ok("inspect", observer.inspect().await);
    let seen = only_holder(&info);
    let kind = match flavor {
        Flavor::Exclusive => LockKind::Exclusive,
        Flavor::Fair => LockKind::Fair,
        Flavor::WriteSide => LockKind::Write,
    };
    assert_eq!(seen.kind, kind);
    assert_eq!(seen.fencing_token, Some(guard.fencing_token()), "{seen:?}");
    assert!(seen.owner.is_some(), "no owner: {seen:?}");
    assert_eq!(seen.description.as_deref(), Some(DESCRIPTION), "{seen:?}");
    if let (Some(acquired), Some(expires)) = (seen.acquired_at, seen.expires_at) {
        assert!(expires > acquired, "{seen:?}");
    }

    // One waiter, counted where the backend keeps waiters.
    let waiter = flavor.lock(&*ctx.client().await, NAME);
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire_timeout(Duration::from_secs(60)).await;
        (guard, waiter)
    });
    settle().await;
    let info = ok("inspect with a waiter", observer.inspect().await);
    if let Some(waiters) = info.waiters {
        assert_eq!(waiters, 1, "{info:?}");
    }
    ok("release", guard.release().await);
    let (joined, _) = within("waiter", ctx.slack() * 2, waiting).await;
    let (next, _waiter) = joined.expect("waiter task");
    let next = ok("waiter", next);
    let info = ok("inspect after the handoff", observer.inspect().await);
    assert_eq!(
        only_holder(&info).fencing_token,
        Some(next.fencing_token()),
        "{info:?}"
    );
    ok("release", next.release().await);
    assert!(!ok("inspect at the end", observer.inspect().await).is_locked());
}

/// Readers of a read-write lock are each listed, with their own tokens.
pub(crate) async fn readers_are_listed(ctx: &Ctx) {
    let client = ctx.client_described(DESCRIPTION).await;
    let a = ok("lock", client.rw_lock(NAME));
    let b = ok("lock", ctx.client().await.rw_lock(NAME));
    let ra = got("read a", a.try_read().await);
    let rb = got("read b", b.try_read().await);
    let info = ok("inspect", a.inspect().await);
    let mut tokens: Vec<Option<u64>> = info.holders.iter().map(|h| h.fencing_token).collect();
    tokens.sort();
    let mut expected = vec![Some(ra.fencing_token()), Some(rb.fencing_token())];
    expected.sort();
    assert_eq!(tokens, expected, "{info:?}");
    assert!(info.holders.iter().all(|h| h.kind == LockKind::Read));
    ok("release", ra.release().await);
    ok("release", rb.release().await);
}

/// `force_unlock_holder` removes the holder with that token only: a wrong token changes
/// nothing, the right one frees the lock, and the holder's guard reports the loss.
pub(crate) async fn force_unlock_one_holder(ctx: &Ctx, flavor: Flavor) {
    let watchdog_lease = ctx.short_lease();
    let client = ctx.client_with(ctx.namespace(), watchdog_lease).await;
    let holder = flavor.lock(&*client, NAME);
    let operator: Arc<dyn DistributedLock> = flavor.lock(&*ctx.client().await, NAME);
    let guard = ok("acquire", holder.acquire().await);
    let token = guard.fencing_token();
    assert!(
        !ok("wrong token", operator.force_unlock_holder(token + 1).await),
        "a force-unlock with another token removed something"
    );
    assert!(guard.is_held(), "the holder lost its lock to a wrong token");
    refused("still held", operator.try_acquire().await);
    assert!(ok("right token", operator.force_unlock_holder(token).await));
    let (loss, _) = within("loss report", watchdog_lease + ctx.slack(), guard.lost()).await;
    assert_ne!(loss, lock_core::LeaseLoss::Released);
    let next = ok(
        "acquire after the force-unlock",
        operator
            .acquire_with(AcquireOptions::wait_for(ctx.slack()))
            .await,
    );
    assert!(
        !ok(
            "the old token again",
            operator.force_unlock_holder(token).await
        ),
        "the old holder's token removed the new holder"
    );
    assert!(next.is_held());
    ok("release", next.release().await);
}
