//! The least an etcd lock can cost: the queue recipe written by hand, with nothing
//! else. One transaction writes the worker's key on its lease and reads the oldest key
//! of the lock; the oldest holds. A waiter watches the key just ahead of it for its
//! deletion and reads again. Release is one delete. No fencing write, no turns between
//! owners of one client, no loss watch, no clean-up: a floor, not a lock to use.

use async_trait::async_trait;
use distributed_locks::etcd::EtcdConfig;
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse,
};

use crate::contender::{BenchError, Contender, Role, Worker};

/// The hand-written recipe at `url` (`etcd://host:port`).
pub struct RawEtcd {
    url: String,
}

impl RawEtcd {
    pub fn new(url: &str) -> Self {
        Self { url: url.into() }
    }
}

#[async_trait]
impl Contender for RawEtcd {
    fn name(&self) -> String {
        "raw etcd txn + watch".into()
    }

    fn role(&self) -> Role {
        Role::Floor
    }

    async fn worker(&self, name: &str) -> Result<Box<dyn Worker>, BenchError> {
        let config = EtcdConfig::from_url(&self.url)?;
        let mut client = Client::connect(config.endpoints(), None).await?;
        // Long enough for any run: the bench measures locking, not keep-alives.
        let lease = client.lease_grant(600, None).await?.id();
        let prefix = format!("bench-raw/{name}/");
        Ok(Box::new(RawEtcdWorker {
            client,
            lease,
            key: format!("{prefix}{lease:x}"),
            prefix,
        }))
    }
}

struct RawEtcdWorker {
    client: Client,
    lease: i64,
    prefix: String,
    key: String,
}

impl RawEtcdWorker {
    /// The key created just before `revision` under the prefix, if any (its
    /// predecessor in the queue), with its create revision.
    async fn predecessor(&mut self, revision: i64) -> Result<Option<(Vec<u8>, i64)>, BenchError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_max_create_revision(revision - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1);
        let found = self.client.get(self.prefix.as_str(), Some(options)).await?;
        Ok(found
            .kvs()
            .first()
            .map(|kv| (kv.key().to_vec(), kv.create_revision())))
    }
}

#[async_trait]
impl Worker for RawEtcdWorker {
    async fn acquire(&mut self) -> Result<(), BenchError> {
        let oldest = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.as_str(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(
                    self.key.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(self.lease)),
                ),
                TxnOp::get(self.prefix.as_str(), Some(oldest)),
            ]);
        let reply = self.client.txn(txn).await?;
        if !reply.succeeded() {
            return Err("the worker's key was already there".into());
        }
        let mine = reply
            .header()
            .ok_or("a txn reply without a header")?
            .revision();
        let first = reply.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
            _ => None,
        });
        if first == Some(mine) {
            return Ok(());
        }
        // Queued: wait for each key ahead to go, as etcd's own recipe does. The watch
        // starts now (a watch from a past revision waits for etcd's 100 ms catch-up),
        // then a read makes sure the key did not go before it: the same key, by its
        // create revision, since each worker writes its one key again every cycle, and
        // a key written again is behind us.
        while let Some((ahead, created_at)) = self.predecessor(mine).await? {
            let mut stream = self
                .client
                .watch_client()
                .watch(ahead.clone(), None)
                .await?;
            let created = stream.message().await?;
            if !created.is_some_and(|m| m.created()) {
                return Err("the watch was not created".into());
            }
            let there = self.client.get(ahead, None).await?;
            if there
                .kvs()
                .first()
                .is_none_or(|kv| kv.create_revision() != created_at)
            {
                continue;
            }
            while let Some(message) = stream.message().await? {
                if message
                    .events()
                    .iter()
                    .any(|e| e.event_type() == EventType::Delete)
                {
                    break;
                }
            }
        }
        Ok(())
    }

    async fn release(&mut self) -> Result<(), BenchError> {
        self.client.delete(self.key.as_str(), None).await?;
        Ok(())
    }
}
