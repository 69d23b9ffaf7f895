//! Other processes: a holder killed with SIGKILL frees its lock; a waiter that ends
//! right after its wait timed out leaves no place behind; a program that shuts its
//! client down before it exits leaves nothing at all.

use std::future::Future;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockGuard;
use tokio::time::Instant;

use crate::backend::HolderSpec;
use crate::check::{ok, refused};
use crate::holder::HolderProcess;
use crate::runner::Ctx;

/// Another process takes a lock with a watchdog lease and is killed: this process
/// gets the lock within that lease plus slack, with a higher fencing token.
pub(crate) async fn killed_holder_frees_lock(ctx: &Ctx) {
    let spec = HolderSpec {
        namespace: ctx.namespace().to_owned(),
        name: "crash".into(),
        watchdog_lease: Duration::from_secs(2),
    };
    let command = ctx.backend().holder_command(&spec).expect("holder command");
    let holder = HolderProcess::start(command, ctx.slack() * 15)
        .await
        .unwrap_or_else(|err| panic!("holder process: {err}"));
    let lock = ctx.client().await.lock(&spec.name).expect("lock");
    refused("while the other process holds", lock.try_acquire().await);
    let guard = freed_after_kill(ctx, &spec, holder, |wait| lock.acquire_timeout(wait)).await;
    ok("release", guard.release().await);
}

/// Kills `holder` once its watchdog has renewed at least once (so expiry is measured
/// from a renewal rather than from the acquisition), then takes what it held with
/// `acquire` (given how long to wait): that must succeed within the holder's lease plus
/// slack, with a higher fencing token.
async fn freed_after_kill<F, Fut>(
    ctx: &Ctx,
    spec: &HolderSpec,
    mut holder: HolderProcess,
    acquire: F,
) -> LockGuard
where
    F: FnOnce(Duration) -> Fut,
    Fut: Future<Output = lock_core::Result<LockGuard>>,
{
    tokio::time::sleep(spec.watchdog_lease / 2).await;
    holder.kill().await;
    let killed = Instant::now();
    let limit = spec.watchdog_lease + ctx.slack();
    let guard = ok("acquire after kill", acquire(limit + ctx.slack()).await);
    let took = killed.elapsed();
    assert!(
        took <= limit,
        "freed {took:?} after the kill; lease {:?}",
        spec.watchdog_lease
    );
    assert!(
        guard.fencing_token() > holder.fence(),
        "token did not increase"
    );
    guard
}

/// Another process takes one permit of a semaphore of two and is killed, while this
/// process holds the other: the killed holder's permit comes back within its lease
/// plus slack, with a higher fencing token.
pub(crate) async fn killed_permit_holder_frees_its_permit(ctx: &Ctx) {
    let spec = HolderSpec {
        namespace: ctx.namespace().to_owned(),
        name: "crash-permits".into(),
        watchdog_lease: Duration::from_secs(2),
    };
    let semaphore = ctx
        .client()
        .await
        .semaphore(&spec.name, 2)
        .expect("semaphore");
    let mine = ok("the first permit", semaphore.acquire().await);
    let mut command = ctx.backend().holder_command(&spec).expect("holder command");
    command.args(["--kind", "permit", "--permits", "2"]);
    let holder = HolderProcess::start(command, ctx.slack() * 15)
        .await
        .unwrap_or_else(|err| panic!("holder process: {err}"));
    refused(
        "while the other process holds the second permit",
        semaphore.try_acquire().await,
    );
    let freed = freed_after_kill(ctx, &spec, holder, |wait| semaphore.acquire_timeout(wait)).await;
    assert!(mine.is_held(), "the surviving permit was lost");
    ok("release", freed.release().await);
    ok("release", mine.release().await);
}

