//! The connection abuse of bench/abuse.sh: many clients that finish the
//! TLS handshake, send one review, read the answer and then say nothing
//! more while keeping the connection open; and many handshakes that stall
//! after a few bytes of a ClientHello. Loopback only.
//!
//!   abuse --addr HOST:PORT --ca FILE --body FILE [--server-name localhost]
//!         [--idle 10000] [--stalled 1000] [--hold SECONDS] [--parallel 128]
//!         [--protocol http1|h2]
//!
//! Opens them (at most `--parallel` opening at once), holds them `--hold`
//! seconds (default 30) after the last is open, then closes them all and
//! exits. Once its review is answered an idle client keeps only its TCP
//! socket (its TLS state is dropped: the server cannot tell), so that ten
//! thousand of them cost the client little. With `--protocol h2` the idle
//! clients negotiate HTTP/2 instead and keep their (stream-less) HTTP/2
//! connection: what an API server does not do, but any client may. Every
//! held connection is watched
//! for the server closing it: its time from open to close is recorded.
//!
//! Prints one JSON line per second (`t`, how many are open, failed and
//! closed by the server, of each kind) and a summary line at the end
//! (`"summary":true`, with the close times' percentiles).
//!
//! Only public crates, no module of ownerguard.

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, Semaphore};

/// The first bytes of a TLS 1.2/1.3 ClientHello: a handshake record header
/// announcing 512 bytes, and the start of the message. The rest never comes.
const STALLED_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

/// The longest one connection may take to open (connect, handshake, review).
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

struct Options {
    addr: String,
    server_name: String,
    ca: String,
    body: String,
    idle: usize,
    stalled: usize,
    hold: Duration,
    parallel: usize,
    protocol: Protocol,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        addr: String::new(),
        server_name: "localhost".into(),
        ca: String::new(),
        body: String::new(),
        idle: 10_000,
        stalled: 1_000,
        hold: Duration::from_secs(30),
        parallel: 128,
        protocol: Protocol::Http1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => o.addr = value,
            "--server-name" => o.server_name = value,
            "--ca" => o.ca = value,
            "--body" => o.body = value,
            "--idle" => o.idle = number(&value)? as usize,
            "--stalled" => o.stalled = number(&value)? as usize,
            "--hold" => o.hold = Duration::from_secs_f64(number(&value)?),
            "--parallel" => o.parallel = (number(&value)? as usize).max(1),
            "--protocol" => {
                o.protocol = match value.as_str() {
                    "http1" => Protocol::Http1,
                    "h2" => Protocol::Http2,
                    other => return Err(format!("--protocol {other}: http1 or h2")),
                }
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.addr.is_empty() || o.ca.is_empty() || o.body.is_empty() {
        return Err("--addr, --ca and --body are required".into());
    }
    Ok(o)
}

/// Counters of one kind of connection.
#[derive(Default)]
struct Kind {
    open: AtomicU64,
    failed: AtomicU64,
    closed_by_server: AtomicU64,
    /// Seconds from open (handshake done, or hello sent) to the server's close.
    close_times: Mutex<Vec<Duration>>,
    first_error: Mutex<Option<String>>,
}

impl Kind {
    async fn fail(&self, error: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().await;
        if first.is_none() {
            *first = Some(error);
        }
    }

    /// Hold a connection until `closed` completes (the server closed it:
    /// counted) or `stop`.
    async fn hold(&self, closed: Held, opened: Instant, stop: Instant) {
        self.open.fetch_add(1, Ordering::Relaxed);
        let closed = tokio::time::timeout_at(stop.into(), closed.closed())
            .await
            .is_ok();
        self.open.fetch_sub(1, Ordering::Relaxed);
        if closed {
            self.closed_by_server.fetch_add(1, Ordering::Relaxed);
            self.close_times.lock().await.push(opened.elapsed());
        }
    }

    fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.open.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.closed_by_server.load(Ordering::Relaxed),
        )
    }
}

/// What is held: a bare socket, or an HTTP/2 client connection.
enum Held {
    Socket(TcpStream),
    Http2 {
        // Kept so that the client does not close the connection.
        _sender: hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>>,
        connection: tokio::task::JoinHandle<()>,
    },
}

