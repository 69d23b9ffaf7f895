//! What one run measured: per server, per contender.

use crate::contender::Role;
use crate::scenarios::Contended;
use crate::stats::Samples;

/// One contender's results on one server.
#[derive(Debug, Clone)]
pub struct Measured {
    pub name: String,
    pub role: Role,
    /// Uncontended acquire + release cycles.
    pub cycle: Samples,
    /// The contended run.
    pub contended: Contended,
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

/// The median uncontended cycle, in microseconds.
pub fn cycle_p50(m: &Measured) -> Option<f64> {
    (!m.cycle.is_empty()).then(|| m.cycle.percentile(50.0).as_secs_f64() * 1e6)
}

/// The median handoff to a different worker, in microseconds.
pub fn handoff_p50(m: &Measured) -> Option<f64> {
    let h = &m.contended.handoffs;
    (!h.is_empty()).then(|| h.percentile(50.0).as_secs_f64() * 1e6)
}
