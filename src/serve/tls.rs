//! The serving certificate: loaded from PEM files, swapped in place when
//! the files change, with no restart and no dropped connection.
//!
//! rustls asks a [`ResolvesServerCert`] for the key on every handshake;
//! [`ReloadingCertificate`] answers with the current one. A change is picked
//! up by polling the files' contents, which also works for the symlink swap
//! kubelet does when a mounted Secret changes (inotify on the file would
//! miss it). A half-written or mismatched pair is refused and the previous
//! certificate stays in use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

/// Why a certificate, key or CA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM block of the expected type.
    #[error("{path}: {what}")]
    Pem { path: String, what: String },
    /// The key does not match the certificate, or is of an unsupported type.
    #[error("{cert} and {key} do not form a usable pair: {source}")]
    Pair {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    /// The client CA cannot verify clients.
    #[error("client CA {path}: {message}")]
    ClientCa { path: String, message: String },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The loaded pair, with what it was loaded from.
struct Loaded {
    key: Arc<CertifiedKey>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    not_after: i64,
}

/// A serving certificate that follows its files.
pub struct ReloadingCertificate {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Loaded>,
}

impl std::fmt::Debug for ReloadingCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCertificate")
            .field("cert", &self.cert_path)
            .field("key", &self.key_path)
            .finish()
    }
}

impl ReloadingCertificate {
    /// Load `cert` (a PEM chain, leaf first) and `key` (PKCS#8, PKCS#1 or
    /// SEC1 PEM).
    ///
    /// # Errors
    ///
    /// [`TlsError`] when a file cannot be read or parsed, or the key does
    /// not match the certificate.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let loaded = load_pair(cert, key, read(cert)?, read(key)?)?;
        Ok(Self {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            current: RwLock::new(loaded),
        })
    }

    /// The certificate's `notAfter`, in Unix seconds.
    pub fn not_after(&self) -> i64 {
        self.current.read().map(|c| c.not_after).unwrap_or_default()
    }

    /// Reload when the files changed. `Ok(true)` when a new pair is in use.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the new files are unusable; the old pair stays.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let (cert_pem, key_pem) = (read(&self.cert_path)?, read(&self.key_path)?);
        {
            let current = self.current.read().map_err(|_| poisoned(&self.cert_path))?;
            if current.cert_pem == cert_pem && current.key_pem == key_pem {
                return Ok(false);
            }
        }
        let loaded = load_pair(&self.cert_path, &self.key_path, cert_pem, key_pem)?;
        *self
            .current
            .write()
            .map_err(|_| poisoned(&self.cert_path))? = loaded;
        Ok(true)
    }

    /// Poll the files every `interval`, forever, counting each failed
    /// reload into `failures` (`ownerguard_tls_reload_failures_total`): a
    /// bad pair keeps failing at every tick until it is fixed, so the
    /// counter's rate says the server is stuck on its old certificate,
    /// which the expiry gauge alone would not.
    pub async fn watch(self: Arc<Self>, interval: Duration, failures: Counter) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.reload_if_changed() {
                Ok(true) => {
                    info!(cert = %self.cert_path.display(), not_after = self.not_after(), "serving certificate reloaded");
                }
                Ok(false) => {}
                Err(error) => {
                    failures.inc();
                    warn!(%error, "serving certificate not reloaded; the previous one stays in use")
                }
            }
        }
    }
}

fn poisoned(path: &Path) -> TlsError {
    TlsError::Pem {
        path: path.display().to_string(),
        what: "certificate state poisoned".into(),
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|current| current.key.clone())
    }
}

fn load_pair(
    cert_path: &Path,
    key_path: &Path,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
) -> Result<Loaded, TlsError> {
    let shown = |p: &Path| p.display().to_string();
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: shown(cert_path),
            what: format!("not a PEM certificate chain: {e}"),
        })?;
    let Some(leaf) = chain.first() else {
        return Err(TlsError::Pem {
            path: shown(cert_path),
            what: "no CERTIFICATE block".into(),
        });
    };
    let not_after = certificate_not_after(leaf).ok_or_else(|| TlsError::Pem {
        path: shown(cert_path),
        what: "the certificate does not parse as X.509".into(),
    })?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        path: shown(key_path),
        what: format!("no usable private key: {e}"),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain, key, &provider).map_err(|source| TlsError::Pair {
            cert: shown(cert_path),
            key: shown(key_path),
            source,
        })?;
    Ok(Loaded {
        key: Arc::new(certified),
        cert_pem,
        key_pem,
        not_after,
    })
}

/// `notAfter` of a DER certificate, in Unix seconds.
pub fn certificate_not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The rustls server configuration: TLS 1.2 and 1.3, ALPN `h2` and
/// `http/1.1`, the reloading certificate, and client certificates required
/// when `client_ca` is given.
///
/// # Errors
///
/// [`TlsError`] when the client CA cannot be read or used.
pub fn server_config(
    certificate: Arc<ReloadingCertificate>,
    client_ca: Option<&Path>,
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Pem {
            path: String::new(),
            what: e.to_string(),
        })?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let shown = path.display().to_string();
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&read(path)?) {
                let cert = cert.map_err(|e| TlsError::ClientCa {
                    path: shown.clone(),
                    message: e.to_string(),
                })?;
                roots.add(cert).map_err(|e| TlsError::ClientCa {
                    path: shown.clone(),
                    message: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::ClientCa {
                    path: shown,
                    message: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, days: u32) -> (PathBuf, PathBuf) {
        let generated = crate::commands::certs::generate(&["localhost".into()], &[], days).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &generated.cert_pem).unwrap();
        std::fs::write(&key, &generated.key_pem).unwrap();
        (cert, key)
    }

    #[tokio::test]
    async fn a_failed_reload_is_counted_at_every_tick_and_the_old_certificate_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), 30);
        let certificate = Arc::new(ReloadingCertificate::load(&cert, &key).unwrap());
        let first = certificate.not_after();
        let failures = Counter::default();
        let watch = tokio::spawn(
            certificate
                .clone()
                .watch(Duration::from_millis(10), failures.clone()),
        );

        // A half-written certificate: refused at each tick, counted each time.
        std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let counted = failures.get();
        assert!(counted >= 3, "{counted} failures counted");
        assert_eq!(certificate.not_after(), first, "the old certificate stays");

        // A good pair again: reloaded, and the counter stops.
        write_pair(dir.path(), 90);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            certificate.not_after() > first,
            "the new certificate is in use"
        );
        let after_fix = failures.get();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            failures.get(),
            after_fix,
            "no failure once the files are good"
        );
        watch.abort();
    }
}
