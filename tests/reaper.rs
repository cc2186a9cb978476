//! The reaper (`serve --reap-finished`) against the loopback API server: a
//! worker that finishes has what it owns released after the grace period,
//! not before; one replaced in between is another pod; of two replicas,
//! only the Lease's holder reaps.

mod apiserver;

use std::sync::Arc;
use std::time::Duration;

use apiserver::{FakeApi, Kind, eventually};
use ownerguard::commands::reaper::{self, LeaseSettings, ReaperSettings};
use ownerguard::observe::Metrics;
use ownerguard::owner::{WatchSettings, Watches};
use serde_json::json;
use tokio::time::Instant;

const NS: &str = "agents";
const W1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
const W2: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";

fn settings(identity: &str, after: Duration) -> ReaperSettings {
    ReaperSettings {
        after,
        lease: LeaseSettings {
            namespace: "ownerguard".into(),
            name: "ownerguard-reaper".into(),
            identity: identity.into(),
            duration: Duration::from_millis(900),
        },
        retry_after: Duration::from_millis(300),
    }
}

/// A reaper as `serve` starts one: watches of the cluster, then the
/// reaper on their finished pods.
async fn start(
    server: &apiserver::Running,
    identity: &str,
    after: Duration,
) -> (Arc<Metrics>, tokio::task::JoinHandle<()>) {
    let metrics = Arc::new(Metrics::default());
    let watches = Arc::new(Watches::spawn(
        server.serve_client(),
        &WatchSettings::default(),
        metrics.clone(),
    ));
    eventually("the watches", || watches.is_synced()).await;
    let task = tokio::spawn(reaper::run(
        server.serve_client(),
        watches.finished.clone(),
        settings(identity, after),
        metrics.clone(),
        None,
    ));
    (metrics, task)
}

/// Worker `name` with an agent pod and a ConfigMap it owns.
fn worker(api: &FakeApi, name: &str, uid: &str) {
    api.put_pod(NS, name, uid);
    let labels = json!({"ownerguard.io/owner-pod": name, "ownerguard.io/owner-uid": uid});
    api.put(
        Kind::ConfigMap,
        NS,
        &format!("{name}-prompt"),
        &format!("cm-{name}"),
        labels.clone(),
        &[uid],
    );
    api.put(
        Kind::Pod,
        NS,
        &format!("{name}-agent"),
        &format!("agent-{name}"),
        labels,
        &[uid],
    );
}

/// Whether the replica of `metrics` says it holds the Lease.
fn leads(metrics: &Metrics) -> bool {
    metrics
        .encode()
        .lines()
        .any(|line| line == "ownerguard_reaper_leader 1")
}

fn deletes(api: &FakeApi, name: &str) -> usize {
    api.calls_matching(&format!(
        "DELETE /api/v1/namespaces/agents/configmaps/{name}-prompt"
    ))
    .len()
}

