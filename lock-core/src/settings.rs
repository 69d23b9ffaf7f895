//! Settings every backend reads the same way: durations written as `500ms` or `10s`, a
//! URL's query parameters (where an unknown key is an error, not ignored), and TLS.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::options::MAX_DURATION;

/// Parses a duration as settings and command lines write it: a number and a unit, `ms`,
/// `s`, `m` or `h` (`500ms`, `10s`, `1.5s`, `2m`, `1h`); a bare number is seconds.
///
/// ```
/// use std::time::Duration;
/// use lock_core::parse_duration;
/// assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
/// assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// assert!(parse_duration("10 parsecs").is_err());
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] saying what was expected, for anything else or a
/// duration longer than [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration> {
    let bad = || {
        Error::invalid_argument(format!(
            "invalid duration {text:?}: expected a number and a unit, e.g. 500ms, 10s, 2m, 1h"
        ))
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(bad()),
    };
    let duration = Duration::try_from_secs_f64(seconds).map_err(|_| bad())?;
    if duration > MAX_DURATION {
        return Err(Error::invalid_argument(format!(
            "duration {text:?} is too long (at most {} days)",
            MAX_DURATION.as_secs() / 86_400
        )));
    }
    Ok(duration)
}

/// A URL's query parameters, read by key. Every key must be read by the backend that
/// knows it: [`finish`](Self::finish) refuses what is left, so a misspelled setting is
/// an error rather than silently ignored.
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::QuerySettings;
/// let mut query = QuerySettings::new([("connect_timeout", "5s"), ("pool_max", "20")])?;
/// assert_eq!(query.duration("connect_timeout")?, Some(Duration::from_secs(5)));
/// assert_eq!(query.number::<u32>("pool_max")?, Some(20));
/// query.finish("postgres")?;
///
/// let mut query = QuerySettings::new([("conect_timeout", "5s")])?;
/// assert_eq!(query.duration("connect_timeout")?, None);
/// assert!(query.finish("postgres").is_err()); // the misspelled key
/// # Ok::<(), lock_core::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct QuerySettings {
    unread: BTreeMap<String, String>,
    read: Vec<String>,
}

impl QuerySettings {
    /// The parameters of a query, in order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key given twice.
    pub fn new<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Result<Self>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let mut unread = BTreeMap::new();
        for (key, value) in pairs {
            let key = key.into();
            if unread.insert(key.clone(), value.into()).is_some() {
                return Err(Error::invalid_argument(format!(
                    "URL setting `{key}` is given twice"
                )));
            }
        }
        Ok(QuerySettings {
            unread,
            read: Vec::new(),
        })
    }

    /// The value of `key` as text, if given.
    pub fn text(&mut self, key: &str) -> Option<String> {
        self.read.push(key.to_owned());
        self.unread.remove(key)
    }

    /// The value of `key` as a duration ([`parse_duration`]), if given.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the key, for a value that is not a duration.
    pub fn duration(&mut self, key: &str) -> Result<Option<Duration>> {
        self.text(key)
            .map(|value| {
                parse_duration(&value).map_err(|err| {
                    Error::invalid_argument(format!("URL setting `{key}`: {}", message(&err)))
                })
            })
            .transpose()
    }

    /// The value of `key` as a number, if given.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the key, for a value that is not one.
    pub fn number<T: std::str::FromStr>(&mut self, key: &str) -> Result<Option<T>> {
        self.text(key)
            .map(|value| {
                value.trim().parse().map_err(|_| {
                    Error::invalid_argument(format!("URL setting `{key}={value}` is not a number"))
                })
            })
            .transpose()
    }

    /// The value of `key` as a yes/no (`true`/`false`, `1`/`0`, `yes`/`no`), if given.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the key, for anything else.
    pub fn flag(&mut self, key: &str) -> Result<Option<bool>> {
        self.text(key)
            .map(|value| match value.trim() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                other => Err(Error::invalid_argument(format!(
                    "URL setting `{key}={other}` is not true or false"
                ))),
            })
            .transpose()
    }

    /// The TLS settings `tls_ca`, `tls_cert`, `tls_key` and `tls_server_name` (paths to
    /// PEM files, and the name to check the server's certificate against), if any of
    /// them is given.
    pub fn tls(&mut self) -> Option<TlsOptions> {
        let ca = self.text("tls_ca").map(PathBuf::from);
        let cert = self.text("tls_cert").map(PathBuf::from);
        let key = self.text("tls_key").map(PathBuf::from);
        let server_name = self.text("tls_server_name");
        if ca.is_none() && cert.is_none() && key.is_none() && server_name.is_none() {
            return None;
        }
        Some(TlsOptions {
            ca_file: ca,
            client_cert_file: cert,
            client_key_file: key,
            server_name,
        })
    }

    /// Refuses any key no one read.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the unknown keys and those `backend` knows.
    pub fn finish(self, backend: &str) -> Result<()> {
        if self.unread.is_empty() {
            return Ok(());
        }
        // A key with `@` in it is most likely the rest of a password whose `?` started
        // the query too early: never echo it.
        let credentials = self.unread.keys().any(|key| key.contains('@'));
        let unknown: Vec<&str> = self
            .unread
            .keys()
            .filter(|key| !key.contains('@'))
            .map(String::as_str)
            .collect();
        let mut known = self.read;
        known.sort();
        known.dedup();
        if credentials {
            return Err(Error::invalid_argument(format!(
                "the {backend} URL's query starts inside its credentials: a `?`, `#` or `/` in a user name or password must be percent-encoded (%3F, %23, %2F)"
            )));
        }
        Err(Error::invalid_argument(format!(
            "unknown {backend} URL setting{} {}; known: {}",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.join(", "),
            known.join(", ")
        )))
    }
}

