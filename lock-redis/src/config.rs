//! Where the Redis server is and how long to wait for it.

use std::fmt;
use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};
use redis::{ConnectionAddr, IntoConnectionInfo};

/// How long a connection attempt may take unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a request (one command or script) may take unless configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a queued fair-lock waiter, a waiting writer or a registered exclusive
/// waiter keeps its place without refreshing it, unless configured. Live waiters refresh it every third of this.
pub const DEFAULT_WAITER_LEASE: Duration = Duration::from_secs(6);
/// The longest a waiter goes without looking again at a lock held by a client that
/// does not publish its release (redis-py, redsync, a raw `SET NX PX`), unless
/// configured. It looks after 20 ms first, then doubles up to this.
pub const DEFAULT_SILENT_HOLDER_POLL: Duration = Duration::from_millis(150);
/// How long a waiting acquire keeps trying through failures under Sentinel, unless
/// configured: Sentinel's own default takes 30 s to call a primary down, and then
/// elects and promotes a replica.
pub const DEFAULT_FAILOVER_GRACE: Duration = Duration::from_secs(60);

/// The connection settings of one Redis server: its URL, credentials and timeouts.
///
/// URLs are `redis://[user[:password]@]host[:port][/db]` and, with the `tls` feature,
/// `rediss://...` for TLS (`rediss+sentinel://` and `rediss+cluster://` for Sentinel
/// and Cluster over TLS). An invalid URL is an [`Error::InvalidArgument`] from
/// [`from_url`](Self::from_url), never a panic. The `with_*` setters never fail: every
/// value is checked once, by [`RedisBackend::connect`](crate::RedisBackend::connect)
/// (and [`RedisBackend::new`](crate::RedisBackend::new)), with an
/// [`Error::InvalidArgument`] naming the setting. The password never appears in `Debug`
/// output or errors.
///
/// Every setting can also come from the URL's query (`redis://h:6379/0?request_timeout=1s`);
/// a setter called afterwards overrides it, and an unknown key is an error:
///
/// | key | setting | example |
/// |---|---|---|
/// | `connect_timeout` | [`with_connect_timeout`](Self::with_connect_timeout) | `500ms` |
/// | `request_timeout` (or `command_timeout`) | [`with_request_timeout`](Self::with_request_timeout) | `2s` |
/// | `waiter_lease` | [`with_waiter_lease`](Self::with_waiter_lease) | `6s` |
/// | `silent_holder_poll` | [`with_silent_holder_poll`](Self::with_silent_holder_poll) | `150ms` |
/// | `failover_grace` | [`with_failover_grace`](Self::with_failover_grace) (Sentinel) | `60s` |
/// | `sentinel_username`, `sentinel_password` | [`with_sentinel_credentials`](Self::with_sentinel_credentials) | |
/// | `replica_acks`, `replica_acks_timeout`, `replica_acks_on_too_few` | [`with_replica_acks`](Self::with_replica_acks) | `1`, `500ms` (the default), `release` or `keep-and-warn` |
/// | `tls_ca`, `tls_cert`, `tls_key` | [`with_tls`](Self::with_tls) (`rediss://`, PEM files) | `/etc/locks/ca.pem` |
///
/// ```
/// use std::time::Duration;
/// use lock_redis::RedisConfig;
///
/// let config = RedisConfig::from_url("redis://127.0.0.1:6379/0")?
///     .with_credentials("locks", "s3cret")
///     .with_connect_timeout(Duration::from_millis(500))
///     .with_request_timeout(Duration::from_secs(1));
/// assert_eq!(config.connect_timeout(), Duration::from_millis(500));
/// assert_eq!(config.username(), Some("locks"));
/// assert!(!format!("{config:?}").contains("s3cret"));
///
/// assert!(RedisConfig::from_url("http://example.com").is_err());
/// assert!(RedisConfig::from_url("not a url").is_err());
///
/// let sentinel = RedisConfig::from_url("redis+sentinel://10.0.0.1,10.0.0.2:26380/locks/2")?;
/// assert_eq!(sentinel.sentinel_service(), Some("locks"));
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    /// The server (for Sentinel: only its credentials and database count; for a
    /// cluster, only its credentials).
    info: redis::ConnectionInfo,
    sentinel: Option<SentinelSettings>,
    /// `redis://host:port` of each seed node of a cluster.
    cluster: Option<Vec<String>>,
    connect_timeout: Duration,
    request_timeout: Duration,
    waiter_lease: Duration,
    silent_holder_poll: Duration,
    failover_grace: Duration,
    replica_acks: Option<ReplicaAcks>,
    tls: Option<TlsOptions>,
    /// The URL's scheme, which TLS settings must match.
    scheme: String,
    /// Sentinel credentials were given for a URL that names no Sentinel.
    stray_sentinel_credentials: bool,
}

