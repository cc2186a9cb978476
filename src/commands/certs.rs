//! `ownerguard certs` and `serve --dev`: a CA and a serving certificate
//! signed by it, made with rcgen.

use std::net::IpAddr;
use std::path::Path;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

pub const CA_CERT: &str = "ca.crt";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

/// A CA certificate and a serving certificate and key, in PEM.
#[derive(Debug, Clone)]
pub struct Generated {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("no DNS name or IP address to certify")]
    NoNames,
    #[error("cannot make the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Make a CA, and a serving certificate for `dns` and `ips` valid for
/// `days` days. Both start an hour in the past, so a clock a little behind
/// on the API server's side still accepts them.
///
/// # Errors
///
/// [`CertsError`] when there is no name to certify or rcgen refuses one.
pub fn generate(dns: &[String], ips: &[IpAddr], days: u32) -> Result<Generated, CertsError> {
    if dns.is_empty() && ips.is_empty() {
        return Err(CertsError::NoNames);
    }
    let not_before = OffsetDateTime::now_utc() - Duration::hours(1);
    let not_after = OffsetDateTime::now_utc() + Duration::days(i64::from(days));

    let (ca_cert, issuer) = new_ca("ownerguard CA", not_before, not_after)?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns.to_vec())?;
    params
        .subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params.distinguished_name = DistinguishedName::new();
    let common_name = dns.first().cloned().unwrap_or_else(|| ips[0].to_string());
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, &issuer)?;

    Ok(Generated {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A self-signed CA that signs leaves only (path length 0).
fn new_ca(
    common_name: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<(rcgen::Certificate, Issuer<'static, KeyPair>), CertsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before;
    params.not_after = not_after;
    let certificate = params.self_signed(&key)?;
    Ok((certificate, Issuer::new(params, key)))
}

impl Generated {
    /// The `caBundle` of a webhook configuration: the CA, PEM, base64.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// Write `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`.
    ///
    /// # Errors
    ///
    /// [`CertsError::Write`] when a file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<(), CertsError> {
        let failed = |path: &Path| {
            let path = path.display().to_string();
            move |source| CertsError::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
        for (name, contents) in [(CA_CERT, &self.ca_pem), (TLS_CERT, &self.cert_pem)] {
            let path = dir.join(name);
            std::fs::write(&path, contents).map_err(failed(&path))?;
        }
        let key_path = dir.join(TLS_KEY);
        write_private(&key_path, self.key_pem.as_bytes()).map_err(failed(&key_path))
    }
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, contents)
}

/// Make a client certificate signed by a fresh CA (for `--client-ca`
/// tests and local trials): returns the CA PEM, the client cert and key.
///
/// # Errors
///
/// [`CertsError::Generate`] when rcgen refuses.
pub fn generate_client(common_name: &str, days: u32) -> Result<Generated, CertsError> {
    let now = OffsetDateTime::now_utc();
    let (ca_cert, issuer) = new_ca(
        "ownerguard client CA",
        now - Duration::hours(1),
        now + Duration::days(i64::from(days)),
    )?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.not_after = OffsetDateTime::now_utc() + Duration::days(i64::from(days));
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Generated {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_certificate_covers_the_names_and_days() {
        let generated = generate(
            &["ownerguard.ownerguard.svc".into()],
            &["127.0.0.1".parse().unwrap()],
            30,
        )
        .unwrap();
        let der = rustls::pki_types::CertificateDer::from_pem_slice(generated.cert_pem.as_bytes())
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let names = cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .len();
        assert_eq!(names, 2);
        let days_left = (cert.validity().not_after.timestamp()
            - OffsetDateTime::now_utc().unix_timestamp())
            / 86_400;
        assert!((29..=30).contains(&days_left), "{days_left}");
        assert!(!generated.ca_bundle().is_empty());
    }

    #[test]
    fn no_names_is_refused() {
        assert!(matches!(generate(&[], &[], 30), Err(CertsError::NoNames)));
    }

    use rustls::pki_types::pem::PemObject;
}
