//! The conformance suite every lock backend runs, and the tools its tests need.
//!
//! * [`Backend`]: what a backend's test supplies: clients in a namespace, and fault
//!   hooks (make a lease vanish; start a process that holds a lock, to kill it).
//! * [`run_suite`]: runs every case against one backend, each in a fresh namespace,
//!   skipping (loudly, with the reason) what the backend's
//!   [`Capabilities`](lock_core::Capabilities) say it lacks, and prints a summary line
//!   `conformance[<backend>]: N passed, M failed, K skipped`.
//! * [`server`]: starts real servers on loopback ports for the tests (processes or
//!   containers), or uses a URL from the environment.
//! * [`cluster`]: multi-node clusters in containers with faults, and the fenced-store
//!   workload the fault suite (`tests/cluster.rs`) runs against them.
//! * [`checker`]: a randomized history checker: generated workloads from a seed, with
//!   the whole history checked for overlapping holds, fencing order, wait limits and
//!   leftovers (`docs/checker.md`).
//! * [`log_capture`]: the tests' tracing subscriber, which also records warnings so
//!   that a test can check what the log says of a lost lease.
//! * the `lock-holder` binary: acquires a lock on a backend, prints `ACQUIRED <fence>`,
//!   and waits to be killed ([`holder`] drives it).
//!
//! Set `LOCK_TEST_CASES=fair::,rw::downgrade` to run only the cases whose names contain
//! one of the comma-separated parts, and `RUST_LOG=lock_core=debug` to see the locks'
//! trace events.
//!
//! Each backend's test target calls [`run_suite`] from one `#[tokio::test]`; see
//! `tests/memory.rs`.

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod backend;
mod cases;
mod check;
pub mod checker;
pub mod cluster;
pub mod curator;
pub mod holder;
pub mod log_capture;
pub mod memory;
pub mod proxy;
mod runner;
pub mod server;
pub mod slow_network;

pub use backend::{revoked, Backend, ClientOptions, HolderSpec};
pub use cases::{all_cases, Case, Needs};
pub use runner::{run_cases, run_suite, run_transport_suite, Ctx, Report};
