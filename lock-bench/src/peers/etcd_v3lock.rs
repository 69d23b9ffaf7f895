//! etcd's own lock service (v3lock, the server side of `etcdctl lock`), called through
//! etcd-client's lock API, each worker with a lease of its own as v3lock requires.

use async_trait::async_trait;
use distributed_locks::etcd::EtcdConfig;
use etcd_client::{Client, LockOptions};

use crate::contender::{BenchError, Contender, Role, Worker};

/// v3lock at `url` (`etcd://host:port`).
pub struct V3Lock {
    url: String,
}

impl V3Lock {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for V3Lock {
    fn name(&self) -> String {
        "etcd v3lock".into()
    }

    fn role(&self) -> Role {
        Role::Peer
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let config = EtcdConfig::from_url(&self.url)?;
        let mut client = Client::connect(config.endpoints(), None).await?;
        // Long enough for any run: the bench measures locking, not keep-alives.
        let lease = client.lease_grant(600, None).await?.id();
        Ok(Box::new(V3LockWorker {
            client,
            lease,
            name: format!("bench-v3lock/{name}"),
            key: None,
        }))
    }
}

struct V3LockWorker {
    client: Client,
    lease: i64,
    name: String,
    key: Option<Vec<u8>>,
}

#[async_trait]
impl Worker for V3LockWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let options = LockOptions::new().with_lease(self.lease);
        let reply = self.client.lock(self.name.as_str(), Some(options)).await?;
        self.key = Some(reply.key().to_vec());
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let key = self.key.take().ok_or("release without a key")?;
        self.client.unlock(key).await?;
        Ok(())
    }
}
