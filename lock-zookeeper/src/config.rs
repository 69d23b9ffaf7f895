//! Connection settings: from a `zk://` URL or built by hand, validated before any
//! connection is made.

use std::fmt;
use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};

/// The session timeout asked for unless configured (the server may clamp it to its
/// `minSessionTimeout`..`maxSessionTimeout`).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may wait for its answer unless configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The port used when a host names none.
pub const DEFAULT_PORT: u16 = 2181;
/// The longest session or connect timeout accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Where and how to connect to ZooKeeper.
///
/// Made from a URL with [`from_url`](Self::from_url), then changed with the `with_*`
/// setters, which never fail: every value is checked once, by
/// [`ZkBackend::connect`](crate::ZkBackend::connect) (and [`ZkBackend::new`](crate::ZkBackend::new)),
/// with an [`Error::InvalidArgument`] naming the setting. The password never appears in
/// `Debug` output or errors.
///
/// ```
/// use std::time::Duration;
/// use lock_zookeeper::ZkConfig;
///
/// let config = ZkConfig::from_url("zk://10.0.0.1:2181,10.0.0.2:2181/apps/billing?session_timeout_ms=6000")?;
/// assert_eq!(config.hosts(), ["10.0.0.1:2181", "10.0.0.2:2181"]);
/// assert_eq!(config.chroot(), Some("/apps/billing"));
/// assert_eq!(config.session_timeout(), Duration::from_secs(6));
///
/// let config = ZkConfig::from_url("zk://127.0.0.1:2181")?
///     .with_chroot("/locks-root")
///     .with_connect_timeout(Duration::from_secs(2))
///     .with_credentials("tenant-a", "secret");
/// assert_eq!(config.username(), Some("tenant-a"));
/// assert!(!format!("{config:?}").contains("secret"));
/// assert!(ZkConfig::from_url("http://x").is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZkConfig {
    hosts: Vec<String>,
    chroot: Option<String>,
    session_timeout: Duration,
    connect_timeout: Duration,
    request_timeout: Duration,
    digest: Option<(String, String)>,
    tls: Option<TlsOptions>,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkConfig")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            // Never print the password.
            .field("digest_user", &self.digest.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .finish()
    }
}

impl ZkConfig {
    /// Settings for the comma-separated `host:port` list (the port defaults to 2181).
    fn from_hosts(hosts: &str) -> Result<Self> {
        let hosts = hosts
            .split(',')
            .map(parse_host)
            .collect::<Result<Vec<_>>>()?;
        Ok(ZkConfig {
            hosts,
            chroot: None,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            digest: None,
            tls: None,
        })
    }

