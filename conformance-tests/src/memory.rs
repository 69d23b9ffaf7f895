//! The in-memory reference backend as a [`Backend`] under test, for the suite and the
//! simulated checker.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::backend::LockBackend as _;
use lock_core::memory::MemoryBackend;
use lock_core::{LockFamily, LockKey, LockProvider};

use crate::{Backend, ClientOptions};

/// A [`MemoryBackend`] shared by every client a test makes, reported under `name`.
#[derive(Debug)]
pub struct Memory {
    name: &'static str,
    backend: MemoryBackend,
}

impl Memory {
    /// Clients over `backend`, named `name` in reports.
    pub fn new(name: &'static str, backend: MemoryBackend) -> Self {
        Memory { name, backend }
    }
}

#[async_trait]
impl Backend for Memory {
    fn name(&self) -> &str {
        self.name
    }

    async fn client(&self, options: ClientOptions) -> lock_core::Result<Arc<dyn LockProvider>> {
        options.client(self.backend.clone())
    }

    async fn leftovers(&self, namespace: &str) -> Result<Vec<String>, String> {
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
        self.backend
            .force_unlock(key, family)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
