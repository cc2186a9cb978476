//! The soak of bench/soak.sh: `ownerguard serve` in
//! cluster mode for M minutes, against the loopback test API server
//! (tests/apiserver: paged lists, watches, live GETs) holding N pods, while
//!
//! - a steady review load runs: C HTTP/1.1 keep-alive connections at R
//!   reviews a second in all, each a 3.4 KB Pod CREATE naming one of the
//!   owners of the pool below (its labels and its requester, as a worker
//!   creating its agent); each connection is closed and opened again every
//!   20 s, so that new handshakes meet the rotated certificates;
//! - the owners churn: P owner pods in namespace `agents`, one of them
//!   replaced every 1/K s (deleted, and a new pod of another name and uid
//!   created), so the watch feeds the index and a review may name an owner
//!   its watch has not brought yet (the live GET path);
//! - the serving certificate is rotated every minute as kubelet updates a
//!   mounted Secret: a new timestamped directory, `..data` swapped to it by
//!   an atomic rename, `tls.crt` and `tls.key` symlinks through `..data`;
//! - the API server's habits: a bookmark every minute, every watch closed
//!   after 290 s (its `timeoutSeconds`);
//! - ownerguard's RSS, open fds and threads are sampled every second.
//!
//! Judged: every review answered 200, allowed, with the owner it named
//! (`auditAnnotations.owner`), within 5 s (the chart's `timeoutSeconds`);
//! a denial counts as an error unless that owner was replaced while the
//! review was in flight (then the denial is right, and counted apart). A
//! handshake more than 10 s after a rotation that still shows the previous
//! certificate is an error (ownerguard polls its files every 5 s). Each
//! rotation must be logged as reloaded.
//!
//!   soak --minutes M [--pods N] [--owners P] [--churn K] [--rate R]
//!        [--connections C] [--samples FILE] [--body FILE]
//!
//! Prints a table a minute, then the summary, then one JSON line. Exit 0
//! when all is as it must be, 2 when not (errors, late answers, missed
//! rotations), 1 when the run itself failed.
//!
//! Talks to ownerguard only through its command line, ports, log and /proc.

#[path = "../tests/apiserver/mod.rs"]
mod apiserver;
#[path = "support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// The API server's wait for this webhook (the chart's `timeoutSeconds`).
const LATE: Duration = Duration::from_secs(5);
/// How long after a rotation a handshake may still show the old
/// certificate: ownerguard's 5 s polling, and margin.
const ROTATION_GRACE: Duration = Duration::from_secs(10);
/// Each load connection is opened again after this.
const RECONNECT_EVERY: Duration = Duration::from_secs(20);
const ROTATE_EVERY: Duration = Duration::from_secs(60);
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
const WATCH_CLOSED_EVERY: Duration = Duration::from_secs(290);
const OWNER_NAMESPACE: &str = "agents";
/// In bench/review-create-3k.json: the owner, the requester pod, the uid.
const TEMPLATE_OWNER: &str = "worker-0";
const TEMPLATE_OWNER_UID: &str = "3c5b1f4e-8a0d-4f6e-9b1a-2d7c0e4f5a61";
const TEMPLATE_REQUEST_UID: &str = "5f2c7a1e-9b3d-4c8e-a6f1-0d2e4b6c8a90";

struct Options {
    minutes: f64,
    pods: usize,
    owners: usize,
    churn: f64,
    rate: f64,
    connections: usize,
    samples: Option<PathBuf>,
    body: PathBuf,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        minutes: 10.0,
        pods: 150_000,
        owners: 200,
        churn: 5.0,
        rate: 200.0,
        connections: 8,
        samples: None,
        body: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/bench/review-create-3k.json"
        )),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--minutes" => o.minutes = number(&value)?,
            "--pods" => o.pods = number(&value)? as usize,
            "--owners" => o.owners = (number(&value)? as usize).max(1),
            "--churn" => o.churn = number(&value)?,
            "--rate" => o.rate = number(&value)?.max(1.0),
            "--connections" => o.connections = (number(&value)? as usize).max(1),
            "--samples" => o.samples = Some(PathBuf::from(value)),
            "--body" => o.body = PathBuf::from(value),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

