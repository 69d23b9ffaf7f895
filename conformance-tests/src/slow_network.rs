//! A wait limit that holds while the server's replies come late: a client behind a
//! proxy that delays every reply (nothing lost, in order) asks for a lock another
//! client holds, with a short wait limit. It must answer within that limit plus a
//! little, not when the late replies finally arrive, and leave nothing behind.

use std::sync::Arc;
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::{Error, LockProvider};
use tokio::time::Instant;

use crate::backend::{Backend, ClientOptions};
use crate::checker::CutOff;
use crate::proxy::Blackhole;

/// The wait limit asked for.
const LIMIT: Duration = Duration::from_millis(500);
/// How late each reply comes: well past the limit.
const DELAY: Duration = Duration::from_secs(3);
/// How far past its limit the acquire may answer.
const GRACE: Duration = Duration::from_millis(1500);

/// `holder` takes the lock, and `slow`, whose replies come [`DELAY`] late, waits for
/// it for [`LIMIT`]: it must answer `Timeout` within the limit and [`GRACE`].
async fn waits_on_time(
    holder: &dyn LockProvider,
    slow: &dyn LockProvider,
    proxy: &Blackhole,
    fair: bool,
) -> Result<(), String> {
    let name = if fair { "late-fair" } else { "late" };
    let held = if fair {
        holder
            .fair_lock(name)
            .map_err(|e| e.to_string())?
            .acquire()
            .await
    } else {
        holder
            .lock(name)
            .map_err(|e| e.to_string())?
            .acquire()
            .await
    }
    .map_err(|e| format!("holder's acquire: {e}"))?;
    proxy.delay_replies(DELAY);
    let began = Instant::now();
    let outcome = if fair {
        let lock = slow.fair_lock(name).map_err(|e| e.to_string())?;
        lock.acquire_timeout(LIMIT).await
    } else {
        let lock = slow.lock(name).map_err(|e| e.to_string())?;
        lock.acquire_timeout(LIMIT).await
    };
    let took = began.elapsed();
    proxy.undelay();
    held.release()
        .await
        .map_err(|e| format!("{name}: the holder's release after the slow wait: {e}"))?;
    match outcome {
        Err(Error::Timeout { .. }) if took <= LIMIT + GRACE => Ok(()),
        Err(Error::Timeout { .. }) => Err(format!(
            "a {name} wait limit of {LIMIT:?} answered after {took:?} with replies {DELAY:?} late"
        )),
        Ok(_) => Err(format!("{name}: granted a lock another client held")),
        Err(other) => Err(format!(
            "{name}: answered {other} after {took:?}, not a timeout"
        )),
    }
}

/// Runs the check; `Err` says what went wrong.
///
/// # Errors
/// The acquire answered late, was granted, or left something on the server.
pub async fn wait_limit_holds_under_late_replies(
    backend: Arc<dyn Backend>,
    cut_off: &dyn CutOff,
) -> Result<(), String> {
    let namespace = format!("slow-{}", uuid::Uuid::new_v4().simple());
    let options = ClientOptions {
        namespace: namespace.clone(),
        watchdog_lease: Duration::from_secs(3),
        holder_description: None,
    };
    let holder = backend
        .client(options.clone())
        .await
        .map_err(|e| format!("holder client: {e}"))?;
    let (slow_backend, proxy) = cut_off.cuttable().await?;
    let slow = slow_backend
        .client(options)
        .await
        .map_err(|e| format!("slow client: {e}"))?;
    // Connections made and used before the replies slow down.
    let warm = slow.lock("warm-up").map_err(|e| e.to_string())?;
    let warmed = warm.acquire().await.map_err(|e| format!("warm-up: {e}"))?;
    warmed
        .release()
        .await
        .map_err(|e| format!("warm-up release: {e}"))?;

    let mut verdict = waits_on_time(&*holder, &*slow, &proxy, false).await;
    if verdict.is_ok() && slow.capabilities().fair {
        // A fair wait holds a queue ticket, removed when the wait runs out.
        verdict = waits_on_time(&*holder, &*slow, &proxy, true).await;
    }
    let _ = holder.shutdown().await;
    let _ = tokio::time::timeout(DELAY * 4, slow.shutdown()).await;
    verdict?;
    // What the timed-out acquire left goes in the background, within about the delay.
    let until = Instant::now() + DELAY * 2 + backend.slack();
    loop {
        let left = backend.leftovers(&namespace).await?;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(format!("left behind: {left:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