/// Another process leads an election and is killed: this process reads the other's
/// value and term while it leads, cannot lead beside it, and once it is killed leads
/// within its lease plus slack, with a higher term.
pub(crate) async fn killed_leader_process_is_replaced(ctx: &Ctx) {
    let spec = HolderSpec {
        namespace: ctx.namespace().to_owned(),
        name: "crash-leader".into(),
        watchdog_lease: Duration::from_secs(2),
    };
    let election = ctx.client().await.election(&spec.name).expect("election");
    let mut command = ctx.backend().holder_command(&spec).expect("holder command");
    command.args(["--kind", "leader", "--value", "other-process"]);
    let holder = HolderProcess::start(command, ctx.slack() * 15)
        .await
        .unwrap_or_else(|err| panic!("holder process: {err}"));
    let leader = ok("leader", election.leader().await).expect("the other process leads");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("other-process", holder.fence())
    );
    assert!(
        ok("try_campaign", election.try_campaign("here").await).is_none(),
        "two leaders"
    );
    let guard = freed_after_kill(ctx, &spec, holder, |wait| async move {
        let leadership = election.campaign_timeout("here", wait).await?;
        Ok(leadership.into_guard())
    })
    .await;
    ok("resign", guard.release().await);
}

/// A waiter in another process gives up after its wait limit and exits at once, as a
/// program does: it must not leave a place queued (until its session or lease runs
/// out) ahead of everyone else.
pub(crate) async fn timed_out_waiter_process_leaves_nothing(ctx: &Ctx) {
    let spec = HolderSpec {
        namespace: ctx.namespace().to_owned(),
        name: "busy".into(),
        watchdog_lease: Duration::from_secs(30),
    };
    let lock = ctx.client().await.lock(&spec.name).expect("lock");
    let guard = ok("holder", lock.acquire().await);
    let before = ctx.leftovers().await;
    let mut command = ctx.backend().holder_command(&spec).expect("holder command");
    command.args(["--wait-ms", "500"]);
    let waited = tokio::time::timeout(ctx.slack() * 10, command.output())
        .await
        .expect("the waiter process ends")
        .expect("the waiter process runs");
    let stdout = String::from_utf8_lossy(&waited.stdout);
    assert!(
        waited.status.code() == Some(4) && stdout.contains(crate::holder::TIMED_OUT),
        "the waiter process did not time out: {:?} {stdout} {}",
        waited.status,
        String::from_utf8_lossy(&waited.stderr)
    );
    assert_eq!(
        ctx.leftovers().await,
        before,
        "the timed-out process left its place behind"
    );
    ok("release", guard.release().await);
}

/// A program that holds a lock and waits for another calls `LockClient::shutdown` and
/// exits at once: the lock it held is free at once (not when its lease or session runs
/// out), and its wait left no place queued.
pub(crate) async fn shutdown_before_exit_leaves_nothing(ctx: &Ctx) {
    let spec = HolderSpec {
        namespace: ctx.namespace().to_owned(),
        name: "held".into(),
        watchdog_lease: Duration::from_secs(30),
    };
    let client = ctx.client().await;
    let busy = ok("busy", client.lock("busy").expect("lock").acquire().await);
    let before = ctx.leftovers().await;
    let mut command = ctx.backend().holder_command(&spec).expect("holder command");
    command.args(["--shutdown", "--queue-on", "busy"]);
    let ran = tokio::time::timeout(ctx.slack() * 10, command.output())
        .await
        .expect("the process ends")
        .expect("the process runs");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success()
            && stdout.contains(crate::holder::ACQUIRED)
            && stdout.contains(crate::holder::SHUT_DOWN),
        "the process did not hold and shut down: {:?} {stdout} {}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr)
    );
    // Its lease had 30 s left and its session, if any, outlives the process for a while.
    let held = client.lock(&spec.name).expect("lock");
    let guard = ok("free at once", held.try_acquire().await)
        .expect("the lock the process held is free once it exited");
    ok("release", guard.release().await);
    assert_eq!(
        ctx.leftovers().await,
        before,
        "the process left its wait or its lock behind"
    );
    ok("release", busy.release().await);
}
