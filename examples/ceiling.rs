//! The ceiling: a webhook on ownerguard's own TLS and HTTP stack that does
//! no work, to measure ownerguard against (bench/load.sh, bench/create.sh).
//!
//! The same crates at the same versions (this package's Cargo.lock), set
//! up as ownerguard's server sets them up: a tokio multi-thread runtime,
//! rustls with the ring provider, TLS 1.3 and 1.2, ALPN h2 and http/1.1,
//! the key served by a resolver behind a read lock, TCP_NODELAY, the
//! 10-second handshake and header-read bounds, hyper-util's auto builder
//! under a graceful-shutdown watcher, and an axum router on `/mutate` and
//! `/validate` reading the body within 7 MiB. Then, instead of a decision,
//! a fixed answer: allowed, no patch, the request uid found by a byte scan
//! (no JSON parse), no log line.
//!
//!   ceiling --tls-cert FILE --tls-key FILE [--addr 127.0.0.1:0] [--stats-addr ADDR]
//!           [--mutate-answer FILE] [--validate-answer FILE]
//!
//! With `--mutate-answer` (`--validate-answer`), `/mutate` (`/validate`)
//! answers the response fields in FILE instead of `"allowed":true`: a JSON
//! object of an AdmissionReview `response` without its uid, read once at
//! start (bench/create.sh gives it ownerguard's own answer, patch and audit
//! annotations included, to tell what the API server pays for the answer
//! from what it pays for the call). Still no parse on the path of a review.
//!
//! Prints one JSON line on standard output once it listens:
//! `{"message":"serving","addr":"...","stats_addr":"..."}`. With
//! `--stats-addr`, plain HTTP `GET /count` there answers how many reviews
//! it has answered (bench/create.sh uses it to know when the API server
//! calls it).
//!
//! Only public crates, no module of ownerguard: it keeps building whatever
//! becomes of `src/`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// As ownerguard's server: a handshake within 10 s, headers within 10 s,
/// bodies up to 7 MiB.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

struct Options {
    addr: SocketAddr,
    stats_addr: Option<SocketAddr>,
    tls_cert: PathBuf,
    tls_key: PathBuf,
    mutate_answer: Option<PathBuf>,
    validate_answer: Option<PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut addr = "127.0.0.1:0".parse::<SocketAddr>().unwrap();
    let (mut stats_addr, mut tls_cert, mut tls_key) = (None, None, None);
    let (mut mutate_answer, mut validate_answer) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--stats-addr" => {
                stats_addr = Some(value()?.parse().map_err(|e| format!("--stats-addr: {e}"))?)
            }
            "--tls-cert" => tls_cert = Some(PathBuf::from(value()?)),
            "--tls-key" => tls_key = Some(PathBuf::from(value()?)),
            "--mutate-answer" => mutate_answer = Some(PathBuf::from(value()?)),
            "--validate-answer" => validate_answer = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Options {
        addr,
        stats_addr,
        tls_cert: tls_cert.ok_or("--tls-cert is required")?,
        tls_key: tls_key.ok_or("--tls-key is required")?,
        mutate_answer,
        validate_answer,
    })
}

/// The key behind a read lock, taken at each handshake, as ownerguard's
/// reloading certificate is (this one never reloads).
#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|key| key.clone())
    }
}

