//! TLS to ZooKeeper: [`lock_core::TlsOptions`] as the client library takes them.

use lock_core::{Error, Result};

/// The client's TLS settings: the CA (required by `ZkConfig::with_tls`) and the client
/// certificate, from their PEM files.
pub(crate) fn client_tls(tls: &lock_core::TlsOptions) -> Result<zookeeper_client::TlsOptions> {
    let bad = |err: zookeeper_client::Error| {
        Error::invalid_argument(format!("invalid ZooKeeper TLS settings: {err}"))
    };
    let text = |path: &std::path::Path, what: &str| -> Result<String> {
        let bytes = lock_core::TlsOptions::read(path, what)?;
        String::from_utf8(bytes).map_err(|_| {
            Error::invalid_argument(format!("the TLS {what} {} is not PEM text", path.display()))
        })
    };
    // rustls panics on first use unless it can tell which crypto provider to use; pick
    // ring unless the application installed one already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut options = zookeeper_client::TlsOptions::default();
    if let Some(ca) = &tls.ca_file {
        options = options
            .with_pem_ca(&text(ca, "CA certificate")?)
            .map_err(bad)?;
    }
    if let (Some(cert), Some(key)) = (&tls.client_cert_file, &tls.client_key_file) {
        options = options
            .with_pem_identity(
                &text(cert, "client certificate")?,
                &text(key, "client key")?,
            )
            .map_err(bad)?;
    }
    Ok(options)
}
