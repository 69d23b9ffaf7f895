//! The settings a database URL may carry: this crate's own (read into [`SqlConfig`]
//! and taken out of the URL) and the driver's (left in it). A key that is neither is
//! an error, where the driver would ignore it.

use lock_core::backend::QuerySettings;
use lock_core::{Error, Result};

use crate::config::{SqlConfig, Strategy};
use crate::dialect::Dialect;

/// The query keys the driver of each database reads, passed through to it as they are.
fn driver_keys(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Postgres => &[
            "sslmode",
            "ssl-mode",
            "sslrootcert",
            "ssl-root-cert",
            "ssl-ca",
            "sslcert",
            "ssl-cert",
            "sslkey",
            "ssl-key",
            "statement-cache-capacity",
            "host",
            "hostaddr",
            "port",
            "dbname",
            "application_name",
        ],
        Dialect::MySql => &[
            "sslmode",
            "ssl-mode",
            "sslca",
            "ssl-ca",
            "sslcert",
            "ssl-cert",
            "sslkey",
            "ssl-key",
            "charset",
            "collation",
            "statement-cache-capacity",
            "socket",
            "timezone",
            "time-zone",
        ],
        Dialect::Sqlite => &["mode", "cache", "immutable", "vfs"],
    }
}

/// The dialect a URL's scheme names, checked later with the rest of the URL.
fn dialect_of(url: &str) -> Option<Dialect> {
    match url.split_once(':')?.0.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => Some(Dialect::Postgres),
        "mysql" | "mariadb" => Some(Dialect::MySql),
        "sqlite" => Some(Dialect::Sqlite),
        _ => None,
    }
}

/// Reads this crate's settings and the credentials out of `url` (see
/// [`SqlConfig::from_url`]); the URL itself is checked by the caller.
pub(crate) fn config_from_url(url: &str) -> Result<SqlConfig> {
    let (url, mut credentials) = take_credentials(url)?;
    let Some((base, query)) = url.split_once('?') else {
        return Ok(with_credentials(SqlConfig::defaults(url), credentials));
    };
    let Some(dialect) = dialect_of(&url) else {
        // The scheme is refused, with the rest, by the caller.
        return Ok(with_credentials(SqlConfig::defaults(url), credentials));
    };
    let mut driver = url::form_urlencoded::Serializer::new(String::new());
    let mut pairs = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        // PostgreSQL's `options` (repeatable) and `options[name]` pass through as given.
        if dialect == Dialect::Postgres && (key == "options" || key.starts_with("options[")) {
            driver.append_pair(&key, &value);
        } else {
            pairs.push((key.into_owned(), value.into_owned()));
        }
    }
    let mut query = QuerySettings::new(pairs)?;
    // PostgreSQL's driver lets `user` and `password` in the query win over the URL's
    // user info: they are credentials too, kept in one place.
    if dialect == Dialect::Postgres {
        let (user, password) = (query.text("user"), query.text("password"));
        if user.is_some() || password.is_some() {
            let (old_user, old_password) = credentials.take().unwrap_or_default();
            credentials = Some((user.unwrap_or(old_user), password.unwrap_or(old_password)));
        }
    }
    for key in driver_keys(dialect) {
        if let Some(value) = query.text(key) {
            driver.append_pair(key, &value);
        }
    }
    let driver = driver.finish();
    let url = if driver.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{driver}")
    };

    let mut options = with_credentials(SqlConfig::defaults(url), credentials);
    if let Some(strategy) = query.text("lock_strategy") {
        options = options.with_strategy(match strategy.as_str() {
            "lease" => Strategy::Lease,
            "for-update" => Strategy::ForUpdate,
            "session" => Strategy::Session,
            other => {
                return Err(Error::invalid_argument(format!(
                    "unknown lock_strategy {other:?}: use lease, for-update or session"
                )))
            }
        });
    }
    if let Some(prefix) = query.text("lock_table_prefix") {
        options = options.with_table_prefix(prefix);
    }
    if let Some(max) = query.number("pool_max")? {
        options = options.with_max_connections(max);
    }
    if let Some(max) = query.number("max_held_locks")? {
        options = options.with_max_held_locks(max);
    }
    if let Some(timeout) = query.duration("connect_timeout")? {
        options = options.with_connect_timeout(timeout);
    }
    if let Some(timeout) = query.duration("request_timeout")? {
        options = options.with_request_timeout(timeout);
    }
    let poll_min = query.duration("poll_min")?;
    let poll_max = query.duration("poll_max")?;
    if poll_min.is_some() || poll_max.is_some() {
        let (min, max) = (
            poll_min.unwrap_or(options.poll_min),
            poll_max.unwrap_or(options.poll_max),
        );
        options = options.with_poll_interval(min, max);
    }
    if let Some(ttl) = query.duration("queue_ttl")? {
        options = options.with_queue_ttl(ttl);
    }
    if let Some(tls) = query.tls() {
        options = options.with_tls(tls);
    }
    query.finish(dialect.name())?;
    Ok(options)
}