fn tls_config(options: &Options) -> Result<rustls::ServerConfig, String> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let chain = CertificateDer::pem_slice_iter(&read(&options.tls_cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", options.tls_cert.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&read(&options.tls_key)?)
        .map_err(|e| format!("{}: {e}", options.tls_key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| e.to_string())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver(RwLock::new(Arc::new(certified)))));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The request uid of an AdmissionReview, by a byte scan: the string after
/// the first `"uid"` key that follows `"request"` (the API server writes
/// `request.uid` first). None when there is none or it holds an escape.
fn request_uid(body: &[u8]) -> Option<&[u8]> {
    let after_request = find(body, b"\"request\"")? + 9;
    let rest = &body[after_request..];
    let mut at = find(rest, b"\"uid\"")? + 5;
    while rest
        .get(at)
        .is_some_and(|b| b.is_ascii_whitespace() || *b == b':')
    {
        at += 1;
    }
    if rest.get(at) != Some(&b'"') {
        return None;
    }
    let uid = &rest[at + 1..];
    let end = uid.iter().position(|b| *b == b'"' || *b == b'\\')?;
    (uid[end] == b'"').then_some(&uid[..end])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What follows the uid in an answer: `","allowed":true}}` or the fields
/// of a given answer, closed.
fn answer_tail(file: Option<&PathBuf>) -> Result<Vec<u8>, String> {
    let Some(path) = file else {
        return Ok(br#"","allowed":true}}"#.to_vec());
    };
    let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut response: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&text)
        .map_err(|e| format!("{}: not a JSON object: {e}", path.display()))?;
    response.remove("uid");
    if response.is_empty() {
        return Err(format!("{}: an empty answer", path.display()));
    }
    let fields = serde_json::Value::Object(response).to_string();
    // `{"allowed":...}` -> `","allowed":...}}`: after the uid's closing quote.
    Ok(format!("\",{}}}", &fields[1..]).into_bytes())
}

#[derive(Clone)]
struct Served {
    answered: Arc<AtomicU64>,
    mutate: Arc<[u8]>,
    validate: Arc<[u8]>,
}

async fn mutate(State(served): State<Served>, body: Body) -> Response {
    let tail = served.mutate.clone();
    review(&served.answered, &tail, body).await
}

async fn validate(State(served): State<Served>, body: Body) -> Response {
    let tail = served.validate.clone();
    review(&served.answered, &tail, body).await
}

async fn review(answered: &AtomicU64, tail: &[u8], body: Body) -> Response {
    let bytes = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response(),
    };
    let Some(uid) = request_uid(&bytes) else {
        return (StatusCode::BAD_REQUEST, "no request uid\n").into_response();
    };
    const HEAD: &[u8] =
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":""#;
    let mut answer = Vec::with_capacity(HEAD.len() + uid.len() + tail.len());
    answer.extend_from_slice(HEAD);
    answer.extend_from_slice(uid);
    answer.extend_from_slice(tail);
    answered.fetch_add(1, Ordering::Relaxed);
    (
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::from(answer),
    )
        .into_response()
}

async fn serve(options: Options) -> Result<(), String> {
    let tls = Arc::new(tls_config(&options)?);
    let listener = TcpListener::bind(options.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.addr))?;
    let answered = Arc::new(AtomicU64::new(0));
    let mut stats_addr = String::new();
    if let Some(addr) = options.stats_addr {
        let stats = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        stats_addr = stats.local_addr().map_err(|e| e.to_string())?.to_string();
        let count = answered.clone();
        let app = Router::new().route(
            "/count",
            get(move || async move { format!("{}\n", count.load(Ordering::Relaxed)) }),
        );
        tokio::spawn(async move { axum::serve(stats, app).await });
    }
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut stdout = std::io::stdout();
    let _ = writeln!(
        stdout,
        "{{\"message\":\"serving\",\"addr\":\"{addr}\",\"stats_addr\":\"{stats_addr}\"}}"
    );
    let _ = stdout.flush();

    let served = Served {
        answered,
        mutate: answer_tail(options.mutate_answer.as_ref())?.into(),
        validate: answer_tail(options.validate_answer.as_ref())?.into(),
    };
    let app = Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .with_state(served);
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                let service = TowerToHyperService::new(app.clone());
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await else {
                        return;
                    };
                    let mut builder = auto::Builder::new(TokioExecutor::new());
                    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).keep_alive(true);
                    builder.http2().timer(TokioTimer::new());
                    let connection = builder.serve_connection(TokioIo::new(tls), service);
                    let _ = watcher.watch(connection).await;
                });
            }
            _ = terminate.recv() => break,
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("ceiling: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(serve(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ceiling: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{answer_tail, request_uid};

    #[test]
    fn a_given_answer_is_spliced_after_the_uid_without_its_own_uid() {
        assert_eq!(answer_tail(None).unwrap(), br#"","allowed":true}}"#);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("answer.json");
        std::fs::write(&file, r#"{"uid":"x","allowed":true,"patch":"W10="}"#).unwrap();
        let tail = answer_tail(Some(&file)).unwrap();
        let whole = [&br#"{"response":{"uid":"u-1"#[..], &tail].concat();
        let parsed: serde_json::Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({"response": {"uid": "u-1", "allowed": true, "patch": "W10="}})
        );
    }

    #[test]
    fn the_uid_is_the_request_one_not_another() {
        let body = br#"{"kind":"AdmissionReview","request":{"uid":"u-1","userInfo":{"uid":"x"},"object":{"metadata":{"uid":"y"}}}}"#;
        assert_eq!(request_uid(body), Some(&b"u-1"[..]));
        let spaced = b"{\"request\": {\n  \"uid\" : \"u-2\" }}";
        assert_eq!(request_uid(spaced), Some(&b"u-2"[..]));
        assert_eq!(request_uid(br#"{"request":{"uid":"a\"b"}}"#), None);
        assert_eq!(request_uid(br#"{"response":{"uid":"a"}}"#), None);
    }
}
