//! MultiLock cases: all or nothing, no deadlock whatever the order given, one wait
//! limit, loss reporting, cancel safety, fixed leases and re-entry, on each backend.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, Error, LeaseLoss, LockProvider, MultiLock};
use tokio::time::Instant;

use crate::check::{expect_err, is_timeout, ok, refused, within};
use crate::runner::Ctx;

fn multi(builder: lock_core::MultiLockBuilder) -> MultiLock {
    ok("build the multi-lock", builder.build())
}

/// The exclusive locks `names` of `client`, as one multi-lock listed in that order.
fn exclusive(client: &dyn LockProvider, names: &[&str]) -> MultiLock {
    let builder = names.iter().fold(MultiLock::builder(), |b, name| {
        b.lock(ok("make lock", client.lock(name)))
    });
    multi(builder)
}

/// Asserts that nobody holds the exclusive lock `name`.
async fn free(ctx: &Ctx, what: &str, name: &str) {
    let lock = ok("make lock", ctx.client().await.lock(name));
    assert!(
        !ok("is_locked", lock.is_locked().await),
        "{what}: `{name}` is still held"
    );
}

/// Asserts the server keeps nothing of this case's locks.
async fn nothing_left(ctx: &Ctx) {
    let left = ctx.leftovers().await;
    assert!(left.is_empty(), "left on the server: {left:?}");
}

/// Waits for every worker; a deadlock would never end, so the wait is bounded.
async fn finish(ctx: &Ctx, tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        within("workers (a deadlock never ends)", ctx.slack() * 60, task)
            .await
            .0
            .expect("worker panicked");
    }
}

/// Counts `rounds` times to `counter` by read, pause, write under `lock`, checking
/// through `inside` that nobody else is in at the same time.
fn count_under(
    lock: MultiLock,
    rounds: u64,
    counter: Arc<AtomicU64>,
    inside: Arc<AtomicU32>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for _ in 0..rounds {
            let guard = ok("acquire", lock.acquire().await);
            assert!(guard.is_held());
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
            let seen = counter.load(Ordering::SeqCst);
            tokio::task::yield_now().await;
            counter.store(seen + 1, Ordering::SeqCst);
            inside.fetch_sub(1, Ordering::SeqCst);
            ok("release", guard.release().await.map_err(Error::from));
        }
    })
}

/// Two workers update a shared counter under multi-locks over the same locks built in
/// opposite orders (and a third over an overlapping subset): nobody deadlocks, the
/// count is exact, and no two are ever inside at once.
pub(crate) async fn overlapping_sets_do_not_deadlock(ctx: &Ctx) {
    const ROUNDS: u64 = 100;
    let orders: [&[&str]; 3] = [&["a", "b"], &["b", "a"], &["b"]];
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for names in orders {
        let lock = exclusive(&*ctx.client().await, names);
        tasks.push(count_under(lock, ROUNDS, counter.clone(), inside.clone()));
    }
    finish(ctx, tasks).await;
    assert_eq!(counter.load(Ordering::SeqCst), ROUNDS * 3, "lost updates");
    nothing_left(ctx).await;
}

/// An exclusive lock, a fair lock and a write side in one multi-lock exclude a
/// multi-lock over the same three listed backwards; read sides are shared.
pub(crate) async fn mixed_kinds(ctx: &Ctx) {
    const ROUNDS: u64 = 25;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for backwards in [false, true] {
        let client = ctx.client().await;
        let exclusive = ok("lock", client.lock("x"));
        let fair = ok("fair lock", client.fair_lock("y"));
        let table = ok("rw lock", client.rw_lock("z"));
        let lock = multi(if backwards {
            MultiLock::builder().write(table).lock(fair).lock(exclusive)
        } else {
            MultiLock::builder().lock(exclusive).lock(fair).write(table)
        });
        tasks.push(count_under(lock, ROUNDS, counter.clone(), inside.clone()));
    }
    finish(ctx, tasks).await;
    assert_eq!(counter.load(Ordering::SeqCst), ROUNDS * 2, "lost updates");

    // Two readers of z with different exclusive locks hold at once; a writer of z
    // cannot join them.
    let reader = |name: &'static str| async move {
        let client = ctx.client().await;
        let z = ok("rw lock", client.rw_lock("z"));
        multi(
            MultiLock::builder()
                .read(z)
                .lock(ok("lock", client.lock(name))),
        )
    };
    let first = ok("first reader", reader("p").await.try_acquire().await).expect("first reader");
    let second = ok("second reader", reader("q").await.try_acquire().await)
        .expect("a second reader with other locks is refused");
    let client = ctx.client().await;
    let writer = multi(MultiLock::builder().write(ok("rw lock", client.rw_lock("z"))));
    assert!(
        ok("writer", writer.try_acquire().await).is_none(),
        "a writer joined two readers"
    );
    ok("release", first.release().await.map_err(Error::from));
    ok("release", second.release().await.map_err(Error::from));
    nothing_left(ctx).await;
}

