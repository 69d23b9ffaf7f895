//! How often waiters poll between attempts where nothing wakes them: exponential
//! backoff with jitter.

use std::time::Duration;

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
