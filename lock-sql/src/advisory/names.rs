//! How the session strategy names its locks on the server, and the register of the
//! names it has seen.

use std::collections::HashSet;
use std::sync::Mutex;

use lock_core::{Error, LockFamily, Result};
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::db::{q, Db};
use crate::dialect::Dialect;
use crate::key::KeyId;

/// The most keys [`Register`] remembers before it starts over.
const REGISTER_LIMIT: usize = 100_000;

/// The keys this process has put in the name register, so a lock taken again and
/// again registers its name once.
#[derive(Debug, Default)]
pub(crate) struct Register(Mutex<HashSet<String>>);

impl Register {
    fn contains(&self, hash: &str) -> bool {
        self.0.lock().map(|set| set.contains(hash)).unwrap_or(false)
    }

    fn insert(&self, hash: &str) {
        if let Ok(mut set) = self.0.lock() {
            if set.len() >= REGISTER_LIMIT {
                set.clear();
            }
            set.insert(hash.to_owned());
        }
    }
}

/// The server's name of one advisory lock: a key and family of one table set.
pub(crate) struct LockId {
    /// PostgreSQL's 64-bit advisory key.
    pub(super) pg: i64,
    /// MariaDB's lock name (hex, 49 characters: within MySQL's limit of 64).
    pub(super) mysql: String,
}

impl LockId {
    pub(super) fn of(db: &Db, key: &KeyId, family: LockFamily) -> Self {
        let space = &db.lock_space;
        let mut digest = Sha256::new();
        digest.update((space.len() as u64).to_be_bytes());
        digest.update(space.as_bytes());
        digest.update(key.hash.as_bytes());
        digest.update([family_code(family)]);
        let digest = digest.finalize();
        let mut pg = [0u8; 8];
        pg.copy_from_slice(&digest[..8]);
        LockId {
            pg: i64::from_be_bytes(pg),
            mysql: crate::key::push_hex(String::from("lock_sql_"), &digest[..20]),
        }
    }

    /// `pg_locks` shows a 64-bit advisory key as two 32-bit halves.
    pub(super) fn halves(&self) -> (i64, i64) {
        let bits = self.pg as u64;
        ((bits >> 32) as i64, (bits & 0xffff_ffff) as i64)
    }
}

fn family_code(family: LockFamily) -> u8 {
    match family {
        LockFamily::Exclusive => 0,
        LockFamily::Fair => 1,
        LockFamily::ReadWrite => 2,
        LockFamily::Semaphore => 3,
        LockFamily::Election => 4,
    }
}

/// Where this backend's advisory locks live (see [`Db::lock_space`]); refuses
/// PostgreSQL before 14, which has no `idle_session_timeout` to lease a session with.
pub(crate) async fn lock_space(db: &Db, table_prefix: &str) -> Result<String> {
    let row = q(&db.sql.advisory.lock_space)
        .fetch_one(&db.pool)
        .await
        .map_err(|e| db.err(e))?;
    let place: String = row.try_get(0).map_err(|e| db.err(e))?;
    let version: i64 = row.try_get(1).map_err(|e| db.err(e))?;
    if db.dialect == Dialect::Postgres && version < 140_000 {
        return Err(Error::Unsupported {
            backend: db.name(),
            operation: "the session strategy before PostgreSQL 14 (no idle_session_timeout)",
        });
    }
    Ok(format!("{place}/{table_prefix}"))
}

/// Puts the key's namespace and name in the name register, once per process.
pub(super) async fn register(db: &Db, key: &KeyId) -> Result<()> {
    if db.registered.contains(&key.hash) {
        return Ok(());
    }
    let insert = q(&db.sql.advisory.register)
        .bind(key.hash.clone())
        .bind(key.namespace.clone())
        .bind(key.name.clone())
        .execute(&db.pool);
    db.timed("registering the lock's name", async {
        insert.await.map_err(|e| db.err(e))
    })
    .await?;
    db.registered.insert(&key.hash);
    Ok(())
}
