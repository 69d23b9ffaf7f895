//! Where the etcd cluster is, how to log in, and how long to wait for it.

use std::fmt;
use std::time::Duration;

use lock_core::{Error, Result, TlsOptions};

/// How long connecting (and logging in) may take unless configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take unless configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The port used when an endpoint names none (etcd's client port).
pub const DEFAULT_PORT: u16 = 2379;

/// The connection settings of one etcd cluster: endpoints, credentials, TLS and
/// timeouts.
///
/// URLs are `etcd://[user[:password]@]host[:port][,host[:port]...]`, and
/// `etcd+https://...` for TLS (with the `tls` feature). Several endpoints of one
/// cluster are separated by commas; the port defaults to 2379. User and password may be
/// percent-encoded. An invalid URL or timeout is an [`Error::InvalidArgument`], never a
/// panic, and the password never appears in `Debug` output or errors.
///
/// Made from a URL with [`from_url`](Self::from_url), then changed with the `with_*`
/// setters, which never fail: every value is checked once, by
/// [`EtcdBackend::connect`](crate::EtcdBackend::connect), with an
/// [`Error::InvalidArgument`] naming the setting.
///
/// Every setting can also come from the URL's query (`etcd://h:2379?request_timeout=1s`);
/// a setter called afterwards overrides it, and an unknown key is an error:
///
/// | key | setting | example |
/// |---|---|---|
/// | `connect_timeout` | [`with_connect_timeout`](Self::with_connect_timeout) | `2s` |
/// | `request_timeout` | [`with_request_timeout`](Self::with_request_timeout) | `2s` |
/// | `tls_ca`, `tls_cert`, `tls_key`, `tls_server_name` | [`with_tls`](Self::with_tls) (`etcd+https://`, PEM files) | `/etc/etcd/ca.pem` |
///
/// ```
/// use std::time::Duration;
/// use lock_etcd::EtcdConfig;
///
/// let config = EtcdConfig::from_url("etcd://10.0.0.1:2379,10.0.0.2")?
///     .with_credentials("locks", "s3cret")
///     .with_connect_timeout(Duration::from_millis(500))
///     .with_request_timeout(Duration::from_secs(1));
/// assert_eq!(config.endpoints(), ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]);
/// assert!(!format!("{config:?}").contains("s3cret"));
///
/// assert!(EtcdConfig::from_url("redis://127.0.0.1").is_err());
/// assert!(EtcdConfig::from_url("etcd://host:notaport").is_err());
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
    tls_files: Option<TlsOptions>,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl EtcdConfig {
    /// The settings of `url`, with those of its query (see the table above) and
    /// default timeouts for the rest.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the URL is not a valid `etcd://` or
    /// `etcd+https://` URL, or its query has an unknown key or a bad value.
    pub fn from_url(url: &str) -> Result<Self> {
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (url, None),
        };
        let mut config = parse_url(base)?;
        if let Some(query) = query {
            config = crate::url_settings::apply(config, query)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// The user and password, in place of the URL's.
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// The PEM certificate of the CA that signed the servers' certificates, for
    /// `etcd+https://` URLs (needs the `tls` feature).
    pub fn with_ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// TLS files for `etcd+https://` URLs (needs the `tls` feature): the CA that
    /// signed the servers' certificates, a client certificate and key (for
    /// `--client-cert-auth`), and the name to check the servers' certificates against
    /// if not the URL's host. Files are PEM, read at connect.
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls_files = Some(tls);
        self
    }

    /// How long connecting and logging in may take (default [`DEFAULT_CONNECT_TIMEOUT`],
    /// at least 1 ms).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request may take (default [`DEFAULT_REQUEST_TIMEOUT`], at least
    /// 1 ms).
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Checks the settings together; called by `from_url` and before connecting.
    pub(crate) fn validate(&self) -> Result<()> {
        if (self.ca_pem.is_some() || self.tls_files.is_some()) && !self.tls {
            return Err(Error::invalid_argument(
                "TLS settings (a CA, tls_cert, tls_key, tls_server_name) are only used with etcd+https:// URLs",
            ));
        }
        if let Some(files) = &self.tls_files {
            files.check()?;
        }
        if self.user.as_ref().is_some_and(|(name, _)| name.is_empty()) {
            return Err(Error::invalid_argument(
                "etcd credentials have an empty user name",
            ));
        }
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("request timeout", self.request_timeout),
        ] {
            lock_core::backend::check_duration(
                what,
                value,
                Duration::from_millis(1),
                lock_core::MAX_DURATION,
            )?;
        }
        Ok(())
    }

    /// The endpoints as etcd-client takes them (`http://host:port` or `https://...`).
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The user name, if the cluster has authentication on.
    pub fn username(&self) -> Option<&str> {
        self.user.as_ref().map(|(name, _)| name.as_str())
    }

    /// Whether connections use TLS (`etcd+https://`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The TLS files, if any.
    pub fn tls(&self) -> Option<&TlsOptions> {
        self.tls_files.as_ref()
    }

    /// How long connecting and logging in may take before the call fails with
    /// [`Error::Unavailable`].
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long one request may take before the call fails with [`Error::Unavailable`].
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The etcd-client options these settings make.
    pub(crate) fn client_options(&self) -> Result<etcd_client::ConnectOptions> {
        let mut options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            // Dead connections are noticed by HTTP/2 pings even while only a watch waits.
            .with_keep_alive(Duration::from_secs(5), self.request_timeout)
            .with_keep_alive_while_idle(true)
            // Every request, watches and keep-alive streams included, carries
            // `hasleader: true`: a member cut off from the leader refuses new ones at
            // once and ends the open ones (after three election timeouts without a
            // leader). Without it, a watch served by such a member stays silent for as
            // long as the partition lasts, and a waiter never hears of the release.
            .with_require_leader(true);
        if let Some((name, password)) = &self.user {
            options = options.with_user(name.clone(), password.clone());
        }
        self.tls_options(options)
    }

    #[cfg(feature = "tls")]
    fn tls_options(
        &self,
        options: etcd_client::ConnectOptions,
    ) -> Result<etcd_client::ConnectOptions> {
        if !self.tls {
            return Ok(options);
        }
        let mut tls = etcd_client::TlsOptions::new();
        let own_ca = self.ca_pem.is_some()
            || self
                .tls_files
                .as_ref()
                .is_some_and(|files| files.ca_file.is_some());
        if !own_ca {
            // No CA of its own: the public web roots, as on the other backends.
            tls = tls.with_webpki_roots();
        }
        if let Some(pem) = &self.ca_pem {
            tls = tls.ca_certificate(etcd_client::Certificate::from_pem(pem));
        }
        if let Some(files) = &self.tls_files {
            if let Some(ca) = &files.ca_file {
                let pem = TlsOptions::read(ca, "CA certificate")?;
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(pem));
            }
            if let (Some(cert), Some(key)) = (&files.client_cert_file, &files.client_key_file) {
                let cert = TlsOptions::read(cert, "client certificate")?;
                let key = TlsOptions::read(key, "client key")?;
                tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
            }
            if let Some(name) = &files.server_name {
                tls = tls.domain_name(name.clone());
            }
        }
        Ok(options.with_tls(tls))
    }

    #[cfg(not(feature = "tls"))]
    fn tls_options(
        &self,
        options: etcd_client::ConnectOptions,
    ) -> Result<etcd_client::ConnectOptions> {
        debug_assert!(
            !self.tls && self.ca_pem.is_none() && self.tls_files.is_none(),
            "checked by validate()"
        );
        Ok(options)
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("user", &self.username())
            .field("password", &self.user.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("tls_files", &self.tls_files)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// The endpoints, credentials and TLS of a URL without its query.
fn parse_url(url: &str) -> Result<EtcdConfig> {
    let shown = redact(url);
    let (tls, rest) = match url.split_once("://") {
        Some(("etcd", rest)) => (false, rest),
        Some(("etcd+https", rest)) => (true, rest),
        _ => {
            return Err(Error::invalid_argument(format!(
                "etcd URL must start with etcd:// or etcd+https:// (got {shown:?})"
            )))
        }
    };
    if tls && !cfg!(feature = "tls") {
        return Err(Error::invalid_argument(
            "etcd+https:// URLs need lock-etcd's `tls` feature",
        ));
    }
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, rest),
    };
    let hosts = hosts.trim_end_matches('/');
    let user = match userinfo {
        Some(info) => {
            let (name, password) = info.split_once(':').unwrap_or((info, ""));
            let name =
                percent_decode(name).ok_or_else(|| bad(&shown, "bad escape in the user name"))?;
            let password = percent_decode(password)
                .ok_or_else(|| bad(&shown, "bad escape in the password"))?;
            if name.is_empty() {
                return Err(bad(&shown, "empty user name"));
            }
            Some((name, password))
        }
        None => None,
    };
    let scheme = if tls { "https" } else { "http" };
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        endpoints.push(format!(
            "{scheme}://{}",
            endpoint(host).map_err(|why| bad(&shown, why))?
        ));
    }
    Ok(EtcdConfig {
        endpoints,
        user,
        tls,
        ca_pem: None,
        tls_files: None,
        connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        request_timeout: DEFAULT_REQUEST_TIMEOUT,
    })
}