    /// Parses `zk://[user:password@]host:port[,host:port...][/chroot][?options]`, and
    /// `zk+tls://...` for TLS.
    ///
    /// Options: `session_timeout`, `connect_timeout` and `request_timeout`, durations
    /// with a unit (`6s`, `300ms`), as every backend names them; `session_timeout_ms`,
    /// `connect_timeout_ms` and `request_timeout_ms` take milliseconds; with
    /// `zk+tls://`, `tls_ca`, `tls_cert` and `tls_key` ([`with_tls`](Self::with_tls)).
    /// Any other key is an error. `user:password` turns on
    /// digest authentication and a creator-only ACL (see
    /// [`with_credentials`](Self::with_credentials)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is wrong with the URL.
    pub fn from_url(url: &str) -> Result<Self> {
        let (rest, tls) = match url.strip_prefix("zk+tls://") {
            Some(rest) => (rest, true),
            None => (
                url.strip_prefix("zk://").ok_or_else(|| {
                    Error::invalid_argument(format!(
                        "zookeeper URL {url:?} must start with zk:// or zk+tls:// (zk://host:port[,host:port]/chroot)"
                    ))
                })?,
                false,
            ),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (Some(userinfo), rest),
            None => (None, rest),
        };
        let (hosts, chroot) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(&rest[at..])),
            None => (rest, None),
        };
        let mut config = ZkConfig::from_hosts(hosts)?;
        if let Some(chroot) = chroot.filter(|c| *c != "/") {
            config = config.with_chroot(chroot);
        }
        if let Some(userinfo) = userinfo {
            let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                Error::invalid_argument("zookeeper URL credentials must be user:password")
            })?;
            if user.is_empty() {
                return Err(Error::invalid_argument(
                    "zookeeper URL credentials have an empty user",
                ));
            }
            config = config.with_credentials(user, password);
        }
        if let Some(query) = query {
            config = with_url_settings(config, query)?;
        }
        if tls && config.tls.is_none() {
            return Err(Error::invalid_argument(
                "a zk+tls:// URL needs the CA to trust (tls_ca=/path/to/ca.pem): ZooKeeper's client has no built-in roots",
            ));
        }
        if !tls && config.tls.is_some() {
            return Err(Error::invalid_argument(
                "TLS settings (tls_ca, tls_cert, tls_key) need a zk+tls:// URL",
            ));
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks every setting; called by `from_url` and before connecting.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(chroot) = &self.chroot {
            let valid = chroot.starts_with('/')
                && chroot.len() > 1
                && chroot[1..]
                    .split('/')
                    .all(|s| !s.is_empty() && s != "." && s != "..")
                && !chroot.chars().any(char::is_control);
            if !valid {
                return Err(Error::invalid_argument(format!(
                    "zookeeper chroot {chroot:?} must be an absolute path like /apps/locks, without empty, . or .. segments"
                )));
            }
        }
        for (what, timeout) in [
            ("session timeout", self.session_timeout),
            ("connect timeout", self.connect_timeout),
            ("request timeout", self.request_timeout),
        ] {
            lock_core::backend::check_duration(
                &format!("zookeeper {what}"),
                timeout,
                Duration::from_millis(1),
                MAX_TIMEOUT,
            )?;
        }
        if let Some((user, _)) = &self.digest {
            if user.is_empty() {
                return Err(Error::invalid_argument(
                    "zookeeper credentials have an empty user",
                ));
            }
        }
        if let Some(tls) = &self.tls {
            if !cfg!(feature = "tls") {
                return Err(Error::invalid_argument(
                    "TLS to ZooKeeper (zk+tls://) needs lock-zookeeper's `tls` feature",
                ));
            }
            if tls.server_name.is_some() {
                return Err(Error::invalid_argument(
                    "ZooKeeper checks each server's certificate against its host: tls_server_name is not supported",
                ));
            }
            if tls.ca_file.is_none() {
                return Err(Error::invalid_argument(
                    "TLS to ZooKeeper needs the CA to trust (tls_ca): its client has no built-in roots",
                ));
            }
            tls.check()?;
        }
        Ok(())
    }

    /// Puts every path under `chroot` (an absolute path such as `/apps/billing`, without
    /// empty, `.` or `..` segments), which is created (persistent) if missing.
    pub fn with_chroot(mut self, chroot: impl Into<String>) -> Self {
        self.chroot = Some(chroot.into());
        self
    }

    /// The session timeout to ask for (default [`DEFAULT_SESSION_TIMEOUT`], 1 ms to one
    /// hour): how long after this client stops being heard from (a crash, a partition)
    /// the server ends its session and so frees its locks.
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long connecting may take before [`Error::Unavailable`] (default
    /// [`DEFAULT_CONNECT_TIMEOUT`], 1 ms to one hour).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request may wait for its answer before the call fails with a
    /// retryable [`Error::Unavailable`] (default [`DEFAULT_REQUEST_TIMEOUT`], 1 ms to
    /// one hour). Without it, a request sent while the connection is lost waits until
    /// the client reconnects or gives the session up, up to 7/5 of the session
    /// timeout. An acquire's requests end at its wait limit too, while it may still
    /// wait; a release retries within this timeout, and lock-core retries it in the
    /// background after it.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Connects over TLS (the servers' `secureClientPort`; needs the `tls` feature):
    /// the CA to trust (required: the client has no built-in roots) and a client
    /// certificate (for `ssl.clientAuth=need`), PEM files read at connect. The servers'
    /// certificates are checked against their host names, so
    /// [`TlsOptions::server_name`] is refused at connect.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Authenticates with ZooKeeper's `digest` scheme and creates every node (lock path
    /// containers and lock nodes) with a creator-only ACL, so clients without these
    /// credentials can neither create contenders nor delete this client's nodes
    /// (ZooKeeper checks a delete against the parent's ACL, which is why the containers
    /// carry it too). Paths created earlier by others keep their own ACL.
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.digest = Some((user.into(), password.into()));
        self
    }

    /// The user name of the digest credentials, if any.
    pub fn username(&self) -> Option<&str> {
        self.digest.as_ref().map(|(user, _)| user.as_str())
    }

    /// The hosts, as `host:port`.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The chroot, if any.
    pub fn chroot(&self) -> Option<&str> {
        self.chroot.as_deref()
    }

    /// The session timeout asked for.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn digest(&self) -> Option<(&str, &str)> {
        self.digest.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// The TLS settings, if connections use TLS (`zk+tls://`).
    pub fn tls(&self) -> Option<&TlsOptions> {
        self.tls.as_ref()
    }

    /// The connect string the client takes (hosts only; the chroot is applied after
    /// it has been created).
    pub(crate) fn connect_string(&self) -> String {
        self.hosts.join(",")
    }
}

fn parse_host(host: &str) -> Result<String> {
    let bad = |why: &str| Error::invalid_argument(format!("zookeeper host {host:?}: {why}"));
    let host = host.trim();
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    let (name, port) = match host.rsplit_once(':') {
        // An IPv6 literal in brackets, or a name with a port.
        Some((name, port)) if !port.contains(']') => {
            let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
            if port == 0 {
                return Err(bad("port 0"));
            }
            (name, port)
        }
        _ => (host, DEFAULT_PORT),
    };
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(bad("not a host name or address"));
    }
    Ok(format!("{name}:{port}"))
}

