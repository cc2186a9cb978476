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
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
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

/// A file (or pair) that the server follows: reread on every tick of
/// [`follow`], swapped in only when it changed and is usable.
pub trait Reloads: Send + Sync {
    /// Reload when the files changed. `Ok(true)` when the new contents are
    /// in use.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the new files are unusable; the old contents stay.
    fn reload_if_changed(&self) -> Result<bool, TlsError>;

    /// What was reloaded, for the log.
    fn what(&self) -> String;

    /// What it is, in the log's message (`serving certificate reloaded`).
    fn name(&self) -> &'static str;
}

impl Reloads for ReloadingCertificate {
    fn reload_if_changed(&self) -> Result<bool, TlsError> {
        ReloadingCertificate::reload_if_changed(self)
    }

    fn what(&self) -> String {
        format!(
            "{} (notAfter {})",
            self.cert_path.display(),
            self.not_after()
        )
    }

    fn name(&self) -> &'static str {
        "serving certificate"
    }
}

/// Poll `files` every `interval`, forever, counting each failed reload
/// into `failures` (`ownerguard_tls_reload_failures_total`): a bad file
/// keeps failing at every tick until it is fixed, so the counter's rate
/// says the server is stuck on its old certificate or CA, which the expiry
/// gauge alone would not.
pub async fn follow(files: Vec<Arc<dyn Reloads>>, interval: Duration, failures: Counter) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        for file in &files {
            match file.reload_if_changed() {
                Ok(true) => info!(file = %file.what(), "{} reloaded", file.name()),
                Ok(false) => {}
                Err(error) => {
                    failures.inc();
                    warn!(%error, "{} not reloaded; the previous one stays in use", file.name());
                }
            }
        }
    }
}

/// The CA that signs the API server's client certificate (`--client-ca`),
/// followed like the serving certificate, and the names a client
/// certificate must carry (`--client-name`, as Gatekeeper's
/// `--client-cn-name`): without the pin, any certificate the CA signed
/// would do, and a cluster CA signs many.
pub struct ClientVerifier {
    path: PathBuf,
    names: Vec<String>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    current: RwLock<(Vec<u8>, Arc<dyn ClientCertVerifier>)>,
}

impl std::fmt::Debug for ClientVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientVerifier")
            .field("ca", &self.path)
            .field("names", &self.names)
            .finish()
    }
}

impl ClientVerifier {
    /// Load the CA bundle at `path`; `names` empty accepts any name.
    ///
    /// # Errors
    ///
    /// [`TlsError`] when the file cannot be read or holds no usable CA.
    pub fn load(path: &Path, names: Vec<String>) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pem = read(path)?;
        let verifier = webpki_verifier(path, &pem, provider.clone())?;
        Ok(Self {
            path: path.to_path_buf(),
            names,
            provider,
            current: RwLock::new((pem, verifier)),
        })
    }

    fn inner(&self) -> Result<Arc<dyn ClientCertVerifier>, rustls::Error> {
        self.current
            .read()
            .map(|current| current.1.clone())
            .map_err(|_| rustls::Error::General("client CA state poisoned".into()))
    }

    /// Whether the leaf's subject common name or one of its DNS names is
    /// one of the pinned names.
    fn name_pinned(&self, end_entity: &CertificateDer<'_>) -> bool {
        if self.names.is_empty() {
            return true;
        }
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(end_entity) else {
            return false;
        };
        let pinned = |name: &str| self.names.iter().any(|n| n == name);
        let common_name = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .any(pinned);
        let dns_name = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .is_some_and(|san| {
                san.value.general_names.iter().any(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => pinned(dns),
                    _ => false,
                })
            });
        common_name || dns_name
    }
}