/// One owner slot of the pool: the pod that holds it now.
#[derive(Clone)]
struct Owner {
    name: String,
    uid: String,
    generation: u64,
}

fn uid(n: u64) -> String {
    let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        (x >> 32) as u32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        (x >> 52) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

/// Background pods, as in bench/cache.sh.
fn background_pods(count: usize) -> Vec<(String, String, String)> {
    (0..count)
        .map(|i| {
            (
                format!("team-{:04}", i % 1000),
                format!("worker-7d9f8c6b5-{i:05x}"),
                uid(1_000_000_000 + i as u64),
            )
        })
        .collect()
}

// --- The serving certificate, rotated as kubelet rotates a Secret volume.

struct Rotation {
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    count: u64,
}

impl Rotation {
    fn new(dir: &Path) -> Result<Self, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "soak CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&key).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        Ok(Self {
            dir: dir.to_path_buf(),
            issuer: Issuer::new(params, key),
            ca_pem: ca.pem(),
            count: 0,
        })
    }

    /// A new leaf for localhost, written kubelet's way; the tail of its DER
    /// (which tells certificates apart).
    fn rotate(&mut self) -> Result<Vec<u8>, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            CertificateParams::new(vec!["localhost".to_string()]).map_err(|e| e.to_string())?;
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        params
            .distinguished_name
            .push(DnType::CommonName, format!("soak {}", self.count));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| e.to_string())?;
        let der = cert.der().to_vec();
        self.count += 1;
        // ..<timestamp>/ with the files, ..data -> it by rename, the names
        // through ..data (made once).
        let stamp = format!("..2026_12_01_00_00_{:06}", self.count);
        let fresh = self.dir.join(&stamp);
        std::fs::create_dir(&fresh).map_err(|e| e.to_string())?;
        std::fs::write(fresh.join("tls.crt"), cert.pem()).map_err(|e| e.to_string())?;
        std::fs::write(fresh.join("tls.key"), key.serialize_pem()).map_err(|e| e.to_string())?;
        let data = self.dir.join("..data");
        let old = std::fs::read_link(&data).ok();
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&stamp, &tmp).map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &data).map_err(|e| e.to_string())?;
        for name in ["tls.crt", "tls.key"] {
            let link = self.dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(name), &link)
                    .map_err(|e| e.to_string())?;
            }
        }
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(self.dir.join(old));
        }
        Ok(der[der.len().saturating_sub(32)..].to_vec())
    }
}

// --- ownerguard, as a child process.

#[derive(Default)]
struct Log {
    decisions: AtomicU64,
    reloads: AtomicU64,
    warnings: AtomicU64,
    first_warnings: Mutex<Vec<String>>,
}

struct Guard {
    child: Child,
    addr: String,
    metrics: String,
    log: Arc<Log>,
}

fn spawn_guard(dir: &Path, certs: &Path, kubeconfig: &Path) -> Result<Guard, String> {
    let binary = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .parent()
        .and_then(Path::parent)
        .ok_or("no target directory")?
        .join("ownerguard");
    let mut child = Command::new(&binary)
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--log-format", "json", "--tls-cert"])
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .env("KUBECONFIG", kubeconfig)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
    let serving: serde_json::Value = loop {
        let Some(Ok(line)) = lines.next() else {
            return Err("ownerguard exited before serving".into());
        };
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if event["message"] == "serving" {
            break event;
        }
    };
    let log = Arc::new(Log::default());
    let counts = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("\"message\":\"decision\"") {
                counts.decisions.fetch_add(1, Ordering::Relaxed);
            } else if line.contains("serving certificate reloaded") {
                counts.reloads.fetch_add(1, Ordering::Relaxed);
            } else if line.contains("\"level\":\"WARN\"") || line.contains("\"level\":\"ERROR\"") {
                counts.warnings.fetch_add(1, Ordering::Relaxed);
                let mut first = counts.first_warnings.lock().unwrap();
                if first.len() < 5 {
                    first.push(line.chars().take(300).collect());
                }
            }
        }
    });
    let text = |key: &str| serving[key].as_str().unwrap_or_default().to_string();
    Ok(Guard {
        child,
        addr: text("addr"),
        metrics: text("metrics_addr"),
        log,
    })
}

fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text.split_once("\r\n\r\n")?.1.to_string()))
}

/// Sum of a metric's samples whose labels contain `labels`.
fn metric(metrics: &str, name: &str, labels: &str) -> f64 {
    let Some((_, body)) = http_get(metrics, "/metrics") else {
        return f64::NAN;
    };
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// --- The load.

#[derive(Default)]
struct Tally {
    answers: AtomicU64,
    errors: AtomicU64,
    late: AtomicU64,
    raced: AtomicU64,
    handshakes: AtomicU64,
    stale_certificates: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
    first_errors: Mutex<Vec<String>>,
}

impl Tally {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().unwrap();
        if first.len() < 8 {
            first.push(what);
        }
    }
}

/// Certificates served so far: (when written, DER tail), oldest first.
type Certificates = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

struct Load {
    addr: String,
    tls: Arc<rustls::ClientConfig>,
    template: String,
    owners: Arc<Vec<Mutex<Owner>>>,
    certificates: Certificates,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    period: Duration,
    sequence: AtomicU64,
}

impl Load {
    /// A handshake; the certificate shown checked against the rotations.
    async fn connect(&self) -> Option<support::Connection> {
        match support::connect(&self.addr, "localhost", self.tls.clone()).await {
            Ok(connection) => {
                self.tally.handshakes.fetch_add(1, Ordering::Relaxed);
                let certificates = self.certificates.lock().unwrap();
                let shown = certificates
                    .iter()
                    .position(|(_, tail)| *tail == connection.certificate);
                let newest = certificates.len() - 1;
                match shown {
                    Some(i) if i < newest && certificates[newest].0.elapsed() > ROTATION_GRACE => {
                        self.tally
                            .stale_certificates
                            .fetch_add(1, Ordering::Relaxed);
                        self.tally.error(format!(
                            "handshake {:.0} s after rotation {newest} still shows certificate {i}",
                            certificates[newest].0.elapsed().as_secs_f64()
                        ));
                    }
                    None => self.tally.error("a certificate never written".into()),
                    _ => {}
                }
                Some(connection)
            }
            Err(e) => {
                self.tally.error(e);
                None
            }
        }
    }

    async fn drive(self: Arc<Self>, offset: Duration) {
        let mut due = Instant::now() + offset;
        let mut connection: Option<(support::Connection, Instant)> = None;
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ offset.as_nanos() as u64;
        while !self.stop.load(Ordering::Relaxed) {
            due += self.period;
            tokio::time::sleep_until(due.into()).await;
            if connection
                .as_ref()
                .is_some_and(|(_, opened)| opened.elapsed() > RECONNECT_EVERY)
            {
                connection = None;
            }
            if connection.is_none() {
                connection = self.connect().await.map(|c| (c, Instant::now()));
            }
            let Some((open, _)) = connection.as_mut() else {
                continue;
            };
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let slot = (state % self.owners.len() as u64) as usize;
            let owner = self.owners[slot].lock().unwrap().clone();
            let request_uid = uid(self.sequence.fetch_add(1, Ordering::Relaxed));
            let body = self
                .template
                .replace(TEMPLATE_REQUEST_UID, &request_uid)
                .replace(TEMPLATE_OWNER_UID, &owner.uid)
                .replace(TEMPLATE_OWNER, &owner.name);
            let answer =
                support::post(open, &self.addr, "/mutate?timeout=5s", Bytes::from(body)).await;
            let latency = due.elapsed();
            match answer {
                Err(e) => {
                    self.tally.error(format!("{} (owner {})", e, owner.name));
                    connection = None;
                }
                Ok(answer) => {
                    self.tally.answers.fetch_add(1, Ordering::Relaxed);
                    self.tally.latencies.lock().unwrap().push(latency);
                    if latency > LATE {
                        self.tally.late.fetch_add(1, Ordering::Relaxed);
                    }
                    let expected = format!("{OWNER_NAMESPACE}/{}/{}", owner.name, owner.uid);
                    let right = answer.status == 200
                        && support::contains(&answer.body, b"\"allowed\":true")
                        && support::contains(&answer.body, expected.as_bytes())
                        && support::contains(&answer.body, request_uid.as_bytes());
                    let replaced = self.owners[slot].lock().unwrap().generation != owner.generation;
                    if right {
                    } else if replaced && support::contains(&answer.body, b"\"allowed\":false") {
                        self.tally.raced.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let text = String::from_utf8_lossy(&answer.body);
                        self.tally.error(format!(
                            "HTTP {} for owner {}: {}",
                            answer.status,
                            owner.name,
                            text.chars().take(400).collect::<String>()
                        ));
                    }
                }
            }
        }
    }
}

