//! What the integration tests share: a router over a case's inventory, and
//! a way to send it a review as the API server would.

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use ownerguard::admit::WebhookKind;
use ownerguard::fixture::{CaseConfig, CaseLookup};
use ownerguard::metrics::Metrics;
use ownerguard::owner::inventory::Inventory;
use ownerguard::review;
use ownerguard::webhook::Webhook;
use serde_json::Value;
use tower::ServiceExt;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The webhook of a case directory: its pods, its settings.
pub fn case_webhook(dir: &Path, config: &CaseConfig) -> Webhook {
    let pods = dir.join(ownerguard::fixture::PODS);
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

/// POST `body` to `/<webhook>?timeout=10s` through the real router, no
/// socket; the status and the decoded JSON answer.
pub async fn send(webhook: Arc<Webhook>, kind: WebhookKind, body: Vec<u8>) -> (StatusCode, Value) {
    let request = Request::post(format!("/{}?timeout=10s", kind.as_str()))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = review::router(webhook).oneshot(request).await.unwrap();
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
