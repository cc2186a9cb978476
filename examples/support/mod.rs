//! What the bench clients share (examples/review_load.rs, abuse.rs,
//! soak.rs include it by path): an HTTP/1.1 keep-alive client over rustls
//! as the API server's webhook client is (ALPN http/1.1 only, TCP_NODELAY,
//! one request at a time per connection), and percentiles.
//!
//! Only public crates, no module of ownerguard.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A client configuration trusting the PEM CAs in `ca_pem`, offering
/// http/1.1 only and never resuming a TLS session, as kube-apiserver's
/// webhook client (Go's crypto/tls with no ClientSessionCache: every
/// handshake is a full one, and shows the certificate served now).
pub fn tls_client(ca_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(cert.map_err(|e| format!("CA: {e}"))?)
            .map_err(|e| format!("CA: {e}"))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// One keep-alive connection, ready for requests.
pub struct Connection {
    pub sender: SendRequest<Full<Bytes>>,
    /// The first bytes of the server's leaf certificate signature: tells
    /// certificates apart (a rotation) without parsing them.
    pub certificate: Vec<u8>,
}

/// Connect to `addr`, handshake TLS for `server_name`, then HTTP/1.1.
pub async fn connect(
    addr: &str,
    server_name: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Connection, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let stream = TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.as_ref()[leaf.len().saturating_sub(32)..].to_vec())
        .unwrap_or_default();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
    tokio::spawn(connection);
    Ok(Connection {
        sender,
        certificate,
    })
}

/// The answer to one review: status and body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// POST `body` to `path_and_query` on `connection` (Host `host`).
pub async fn post(
    connection: &mut Connection,
    host: &str,
    path_and_query: &str,
    body: Bytes,
) -> Result<Answer, String> {
    post_with(connection, host, path_and_query, body, None).await
}

/// [`post`] with a W3C `traceparent` header, when given.
pub async fn post_with(
    connection: &mut Connection,
    host: &str,
    path_and_query: &str,
    body: Bytes,
    traceparent: Option<String>,
) -> Result<Answer, String> {
    connection
        .sender
        .ready()
        .await
        .map_err(|e| format!("connection: {e}"))?;
    let mut request = hyper::Request::post(path_and_query)
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json, */*");
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
    let response = connection
        .sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Answer { status, body })
}

/// Whether `haystack` holds `needle`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Percentiles of a set of durations, in milliseconds.
pub struct Summary {
    pub count: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(latencies: &mut [Duration]) -> Self {
        latencies.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let at = |q: f64| {
            if latencies.is_empty() {
                return 0.0;
            }
            // Nearest rank: the smallest value with at least q of them at or under it.
            let rank = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len());
            ms(latencies[rank - 1])
        };
        Self {
            count: latencies.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: latencies.last().copied().map_or(0.0, ms),
        }
    }
}

/// `/proc/PID/status` field (VmRSS, VmHWM...) in KiB.
pub fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Open file descriptors of PID.
pub fn fd_count(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}
