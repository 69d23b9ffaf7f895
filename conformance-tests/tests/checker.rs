//! The randomized history checker (`conformance_tests::checker`, docs/checker.md),
//! simulated: the in-memory backend on tokio's paused clock, where every sleep, lease
//! and wait limit passes at once, so many seeds run in seconds and a seed replays the
//! same way. The real servers run it from their own test files.

use std::sync::Arc;

use async_trait::async_trait;
use conformance_tests::checker::{check, Budget};
use conformance_tests::{Backend, ClientOptions};
use lock_core::memory::MemoryBackend;
use lock_core::{LockFamily, LockKey, LockProvider};

/// How many seeds CI runs.
const SEEDS: u64 = 200;

struct Memory {
    backend: MemoryBackend,
}

#[async_trait]
impl Backend for Memory {
    fn name(&self) -> &str {
        "memory-simulated"
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(self.backend.clone())
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
        use lock_core::backend::LockBackend as _;
        // A key whose leases ran out stays in the table, idle, until something looks
        // at it; a look drops it if nothing is held, queued or waiting on it.
        for key in self.backend.active_keys_in(namespace) {
            let _ = self.backend.is_locked(&key, LockFamily::Exclusive).await;
        }
        Ok(self
            .backend
            .active_keys_in(namespace)
            .iter()
            .map(|key| format!("{key:?}"))
            .collect())
    }

    async fn revoke(&self, key: &LockKey, family: LockFamily) -> Result<(), String> {
        use lock_core::backend::LockBackend as _;
        self.backend
            .force_unlock(key, family)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

#[tokio::test(start_paused = true)]
async fn simulated_memory() {
    let backend = Arc::new(Memory {
        backend: MemoryBackend::new(),
    });
    let report = check(backend, Budget::seeds(SEEDS)).await;
    report.assert_ok();
}
