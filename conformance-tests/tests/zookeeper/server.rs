//! A ZooKeeper server for the tests: Debian's jar run directly (its scripts hard-code
//! /etc and /var paths), standalone, on a free loopback port with a temporary data dir.

use std::path::Path;
use std::process::Command;

use conformance_tests::server::ServerSpec;

/// `LOCK_TEST_ZOOKEEPER_URL=zk://host:port` uses a running server instead.
pub const ZOOKEEPER: ServerSpec = ServerSpec {
    name: "zookeeper",
    env_url: "LOCK_TEST_ZOOKEEPER_URL",
    command,
    url: |port| format!("zk://127.0.0.1:{port}"),
};

/// A short tick lets sessions be as short as 400 ms, so expiry tests run fast; the
/// container reaper runs every second instead of every minute.
fn command(port: u16, dir: &Path) -> Command {
    let data = dir.join("data");
    let config = dir.join("zoo.cfg");
    let text = format!(
        "tickTime=200\n\
         minSessionTimeout=400\n\
         maxSessionTimeout=60000\n\
         initLimit=10\n\
         syncLimit=5\n\
         dataDir={}\n\
         clientPort={port}\n\
         clientPortAddress=127.0.0.1\n\
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
    for jar in [
        "/usr/share/java/slf4j-log4j12.jar",
        "/usr/share/java/log4j-1.2.jar",
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
pub async fn wait_serving(port: u16, limit: std::time::Duration) -> Result<(), String> {
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
