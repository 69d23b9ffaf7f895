//! The servers the backends are tested against, as Debian packages them: each one
//! started on a free loopback port with its data in a temporary directory. Tests and
//! benchmarks start them with [`TestServer::start`](super::TestServer::start); each
//! `env_url` names the variable that points at a running server instead.

use std::path::Path;
use std::process::Command;

use super::{free_port, ContainerSpec, Probe, ServerSpec};

/// No arguments: the image's entry point knows how to run its server.
fn no_args(_host_port: u16) -> Vec<String> {
    Vec::new()
}

/// redis-server without persistence. `LOCK_TEST_REDIS_URL` uses a running server.
pub const REDIS: ServerSpec = ServerSpec {
    name: "redis",
    env_url: "LOCK_TEST_REDIS_URL",
    command: redis_command,
    url: |port| format!("redis://127.0.0.1:{port}"),
    ready: Probe::Redis,
    container: Some(ContainerSpec {
        image: "redis",
        port: 6379,
        args: no_args,
    }),
};

fn redis_command(port: u16, dir: &Path) -> Command {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
    cmd.args(["--save", "", "--appendonly", "no", "--daemonize", "no"]);
    cmd.arg("--dir").arg(dir);
    cmd
}

/// etcd. `LOCK_TEST_ETCD_URL` uses a running server.
pub const ETCD: ServerSpec = ServerSpec {
    name: "etcd",
    env_url: "LOCK_TEST_ETCD_URL",
    command: etcd_command,
    url: |port| format!("etcd://127.0.0.1:{port}"),
    ready: Probe::Etcd,
    // The entry point advertises the host port it is published on.
    container: Some(ContainerSpec {
        image: "etcd",
        port: 2379,
        args: |host_port| vec![host_port.to_string()],
    }),
};

/// etcd 3.4 with every URL moved to loopback: moving only the client port would leave
/// the peer port on its default 2380, shared with any other etcd on the machine.
fn etcd_command(port: u16, dir: &Path) -> Command {
    etcd_command_on(port, dir, "http")
}

