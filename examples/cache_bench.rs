//! Benchmark of the owner cache, run by `bench/cache.sh`; figures go into
//! docs/performance.md. Not a test: it measures, it does not judge.
//!
//! 1. The index alone: memory per pod (RSS growth while it is filled) and
//!    lookups per second (one thread, random pods, uid compared).
//! 2. The real `ownerguard serve` against the loopback test API server
//!    holding N pods: time from start to `/readyz` (the paged list, the
//!    index filled), and the process's RSS once ready.

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/process.rs"]
mod process;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ownerguard::cache::PodIndex;

/// Pod names and uids shaped like a real cluster's: 1,000 namespaces,
/// ReplicaSet-style names, canonical UUIDs.
fn pods(count: usize) -> Vec<(String, String, String)> {
    (0..count)
        .map(|i| {
            let uid = format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                i as u32 ^ 0x5a5a_5a5a,
                i % 0xffff,
                i % 0xfff,
                (i * 7) % 0xfff,
                i * 2_654_435_761
            );
            (
                format!("team-{:04}", i % 1000),
                format!("worker-7d9f8c6b5-{:05x}", i),
                uid,
            )
        })
        .collect()
}

fn index_figures(pods: &[(String, String, String)]) {
    let metas: Vec<ObjectMeta> = pods
        .iter()
        .map(|(ns, name, uid)| ObjectMeta {
            namespace: Some(ns.clone()),
            name: Some(name.clone()),
            uid: Some(uid.clone()),
            ..Default::default()
        })
        .collect();
    let index = PodIndex::default();
    let before = process::rss_bytes("self");
    for meta in &metas {
        index.apply(meta);
    }
    let after = process::rss_bytes("self");
    println!(
        "index: {} pods, RSS growth {:.1} MiB, {:.0} bytes per pod",
        index.len(),
        (after - before) as f64 / 1048576.0,
        (after - before) as f64 / pods.len() as f64
    );

    // The keys of a request are hot in cache (it was just decoded): query
    // with a small batch of copied keys, pointing at random pods.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let batch: Vec<(String, String, String)> = (0..1024)
        .map(|_| pods[(next() % pods.len() as u64) as usize].clone())
        .collect();
    let lookups = 2_000_000;
    let started = Instant::now();
    let mut found = 0usize;
    for i in 0..lookups {
        let (ns, name, uid) = &batch[i % batch.len()];
        found += usize::from(index.get_matching(ns, name, uid).is_some());
    }
    let elapsed = started.elapsed();
    assert_eq!(found, lookups);
    let random_started = Instant::now();
    for _ in 0..lookups {
        let (ns, name, uid) = &pods[(next() % pods.len() as u64) as usize];
        std::hint::black_box(index.get_matching(ns, name, uid));
    }
    let random = random_started.elapsed();
    println!(
        "index: same lookups with cold keys from all {}: {:.0} ns each",
        pods.len(),
        random.as_nanos() as f64 / lookups as f64
    );
    println!(
        "index: {lookups} lookups in {:.2}s: {:.2} M lookups/s on one thread ({:.0} ns each)",
        elapsed.as_secs_f64(),
        lookups as f64 / elapsed.as_secs_f64() / 1e6,
        elapsed.as_nanos() as f64 / lookups as f64
    );
}

async fn serve_figures(pods: Vec<(String, String, String)>) {
    let count = pods.len();
    let server = apiserver::FakeApi::start().await;
    server.api.load_pods(pods);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server.kubeconfig(dir.path());
    let binary = process::release_binary();
    let started = Instant::now();
    let kubeconfig = kubeconfig.into_os_string();
    let env = [
        ("KUBECONFIG", kubeconfig.as_os_str()),
        ("OWNERGUARD_LOG", std::ffi::OsStr::new("info")),
    ];
    let process::Serving {
        mut child,
        metrics_addr,
        lines,
        ..
    } = tokio::task::block_in_place(|| process::spawn_serve(&binary, dir.path(), &[], &env));
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let deadline = started + Duration::from_secs(300);
    loop {
        let ready = client
            .get(format!("http://{metrics_addr}/readyz").parse().unwrap())
            .await
            .is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "ownerguard exited");
        assert!(Instant::now() < deadline, "not ready after 300s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ready_after = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = process::rss_bytes(&child.id().to_string());
    println!(
        "serve: {count} pods listed (pages of 500) and indexed, ready after {:.2}s",
        ready_after.as_secs_f64()
    );
    println!(
        "serve: process RSS once ready {:.1} MiB",
        rss as f64 / 1048576.0
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(150_000);
    let pods = pods(count);
    index_figures(&pods);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(serve_figures(pods));
}
