//! Parsing the connection URL: which database, and the URL the driver gets.

use lock_core::{Error, Result};

use crate::dialect::Dialect;

/// A checked connection URL.
#[derive(Clone)]
pub(crate) struct DbUrl {
    pub(crate) dialect: Dialect,
    /// What the driver connects with (for SQLite: `mode=rwc` added so the file is
    /// created if missing).
    pub(crate) driver_url: String,
}

impl std::fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the URL itself: it may carry a password.
        f.debug_struct("DbUrl")
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

/// The URL with any password replaced, for messages.
pub(crate) fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => url.split('@').next_back().unwrap_or_default().to_owned(),
    }
}

impl DbUrl {
    /// The server and database (or the SQLite file), without credentials or options:
    /// the same for every client of this database.
    pub(crate) fn location(&self) -> String {
        match url::Url::parse(&self.driver_url) {
            Ok(mut parsed) => {
                let _ = parsed.set_username("");
                let _ = parsed.set_password(None);
                parsed.set_query(None);
                parsed.to_string()
            }
            Err(_) => {
                let without_options = self.driver_url.split('?').next().unwrap_or_default();
                redacted(without_options)
            }
        }
    }
}

/// Checks `url` and says which database it names.
///
/// Accepted: `postgres://` / `postgresql://`, `mysql://` / `mariadb://` (both with a
/// host), and `sqlite://PATH` or `sqlite:PATH` with a file path (`sqlite:///abs/path`
/// for an absolute one). In-memory SQLite is refused: it cannot be shared.
pub(crate) fn parse(url: &str) -> Result<DbUrl> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
    let dialect = match scheme.as_deref() {
        Some("postgres" | "postgresql") => Dialect::Postgres,
        Some("mysql" | "mariadb") => Dialect::MySql,
        Some("sqlite") => {
            Dialect::Sqlite.check_compiled()?;
            return parse_sqlite(url);
        }
        _ => {
            return Err(Error::invalid_argument(format!(
                "unsupported database URL {:?}: use postgres://, mysql:// or sqlite://",
                redacted(url)
            )))
        }
    };
    dialect.check_compiled()?;
    let parsed = url::Url::parse(url).map_err(|e| {
        Error::invalid_argument(format!("invalid database URL {:?}: {e}", redacted(url)))
    })?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid_argument(format!(
            "database URL {:?} has no host",
            redacted(url)
        )));
    }
    Ok(DbUrl {
        dialect,
        driver_url: url.to_owned(),
    })
}

fn parse_sqlite(url: &str) -> Result<DbUrl> {
    let rest = url["sqlite:".len()..].trim_start_matches("//");
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    if path.is_empty() || path == ":memory:" || query.is_some_and(|q| q.contains("mode=memory")) {
        return Err(Error::invalid_argument(format!(
            "SQLite URL {url:?} needs a file path (sqlite://path/to/file.db): an in-memory database cannot be shared between connections or processes"
        )));
    }
    if path.chars().any(char::is_control) {
        return Err(Error::invalid_argument(format!(
            "SQLite path {path:?} contains a control character"
        )));
    }
    let mut driver_url = format!("sqlite://{path}");
    let mut params: Vec<&str> = query.into_iter().flat_map(|q| q.split('&')).collect();
    if !params.iter().any(|p| p.starts_with("mode=")) {
        params.push("mode=rwc");
    }
    driver_url.push('?');
    driver_url.push_str(&params.join("&"));
    Ok(DbUrl {
        dialect: Dialect::Sqlite,
        driver_url,
    })
}

/// In a build with only some databases, the others' URLs are refused by name.
#[cfg(all(
    test,
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite"))
))]
mod missing_features {
    use super::*;

    #[test]
    fn a_url_of_a_database_left_out_names_its_feature() {
        for (url, dialect) in [
            ("postgres://u:p@localhost/db", Dialect::Postgres),
            ("mysql://u:p@localhost/db", Dialect::MySql),
            ("sqlite://locks.db", Dialect::Sqlite),
        ] {
            match parse(url) {
                Ok(parsed) => {
                    assert!(dialect.is_compiled(), "{url} accepted without its driver");
                    assert_eq!(parsed.dialect, dialect);
                }
                Err(err) => {
                    assert!(!dialect.is_compiled(), "{url}: {err}");
                    let text = err.to_string();
                    assert!(
                        text.contains(&format!("`{}` feature", dialect.feature())),
                        "{text}"
                    );
                }
            }
        }
    }
}

#[cfg(all(test, feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod tests {
    use super::*;

    #[test]
    fn locations_name_the_database_without_credentials_or_options() {
        let pg = parse("postgres://app:s3cret@db.internal:5432/app?sslmode=require").unwrap();
        assert_eq!(pg.location(), "postgres://db.internal:5432/app");
        let my = parse("mysql://root:pw@127.0.0.1:3306/locks").unwrap();
        assert_eq!(my.location(), "mysql://127.0.0.1:3306/locks");
        let file = parse("sqlite:///var/lib/app/locks.db").unwrap();
        assert!(file
            .location()
            .starts_with("sqlite:///var/lib/app/locks.db"));
        assert!(!file.location().contains("mode="), "{}", file.location());
    }

    #[test]
    fn dialects_from_schemes() {
        assert_eq!(
            parse("postgres://u:p@127.0.0.1:5432/db").unwrap().dialect,
            Dialect::Postgres
        );
        assert_eq!(
            parse("mysql://root@localhost/x").unwrap().dialect,
            Dialect::MySql
        );
        let lite = parse("sqlite://data/locks.db").unwrap();
        assert_eq!(lite.dialect, Dialect::Sqlite);
        assert_eq!(lite.driver_url, "sqlite://data/locks.db?mode=rwc");
        assert_eq!(
            parse("sqlite:///tmp/x.db?mode=rw").unwrap().driver_url,
            "sqlite:///tmp/x.db?mode=rw"
        );
    }

    #[test]
    fn bad_urls_are_invalid_arguments_without_passwords() {
        for bad in [
            "",
            "redis://localhost",
            "postgres://",
            "postgres://u:secret@/db",
            "sqlite://",
            "sqlite::memory:",
            "sqlite://x.db?mode=memory",
            "not a url",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
