//! Load benchmark of the webhook, run by `bench/load.sh`: the release
//! binary (`serve --dev --pods examples/pods.yaml`, logging one line per
//! decision as in production) on loopback, driven by C concurrent clients
//! for D seconds over HTTP/1.1 keep-alive (the API server's way) and over
//! one HTTP/2 connection. Prints throughput and latency percentiles. Client
//! and server share the machine's cores: the figures are for both.

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Version;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[path = "../tests/common/process.rs"]
mod process;

async fn run(version: Version, addr: &str, ca: &str, body: Bytes, clients: usize, seconds: u64) {
    let tls = process::client_tls(&[ca], None);
    // Go's net package, which the API server uses, sets TCP_NODELAY on
    // every connection: so does this client, or Nagle's algorithm on its
    // side would add delayed-ACK stalls (40 ms) that the API server never has.
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only();
    let client: Client<_, Full<Bytes>> = if version == Version::HTTP_2 {
        Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(builder.enable_http2().wrap_connector(tcp))
    } else {
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(clients)
            .build(builder.enable_http1().wrap_connector(tcp))
    };
    let url = format!(
        "https://localhost:{}/mutate?timeout=10s",
        addr.rsplit(':').next().unwrap()
    );
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let request = hyper::Request::post(&url)
                        .header("content-type", "application/json")
                        .body(Full::new(body.clone()))
                        .unwrap();
                    let sent = Instant::now();
                    let response = client.request(request).await.expect("request failed");
                    assert_eq!(response.status(), 200);
                    let answer = response.into_body().collect().await.unwrap().to_bytes();
                    latencies.push(sent.elapsed());
                    assert!(answer.windows(14).any(|w| w == b"\"allowed\":true"));
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{version:?}, {clients} clients, {seconds}s: {} reviews, {:.0}/s; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(0.99)),
        ms(at(0.999)),
        ms(*latencies.last().unwrap())
    );
}

fn main() {
    let clients: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(16);
    let seconds: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let binary = process::release_binary();
    let dir = tempfile::tempdir().unwrap();
    let pods = root.join("examples/pods.yaml");
    let process::Serving {
        mut child,
        addr,
        lines,
        ..
    } = process::spawn_serve(
        &binary,
        dir.path(),
        &["--pods", pods.to_str().unwrap()],
        &[],
    );
    // Drain the decision log lines, as a log collector would.
    std::thread::spawn(move || lines.for_each(drop));
    let ca = std::fs::read_to_string(dir.path().join("certs/ca.crt")).unwrap();
    let body = Bytes::from(std::fs::read(root.join("examples/review-create.json")).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        run(Version::HTTP_11, &addr, &ca, body.clone(), clients, seconds).await;
        run(Version::HTTP_2, &addr, &ca, body, clients, seconds).await;
    });
    let rss = process::rss_bytes(&child.id().to_string());
    println!("server RSS {:.1} MiB", rss as f64 / 1048576.0);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}