impl Held {
    /// Completes when the server closes the connection.
    async fn closed(self) {
        match self {
            Held::Socket(mut socket) => {
                let mut buffer = [0u8; 512];
                loop {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        // A close_notify alert before the FIN, or anything else.
                        Ok(_) => continue,
                    }
                }
            }
            Held::Http2 {
                _sender,
                connection,
            } => {
                let _ = connection.await;
            }
        }
    }
}

/// Which protocol the idle clients speak (ALPN).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// Handshake, one review over HTTP/1.1, then keep only the TCP socket,
/// silent.
async fn idle_client(
    options: &Options,
    tls: Arc<rustls::ClientConfig>,
    body: Bytes,
) -> Result<(Held, Instant), String> {
    let tcp = TcpStream::connect(&options.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(options.server_name.clone())
        .map_err(|e| e.to_string())?;
    let mut stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let opened = Instant::now();
    let head = format!(
        "POST /mutate?timeout=5s HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n",
        options.addr,
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    stream
        .write_all(&body)
        .await
        .map_err(|e| format!("write: {e}"))?;
    stream.flush().await.map_err(|e| format!("flush: {e}"))?;
    // Read the whole answer: headers, then Content-Length bytes.
    let mut answer = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if read == 0 {
            return Err("closed before the answer".into());
        }
        answer.extend_from_slice(&chunk[..read]);
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
            if !head.starts_with("http/1.1 200") {
                return Err(format!("answer: {}", head.lines().next().unwrap_or("")));
            }
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .ok_or("answer without content-length")?;
            if answer.len() >= end + 4 + length {
                break;
            }
        }
    }
    let (tcp, _tls_state) = stream.into_inner();
    Ok((Held::Socket(tcp), opened))
}

/// Handshake (ALPN h2), one review over HTTP/2, then the connection stays
/// open with no stream: an HTTP/2 client at rest.
async fn idle_http2_client(
    options: &Options,
    tls: Arc<rustls::ClientConfig>,
    body: Bytes,
) -> Result<(Held, Instant), String> {
    let tcp = TcpStream::connect(&options.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(options.server_name.clone())
        .map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err("the server did not agree to h2".into());
    }
    let opened = Instant::now();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = hyper::Request::post(format!("https://{}/mutate?timeout=5s", options.addr))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    if response.status() != 200 {
        return Err(format!("answer: HTTP {}", response.status()));
    }
    http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|e| format!("body: {e}"))?;
    Ok((
        Held::Http2 {
            _sender: sender,
            connection,
        },
        opened,
    ))
}

