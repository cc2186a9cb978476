//! A review load on a webhook (ownerguard or the ceiling), run by
//! bench/load.sh and bench/abuse.sh: N HTTP/1.1 keep-alive connections
//! over TLS, as the API server's webhook client makes them, POSTing the same
//! AdmissionReview for S seconds, closed loop (each connection sends its
//! next review when the answer is in) or at a fixed total rate.
//!
//!   review_load --addr HOST:PORT --ca FILE --body FILE [--server-name localhost]
//!               [--path '/mutate?timeout=5s'] [--connections 16] [--seconds 10]
//!               [--rate PER_SECOND] [--expect TEXT]... [--late-ms 5000] [--hold SECONDS]
//!               [--traceparent sampled|unsampled]
//!
//! With `--traceparent`, every review carries a W3C `traceparent` of a
//! trace of its own, sampled or not, as a tracing API server sends it
//! (bench/profile.sh measures ownerguard's `--tracing` with it).
//!
//! Every answer must be 200 and hold each `--expect` text (default
//! `"allowed":true`); anything else, or a failed connection (reconnected),
//! is an error. At a fixed rate, a latency counts from when the review was
//! due, not when it was sent, so a stalled server is not hidden by a client
//! that waited for it. Every connection is opened (TLS handshake done)
//! before the clock starts; `connected` is then written to standard error,
//! and the reviews start after `--hold` seconds (for a profiler to be
//! switched on between the handshakes and the reviews). Prints one human
//! line, then one JSON line; on SIGINT or SIGTERM, at once, with the
//! figures so far.
//!
//! Only public crates, no module of ownerguard.

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

struct Options {
    addr: String,
    server_name: String,
    path: String,
    ca: String,
    body: String,
    connections: usize,
    seconds: f64,
    rate: f64,
    expect: Vec<String>,
    late: Duration,
    hold: Duration,
    /// The traceparent's flags (`01` sampled, `00` not), when sent.
    traceparent: Option<&'static str>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        addr: String::new(),
        server_name: "localhost".into(),
        path: "/mutate?timeout=5s".into(),
        ca: String::new(),
        body: String::new(),
        connections: 16,
        seconds: 10.0,
        rate: 0.0,
        expect: Vec::new(),
        late: Duration::from_secs(5),
        hold: Duration::ZERO,
        traceparent: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => o.addr = value,
            "--server-name" => o.server_name = value,
            "--path" => o.path = value,
            "--ca" => o.ca = value,
            "--body" => o.body = value,
            "--connections" => o.connections = number(&value)? as usize,
            "--seconds" => o.seconds = number(&value)?,
            "--rate" => o.rate = number(&value)?,
            "--expect" => o.expect.push(value),
            "--late-ms" => o.late = Duration::from_secs_f64(number(&value)? / 1000.0),
            "--hold" => o.hold = Duration::from_secs_f64(number(&value)?),
            "--traceparent" => {
                o.traceparent = Some(match value.as_str() {
                    "sampled" => "01",
                    "unsampled" => "00",
                    _ => return Err(format!("{flag}: sampled or unsampled, not {value}")),
                })
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.addr.is_empty() || o.ca.is_empty() || o.body.is_empty() {
        return Err("--addr, --ca and --body are required".into());
    }
    if o.expect.is_empty() {
        o.expect.push("\"allowed\":true".into());
    }
    o.connections = o.connections.max(1);
    Ok(o)
}

/// Set on SIGINT or SIGTERM: every connection stops after its review in flight, and
/// the figures so far are printed.
static STOP: AtomicBool = AtomicBool::new(false);

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: u64,
    late: u64,
    first_errors: Vec<String>,
}

impl Tally {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_errors.len() < 5 {
            self.first_errors.push(what);
        }
    }
}

