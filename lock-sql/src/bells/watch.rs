//! Watches: a waiter's wait, on a connection of its client's, for the doorbell of the
//! lease that blocks it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::{AnyPool, Row};
use tokio::sync::oneshot;

use crate::local_wake;

#[derive(Debug)]
pub(super) struct Watches {
    pub(super) pool: AnyPool,
    /// The doorbells being watched, and whether the watch waits for its freeing yet
    /// (else it still checks whether it is held).
    pub(super) on: Mutex<HashMap<Arc<str>, bool>>,
}

/// What a waiter learns from [`Bells::watch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// The lease is this process's: its release is announced here.
    Here,
    /// A watch is on: the release will be told.
    On,
    /// No one holds the doorbell: the holder keeps none (yet), or has just freed it.
    NotHeld,
    /// No watch could be made: poll.
    Off,
}

/// One watch of a doorbell, which leaves the client's watches as it ends however it
/// ends.
pub(super) struct Watching {
    pub(super) watches: Arc<Watches>,
    pub(super) name: Arc<str>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.watches
            .on
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.name);
    }
}

impl Watching {
    /// Tells `checked` whether the doorbell is held; if it is, waits for its freeing
    /// for at most `lasts`, then wakes the waiters of `topic`.
    pub(super) async fn run(
        self,
        topic: Arc<str>,
        lasts: Duration,
        request_timeout: Duration,
        checked: oneshot::Sender<Watch>,
    ) {
        let Ok(Ok(mut conn)) =
            tokio::time::timeout(request_timeout, self.watches.pool.acquire()).await
        else {
            let _ = checked.send(Watch::Off);
            return;
        };
        // The name is hex and letters of ours: nothing to quote.
        let name = &self.name;
        let check = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(IS_USED_LOCK('{name}') IS NOT NULL AS SIGNED)"
        )));
        let held = tokio::time::timeout(request_timeout, check.fetch_one(&mut *conn)).await;
        match held
            .ok()
            .and_then(Result::ok)
            .map(|row| row.try_get::<i64, _>(0))
        {
            Some(Ok(1)) => {}
            Some(Ok(_)) => {
                let _ = checked.send(Watch::NotHeld);
                return;
            }
            _ => {
                conn.close_on_drop();
                let _ = checked.send(Watch::Off);
                return;
            }
        }
        if checked.send(Watch::On).is_err() {
            // The waiter left.
            return;
        }
        if let Some(waiting) = self
            .watches
            .on
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(name)
        {
            *waiting = true;
        }
        // Freed between the check and now, it is granted at once: a ring all the same.
        let secs = lasts.as_secs_f64().max(0.001);
        let wait = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(GET_LOCK('{name}', {secs:.3}) = 1 AND RELEASE_LOCK('{name}') = 1 AS SIGNED)"
        )));
        let rang = tokio::time::timeout(lasts + request_timeout, wait.fetch_one(&mut *conn)).await;
        if !matches!(rang, Ok(Ok(_))) {
            // It may still wait, or hold the doorbell: never give it to another use.
            conn.close_on_drop();
        }
        drop(conn);
        drop(self);
        // Rung, timed out or failed: the waiter looks again.
        local_wake::announce(topic);
    }
}
