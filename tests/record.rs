//! `--record`: a recorded request is a ready test case. Record a review,
//! then replay the written case as the golden tests do: same answer.

mod common;

use std::sync::Arc;
use std::time::Duration;

use ownerguard::decide::{Policy, WebhookKind};
use ownerguard::observe::Metrics;
use ownerguard::observe::Recorder;
use ownerguard::observe::fixture::{self, CaseConfig};
use ownerguard::owner::{Finished, ObservedPod};
use ownerguard::owner::{Inventory, InventoryPod};
use ownerguard::webhook::Webhook;
use serde_json::{Value, json};

const UID: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";

fn review(owner: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": format!("rec-{owner}"), "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "namespace": "agents", "operation": "CREATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "generateName": "prompt-", "namespace": "agents",
            "labels": {"ownerguard.io/owner-pod": owner, "ownerguard.io/owner-uid": UID},
            "managedFields": [{"manager": "worker", "operation": "Update", "fieldsV1": {"f:data": {}}}]},
            "data": {"p": "x"}}}})
}

#[tokio::test]
async fn recorded_requests_replay_to_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = Inventory::from_pods([
        InventoryPod {
            namespace: "agents".into(),
            name: "w-1".into(),
            pod: ObservedPod::running(UID),
        },
        InventoryPod {
            namespace: "agents".into(),
            name: "w-2".into(),
            pod: ObservedPod::running("other"),
        },
        // Rule 11: a finished owner; its phase must survive the round trip.
        InventoryPod {
            namespace: "agents".into(),
            name: "w-evicted".into(),
            pod: ObservedPod {
                finished: Some(Finished::Failed),
                ..ObservedPod::running(UID)
            },
        },
    ]);
    let webhook = Webhook::new(
        Policy::default(),
        Arc::new(inventory),
        Arc::new(Metrics::default()),
    )
    .with_observer(std::sync::Arc::new(Recorder::new(dir.path()).unwrap()));
    for owner in ["w-1", "w-9", "w-evicted"] {
        webhook
            .answer(
                WebhookKind::Mutate,
                &serde_json::to_vec(&review(owner)).unwrap(),
                None,
            )
            .await
            .unwrap();
    }
    // Recording happens off the request path.
    let mut cases = Vec::new();
    for _ in 0..100 {
        cases = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join(fixture::RESPONSE).exists())
            .collect();
        if cases.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cases.sort();
    assert_eq!(cases.len(), 3, "{cases:?}");
    assert!(
        cases[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("0000-create-configmap-prompt"),
        "{cases:?}"
    );

    for case in &cases {
        let request: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join(fixture::REQUEST)).unwrap())
                .unwrap();
        assert!(
            request["request"]["object"]["metadata"]
                .get("managedFields")
                .is_none(),
            "managedFields kept"
        );
        let config: CaseConfig =
            serde_saphyr::from_str(&std::fs::read_to_string(case.join(fixture::CASE)).unwrap())
                .unwrap();
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join(fixture::RESPONSE)).unwrap())
                .unwrap();
        // Only the pods looked up are written: w-2 was never asked for.
        let pods = std::fs::read_to_string(case.join(fixture::PODS)).unwrap();
        assert!(!pods.contains("w-2"), "{pods}");
        let finished_owner = request["request"]["object"]["metadata"]["labels"]["ownerguard.io/owner-pod"]
            == "w-evicted";
        assert_eq!(
            pods.contains("phase: Failed"),
            finished_owner,
            "the phase of a finished owner, and only of one, is written: {pods}"
        );
        if finished_owner {
            assert_eq!(expected["response"]["status"]["code"], 403, "{expected}");
            assert!(
                expected["response"]["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("has finished (phase Failed)"),
                "{expected}"
            );
        }
        let replay = Arc::new(common::case_webhook(case, &config));
        let (status, answer) = common::send(
            replay,
            config.webhook,
            serde_json::to_vec(&request).unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            fixture::readable_response(answer.clone()),
            expected,
            "{}",
            case.display()
        );
        let patched = fixture::patched_metadata(&request, &answer).unwrap();
        assert_eq!(patched.is_some(), case.join(fixture::PATCHED).exists());
    }
}