/// The message of an [`Error::InvalidArgument`] without its prefix.
fn message(err: &Error) -> String {
    match err {
        Error::InvalidArgument { message } => message.clone(),
        other => other.to_string(),
    }
}

/// TLS to a server: the certificate authority to trust (the public web roots when none
/// is given; ZooKeeper's client needs one), an optional client certificate and key
/// (mutual TLS), and the name to check the server's certificate against (the URL's host
/// when none is given). Files are PEM. Every backend reads these the same way, from its
/// config or from the URL settings `tls_ca`, `tls_cert`, `tls_key`, `tls_server_name`.
///
/// ```
/// use lock_core::TlsOptions;
/// let tls = TlsOptions::default()
///     .ca_file("/etc/locks/ca.pem")
///     .client_cert("/etc/locks/client.pem", "/etc/locks/client.key");
/// assert!(tls.check().is_ok());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsOptions {
    /// The certificate authority to trust, PEM.
    pub ca_file: Option<PathBuf>,
    /// The client certificate, PEM, for servers that ask for one.
    pub client_cert_file: Option<PathBuf>,
    /// The client certificate's private key, PEM.
    pub client_key_file: Option<PathBuf>,
    /// The name the server's certificate must carry, if not the URL's host.
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// Trust this certificate authority.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Present this client certificate and key (mutual TLS).
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert_file = Some(cert.into());
        self.client_key_file = Some(key.into());
        self
    }

    /// Check the server's certificate against this name.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Checks that the settings go together: a client certificate comes with its key.
    /// Backends call it at connect, before reading the files.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] saying what is missing.
    pub fn check(&self) -> Result<()> {
        match (&self.client_cert_file, &self.client_key_file) {
            (Some(_), None) => Err(Error::invalid_argument(
                "a TLS client certificate needs its key (tls_key)",
            )),
            (None, Some(_)) => Err(Error::invalid_argument(
                "a TLS client key needs its certificate (tls_cert)",
            )),
            _ => Ok(()),
        }
    }

    /// Reads one of the PEM files, for a backend building its client's TLS config.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file and `what` it was for, if it cannot be
    /// read.
    pub fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|err| {
            Error::invalid_argument(format!(
                "cannot read the TLS {what} {}: {err}",
                path.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_cut_out_of_a_password_is_not_echoed() {
        let query = QuerySettings::new([("w@db.internal:6379/0", "")]).unwrap();
        let err = query.finish("Redis").unwrap_err().to_string();
        assert!(!err.contains("w@db"), "{err}");
        assert!(err.contains("percent-encoded"), "{err}");
    }

    #[test]
    fn durations_with_units_and_clear_errors() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        for bad in [
            "",
            "s",
            "ten",
            "10 parsecs",
            "-1s",
            "1e999s",
            "1.2.3s",
            "NaNs",
        ] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains("duration"), "{bad}: {err}");
        }
        assert!(parse_duration("99999999h")
            .unwrap_err()
            .to_string()
            .contains("too long"));
    }

    #[test]
    fn query_settings_refuse_twice_given_and_unknown_keys() {
        assert!(QuerySettings::new([("a", "1"), ("a", "2")]).is_err());
        let mut query =
            QuerySettings::new([("flag", "yes"), ("n", "x"), ("tls_ca", "/ca.pem")]).unwrap();
        assert_eq!(query.flag("flag").unwrap(), Some(true));
        assert!(query
            .number::<u32>("n")
            .unwrap_err()
            .to_string()
            .contains("`n=x`"));
        let tls = query.tls().unwrap();
        assert_eq!(tls.ca_file.as_deref(), Some(Path::new("/ca.pem")));
        query.finish("test").unwrap();
        let query = QuerySettings::new([("b", "1"), ("c", "2")]).unwrap();
        let err = query.finish("redis").unwrap_err().to_string();
        assert!(err.contains("unknown redis URL settings b, c"), "{err}");
        assert!(TlsOptions::default().client_cert("c", "k").check().is_ok());
        let half = TlsOptions {
            client_cert_file: Some("c".into()),
            ..TlsOptions::default()
        };
        assert!(half.check().is_err());
    }
}
