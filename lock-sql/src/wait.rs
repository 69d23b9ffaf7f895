//! How waiters wait between attempts: notifications on PostgreSQL, polling with
//! exponential backoff and jitter elsewhere (woken early by releases in this process); never past the holder's expiry or the
//! caller's deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

/// Exponential backoff with jitter: each pause is a random 50-100 % of the current
/// step, and the step doubles up to the maximum. The jitter keeps many pollers from
/// hitting the database in lockstep.
#[derive(Debug)]
pub(crate) struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Backoff { step: min, max }
    }

    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.step.mul_f64(rand::random_range(0.5..=1.0));
        self.step = (self.step * 2).min(self.max);
        pause
    }
}

/// Sleeps until `until`, or until a release of `key` is announced on `wake` (an
/// empty announcement means "anything may have changed": the listener reconnected).
pub(crate) async fn until_released(
    wake: &mut broadcast::Receiver<Arc<str>>,
    key: &str,
    until: Instant,
) {
    loop {
        tokio::select! {
            msg = wake.recv() => match msg {
                Ok(k) if &*k == key || k.is_empty() => return,
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    tokio::time::sleep_until(until).await;
                    return;
                }
            },
            () = tokio::time::sleep_until(until) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_up_to_the_max() {
        let mut b = Backoff::new(Duration::from_millis(4), Duration::from_millis(20));
        let pauses: Vec<Duration> = (0..6).map(|_| b.next_pause()).collect();
        assert!(pauses[0] >= Duration::from_millis(2) && pauses[0] <= Duration::from_millis(4));
        assert!(pauses.iter().all(|p| *p <= Duration::from_millis(20)));
        assert!(pauses[5] >= Duration::from_millis(10));
    }
}
