//! One Redis server (or Sentinel-managed primary): a command connection, a pub/sub
//! connection, and the script calls both backends make, each bounded by the configured
//! timeouts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::Result;

use lock_core::backend::Cleanups;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Value};

use crate::config::RedisConfig;
use crate::error;
use crate::holder_watch::HolderWatches;
use crate::primary::Primary;
use crate::pubsub::PubSub;

/// A command connection: to one server (or the current primary), or to a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Single(_) => "Conn::Single",
            Conn::Cluster(_) => "Conn::Cluster",
        })
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The error of a call run twice: the second's, unless its connection was refused
/// while the first's may have reached the server (a refusal would say the call never
/// ran: see [`error::may_have_run`]).
fn first_unless_refused(first: redis::RedisError, again: redis::RedisError) -> redis::RedisError {
    if again.is_connection_refusal() && !first.is_connection_refusal() {
        first
    } else {
        again
    }
}

/// The cached connection, if it was made for the primary of `generation`.
fn made_for(cached: &Option<(u64, Conn)>, generation: u64) -> Option<Conn> {
    match cached {
        Some((made_for, conn)) if *made_for == generation => Some(conn.clone()),
        _ => None,
    }
}

/// A connection to one server. Cloning shares it.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    inner: Arc<NodeInner>,
}

#[derive(Debug)]
struct NodeInner {
    config: RedisConfig,
    primary: Arc<Primary>,
    /// Set for a Redis Cluster, whose client finds the nodes itself.
    cluster: Option<ClusterClient>,
    /// Made on first use, inside the runtime (the manager spawns a task), for the
    /// primary of the generation beside it.
    conn: Mutex<Option<(u64, Conn)>>,
    /// Held while a cluster connection is being made, so calls that find none wait for
    /// that one instead of each making its own (a burst of first calls would otherwise
    /// open one connection per call to every node).
    cluster_connecting: tokio::sync::Mutex<()>,
    /// Idle connections for grants under replica acknowledgement, with the primary
    /// generation each was made for (see [`AcksConn`]).
    acks_pool: Arc<Mutex<Vec<(u64, MultiplexedConnection)>>>,
    pubsub: PubSub,
    /// Force-unlock listeners of held leases, not yet started.
    holder_watches: HolderWatches,
    /// Undos and queue removals left running by dropped or timed-out calls.
    cleanups: Cleanups,
}

impl Node {
    pub(crate) fn new(config: RedisConfig) -> Result<Self> {
        config.validate()?;
        // rustls panics on first use unless it can tell which crypto provider to use;
        // pick ring unless the application installed one already.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let primary = Arc::new(Primary::new(&config)?);
        let cluster = match config.is_cluster() {
            true => Some(crate::cluster::client(&config, None)?),
            false => None,
        };
        let pubsub = PubSub::new(&config, primary.clone())?;
        Ok(Node {
            inner: Arc::new(NodeInner {
                config,
                primary,
                cluster,
                conn: Mutex::new(None),
                cluster_connecting: tokio::sync::Mutex::new(()),
                acks_pool: Arc::default(),
                pubsub,
                holder_watches: HolderWatches::default(),
                cleanups: Cleanups::default(),
            }),
        })
    }

    pub(crate) fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// Whether the primary can move (Sentinel, or a cluster's slot owner).
    pub(crate) fn follows_failover(&self) -> bool {
        self.inner.primary.follows_failover() || self.inner.cluster.is_some()
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.cluster.is_some()
    }

    pub(crate) fn pubsub(&self) -> &PubSub {
        &self.inner.pubsub
    }

    /// The force-unlock listeners of held leases waiting to start.
    pub(crate) fn holder_watches(&self) -> &HolderWatches {
        &self.inner.holder_watches
    }

    /// The clean-ups left running on this server ([`lock_core::backend::LockBackend::settle`]).
    pub(crate) fn cleanups(&self) -> &Cleanups {
        &self.inner.cleanups
    }