/// Replace one owner every `every`: mark the slot, delete the pod, create
/// its successor, publish it.
async fn churn(
    api: apiserver::FakeApi,
    owners: Arc<Vec<Mutex<Owner>>>,
    every: Duration,
    stop: Arc<AtomicBool>,
    replaced: Arc<AtomicU64>,
) {
    let mut next = 0usize;
    let mut serial = owners.len() as u64;
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let slot = next % owners.len();
        next += 1;
        serial += 1;
        let old = {
            let mut owner = owners[slot].lock().unwrap();
            owner.generation += 1;
            owner.name.clone()
        };
        api.remove(apiserver::Kind::Pod, OWNER_NAMESPACE, &old);
        let name = format!("worker-{serial}");
        let fresh_uid = uid(serial);
        api.put_pod(OWNER_NAMESPACE, &name, &fresh_uid);
        let mut owner = owners[slot].lock().unwrap();
        owner.name = name;
        owner.uid = fresh_uid;
        owner.generation += 1;
        replaced.fetch_add(1, Ordering::Relaxed);
    }
}

/// Least-squares slope of (seconds, KiB), in KiB per minute.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den * 60.0 }
}

fn proc_kb(pid: u32, field: &str) -> u64 {
    support::proc_kb(pid, field).unwrap_or(0)
}

