//! The connection flood of bench/flood.sh: while one
//! client or many (source addresses 127.1.x.y of loopback, each its own
//! source to the server) keep opening connections that send half a TLS
//! handshake or finish it and then say nothing, two kinds of reviewer
//! work as an API server does:
//!
//! - *fresh*: each review on a new connection (handshake, one review,
//!   close), as an API server that has just started, scaled, or lost its
//!   connections;
//! - *kept*: reviews one after another on a few keep-alive connections.
//!
//! ```text
//! flood --addr HOST:PORT --ca FILE --body FILE [--server-name localhost]
//!       [--sources 1] [--flood 11000] [--parallel 512] [--seconds 30]
//!       [--fresh-rate 100] [--kept 2] [--kept-rate 100]
//! ```
//!
//! The flood keeps `--flood` connections open at most (stalled and quiet
//! in turn; a connection the server closes is opened again at once) for
//! `--seconds`. Prints one JSON line per second and a summary line
//! (`"summary":true`): reviews answered and failed of each kind, their
//! latency percentiles, how many flood connections the server closed.
//! Loopback only; only public crates, no module of ownerguard.

#[path = "support/mod.rs"]
mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Mutex, Semaphore};

/// The first bytes of a ClientHello announcing 512 bytes; the rest never comes.
const STALLED_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

struct Options {
    addr: String,
    server_name: String,
    ca: String,
    body: String,
    sources: u32,
    flood: usize,
    parallel: usize,
    seconds: f64,
    fresh_rate: f64,
    kept: usize,
    kept_rate: f64,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        addr: String::new(),
        server_name: "localhost".into(),
        ca: String::new(),
        body: String::new(),
        sources: 1,
        flood: 11_000,
        parallel: 512,
        seconds: 30.0,
        fresh_rate: 100.0,
        kept: 2,
        kept_rate: 100.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--addr" => o.addr = value,
            "--server-name" => o.server_name = value,
            "--ca" => o.ca = value,
            "--body" => o.body = value,
            "--sources" => o.sources = (number(&value)? as u32).clamp(1, 65_000),
            "--flood" => o.flood = number(&value)? as usize,
            "--parallel" => o.parallel = (number(&value)? as usize).max(1),
            "--seconds" => o.seconds = number(&value)?,
            "--fresh-rate" => o.fresh_rate = number(&value)?,
            "--kept" => o.kept = number(&value)? as usize,
            "--kept-rate" => o.kept_rate = number(&value)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.addr.is_empty() || o.ca.is_empty() || o.body.is_empty() {
        return Err("--addr, --ca and --body are required".into());
    }
    Ok(o)
}

/// Reviews of one kind: answered, failed, latencies, the first error.
#[derive(Default)]
struct Reviews {
    answered: AtomicU64,
    failed: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
    first_error: Mutex<Option<String>>,
}

impl Reviews {
    async fn record(&self, result: Result<Duration, String>) {
        match result {
            Ok(took) => {
                self.answered.fetch_add(1, Ordering::Relaxed);
                self.latencies.lock().await.push(took);
            }
            Err(error) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().await;
                if first.is_none() {
                    *first = Some(error);
                }
            }
        }
    }

    async fn summary(&self) -> String {
        let mut latencies = self.latencies.lock().await.clone();
        let percentiles = if latencies.is_empty() {
            "null".to_string()
        } else {
            let s = support::Summary::of(&mut latencies);
            format!(
                "{{\"p50_ms\":{:.2},\"p99_ms\":{:.2},\"max_ms\":{:.2}}}",
                s.p50, s.p99, s.max
            )
        };
        format!(
            "{{\"answered\":{},\"failed\":{},\"latency\":{percentiles},\"first_error\":{}}}",
            self.answered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            serde_json::to_string(&*self.first_error.lock().await).unwrap()
        )
    }
}

/// The flood's counters.
#[derive(Default)]
struct Flood {
    open: AtomicU64,
    opened: AtomicU64,
    closed_by_server: AtomicU64,
    refused: AtomicU64,
}

/// A TCP connection from source `index` of `sources` (127.1.x.y): never
/// the reviewers' own address (127.0.0.1), as a flooding pod is never the
/// API server.
async fn connect_from(addr: SocketAddr, index: u32, sources: u32) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    let n = index % sources;
    let ip = Ipv4Addr::new(127, 1, (n / 250) as u8, (n % 250 + 1) as u8);
    socket.bind(SocketAddr::new(IpAddr::V4(ip), 0))?;
    socket.connect(addr).await
}

