//! Certificates for the TLS test servers, generated here: a CA, a server certificate
//! for `127.0.0.1` and `localhost` signed by it, a client certificate signed by it
//! (common name `postgres`, the test servers' user), and a second, unrelated CA for
//! the wrong-CA checks. Made once per machine into one directory under the system's
//! temporary directory (by a rename, so test processes running side by side never see
//! half of a set) and reused: a test run leaves no more than that directory behind.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The directory of one set of test certificates (PEM files).
#[derive(Debug)]
pub struct TestCerts {
    dir: PathBuf,
}

impl TestCerts {
    /// The CA that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A CA that signed nothing here: a client trusting only it must refuse the servers.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.join("other-ca.pem")
    }

    /// The servers' certificate, for `127.0.0.1` and `localhost`.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// The servers' private key.
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate (common name `postgres`).
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// The client's private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// `url` (with these [`url_settings`](Self::url_settings)) trusting the unrelated
    /// CA instead, for the wrong-CA checks.
    pub fn trusting_other_ca(&self, url: &str) -> String {
        url.replace(
            &self.ca().display().to_string(),
            &self.other_ca().display().to_string(),
        )
    }

    /// The URL settings of a client that trusts the CA and presents the client
    /// certificate: `tls_ca=...&tls_cert=...&tls_key=...`.
    pub fn url_settings(&self) -> String {
        format!(
            "tls_ca={}&tls_cert={}&tls_key={}",
            self.ca().display(),
            self.client_cert().display(),
            self.client_key().display()
        )
    }
}

/// The machine's test certificates, made on first use.
///
/// # Panics
/// If they can be neither found nor written (a test set-up failure).
pub fn test_certs() -> &'static TestCerts {
    static CERTS: OnceLock<TestCerts> = OnceLock::new();
    CERTS.get_or_init(|| {
        let dir = std::env::temp_dir().join("distributed-locks-test-tls-v1");
        if !dir.join("done").exists() {
            write_set(&dir).unwrap_or_else(|err| panic!("test certificates in {dir:?}: {err}"));
        }
        TestCerts { dir }
    })
}

/// Writes a new set beside `dir` and renames it into place; if another process got
/// there first, its set is kept.
fn write_set(dir: &Path) -> Result<(), String> {
    let staging = dir.with_extension(format!(
        "{}.{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&staging).map_err(|e| e.to_string())?;
    let files = generate().map_err(|e| e.to_string())?;
    for (name, text) in files {
        std::fs::write(staging.join(name), text).map_err(|e| e.to_string())?;
    }
    std::fs::write(staging.join("done"), "").map_err(|e| e.to_string())?;
    if std::fs::rename(&staging, dir).is_err() {
        // Another process's set is in place (a rename onto a non-empty directory
        // fails); a half-written one cannot be, as sets arrive whole.
        let _ = std::fs::remove_dir_all(&staging);
        if !dir.join("done").exists() {
            return Err(format!(
                "{dir:?} exists without a whole set of certificates"
            ));
        }
    }
    Ok(())
}

/// The PEM files of one set, by name.
fn generate() -> Result<Vec<(&'static str, String)>, rcgen::Error> {
    let (ca, ca_pem) = authority("distributed-locks test CA")?;
    let (_, other_ca_pem) = authority("unrelated test CA")?;
    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_pem = server.signed_by(&server_key, &ca)?.pem();
    let client_key = KeyPair::generate()?;
    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, "postgres");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_pem = client.signed_by(&client_key, &ca)?.pem();
    Ok(vec![
        ("ca.pem", ca_pem),
        ("other-ca.pem", other_ca_pem),
        ("server.pem", server_pem),
        ("server.key", server_key.serialize_pem()),
        ("client.pem", client_pem),
        ("client.key", client_key.serialize_pem()),
    ])
}

/// A self-signed CA named `name`, as an issuer and as PEM.
fn authority(name: &str) -> Result<(Issuer<'static, KeyPair>, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let pem = params.self_signed(&key)?.pem();
    Ok((Issuer::new(params, key), pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_set_is_there_and_reused() {
        let certs = test_certs();
        for file in [
            certs.ca(),
            certs.other_ca(),
            certs.server_cert(),
            certs.server_key(),
            certs.client_cert(),
            certs.client_key(),
        ] {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.starts_with("-----BEGIN"), "{file:?}");
        }
        assert_ne!(
            std::fs::read(certs.ca()).unwrap(),
            std::fs::read(certs.other_ca()).unwrap()
        );
    }
}
