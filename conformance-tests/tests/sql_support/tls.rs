//! The suite over TLS against a server that requires it, and what a client gets when
//! its TLS is missing or trusts the wrong CA: a clear error within its connect
//! timeout, never a hang. (The history checker runs over plain connections: what it
//! checks does not depend on the transport.)

use std::time::Duration;

use conformance_tests::server::tls::test_certs;
use conformance_tests::server::{ServerSpec, TestServer};
use lock_sql::{SqlBackend, SqlConfig, Strategy};

use super::{run_transport_cases, servers, Sql};

/// How long a refused client may take to be told: its connect timeout and slack.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const SLACK: Duration = Duration::from_secs(10);

/// The suite with leases over TLS (the client presents the test client certificate
/// and checks the server's), then the refusals.
pub async fn tls_suite(spec: &ServerSpec) {
    let server = TestServer::start(spec)
        .await
        .unwrap_or_else(|err| panic!("start {}: {err}", spec.name));
    let url = server.url();
    servers::wait_until_ready(&drivers_own_keys(&url)).await;
    let dialect = url.split(':').next().unwrap_or_default().to_owned();
    if dialect == "mysql" {
        // PostgreSQL asks for the client certificate in its pg_hba.conf; MariaDB per
        // user: without it, a client that dropped its certificate would still pass.
        require_client_certificate(&drivers_own_keys(&url)).await;
    }
    let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let sql = Sql::new(&url, Strategy::Lease, &prefix).labelled(format!("{dialect}+tls"));
    run_transport_cases(std::sync::Arc::new(sql), 60).await;

    let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base);
    let plain = match dialect.as_str() {
        "postgres" => format!("{base}?sslmode=disable"),
        _ => format!("{base}?ssl-mode=DISABLED"),
    };
    let err = refused(&plain).await;
    println!("{dialect}+tls: a client without TLS is refused: {err}");

    let without_certificate = format!("{base}?tls_ca={}", test_certs().ca().display());
    let err = refused(&without_certificate).await;
    println!("{dialect}+tls: a client without a certificate is refused: {err}");

    let wrong_ca = test_certs().trusting_other_ca(&url);
    let err = refused(&wrong_ca).await;
    println!("{dialect}+tls: a client trusting another CA is refused: {err}");
    assert!(
        err.to_lowercase().contains("certificate"),
        "a wrong CA should be named as a certificate error: {err}"
    );
}

/// Makes the user of `url` (the driver's own TLS keys) present a certificate of the CA.
async fn require_client_certificate(url: &str) {
    use lock_sql::sqlx::{self, Connection as _};
    let mut conn = sqlx::AnyConnection::connect(url)
        .await
        .expect("a TLS connection with the client certificate");
    sqlx::raw_sql("ALTER USER CURRENT_USER() REQUIRE X509")
        .execute(&mut conn)
        .await
        .expect("the test user requires a client certificate");
    conn.close().await.expect("close");
}

/// Connects to `url` and expects a refusal within the connect timeout and slack.
async fn refused(url: &str) -> String {
    let options = SqlConfig::from_url(url)
        .expect("valid settings")
        .with_connect_timeout(CONNECT_TIMEOUT);
    let started = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(CONNECT_TIMEOUT + SLACK, SqlBackend::connect(options))
        .await
        .unwrap_or_else(|_| panic!("{url}: no answer within {:?}", CONNECT_TIMEOUT + SLACK));
    let err = match outcome {
        Ok(_) => panic!("{url}: connected, but the server requires TLS with the test CA"),
        Err(err) => err,
    };
    assert!(
        started.elapsed() < CONNECT_TIMEOUT + SLACK,
        "{url}: refused only after {:?}",
        started.elapsed()
    );
    err.to_string()
}

/// `url` with the `tls_*` settings written as the driver's own keys, for the
/// readiness check, which talks to sqlx directly.
fn drivers_own_keys(url: &str) -> String {
    let keys: [(&str, &str); 3] = if url.starts_with("postgres") {
        [
            ("tls_ca=", "sslmode=verify-full&sslrootcert="),
            ("tls_cert=", "sslcert="),
            ("tls_key=", "sslkey="),
        ]
    } else {
        [
            ("tls_ca=", "ssl-mode=VERIFY_IDENTITY&ssl-ca="),
            ("tls_cert=", "ssl-cert="),
            ("tls_key=", "ssl-key="),
        ]
    };
    keys.iter().fold(url.to_owned(), |url, (ours, theirs)| {
        url.replace(ours, theirs)
    })
}
