//! A holder whose lock an operator takes away learns of it within about a second where
//! the backend can tell it ([`Capabilities::loss_notice`](lock_core::Capabilities)):
//! long before the watchdog's next renewal, and for a fixed lease, which no renewal
//! checks, long before its end.

use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{AcquireOptions, LeaseLoss};
use tokio::time::Instant;

use super::flavor::Flavor;
use crate::check::{got, ok, within};
use crate::runner::Ctx;

/// What the capability promises.
const NOTICE: Duration = Duration::from_secs(1);

/// The watchdog lease of the holder: its first renewal comes a third of it after the
/// grant, far past the bound checked here.
const LONG_LEASE: Duration = Duration::from_secs(30);

/// Which lease the holder asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kept {
    /// Renewed by the client's watchdog.
    Watchdog,
    /// A fixed lease, never renewed.
    Fixed,
}

/// `force_unlock` while the lock is held (at once with a watchdog lease, after a second
/// with a fixed one): the guard says lost within [`NOTICE`] plus the backend's slack,
/// with [`LeaseLoss::Revoked`].
pub(crate) async fn force_unlock_is_noticed(ctx: &Ctx, flavor: Flavor, kept: Kept) {
    let client = ctx.client_with(ctx.namespace(), LONG_LEASE).await;
    let name = "noticed";
    let holder = flavor.lock(&*client, name);
    let options = match kept {
        Kept::Watchdog => AcquireOptions::try_once(),
        Kept::Fixed => AcquireOptions::try_once().lease(LONG_LEASE * 2),
    };
    let guard = got("acquire", holder.acquire_with(options).await.map(Some));
    // One right after the grant, one after a while: a backend may start listening
    // only once a lock has been held for a moment, and must then hear of both.
    if matches!(kept, Kept::Fixed) {
        tokio::time::sleep(NOTICE).await;
    }
    let operator = flavor.lock(&*ctx.client().await, name);
    assert!(ok("force_unlock", operator.force_unlock().await));
    let forced = Instant::now();
    let bound = NOTICE + ctx.slack();
    let (loss, _) = within(
        &format!("{kept:?} holder told of the force-unlock"),
        bound,
        guard.lost(),
    )
    .await;
    let after = forced.elapsed();
    assert_eq!(loss, LeaseLoss::Revoked, "told after {after:?}");
    assert!(!guard.is_held());
    println!("{flavor:?}/{kept:?}: loss noticed {after:?} after the force-unlock");
    let next = ok(
        "acquire after the force-unlock",
        operator
            .acquire_with(AcquireOptions::wait_for(ctx.slack()))
            .await,
    );
    assert!(next.fencing_token() > guard.fencing_token());
    ok("release", next.release().await);
    assert!(guard.release().await.is_err(), "the lost guard's release");
}
