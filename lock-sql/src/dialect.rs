//! Which database a URL names, and the SQL fragments that differ between them.

use lock_core::{Error, Result};

/// The database behind a [`SqlBackend`](crate::SqlBackend).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL (`postgres://` or `postgresql://`).
    Postgres,
    /// MySQL or MariaDB (`mysql://` or `mariadb://`).
    MySql,
    /// SQLite, a file on this machine (`sqlite://path`).
    Sqlite,
}

impl Dialect {
    /// The crate feature that compiles this database's driver in.
    pub fn feature(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// Whether this build has the database's driver (its [`feature`](Self::feature)).
    pub fn is_compiled(self) -> bool {
        match self {
            Dialect::Postgres => cfg!(feature = "postgres"),
            Dialect::MySql => cfg!(feature = "mysql"),
            Dialect::Sqlite => cfg!(feature = "sqlite"),
        }
    }

    /// An [`Error::InvalidArgument`] naming the missing feature, unless this build has
    /// the database's driver.
    pub(crate) fn check_compiled(self) -> Result<()> {
        if self.is_compiled() {
            return Ok(());
        }
        Err(Error::invalid_argument(format!(
            "{} URLs need lock-sql's `{}` feature (the facade's `{}` or `sql`), which this build lacks",
            self.name(),
            self.feature(),
            self.feature()
        )))
    }

    /// The backend name used in errors and traces.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// The server's clock in milliseconds since the Unix epoch, as an SQL expression.
    ///
    /// Every expiry is written and compared with this, never with the client's clock.
    /// On MySQL/MariaDB it is `SYSDATE(3)`, not `NOW(3)`: a session may move `NOW()`
    /// with `SET timestamp`, but not `SYSDATE()`.
    pub(crate) fn now_ms(self) -> &'static str {
        match self {
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
            Dialect::MySql => "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
    }

    /// Quotes a validated identifier.
    pub(crate) fn quote(self, ident: &str) -> String {
        match self {
            Dialect::MySql => format!("`{ident}`"),
            Dialect::Postgres | Dialect::Sqlite => format!("\"{ident}\""),
        }
    }

    /// Rewrites `?` bind markers into `$1, $2, ...` for PostgreSQL. The statements
    /// this crate writes contain no `?` anywhere else (no string literals with one).
    pub(crate) fn markers(self, sql: &str) -> String {
        if self != Dialect::Postgres {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 16);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        out
    }
}

/// The longest table-name prefix accepted: the derived names (`<prefix>_leases`, and
/// the PostgreSQL channel `<prefix>_release`) must stay within 63 bytes.
pub const MAX_TABLE_PREFIX: usize = 48;

/// Checks a table-name prefix: an ASCII letter or `_`, then letters, digits or `_`.
/// It is quoted as well wherever it is used; the check keeps it portable and makes
/// injection through it impossible.
pub(crate) fn validate_table_prefix(prefix: &str) -> Result<()> {
    let mut chars = prefix.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::invalid_argument(format!(
            "table prefix {prefix:?} must start with an ASCII letter or '_' and contain only ASCII letters, digits and '_'"
        )));
    }
    if prefix.len() > MAX_TABLE_PREFIX {
        return Err(Error::invalid_argument(format!(
            "table prefix {prefix:?} is {} bytes long; at most {MAX_TABLE_PREFIX} are allowed",
            prefix.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_numbered_for_postgres_only() {
        assert_eq!(
            Dialect::Postgres.markers("a = ? AND b = ?"),
            "a = $1 AND b = $2"
        );
        assert_eq!(Dialect::MySql.markers("a = ?"), "a = ?");
    }

    #[test]
    fn table_prefixes_are_checked() {
        for good in ["locks", "_x", "a1_b2"] {
            assert!(validate_table_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "1abc", "a-b", "a\"b", "a;drop", "ü", &"x".repeat(49)] {
            let err = validate_table_prefix(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}");
        }
    }
}