impl Reloads for ClientVerifier {
    fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let pem = read(&self.path)?;
        {
            let current = self.current.read().map_err(|_| poisoned(&self.path))?;
            if current.0 == pem {
                return Ok(false);
            }
        }
        let verifier = webpki_verifier(&self.path, &pem, self.provider.clone())?;
        *self.current.write().map_err(|_| poisoned(&self.path))? = (pem, verifier);
        Ok(true)
    }

    fn what(&self) -> String {
        self.path.display().to_string()
    }

    fn name(&self) -> &'static str {
        "client CA"
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    // No hints: they would have to follow the CA, and a client offered
    // none sends the certificate it has (Go's crypto/tls, which the API
    // server uses, takes an empty list as "any CA"). The chain is then
    // judged against the current CA below.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner()?
            .verify_client_cert(end_entity, intermediates, now)?;
        if !self.name_pinned(end_entity) {
            warn!(
                pinned = ?self.names,
                "client certificate refused: signed by the client CA but named otherwise"
            );
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner()?.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner()
            .map(|inner| inner.supported_verify_schemes())
            .unwrap_or_default()
    }
}

fn webpki_verifier(
    path: &Path,
    pem: &[u8],
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let shown = path.display().to_string();
    let client_ca = |message: String| TlsError::ClientCa {
        path: shown.clone(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| client_ca(e.to_string()))?;
        roots.add(cert).map_err(|e| client_ca(e.to_string()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| client_ca(e.to_string()))
}

/// The rustls server configuration: TLS 1.2 and 1.3, ALPN `h2` and
/// `http/1.1`, the reloading certificate, and client certificates required
/// when `client` is given.
///
/// # Errors
///
/// [`TlsError`] when the protocol versions cannot be set.
pub fn server_config(
    certificate: Arc<ReloadingCertificate>,
    client: Option<Arc<ClientVerifier>>,
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Pem {
            path: String::new(),
            what: e.to_string(),
        })?;
    let builder = match client {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut config = builder.with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate and key in PEM, and the fresh CA's that signed them.
    struct Pem {
        ca: String,
        cert: String,
        key: String,
    }

    /// A certificate named `common_name` and the DNS names `dns`, valid
    /// for `days` days from an hour ago. Made here with rcgen, not by
    /// `commands::certs`: `commands` sits above `serve`.
    fn certificate(common_name: &str, dns: &[&str], days: i64) -> Pem {
        use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa};
        let now = time::OffsetDateTime::now_utc();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.distinguished_name = DistinguishedName::new();
        ca.distinguished_name.push(DnType::CommonName, "test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = rcgen::Issuer::new(ca, ca_key);

        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(dns.iter().map(|name| name.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(days);
        let cert = params.signed_by(&key, &issuer).unwrap();
        Pem {
            ca: ca_pem,
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    fn write_pair(dir: &Path, days: i64) -> (PathBuf, PathBuf) {
        let generated = certificate("localhost", &["localhost"], days);
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &generated.cert).unwrap();
        std::fs::write(&key, &generated.key).unwrap();
        (cert, key)
    }

    #[tokio::test]
    async fn a_failed_reload_is_counted_at_every_tick_and_the_old_certificate_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), 30);
        let certificate = Arc::new(ReloadingCertificate::load(&cert, &key).unwrap());
        let first = certificate.not_after();
        let failures = Counter::default();
        let watch = tokio::spawn(follow(
            vec![certificate.clone() as Arc<dyn Reloads>],
            Duration::from_millis(10),
            failures.clone(),
        ));

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

    #[test]
    fn a_pinned_name_is_the_common_name_or_a_dns_name() {
        let dir = tempfile::tempdir().unwrap();
        let client = certificate("kube-apiserver", &[], 30);
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, &client.ca).unwrap();
        let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        // A certificate whose only name is the DNS name localhost.
        let by_dns = certificate("localhost", &["localhost"], 30);
        let verifier = |names: &[&str]| {
            ClientVerifier::load(&ca, names.iter().map(|n| n.to_string()).collect()).unwrap()
        };

        assert!(verifier(&[]).name_pinned(&der(&client.cert)));
        assert!(verifier(&["kube-apiserver"]).name_pinned(&der(&client.cert)));
        assert!(!verifier(&["kube-apiserve"]).name_pinned(&der(&client.cert)));
        assert!(!verifier(&["KUBE-APISERVER"]).name_pinned(&der(&client.cert)));
        assert!(verifier(&["other", "localhost"]).name_pinned(&der(&by_dns.cert)));
        assert!(!verifier(&["kube-apiserver"]).name_pinned(&der(&by_dns.cert)));
        assert!(!verifier(&["kube-apiserver"]).name_pinned(&CertificateDer::from(vec![0u8; 8])));
    }
}