/// Where Sentinel is asked for the primary.
#[derive(Clone)]
pub(crate) struct SentinelSettings {
    /// `host:port` of each sentinel, in the URL's order.
    pub(crate) sentinels: Vec<String>,
    pub(crate) service: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    /// TLS to the sentinels and the data nodes (`rediss+sentinel://`).
    pub(crate) tls: bool,
}

impl SentinelSettings {
    /// A `redis://` (`rediss://`) URL for each sentinel, with the sentinels'
    /// credentials.
    pub(crate) fn urls(&self) -> Vec<redis::ConnectionInfo> {
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(username) = &self.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        self.sentinels
            .iter()
            .filter_map(|addr| addr.as_str().into_connection_info().ok())
            .map(|info| info.set_redis_settings(settings.clone()))
            .collect()
    }
}

/// Replica acknowledgement of every grant (`WAIT`), set by
/// [`RedisConfig::with_replica_acks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAcks {
    /// How many replicas must have the grant.
    pub replicas: u32,
    /// How long to wait for them.
    pub timeout: Duration,
    /// What a grant that too few replicas acknowledged becomes.
    pub on_too_few: TooFewReplicas,
}

/// What an acquire does when fewer replicas than asked acknowledged its grant in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TooFewReplicas {
    /// Release the grant and fail with [`Error::Unavailable`] (retryable): nothing is
    /// held, so nobody is locked out by a grant the caller never saw.
    #[default]
    Release,
    /// Keep the lock, log a warning, and return the guard as usual.
    KeepAndWarn,
}

impl RedisConfig {
    /// The settings of `url`, with those of its query (see the table above) and
    /// defaults for the rest.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the URL is not a valid `redis://`, `rediss://`,
    /// `redis+sentinel://` or `redis+cluster://` URL (the TLS ones need the `tls`
    /// feature), or its query has an unknown key or a bad value.
    pub fn from_url(url: &str) -> Result<Self> {
        let (url, query) = crate::url_settings::split_query(url);
        let mut config = match (parse_url(&url), &query) {
            (Ok(config), _) => config,
            // A query's own error says more (a `?` inside a password starts it early).
            (Err(err), Some(query)) => {
                let placeholder = parse_url("redis://127.0.0.1")?;
                crate::url_settings::apply(placeholder, query)?;
                return Err(err);
            }
            (Err(err), None) => return Err(err),
        };
        if let Some(query) = query {
            config = crate::url_settings::apply(config, &query)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// The ACL user name and password, in place of the URL's.
    pub fn with_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        let settings = self
            .info
            .redis_settings()
            .clone()
            .set_username(username.into())
            .set_password(password.into());
        self.info = self.info.set_redis_settings(settings);
        self
    }

    /// The password alone, in place of the URL's, for a server with `requirepass` and
    /// no ACL users (`AUTH password`); useful when the password would need URL
    /// escaping.
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        let settings = self
            .info
            .redis_settings()
            .clone()
            .set_password(password.into());
        self.info = self.info.set_redis_settings(settings);
        self
    }

    /// The ACL user name and password the sentinels want (Sentinel only; the URL's
    /// credentials are the data nodes').
    pub fn with_sentinel_credentials(
        self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.with_sentinel_username(username)
            .with_sentinel_password(password)
    }

