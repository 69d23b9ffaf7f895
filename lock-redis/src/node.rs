//! One Redis server: a command connection, a pub/sub connection, and the script calls
//! both backends make, each bounded by the configured timeouts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Cleanups, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, ScriptInvocation};

use crate::config::RedisConfig;
use crate::error;
use crate::pubsub::PubSub;

/// A connection to one server. Cloning shares it.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    inner: Arc<NodeInner>,
}

#[derive(Debug)]
struct NodeInner {
    config: RedisConfig,
    client: redis::Client,
    /// Made on first use, inside the runtime (the manager spawns a task).
    conn: Mutex<Option<ConnectionManager>>,
    pubsub: PubSub,
    /// Undos and queue removals left running by dropped or timed-out calls.
    cleanups: Cleanups,
}

impl Node {
    pub(crate) fn new(config: RedisConfig) -> Result<Self> {
        // rustls panics on first use unless it can tell which crypto provider to use;
        // pick ring unless the application installed one already.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = config.client()?;
        let pubsub = PubSub::new(
            client.clone(),
            config.connect_timeout(),
            config.command_timeout(),
        );
        Ok(Node {
            inner: Arc::new(NodeInner {
                config,
                client,
                conn: Mutex::new(None),
                pubsub,
                cleanups: Cleanups::default(),
            }),
        })
    }

    pub(crate) fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    pub(crate) fn pubsub(&self) -> &PubSub {
        &self.inner.pubsub
    }

    /// The clean-ups left running on this server ([`lock_core::LockBackend::settle`]).
    pub(crate) fn cleanups(&self) -> &Cleanups {
        &self.inner.cleanups
    }

    /// The command connection. The manager reconnects by itself after a failure; a
    /// call made while the server is down fails after one connection attempt.
    fn conn(&self) -> Result<ConnectionManager> {
        let mut conn = self
            .inner
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(conn) = &*conn {
            return Ok(conn.clone());
        }
        let config = &self.inner.config;
        let settings = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout()))
            // Every call is bounded by `within` instead: an acquire abandoned on its
            // timeout must still see its late reply, to undo a grant it brings.
            .set_response_timeout(None)
            // Fail fast and let the caller (or the watchdog) decide when to retry.
            .set_number_of_retries(0)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        let manager = self
            .inner
            .client
            .get_connection_manager_lazy(settings)
            .map_err(error::map)?;
        *conn = Some(manager.clone());
        Ok(manager)
    }

    /// Runs a script; no answer within connect + command timeout is
    /// [`lock_core::Error::Unavailable`].
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        what: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T> {
        self.run(what, self.call_timeout(), |mut conn| async move {
            invocation.invoke_async(&mut conn).await
        })
        .await
    }

    /// Runs `call` on the command connection, all within `limit`. A call that finds
    /// the connection dropped (the server restarted, or closed it) runs once more, on
    /// the connection the manager makes in its place: without that, the first call of
    /// every client after a restart would fail. Repeating is safe for every call made
    /// here: releases, renewals and queue removals are idempotent, and an acquire whose
    /// first run was granted finds its own key and takes it over with a new fence (see
    /// the acquire scripts).
    async fn run<T, Fut>(
        &self,
        what: &'static str,
        limit: Duration,
        call: impl Fn(ConnectionManager) -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let conn = self.conn()?;
        let once_more_if_dropped = async {
            match call(conn.clone()).await {
                Err(err) if err.is_connection_dropped() && !err.is_connection_refusal() => {
                    tracing::debug!(what, error = %err, "connection dropped; calling again on a new one");
                    call(conn).await
                }
                other => other,
            }
        };
        error::within(what, limit, once_more_if_dropped).await
    }
    /// How long one call may take: connect plus command timeout.
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
        call: &crate::calls::Call,
        limit: Duration,
    ) -> Result<T> {
        let invocation = call.invocation();
        self.run(what, limit, |mut conn| {
            let invocation = &invocation;
            async move { invocation.invoke_async(&mut conn).await }
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
}
