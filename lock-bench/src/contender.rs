//! What the benchmark measures: a lock implementation (ours or a peer's) as a factory
//! of workers, each with its own connection, that take and give back one named lock.

use async_trait::async_trait;
use std::time::Duration;

/// Any error a contender reports; the bench prints it and stops that contender.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// How a contender's numbers are read in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// This library.
    Ours,
    /// The least a lock can cost on that server (e.g. `pg_advisory_lock`, two raw
    /// Redis round trips): a baseline, not a rival with the same guarantees.
    Floor,
    /// Another library or a common hand-rolled recipe.
    Peer,
    /// The floor, plus by hand the server work this library's promises take there (a
    /// fencing token per grant; on Redis a receipt per release, on the SQL servers the
    /// session strategy's silence limit), done by a bare client: what lies between it
    /// and our uncontended cycle is our client's share.
    FloorWithPromises,
}

/// One lock implementation on one server.
#[async_trait]
pub trait Contender: Send + Sync {
    /// A short name for tables and plots.
    fn name(&self) -> String;
    /// How to read its numbers.
    fn role(&self) -> Role;
    /// A worker with a connection of its own, for the lock `name`.
    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError>;
}

/// One client of one lock. `acquire` waits as long as it takes.
#[async_trait]
pub trait Worker: Send {
    /// Takes the lock, waiting for it if it is held.
    async fn acquire(&mut self) -> Result<(), BenchError>;
    /// Gives back the lock taken by the last `acquire`.
    async fn release(&mut self) -> Result<(), BenchError>;
    /// `n` uncontended acquire + release cycles timed by the worker itself, for a peer
    /// in another process whose pipe round trip must not count; `None` (the default)
    /// means the bench times `acquire` and `release` itself.
    async fn timed_cycles(&mut self, _n: usize) -> Result<Option<Vec<Duration>>, BenchError> {
        Ok(None)
    }
}
