//! Cancel storms: many waiters dropped while they wait, then nothing of theirs may be
//! left on the server, and the next contender gets the lock at once.

use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{LockGuard, LockProvider, Result};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::check::{got, ok};
use crate::runner::Ctx;

/// How many waiters each storm cancels.
const WAITERS: usize = 1_000;
/// Over how many clients (connections, sessions) they are spread.
const CLIENTS: usize = 10;
const NAME: &str = "storm";

/// Which lock the waiters want; the holder keeps them waiting.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Storm {
    Exclusive,
    Fair,
    /// Writers waiting for a reader.
    Write,
    /// Readers waiting for a writer.
    Read,
}

impl Storm {
    /// Takes the lock the waiters will want, so that they wait.
    async fn hold(self, client: &dyn LockProvider) -> LockGuard {
        let held = match self {
            Storm::Exclusive => ok("lock", client.lock(NAME)).try_acquire().await,
            Storm::Fair => ok("lock", client.fair_lock(NAME)).try_acquire().await,
            Storm::Write => ok("lock", client.rw_lock(NAME)).try_read().await,
            Storm::Read => ok("lock", client.rw_lock(NAME)).try_write().await,
        };
        got("holder", held)
    }

    /// One waiter: a new owner asking for the lock without a limit.
    async fn wait(self, client: Arc<dyn LockProvider>) -> Result<LockGuard> {
        match self {
            Storm::Exclusive => client.lock(NAME)?.acquire().await,
            Storm::Fair => client.fair_lock(NAME)?.acquire().await,
            Storm::Write => client.rw_lock(NAME)?.write().await,
            Storm::Read => client.rw_lock(NAME)?.read().await,
        }
    }

    /// What a newcomer asks for once the holder let go.
    async fn try_once(self, client: &dyn LockProvider) -> Result<Option<LockGuard>> {
        match self {
            Storm::Exclusive => client.lock(NAME)?.try_acquire().await,
            Storm::Fair => client.fair_lock(NAME)?.try_acquire().await,
            Storm::Write => client.rw_lock(NAME)?.try_write().await,
            Storm::Read => client.rw_lock(NAME)?.try_read().await,
        }
    }
}

/// A thousand waiters over ten clients, each dropped at its own moment while it waits
/// (some before their request reached the server, some mid-call, some queued); then
/// the holder releases.
/// A newcomer must get the lock at once, not after cancelled waiters' places time out,
/// and once it lets go the server must hold nothing of the namespace.
pub(crate) async fn storm(ctx: &Ctx, storm: Storm) {
    let holder_client = ctx.client().await;
    let held = storm.hold(&*holder_client).await;
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(ctx.client().await);
    }
    // Each waiter is dropped at its own moment, spread over the slack: before its
    // request was sent, while it was in flight, or once it was queued.
    let spread = ctx.slack();
    let mut waiters = JoinSet::new();
    for i in 0..WAITERS {
        let cancel_after = spread * i as u32 / WAITERS as u32;
        let wait = storm.wait(clients[i % CLIENTS].clone());
        waiters.spawn(tokio::time::timeout(cancel_after, wait));
    }
    while let Some(done) = waiters.join_next().await {
        if let Ok(Ok(Ok(guard))) = done {
            panic!(
                "{storm:?}: a waiter got the lock while it was held (token {})",
                guard.fencing_token()
            );
        }
    }
    ok("holder release", held.release().await);

    // A newcomer gets it at once: no cancelled waiter stands in its way.
    let newcomer = ctx.client().await;
    let started = Instant::now();
    let guard = loop {
        if let Some(guard) = ok("newcomer", storm.try_once(&*newcomer).await) {
            break guard;
        }
        if started.elapsed() > ctx.slack() {
            let left = ctx.backend().leftovers(ctx.namespace()).await;
            panic!(
                "{storm:?}: the lock was still taken {:?} after the holder released; left: {}",
                started.elapsed(),
                summary(left)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ok("newcomer release", guard.release().await);

    // And nothing stays behind (clean-ups of dropped waiters may still be running).
    nothing_left(ctx, &format!("{storm:?}: after the storm")).await;
    drop(clients);
}

/// How many things are left, and the first few.
fn summary(left: std::result::Result<Vec<String>, String>) -> String {
    match left {
        Ok(left) => format!(
            "{} things, e.g. {:?}",
            left.len(),
            &left[..left.len().min(3)]
        ),
        Err(err) => format!("(could not look: {err})"),
    }
}

/// An acquire polled once and then neither polled nor dropped (a future pinned in the
/// caller's own `select!` that moved on), beside the client's shutdown in the same
/// task: the shutdown must still end, the acquire must end once polled again (closed,
/// or with a grant the client gives back), and nothing may stay on the server.
pub(crate) async fn shutdown_beside_an_acquire_polled_once(ctx: &Ctx) {
    const NAME: &str = "polled-once";
    let limit = ctx.slack() * 4;
    for held_by_another in [false, true] {
        let holder_client = ctx.client().await;
        let holder = match held_by_another {
            true => Some(got(
                "holder",
                ok("lock", holder_client.lock(NAME)).try_acquire().await,
            )),
            false => None,
        };
        let client = ctx.client().await;
        let lock = ok("lock", client.lock(NAME));
        let mut acquire = Box::pin(lock.acquire());
        let first = futures::poll!(acquire.as_mut());
        let pending = first.is_pending();
        if let std::task::Poll::Ready(Ok(guard)) = first {
            // Granted at once (a fast backend): the rest still holds.
            assert!(!held_by_another, "granted while another held it");
            ok("release", guard.release().await);
        }
        let shutdown = tokio::time::timeout(limit, client.shutdown()).await;
        assert!(
            shutdown.is_ok(),
            "held by another: {held_by_another}: the shutdown did not end within {limit:?} \
             beside an acquire polled once"
        );
        if pending {
            let answer = tokio::time::timeout(limit, acquire.as_mut()).await;
            match answer {
                Err(_) => panic!(
                    "held by another: {held_by_another}: the acquire did not end within \
                     {limit:?} after the shutdown"
                ),
                Ok(Ok(guard)) => {
                    assert!(!held_by_another, "granted while another held it");
                    // The shutdown gives back a grant recorded after it; a release
                    // now finds it gone or gives it back itself.
                    let _ = guard.release().await;
                }
                Ok(Err(_)) => {}
            }
        }
        drop(acquire);
        if let Some(held) = holder {
            ok("holder release", held.release().await);
        }
        ok("holder shutdown", holder_client.shutdown().await);
        nothing_left(
            ctx,
            &format!("held by another: {held_by_another}: after the shutdown"),
        )
        .await;
    }
}

/// Waits until the server holds nothing of the case's namespace (clean-ups of dropped
/// calls may still be running), for three times the backend's slack at most.
async fn nothing_left(ctx: &Ctx, when: &str) {
    let started = Instant::now();
    loop {
        let left = ctx.leftovers().await;
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < ctx.slack() * 3,
            "{when}, {:?} on, the server still holds {}",
            started.elapsed(),
            summary(Ok(left))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
