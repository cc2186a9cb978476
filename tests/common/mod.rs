//! What the integration tests share: a router over a case's inventory, and
//! a way to send it a review as the API server would.

#![allow(dead_code)]

pub mod case_lookup;

pub use case_lookup::CaseLookup;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use ownerguard::decide::WebhookKind;
use ownerguard::observe::Metrics;
use ownerguard::observe::fixture::CaseConfig;
use ownerguard::owner::Inventory;
use ownerguard::webhook::Webhook;
use serde_json::Value;
use tower::ServiceExt;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The webhook of a case directory: its pods, its settings.
pub fn case_webhook(dir: &Path, config: &CaseConfig) -> Webhook {
    let pods = dir.join(ownerguard::observe::fixture::PODS);
    let inventory = if pods.exists() {
        Inventory::from_file(&pods).expect("pods.yaml")
    } else {
        Inventory::default()
    };
    let lookup = CaseLookup {
        inventory,
        failures: config
            .lookup_failures
            .iter()
            .cloned()
            .collect::<HashSet<_>>(),
    };
    Webhook::new(
        config.policy(),
        Arc::new(lookup),
        Arc::new(Metrics::default()),
    )
}

/// The webhook of a case's settings over `pods` (the case's, and what
/// controllers made since): the oracle's controller walk needs lookups to
/// find the pods it created.
pub fn webhook_over(config: &CaseConfig, pods: &[oracle::Pod]) -> Webhook {
    use ownerguard::owner::InventoryPod;
    use ownerguard::owner::{Finished, ObservedPod};
    let inventory = Inventory::from_pods(pods.iter().map(|p| InventoryPod {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        pod: ObservedPod {
            terminating: p.terminating,
            finished: p.phase.as_deref().and_then(Finished::from_phase),
            ..ObservedPod::running(p.uid.clone())
        },
    }));
    let lookup = CaseLookup {
        inventory,
        failures: config
            .lookup_failures
            .iter()
            .cloned()
            .collect::<HashSet<_>>(),
    };
    Webhook::new(
        config.policy(),
        Arc::new(lookup),
        Arc::new(Metrics::default()),
    )
}

/// POST `body` to `/<webhook>?timeout=10s` through the real router, no
/// socket; the status and the decoded JSON answer.
pub async fn send(webhook: Arc<Webhook>, kind: WebhookKind, body: Vec<u8>) -> (StatusCode, Value) {
    send_to(webhook, kind.as_str(), body).await
}

