//! rslock, the most used Redlock crate, on one Redis server: `acquire_no_guard` waits
//! the way rslock does (retries with a random delay), and `unlock` gives the lock back.

use async_trait::async_trait;
use rslock::{Lock, LockManager};
use std::time::Duration;

use crate::contender::{BenchError, Contender, Role, Worker};

/// rslock at `url`.
pub struct Rslock {
    url: String,
}

impl Rslock {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for Rslock {
    fn name(&self) -> String {
        "rslock".into()
    }

    fn role(&self) -> Role {
        Role::Peer
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let manager = LockManager::from_clients(vec![redis::Client::open(self.url.as_str())?]);
        Ok(Box::new(RslockWorker {
            manager,
            resource: format!("bench-rslock:{name}").into_bytes(),
            held: None,
        }))
    }
}

struct RslockWorker {
    manager: LockManager,
    resource: Vec<u8>,
    held: Option<Lock>,
}

#[async_trait]
impl Worker for RslockWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let lock = self
            .manager
            .acquire_no_guard(&self.resource, Duration::from_secs(30))
            .await?;
        self.held = Some(lock);
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let lock = self.held.take().ok_or("release without a lock")?;
        self.manager.unlock(&lock).await;
        Ok(())
    }
}
