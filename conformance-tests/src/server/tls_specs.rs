//! The test servers with TLS on and required of every client, using the certificates
//! of [`test_certs`]. Each runs as a local process (these packages are installed in
//! both server modes); the URLs carry the `tls_*` settings of a client that trusts the
//! test CA and presents the client certificate.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::specs::{
    etcd_command_on, mariadb_command_with, postgres_command_with, running_as_root, sh_quote,
    user_ids, zookeeper_command_with,
};
use super::tls::{test_certs, TestCerts};
use super::{Probe, ServerSpec};

/// PostgreSQL that accepts only TLS connections with a client certificate signed by
/// the test CA (`hostssl ... clientcert=verify-ca`, no plain `host` line).
pub const POSTGRES_TLS: ServerSpec = ServerSpec {
    name: "postgres-tls",
    env_url: "LOCK_TEST_POSTGRES_TLS_URL",
    command: postgres_tls_command,
    url: |port| {
        format!(
            "postgres://postgres@127.0.0.1:{port}/postgres?{}",
            test_certs().url_settings()
        )
    },
    ready: Probe::Postgres,
    container: None,
};

fn postgres_tls_command(port: u16, dir: &Path) -> Command {
    let owner = if running_as_root() {
        user_ids("postgres")
    } else {
        None
    };
    let files = server_files(test_certs(), dir, owner);
    let hba = dir.join("pg_hba.conf");
    // A failure here shows up as the server failing to start, with its log.
    let _ = std::fs::write(
        &hba,
        "local all all trust\nhostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n",
    );
    if let Some((uid, gid)) = owner {
        let _ = std::os::unix::fs::chown(&hba, Some(uid), Some(gid));
    }
    let settings = format!(
        "-c fsync=off -c synchronous_commit=on -c max_connections=400 -c ssl=on \
         -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={} -c hba_file={}",
        sh_quote(&files.cert),
        sh_quote(&files.key),
        sh_quote(&files.ca),
        sh_quote(&hba)
    );
    postgres_command_with(port, dir, &settings)
}

/// MariaDB that refuses connections without TLS (`require_secure_transport`).
pub const MARIADB_TLS: ServerSpec = ServerSpec {
    name: "mariadb-tls",
    env_url: "LOCK_TEST_MYSQL_TLS_URL",
    command: mariadb_tls_command,
    url: |port| {
        format!(
            "mysql://root@127.0.0.1:{port}/locktest?{}",
            test_certs().url_settings()
        )
    },
    ready: Probe::MariaDb,
    container: None,
};

fn mariadb_tls_command(port: u16, dir: &Path) -> Command {
    let files = server_files(test_certs(), dir, None);
    let extra = format!(
        "--ssl-ca={} --ssl-cert={} --ssl-key={} --require-secure-transport=ON",
        sh_quote(&files.ca),
        sh_quote(&files.cert),
        sh_quote(&files.key)
    );
    mariadb_command_with(port, dir, &extra)
}

/// A server's copies of the CA, its certificate and its key.
struct ServerFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// Copies the server's files into its own directory, owned by the user it runs as
/// (PostgreSQL refuses a key others can read).
fn server_files(certs: &TestCerts, dir: &Path, owner: Option<(u32, u32)>) -> ServerFiles {
    use std::os::unix::fs::PermissionsExt;
    let files = ServerFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    for (from, to) in [
        (certs.ca(), &files.ca),
        (certs.server_cert(), &files.cert),
        (certs.server_key(), &files.key),
    ] {
        // A failure here shows up as the server failing to start, with its log.
        let _ = std::fs::copy(&from, to);
        let _ = std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600));
        if let Some((uid, gid)) = owner {
            let _ = std::os::unix::fs::chown(to, Some(uid), Some(gid));
        }
    }
    files
}

/// redis-server with only a TLS port, asking clients for a certificate signed by the
/// test CA (`--tls-auth-clients yes`).
pub const REDIS_TLS: ServerSpec = ServerSpec {
    name: "redis-tls",
    env_url: "LOCK_TEST_REDIS_TLS_URL",
    command: redis_tls_command,
    url: |port| format!("rediss://127.0.0.1:{port}?{}", test_certs().url_settings()),
    // A plain PING gets no answer from a TLS port: ready once it accepts connections.
    ready: Probe::Open,
    container: None,
};

fn redis_tls_command(port: u16, dir: &Path) -> Command {
    let files = server_files(test_certs(), dir, None);
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", "0", "--tls-port", &port.to_string()]);
    cmd.args(["--bind", "127.0.0.1", "--tls-auth-clients", "yes"]);
    cmd.arg("--tls-cert-file").arg(&files.cert);
    cmd.arg("--tls-key-file").arg(&files.key);
    cmd.arg("--tls-ca-cert-file").arg(&files.ca);
    cmd.args(["--save", "", "--appendonly", "no", "--daemonize", "no"]);
    cmd.arg("--dir").arg(dir);
    cmd
}

/// etcd serving clients over TLS only, asking them for a certificate signed by the
/// test CA (`--client-cert-auth`).
pub const ETCD_TLS: ServerSpec = ServerSpec {
    name: "etcd-tls",
    env_url: "LOCK_TEST_ETCD_TLS_URL",
    command: etcd_tls_command,
    url: |port| {
        format!(
            "etcd+https://127.0.0.1:{port}?{}",
            test_certs().url_settings()
        )
    },
    // Its health check answers only over TLS: ready once it accepts connections (the
    // tests then wait until it serves requests).
    ready: Probe::Open,
    container: None,
};

fn etcd_tls_command(port: u16, dir: &Path) -> Command {
    let files = server_files(test_certs(), dir, None);
    let mut cmd = etcd_command_on(port, dir, "https");
    cmd.arg("--cert-file").arg(&files.cert);
    cmd.arg("--key-file").arg(&files.key);
    cmd.arg("--trusted-ca-file").arg(&files.ca);
    cmd.arg("--client-cert-auth");
    cmd
}

/// ZooKeeper with only a TLS client port (`secureClientPort`, served by Netty), asking
/// clients for a certificate signed by the test CA (`ssl.clientAuth=need`).
pub const ZOOKEEPER_TLS: ServerSpec = ServerSpec {
    name: "zookeeper-tls",
    env_url: "LOCK_TEST_ZOOKEEPER_TLS_URL",
    command: zookeeper_tls_command,
    url: |port| format!("zk+tls://127.0.0.1:{port}?{}", test_certs().url_settings()),
    // `srvr` gets no answer from a TLS port: ready once it accepts connections (the
    // tests then wait until it serves sessions).
    ready: Probe::Open,
    container: None,
};

fn zookeeper_tls_command(port: u16, dir: &Path) -> Command {
    let files = server_files(test_certs(), dir, None);
    // ZooKeeper's PEM key store is one file: the key, then the certificate.
    let keystore = dir.join("keystore.pem");
    let key_and_cert = [&files.key, &files.cert]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect::<Vec<_>>()
        .join("\n");
    // A failure here shows up as the server failing to start, with its log.
    let _ = std::fs::write(&keystore, key_and_cert);
    let listen = format!(
        "secureClientPort={port}\n\
         secureClientPortAddress=127.0.0.1\n\
         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
         ssl.keyStore.location={}\n\
         ssl.keyStore.type=PEM\n\
         ssl.trustStore.location={}\n\
         ssl.trustStore.type=PEM\n\
         ssl.clientAuth=need\n",
        keystore.display(),
        files.ca.display()
    );
    zookeeper_command_with(dir, &listen)
}