/// One flood connection: half a handshake (even `n`) or a whole one and
/// nothing more (odd), held until the server closes it or the flood ends.
async fn flood_one(
    n: u64,
    options: &Options,
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    flood: &Flood,
    until: Instant,
    opening: tokio::sync::OwnedSemaphorePermit,
) {
    let Ok(mut tcp) = connect_from(addr, n as u32, options.sources).await else {
        flood.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let held: Result<Box<dyn tokio::io::AsyncRead + Unpin + Send>, ()> = if n.is_multiple_of(2) {
        match tcp.write_all(STALLED_HELLO).await {
            Ok(()) => Ok(Box::new(tcp)),
            Err(_) => Err(()),
        }
    } else {
        let name = rustls::pki_types::ServerName::try_from(options.server_name.clone()).unwrap();
        match tokio::time::timeout(
            Duration::from_secs(10),
            tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
        )
        .await
        {
            Ok(Ok(stream)) => Ok(Box::new(stream)),
            _ => Err(()),
        }
    };
    drop(opening);
    let Ok(mut held) = held else {
        flood.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    flood.opened.fetch_add(1, Ordering::Relaxed);
    flood.open.fetch_add(1, Ordering::Relaxed);
    let mut buffer = [0u8; 512];
    let closed = tokio::time::timeout_at(until.into(), async {
        loop {
            match held.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok();
    flood.open.fetch_sub(1, Ordering::Relaxed);
    if closed {
        flood.closed_by_server.fetch_add(1, Ordering::Relaxed);
    }
}

/// One review on a new connection from the default source (the API
/// server's address), closed after.
async fn fresh_review(
    options: &Options,
    tls: Arc<rustls::ClientConfig>,
    body: Bytes,
) -> Result<Duration, String> {
    let started = Instant::now();
    let mut connection = tokio::time::timeout(
        Duration::from_secs(10),
        support::connect(&options.addr, &options.server_name, tls),
    )
    .await
    .map_err(|_| "connect: timed out".to_string())??;
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        support::post(&mut connection, &options.addr, "/mutate?timeout=10s", body),
    )
    .await
    .map_err(|_| "review: timed out".to_string())??;
    if answer.status != 200 {
        return Err(format!("HTTP {}", answer.status));
    }
    Ok(started.elapsed())
}

async fn run(options: Options) -> Result<(), String> {
    let options = Arc::new(options);
    let ca = std::fs::read(&options.ca).map_err(|e| format!("{}: {e}", options.ca))?;
    let body =
        Bytes::from(std::fs::read(&options.body).map_err(|e| format!("{}: {e}", options.body))?);
    let tls = support::tls_client(&ca)?;
    let addr: SocketAddr = tokio::net::lookup_host(&options.addr)
        .await
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no address")?;
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(options.seconds);
    let flood = Arc::new(Flood::default());
    let (fresh, kept) = (Arc::new(Reviews::default()), Arc::new(Reviews::default()));

    // The kept reviewers first, their connections made before the flood.
    let mut tasks = Vec::new();
    for _ in 0..options.kept {
        let mut connection =
            support::connect(&options.addr, &options.server_name, tls.clone()).await?;
        let (options, kept, body) = (options.clone(), kept.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let interval =
                Duration::from_secs_f64(options.kept as f64 / options.kept_rate.max(0.001));
            let mut due = Instant::now();
            while due < until {
                tokio::time::sleep_until(due.into()).await;
                let result = tokio::time::timeout(
                    Duration::from_secs(10),
                    support::post(
                        &mut connection,
                        &options.addr,
                        "/mutate?timeout=10s",
                        body.clone(),
                    ),
                )
                .await;
                let result = match result {
                    Ok(Ok(answer)) if answer.status == 200 => Ok(due.elapsed()),
                    Ok(Ok(answer)) => Err(format!("HTTP {}", answer.status)),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err("timed out".into()),
                };
                kept.record(result).await;
                due += interval;
            }
        }));
    }

    // The flood: up to --flood open, --parallel opening at once, each
    // reopened when the server closes it.
    let slots = Arc::new(Semaphore::new(options.flood));
    let opening = Arc::new(Semaphore::new(options.parallel));
    {
        let (options, tls, flood, slots, opening) = (
            options.clone(),
            tls.clone(),
            flood.clone(),
            slots.clone(),
            opening.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                let Ok(slot) =
                    tokio::time::timeout_at(until.into(), slots.clone().acquire_owned()).await
                else {
                    break;
                };
                let opening_permit = opening.clone().acquire_owned().await.unwrap();
                let (options, tls, flood) = (options.clone(), tls.clone(), flood.clone());
                n += 1;
                tokio::spawn(async move {
                    let _slot = slot;
                    flood_one(n, &options, addr, tls, &flood, until, opening_permit).await;
                });
            }
        }));
    }

    // The fresh reviewers, each on a new connection, at --fresh-rate.
    {
        let (options, tls, fresh, body) =
            (options.clone(), tls.clone(), fresh.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let interval = Duration::from_secs_f64(1.0 / options.fresh_rate.max(0.001));
            let mut due = Instant::now() + Duration::from_secs(1);
            let mut reviews = Vec::new();
            while due < until {
                tokio::time::sleep_until(due.into()).await;
                let (options, tls, fresh, body) =
                    (options.clone(), tls.clone(), fresh.clone(), body.clone());
                reviews.push(tokio::spawn(async move {
                    let result = fresh_review(&options, tls, body).await;
                    fresh.record(result).await;
                }));
                due += interval;
            }
            for review in reviews {
                let _ = review.await;
            }
        }));
    }

    // A line a second.
    let ticker = {
        let (flood, fresh, kept) = (flood.clone(), fresh.clone(), kept.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                println!(
                    "{{\"t\":{:.0},\"flood_open\":{},\"flood_closed_by_server\":{},\"fresh_answered\":{},\"fresh_failed\":{},\"kept_answered\":{},\"kept_failed\":{}}}",
                    started.elapsed().as_secs_f64(),
                    flood.open.load(Ordering::Relaxed),
                    flood.closed_by_server.load(Ordering::Relaxed),
                    fresh.answered.load(Ordering::Relaxed),
                    fresh.failed.load(Ordering::Relaxed),
                    kept.answered.load(Ordering::Relaxed),
                    kept.failed.load(Ordering::Relaxed),
                );
            }
        })
    };
    for task in tasks {
        let _ = task.await;
    }
    ticker.abort();
    println!(
        "{{\"summary\":true,\"sources\":{},\"flood_opened\":{},\"flood_closed_by_server\":{},\"flood_not_opened\":{},\"fresh\":{},\"kept\":{}}}",
        options.sources,
        flood.opened.load(Ordering::Relaxed),
        flood.closed_by_server.load(Ordering::Relaxed),
        flood.refused.load(Ordering::Relaxed),
        fresh.summary().await,
        kept.summary().await
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("flood: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match runtime.block_on(run(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flood: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
