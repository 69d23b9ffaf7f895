//! TLS to the database: [`TlsOptions`] written as the driver's own URL keys, and a
//! clear error where this build cannot do TLS.

use lock_core::{Error, Result, TlsOptions};

use crate::dialect::Dialect;

/// The TLS modes that refuse a connection without TLS, as each driver spells them.
fn requires_tls(dialect: Dialect, mode: &str) -> bool {
    let mode = mode.to_ascii_lowercase();
    match dialect {
        Dialect::Postgres => matches!(mode.as_str(), "require" | "verify-ca" | "verify-full"),
        Dialect::MySql => matches!(mode.as_str(), "required" | "verify_ca" | "verify_identity"),
        Dialect::Sqlite => false,
    }
}

/// `driver_url` with the TLS settings added as the driver's keys: the CA, the client
/// certificate and key, and, unless the URL names a mode itself, the strictest mode
/// (TLS required, the certificate checked against the URL's host).
///
/// # Errors
/// [`Error::InvalidArgument`] for TLS to an SQLite file, a server name override (the
/// drivers check the URL's host), a certificate without its key, a file that cannot be
/// read, or TLS asked of a build without the `tls` feature.
pub(crate) fn with_tls(
    driver_url: &str,
    dialect: Dialect,
    tls: Option<&TlsOptions>,
) -> Result<String> {
    let query = driver_url.split_once('?').map_or("", |(_, q)| q);
    let mode = url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == "sslmode" || key == "ssl-mode")
        .map(|(_, value)| value.into_owned());
    if let Some(tls) = tls {
        if dialect == Dialect::Sqlite {
            return Err(Error::invalid_argument(
                "an SQLite database is a local file: TLS settings do not apply to it",
            ));
        }
        if tls.server_name.is_some() {
            return Err(Error::invalid_argument(format!(
                "{} checks the server's certificate against the URL's host: put that name in the URL instead of tls_server_name",
                dialect.name()
            )));
        }
    }
    let wanted = tls.is_some() || mode.as_deref().is_some_and(|m| requires_tls(dialect, m));
    if wanted && !cfg!(feature = "tls") {
        return Err(Error::invalid_argument(format!(
            "TLS to {} needs lock-sql's `tls` feature (the facade's `tls`), which this build lacks",
            dialect.name()
        )));
    }
    let Some(tls) = tls else {
        return Ok(driver_url.to_owned());
    };
    tls.check()?;
    let (ca_key, cert_key, key_key, mode_key, strictest) = match dialect {
        Dialect::Postgres => ("sslrootcert", "sslcert", "sslkey", "sslmode", "verify-full"),
        _ => (
            "ssl-ca",
            "ssl-cert",
            "ssl-key",
            "ssl-mode",
            "VERIFY_IDENTITY",
        ),
    };
    let mut keys = url::form_urlencoded::Serializer::new(String::new());
    for (key, path, what) in [
        (ca_key, &tls.ca_file, "CA certificate"),
        (cert_key, &tls.client_cert_file, "client certificate"),
        (key_key, &tls.client_key_file, "client key"),
    ] {
        if let Some(path) = path {
            // Read now, so a missing file is named here rather than by the driver.
            TlsOptions::read(path, what)?;
            keys.append_pair(key, &path.to_string_lossy());
        }
    }
    match mode.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => keys.append_pair(mode_key, strictest),
        // The drivers check the CA only in the verifying modes: a CA given beside a
        // mode that encrypts without checking is raised to the mode that checks it.
        Some("require") => keys.append_pair(mode_key, "verify-ca"),
        Some("required") => keys.append_pair(mode_key, "VERIFY_CA"),
        Some("verify-ca" | "verify-full" | "verify_ca" | "verify_identity") => &mut keys,
        Some(weaker) => {
            return Err(Error::invalid_argument(format!(
                "{mode_key}={weaker} would not check the server's certificate (or not use TLS): with TLS settings use a verifying mode, or leave {mode_key} out"
            )))
        }
    };
    let keys = keys.finish();
    // A raised mode replaces the URL's own (the driver would read the first).
    let driver_url = if keys.contains(&format!("{mode_key}=")) && mode.is_some() {
        without_mode(driver_url)
    } else {
        driver_url.to_owned()
    };
    let driver_url = driver_url.as_str();
    let sep = if driver_url.contains('?') { '&' } else { '?' };
    Ok(if keys.is_empty() {
        driver_url.to_owned()
    } else {
        format!("{driver_url}{sep}{keys}")
    })
}