async fn drive(
    lane: u64,
    options: Arc<Options>,
    tls: Arc<rustls::ClientConfig>,
    mut connection: Option<support::Connection>,
    body: Bytes,
    started: Instant,
    deadline: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let expect: Vec<&[u8]> = options.expect.iter().map(|e| e.as_bytes()).collect();
    // At a fixed rate each connection takes its share, offset so that the
    // connections do not send in step.
    let period = (options.rate > 0.0)
        .then(|| Duration::from_secs_f64(options.connections as f64 / options.rate));
    let mut due = started;
    let mut sent: u64 = 0;
    while Instant::now() < deadline && !STOP.load(Ordering::Relaxed) {
        if let Some(period) = period {
            due += period;
            tokio::time::sleep_until(due.into()).await;
        } else {
            due = Instant::now();
        }
        if connection.is_none() {
            match support::connect(&options.addr, &options.server_name, tls.clone()).await {
                Ok(c) => connection = Some(c),
                Err(e) => {
                    tally.error(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(open) = connection.as_mut() else {
            continue;
        };
        // A trace of its own for each review: this connection's number
        // and its count, never zero.
        sent += 1;
        let traceparent = options
            .traceparent
            .map(|flags| format!("00-{:016x}{sent:016x}-{sent:016x}-{flags}", lane + 1));
        match support::post_with(
            open,
            &options.addr,
            &options.path,
            body.clone(),
            traceparent,
        )
        .await
        {
            Ok(answer) => {
                let latency = due.elapsed();
                tally.latencies.push(latency);
                if latency > options.late {
                    tally.late += 1;
                }
                if answer.status != 200
                    || !expect.iter().all(|e| support::contains(&answer.body, e))
                {
                    let text = String::from_utf8_lossy(&answer.body);
                    tally.error(format!(
                        "HTTP {}: {}",
                        answer.status,
                        text.chars().take(300).collect::<String>()
                    ));
                }
            }
            Err(e) => {
                tally.error(e);
                connection = None;
            }
        }
    }
    tally
}

async fn run(options: Options) -> Result<(), String> {
    let ca = std::fs::read(&options.ca).map_err(|e| format!("{}: {e}", options.ca))?;
    let body =
        Bytes::from(std::fs::read(&options.body).map_err(|e| format!("{}: {e}", options.body))?);
    let tls = support::tls_client(&ca)?;
    let options = Arc::new(options);
    let opening: Vec<_> = (0..options.connections)
        .map(|_| {
            let (options, tls) = (options.clone(), tls.clone());
            tokio::spawn(
                async move { support::connect(&options.addr, &options.server_name, tls).await },
            )
        })
        .collect();
    let mut connections = Vec::new();
    for open in opening {
        connections.push(open.await.map_err(|e| e.to_string())??);
    }
    eprintln!("connected");
    tokio::spawn(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut interrupt), Ok(mut terminate)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        STOP.store(true, Ordering::Relaxed);
    });
    tokio::time::sleep(options.hold).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(options.seconds);
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(i, connection)| {
            let offset = if options.rate > 0.0 {
                Duration::from_secs_f64(i as f64 / options.rate)
            } else {
                Duration::ZERO
            };
            tokio::spawn(drive(
                i as u64,
                options.clone(),
                tls.clone(),
                Some(connection),
                body.clone(),
                started + offset,
                deadline,
            ))
        })
        .collect();
    let mut total = Tally::default();
    for task in tasks {
        let tally = task.await.map_err(|e| e.to_string())?;
        total.latencies.extend(tally.latencies);
        total.errors += tally.errors;
        total.late += tally.late;
        for e in tally.first_errors {
            if total.first_errors.len() < 5 {
                total.first_errors.push(e);
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    for error in &total.first_errors {
        eprintln!("review_load: error: {error}");
    }
    let s = support::Summary::of(&mut total.latencies);
    let per_second = s.count as f64 / elapsed;
    println!(
        "{} connections, {:.0}s: {} answers ({per_second:.0}/s), {} errors, {} late (over {} ms); p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        options.connections,
        elapsed,
        s.count,
        total.errors,
        total.late,
        options.late.as_millis(),
        s.p50,
        s.p90,
        s.p99,
        s.p999,
        s.max
    );
    println!(
        "{{\"answers\":{},\"per_second\":{per_second:.1},\"errors\":{},\"late\":{},\"p50_ms\":{:.3},\"p90_ms\":{:.3},\"p99_ms\":{:.3},\"p999_ms\":{:.3},\"max_ms\":{:.3},\"seconds\":{elapsed:.2}}}",
        s.count, total.errors, total.late, s.p50, s.p90, s.p99, s.p999, s.max
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("review_load: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // One thread: the client stays on the core it is given.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(options)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("review_load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
