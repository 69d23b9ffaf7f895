//! Where the primary is: one fixed server, or wherever Redis Sentinel says it is now.
//!
//! Connections ask [`Primary::client`] for the current primary each time they are
//! (re)made. A failure that may mean the primary moved (refused or dropped connection,
//! `READONLY` from a demoted primary, no answer) makes the connection's owner call
//! [`Primary::forget`]; the next [`Primary::client`] asks the sentinels again. A
//! generation number keeps a late `forget` from throwing away a newer answer.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::Result;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};

use crate::config::RedisConfig;
use crate::error;

/// The primary of one deployment.
pub(crate) struct Primary {
    lookup: Option<Lookup>,
    current: Mutex<Current>,
}

struct Lookup {
    /// Ordered by the async mutex: one question to the sentinels at a time.
    sentinel: tokio::sync::Mutex<SentinelClient>,
    service: String,
}

struct Current {
    generation: u64,
    client: Option<redis::Client>,
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current();
        f.debug_struct("Primary")
            .field(
                "sentinel_service",
                &self.lookup.as_ref().map(|l| &l.service),
            )
            .field("generation", &current.generation)
            .field(
                "address",
                &current
                    .client
                    .as_ref()
                    .map(|c| c.get_connection_info().addr()),
            )
            .finish()
    }
}

impl Primary {
    /// No I/O: a Sentinel deployment's primary is looked up on first use.
    pub(crate) fn new(config: &RedisConfig) -> Result<Self> {
        let Some(settings) = config.sentinel() else {
            return Ok(Primary {
                lookup: None,
                current: Mutex::new(Current {
                    generation: 0,
                    client: Some(config.client()?),
                }),
            });
        };
        let sentinel = sentinel_client(config).map_err(|err| {
            lock_core::Error::invalid_argument(format!("invalid Sentinel settings: {err}"))
        })?;
        Ok(Primary {
            lookup: Some(Lookup {
                sentinel: tokio::sync::Mutex::new(sentinel),
                service: settings.service.clone(),
            }),
            current: Mutex::new(Current {
                generation: 0,
                client: None,
            }),
        })
    }

    /// Whether the primary can move (Sentinel), so failures should make us look again.
    pub(crate) fn follows_failover(&self) -> bool {
        self.lookup.is_some()
    }

    fn current(&self) -> MutexGuard<'_, Current> {
        // Each critical section leaves the state whole.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The generation of the primary known now, if one is: what a cached connection is
    /// checked against on every call, without copying the client.
    pub(crate) fn known_generation(&self) -> Option<u64> {
        let current = self.current();
        current.client.as_ref().map(|_| current.generation)
    }

    /// The current primary and its generation, asking the sentinels (within `limit`)
    /// if it is not known.
    ///
    /// # Errors
    /// [`lock_core::Error::Unavailable`] if no sentinel names a primary that says it
    /// is one (during a failover, or with every sentinel down).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped lookup changes nothing.
    pub(crate) async fn client(&self, limit: Duration) -> Result<(u64, redis::Client)> {
        let generation = {
            let current = self.current();
            if let Some(client) = &current.client {
                return Ok((current.generation, client.clone()));
            }
            current.generation
        };
        let Some(lookup) = &self.lookup else {
            // A fixed server is set at construction and never forgotten.
            return Err(error::Error::UnexpectedReply("no Redis server configured".into()).into());
        };
        let found = error::within("asking Sentinel for the primary", limit, async {
            let mut sentinel = lookup.sentinel.lock().await;
            // Another caller may have found it while this one waited for the mutex.
            if let Some(client) = &self.current().client {
                return Ok(client.clone());
            }
            // Boxed: the lookup's future type is deep enough to overflow rustc's
            // layout queries in every crate whose futures hold this one.
            Box::pin(sentinel.async_get_client()).await
        })
        .await?;
        let mut current = self.current();
        if let Some(client) = &current.client {
            return Ok((current.generation, client.clone()));
        }
        // Kept under the generation current now, even if a failure forgot the primary
        // again while this lookup ran: connections cached for an older generation are
        // then never handed out with it. A stale answer costs one more failure.
        if current.generation != generation {
            tracing::debug!("the primary was forgotten again during the lookup");
        }
        tracing::debug!(
            service = %lookup.service,
            address = ?found.get_connection_info().addr(),
            "Sentinel named the primary"
        );
        current.client = Some(found.clone());
        Ok((current.generation, found))
    }

    /// Forgets the primary of `generation` after a failure that may mean it moved;
    /// no-op for a fixed server or a generation already forgotten.
    pub(crate) fn forget(&self, generation: u64) {
        if self.lookup.is_none() {
            return;
        }
        let mut current = self.current();
        if current.generation == generation && current.client.is_some() {
            tracing::debug!(
                generation,
                "the primary may have moved; asking Sentinel again"
            );
            current.generation += 1;
            current.client = None;
        }
    }
}

/// The client that asks the sentinels for the primary of `config`'s service and hands
/// back a client of it, with the data nodes' credentials and database, and TLS to both
/// the sentinels and the data nodes for `rediss+sentinel://`.
fn sentinel_client(config: &RedisConfig) -> lock_core::Result<SentinelClient> {
    let settings = config
        .sentinel()
        .ok_or_else(|| lock_core::Error::invalid_argument("not a Sentinel deployment"))?;
    let sentinels = settings
        .urls()
        .into_iter()
        .map(|info| info.addr().clone())
        .collect::<Vec<_>>();
    let redis = config.redis_settings();
    let mut builder = SentinelClientBuilder::new(
        sentinels,
        settings.service.clone(),
        SentinelServerType::Master,
    )
    .map_err(error::map)?
    .set_client_to_redis_db(redis.db());
    if let Some(username) = redis.username() {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = redis.password() {
        builder = builder.set_client_to_redis_password(password);
    }
    if let Some(username) = &settings.username {
        builder = builder.set_client_to_sentinel_username(username);
    }
    if let Some(password) = &settings.password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    #[cfg(feature = "tls")]
    if settings.tls {
        builder = builder
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
        if let Some(tls) = config.tls() {
            let certs = crate::config::certificates(tls)?;
            builder = builder
                .set_client_to_redis_certificates(certs.clone())
                .set_client_to_sentinel_certificates(certs);
        }
    }
    builder.build().map_err(error::map)
}
