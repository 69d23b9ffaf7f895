//! Where the Redis server is and how long to wait for it.

use std::fmt;
use std::time::Duration;

use lock_core::{Error, Result};
use redis::{ConnectionAddr, IntoConnectionInfo};

/// How long a connection attempt may take unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a command may take unless configured.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a queued fair-lock waiter or a waiting writer keeps its place without
/// refreshing it, unless configured. Live waiters refresh it every third of this.
pub const DEFAULT_WAITER_LEASE: Duration = Duration::from_secs(6);
/// The longest a waiter goes without looking again at a lock held by a client that
/// does not publish its release (redis-py, redsync, a raw `SET NX PX`), unless
/// configured. It looks after 20 ms first, then doubles up to this.
pub const DEFAULT_SILENT_HOLDER_POLL: Duration = Duration::from_millis(150);

/// The connection settings of one Redis server: its URL, credentials and timeouts.
///
/// URLs are `redis://[user[:password]@]host[:port][/db]` and, with the `tls` feature,
/// `rediss://...` for TLS. An invalid URL or timeout is an
/// [`Error::InvalidArgument`], never a panic. The password never appears in `Debug`
/// output or errors.
///
/// ```
/// use std::time::Duration;
/// use lock_redis::RedisConfig;
///
/// let config = RedisConfig::builder("redis://127.0.0.1:6379/0")
///     .username("locks")
///     .password("s3cret")
///     .connect_timeout(Duration::from_millis(500))
///     .command_timeout(Duration::from_secs(1))
///     .build()?;
/// assert_eq!(config.connect_timeout(), Duration::from_millis(500));
/// assert!(!format!("{config:?}").contains("s3cret"));
///
/// assert!(RedisConfig::from_url("http://example.com").is_err());
/// assert!(RedisConfig::from_url("not a url").is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    info: redis::ConnectionInfo,
    connect_timeout: Duration,
    command_timeout: Duration,
    waiter_lease: Duration,
    silent_holder_poll: Duration,
}

impl RedisConfig {
    /// The settings of `url` with default timeouts.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the URL is not a valid `redis://` or `rediss://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
        RedisConfig::builder(url).build()
    }

    /// A builder starting from `url`; the URL is checked by [`RedisConfigBuilder::build`].
    pub fn builder(url: &str) -> RedisConfigBuilder {
        RedisConfigBuilder {
            url: url.to_owned(),
            username: None,
            password: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            waiter_lease: DEFAULT_WAITER_LEASE,
            silent_holder_poll: DEFAULT_SILENT_HOLDER_POLL,
        }
    }

    /// How long a connection attempt may take before the call fails with
    /// [`Error::Unavailable`].
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long one command may take before the call fails with [`Error::Unavailable`].
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// How long a fair-lock waiter or waiting writer keeps its place unrefreshed.
    pub fn waiter_lease(&self) -> Duration {
        self.waiter_lease
    }

    /// The longest a waiter goes between looks at a lock whose holder publishes
    /// nothing when it releases.
    pub fn silent_holder_poll(&self) -> Duration {
        self.silent_holder_poll
    }

    /// The longest a call may take: connecting and then answering.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.connect_timeout + self.command_timeout
    }

    pub(crate) fn client(&self) -> Result<redis::Client> {
        redis::Client::open(self.info.clone()).map_err(|err| {
            Error::invalid_argument(format!("invalid Redis connection settings: {err}"))
        })
    }

    /// `host:port/db`: the same for every client of this database.
    pub(crate) fn location(&self) -> String {
        format!("{}/{}", self.address(), self.info.redis_settings().db())
    }

    /// `host:port` (or the socket path), for errors and traces.
    pub(crate) fn address(&self) -> String {
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
            .field("command_timeout", &self.command_timeout)
            .field("waiter_lease", &self.waiter_lease)
            .field("silent_holder_poll", &self.silent_holder_poll)
            .finish()
    }
}

/// Builds a [`RedisConfig`]; see there for an example.
#[derive(Clone)]
pub struct RedisConfigBuilder {
    url: String,
    username: Option<String>,
    password: Option<String>,
    connect_timeout: Duration,
    command_timeout: Duration,
    waiter_lease: Duration,
    silent_holder_poll: Duration,
}

impl fmt::Debug for RedisConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: show only its scheme.
        let scheme = self.url.split_once("://").map_or("?", |(s, _)| s);
        f.debug_struct("RedisConfigBuilder")
            .field("scheme", &scheme)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("waiter_lease", &self.waiter_lease)
            .field("silent_holder_poll", &self.silent_holder_poll)
            .finish()
    }
}

impl RedisConfigBuilder {
    /// The ACL user name, overriding the URL's.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// The password, overriding the URL's (useful when it would need URL escaping).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// How long a connection attempt may take (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may take (default [`DEFAULT_COMMAND_TIMEOUT`]).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long a fair-lock waiter or waiting writer keeps its place without
    /// refreshing it (default [`DEFAULT_WAITER_LEASE`]). A waiter that dies holds up
    /// the queue for at most this long.
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.waiter_lease = lease;
        self
    }

    /// The longest a waiter goes without looking again at a lock held by a client
    /// that publishes nothing when it releases (default
    /// [`DEFAULT_SILENT_HOLDER_POLL`]). Such a release is noticed within this long;
    /// a holder of this crate's publishes, and its waiters do not poll at all.
    pub fn silent_holder_poll(mut self, interval: Duration) -> Self {
        self.silent_holder_poll = interval;
        self
    }

    /// Checks the URL and the durations.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong.
    pub fn build(self) -> Result<RedisConfig> {
        let scheme = self.url.split_once("://").map(|(scheme, _)| scheme);
        match scheme {
            Some("redis") => {}
            Some("rediss") if cfg!(feature = "tls") => {}
            Some("rediss") => {
                return Err(Error::invalid_argument(
                    "rediss:// URLs need lock-redis's `tls` feature",
                ))
            }
            _ => {
                return Err(Error::invalid_argument(format!(
                    "Redis URL must start with redis:// or rediss:// (got {:?})",
                    redact(&self.url)
                )))
            }
        }
        let info = self.url.as_str().into_connection_info().map_err(|err| {
            Error::invalid_argument(format!("invalid Redis URL {:?}: {err}", redact(&self.url)))
        })?;
        let mut redis = info.redis_settings().clone();
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        let info = info.set_redis_settings(redis);
        for (what, value, min) in [
            (
                "connect timeout",
                self.connect_timeout,
                Duration::from_millis(1),
            ),
            (
                "command timeout",
                self.command_timeout,
                Duration::from_millis(1),
            ),
            ("waiter lease", self.waiter_lease, Duration::from_millis(30)),
            (
                "silent holder poll",
                self.silent_holder_poll,
                Duration::from_millis(5),
            ),
        ] {
            lock_core::check_duration(what, value, min, lock_core::MAX_DURATION)?;
        }
        Ok(RedisConfig {
            info,
            connect_timeout: self.connect_timeout,
            command_timeout: self.command_timeout,
            waiter_lease: self.waiter_lease,
            silent_holder_poll: self.silent_holder_poll,
        })
    }
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
        let err = RedisConfig::builder("redis://127.0.0.1")
            .command_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("command timeout"), "{err}");
    }
}
