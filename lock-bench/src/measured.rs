//! What one run measured: per server, per contender.

use crate::contender::Role;
use crate::scenarios::Contended;
use crate::stats::{Samples, Spread};

/// One contender's results on one server, over one run or several.
#[derive(Debug, Clone)]
pub struct Measured {
    pub name: String,
    pub role: Role,
    /// Uncontended acquire + release cycles, of every run.
    pub cycle: Samples,
    /// The contended runs, added up.
    pub contended: Contended,
    /// Each run's medians, in run order.
    pub runs: Vec<RunMedians>,
}

/// What one run gave, for the spread between runs.
#[derive(Debug, Clone, Copy)]
pub struct RunMedians {
    /// The median uncontended cycle, in microseconds.
    pub cycle_us: f64,
    /// The median handoff, in microseconds (none without handoffs).
    pub handoff_us: Option<f64>,
    /// Contended grants per second.
    pub throughput: f64,
}

impl Measured {
    /// One run's results.
    pub fn new(name: String, role: Role, cycle: Samples, contended: Contended) -> Self {
        let handoffs = &contended.handoffs;
        let run = RunMedians {
            cycle_us: micros(cycle.percentile(50.0)),
            handoff_us: (!handoffs.is_empty()).then(|| micros(handoffs.percentile(50.0))),
            throughput: contended.throughput(),
        };
        Measured {
            name,
            role,
            cycle,
            contended,
            runs: vec![run],
        }
    }

    /// Adds a later run of the same contender.
    pub fn absorb(&mut self, run: Measured) {
        self.cycle.extend(&run.cycle);
        self.contended.absorb(&run.contended);
        self.runs.extend(run.runs);
    }

    /// The median uncontended cycle of each run, in microseconds.
    pub fn cycle_spread(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().map(|r| r.cycle_us))
    }

    /// The median handoff of each run, in microseconds.
    pub fn handoff_spread(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().filter_map(|r| r.handoff_us))
    }

    /// Each run's contended grants per second.
    pub fn throughput_spread(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().map(|r| r.throughput))
    }
}

fn micros(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One server's results.
#[derive(Debug, Clone)]
pub struct Target {
    /// Our backend's name there (`redis`, `postgres`, ...).
    pub backend: String,
    /// Each contender that finished, ours first.
    pub measured: Vec<Measured>,
    /// Contenders that failed, with why.
    pub failed: Vec<(String, String)>,
    /// One client of ours holding many locks (`--held`), if measured.
    pub held: Option<crate::held::Held>,
    /// One lock passed through a crowd of waiters (`--crowd`), if measured.
    pub crowd: Option<crate::crowd::Crowd>,
    /// Our semaphore (`--permits`), if measured.
    pub permits: Vec<crate::permits::Permits>,
}

impl Target {
    /// The floor's result, if one ran.
    pub fn floor(&self) -> Option<&Measured> {
        self.measured.iter().find(|m| m.role == Role::Floor)
    }

    /// The peer with the lowest median by `metric`, other than `except`.
    pub fn best_peer(&self, metric: impl Fn(&Measured) -> Option<f64>) -> Option<(f64, &Measured)> {
        self.measured
            .iter()
            .filter(|m| m.role == Role::Peer)
            .filter_map(|m| metric(m).map(|v| (v, m)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }
}

/// The median uncontended cycle, in microseconds (the median of the runs' medians).
pub fn cycle_p50(m: &Measured) -> Option<f64> {
    m.cycle_spread().map(|s| s.median)
}

/// The median handoff to a different worker, in microseconds (the median of the
/// runs' medians).
pub fn handoff_p50(m: &Measured) -> Option<f64> {
    m.handoff_spread().map(|s| s.median)
}
