//! Other locks on the same servers, measured beside ours: floors (the least a lock
//! can cost there) and peers (other libraries and common hand-rolled recipes).

use crate::contender::Contender;

#[cfg(feature = "etcd")]
mod etcd_raw;
#[cfg(feature = "etcd")]
mod etcd_v3lock;
#[cfg(feature = "sql")]
mod mariadb_get_lock;
#[cfg(feature = "sql")]
mod naive_table;
#[cfg(feature = "sql")]
mod pg_advisory;
#[cfg(any(feature = "zookeeper", feature = "sql"))]
mod piped;
#[cfg(feature = "sql")]
pub use piped::Piped;
#[cfg(feature = "redis")]
mod redis_raw;
#[cfg(feature = "redis")]
mod rslock;
#[cfg(feature = "zookeeper")]
mod zk_raw;

/// Which floor a floor contender measures at its server: the floor alone, or the floor
/// plus, by hand, the server work of this library's promises there.
#[cfg(any(feature = "redis", feature = "sql"))]
pub struct Floor {
    url: String,
    promises: bool,
}

#[cfg(any(feature = "redis", feature = "sql"))]
impl Floor {
    /// The floor alone at `url`.
    pub fn bare(url: &str) -> Self {
        Self {
            url: url.into(),
            promises: false,
        }
    }

    /// The floor at `url` plus the server work of this library's promises.
    pub fn with_promises(url: &str) -> Self {
        Self {
            url: url.into(),
            promises: true,
        }
    }

    /// `bare` or `with_promises`, as this floor is.
    fn name(&self, bare: &str, with_promises: &str) -> String {
        if self.promises { with_promises } else { bare }.into()
    }

    /// [`Role::FloorWithPromises`](crate::contender::Role::FloorWithPromises) or
    /// [`Role::Floor`](crate::contender::Role::Floor), as this floor is.
    fn role(&self) -> crate::contender::Role {
        if self.promises {
            crate::contender::Role::FloorWithPromises
        } else {
            crate::contender::Role::Floor
        }
    }
}

/// The lease, in milliseconds, a floor gives each grant: its key's expiry on Redis, the
/// silence limit with promises on the SQL servers. Ours is given the same lease, 30 s,
/// for its watchdog (`ours::client`).
#[cfg(any(feature = "redis", feature = "sql"))]
pub const LEASE_MS: u64 = 30_000;

/// How often the polling recipes (raw `SET NX`, the naive table) try again while the
/// lock is held: often enough to be a fair rival, rarely enough not to flood the server.
#[cfg(any(feature = "redis", feature = "sql"))]
pub const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// The floors and peers that run on the server at `url` (none for an unknown scheme).
pub fn for_url(url: &str) -> Vec<Box<dyn Contender>> {
    let scheme = url.split("://").next().unwrap_or_default();
    match scheme {
        #[cfg(feature = "redis")]
        "redis" => vec![
            Box::new(redis_raw::RawRedis(Floor::bare(url))),
            Box::new(redis_raw::RawRedis(Floor::with_promises(url))),
            Box::new(rslock::Rslock::new(url)),
        ],
        #[cfg(feature = "etcd")]
        "etcd" => vec![
            Box::new(etcd_raw::RawEtcd::new(url)),
            Box::new(etcd_v3lock::V3Lock::new(url)),
        ],
        #[cfg(feature = "zookeeper")]
        "zk" => vec![
            Box::new(zk_raw::RawZk::new(url)),
            Box::new(piped::Piped::kazoo(url, None)),
            Box::new(piped::Piped::curator(url, None)),
        ],
        #[cfg(feature = "sql")]
        "postgres" | "postgresql" => vec![
            Box::new(pg_advisory::PgAdvisory(Floor::bare(url))),
            Box::new(pg_advisory::PgAdvisory(Floor::with_promises(url))),
            Box::new(naive_table::NaiveTable::new(url)),
        ],
        #[cfg(feature = "sql")]
        "mysql" | "mariadb" => vec![
            Box::new(mariadb_get_lock::GetLock(Floor::bare(url))),
            Box::new(mariadb_get_lock::GetLock(Floor::with_promises(url))),
            Box::new(naive_table::NaiveTable::new(url)),
        ],
        #[cfg(feature = "sql")]
        "sqlite" => vec![Box::new(naive_table::NaiveTable::new(url))],
        _ => Vec::new(),
    }
}

/// The peers' semaphores of `permits` on the server at `url`, beside ours.
pub fn semaphores(url: &str, permits: u32) -> Vec<Box<dyn Contender>> {
    let scheme = url.split("://").next().unwrap_or_default();
    match scheme {
        #[cfg(feature = "zookeeper")]
        "zk" => vec![
            Box::new(piped::Piped::kazoo(url, Some(permits))),
            Box::new(piped::Piped::curator(url, Some(permits))),
        ],
        _ => {
            let _ = permits;
            Vec::new()
        }
    }
}

/// A stable 64-bit key for a lock name, for servers whose locks are numbered.
#[cfg(feature = "sql")]
fn key_of(name: &str) -> i64 {
    // FNV-1a: stable across runs and processes, unlike std's hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    hash as i64
}
