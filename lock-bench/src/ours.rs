//! This library as a contender: each worker is a client of its own (its own
//! connections), as separate processes would be. Its lock, or a permit of its
//! semaphore.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distributed_locks::prelude::*;
use distributed_locks::{connect, ConnectOptions, LockGuard, LockProvider, Semaphore};

use crate::contender::{BenchError, Contender, Role, Worker};

/// Our lock at `url`, or a semaphore's permit.
pub struct Ours {
    /// `ours`, or `ours (session)` for the SQL session strategy.
    label: String,
    url: String,
    namespace: String,
    /// In-memory backends live per `connect` call: their workers share one client.
    shared: Option<Arc<dyn LockProvider>>,
    /// Workers take a permit of a semaphore of this many instead of the lock.
    permits: Option<u32>,
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
            label: "ours".into(),
            url: url.to_owned(),
            namespace,
            shared,
            permits: None,
        })
    }

    /// Our SQL lock at `url` with the session strategy (advisory locks), on tables of
    /// its own; `None` for a URL of another server or that picks a strategy itself.
    pub async fn session(url: &str) -> Result<Option<Self>, BenchError> {
        let scheme = url.split("://").next().unwrap_or_default();
        if !matches!(scheme, "postgres" | "postgresql" | "mysql" | "mariadb")
            || url.contains("lock_strategy=")
        {
            return Ok(None);
        }
        let sep = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{sep}lock_strategy=session&lock_table_prefix=lock_bench_session");
        Ok(Some(Self {
            label: "ours (session)".into(),
            ..Self::new(&url).await?
        }))
    }

    /// Our semaphore of `permits` at `url`.
    pub async fn semaphore(url: &str, permits: u32) -> Result<Self, BenchError> {
        Ok(Self {
            permits: Some(permits),
            ..Self::new(url).await?
        })
    }
}

pub(crate) async fn client(
    url: &str,
    namespace: &str,
) -> Result<Arc<dyn LockProvider>, BenchError> {
    let options = ConnectOptions::default()
        .namespace(namespace)
        .watchdog_lease(Duration::from_secs(30));
    Ok(connect(url, options).await?)
}

#[async_trait]
impl Contender for Ours {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn role(&self) -> Role {
        Role::Ours
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let provider = match &self.shared {
            Some(shared) => shared.clone(),
            None => client(&self.url, &self.namespace).await?,
        };
        let lock = match self.permits {
            Some(permits) => Taken::Permit(provider.semaphore(name, permits)?),
            None => Taken::Lock(provider.lock(name)?),
        };
        Ok(Box::new(OurWorker {
            lock,
            held: None,
            _provider: provider,
        }))
    }
}

/// What a worker takes.
enum Taken {
    Lock(Arc<dyn DistributedLock>),
    Permit(Arc<dyn Semaphore>),
}

struct OurWorker {
    lock: Taken,
    held: Option<LockGuard>,
    _provider: Arc<dyn LockProvider>,
}

#[async_trait]
impl Worker for OurWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        self.held = Some(match &self.lock {
            Taken::Lock(lock) => lock.acquire().await?,
            Taken::Permit(semaphore) => semaphore.acquire().await?,
        });
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let guard = self.held.take().ok_or("release without a guard")?;
        Ok(guard.release().await?)
    }
}