/// `url` without its `sslmode` / `ssl-mode` keys.
fn without_mode(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let mut kept = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        if key != "sslmode" && key != "ssl-mode" {
            kept.append_pair(&key, &value);
        }
    }
    let kept = kept.finish();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{kept}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_tls_leaves_the_url_alone() {
        let url = "postgres://h/db?sslmode=disable";
        assert_eq!(with_tls(url, Dialect::Postgres, None).unwrap(), url);
    }

    #[test]
    fn a_required_mode_without_the_feature_names_it() {
        let result = with_tls("postgres://h/db?sslmode=require", Dialect::Postgres, None);
        if cfg!(feature = "tls") {
            assert!(result.is_ok());
        } else {
            assert!(result.unwrap_err().to_string().contains("`tls` feature"));
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn options_become_the_drivers_keys() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "pem").unwrap();
        let tls = TlsOptions::default().ca_file(&ca);
        let pg = with_tls("postgres://h/db", Dialect::Postgres, Some(&tls)).unwrap();
        assert!(pg.starts_with("postgres://h/db?sslrootcert="), "{pg}");
        assert!(pg.ends_with("&sslmode=verify-full"), "{pg}");
        // A mode that encrypts without checking is raised to one that checks the CA.
        let my = with_tls("mysql://h/db?ssl-mode=REQUIRED", Dialect::MySql, Some(&tls)).unwrap();
        assert!(my.contains("ssl-ca="), "{my}");
        assert!(my.contains("ssl-mode=VERIFY_CA"), "{my}");
        assert!(!my.contains("REQUIRED"), "{my}");
        let pg = with_tls(
            "postgres://h/db?sslmode=require&application_name=x",
            Dialect::Postgres,
            Some(&tls),
        )
        .unwrap();
        assert!(
            pg.contains("sslmode=verify-ca") && !pg.contains("=require"),
            "{pg}"
        );
        assert!(pg.contains("application_name=x"), "{pg}");
        let full = with_tls(
            "postgres://h/db?sslmode=verify-full",
            Dialect::Postgres,
            Some(&tls),
        )
        .unwrap();
        assert!(
            full.contains("sslmode=verify-full") && full.matches("sslmode").count() == 1,
            "{full}"
        );
        // And one that would not check it (or not encrypt) is refused.
        for weak in [
            "postgres://h/db?sslmode=prefer",
            "postgres://h/db?sslmode=disable",
            "mysql://h/db?ssl-mode=DISABLED",
            "mysql://h/db?ssl-mode=PREFERRED",
        ] {
            let dialect = if weak.starts_with("postgres") {
                Dialect::Postgres
            } else {
                Dialect::MySql
            };
            let err = with_tls(weak, dialect, Some(&tls)).unwrap_err();
            assert!(err.to_string().contains("would not check"), "{weak}: {err}");
        }
    }

    #[test]
    fn what_cannot_work_is_refused_clearly() {
        let missing = TlsOptions::default().ca_file("/nonexistent/ca.pem");
        let sqlite = with_tls("sqlite://x.db", Dialect::Sqlite, Some(&missing));
        let named = TlsOptions::default().server_name("db.internal");
        let server_name = with_tls("postgres://h/db", Dialect::Postgres, Some(&named));
        let unread = with_tls("postgres://h/db", Dialect::Postgres, Some(&missing));
        for (result, words) in [
            (sqlite, "local file"),
            (server_name, "URL's host"),
            (
                unread,
                if cfg!(feature = "tls") {
                    "/nonexistent/ca.pem"
                } else {
                    "`tls` feature"
                },
            ),
        ] {
            let err = result.unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
            assert!(err.to_string().contains(words), "{err}");
        }
    }
}