    pub(crate) fn with_sentinel_username(mut self, username: impl Into<String>) -> Self {
        match &mut self.sentinel {
            Some(sentinel) => sentinel.username = Some(username.into()),
            None => self.stray_sentinel_credentials = true,
        }
        self
    }

    pub(crate) fn with_sentinel_password(mut self, password: impl Into<String>) -> Self {
        match &mut self.sentinel {
            Some(sentinel) => sentinel.password = Some(password.into()),
            None => self.stray_sentinel_credentials = true,
        }
        self
    }

    /// TLS to a `rediss://` server beyond the system's defaults: the CA to trust and a
    /// client certificate (mutual TLS), PEM files read at connect. The server's
    /// certificate is checked against the URL's host (`tls_server_name` is refused:
    /// the client cannot check another name).
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How long a connection attempt may take (default [`DEFAULT_CONNECT_TIMEOUT`], at
    /// least 1 ms).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request (a command or a script) may take (default
    /// [`DEFAULT_REQUEST_TIMEOUT`], at least 1 ms).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a fair-lock waiter, waiting writer or registered exclusive waiter keeps
    /// its place without refreshing it (default [`DEFAULT_WAITER_LEASE`], at least
    /// 30 ms). A waiter that dies holds up the queue for at most this long; live ones
    /// refresh their place every third of it.
    pub fn with_waiter_lease(mut self, lease: Duration) -> Self {
        self.waiter_lease = lease;
        self
    }

    /// The longest a waiter goes without looking again at a lock held by a client
    /// that publishes nothing when it releases (default
    /// [`DEFAULT_SILENT_HOLDER_POLL`], at least 5 ms). Such a release is noticed within
    /// this long; a holder of this crate's publishes, and its waiters only refresh
    /// their entry, every third of the [waiter lease](Self::waiter_lease).
    pub fn with_silent_holder_poll(mut self, interval: Duration) -> Self {
        self.silent_holder_poll = interval;
        self
    }

    /// How long a waiting acquire keeps trying while calls fail under Sentinel (default
    /// [`DEFAULT_FAILOVER_GRACE`]): a primary that dies while others wait is replaced
    /// by a failover, and waiters should still get the lock afterwards. Each wait's
    /// own limit still applies, and a one-shot try fails at once. On a single server
    /// a failure is the caller's at once.
    pub fn with_failover_grace(mut self, grace: Duration) -> Self {
        self.failover_grace = grace;
        self
    }

    /// Makes every grant wait until `replicas` replicas (at least one) have it (`WAIT replicas
    /// timeout` on the connection that wrote it), off by default.
    ///
    /// This narrows the window in which a failover promotes a replica that never
    /// received the grant and hands the lock out again; it does not close it (a
    /// replica may acknowledge and still lose the write, and a renewal is not waited
    /// for). Only the fencing token protects against that. A grant that fewer replicas
    /// acknowledge in `timeout` is released and the acquire fails with a retryable
    /// [`Error::Unavailable`], unless [`TooFewReplicas::KeepAndWarn`] is chosen.
    ///
    /// Costs one more round trip per grant. Each acquire runs on a connection it has
    /// to itself (from a small pool), so a `WAIT` held up by a slow replica delays
    /// neither other acquires nor releases and renewals.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_redis::{RedisConfig, TooFewReplicas};
    ///
    /// let config = RedisConfig::from_url("redis+sentinel://127.0.0.1:26379/locks")?
    ///     .with_replica_acks(1, Duration::from_millis(200), TooFewReplicas::Release);
    /// assert_eq!(config.replica_acks().unwrap().replicas, 1);
    /// # Ok::<(), lock_core::Error>(())
    /// ```
    pub fn with_replica_acks(
        mut self,
        replicas: u32,
        timeout: Duration,
        on_too_few: TooFewReplicas,
    ) -> Self {
        self.replica_acks = Some(ReplicaAcks {
            replicas,
            timeout,
            on_too_few,
        });
        self
    }

    /// Checks the settings together; called by `from_url` and before connecting.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(tls) = &self.tls {
            check_tls(tls, &self.scheme)?;
        }
        if self.stray_sentinel_credentials {
            return Err(Error::invalid_argument(
                "sentinel credentials need a redis+sentinel:// or rediss+sentinel:// URL",
            ));
        }
        for (what, value, min) in [
            (
                "connect timeout",
                self.connect_timeout,
                Duration::from_millis(1),
            ),
            (
                "request timeout",
                self.request_timeout,
                Duration::from_millis(1),
            ),
            ("waiter lease", self.waiter_lease, Duration::from_millis(30)),
            (
                "silent holder poll",
                self.silent_holder_poll,
                Duration::from_millis(5),
            ),
            ("failover grace", self.failover_grace, Duration::ZERO),
        ] {
            lock_core::backend::check_duration(what, value, min, lock_core::MAX_DURATION)?;
        }
        if let Some(acks) = &self.replica_acks {
            if self.cluster.is_some() {
                return Err(Error::invalid_argument(
                    "replica acknowledgement is not offered on Redis Cluster",
                ));
            }
            if acks.replicas == 0 {
                return Err(Error::invalid_argument(
                    "replica acknowledgement needs at least one replica",
                ));
            }
            lock_core::backend::check_duration(
                "replica acknowledgement timeout",
                acks.timeout,
                Duration::from_millis(1),
                lock_core::MAX_DURATION,
            )?;
        }
        Ok(())
    }

    /// How long a connection attempt may take before the call fails with
    /// [`Error::Unavailable`].
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long one request may take before the call fails with [`Error::Unavailable`].
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The ACL user name, if any.
    pub fn username(&self) -> Option<&str> {
        self.info.redis_settings().username()
    }

    /// How long a fair-lock waiter, waiting writer or registered exclusive waiter
    /// keeps its place unrefreshed.
    pub fn waiter_lease(&self) -> Duration {
        self.waiter_lease
    }

    /// The longest a waiter goes between looks at a lock whose holder publishes
    /// nothing when it releases.
    pub fn silent_holder_poll(&self) -> Duration {
        self.silent_holder_poll
    }

    /// The Sentinel service whose primary this names, if it is a `redis+sentinel://`
    /// configuration.
    pub fn sentinel_service(&self) -> Option<&str> {
        self.sentinel.as_ref().map(|s| s.service.as_str())
    }

    /// How long a waiting acquire keeps trying through failures under Sentinel.
    pub fn failover_grace(&self) -> Duration {
        self.failover_grace
    }

    /// The replica acknowledgement every grant waits for, if any.
    pub fn replica_acks(&self) -> Option<ReplicaAcks> {
        self.replica_acks
    }

    /// The longest a call may take: connecting and then answering.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.connect_timeout + self.request_timeout
    }

    /// The client of the one server.
    pub(crate) fn client(&self) -> Result<redis::Client> {
        // A cluster's `info` is only its credentials: its nodes' clients get the
        // certificates in `cluster::client`.
        #[cfg(feature = "tls")]
        if let (Some(tls), ConnectionAddr::TcpTls { .. }) = (&self.tls, self.info.addr()) {
            return redis::Client::build_with_tls(self.info.clone(), certificates(tls)?).map_err(
                |err| Error::invalid_argument(format!("invalid Redis TLS settings: {err}")),
            );
        }
        redis::Client::open(self.info.clone()).map_err(|err| {
            Error::invalid_argument(format!("invalid Redis connection settings: {err}"))
        })
    }

    /// The TLS settings beyond `rediss://`'s defaults, if any.
    pub fn tls(&self) -> Option<&TlsOptions> {
        self.tls.as_ref()
    }

    pub(crate) fn sentinel(&self) -> Option<&SentinelSettings> {
        self.sentinel.as_ref()
    }

    /// The seed nodes, if this is a Redis Cluster.
    pub(crate) fn cluster_nodes(&self) -> Option<&[String]> {
        self.cluster.as_deref()
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The data nodes' credentials and database, for clients Sentinel points at.
    pub(crate) fn redis_settings(&self) -> &redis::RedisConnectionInfo {
        self.info.redis_settings()
    }

    /// `host:port/db` (for Sentinel: `sentinel host:port,.../service/db`): the same for
    /// every client of this database.
    pub(crate) fn location(&self) -> String {
        format!("{}/{}", self.address(), self.info.redis_settings().db())
    }

    /// `host:port` (or the socket path; for Sentinel, the sentinels and the service),
    /// for errors and traces.
    pub(crate) fn address(&self) -> String {
        if let Some(sentinel) = &self.sentinel {
            return format!(
                "sentinel {}/{}{}",
                sentinel.sentinels.join(","),
                sentinel.service,
                if sentinel.tls { " (TLS)" } else { "" }
            );
        }
        if let Some(nodes) = &self.cluster {
            let nodes: Vec<&str> = nodes
                .iter()
                .map(|n| {
                    n.trim_start_matches("redis://")
                        .trim_start_matches("rediss://")
                })
                .collect();
            return format!("cluster {}", nodes.join(","));
        }
        match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port} (TLS)"),
            ConnectionAddr::Unix(path) => path.display().to_string(),
            other => format!("{other:?}"),
        }
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redis = self.info.redis_settings();
        f.debug_struct("RedisConfig")
            .field("address", &self.address())
            .field("db", &redis.db())
            .field("username", &redis.username())
            .field("password", &redis.password().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("waiter_lease", &self.waiter_lease)
            .field("silent_holder_poll", &self.silent_holder_poll)
            .field("failover_grace", &self.failover_grace)
            .field("replica_acks", &self.replica_acks)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The server, Sentinel or cluster a URL without its query names, with default
/// settings.
fn parse_url(url: &str) -> Result<RedisConfig> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    let mut sentinel = None;
    let mut cluster = None;
    let mut data_url = url.to_owned();
    match scheme {
        "redis" => {}
        "redis+sentinel" | "rediss+sentinel"
            if scheme == "redis+sentinel" || cfg!(feature = "tls") =>
        {
            let (settings, url) = parse_sentinel_url(url)?;
            sentinel = Some(settings);
            data_url = url;
        }
        "redis+cluster" => {
            let (nodes, url) = parse_cluster_url(url, false)?;
            cluster = Some(nodes);
            data_url = url;
        }
        "rediss+cluster" if cfg!(feature = "tls") => {
            let (nodes, url) = parse_cluster_url(url, true)?;
            cluster = Some(nodes);
            data_url = url;
        }
        "rediss" if cfg!(feature = "tls") => {}
        "rediss" | "rediss+cluster" | "rediss+sentinel" => {
            return Err(Error::invalid_argument(format!(
                "{scheme}:// URLs need lock-redis's `tls` feature"
            )))
        }
        _ => {
            return Err(Error::invalid_argument(format!(
                "Redis URL must start with redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster:// (got {:?})",
                redact(url)
            )))
        }
    }
    let info = data_url.as_str().into_connection_info().map_err(|err| {
        Error::invalid_argument(format!("invalid Redis URL {:?}: {err}", redact(url)))
    })?;
    Ok(RedisConfig {
        info,
        sentinel,
        cluster,
        connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        request_timeout: DEFAULT_REQUEST_TIMEOUT,
        waiter_lease: DEFAULT_WAITER_LEASE,
        silent_holder_poll: DEFAULT_SILENT_HOLDER_POLL,
        failover_grace: DEFAULT_FAILOVER_GRACE,
        replica_acks: None,
        tls: None,
        scheme: scheme.to_owned(),
        stray_sentinel_credentials: false,
    })
}