async fn stalled_client(options: &Options) -> Result<(Held, Instant), String> {
    let mut tcp = TcpStream::connect(&options.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    tcp.write_all(STALLED_HELLO)
        .await
        .map_err(|e| format!("write: {e}"))?;
    Ok((Held::Socket(tcp), Instant::now()))
}

fn percentiles(times: &mut [Duration]) -> String {
    if times.is_empty() {
        return "null".into();
    }
    let s = support::Summary::of(times);
    format!(
        "{{\"p50_s\":{:.2},\"p99_s\":{:.2},\"max_s\":{:.2}}}",
        s.p50 / 1000.0,
        s.p99 / 1000.0,
        s.max / 1000.0
    )
}

async fn run(options: Options) -> Result<(), String> {
    let ca = std::fs::read(&options.ca).map_err(|e| format!("{}: {e}", options.ca))?;
    let body =
        Bytes::from(std::fs::read(&options.body).map_err(|e| format!("{}: {e}", options.body))?);
    let mut tls = support::tls_client(&ca)?;
    if options.protocol == Protocol::Http2 {
        let mut config = (*tls).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        tls = Arc::new(config);
    }
    let options = Arc::new(options);
    let (idle, stalled) = (Arc::new(Kind::default()), Arc::new(Kind::default()));
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(options.parallel));
    let opened_all = Arc::new(AtomicU64::new(0));
    let total = (options.idle + options.stalled) as u64;
    let far = started + Duration::from_secs(24 * 3600);

    // Interleave the kinds: one stalled handshake every idle/stalled idle clients.
    let every = (options.idle / options.stalled.max(1)).max(1);
    let mut plan = Vec::with_capacity(options.idle + options.stalled);
    let (mut i, mut s) = (0, 0);
    while i < options.idle || s < options.stalled {
        if s < options.stalled && (i % every == 0 || i >= options.idle) {
            plan.push(false);
            s += 1;
        }
        if i < options.idle {
            plan.push(true);
            i += 1;
        }
    }
    // Opened by a task of its own, so that progress is reported meanwhile.
    let holders = Arc::new(std::sync::Mutex::new(Vec::with_capacity(plan.len())));
    let opener = {
        let (holders, options, tls, body) =
            (holders.clone(), options.clone(), tls.clone(), body.clone());
        let (idle, stalled, opened_all) = (idle.clone(), stalled.clone(), opened_all.clone());
        tokio::spawn(async move {
            for is_idle in plan {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let (options, tls, body) = (options.clone(), tls.clone(), body.clone());
                let (kind, opened_all) = (
                    if is_idle {
                        idle.clone()
                    } else {
                        stalled.clone()
                    },
                    opened_all.clone(),
                );
                let holder = tokio::spawn(async move {
                    // Each opening within 30 s (a full backlog retries SYNs for
                    // minutes), so that the run stays bounded.
                    let opening = async {
                        if is_idle && options.protocol == Protocol::Http2 {
                            idle_http2_client(&options, tls, body).await
                        } else if is_idle {
                            idle_client(&options, tls, body).await
                        } else {
                            stalled_client(&options).await
                        }
                    };
                    let opened = tokio::time::timeout(OPEN_TIMEOUT, opening)
                        .await
                        .unwrap_or_else(|_| Err(format!("not open after {OPEN_TIMEOUT:?}")));
                    drop(permit);
                    opened_all.fetch_add(1, Ordering::Relaxed);
                    match opened {
                        // Held until the server closes it or the end (abort below).
                        Ok((held, at)) => kind.hold(held, at, far).await,
                        Err(e) => kind.fail(e).await,
                    }
                });
                holders.lock().unwrap().push(holder);
            }
        })
    };
    // Report every second until all are open, then through the hold.
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut stop_at = None;
    loop {
        ticker.tick().await;
        let (io, ifail, iclosed) = idle.snapshot();
        let (so, sfail, sclosed) = stalled.snapshot();
        println!(
            "{{\"t\":{:.1},\"idle_open\":{io},\"idle_failed\":{ifail},\"idle_closed_by_server\":{iclosed},\"stalled_open\":{so},\"stalled_failed\":{sfail},\"stalled_closed_by_server\":{sclosed}}}",
            started.elapsed().as_secs_f64()
        );
        if stop_at.is_none() && opened_all.load(Ordering::Relaxed) >= total {
            stop_at = Some(Instant::now() + options.hold);
            eprintln!(
                "abuse: all {total} opened after {:.1}s; holding {:.0}s",
                started.elapsed().as_secs_f64(),
                options.hold.as_secs_f64()
            );
        }
        if stop_at.is_some_and(|at| Instant::now() >= at) {
            break;
        }
    }
    // Every socket still held is closed here.
    opener.abort();
    for holder in holders.lock().unwrap().drain(..) {
        holder.abort();
    }
    for (name, kind) in [("idle", &idle), ("stalled", &stalled)] {
        if let Some(error) = kind.first_error.lock().await.as_ref() {
            eprintln!("abuse: first {name} failure: {error}");
        }
    }
    let (_, ifail, iclosed) = idle.snapshot();
    let (_, sfail, sclosed) = stalled.snapshot();
    println!(
        "{{\"summary\":true,\"idle\":{},\"idle_failed\":{ifail},\"idle_closed_by_server\":{iclosed},\"idle_close_after\":{},\"stalled\":{},\"stalled_failed\":{sfail},\"stalled_closed_by_server\":{sclosed},\"stalled_close_after\":{},\"seconds\":{:.1}}}",
        options.idle,
        percentiles(&mut idle.close_times.lock().await),
        options.stalled,
        percentiles(&mut stalled.close_times.lock().await),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("abuse: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("abuse: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