fn bad(url: &str, why: &str) -> Error {
    Error::invalid_argument(format!("invalid etcd URL {url:?}: {why}"))
}

/// `host[:port]` checked and completed with the default port.
fn endpoint(host: &str) -> std::result::Result<String, &'static str> {
    if host.is_empty() {
        return Err("empty host");
    }
    if host.contains(['/', '?', '#', ' ', '@']) {
        return Err("a host may not contain '/', '?', '#', '@' or spaces");
    }
    // `[v6]:port`, `[v6]`, `name:port` or `name`.
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => (name, Some(port)),
        _ => (host, None),
    };
    if name.is_empty() || name.starts_with('[') != name.ends_with(']') {
        return Err("bad host name");
    }
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or("bad port")?,
        None => DEFAULT_PORT,
    };
    Ok(format!("{name}:{port}"))
}

/// Decodes `%XX` escapes; `None` for a malformed escape or invalid UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The URL without its password, for messages.
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
        let ok = EtcdConfig::from_url("etcd://me:p%40ss@127.0.0.1:23790,[::1],other").unwrap();
        assert_eq!(
            ok.endpoints(),
            [
                "http://127.0.0.1:23790",
                "http://[::1]:2379",
                "http://other:2379"
            ]
        );
        assert_eq!(ok.user.as_ref().unwrap().1, "p@ss");
        for bad in [
            "",
            "127.0.0.1:2379",
            "http://127.0.0.1:2379",
            "etcd://",
            "etcd://host:notaport",
            "etcd://:secret@host:99999",
            "etcd://me:secret@host:0",
            "etcd://a,,b",
            "etcd://me:%zz@host",
            "etcd://host/path",
        ] {
            let err = EtcdConfig::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let tls = EtcdConfig::from_url("etcd+https://127.0.0.1:2379");
        assert_eq!(tls.is_ok(), cfg!(feature = "tls"));
        let err = EtcdConfig::from_url("etcd://127.0.0.1")
            .unwrap()
            .with_request_timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("request timeout"), "{err}");
        let err = EtcdConfig::from_url("etcd://127.0.0.1")
            .unwrap()
            .with_ca_certificate_pem("pem")
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("etcd+https://"), "{err}");
    }
}