/// One member held by someone else: a try fails, a wait ends at the shared limit with a
/// timeout naming that member, and afterwards the multi-lock holds nothing.
pub(crate) async fn held_member_fails_the_whole(ctx: &Ctx) {
    let other = ok("lock", ctx.client().await.lock("b"));
    let held = ok("hold b", other.acquire().await);
    let client = ctx.client().await;
    let lock = exclusive(&*client, &["c", "b", "a"]);

    assert!(
        ok("try", lock.try_acquire().await).is_none(),
        "got a held lock"
    );
    assert!(!lock.is_held_by_me());
    free(ctx, "after the failed try", "a").await;

    let limit = ctx.short_lease();
    let started = Instant::now();
    let err = expect_err("wait", lock.acquire_timeout(limit).await, is_timeout);
    let took = started.elapsed();
    assert!(
        took >= limit,
        "gave up after {took:?}, before the limit {limit:?}"
    );
    assert!(
        took < limit + ctx.slack(),
        "gave up after {took:?}, limit {limit:?}"
    );
    match err {
        Error::Timeout { name, waited } => {
            assert_eq!(name, "b", "the timeout names the held member");
            assert_eq!(waited, limit, "the timeout names the caller's limit");
        }
        other => panic!("not a timeout: {other}"),
    }
    free(ctx, "after the timeout", "a").await;
    free(ctx, "after the timeout", "c").await;

    ok("release b", held.release().await);
    let guard = ok("try once free", lock.try_acquire().await).expect("all free now");
    ok("release", guard.release().await.map_err(Error::from));
    nothing_left(ctx).await;
}

/// Force-unlocking one member is reported through the multi-lock's guard, naming that
/// member; `release` then reports it and still frees the rest.
pub(crate) async fn member_loss_is_reported(ctx: &Ctx) {
    // Long enough that a busy machine does not stall `a`'s renewals past its lease (that
    // loss would be reported first); `b`'s loss still shows at the first renewal.
    let watchdog_lease = ctx.short_lease() * 5;
    let client = ctx.client_with(ctx.namespace(), watchdog_lease).await;
    let lock = exclusive(&*client, &["a", "b"]);
    let guard = ok("acquire", lock.acquire().await);
    let lost = tokio::spawn(guard.lost());
    let operator = ok("lock", ctx.client().await.lock("b"));
    assert!(ok("force unlock", operator.force_unlock().await));
    let (loss, _) = within("loss report", watchdog_lease + ctx.slack(), lost).await;
    let loss = loss.expect("loss watcher");
    assert_eq!(
        loss.id.name().as_str(),
        "b",
        "the loss names the member: {loss}"
    );
    assert_ne!(loss.reason, LeaseLoss::Released);
    assert!(!guard.is_held());
    let err = match guard.release().await {
        Ok(()) => panic!("release after a member's loss reported nothing"),
        Err(err) => err,
    };
    assert_eq!(err.released(), 1, "{err}");
    assert_eq!(err.failures().len(), 1, "{err}");
    assert_eq!(err.failures()[0].id.name().as_str(), "b", "{err}");
    assert!(
        matches!(err.failures()[0].error, Error::LeaseLost { .. }),
        "{err}"
    );
    free(ctx, "after the release", "a").await;
}

