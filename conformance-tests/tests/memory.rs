//! The whole conformance suite against the in-memory reference backend.

use std::sync::Arc;
use std::time::Duration;

use conformance_tests::holder::HolderProcess;
use conformance_tests::memory::Memory;
use conformance_tests::run_suite;
use lock_core::memory::MemoryBackend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_conformance() {
    let backend = MemoryBackend::new();
    let report = run_suite(Arc::new(Memory::new("memory", backend.clone()))).await;
    if std::env::var_os("LOCK_TEST_CASES").is_none() {
        assert!(report.passed.len() >= 25, "{}", report.summary());
    }
    // Everything was released or expired, and no waiter left state behind.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(backend.active_keys(), 0, "state left behind: {backend:?}");
}

/// The holder binary works end to end (on the in-memory backend it holds a lock only
/// inside its own process; real backends use it to test a killed holder).
#[tokio::test]
async fn holder_binary_acquires_and_is_killed() {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
    command.args([
        "--url",
        "memory://",
        "--name",
        "x",
        "--watchdog-lease-ms",
        "300",
    ]);
    let mut holder = HolderProcess::start(command, Duration::from_secs(30))
        .await
        .expect("holder starts");
    assert!(holder.fence() >= 1);
    let pid = holder.pid().expect("running");
    holder.kill().await;
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());

    let mut bad = tokio::process::Command::new(env!("CARGO_BIN_EXE_lock-holder"));
    bad.args(["--url", "memory://", "--name", ""]);
    let err = HolderProcess::start(bad, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(err.contains("lock name must not be empty"), "{err}");
}