/// `url` without the user and password of a server URL, and those percent-decoded.
///
/// # Errors
/// [`Error::InvalidArgument`] for a user or password that is not UTF-8 once decoded.
#[allow(clippy::type_complexity)]
fn take_credentials(url: &str) -> Result<(String, Option<(String, String)>)> {
    let parsed = match url::Url::parse(url) {
        Ok(parsed)
            if parsed.scheme() != "sqlite"
                && (!parsed.username().is_empty() || parsed.password().is_some()) =>
        {
            parsed
        }
        _ => return Ok((url.to_owned(), None)),
    };
    let decode = |text: &str, what: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .map(|decoded| decoded.into_owned())
            .map_err(|_| {
                Error::invalid_argument(format!(
                    "the {what} of database URL {:?} is not UTF-8 once percent-decoded",
                    crate::url::redacted(url)
                ))
            })
    };
    let credentials = (
        decode(parsed.username(), "user name")?,
        decode(parsed.password().unwrap_or_default(), "password")?,
    );
    let mut bare = parsed;
    let _ = bare.set_username("");
    let _ = bare.set_password(None);
    Ok((bare.into(), Some(credentials)))
}

fn with_credentials(config: SqlConfig, credentials: Option<(String, String)>) -> SqlConfig {
    match credentials {
        Some((user, password)) => config.with_credentials(user, password),
        None => config,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_setting_from_the_url() {
        let options = config_from_url(
            "postgres://u:p@db:5432/app?sslmode=verify-full&lock_strategy=for-update\
             &lock_table_prefix=app&pool_max=20&max_held_locks=7&connect_timeout=3s\
             &request_timeout=1500ms&poll_min=2ms&poll_max=1s&queue_ttl=20s\
             &application_name=billing&tls_ca=/etc/ca.pem",
        )
        .unwrap();
        assert_eq!(
            options.url(),
            "postgres://db:5432/app?sslmode=verify-full&application_name=billing"
        );
        assert_eq!(options.username(), Some("u"));
        assert_eq!(options.strategy(), Strategy::ForUpdate);
        assert_eq!(options.table_prefix(), "app");
        assert_eq!(options.max_connections, 20);
        assert_eq!(options.max_held_locks, 7);
        assert_eq!(options.connect_timeout, Duration::from_secs(3));
        assert_eq!(options.request_timeout, Duration::from_millis(1500));
        assert_eq!(
            (options.poll_min, options.poll_max),
            (Duration::from_millis(2), Duration::from_secs(1))
        );
        assert_eq!(options.queue_ttl, Duration::from_secs(20));
        let tls = options.tls.as_ref().unwrap();
        assert_eq!(
            tls.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ca.pem"))
        );
    }

    #[test]
    fn unknown_keys_are_refused_naming_the_known_ones() {
        for (url, unknown) in [
            ("postgres://h/db?pool_maxx=3", "pool_maxx"),
            ("mysql://h/db?sslrootcert=/ca.pem", "sslrootcert"),
            ("sqlite://x.db?connect_timout=1s", "connect_timout"),
        ] {
            let err = config_from_url(url).unwrap_err().to_string();
            assert!(err.contains(unknown), "{url}: {err}");
            assert!(err.contains("connect_timeout"), "{url}: {err}");
        }
    }

    #[test]
    fn every_strategy_by_name() {
        for (name, strategy) in [
            ("lease", Strategy::Lease),
            ("for-update", Strategy::ForUpdate),
            ("session", Strategy::Session),
        ] {
            let url = format!("mysql://h/db?lock_strategy={name}");
            assert_eq!(config_from_url(&url).unwrap().strategy(), strategy);
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        for (url, key) in [
            ("postgres://h/db?pool_max=many", "pool_max"),
            ("postgres://h/db?connect_timeout=soon", "connect_timeout"),
            ("postgres://h/db?lock_strategy=optimistic", "lock_strategy"),
            ("postgres://h/db?pool_max=1&pool_max=2", "pool_max"),
        ] {
            let err = config_from_url(url).unwrap_err().to_string();
            assert!(err.contains(key), "{url}: {err}");
        }
    }

    #[test]
    fn postgres_options_pass_through_repeated_and_named() {
        let pg = config_from_url(
            "postgres://h/db?options=-c%20a%3D1&options=-c%20b%3D2&options[search_path]=app&pool_max=3",
        )
        .unwrap();
        assert_eq!(
            pg.url(),
            "postgres://h/db?options=-c+a%3D1&options=-c+b%3D2&options%5Bsearch_path%5D=app"
        );
        assert_eq!(pg.max_connections, 3);
    }

    #[test]
    fn driver_keys_stay_in_the_url() {
        let lite = config_from_url("sqlite://x.db?mode=rw&pool_max=2").unwrap();
        assert_eq!(lite.url(), "sqlite://x.db?mode=rw");
        let my = config_from_url("mysql://h/db?ssl-mode=REQUIRED&charset=utf8mb4").unwrap();
        assert_eq!(my.url(), "mysql://h/db?ssl-mode=REQUIRED&charset=utf8mb4");
        let plain = config_from_url("postgres://h/db?lock_table_prefix=x").unwrap();
        assert_eq!(plain.url(), "postgres://h/db");
    }
}
