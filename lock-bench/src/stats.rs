//! Latency samples and their percentiles.

use std::fmt;
use std::time::Duration;

/// A set of latency samples.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// Adds one sample.
    pub fn push(&mut self, sample: Duration) {
        self.0.push(sample);
    }

    /// How many samples there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `p`-th percentile (0.0 to 100.0), nearest rank; zero without samples.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let sorted = self.sorted();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        self.0.iter().copied().max().unwrap_or_default()
    }

    /// The samples in ascending order.
    pub fn sorted(&self) -> Vec<Duration> {
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        sorted
    }

    /// How many samples exceed `limit`.
    pub fn over(&self, limit: Duration) -> usize {
        self.0.iter().filter(|&&s| s > limit).count()
    }
}

impl From<Vec<Duration>> for Samples {
    fn from(samples: Vec<Duration>) -> Self {
        Self(samples)
    }
}

/// A duration in whole microseconds, for tables.
pub struct Micros(pub Duration);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0}", self.0.as_secs_f64() * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut s = Samples::default();
        for ms in 1..=100 {
            s.push(Duration::from_millis(ms));
        }
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(s.percentile(0.0), Duration::from_millis(1));
        assert_eq!(s.over(Duration::from_millis(90)), 10);
        assert_eq!(Samples::default().percentile(50.0), Duration::ZERO);
    }
}