/// TLS settings go with a `rediss://` URL, and only with what the client can do.
fn check_tls(tls: &TlsOptions, scheme: &str) -> Result<()> {
    if !matches!(scheme, "rediss" | "rediss+cluster" | "rediss+sentinel") {
        return Err(Error::invalid_argument(format!(
            "TLS settings (tls_ca, tls_cert, tls_key) need a rediss://, rediss+sentinel:// or rediss+cluster:// URL, not {scheme}://"
        )));
    }
    if tls.server_name.is_some() {
        return Err(Error::invalid_argument(
            "Redis checks the server's certificate against the URL's host: put that name in the URL instead of tls_server_name",
        ));
    }
    tls.check()
}

/// The PEM files of `tls`, as the Redis client takes them.
#[cfg(feature = "tls")]
pub(crate) fn certificates(tls: &TlsOptions) -> Result<redis::TlsCertificates> {
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|path| TlsOptions::read(path, "CA certificate"))
        .transpose()?;
    let client_tls = match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: TlsOptions::read(cert, "client certificate")?,
            client_key: TlsOptions::read(key, "client key")?,
        }),
        _ => None,
    };
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// Splits `redis+sentinel://[userinfo@]hosts/service[/db]` into the sentinels and a
/// `redis://` URL that carries the data nodes' credentials and database (its host is
/// only a placeholder: Sentinel names the primary).
fn parse_sentinel_url(url: &str) -> Result<(SentinelSettings, String)> {
    let bad = |why: &str| {
        Error::invalid_argument(format!("invalid Sentinel URL {:?}: {why}", redact(url)))
    };
    let (rest, tls) = match url.strip_prefix("rediss+sentinel://") {
        Some(rest) => (rest, true),
        None => (
            url.strip_prefix("redis+sentinel://")
                .ok_or_else(|| bad("expected redis+sentinel://"))?,
            false,
        ),
    };
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let (hosts, path) = rest
        .split_once('/')
        .ok_or_else(|| bad("no service name (…/service)"))?;
    let (service, db) = match path.split_once('/') {
        Some((service, db)) => (service, db),
        None => (path, "0"),
    };
    if service.is_empty() {
        return Err(bad("empty service name"));
    }
    if db.parse::<u16>().is_err() {
        return Err(bad("the database must be a number"));
    }
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let sentinel = sentinel_address(host).ok_or_else(|| bad("bad sentinel address"))?;
        sentinels.push(match tls {
            true => sentinel.replacen("redis://", "rediss://", 1),
            false => sentinel,
        });
    }
    let settings = SentinelSettings {
        sentinels,
        service: service.to_owned(),
        username: None,
        password: None,
        tls,
    };
    Ok((settings, format!("redis://{userinfo}127.0.0.1/{db}")))
}

