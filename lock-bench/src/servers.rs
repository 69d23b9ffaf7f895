//! Servers the benchmark starts for itself: the same Debian packages and loopback
//! ports as the tests (`conformance_tests::server::specs`), by default with each
//! server's own durability rather than the tests' shortcuts.

use std::time::Duration;

use conformance_tests::server::{specs, TestServer};
use distributed_locks::{connect, ConnectOptions};
use tokio::time::Instant;

/// What `--start` accepts.
pub const NAMES: &[&str] = &["redis", "zookeeper", "etcd", "postgres", "mysql", "sqlite"];

/// A started server (or file) and the URL to bench it at.
pub struct Started {
    pub url: String,
    _server: Option<TestServer>,
    _dir: Option<tempfile::TempDir>,
}

/// Starts `name` and waits until a lock client can connect to it. With `durable`,
/// PostgreSQL and MariaDB sync every commit, as their defaults do (the tests turn
/// that off); Redis, ZooKeeper and etcd run as the tests run them.
pub async fn start(name: &str, durable: bool) -> Result<Started, String> {
    let spec = match name {
        "redis" => &specs::REDIS,
        "postgres" if durable => &specs::POSTGRES_DURABLE,
        "zookeeper" => &specs::ZOOKEEPER,
        "etcd" => &specs::ETCD,
        "postgres" => &specs::POSTGRES,
        "mysql" => &specs::MARIADB,
        "sqlite" => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let url = format!("sqlite://{}", dir.path().join("bench.db").display());
            return Ok(Started {
                url,
                _server: None,
                _dir: Some(dir),
            });
        }
        other => return Err(format!("cannot start {other:?}; choose from {NAMES:?}")),
    };
    let server = TestServer::start(spec).await?;
    let mut url = server.url();
    if name == "mysql" {
        // The system schema exists from the start; the bench's tables go next to it.
        if let Some(port) = server.port() {
            url = format!("mysql://root@127.0.0.1:{port}/mysql");
        }
    }
    wait_until_connectable(&url, Duration::from_secs(60)).await?;
    if name == "mysql" && durable {
        sync_every_commit(&url).await?;
    }
    Ok(Started {
        url,
        _server: Some(server),
        _dir: None,
    })
}

/// MariaDB's default: the log is written and synced at every commit.
#[cfg(feature = "sql")]
async fn sync_every_commit(url: &str) -> Result<(), String> {
    use distributed_locks::sql::sqlx::{self, Connection, MySqlConnection};
    let mut conn = MySqlConnection::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query("SET GLOBAL innodb_flush_log_at_trx_commit = 1")
        .execute(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(not(feature = "sql"))]
async fn sync_every_commit(_url: &str) -> Result<(), String> {
    Ok(())
}

/// Some servers accept connections before they serve (PostgreSQL, ZooKeeper).
async fn wait_until_connectable(url: &str, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let attempt = async {
            let client = connect(url, ConnectOptions::default().namespace("bench-probe")).await?;
            client.lock("probe")?.is_locked().await
        };
        match tokio::time::timeout(Duration::from_secs(10), attempt).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(err)) if started.elapsed() > limit => return Err(format!("{url}: {err}")),
            Err(_) if started.elapsed() > limit => return Err(format!("{url}: no answer")),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