#[tokio::test]
async fn a_finished_worker_is_reaped_after_the_grace_period_not_before() {
    let server = FakeApi::start().await;
    worker(&server.api, "w-1", W1);
    let after = Duration::from_millis(1_500);
    let (metrics, _task) = start(&server, "replica-a", after).await;
    server.api.set_pod_phase(NS, "w-1", "Failed");
    let finished_at = Instant::now();
    tokio::time::sleep(after / 2).await;
    assert!(
        server.api.exists(Kind::ConfigMap, NS, "w-1-prompt"),
        "reaped within the grace period"
    );
    eventually("the reaping", || {
        !server.api.exists(Kind::ConfigMap, NS, "w-1-prompt")
    })
    .await;
    assert!(finished_at.elapsed() >= after);
    assert!(!server.api.exists(Kind::Pod, NS, "w-1-agent"));
    // The finished worker itself is left: only what it owns goes.
    assert!(server.api.exists(Kind::Pod, NS, "w-1"));
    eventually("the counts", || {
        let text = metrics.encode();
        text.contains(r#"ownerguard_reaped_objects_total{resource="configmaps"} 1"#)
            && text.contains(r#"ownerguard_reaped_objects_total{resource="pods"} 1"#)
            && leads(&metrics)
    })
    .await;
}

#[tokio::test]
async fn a_pod_replaced_under_its_name_before_the_grace_period_is_not_reaped() {
    let server = FakeApi::start().await;
    worker(&server.api, "w-1", W1);
    let after = Duration::from_millis(1_200);
    let (_metrics, _task) = start(&server, "replica-a", after).await;
    server.api.set_pod_phase(NS, "w-1", "Succeeded");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Deleted and made anew under the name: what the first one owned goes
    // with the collector, not by the reaper's hand; the new one runs.
    server.api.remove(Kind::Pod, NS, "w-1");
    server.api.put_pod(NS, "w-1", W2);
    tokio::time::sleep(after + Duration::from_millis(800)).await;
    assert_eq!(deletes(&server.api, "w-1"), 0);
    assert!(server.api.exists(Kind::ConfigMap, NS, "w-1-prompt"));
}

#[tokio::test]
async fn of_two_replicas_only_the_leases_holder_reaps() {
    let server = FakeApi::start().await;
    worker(&server.api, "w-1", W1);
    worker(&server.api, "w-2", W2);
    let after = Duration::from_millis(300);
    let (a, _ta) = start(&server, "replica-a", after).await;
    let (b, _tb) = start(&server, "replica-b", after).await;
    let leaders = || [&a, &b].iter().filter(|m| leads(m)).count();
    eventually("a leader", || leaders() == 1).await;
    server.api.set_pod_phase(NS, "w-1", "Failed");
    server.api.set_pod_phase(NS, "w-2", "Succeeded");
    eventually("both reaped", || {
        !server.api.exists(Kind::ConfigMap, NS, "w-1-prompt")
            && !server.api.exists(Kind::ConfigMap, NS, "w-2-prompt")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(leaders(), 1);
    // Each deleted once, by one replica: the other never held the Lease.
    assert_eq!(deletes(&server.api, "w-1"), 1);
    assert_eq!(deletes(&server.api, "w-2"), 1);
    let lease = server
        .api
        .object(Kind::Lease, "ownerguard", "ownerguard-reaper")
        .unwrap();
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    let (leader, other) = if holder == "replica-a" {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert!(
        leader
            .encode()
            .contains(r#"ownerguard_reaped_objects_total{resource="configmaps"} 2"#)
    );
    assert!(
        !other
            .encode()
            .contains(r#"ownerguard_reaped_objects_total{resource="configmaps"}"#)
    );
}

#[tokio::test]
async fn a_dead_holders_lease_renewed_in_the_future_is_taken_once_it_stops_changing() {
    // A holder whose clock ran an hour ahead wrote a renewTime in the
    // future, then died: expiry is timed on this replica's clock from when
    // the record was first seen unchanged, never from that date.
    let server = FakeApi::start().await;
    worker(&server.api, "w-1", W1);
    let future = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_secs(3600))
    .to_string();
    server.api.put_object(
        Kind::Lease,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "ownerguard-reaper", "namespace": "ownerguard", "uid": "lease-1"},
            "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 1,
                "renewTime": future, "acquireTime": future, "leaseTransitions": 0}}),
    );
    let (metrics, _task) = start(&server, "replica-a", Duration::from_millis(200)).await;
    server.api.set_pod_phase(NS, "w-1", "Failed");
    let started = Instant::now();
    eventually("the Lease taken and w-1 reaped", || {
        leads(&metrics) && !server.api.exists(Kind::ConfigMap, NS, "w-1-prompt")
    })
    .await;
    // Not before the record had stayed unchanged for its second.
    assert!(started.elapsed() >= Duration::from_millis(900));
    let lease = server
        .api
        .object(Kind::Lease, "ownerguard", "ownerguard-reaper")
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
}

#[tokio::test]
async fn a_pass_whose_pods_take_long_to_go_keeps_one_replica_reaping() {
    // Pods linger 3 s after their delete, three times the Lease: the
    // holder must keep renewing through its pass, so that the other never
    // takes over and deletes the same objects again.
    let server = FakeApi::start().await;
    for (name, uid) in [("w-1", W1), ("w-2", W2)] {
        worker(&server.api, name, uid);
    }
    server
        .api
        .update_faults(|f| f.pod_linger = Duration::from_secs(3));
    let after = Duration::from_millis(200);
    let (a, _ta) = start(&server, "replica-a", after).await;
    let (b, _tb) = start(&server, "replica-b", after).await;
    eventually("a leader", || leads(&a) != leads(&b)).await;
    server.api.set_pod_phase(NS, "w-1", "Failed");
    server.api.set_pod_phase(NS, "w-2", "Failed");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        assert!(!(leads(&a) && leads(&b)), "both replicas lead");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for name in ["w-1", "w-2"] {
        assert_eq!(deletes(&server.api, name), 1, "{name}-prompt");
        let agent = format!("DELETE /api/v1/namespaces/agents/pods/{name}-agent?");
        assert_eq!(server.api.calls_matching(&agent).len(), 1, "{name}-agent");
    }
    let lease = server
        .api
        .object(Kind::Lease, "ownerguard", "ownerguard-reaper")
        .unwrap();
    assert_eq!(
        lease["spec"]["leaseTransitions"], 0,
        "the Lease changed hands"
    );
}

#[tokio::test]
async fn a_reap_that_left_something_is_tried_again() {
    let server = FakeApi::start().await;
    worker(&server.api, "w-1", W1);
    server
        .api
        .update_faults(|f| f.delete_fails = Some((Kind::ConfigMap, None, 500)));
    let (metrics, _task) = start(&server, "replica-a", Duration::from_millis(200)).await;
    server.api.set_pod_phase(NS, "w-1", "Failed");
    eventually("a failed try", || deletes(&server.api, "w-1") >= 1).await;
    eventually("the failure counted", || {
        metrics
            .encode()
            .contains(r#"ownerguard_reap_failures_total{resource="configmaps"} "#)
    })
    .await;
    server.api.update_faults(|f| f.delete_fails = None);
    eventually("the retry", || {
        !server.api.exists(Kind::ConfigMap, NS, "w-1-prompt")
    })
    .await;
    // The agent pod went at the first try and is not deleted again.
    assert_eq!(
        server
            .api
            .calls_matching("DELETE /api/v1/namespaces/agents/pods/w-1-agent?")
            .len(),
        1
    );
}

#[tokio::test]
async fn an_object_of_two_workers_is_reaped_once_both_have_finished() {
    // Kept while w-2 runs (it owns it too); taken when w-2 finishes in
    // turn, though w-1's pod object, finished, still names it.
    let server = FakeApi::start().await;
    worker(&server.api, "w-1", W1);
    worker(&server.api, "w-2", W2);
    server.api.put(
        Kind::ConfigMap,
        NS,
        "shared",
        "cm-shared",
        json!({}),
        &[W1, W2],
    );
    let (_metrics, _task) = start(&server, "replica-a", Duration::from_millis(200)).await;
    server.api.set_pod_phase(NS, "w-1", "Failed");
    eventually("w-1 reaped", || {
        !server.api.exists(Kind::ConfigMap, NS, "w-1-prompt")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        server.api.exists(Kind::ConfigMap, NS, "shared"),
        "taken from a running co-owner"
    );
    server.api.set_pod_phase(NS, "w-2", "Succeeded");
    eventually("shared reaped with w-2", || {
        !server.api.exists(Kind::ConfigMap, NS, "shared")
    })
    .await;
}
