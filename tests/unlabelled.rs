//! The observe-only view of what pods create without the owner label:
//! `/observe` through the real router, the creating pod's workload read by
//! the real kube client from the test API server, counted in the metrics.

mod apiserver;
mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use apiserver::{FakeApi, Kind};
use ownerguard::decide::Policy;
use ownerguard::observe::{Metrics, UnlabelledCreates};
use ownerguard::owner::Inventory;
use ownerguard::webhook::Webhook;

const NS: &str = "agents";

/// A CREATE of a ConfigMap in `agents`, made by `user`.
fn create(labels: Value, references: Value, user: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "7e1f0000-0000-0000-0000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "namespace": NS, "operation": "CREATE", "userInfo": user,
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "prompt", "namespace": NS, "labels": labels, "ownerReferences": references}},
        }
    }))
    .unwrap()
}

/// The user a pod-bound token of pod `name` (`uid`) shows.
fn pod_token(name: &str, uid: &str) -> Value {
    json!({
        "username": format!("system:serviceaccount:{NS}:worker"),
        "extra": {
            "authentication.kubernetes.io/pod-name": [name],
            "authentication.kubernetes.io/pod-uid": [uid],
        }
    })
}

/// The metric's samples, one line each.
fn samples(metrics: &Metrics) -> Vec<String> {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("ownerguard_unlabelled_creates_total{"))
        .map(str::to_string)
        .collect()
}

/// Wait (bounded) until the resolving task has counted `count` creates.
async fn counted(metrics: &Metrics, count: usize) -> Vec<String> {
    for _ in 0..200 {
        let lines = samples(metrics);
        let total: f64 = lines
            .iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if total as usize >= count {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("not counted: {:?}", samples(metrics));
}

fn webhook(creates: UnlabelledCreates, metrics: Arc<Metrics>) -> Arc<Webhook> {
    Arc::new(
        Webhook::new(Policy::default(), Arc::new(Inventory::default()), metrics)
            .with_unlabelled(creates),
    )
}

#[tokio::test]
async fn creates_without_the_owner_label_are_counted_by_the_creating_pods_workload() {
    let server = FakeApi::start().await;
    // A Deployment's pod (its ReplicaSet `web-7d9f8c6b5`), a StatefulSet's,
    // and a pod no controller owns.
    let rs = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8c6b5", "uid": "rs-1", "controller": true}]);
    server.api.put_object(
        Kind::Pod,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-7d9f8c6b5-x2k4p", "namespace": NS, "uid": "pod-web",
            "labels": {"pod-template-hash": "7d9f8c6b5"}, "ownerReferences": rs}}),
    );
    let sts = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "planner", "uid": "sts-1", "controller": true}]);
    server
        .api
        .put_with_references(Kind::Pod, NS, "planner-0", "pod-planner", sts);
    server.api.put_pod(NS, "adhoc", "pod-adhoc");

    let metrics = Arc::new(Metrics::default());
    let creates = UnlabelledCreates::start(server.client(), metrics.clone());
    let webhook = webhook(creates, metrics.clone());
    let unlabelled =
        |pod: &str, uid: &str| create(json!({"app": "agent"}), Value::Null, pod_token(pod, uid));
    for body in [
        unlabelled("web-7d9f8c6b5-x2k4p", "pod-web"),
        unlabelled("web-7d9f8c6b5-x2k4p", "pod-web"),
        unlabelled("planner-0", "pod-planner"),
        // With an ownerReference: some owner may collect it.
        create(
            json!({}),
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "adhoc", "uid": "pod-adhoc"}]),
            pod_token("adhoc", "pod-adhoc"),
        ),
        // A token of a pod since replaced (another uid): not its workload.
        unlabelled("planner-0", "pod-planner-before"),
    ] {
        let (status, answer) = common::send_to(webhook.clone(), "observe", body).await;
        // Allowed, unchanged, whatever it counts.
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        assert_eq!(
            answer["response"]["uid"],
            "7e1f0000-0000-0000-0000-000000000001"
        );
        assert!(answer["response"].get("patch").is_none(), "{answer}");
        assert!(answer["response"].get("warnings").is_none(), "{answer}");
    }
    // Not counted: a labelled object, a person's create, an UPDATE.
    for body in [
        create(
            json!({"ownerguard.io/owner-pod": "web-7d9f8c6b5-x2k4p"}),
            Value::Null,
            pod_token("web-7d9f8c6b5-x2k4p", "pod-web"),
        ),
        create(json!({}), Value::Null, json!({"username": "alice"})),
    ] {
        let (_, answer) = common::send_to(webhook.clone(), "observe", body).await;
        assert_eq!(answer["response"]["allowed"], true);
    }
    let mut update: Value =
        serde_json::from_slice(&unlabelled("planner-0", "pod-planner")).unwrap();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let (_, answer) = common::send_to(
        webhook.clone(),
        "observe",
        serde_json::to_vec(&update).unwrap(),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true);

    let lines = counted(&metrics, 5).await;
    let expect = |kind: &str, name: &str, referenced: &str, count: u32| {
        let line = format!(
            "ownerguard_unlabelled_creates_total{{pod_namespace=\"{NS}\",workload_kind=\"{kind}\",workload=\"{name}\",resource=\"configmaps\",referenced=\"{referenced}\"}} {count}"
        );
        assert!(lines.contains(&line), "{line} not in {lines:#?}");
    };
    expect("Deployment", "web", "false", 2);
    expect("StatefulSet", "planner", "false", 1);
    expect("Pod", "adhoc", "true", 1);
    expect("unresolved", "", "false", 1);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    // Each pod's workload was read once: the second create of web's pod
    // came from the cache.
    assert_eq!(
        server.api.calls_matching("/pods/web-7d9f8c6b5-x2k4p").len(),
        1,
        "{:?}",
        server.api.calls()
    );
}

