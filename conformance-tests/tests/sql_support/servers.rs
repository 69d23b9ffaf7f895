//! Readiness of the SQL servers (their specs are in `conformance_tests::server::specs`).

use std::time::Duration;

use lock_sql::sqlx;

/// Waits until the server at `url` answers queries (PostgreSQL accepts connections
/// before it is ready), creating the MySQL database if need be.
pub async fn wait_until_ready(url: &str) {
    sqlx::any::install_default_drivers();
    let (connect_url, create) = if url.starts_with("mysql:") {
        // The database is made first, through a URL without it (driver keys kept).
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let (base, db) = path.rsplit_once('/').expect("database in URL");
        let sep = if query.is_empty() { "" } else { "?" };
        (
            format!("{base}{sep}{query}"),
            Some(format!(
                "CREATE DATABASE IF NOT EXISTS `{db}` CHARACTER SET utf8mb4"
            )),
        )
    } else {
        (url.to_owned(), None)
    };
    let started = tokio::time::Instant::now();
    loop {
        let attempt = async {
            use sqlx::Connection as _;
            let mut conn = sqlx::AnyConnection::connect(&connect_url).await?;
            if let Some(sql) = &create {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                    .execute(&mut conn)
                    .await?;
            }
            sqlx::raw_sql("SELECT 1").execute(&mut conn).await?;
            conn.close().await
        };
        match attempt.await {
            Ok(()) => return,
            Err(e) if started.elapsed() < Duration::from_secs(30) => {
                tracing::debug!(error = %e, "server not ready yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{url} not ready after 30 s: {e}"),
        }
    }
}
