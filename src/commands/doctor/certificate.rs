//! The serving certificate: where the pods read it from, how long it has
//! left, and whether each caBundle verifies it for the Service's name.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use k8s_openapi::api::apps::v1::Deployment;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::serve::tls::certificate_not_after;

use super::webhooks::WebhookView;
use super::workload::{pod_spec, server_view};
use super::{Check, ServingCertificate, Verdict, line};

/// The Secret and key behind the server's `--tls-cert` file: the volume
/// mounted at the longest prefix of that path, and the key that volume
/// puts at the remaining path. ([`super::gather`] then reads the Secret.)
pub fn serving_certificate_source(deployment: &Deployment) -> ServingCertificate {
    let unusable = |problem: String| ServingCertificate {
        problem: Some(problem),
        ..ServingCertificate::default()
    };
    let Ok(view) = server_view(deployment) else {
        return unusable(
            "cannot tell which Secret the server reads, since it does not run ownerguard serve (see the server check)".into(),
        );
    };
    let Some(cert_path) = view.flags.tls_cert.as_deref() else {
        return unusable("the server runs without --tls-cert".into());
    };
    let mount = view
        .container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| {
            let dir = m.mount_path.trim_end_matches('/');
            cert_path
                .strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/') || rest.is_empty())
        })
        .max_by_key(|m| m.mount_path.len());
    let Some(mount) = mount else {
        return unusable(format!(
            "--tls-cert {cert_path} is on no mounted volume: the certificate is whatever the image holds"
        ));
    };
    let relative = cert_path[mount.mount_path.trim_end_matches('/').len()..]
        .trim_start_matches('/')
        .to_string();
    let relative = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
        Some(sub_path) if relative.is_empty() => sub_path.to_string(),
        Some(sub_path) => format!("{sub_path}/{relative}"),
        None => relative,
    };
    let volume = pod_spec(deployment)
        .and_then(|s| s.volumes.as_ref())
        .and_then(|volumes| volumes.iter().find(|v| v.name == mount.name));
    let Some(volume) = volume else {
        return unusable(format!(
            "volume {} mounted at {} is not in the pod template",
            mount.name, mount.mount_path
        ));
    };
    let key_of = |items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>| match items {
        Some(items) => items
            .iter()
            .find(|item| item.path == relative)
            .map(|item| item.key.clone()),
        None => Some(relative.clone()),
    };
    let found = if let Some(secret) = &volume.secret {
        secret
            .secret_name
            .clone()
            .zip(key_of(secret.items.as_ref()))
    } else if let Some(projected) = &volume.projected {
        projected
            .sources
            .iter()
            .flatten()
            .filter_map(|source| source.secret.as_ref())
            .find_map(|secret| Some(secret.name.clone()).zip(key_of(secret.items.as_ref())))
    } else {
        None
    };
    let Some((secret, key)) = found else {
        return unusable(format!(
            "--tls-cert {cert_path} is in volume {}, which is not a Secret holding that file",
            volume.name
        ));
    };
    let problem = mount.sub_path.as_deref().filter(|s| !s.is_empty()).map(|_| {
        format!(
            "volume {} is mounted with subPath: kubelet never updates such a mount, so a renewed certificate never reaches the server",
            mount.name
        )
    });
    ServingCertificate {
        secret,
        key,
        problem,
        ..ServingCertificate::default()
    }
}