#[tokio::test]
async fn with_no_cluster_every_create_counts_as_unresolved() {
    let metrics = Arc::new(Metrics::default());
    let webhook = webhook(
        UnlabelledCreates::unresolved(metrics.clone()),
        metrics.clone(),
    );
    let (_, answer) = common::send_to(
        webhook,
        "observe",
        create(json!({}), Value::Null, pod_token("w-1", "uid-1")),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(
        samples(&metrics),
        [format!(
            "ownerguard_unlabelled_creates_total{{pod_namespace=\"{NS}\",workload_kind=\"unresolved\",workload=\"\",resource=\"configmaps\",referenced=\"false\"}} 1"
        )]
    );
}

#[tokio::test]
async fn an_api_server_that_does_not_answer_holds_no_create() {
    let server = FakeApi::start().await;
    server.api.update_faults(|f| f.down = true);
    let metrics = Arc::new(Metrics::default());
    let client = server.serve_client();
    let creates = UnlabelledCreates::start(client, metrics.clone());
    let webhook = webhook(creates, metrics.clone());
    // More than the queue holds: every answer comes back allowed at once,
    // and every create is counted, those beyond the queue as unresolved.
    let total = ownerguard::observe::unlabelled::QUEUE + 50;
    for i in 0..total {
        let (_, answer) = common::send_to(
            webhook.clone(),
            "observe",
            create(
                json!({}),
                Value::Null,
                pod_token(&format!("w-{i}"), &format!("uid-{i}")),
            ),
        )
        .await;
        assert_eq!(answer["response"]["allowed"], true);
    }
    let lines = counted(&metrics, total).await;
    assert!(
        lines
            .iter()
            .all(|l| l.contains("workload_kind=\"unresolved\"")),
        "{lines:#?}"
    );
    // One failed GET paused the others: the API server in trouble is not
    // asked once per create.
    let gets = server.api.calls_matching("/pods/w-");
    assert_eq!(gets.len(), 1, "{gets:?}");
}
