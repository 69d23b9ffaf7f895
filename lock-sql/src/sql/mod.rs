//! Every statement the backend sends, written once per dialect at connect time.
//!
//! The only text spliced into SQL is the table prefix, which is validated (ASCII
//! letters, digits, `_`) and quoted; every value (lock keys, owners, durations) is a
//! bind parameter.
//!
//! [`schema`] holds what connect runs, [`lease`], [`fast_grant`] and
//! [`grant_procedure`] the lease strategy's statements, [`row_lock`] the FOR UPDATE
//! strategy's, [`advisory`] and [`session_procedures`] the session strategy's; the fence
//! counter the first two bump lives here.

mod advisory;
mod fast_grant;
mod grant_procedure;
mod lease;
mod row_lock;
mod schema;
mod session_procedures;

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::dialect::Dialect;

pub(crate) use advisory::AdvisoryStatements;
pub(crate) use fast_grant::{Arg, FastGrant};
pub(crate) use grant_procedure::GrantProcedure;
pub(crate) use lease::LeaseStatements;
pub(crate) use row_lock::RowLockStatements;
pub(crate) use schema::{SchemaStatements, SCHEMA_VERSION};
pub(crate) use session_procedures::SessionProcedures;

/// A statement ready to hand to the driver.
pub(crate) type Stmt = Arc<str>;

/// The tables, quoted.
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) meta: String,
    pub(crate) keys: String,
    pub(crate) leases: String,
    pub(crate) queue: String,
    pub(crate) rows: String,
    pub(crate) holders: String,
    /// The session strategy's fence counters (not durable: see [`advisory`]).
    pub(crate) fences: String,
    /// The lease table's name as the catalogs take it: quoted for PostgreSQL's
    /// `to_regclass`, bare for MySQL's information schema and SQLite's pragma.
    pub(crate) leases_name: String,
    /// The queue table's name, as `leases_name`.
    pub(crate) queue_name: String,
    /// The PostgreSQL notification channel (unquoted: it is passed as a value).
    pub(crate) channel: String,
}

impl Tables {
    pub(crate) fn new(dialect: Dialect, prefix: &str) -> Self {
        let q = |suffix: &str| dialect.quote(&format!("{prefix}_{suffix}"));
        Tables {
            meta: q("meta"),
            keys: q("keys"),
            leases: q("leases"),
            queue: q("queue"),
            rows: q("rows"),
            holders: q("holders"),
            fences: q("fences"),
            leases_name: match dialect {
                Dialect::Postgres => q("leases"),
                Dialect::MySql | Dialect::Sqlite => format!("{prefix}_leases"),
            },
            queue_name: match dialect {
                Dialect::Postgres => q("queue"),
                Dialect::MySql | Dialect::Sqlite => format!("{prefix}_queue"),
            },
            channel: format!("{prefix}_release"),
        }
    }
}

/// The statements of one backend.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) dialect: Dialect,
    pub(crate) tables: Tables,
    pub(crate) schema: SchemaStatements,
    pub(crate) lease: LeaseStatements,
    pub(crate) row_lock: RowLockStatements,
    pub(crate) advisory: AdvisoryStatements,
    /// MySQL: the lease strategy's uncontended grant in one call.
    pub(crate) grant_procedure: Option<GrantProcedure>,
    /// MySQL: the session strategy's try and release, one call each.
    pub(crate) session_procedures: Option<SessionProcedures>,
    /// Creates the key's row or bumps its fence, locking it for the transaction.
    /// PostgreSQL and SQLite return the fence; MySQL reports it as the last insert id
    /// ([`Self::last_insert_id`] reads it if a server does not).
    pub(crate) key_bump: Stmt,
    /// MySQL: the connection's `LAST_INSERT_ID()`, where the key and ticket bumps
    /// leave the new counter value.
    pub(crate) last_insert_id: Stmt,
    pub(crate) notify: Stmt,
}

fn s(dialect: Dialect, sql: String) -> Stmt {
    dialect.markers(&sql).into()
}

/// A MariaDB stored procedure of one table set. Its name is the tables' prefix, its
/// role and a digest of its body: a release whose body differs makes a procedure of
/// its own, so clients of both releases share the tables, each with its own rules.
#[derive(Debug)]
pub(crate) struct Procedure {
    /// The name, unquoted (as the information schema has it).
    pub(crate) name: String,
    /// Creates it if it is missing (as text: a `CREATE PROCEDURE` cannot be prepared).
    pub(crate) create: Stmt,
}

impl Procedure {
    /// The procedure `<prefix>_<role>_<digest>` of `definition` (its parameters,
    /// characteristics and body), and its name quoted for calls. The longest prefix
    /// leaves 16 characters of MariaDB's 64 for the role, the digest and two `_`.
    fn new(prefix: &str, role: &str, definition: &str) -> (Self, String) {
        let digest = Sha256::digest(definition.as_bytes());
        let name = crate::key::push_hex(format!("{prefix}_{role}_"), &digest[..4]);
        let quoted = Dialect::MySql.quote(&name);
        let create = format!("CREATE PROCEDURE IF NOT EXISTS {quoted}{definition}").into();
        (Procedure { name, create }, quoted)
    }
}

impl Statements {
    /// The statements of the tables named from `prefix`; `lock_wait` bounds how long
    /// MariaDB's grant procedure waits for a row lock.
    pub(crate) fn new(dialect: Dialect, prefix: &str, lock_wait: Duration) -> Self {
        let t = Tables::new(dialect, prefix);
        let keys = &t.keys;
        let st = |sql: String| s(dialect, sql);
        let key_insert = format!(
            "INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, 1, 0, ?, ?)"
        );
        let key_bump = st(match dialect {
            Dialect::Postgres => format!(
                "INSERT INTO {keys} AS k (khash, fence, ticket, namespace, name) VALUES (?, 1, 0, ?, ?) \
                 ON CONFLICT (khash) DO UPDATE SET fence = k.fence + 1 RETURNING fence"
            ),
            Dialect::Sqlite => format!(
                "{key_insert} ON CONFLICT (khash) DO UPDATE SET fence = fence + 1 RETURNING fence"
            ),
            // LAST_INSERT_ID(expr) puts the new fence in the statement's OK packet, so
            // no SELECT is needed to read it back.
            Dialect::MySql => format!(
                "INSERT INTO {keys} (khash, fence, ticket, namespace, name) VALUES (?, LAST_INSERT_ID(1), 0, ?, ?) \
                 ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
            ),
        });
        let last_insert_id = st("SELECT CAST(LAST_INSERT_ID() AS SIGNED)".to_owned());
        let notify = st(match dialect {
            Dialect::Postgres => "SELECT pg_notify(?, ?) IS NULL".to_owned(),
            _ => "SELECT 1".to_owned(),
        });
        Statements {
            dialect,
            schema: SchemaStatements::new(dialect, &t),
            lease: LeaseStatements::new(dialect, &t),
            row_lock: RowLockStatements::new(dialect, &t),
            advisory: AdvisoryStatements::new(dialect, &t),
            grant_procedure: (dialect == Dialect::MySql)
                .then(|| GrantProcedure::new(&t, prefix, lock_wait)),
            session_procedures: (dialect == Dialect::MySql)
                .then(|| SessionProcedures::new(&t, prefix)),
            tables: t,
            key_bump,
            last_insert_id,
            notify,
        }
    }
}