/// POST `body` to `/<path>?timeout=10s` through the real router.
pub async fn send_to(webhook: Arc<Webhook>, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let request = Request::post(format!("/{path}?timeout=10s"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = ownerguard::serve::router(webhook)
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, value)
}

/// What kube-apiserver checks of a v1 answer: the version and kind, and the
/// uid echo; the patch, if any, is base64 of a JSON Patch with its type.
pub fn assert_apiserver_accepts(request: &Value, answer: &Value, kind: WebhookKind) {
    let sent_version = request["apiVersion"]
        .as_str()
        .unwrap_or("admission.k8s.io/v1");
    assert_eq!(
        answer["apiVersion"], sent_version,
        "answered in another version"
    );
    assert_eq!(answer["kind"], "AdmissionReview");
    // A review without uid (hand-written ones) is answered with an empty one.
    let sent_uid = request["request"]["uid"].as_str().unwrap_or("");
    assert_eq!(answer["response"]["uid"], sent_uid, "uid not echoed");
    assert!(answer["response"]["allowed"].is_boolean());
    if let Some(patch) = answer["response"].get("patch") {
        assert_eq!(
            kind,
            WebhookKind::Mutate,
            "a validating answer carries a patch"
        );
        assert!(patch.is_string(), "patch is not base64 text: {patch}");
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
    }
    if answer["response"]["allowed"] == false {
        let code = answer["response"]["status"]["code"]
            .as_u64()
            .expect("denial without code");
        assert!([400, 403, 503].contains(&code), "code {code}");
        assert!(
            answer["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    for warning in answer["response"]["warnings"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert!(
            warning.as_str().unwrap().len() < 120,
            "warning too long: {warning}"
        );
    }
    for key in answer["response"]["auditAnnotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        assert!(!key.contains('/'), "audit annotation key with '/': {key}");
    }
}

pub mod process;

/// The oracle (`tests/oracle/`), shared with the fuzz target.
#[path = "../oracle/mod.rs"]
pub mod oracle;

/// The oracle's settings for a case's settings.
pub fn oracle_settings(config: &CaseConfig) -> oracle::Settings {
    let check = serde_json::to_value(config.requester_check).unwrap();
    oracle::Settings {
        key_prefix: config
            .key_prefix
            .clone()
            .unwrap_or_else(|| "ownerguard.io".into()),
        requester_check: match check.as_str() {
            Some("warn") => oracle::RequesterCheck::Warn,
            Some("off") => oracle::RequesterCheck::Off,
            _ => oracle::RequesterCheck::Enforce,
        },
        fail_open: config.fail_open,
        delegates: config.delegates.clone(),
        lookup_failures: config.lookup_failures.clone(),
        self_value: Some(ownerguard::decide::REQUESTING_POD.to_string()),
        max_pod_references: config.max_pod_references,
        mode: match config.mode {
            ownerguard::decide::Mode::Enforce => oracle::Mode::Enforce,
            ownerguard::decide::Mode::Warn => oracle::Mode::Warn,
            ownerguard::decide::Mode::Audit => oracle::Mode::Audit,
        },
        release_check: None,
        adoption_check: None,
    }
}

/// The pods of a case directory, in the oracle's terms.
pub fn oracle_pods(dir: &Path) -> Vec<oracle::Pod> {
    let path = dir.join(ownerguard::observe::fixture::PODS);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    oracle::pods_of(&documents)
}

/// The oracle's hook for a webhook.
pub fn oracle_hook(kind: WebhookKind) -> oracle::Hook {
    match kind {
        WebhookKind::Mutate => oracle::Hook::Mutate,
        WebhookKind::Validate => oracle::Hook::Validate,
        WebhookKind::ValidateAll => oracle::Hook::ValidateAll,
    }
}

/// `ownerguard serve --dev` running in `dir`, on loopback ports it picks.
pub struct Serve {
    pub child: std::process::Child,
    pub addr: String,
    pub metrics_addr: String,
    pub dir: PathBuf,
    lines: Option<std::io::Lines<std::io::BufReader<std::process::ChildStderr>>>,
}

impl Serve {
    /// Start and wait for the `serving` log line.
    pub fn start(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Self {
        let env: Vec<(&str, &std::ffi::OsStr)> =
            env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        let serving =
            process::spawn_serve(Path::new(env!("CARGO_BIN_EXE_ownerguard")), dir, args, &env);
        Self {
            child: serving.child,
            addr: serving.addr,
            metrics_addr: serving.metrics_addr,
            dir: dir.to_path_buf(),
            lines: Some(serving.lines),
        }
    }

    pub fn ca(&self) -> String {
        std::fs::read_to_string(self.dir.join("certs/ca.crt")).unwrap()
    }

    /// Read its log from now on, on a thread: the lines it wrote after
    /// `serving`, once it has exited. [`Serve::terminate`] then returns none.
    pub fn read_log_in_background(&mut self) -> std::thread::JoinHandle<Vec<String>> {
        let lines = self.lines.take();
        std::thread::spawn(move || {
            lines
                .map(|lines| lines.map_while(Result::ok).collect())
                .unwrap_or_default()
        })
    }

    /// SIGTERM; assert exit 0; the log lines written after `serving`.
    pub fn terminate(mut self) -> Vec<String> {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let exit = loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                break exit;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no exit after SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(exit.code(), Some(0), "exit after SIGTERM");
        self.lines
            .take()
            .map(|lines| lines.map_while(Result::ok).collect())
            .unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// POST a CREATE of a pod owned by w-1 (`uid`) in `agents` to `addr` over
/// TLS, trusting `ca`; the decoded answer.
pub async fn send_over_tls(addr: &str, ca: &str, uid: &str) -> Value {
    let config = process::client_tls(&[ca], None);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let port = addr.rsplit(':').next().unwrap();
    let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "e2e-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "agents", "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent-1", "labels": {"ownerguard.io/owner-pod": "w-1", "ownerguard.io/owner-uid": uid}}}}});
    let request = hyper::Request::post(format!("https://localhost:{port}/mutate?timeout=10s"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            serde_json::to_vec(&review).unwrap(),
        )))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

/// GET a plain-HTTP path; status and body.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    match client
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
        Err(_) => (0, String::new()),
    }
}

/// `ownerguard review ARGS` with `input` on standard input: the exit code,
/// the JSON printed (null when none), and what went to standard error.
pub fn review_stdin(args: &[&str], input: &str) -> (Option<i32>, Value, String) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ownerguard"))
        .arg("review")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses its arguments exits before it reads its
    // input: the pipe may then be closed under the write, which is no
    // failure of the command's (its exit code and stderr say what it did).
    let written = child.stdin.take().unwrap().write_all(input.as_bytes());
    if let Err(error) = written
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        panic!("writing the command's input: {error}");
    }
    let output = child.wait_with_output().unwrap();
    let stdout = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (
        output.status.code(),
        stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