async fn run(options: Options) -> Result<bool, String> {
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let server = apiserver::FakeApi::start().await;
    let api = server.api.clone();
    eprintln!(
        "soak: {} background pods, {} owners",
        options.pods, options.owners
    );
    api.load_pods(background_pods(options.pods));
    let owners: Vec<Mutex<Owner>> = (0..options.owners)
        .map(|i| {
            let owner = Owner {
                name: format!("worker-{i}"),
                uid: uid(i as u64),
                generation: 0,
            };
            api.put_pod(OWNER_NAMESPACE, &owner.name, &owner.uid);
            Mutex::new(owner)
        })
        .collect();
    let owners = Arc::new(owners);
    let kubeconfig = server.kubeconfig(work.path());
    let mut rotation = Rotation::new(&work.path().join("tls"))?;
    let certificates: Certificates =
        Arc::new(Mutex::new(vec![(Instant::now(), rotation.rotate()?)]));
    let ca = rotation.ca_pem.clone();
    let mut guard = spawn_guard(work.path(), &work.path().join("tls"), &kubeconfig)?;
    let pid = guard.child.id();
    let started = Instant::now();
    while http_get(&guard.metrics, "/readyz").is_none_or(|(s, _)| s != 200) {
        if guard.child.try_wait().map_err(|e| e.to_string())?.is_some() {
            return Err("ownerguard exited before it was ready".into());
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err("not ready after 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "soak: ready after {:.1} s; {:.0} minutes of load",
        started.elapsed().as_secs_f64(),
        options.minutes
    );

    let template = std::fs::read_to_string(&options.body)
        .map_err(|e| format!("{}: {e}", options.body.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = Arc::new(Load {
        addr: guard.addr.clone(),
        tls: support::tls_client(ca.as_bytes())?,
        template,
        owners: owners.clone(),
        certificates: certificates.clone(),
        tally: tally.clone(),
        stop: stop.clone(),
        period: Duration::from_secs_f64(options.connections as f64 / options.rate),
        sequence: AtomicU64::new(1),
    });
    let drivers: Vec<_> = (0..options.connections)
        .map(|i| {
            let offset = Duration::from_secs_f64(i as f64 / options.rate);
            tokio::spawn(load.clone().drive(offset))
        })
        .collect();
    let replaced = Arc::new(AtomicU64::new(0));
    let churner = tokio::spawn(churn(
        api.clone(),
        owners.clone(),
        Duration::from_secs_f64(1.0 / options.churn.max(0.001)),
        stop.clone(),
        replaced.clone(),
    ));

    let mut samples = match &options.samples {
        Some(path) => {
            let mut file = std::fs::File::create(path).map_err(|e| e.to_string())?;
            let _ = writeln!(file, "seconds\trss_kib\tfds\tthreads\tanswers\terrors");
            Some(file)
        }
        None => None,
    };
    let mut points: Vec<(f64, f64)> = Vec::new();
    let load_started = Instant::now();
    let duration = Duration::from_secs_f64(options.minutes * 60.0);
    let (mut last_rotation, mut last_bookmark, mut last_close) =
        (load_started, load_started, load_started);
    let mut rotations = 0u64;
    println!();
    println!(
        "| minute | RSS | fds | threads | answers | errors | late | denied in a churn race | handshakes | rotations / reloads logged |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut next_minute = 1;
    while load_started.elapsed() < duration {
        ticker.tick().await;
        if guard.child.try_wait().map_err(|e| e.to_string())?.is_some() {
            stop.store(true, Ordering::Relaxed);
            return Err("ownerguard exited during the soak".into());
        }
        let now = Instant::now();
        if now.duration_since(last_rotation) >= ROTATE_EVERY {
            let tail = rotation.rotate()?;
            certificates.lock().unwrap().push((Instant::now(), tail));
            rotations += 1;
            last_rotation = now;
        }
        if now.duration_since(last_bookmark) >= BOOKMARK_EVERY {
            api.bookmark();
            last_bookmark = now;
        }
        if now.duration_since(last_close) >= WATCH_CLOSED_EVERY {
            api.drop_watches();
            last_close = now;
        }
        let t = load_started.elapsed().as_secs_f64();
        let rss = proc_kb(pid, "VmRSS");
        let fds = support::fd_count(pid).unwrap_or(0);
        let threads = proc_kb(pid, "Threads");
        let (answers, errors) = (
            tally.answers.load(Ordering::Relaxed),
            tally.errors.load(Ordering::Relaxed),
        );
        points.push((t, rss as f64));
        if let Some(file) = samples.as_mut() {
            let _ = writeln!(file, "{t:.0}\t{rss}\t{fds}\t{threads}\t{answers}\t{errors}");
        }
        if t >= f64::from(next_minute) * 60.0 - 0.5 {
            println!(
                "| {next_minute} | {:.1} MiB | {fds} | {threads} | {answers} | {errors} | {} | {} | {} | {rotations} / {} |",
                rss as f64 / 1024.0,
                tally.late.load(Ordering::Relaxed),
                tally.raced.load(Ordering::Relaxed),
                tally.handshakes.load(Ordering::Relaxed),
                guard.log.reloads.load(Ordering::Relaxed),
            );
            next_minute += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for driver in drivers {
        let _ = driver.await;
    }
    let _ = churner.await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let live_lookups = metric(
        &guard.metrics,
        "ownerguard_owner_lookups_total",
        "source=\"api\"",
    );
    let cache_lookups = metric(
        &guard.metrics,
        "ownerguard_owner_lookups_total",
        "source=\"cache\"",
    );
    let reload_failures = metric(&guard.metrics, "ownerguard_tls_reload_failures_total", "");
    let cached = metric(&guard.metrics, "ownerguard_owner_cache_pods", "");
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = guard.child.wait();

    // Drift: after the first minute (start-up, warm caches), per minute.
    let steady: Vec<(f64, f64)> = points.iter().copied().filter(|(t, _)| *t >= 60.0).collect();
    let (low, high) = steady.iter().fold((f64::MAX, 0.0f64), |(lo, hi), (_, y)| {
        (lo.min(*y), hi.max(*y))
    });
    let drift = slope(&steady);
    let first = steady.first().map_or(0.0, |p| p.1);
    let last = steady.last().map_or(0.0, |p| p.1);
    let mut latencies = std::mem::take(&mut *tally.latencies.lock().unwrap());
    let summary = support::Summary::of(&mut latencies);
    let (answers, errors, late, raced) = (
        tally.answers.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed),
        tally.late.load(Ordering::Relaxed),
        tally.raced.load(Ordering::Relaxed),
    );
    let reloads = guard.log.reloads.load(Ordering::Relaxed);
    let mib = |kb: f64| kb / 1024.0;
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| load | {:.0} reviews/s on {} HTTP/1.1 keep-alive connections (each opened again every {} s), {:.0} minutes |",
        options.rate,
        options.connections,
        RECONNECT_EVERY.as_secs(),
        options.minutes
    );
    println!(
        "| cluster | {} background pods; {} owners, one replaced every {:.2} s ({} replaced); a bookmark a minute, watches closed every {} s |",
        options.pods,
        options.owners,
        1.0 / options.churn,
        replaced.load(Ordering::Relaxed),
        WATCH_CLOSED_EVERY.as_secs()
    );
    println!(
        "| answers / errors / late (over {} s) | {answers} / {errors} / {late} |",
        LATE.as_secs()
    );
    println!("| denied because the owner was replaced while in flight (right) | {raced} |");
    println!(
        "| latency p50 / p99 / p99.9 / max | {:.2} / {:.2} / {:.2} / {:.2} ms |",
        summary.p50, summary.p99, summary.p999, summary.max
    );
    println!("| owner lookups: from the cache / live | {cache_lookups:.0} / {live_lookups:.0} |");
    println!(
        "| certificate rotations / reloads logged / reload failures counted / handshakes still on an old certificate after {} s | {rotations} / {reloads} / {reload_failures:.0} / {} |",
        ROTATION_GRACE.as_secs(),
        tally.stale_certificates.load(Ordering::Relaxed)
    );
    println!(
        "| RSS after the first minute: first / last / low / high | {:.1} / {:.1} / {:.1} / {:.1} MiB |",
        mib(first),
        mib(last),
        mib(low),
        mib(high)
    );
    println!("| RSS drift (least squares, after the first minute) | {drift:+.1} KiB per minute |");
    println!(
        "| decision lines logged / warnings logged | {} / {} |",
        guard.log.decisions.load(Ordering::Relaxed),
        guard.log.warnings.load(Ordering::Relaxed)
    );
    println!("| pods in the cache at the end | {cached:.0} |");
    for error in tally.first_errors.lock().unwrap().iter() {
        eprintln!("soak: error: {error}");
    }
    for warning in guard.log.first_warnings.lock().unwrap().iter() {
        eprintln!("soak: ownerguard warned: {warning}");
    }
    println!(
        "{{\"answers\":{answers},\"errors\":{errors},\"late\":{late},\"raced\":{raced},\"rotations\":{rotations},\"reloads\":{reloads},\"drift_kib_per_minute\":{drift:.1},\"rss_first_mib\":{:.1},\"rss_last_mib\":{:.1},\"p99_ms\":{:.2}}}",
        mib(first),
        mib(last),
        summary.p99
    );
    Ok(errors == 0 && late == 0 && reloads >= rotations)
}

fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("soak: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(options)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(2),
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
