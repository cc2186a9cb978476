//! The owner cache in cluster mode, run by `bench/cache.sh`: the real
//! `ownerguard serve` against the loopback test API server
//! (tests/apiserver, paged lists of 500 and watches, as kube-apiserver
//! serves them) holding N pods in 1,000 namespaces, real-looking names and
//! UUIDs. Measured from outside the process, through /proc and its ports:
//!
//! - the time from start to `/readyz` (the paged list, the index filled);
//! - the peak RSS (VmHWM) up to then: the initial list;
//! - the RSS once ready, and the same with no pod at all: their difference
//!   over N is what each pod costs the process, the index and whatever the
//!   allocator keeps for it;
//! - then a relist: the watch is dropped and the next one answered
//!   410 Gone, as after etcd compaction; the peak RSS from just before it
//!   (VmHWM reset through /proc/PID/clear_refs) to the end of the relist
//!   (the next watch request), the RSS after it, its duration, and whether
//!   `/readyz` ever failed meanwhile;
//! - `ownerguard_owner_cache_pods` after each, which must be N.
//!
//! Not a test: it measures; it fails only when the run itself goes wrong.
//! Talks to ownerguard only through its command line, ports and /proc.

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "../tests/common/process.rs"]
mod process;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

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

/// `/proc/PID/status` field in KiB.
fn proc_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A plain HTTP/1.0 GET on the metrics port: (status, body).
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

fn ready(metrics: &str) -> bool {
    get(metrics, "/readyz").is_some_and(|(status, _)| status == 200)
}

fn cached_pods(metrics: &str) -> Option<u64> {
    let (_, body) = get(metrics, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix("ownerguard_owner_cache_pods "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

struct Figures {
    ready_after: Duration,
    initial_peak_kb: u64,
    ready_rss_kb: u64,
    relist: Option<Relist>,
}

struct Relist {
    took: Duration,
    peak_kb: u64,
    rss_after_kb: u64,
    not_ready_polls: u64,
    polls: u64,
}

async fn measure(count: usize, relist: bool) -> Result<Figures, String> {
    let server = apiserver::FakeApi::start().await;
    server.api.load_pods(pods(count));
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let kubeconfig = server.kubeconfig(dir.path()).into_os_string();
    let binary = process::release_binary();
    let started = Instant::now();
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
    let pid = child.id();
    let result = async {
        let deadline = started + Duration::from_secs(600);
        while !ready(&metrics_addr) {
            if child.try_wait().map_err(|e| e.to_string())?.is_some() {
                return Err("ownerguard exited before it was ready".to_string());
            }
            if Instant::now() > deadline {
                return Err("not ready after 600 s".to_string());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let ready_after = started.elapsed();
        let initial_peak_kb = proc_kb(pid, "VmHWM");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ready_rss_kb = proc_kb(pid, "VmRSS");
        let listed = cached_pods(&metrics_addr);
        if listed != Some(count as u64) {
            return Err(format!(
                "{listed:?} pods cached after the list, not {count}"
            ));
        }
        let relist = if relist {
            Some(relist_figures(&server.api, pid, &metrics_addr, count).await?)
        } else {
            None
        };
        Ok(Figures {
            ready_after,
            initial_peak_kb,
            ready_rss_kb,
            relist,
        })
    }
    .await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    result
}

/// Drop the watches and answer the next one 410 Gone: ownerguard relists.
/// Done when the watch of every pod (no field selector: not one of the
/// finished phases' watches, which reconnect at the same moment and may
/// take the 410 instead; then it is tried again) watches again after its
/// list.
async fn relist_figures(
    api: &apiserver::FakeApi,
    pid: u32,
    metrics: &str,
    count: usize,
) -> Result<Relist, String> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| format!("cannot reset the peak RSS: {e}"))?;
    let of_every_pod =
        |c: &String| c.starts_with("GET /api/v1/pods") && !c.contains("fieldSelector");
    let (mut polls, mut not_ready_polls) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut started;
    'attempts: loop {
        let mark = api.calls().len();
        started = Instant::now();
        api.update_faults(|f| f.gone_on_next_watch = true);
        api.drop_watches();
        loop {
            if Instant::now() > deadline {
                return Err("no relist within 600 s".into());
            }
            let calls = api.calls();
            let after: Vec<&String> = calls[mark.min(calls.len())..]
                .iter()
                .filter(|c| of_every_pod(c))
                .collect();
            let listed_at = after.iter().position(|c| !c.contains("watch="));
            if listed_at.is_some_and(|at| after[at..].iter().any(|c| c.contains("watch=true"))) {
                break 'attempts;
            }
            let mut consumed = false;
            api.update_faults(|f| consumed = !f.gone_on_next_watch);
            // Another watch took the 410 and the watch of every pod
            // resumed where it was: once more.
            if consumed && listed_at.is_none() && after.iter().any(|c| c.contains("watch=true")) {
                continue 'attempts;
            }
            polls += 1;
            if !ready(metrics) {
                not_ready_polls += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let took = started.elapsed();
    let peak_kb = proc_kb(pid, "VmHWM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after_kb = proc_kb(pid, "VmRSS");
    let cached = cached_pods(metrics);
    if cached != Some(count as u64) {
        return Err(format!(
            "{cached:?} pods cached after the relist, not {count}"
        ));
    }
    Ok(Relist {
        took,
        peak_kb,
        rss_after_kb,
        not_ready_polls,
        polls,
    })
}

fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

async fn run(count: usize) -> Result<(), String> {
    eprintln!("cache_bench: ownerguard with no pod");
    let empty = measure(0, false).await?;
    eprintln!("cache_bench: ownerguard with {count} pods, then a relist after 410 Gone");
    let full = measure(count, true).await?;
    let relist = full.relist.as_ref().ok_or("no relist figures")?;
    let per_pod = (full.ready_rss_kb.saturating_sub(empty.ready_rss_kb)) as f64 * 1024.0
        / count.max(1) as f64;
    println!();
    println!(
        "ownerguard serve, cluster mode, against the loopback test API server: {count} pods in 1,000 namespaces, pages of 500"
    );
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| ready after (list and index, the test server's encoding on the same cores) | {:.1} s |",
        full.ready_after.as_secs_f64()
    );
    println!(
        "| peak RSS from start to ready (the initial list) | {} |",
        mib(full.initial_peak_kb)
    );
    println!("| RSS once ready | {} |", mib(full.ready_rss_kb));
    println!(
        "| RSS once ready with no pod | {} |",
        mib(empty.ready_rss_kb)
    );
    println!(
        "| resident bytes per pod ((RSS with {count} - RSS with none) / {count}) | {per_pod:.0} |"
    );
    println!(
        "| relist after 410 Gone: duration | {:.1} s |",
        relist.took.as_secs_f64()
    );
    println!(
        "| relist: peak RSS (from just before it to the next watch) | {} |",
        mib(relist.peak_kb)
    );
    println!("| relist: RSS after it | {} |", mib(relist.rss_after_kb));
    println!(
        "| relist: /readyz not ready | {} of {} polls (every 10 ms) |",
        relist.not_ready_polls, relist.polls
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(150_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(count)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cache_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
