//! PostgreSQL and MariaDB from Debian's packages, started on free loopback ports with
//! temporary data directories (the harness stops them by PID).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use conformance_tests::server::ServerSpec;
use lock_sql::sqlx;

fn running_as_root() -> bool {
    // The effective uid, without a libc dependency.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// The uid and gid of a local user, from /etc/passwd.
fn user_ids(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.first() == Some(&user))
            .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
    })
}

fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The newest installed PostgreSQL's binaries (Debian keeps them off PATH).
fn pg_bindir() -> String {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    versions.sort_unstable();
    match versions.last() {
        Some(v) => format!("/usr/lib/postgresql/{v}/bin"),
        None => "/usr/lib/postgresql/15/bin".to_owned(),
    }
}

/// PostgreSQL: `initdb` on first start, then the postmaster in the foreground. As
/// root, both run as the `postgres` user (they refuse root); `setpriv` execs, so the
/// PID the harness kills is the postmaster's.
pub const POSTGRES: ServerSpec = ServerSpec {
    name: "postgres",
    env_url: "LOCK_TEST_POSTGRES_URL",
    command: postgres_command,
    url: |port| format!("postgres://postgres@127.0.0.1:{port}/postgres"),
};

fn postgres_command(port: u16, dir: &Path) -> Command {
    let bin = pg_bindir();
    let data = dir.join("data");
    let (d, q) = (sh_quote(&data), sh_quote(dir));
    let script = format!(
        "[ -f {d}/PG_VERSION ] || {bin}/initdb -D {d} -A trust -U postgres -N >/dev/null || exit 1; \
         exec {bin}/postgres -D {d} -p {port} -k {q} -c listen_addresses=127.0.0.1 \
         -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400"
    );
    if running_as_root() {
        if let Some((uid, gid)) = user_ids("postgres") {
            let _ = std::os::unix::fs::chown(dir, Some(uid), Some(gid));
        }
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "sh",
            "-c",
            &script,
        ]);
        cmd
    } else {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script]);
        cmd
    }
}

/// MariaDB: `mariadb-install-db` on first start, then `mariadbd` in the foreground,
/// with no option files read.
pub const MARIADB: ServerSpec = ServerSpec {
    name: "mariadb",
    env_url: "LOCK_TEST_MYSQL_URL",
    command: mariadb_command,
    url: |port| format!("mysql://root@127.0.0.1:{port}/locktest"),
};

fn mariadb_command(port: u16, dir: &Path) -> Command {
    let data = sh_quote(&dir.join("data"));
    let sock = sh_quote(&dir.join("mysqld.sock"));
    let install_log = sh_quote(&dir.join("install.log"));
    let user = if running_as_root() {
        "root".to_owned()
    } else {
        std::env::var("USER").unwrap_or_else(|_| "mysql".into())
    };
    let script = format!(
        "[ -d {data}/mysql ] || mariadb-install-db --no-defaults --datadir={data} \
         --auth-root-authentication-method=normal --user={user} --skip-test-db >{install_log} 2>&1 || exit 1; \
         exec mariadbd --no-defaults --datadir={data} --port={port} --bind-address=127.0.0.1 \
         --socket={sock} --user={user} --skip-log-bin --skip-name-resolve \
         --innodb-flush-log-at-trx-commit=0 --max-connections=500"
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]);
    cmd
}

/// Waits until the server at `url` answers queries (PostgreSQL accepts connections
/// before it is ready), creating the MySQL database if need be.
pub async fn wait_until_ready(url: &str) {
    sqlx::any::install_default_drivers();
    let (connect_url, create) = if url.starts_with("mysql:") {
        let (base, db) = url.rsplit_once('/').expect("database in URL");
        (
            base.to_owned(),
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
