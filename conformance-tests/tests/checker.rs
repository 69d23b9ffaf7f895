//! The randomized history checker (`conformance_tests::checker`, docs/checker.md),
//! simulated: the in-memory backend on tokio's paused clock, where every sleep, lease
//! and wait limit passes at once, so many seeds run in seconds and a seed replays the
//! same way. The real servers run it from their own test files.

use std::sync::Arc;

use conformance_tests::checker::{check, Budget};
use conformance_tests::memory::Memory;
use lock_core::memory::MemoryBackend;

/// How many seeds CI runs.
const SEEDS: u64 = 200;

#[tokio::test(start_paused = true)]
async fn simulated_memory() {
    let backend = Arc::new(Memory::new("memory-simulated", MemoryBackend::new()));
    let report = check(backend, Budget::seeds(SEEDS)).await;
    report.assert_ok();
}