/// The timeouts of a URL's query, read into `config`; unknown keys are refused.
fn with_url_settings(mut config: ZkConfig, query: &str) -> Result<ZkConfig> {
    let pairs = url::form_urlencoded::parse(query.as_bytes())
        .map(|(key, value)| (key.into_owned(), value.into_owned()));
    let mut query = lock_core::backend::QuerySettings::new(pairs)?;
    let mut timeout = |name: &str| -> Result<Option<Duration>> {
        let with_unit = query.duration(name)?;
        let millis = query.number::<u64>(&format!("{name}_ms"))?;
        match (with_unit, millis) {
            (Some(_), Some(_)) => Err(Error::invalid_argument(format!(
                "zookeeper URL gives both {name} and {name}_ms"
            ))),
            (with_unit, millis) => Ok(with_unit.or(millis.map(Duration::from_millis))),
        }
    };
    let session = timeout("session_timeout")?;
    let connect = timeout("connect_timeout")?;
    let request = timeout("request_timeout")?;
    let tls = query.tls();
    query.finish("zookeeper")?;
    if let Some(tls) = tls {
        config = config.with_tls(tls);
    }
    if let Some(session) = session {
        config = config.with_session_timeout(session);
    }
    if let Some(connect) = connect {
        config = config.with_connect_timeout(connect);
    }
    if let Some(request) = request {
        config = config.with_request_timeout(request);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls_need_their_ca_and_values_are_decoded() {
        let err = ZkConfig::from_url("zk+tls://h:2281").unwrap_err();
        assert!(err.to_string().contains("tls_ca"), "{err}");
        let err = ZkConfig::from_url("zk://h?tls_ca=/ca.pem").unwrap_err();
        assert!(err.to_string().contains("zk+tls://"), "{err}");
        let decoded = ZkConfig::from_url("zk+tls://h:2281?tls_ca=/etc/zk%20certs/ca.pem");
        if cfg!(feature = "tls") {
            let config = decoded.unwrap();
            let ca = config.tls().unwrap().ca_file.clone().unwrap();
            assert_eq!(ca, std::path::PathBuf::from("/etc/zk certs/ca.pem"));
        } else {
            assert!(decoded.unwrap_err().to_string().contains("`tls` feature"));
        }
    }

    #[test]
    fn timeouts_with_units_as_on_every_backend() {
        let c = ZkConfig::from_url(
            "zk://h?session_timeout=6s&connect_timeout=300ms&request_timeout=1s",
        )
        .unwrap();
        assert_eq!(c.session_timeout(), Duration::from_secs(6));
        assert_eq!(c.connect_timeout(), Duration::from_millis(300));
        assert_eq!(c.request_timeout(), Duration::from_secs(1));
        let err =
            ZkConfig::from_url("zk://h?session_timeout=6s&session_timeout_ms=6000").unwrap_err();
        assert!(err.to_string().contains("both"), "{err}");
        let err = ZkConfig::from_url("zk://h?sesion_timeout=6s").unwrap_err();
        assert!(err.to_string().contains("session_timeout"), "{err}");
    }

    #[test]
    fn urls_parse() {
        let c =
            ZkConfig::from_url("zk://u:p@a:1,b/r/s?session_timeout_ms=2000&connect_timeout_ms=300&request_timeout_ms=700")
                .unwrap();
        assert_eq!(c.hosts(), ["a:1", "b:2181"]);
        assert_eq!(c.chroot(), Some("/r/s"));
        assert_eq!(c.session_timeout(), Duration::from_secs(2));
        assert_eq!(c.connect_timeout(), Duration::from_millis(300));
        assert_eq!(c.request_timeout(), Duration::from_millis(700));
        assert_eq!(c.digest(), Some(("u", "p")));
        assert!(!format!("{c:?}").contains("\"p\""), "password printed");
        assert_eq!(ZkConfig::from_url("zk://h:5/").unwrap().chroot(), None);
    }

    #[test]
    fn bad_urls_are_invalid_arguments() {
        for url in [
            "",
            "redis://h:1",
            "zk://",
            "zk://h:x",
            "zk://h:0",
            "zk://h:70000",
            "zk://a,,b",
            "zk://h/a//b",
            "zk://h/a/../b",
            "zk://h?session_timeout_ms=0",
            "zk://h?session_timeout_ms=abc",
            "zk://h?request_timeout_ms=0",
            "zk://h?nope=1",
            "zk://:p@h",
            "zk://nopass@h",
        ] {
            match ZkConfig::from_url(url) {
                Err(Error::InvalidArgument { .. }) => {}
                other => panic!("{url:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn setters_never_fail_and_connect_checks_their_values() {
        let base = ZkConfig::from_url("zk://h").unwrap();
        assert!(base.validate().is_ok());
        for (bad, named) in [
            (base.clone().with_chroot("relative"), "chroot"),
            (base.clone().with_chroot("/a//b"), "chroot"),
            (
                base.clone().with_session_timeout(Duration::ZERO),
                "session timeout",
            ),
            (
                base.clone().with_connect_timeout(Duration::from_secs(7200)),
                "connect timeout",
            ),
            (
                base.clone().with_request_timeout(Duration::ZERO),
                "request timeout",
            ),
            (base.clone().with_credentials("", "pw"), "empty user"),
        ] {
            let err = bad.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
            assert!(err.to_string().contains(named), "{named}: {err}");
        }
    }
}