/// Splits `redis+cluster://[userinfo@]hosts[/]` (`rediss+cluster://` with `tls`) into
/// the seed nodes (`rediss://` ones with `tls`) and a `redis://` URL carrying the
/// credentials (its host is only a placeholder).
fn parse_cluster_url(url: &str, tls: bool) -> Result<(Vec<String>, String)> {
    let bad = |why: &str| {
        Error::invalid_argument(format!(
            "invalid Redis Cluster URL {:?}: {why}",
            redact(url)
        ))
    };
    let scheme = if tls {
        "rediss+cluster://"
    } else {
        "redis+cluster://"
    };
    let rest = url
        .strip_prefix(scheme)
        .ok_or_else(|| bad(&format!("expected {scheme}")))?;
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let hosts = rest.strip_suffix('/').unwrap_or(rest);
    if hosts.contains(['/', '?', '#']) {
        return Err(bad("a cluster has no database or options in its URL"));
    }
    let mut nodes = Vec::new();
    for host in hosts.split(',') {
        let node = address(host, CLUSTER_PORT).ok_or_else(|| bad("bad node address"))?;
        nodes.push(match tls {
            true => node.replacen("redis://", "rediss://", 1),
            false => node,
        });
    }
    Ok((nodes, format!("redis://{userinfo}127.0.0.1")))
}

