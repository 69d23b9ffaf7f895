//! The least a ZooKeeper lock can cost: the queue recipe written by hand, with
//! nothing else. Create an ephemeral sequential node, list the children, and hold if
//! ours is the lowest; else watch the node just ahead and list again once it goes.
//! Release is one delete. No fencing, no re-entry, no clean-up of a node whose create
//! answer was lost: a floor, not a lock to use.

use async_trait::async_trait;
use distributed_locks::zookeeper::ZkConfig;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use crate::contender::{BenchError, Contender, Role, Worker};

/// The hand-written recipe at `url` (`zk://host:port[,host:port]`).
pub struct RawZk {
    url: String,
}

impl RawZk {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for RawZk {
    fn name(&self) -> String {
        "raw ZooKeeper create + watch".into()
    }

    fn role(&self) -> Role {
        Role::Floor
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let config = ZkConfig::from_url(&self.url)?;
        let client = Client::connector()
            .with_session_timeout(config.session_timeout())
            .connect(&config.hosts().join(","))
            .await?;
        let dir = format!("/bench-raw/{name}");
        match client
            .mkdir(&dir, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
            .await
        {
            Ok(()) | Err(ZkError::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
        Ok(Box::new(RawZkWorker {
            client,
            dir,
            node: None,
        }))
    }
}

struct RawZkWorker {
    client: Client,
    dir: String,
    /// The node of the last acquire, until released.
    node: Option<String>,
}

#[async_trait]
impl Worker for RawZkWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (_, seq) = self
            .client
            .create(&format!("{}/lock-", self.dir), b"", &options)
            .await?;
        let mine = format!("lock-{seq}");
        loop {
            let mut children = self.client.list_children(&self.dir).await?;
            // Equal-width sequence numbers: the name order is the queue order.
            children.sort_unstable();
            let at = children
                .iter()
                .position(|c| *c == mine)
                .ok_or("the worker's node vanished")?;
            if at == 0 {
                self.node = Some(format!("{}/{mine}", self.dir));
                return Ok(());
            }
            let ahead = format!("{}/{}", self.dir, children[at - 1]);
            let (stat, watcher) = self.client.check_and_watch_stat(&ahead).await?;
            if stat.is_some() {
                watcher.changed().await;
            }
        }
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        let node = self.node.take().ok_or("release without a node")?;
        self.client.delete(&node, None).await?;
        Ok(())
    }
}