    /// A command connection to the current primary, and the primary's generation. The
    /// manager reconnects by itself after a failure; a call made while the server is
    /// down fails after one connection attempt.
    async fn conn(&self) -> Result<(u64, Conn)> {
        let config = &self.inner.config;
        if let Some(cluster) = &self.inner.cluster {
            return self.cluster_conn(cluster).await;
        }
        // The common case, without copying the primary's client.
        if let Some(generation) = self.inner.primary.known_generation() {
            if let Some(conn) = made_for(&self.cached(), generation) {
                return Ok((generation, conn));
            }
        }
        let (generation, client) = self.inner.primary.client(config.call_timeout()).await?;
        let mut conn = self.cached();
        if let Some(made) = made_for(&conn, generation) {
            return Ok((generation, made));
        }
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout()))
            // Every call is bounded by `within` instead: an acquire abandoned on its
            // timeout must still see its late reply, to undo a grant it brings.
            .set_response_timeout(None)
            // Fail fast and let the caller (or the watchdog) decide when to retry.
            .set_number_of_retries(0)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        let manager = Conn::Single(
            client
                .get_connection_manager_lazy(settings)
                .map_err(error::map)?,
        );
        *conn = Some((generation, manager.clone()));
        Ok((generation, manager))
    }

    /// The command connection kept for the next call, and the generation of the primary
    /// it was made for (0 on a cluster).
    fn cached(&self) -> std::sync::MutexGuard<'_, Option<(u64, Conn)>> {
        // Only ever replaced whole: a panic cannot leave it half written.
        self.inner
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection to the cluster, made on first use. It finds the slots' nodes
    /// itself and follows redirections, so it is never remade here.
    async fn cluster_conn(&self, cluster: &ClusterClient) -> Result<(u64, Conn)> {
        if let Some((_, conn)) = &*self.cached() {
            return Ok((0, conn.clone()));
        }
        // One connect at a time; a caller dropped while connecting lets the next try.
        let _connecting = self.inner.cluster_connecting.lock().await;
        if let Some((_, conn)) = &*self.cached() {
            return Ok((0, conn.clone()));
        }
        let made = crate::cluster::connect(cluster, self.inner.config.call_timeout()).await?;
        let conn = self
            .cached()
            .get_or_insert((0, Conn::Cluster(made)))
            .1
            .clone();
        Ok((0, conn))
    }

    /// Runs `call` on a command connection, all within `limit`.
    ///
    /// A call that finds the connection dropped (the server restarted, or closed it)
    /// runs once more, on the connection the manager makes in its place: without that,
    /// the first call of every client after a restart would fail. Under Sentinel, a
    /// failure that may mean the primary moved (see [`error::may_have_moved`]) makes
    /// the node ask the sentinels again, and the call runs once more on the primary
    /// they name. Repeating is safe for every call made here: releases, renewals and
    /// queue removals are idempotent, and an acquire whose first run was granted finds
    /// the key its own request wrote (the same request id: see
    /// [`RedisLease`](crate::RedisLease)) and takes it over with a new fence.
    async fn run<T, Fut>(
        &self,
        what: &'static str,
        limit: Duration,
        call: impl Fn(Conn) -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let primary = &self.inner.primary;
        let mut used = None;
        let attempt = async {
            let (generation, conn) = self.conn().await?;
            used = Some(generation);
            match call(conn.clone()).await {
                Err(err) if primary.follows_failover() && error::may_have_moved(&err) => {
                    tracing::debug!(what, error = %err, "the primary may have moved; calling again on the one Sentinel names");
                    primary.forget(generation);
                    let (generation, conn) = match self.conn().await {
                        Ok(found) => found,
                        Err(lookup) if err.is_connection_refusal() => return Err(lookup),
                        // The first call may have run: say so, not that the lookup failed.
                        Err(_) => return Err(error::map(err)),
                    };
                    used = Some(generation);
                    call(conn)
                        .await
                        .map_err(|again| error::map(first_unless_refused(err, again)))
                }
                Err(err) if err.is_connection_dropped() && !err.is_connection_refusal() => {
                    tracing::debug!(what, error = %err, "connection dropped; calling again on a new one");
                    call(conn)
                        .await
                        .map_err(|again| error::map(first_unless_refused(err, again)))
                }
                other => other.map_err(error::map),
            }
        };
        let result = tokio::time::timeout(limit, attempt).await;
        match result {
            Ok(result) => result,
            Err(_) => {
                // A primary that hangs may have been replaced: look again next time.
                if let Some(generation) = used {
                    primary.forget(generation);
                }
                Err(error::Error::TimedOut { what, after: limit }.into())
            }
        }
    }

    /// Runs a script; no answer within connect + request timeout is
    /// [`lock_core::Error::Unavailable`].
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        what: &'static str,
        invocation: &crate::calls::Invocation,
    ) -> Result<T> {
        self.run(what, self.call_timeout(), |mut conn| async move {
            invocation.invoke_async(&mut conn).await
        })
        .await
    }

    /// How long one call may take: connect plus request timeout.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.inner.config.call_timeout()
    }

    /// Runs one of the crate's script calls, bounded like [`Node::eval`].
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        what: &'static str,
        call: &crate::calls::Call,
    ) -> Result<T> {
        self.eval(what, &call.invocation()).await
    }

    /// Runs one of the crate's script calls, waiting for its reply up to `limit`.
    pub(crate) async fn call_within<T: FromRedisValue>(
        &self,
        what: &'static str,
        invocation: &crate::calls::Invocation,
        limit: Duration,
    ) -> Result<T> {
        self.run(what, limit, |mut conn| async move {
            invocation.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs a plain command, bounded like [`Node::eval`].
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        what: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        self.run(what, self.call_timeout(), |mut conn| async move {
            cmd.query_async(&mut conn).await
        })
        .await
    }

    /// A connection to the current primary that only the caller uses until it drops
    /// the guard: an idle one from the pool, or a new one (within the connect timeout).
    pub(crate) async fn acks_conn(&self) -> Result<AcksConn> {
        let config = &self.inner.config;
        let (generation, client) = self.inner.primary.client(config.call_timeout()).await?;
        let idle = {
            let mut pool = self
                .inner
                .acks_pool
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // Connections made for an older primary are dropped here.
            pool.retain(|(made_for, _)| *made_for == generation);
            pool.pop()
        };
        let pooled = idle.is_some();
        let conn = match idle {
            Some((_, conn)) => conn,
            None => {
                error::within(
                    "connecting",
                    config.connect_timeout(),
                    client.get_multiplexed_async_connection(),
                )
                .await?
            }
        };
        Ok(AcksConn {
            conn: Some(conn),
            pooled,
            generation,
            pool: self.inner.acks_pool.clone(),
            primary: self.inner.primary.clone(),
        })
    }
}

/// How many idle connections for acknowledged grants a node keeps.
const ACKS_POOL: usize = 16;

/// A connection for one acknowledged grant; back to the pool when dropped, unless
/// [`AcksConn::failed`] was called (then, under Sentinel, the primary is looked up
/// again: the failure may mean it moved).
pub(crate) struct AcksConn {
    conn: Option<MultiplexedConnection>,
    /// Taken from the pool rather than made for this grant.
    pooled: bool,
    generation: u64,
    pool: Arc<Mutex<Vec<(u64, MultiplexedConnection)>>>,
    primary: Arc<Primary>,
}

impl AcksConn {
    pub(crate) fn get(&mut self) -> &mut MultiplexedConnection {
        self.conn.as_mut().expect("taken only on drop")
    }

    /// Whether the connection came from the pool (it may have died while idle).
    pub(crate) fn pooled(&self) -> bool {
        self.pooled
    }

    /// The connection failed: drop it rather than pool it, and every idle one with it.
    /// What broke this one (the server restarted, or closed its connections, or the
    /// primary moved) most likely broke them all; kept, each would fail one more
    /// grant. Under Sentinel, the primary is looked up again.
    pub(crate) fn failed(&mut self) {
        self.conn = None;
        self.pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
        self.primary.forget(self.generation);
    }
}

impl Drop for AcksConn {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pool.len() < ACKS_POOL {
            pool.push((self.generation, conn));
        }
    }
}
