//! Every public AdmissionReview of `tests/fixtures/public/` (real documents
//! from other projects, see its SOURCES.md) is decided without an error, by
//! both webhooks and by `ownerguard review`. None of them declares a Pod
//! owner, so ownerguard must allow each one unchanged; the oracle
//! (`tests/oracle/`) judges every answer too.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use ownerguard::decide::WebhookKind;
use ownerguard::observe::fixture::CaseConfig;
use serde_json::{Value, json};

fn documents() -> Vec<(PathBuf, Value)> {
    let dir = common::fixtures().join("public");
    let mut documents: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("json" | "yaml")))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let value = ownerguard::commands::review::parse_document(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // Request-only files are wrapped, as SOURCES.md says to.
            let value = if value.get("request").is_none() {
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": value})
            } else {
                value
            };
            (path, value)
        })
        .collect();
    documents.sort_by(|a, b| a.0.cmp(&b.0));
    documents
}

#[tokio::test]
async fn every_public_review_is_allowed_unchanged_by_every_webhook() {
    let documents = documents();
    assert_eq!(documents.len(), 21, "the public fixtures changed");
    let webhook = Arc::new(common::case_webhook(
        &common::fixtures().join("public"),
        &CaseConfig::default(),
    ));
    for (path, review) in &documents {
        for kind in [
            WebhookKind::Mutate,
            WebhookKind::Validate,
            WebhookKind::ValidateAll,
        ] {
            let (status, answer) =
                common::send(webhook.clone(), kind, serde_json::to_vec(review).unwrap()).await;
            let name = path.file_name().unwrap().to_string_lossy();
            assert_eq!(status, 200, "{name} on /{}: {answer}", kind.as_str());
            common::assert_apiserver_accepts(review, &answer, kind);
            if let Err(wrong) = common::oracle::judge(
                review,
                &[],
                common::oracle_hook(kind),
                &common::oracle_settings(&CaseConfig::default()),
                status.as_u16(),
                &answer,
            ) {
                panic!(
                    "{name} on /{}: the oracle finds the answer wrong:\n{wrong}\nanswer: {answer}",
                    kind.as_str()
                );
            }
            assert_eq!(
                answer["response"]["allowed"],
                true,
                "{name} on /{}: {answer}",
                kind.as_str()
            );
            assert!(
                answer["response"].get("patch").is_none(),
                "{name} patched: {answer}"
            );
        }
    }
}

#[test]
fn review_command_decides_every_public_document() {
    for (path, _) in documents() {
        let output = Command::new(env!("CARGO_BIN_EXE_ownerguard"))
            .arg("review")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(answer["kind"], "AdmissionReview");
    }
}
