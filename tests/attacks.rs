//! What the outside attacks found, kept: each review of
//! `tests/fixtures/attacks/` (the pods of its `pods.json` running in
//! namespace `agents`), sent to `/mutate` and `/validate`, and each answer
//! judged by the oracle.
//!
//! - `a*`: the statefulset controller's claim retention, under its own
//!   user (`_ss_`) and the controller manager's shared one (`_cm_`):
//!   references added to a pod gone, finished or replaced, taken back
//!   from a pod that runs again, or naming the claim's own owner.
//! - `b*`, `c*`: the shared user's updates beyond the collector's shape
//!   (a reference swapped, labels, annotations or templates changed).
//! - `u*`: bytes that are not UTF-8 where ownerguard does not read: passed
//!   over. `read-*`: where it reads, which the API server never sends
//!   (its encoder writes every typed string as UTF-8): refused 400.

mod common;

use std::sync::Arc;

use common::oracle;
use ownerguard::decide::WebhookKind;
use ownerguard::observe::fixture::CaseConfig;
use serde_json::Value;

#[tokio::test]
async fn every_attack_is_answered_as_the_oracle_demands() {
    let dir = common::fixtures().join("attacks");
    let listed: Value =
        serde_json::from_slice(&std::fs::read(dir.join("pods.json")).unwrap()).unwrap();
    let pods: Vec<oracle::Pod> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let pod = oracle::Pod::new(
                "agents",
                p["name"].as_str().unwrap(),
                p["uid"].as_str().unwrap(),
                p["terminating"].as_bool().unwrap_or(false),
            );
            match p["phase"].as_str() {
                Some(phase) => pod.in_phase(phase),
                None => pod,
            }
        })
        .collect();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap() != "pods.json")
        .collect();
    cases.sort();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let config = CaseConfig::default();
    let webhook = Arc::new(common::webhook_over(&config, &pods));
    let mut wrong = Vec::new();
    for path in cases {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let body = std::fs::read(&path).unwrap();
        let review: Value = serde_json::from_str(&String::from_utf8_lossy(&body)).unwrap();
        for kind in [WebhookKind::Mutate, WebhookKind::Validate] {
            let (status, answer) = common::send(webhook.clone(), kind, body.clone()).await;
            let verdict = if name.starts_with("read-") {
                if status == 400 {
                    Ok(())
                } else {
                    Err(format!("want HTTP 400, have {status}"))
                }
            } else {
                oracle::judge(
                    &review,
                    &pods,
                    common::oracle_hook(kind),
                    &common::oracle_settings(&config),
                    status.as_u16(),
                    &answer,
                )
            };
            if let Err(why) = verdict {
                wrong.push(format!(
                    "{name} on /{}: {why}\n  answer: {answer}",
                    kind.as_str()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
