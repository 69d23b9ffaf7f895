//! This library as a contender: each worker is a client of its own (its own
//! connections), as separate processes would be.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions, LockGuard, LockProvider};

use crate::contender::{BenchError, Contender, Role, Worker};

/// Our lock at `url`.
pub struct Ours {
    url: String,
    namespace: String,
    /// In-memory backends live per `connect` call: their workers share one client.
    shared: Option<Arc<dyn LockProvider>>,
}

impl Ours {
    /// Our lock at `url`, with keys under a namespace of this run.
    pub async fn new(url: &str) -> Result<Self, BenchError> {
        let namespace = format!("bench-{}", std::process::id());
        let shared = if url.starts_with("memory:") {
            Some(client(url, &namespace).await?)
        } else {
            None
        };
        Ok(Self {
            url: url.to_owned(),
            namespace,
            shared,
        })
    }
}

async fn client(url: &str, namespace: &str) -> Result<Arc<dyn LockProvider>, BenchError> {
    let options = ConnectOptions::default()
        .namespace(namespace)
        .watchdog_lease(Duration::from_secs(30));
    Ok(connect(url, options).await?)
}

#[async_trait]
impl Contender for Ours {
    fn name(&self) -> String {
        "ours".into()
    }

    fn role(&self) -> Role {
        Role::Ours
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let provider = match &self.shared {
            Some(shared) => shared.clone(),
            None => client(&self.url, &self.namespace).await?,
        };
        Ok(Box::new(OurWorker {
            lock: provider.lock(name)?,
            held: None,
            _provider: provider,
        }))
    }
}

struct OurWorker {
    lock: Arc<dyn DistributedLock>,
    held: Option<LockGuard>,
    _provider: Arc<dyn LockProvider>,
}

#[async_trait]
impl Worker for OurWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        self.held = Some(self.lock.acquire().await?);
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let guard = self.held.take().ok_or("release without a guard")?;
        Ok(guard.release().await?)
    }
}
