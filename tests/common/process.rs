//! `ownerguard serve` as a child process, and a TLS client that trusts its
//! CA: shared by the tests and the benchmarks (`examples/*_bench.rs`
//! include this file by path).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A running `ownerguard serve --dev` on loopback ports it picked.
pub struct Serving {
    pub child: Child,
    pub addr: String,
    pub metrics_addr: String,
    /// Its log lines after `serving` (JSON, one per line).
    pub lines: Lines<BufReader<ChildStderr>>,
}

/// Start `binary serve --dev` in `dir` with `args` and `env`, logging JSON,
/// and wait for its `serving` line.
///
/// # Panics
///
/// When it cannot start or exits before serving.
pub fn spawn_serve(
    binary: &Path,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Serving {
    let mut command = Command::new(binary);
    command
        .args([
            "serve",
            "--dev",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let serving: serde_json::Value = loop {
        let line = lines
            .next()
            .expect("ownerguard exited before serving")
            .unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if event["message"] == "serving" {
            break event;
        }
    };
    let addr = serving["addr"].as_str().unwrap().to_string();
    let metrics_addr = serving["metrics_addr"].as_str().unwrap().to_string();
    Serving {
        child,
        addr,
        metrics_addr,
        lines,
    }
}

/// A rustls client configuration trusting the PEM CAs `cas`, presenting
/// the client certificate `identity` (PEM chain, PEM key) if given.
pub fn client_tls(cas: &[&str], identity: Option<(&str, &str)>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for pem in cas {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => {
            let chain = CertificateDer::pem_slice_iter(chain.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    }
}

/// The release build of `ownerguard`, beside the running benchmark
/// (`target/release/examples/x` -> `target/release/ownerguard`).
pub fn release_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .unwrap()
        .join("ownerguard")
}

/// The resident memory of process `pid` ("self" for this one), in bytes.
pub fn rss_bytes(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