/// An acquire dropped while it waits for one member gives back those it had taken.
pub(crate) async fn cancelled_acquire_leaves_nothing(ctx: &Ctx) {
    let other = ok("lock", ctx.client().await.lock("b"));
    let held = ok("hold b", other.acquire().await);
    let lock = exclusive(&*ctx.client().await, &["a", "b"]);
    let watcher = ok("lock", ctx.client().await.lock("a"));
    {
        let attempt = lock.acquire();
        tokio::pin!(attempt);
        // Poll the acquire until it holds `a` and waits for `b`, then drop it.
        let deadline = Instant::now() + ctx.slack() * 2;
        loop {
            tokio::select! {
                result = &mut attempt => panic!("acquired past a held member: {result:?}"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            if ok("is_locked", watcher.is_locked().await) {
                break;
            }
            assert!(Instant::now() < deadline, "the acquire never took `a`");
        }
    }
    assert!(!lock.is_held_by_me());
    let (next, took) = within("a after the cancel", ctx.slack() * 2, watcher.acquire()).await;
    assert!(
        took < ctx.slack(),
        "the dropped acquire kept `a` for {took:?}"
    );
    ok("release", ok("a after the cancel", next).release().await);
    ok("release b", held.release().await);
    let (guard, _) = within("all after", ctx.slack(), lock.acquire()).await;
    ok(
        "release",
        ok("all after", guard).release().await.map_err(Error::from),
    );
    nothing_left(ctx).await;
}

/// With a fixed lease, members taken early do not run out while a later one is awaited:
/// every lease ends about that long after the last member was granted.
pub(crate) async fn fixed_lease_counts_from_the_last_grant(ctx: &Ctx) {
    let lease = ctx.short_lease();
    let other = ok("lock", ctx.client().await.lock("b"));
    let held = ok(
        "hold b",
        other
            .acquire_with(AcquireOptions::try_once().lease(lease * 2))
            .await,
    );
    let lock = exclusive(&*ctx.client().await, &["a", "b"]);
    let opts = AcquireOptions::wait_for(lease * 2 + ctx.slack() * 2).lease(lease);
    let (guard, _) = within(
        "acquire",
        lease * 2 + ctx.slack() * 3,
        lock.acquire_with(opts),
    )
    .await;
    let guard = ok("acquire", guard);
    let granted = Instant::now();
    assert!(
        guard.is_held(),
        "a member taken before the wait ran out during it"
    );
    let (loss, _) = within("expiry", lease + ctx.slack(), guard.lost()).await;
    assert_eq!(loss.reason, LeaseLoss::Expired, "{loss}");
    let took = granted.elapsed();
    assert!(
        took + ctx.slack() > lease,
        "expired {took:?} after the grant, lease {lease:?}"
    );
    expect_err(
        "release after expiry",
        guard.release().await.map_err(Error::from),
        |e| matches!(e, Error::LeaseLost { .. }),
    );
    drop(held);
    let again = exclusive(&*ctx.client().await, &["a", "b"]);
    let guard = ok("try after expiry", again.try_acquire().await).expect("both free after expiry");
    ok("release", guard.release().await.map_err(Error::from));
}

/// A multi-lock is re-entered through its guard, with every member; an acquire of a
/// member's lock by anyone else (even through the member's own handle) is refused until
/// the last guard of the acquisition goes.
pub(crate) async fn reentry_through_the_guard(ctx: &Ctx) {
    let client = ctx.client().await;
    let a = ok("lock", client.lock("a"));
    let lock = multi(
        MultiLock::builder()
            .lock(a.clone())
            .lock(ok("lock", client.lock("b"))),
    );
    let guard = ok("acquire", lock.acquire().await);
    let again = ok("re-enter the multi-lock", guard.reenter());
    assert_eq!(a.hold_count(), 2);
    refused("a through the member's handle", a.try_acquire().await);
    let other = ok("lock", ctx.client().await.lock("a"));
    ok("release", again.release().await.map_err(Error::from));
    assert_eq!(a.hold_count(), 1);
    refused("a is still held", other.try_acquire().await);
    ok("release", guard.release().await.map_err(Error::from));
    free(ctx, "after the release", "a").await;
    free(ctx, "after the release", "b").await;
}

/// What a backend lacks is refused before anything is taken: a fair or read-write
/// member by `build`, a fixed lease by the acquire. What it has works in one multi-lock.
pub(crate) async fn unsupported_refused_before_anything_is_taken(ctx: &Ctx) {
    let caps = ctx.capabilities();
    let client = ctx.client().await;
    let a = || ok("lock", client.lock("a"));
    let fair = MultiLock::builder()
        .lock(a())
        .lock(ok("fair lock", client.fair_lock("f")));
    let read = MultiLock::builder()
        .lock(a())
        .read(ok("rw lock", client.rw_lock("r")));
    for (builder, supported, missing) in [
        (fair, caps.fair, "fair locks"),
        (read, caps.read_write, "read-write locks"),
    ] {
        match builder.build() {
            Ok(lock) if supported => {
                let guard = ok("try", lock.try_acquire().await).expect("all free");
                ok("release", guard.release().await.map_err(Error::from));
            }
            Err(Error::Unsupported { operation, .. }) if !supported => {
                assert_eq!(operation, missing);
            }
            other => panic!("{missing} (supported: {supported}): {other:?}"),
        }
    }
    let plain = exclusive(&*client, &["a", "b"]);
    let fixed = plain
        .acquire_with(AcquireOptions::try_once().lease(ctx.short_lease() * 10))
        .await;
    match fixed {
        Ok(guard) if caps.fixed_lease => {
            ok("release", guard.release().await.map_err(Error::from));
        }
        Err(Error::Unsupported { operation, .. }) if !caps.fixed_lease => {
            assert_eq!(operation, "fixed leases");
        }
        other => panic!("fixed lease (supported: {}): {other:?}", caps.fixed_lease),
    }
    free(ctx, "after the refusals", "a").await;
    free(ctx, "after the refusals", "b").await;
    nothing_left(ctx).await;
}
