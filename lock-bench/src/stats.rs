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

    /// Adds every sample of `other`.
    pub fn extend(&mut self, other: &Samples) {
        self.0.extend_from_slice(&other.0);
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

/// One number measured in several runs: the median of the runs and the range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Spread {
    /// The spread of `values`; `None` without any.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return None;
        }
        values.sort_unstable_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: values[0],
            max: values[n - 1],
            runs: n,
        })
    }
}

impl fmt::Display for Spread {
    /// The median, and with more than one run the range: `1234 (1200–1300)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.0}", self.median)?;
        if self.runs > 1 {
            write!(f, " ({:.0}–{:.0})", self.min, self.max)?;
        }
        Ok(())
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

    #[test]
    fn spread_is_the_median_of_the_runs_and_their_range() {
        let three = Spread::of([30.0, 10.0, 20.0]).unwrap();
        assert_eq!((three.median, three.min, three.max), (20.0, 10.0, 30.0));
        assert_eq!(three.to_string(), "20 (10–30)");
        assert_eq!(Spread::of([10.0, 20.0]).unwrap().median, 15.0);
        assert_eq!(Spread::of([7.4]).unwrap().to_string(), "7");
        assert_eq!(Spread::of([]), None);
    }
}