/// The default port of a cluster node.
const CLUSTER_PORT: u16 = 6379;

/// `host[:port]` (IPv6 in brackets) as `redis://host:port`, port 26379 unless given.
fn sentinel_address(host: &str) -> Option<String> {
    address(host, SENTINEL_PORT)
}

/// `host[:port]` (IPv6 in brackets) as `redis://host:port`, `default` unless given.
fn address(host: &str, default: u16) -> Option<String> {
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let (addr, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        (format!("[{addr}]"), port)
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name.to_owned(), port.parse().ok()?),
            None => (host.to_owned(), default),
        }
    };
    let valid = !name.is_empty()
        && port != 0
        && !name.contains(|c: char| c.is_whitespace() || "/?#@".contains(c));
    valid.then(|| format!("redis://{name}:{port}"))
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let userinfo = &url[start + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:<redacted>{}", &url[..start + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_without_panics_or_leaked_passwords() {
        let ok = RedisConfig::from_url("redis://user:pw@127.0.0.1:6380/3").unwrap();
        assert_eq!(ok.address(), "127.0.0.1:6380");
        assert_eq!(ok.location(), "127.0.0.1:6380/3");
        assert_eq!(ok.info.redis_settings().db(), 3);
        assert_eq!(ok.info.redis_settings().password(), Some("pw"));
        for bad in [
            "",
            "127.0.0.1:6379",
            "http://127.0.0.1",
            "redis://",
            "redis://host:notaport",
            "redis://:secret@host:99999",
        ] {
            let err = RedisConfig::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let tls = RedisConfig::from_url("rediss://127.0.0.1:6380");
        assert_eq!(tls.is_ok(), cfg!(feature = "tls"));
        let err = RedisConfig::from_url("redis://127.0.0.1")
            .unwrap()
            .with_request_timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("request timeout"), "{err}");
        let err = RedisConfig::from_url("redis://127.0.0.1")
            .unwrap()
            .with_sentinel_credentials("watch", "pw")
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("redis+sentinel://"), "{err}");
        let config = RedisConfig::from_url("redis://u:old@h")
            .unwrap()
            .with_credentials("locks", "new");
        assert_eq!(config.username(), Some("locks"));
        assert_eq!(config.redis_settings().password(), Some("new"));
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_the_service_and_the_data_nodes_credentials() {
        let config =
            RedisConfig::from_url("redis+sentinel://u:pw@10.0.0.1,10.0.0.2:26380,[::1]/locks/4")
                .unwrap();
        let sentinel = config.sentinel().unwrap();
        assert_eq!(
            sentinel.sentinels,
            [
                "redis://10.0.0.1:26379",
                "redis://10.0.0.2:26380",
                "redis://[::1]:26379"
            ]
        );
        assert_eq!(config.sentinel_service(), Some("locks"));
        assert_eq!(config.redis_settings().db(), 4);
        assert_eq!(config.redis_settings().password(), Some("pw"));
        assert_eq!(sentinel.urls().len(), 3);
        assert!(!config.location().contains("pw"), "{}", config.location());
        assert!(config.location().contains("locks"));
        let plain = RedisConfig::from_url("redis+sentinel://h/svc").unwrap();
        assert_eq!(plain.redis_settings().db(), 0);
        for bad in [
            "redis+sentinel://h",
            "redis+sentinel://h/",
            "redis+sentinel://h:x/svc",
            "redis+sentinel://h:0/svc",
            "redis+sentinel:///svc",
            "redis+sentinel://a,,b/svc",
            "redis+sentinel://h/svc/notadb",
            "redis+sentinel://:secret@[::1/svc",
        ] {
            let err = RedisConfig::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let cluster = RedisConfig::from_url("redis+cluster://u:pw@a:7000,b,[::1]:7002/").unwrap();
        assert_eq!(
            cluster.cluster_nodes().unwrap(),
            ["redis://a:7000", "redis://b:6379", "redis://[::1]:7002"]
        );
        assert_eq!(cluster.redis_settings().password(), Some("pw"));
        assert!(!cluster.location().contains("pw"));
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:1/0",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a:x",
        ] {
            let err = RedisConfig::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}: {err}");
        }
        let err = RedisConfig::from_url("redis+cluster://a:1")
            .unwrap()
            .with_replica_acks(1, Duration::from_millis(5), TooFewReplicas::Release)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("Cluster"), "{err}");
        let err = RedisConfig::from_url("redis://h")
            .unwrap()
            .with_replica_acks(0, Duration::from_millis(5), TooFewReplicas::Release)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("replica"), "{err}");
    }
}