/// [`ETCD`]'s command with clients served over `scheme` (`http` or `https`).
pub(super) fn etcd_command_on(port: u16, dir: &Path, scheme: &str) -> Command {
    let peer = free_port().expect("a free peer port");
    let client_url = format!("{scheme}://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut cmd = Command::new("etcd");
    cmd.arg("--data-dir").arg(dir.join("data"));
    cmd.args([
        "--name",
        "conformance",
        "--logger",
        "zap",
        "--log-level",
        "warn",
    ]);
    cmd.args(["--listen-client-urls", &client_url]);
    cmd.args(["--advertise-client-urls", &client_url]);
    cmd.args(["--listen-peer-urls", &peer_url]);
    cmd.args(["--initial-advertise-peer-urls", &peer_url]);
    cmd.args(["--initial-cluster", &format!("conformance={peer_url}")]);
    cmd
}

/// `LOCK_TEST_ZOOKEEPER_URL=zk://host:port` uses a running server instead.
pub const ZOOKEEPER: ServerSpec = ServerSpec {
    name: "zookeeper",
    env_url: "LOCK_TEST_ZOOKEEPER_URL",
    command,
    url: |port| format!("zk://127.0.0.1:{port}"),
    ready: Probe::ZooKeeper,
    container: Some(ContainerSpec {
        image: "zookeeper",
        port: 2181,
        args: no_args,
    }),
};

/// A short tick lets sessions be as short as 400 ms, so expiry tests run fast; the
/// container reaper runs every second instead of every minute.
fn command(port: u16, dir: &Path) -> Command {
    zookeeper_command_with(
        dir,
        &format!("clientPort={port}\nclientPortAddress=127.0.0.1\n"),
    )
}

/// [`ZOOKEEPER`]'s command with `listen` (the lines that say where and how clients
/// connect) in its configuration.
pub(super) fn zookeeper_command_with(dir: &Path, listen: &str) -> Command {
    let data = dir.join("data");
    let config = dir.join("zoo.cfg");
    let text = format!(
        "tickTime=200\n\
         minSessionTimeout=400\n\
         maxSessionTimeout=60000\n\
         initLimit=10\n\
         syncLimit=5\n\
         dataDir={}\n\
         {listen}\
         maxClientCnxns=0\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,ruok\n",
        data.display()
    );
    // A failure here shows up as the server failing to start, with its log.
    let _ = std::fs::create_dir_all(&data);
    let _ = std::fs::write(&config, text);
    let mut classpath = vec!["/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar"];
    // Logging goes to stdout (the harness's log file) where log4j is installed.
    // Netty serves TLS clients (`serverCnxnFactory` in the TLS server's configuration).
    for jar in [
        "/usr/share/java/slf4j-log4j12.jar",
        "/usr/share/java/log4j-1.2.jar",
        "/usr/share/java/netty-buffer.jar",
        "/usr/share/java/netty-codec.jar",
        "/usr/share/java/netty-common.jar",
        "/usr/share/java/netty-handler.jar",
        "/usr/share/java/netty-resolver.jar",
        "/usr/share/java/netty-transport.jar",
        "/usr/share/java/netty-transport-native-unix-common.jar",
    ] {
        if Path::new(jar).exists() {
            classpath.push(jar);
        }
    }
    let mut cmd = Command::new("java");
    cmd.args([
        // Start fast and stay small: this is a test server on a shared 2-core machine.
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dzookeeper.root.logger=INFO,CONSOLE",
        "-Dznode.container.checkIntervalMs=1000",
        "-cp",
        &classpath.join(":"),
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    ])
    .arg(&config)
    .current_dir(dir);
    cmd
}

/// Waits until the server on `port` serves requests, not just accepts connections: a
/// session asked for before then waits out a whole connection timeout. Asks `srvr`
/// (allowed in the config above) until it reports a mode.
pub async fn zookeeper_serving(port: u16, limit: std::time::Duration) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let mut reply = String::new();
            if stream.write_all(b"srvr").await.is_ok()
                && stream.read_to_string(&mut reply).await.is_ok()
                && reply.contains("Mode:")
            {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "zookeeper on port {port} not serving within {limit:?}"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

pub(super) fn running_as_root() -> bool {
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
pub(super) fn user_ids(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.first() == Some(&user))
            .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
    })
}

pub(super) fn sh_quote(p: &Path) -> String {
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
    ready: Probe::Postgres,
    container: Some(ContainerSpec {
        image: "postgres",
        port: 5432,
        args: no_args,
    }),
};

/// PostgreSQL as [`POSTGRES`], but with the server's default durability (every commit
/// flushed and synced), for benchmarks that must pay what production pays.
pub const POSTGRES_DURABLE: ServerSpec = ServerSpec {
    command: |port, dir| postgres_command_with(port, dir, "-c max_connections=400"),
    ..POSTGRES
};

/// Tests need no durability against a power loss (a test server never outlives its
/// test), only against a kill of the server: every commit is written to the OS before
/// it is acknowledged, never synced.
fn postgres_command(port: u16, dir: &Path) -> Command {
    postgres_command_with(
        port,
        dir,
        "-c fsync=off -c synchronous_commit=on -c full_page_writes=off -c max_connections=400",
    )
}

pub(super) fn postgres_command_with(port: u16, dir: &Path, settings: &str) -> Command {
    let bin = pg_bindir();
    let data = dir.join("data");
    let (d, q) = (sh_quote(&data), sh_quote(dir));
    let script = format!(
        "[ -f {d}/PG_VERSION ] || {bin}/initdb -D {d} -A trust -U postgres -N >/dev/null || exit 1; \
         exec {bin}/postgres -D {d} -p {port} -k {q} -c listen_addresses=127.0.0.1 {settings}"
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
    ready: Probe::MariaDb,
    container: Some(ContainerSpec {
        image: "mariadb",
        port: 3306,
        args: no_args,
    }),
};

fn mariadb_command(port: u16, dir: &Path) -> Command {
    mariadb_command_with(port, dir, "")
}

/// [`MARIADB`]'s command with `extra` options for `mariadbd`.
pub(super) fn mariadb_command_with(port: u16, dir: &Path, extra: &str) -> Command {
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
         --innodb-flush-log-at-trx-commit=2 --max-connections=500 {extra}"
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]);
    cmd
}