/// The chain a TLS server at `address` presents for `host` (SNI), read
/// by a handshake that trusts nothing and verifies nothing: the chain is
/// what the caBundles are then judged against, as the API server judges
/// it. A server that then wants a client certificate (`--client-ca`)
/// aborts the handshake after sending its own: the chain is still read.
///
/// # Errors
///
/// When nothing answers at `address` with a certificate within `timeout`.
pub async fn served_chain(
    address: &str,
    host: &str,
    timeout: Duration,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let capture = Arc::new(Capture {
        chain: std::sync::Mutex::new(Vec::new()),
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(capture.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    let connect = async {
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| e.to_string())?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let outcome = tokio::time::timeout(timeout, connect)
        .await
        .unwrap_or_else(|_| Err(format!("no TLS answer within {}s", timeout.as_secs())));
    let chain = std::mem::take(&mut *capture.chain.lock().map_err(|e| e.to_string())?);
    match (chain.is_empty(), outcome) {
        (false, _) => Ok(chain),
        (true, Err(e)) => Err(e),
        (true, Ok(())) => Err("the server presented no certificate".into()),
    }
}

/// A verifier that keeps the chain it is shown and accepts it.
#[derive(Debug)]
struct Capture {
    chain: std::sync::Mutex<Vec<CertificateDer<'static>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if let Ok(mut chain) = self.chain.lock() {
            *chain = std::iter::once(end_entity)
                .chain(intermediates)
                .map(|c| c.clone().into_owned())
                .collect();
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

pub(super) fn check_serving_certificate(
    serving: &ServingCertificate,
    chain: &[CertificateDer<'static>],
    namespace: &str,
    min_days: i64,
    now: i64,
) -> Check {
    let subject = "serving certificate";
    if let Some(problem) = &serving.problem {
        return line(Verdict::Fail, subject, problem.clone());
    }
    let source = match &serving.served {
        Some(address) => format!("the certificate served at {address}"),
        None => format!("Secret {namespace}/{} ({})", serving.secret, serving.key),
    };
    match chain.first().and_then(|leaf| certificate_not_after(leaf)) {
        // Neither served to doctor nor readable: not judged here, and said
        // so; the probe's round trip through the API server proves it.
        None if serving.unread.is_some() => line(
            Verdict::Warn,
            subject,
            format!(
                "not judged: {}; run doctor in the cluster, or with --serving-address after \
                 `kubectl port-forward`, or --probe (the API server's own handshake)",
                serving.unread.as_deref().unwrap_or_default()
            ),
        ),
        None => line(
            Verdict::Fail,
            subject,
            format!("no certificate in {source}"),
        ),
        Some(not_after) => {
            let days = (not_after - now).div_euclid(86_400);
            if days < min_days {
                line(
                    Verdict::Fail,
                    subject,
                    format!(
                        "{days} days left in {source}: renew it (cert-manager does; the chart renews its own at upgrade; or the certs command)"
                    ),
                )
            } else {
                line(
                    Verdict::Ok,
                    subject,
                    format!("{days} days left in {source}"),
                )
            }
        }
    }
}

/// The host the API server calls, whose name the certificate must carry.
pub(super) fn server_host(config: &WebhookClientConfig) -> Option<String> {
    if let Some(service) = &config.service {
        return Some(format!("{}.{}.svc", service.name, service.namespace));
    }
    let url = config.url.as_deref()?;
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    Some(
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
            .to_string(),
    )
}

pub(super) fn check_ca_bundle(
    webhook: &WebhookView<'_>,
    chain: &[CertificateDer<'static>],
    now: i64,
) -> Check {
    let subject = format!("caBundle of {}", webhook.label());
    let Some(bundle) = webhook
        .client_config
        .ca_bundle
        .as_ref()
        .filter(|b| !b.0.is_empty())
    else {
        return line(
            Verdict::Fail,
            subject,
            "empty: the API server cannot verify the webhook (is cert-manager's CA injector running?)",
        );
    };
    let Some(host) = server_host(webhook.client_config) else {
        return line(
            Verdict::Fail,
            subject,
            "the webhook has neither a service nor an https url",
        );
    };
    let Some((leaf, intermediates)) = chain.split_first() else {
        return line(
            Verdict::Warn,
            subject,
            "not judged: no serving certificate could be read (see the serving certificate check)",
        );
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bundle.0).filter_map(Result::ok) {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return line(Verdict::Fail, subject, "holds no PEM certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider,
    )
    .build()
    {
        Ok(verifier) => verifier,
        Err(e) => return line(Verdict::Fail, subject, format!("unusable: {e}")),
    };
    let Ok(server_name) = ServerName::try_from(host.clone()) else {
        return line(
            Verdict::Fail,
            subject,
            format!("'{host}' is not a DNS name"),
        );
    };
    let at =
        UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap_or_default()));
    use rustls::client::danger::ServerCertVerifier;
    match verifier.verify_server_cert(leaf, intermediates, &server_name, &[], at) {
        Ok(_) => line(
            Verdict::Ok,
            subject,
            format!("verifies the serving certificate for {host}"),
        ),
        Err(e) => line(
            Verdict::Fail,
            subject,
            format!("does not verify the serving certificate for {host}: {e}"),
        ),
    }
}
