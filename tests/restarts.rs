//! `serve --release-restarted` against the loopback API server: an
//! opted-in worker whose container restarted has what its earlier runs
//! made released, Jobs with their pods, and what its current run made
//! kept; what was made too near the restart to tell is kept; a worker
//! that did not opt in keeps everything; a second restart releases what
//! the run before it made.

mod apiserver;

use std::sync::Arc;
use std::time::Duration;

use apiserver::{FakeApi, Kind, eventually};
use ownerguard::commands::reaper::LeaseSettings;
use ownerguard::commands::restarts::{self, RestartSettings};
use ownerguard::observe::Metrics;
use serde_json::{Value, json};

const NS: &str = "agents";
const W1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
const W2: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";
const OTHER: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000003";

fn start(server: &apiserver::Running) -> (Arc<Metrics>, tokio::task::JoinHandle<()>) {
    start_with(server, false)
}

/// [`start`], recording Events on the pods when `events` (the test API
/// server answers their writes 404, and keeps each call's body).
fn start_with(
    server: &apiserver::Running,
    events: bool,
) -> (Arc<Metrics>, tokio::task::JoinHandle<()>) {
    let metrics = Arc::new(Metrics::default());
    let settings = RestartSettings {
        key_prefix: "ownerguard.io".into(),
        clock_margin: Duration::from_secs(2),
        namespaces: Vec::new(),
        lease: LeaseSettings {
            namespace: "ownerguard".into(),
            name: "ownerguard-restarts".into(),
            identity: "ownerguard-0".into(),
            duration: Duration::from_millis(900),
        },
        retry_after: Duration::from_millis(300),
    };
    let events = events.then(|| {
        ownerguard::observe::events::Events::start(
            server.serve_client(),
            "ownerguard",
            None,
            metrics.clone(),
        )
    });
    let task = tokio::spawn(restarts::run(
        server.serve_client(),
        settings,
        metrics.clone(),
        events,
    ));
    (metrics, task)
}

/// A worker pod, opted in (`label`), whose container `worker` is in its
/// `restarts`th restart, started at `started`, the status written at
/// `written` (the API server's time, in its managedFields).
fn worker(
    name: &str,
    uid: &str,
    label: Option<&str>,
    restarts: i32,
    started: &str,
    written: &str,
) -> Value {
    let mut labels = json!({"app": "worker"});
    if let Some(label) = label {
        labels["ownerguard.io/release-on-restart"] = json!(label);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": labels,
            "creationTimestamp": "2026-12-01T09:00:00Z",
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T09:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": written,
                 "fieldsType": "FieldsV1", "fieldsV1": {}, "subresource": "status"}
            ]},
        "spec": {"containers": [{"name": "worker", "image": "worker:1"}]},
        "status": {"phase": "Running", "startTime": "2026-12-01T09:00:01Z",
            "containerStatuses": [{
                "name": "worker", "ready": true, "restartCount": restarts, "image": "worker:1", "imageID": "",
                "containerID": format!("containerd://{name}-{restarts}"),
                "state": {"running": {"startedAt": started}},
                "lastState": if restarts > 0 {
                    json!({"terminated": {"exitCode": 137, "reason": "OOMKilled",
                        "startedAt": "2026-12-01T09:00:02Z", "finishedAt": started}})
                } else { json!({}) }
            }]}
    })
}

/// An object of `kind` owned by the pods of `owners` (name, uid), created
/// at `created`.
fn child(kind: Kind, name: &str, uid: &str, owners: &[(&str, &str)], created: &str) -> Value {
    let (api_version, kind_name) = match kind {
        Kind::Pod => ("v1", "Pod"),
        Kind::ConfigMap => ("v1", "ConfigMap"),
        Kind::Job => ("batch/v1", "Job"),
        _ => unreachable!(),
    };
    let references: Vec<Value> = owners
        .iter()
        .map(|(owner, owner_uid)| {
            json!({"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": owner_uid,
            "controller": false, "blockOwnerDeletion": false})
        })
        .collect();
    json!({"apiVersion": api_version, "kind": kind_name,
        "metadata": {"name": name, "namespace": NS, "uid": uid, "creationTimestamp": created,
            "labels": {"ownerguard.io/owner-pod": owners[0].0},
            "ownerReferences": references}})
}

/// Wait until the pass counts one child kept because its pod was held
/// for its node's clock.
async fn held_for_its_clock(metrics: &Metrics) {
    eventually("the held pod counted", || {
        metrics
            .encode()
            .contains("ownerguard_restart_children_kept_total{reason=\"clock\"} 1")
    })
    .await;
}

/// A ConfigMap owned by the pods of `owners` (name, uid), created at
/// `created`.
fn put_config_map(api: &FakeApi, name: &str, uid: &str, owners: &[(&str, &str)], created: &str) {
    api.put_object(
        Kind::ConfigMap,
        child(Kind::ConfigMap, name, uid, owners, created),
    );
}

fn exists(api: &FakeApi, kind: Kind, name: &str) -> bool {
    api.exists(kind, NS, name)
}

#[tokio::test]
async fn an_opted_in_worker_restarted_has_its_earlier_runs_children_released_and_its_current_runs_kept()
 {
    let server = FakeApi::start().await;
    let api = &server.api;
    // The worker's container restarted at 10:00:00 (its new run's start,
    // the node's clock); the kubelet's status write came a second later.
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            1,
            "2026-12-01T10:00:00Z",
            "2026-12-01T10:00:01Z",
        ),
    );
    api.put_pod(NS, "w-2", OTHER);
    for (kind, name, uid, created) in [
        // The first run's, well before the restart.
        (
            Kind::ConfigMap,
            "prompt-old",
            "c-old",
            "2026-12-01T09:30:00Z",
        ),
        (Kind::Pod, "agent-old", "p-old", "2026-12-01T09:59:57Z"),
        (Kind::Job, "step-old", "j-old", "2026-12-01T09:40:00Z"),
        // Too near the restart to tell (within a second and the margin).
        (
            Kind::ConfigMap,
            "prompt-near",
            "c-near",
            "2026-12-01T09:59:59Z",
        ),
        (Kind::Pod, "agent-near", "p-near", "2026-12-01T10:00:02Z"),
        // The current run's.
        (
            Kind::ConfigMap,
            "prompt-new",
            "c-new",
            "2026-12-01T10:00:05Z",
        ),
        (Kind::Pod, "agent-new", "p-new", "2026-12-01T10:01:00Z"),
    ] {
        api.put_object(kind, child(kind, name, uid, &[("w-1", W1)], created));
    }
    // The old Job's pod, made after the restart by the Job's controller:
    // it goes with its Job.
    let mut job_pod = child(
        Kind::Pod,
        "step-old-x1",
        "p-job",
        &[("w-1", W1)],
        "2026-12-01T10:00:30Z",
    );
    job_pod["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(json!({"apiVersion": "batch/v1", "kind": "Job", "name": "step-old", "uid": "j-old", "controller": true}));
    api.put_object(Kind::Pod, job_pod);
    // An old one shared with another running worker: that worker's too.
    put_config_map(
        api,
        "prompt-shared",
        "c-shared",
        &[("w-1", W1), ("w-2", OTHER)],
        "2026-12-01T09:10:00Z",
    );

    let (metrics, task) = start(&server);
    eventually("the earlier run's children released", || {
        !exists(api, Kind::ConfigMap, "prompt-old")
            && !exists(api, Kind::Pod, "agent-old")
            && !exists(api, Kind::Job, "step-old")
            && !exists(api, Kind::Pod, "step-old-x1")
    })
    .await;
    // Settle: a second pass must change nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (kind, name) in [
        (Kind::ConfigMap, "prompt-near"),
        (Kind::Pod, "agent-near"),
        (Kind::ConfigMap, "prompt-new"),
        (Kind::Pod, "agent-new"),
        (Kind::ConfigMap, "prompt-shared"),
    ] {
        assert!(exists(api, kind, name), "{name} was released");
    }
    let text = metrics.encode();
    assert!(
        text.contains("ownerguard_restart_children_kept_total{reason=\"unproven\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("ownerguard_reaped_objects_total{resource=\"configmaps\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("ownerguard_restart_release_leader 1"),
        "{text}"
    );
    // Every delete named its object's uid; one pass made the calls of
    // `release` (docs/performance.md): the worker's GET, the namespace's
    // lists, one DELETE per object; not repeated for the same runs.
    let deletes = api.calls_matching("DELETE ");
    assert_eq!(deletes.len(), 4, "{deletes:?}");
    for call in &deletes {
        assert!(
            call.contains("uid"),
            "a delete without its uid precondition: {call}"
        );
    }
    assert_eq!(
        api.calls_matching("GET /api/v1/namespaces/agents/pods/w-1")
            .len(),
        1
    );
    assert_eq!(
        api.calls_matching("GET /apis/batch/v1/namespaces/agents/jobs?")
            .len(),
        1
    );
    assert_eq!(
        api.calls_matching("GET /api/v1/namespaces/agents/configmaps?")
            .len(),
        1
    );

    // The worker restarts again at 10:05: what the second run made before
    // it goes now, what the third makes stays.
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            2,
            "2026-12-01T10:05:00Z",
            "2026-12-01T10:05:01Z",
        ),
    );
    put_config_map(
        api,
        "prompt-third",
        "c-third",
        &[("w-1", W1)],
        "2026-12-01T10:05:10Z",
    );
    eventually("the second run's children released", || {
        !exists(api, Kind::ConfigMap, "prompt-new") && !exists(api, Kind::Pod, "agent-new")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        exists(api, Kind::ConfigMap, "prompt-third"),
        "the current run's child was released"
    );
    assert!(exists(api, Kind::ConfigMap, "prompt-shared"));
    task.abort();
}

#[tokio::test]
async fn a_worker_that_did_not_opt_in_keeps_everything_and_a_clock_ahead_holds_the_pod() {
    let server = FakeApi::start().await;
    let api = &server.api;
    // Restarted, but not opted in: the watch does not even see it.
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            None,
            3,
            "2026-12-01T10:00:00Z",
            "2026-12-01T10:00:01Z",
        ),
    );
    put_config_map(
        api,
        "prompt-1",
        "c-1",
        &[("w-1", W1)],
        "2026-12-01T09:00:00Z",
    );
    // Opted in, but its node reports a start a minute after the API
    // server wrote the status: its clock is ahead, nothing is released.
    api.put_object(
        Kind::Pod,
        worker(
            "w-2",
            W2,
            Some("worker"),
            1,
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:00:00Z",
        ),
    );
    put_config_map(
        api,
        "prompt-2",
        "c-2",
        &[("w-2", W2)],
        "2026-12-01T09:00:00Z",
    );
    let (metrics, task) = start(&server);
    held_for_its_clock(&metrics).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(exists(api, Kind::ConfigMap, "prompt-1"));
    assert!(exists(api, Kind::ConfigMap, "prompt-2"));
    assert!(
        api.calls_matching("DELETE ").is_empty(),
        "{:?}",
        api.calls_matching("DELETE ")
    );
    // Only the opted-in pods are watched.
    assert!(
        api.calls_matching("/api/v1/pods?")
            .iter()
            .all(|call| call.contains("labelSelector=ownerguard.io%2Frelease-on-restart")),
        "{:?}",
        api.calls_matching("/api/v1/pods?")
    );
    task.abort();
}

#[tokio::test]
async fn a_node_whose_lease_shows_its_clock_ahead_has_nothing_released() {
    let server = FakeApi::start().await;
    let api = &server.api;
    // The status looks fine (written a second after the start), but the
    // node's own Lease says its clock is a minute ahead of the API
    // server's: its renewTime (node clock) against the API server's time
    // of that write (managedFields).
    w1_restarted_on_node_a(api);
    api.put_object(
        Kind::Lease,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-a", "namespace": "kube-node-lease", "uid": "l-a",
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
                    "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:renewTime": {}}}}]},
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40,
                "renewTime": "2026-12-01T10:01:00.000000Z"}}),
    );
    let (metrics, task) = start(&server);
    held_for_its_clock(&metrics).await;
    assert!(exists(api, Kind::ConfigMap, "prompt-old"));
    assert!(api.calls_matching("DELETE ").is_empty());
    task.abort();
}

#[tokio::test]
async fn a_node_whose_lease_cannot_be_read_waits_until_it_can() {
    let server = FakeApi::start().await;
    let api = &server.api;
    w1_restarted_on_node_a(api);
    // The node's clock cannot be dated: its Lease is not readable.
    api.update_faults(|f| {
        f.forbidden_paths = vec!["/apis/coordination.k8s.io/v1/namespaces/kube-node-lease".into()];
    });
    let (metrics, task) = start_with(&server, true);
    put_off_and_told_once(api, &metrics, "ownerguard may not get the Lease kube-node-lease/node-a (the chart's Role in kube-node-lease grants it)").await;
    // Readable again (and the node has no Lease): the next try releases.
    api.update_faults(|f| f.forbidden_paths.clear());
    eventually("the earlier run's ConfigMap released", || {
        !exists(api, Kind::ConfigMap, "prompt-old")
    })
    .await;
    task.abort();
}

/// A read of the node's Lease that hangs is given up after a third of the
/// restart Lease (the renewals of which it would hold up): the pass is
/// put off as for a Lease that cannot be read, and the release waits.
#[tokio::test]
async fn a_node_lease_read_that_hangs_puts_the_pass_off() {
    let server = FakeApi::start().await;
    let api = &server.api;
    w1_restarted_on_node_a(api);
    api.update_faults(|f| {
        f.get_delay_under = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease".into();
        f.get_delay = Duration::from_secs(60);
    });
    let (metrics, task) = start_with(&server, true);
    put_off_and_told_once(
        api,
        &metrics,
        "the Lease kube-node-lease/node-a could not be read in time",
    )
    .await;
    assert!(
        metrics
            .encode()
            .contains("ownerguard_restart_release_leader 1"),
        "the restart Lease was lost while the node's Lease hung"
    );
    // Answered again (the node has no Lease): the next try releases.
    api.update_faults(|f| f.get_delay = Duration::ZERO);
    eventually("the earlier run's ConfigMap released", || {
        !exists(api, Kind::ConfigMap, "prompt-old")
    })
    .await;
    task.abort();
}

/// A node's Lease that is there but does not date its clock (its
/// `renewTime`, or the record of the write that set it, stripped) is not
/// taken for a node without a Lease: the pass waits until it dates it.
#[tokio::test]
async fn a_node_whose_lease_does_not_date_its_clock_waits_until_it_does() {
    let server = FakeApi::start().await;
    let api = &server.api;
    w1_restarted_on_node_a(api);
    // A renewTime, but no record of the write that set it.
    api.put_object(
        Kind::Lease,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-a", "namespace": "kube-node-lease", "uid": "l-a"},
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40,
                "renewTime": "2026-12-01T10:00:00.000000Z"}}),
    );
    let (metrics, task) = start_with(&server, true);
    put_off_and_told_once(
        api,
        &metrics,
        "the Lease kube-node-lease/node-a has no renewTime with a record of the write",
    )
    .await;
    // The kubelet renews it, the API server recording when: in step with
    // the API server's clock, so the next try releases.
    api.put_object(
        Kind::Lease,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-a", "namespace": "kube-node-lease", "uid": "l-a",
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
                    "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:renewTime": {}}}}]},
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40,
                "renewTime": "2026-12-01T10:00:00.000000Z"}}),
    );
    eventually("the earlier run's ConfigMap released", || {
        !exists(api, Kind::ConfigMap, "prompt-old")
    })
    .await;
    task.abort();
}

/// W1 on node-a, its container `worker` restarted (the node in step with
/// the API server's clock by the status write), and `prompt-old`, made by
/// its first run an hour before: what a release would take.
fn w1_restarted_on_node_a(api: &FakeApi) {
    let mut pod = worker(
        "w-1",
        W1,
        Some("worker"),
        1,
        "2026-12-01T10:00:00Z",
        "2026-12-01T10:00:01Z",
    );
    pod["spec"]["nodeName"] = json!("node-a");
    api.put_object(Kind::Pod, pod);
    put_config_map(
        api,
        "prompt-old",
        "c-old",
        &[("w-1", W1)],
        "2026-12-01T09:00:00Z",
    );
}

/// W1's pass put off for node-a's clock (`ownerguard_reap_failures_total`
/// counting the tries, every 300 ms here), nothing deleted, and one
/// `RestartReleaseWaiting` Event on the pod saying why (`why`), however
/// many the tries.
async fn put_off_and_told_once(api: &FakeApi, metrics: &Metrics, why: &str) {
    eventually("the pass put off three times", || {
        metrics.encode().lines().any(|line| {
            line.strip_prefix("ownerguard_reap_failures_total{resource=\"release\"} ")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n >= 3)
        })
    })
    .await;
    assert!(exists(api, Kind::ConfigMap, "prompt-old"));
    assert!(api.calls_matching("DELETE ").is_empty());
    let told = api.calls_matching("RestartReleaseWaiting");
    assert_eq!(told.len(), 1, "{told:#?}");
    assert!(
        told[0].starts_with("POST /apis/events.k8s.io/v1/namespaces/agents/events")
            && told[0].contains("\"name\":\"w-1\"")
            && told[0].contains("until it can date its node's clock, tried again every 300ms: ")
            && told[0].contains(why),
        "{}",
        told[0]
    );
}

/// The annotation of the restart Lease that remembers W1's hold.
fn held_of_w1(api: &FakeApi) -> Option<String> {
    api.object(Kind::Lease, "ownerguard", "ownerguard-restarts")
        .and_then(|lease| {
            lease["metadata"]["annotations"][format!("held-restart.ownerguard.io/{W1}")]
                .as_str()
                .map(str::to_string)
        })
}

#[tokio::test]
async fn a_hold_outlives_the_replica_that_made_it_until_the_pod_restarts_again() {
    let server = FakeApi::start().await;
    let api = &server.api;
    // The node's clock a minute ahead when the run started: its report
    // of the start is a minute later than the API server's time of the
    // very write that showed it.
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            1,
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:00:00Z",
        ),
    );
    // Made by the current run, 30 s into it (API clock).
    put_config_map(
        api,
        "prompt-current",
        "c-current",
        &[("w-1", W1)],
        "2026-12-01T10:00:30Z",
    );
    let (metrics, task) = start(&server);
    held_for_its_clock(&metrics).await;
    eventually("the hold remembered in the Lease", || {
        held_of_w1(api).is_some()
    })
    .await;
    task.abort();

    // The node's clock set right since, and the kubelet wrote the status
    // again (a readiness change): the newest write now comes after the
    // start it shows. A replica that first sees the pod now cannot tell
    // the node was ahead; the Lease tells it.
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            1,
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:01:30Z",
        ),
    );
    let (metrics, task) = start(&server);
    eventually("the Lease taken over", || {
        metrics
            .encode()
            .contains("ownerguard_restart_release_leader 1")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(exists(api, Kind::ConfigMap, "prompt-current"));
    assert!(
        api.calls_matching("DELETE ").is_empty(),
        "{:?}",
        api.calls_matching("DELETE ")
    );
    assert!(held_of_w1(api).is_some());

    // Another restart, its report in step: judged afresh, the hold
    // dropped, and what the held run made released.
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            2,
            "2026-12-01T10:05:00Z",
            "2026-12-01T10:05:01Z",
        ),
    );
    eventually("the held run's ConfigMap released", || {
        !exists(api, Kind::ConfigMap, "prompt-current")
    })
    .await;
    eventually("the hold dropped", || held_of_w1(api).is_none()).await;
    task.abort();
}

#[tokio::test]
async fn a_hold_survives_the_opt_in_label_taken_off_and_put_back() {
    let server = FakeApi::start().await;
    let api = &server.api;
    let held = |written: &str, label: Option<&str>| {
        worker("w-1", W1, label, 1, "2026-12-01T10:01:00Z", written)
    };
    api.put_object(Kind::Pod, held("2026-12-01T10:00:00Z", Some("worker")));
    put_config_map(
        api,
        "prompt-current",
        "c-current",
        &[("w-1", W1)],
        "2026-12-01T10:00:30Z",
    );
    let (_metrics, task) = start(&server);
    eventually("the hold remembered in the Lease", || {
        held_of_w1(api).is_some()
    })
    .await;
    // The label taken off: the pod leaves the watch, but it is there.
    api.put_object(Kind::Pod, held("2026-12-01T10:00:00Z", None));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        held_of_w1(api).is_some(),
        "the hold of a pod still there was dropped"
    );
    // Put back, the node's clock set right and the status written again.
    api.put_object(Kind::Pod, held("2026-12-01T10:01:30Z", Some("worker")));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(exists(api, Kind::ConfigMap, "prompt-current"));
    assert!(api.calls_matching("DELETE ").is_empty());
    // Once the pod is gone, its hold goes too.
    api.remove(Kind::Pod, NS, "w-1");
    eventually("the hold of a pod gone dropped", || {
        held_of_w1(api).is_none()
    })
    .await;
    task.abort();
}

/// A hold is written into the Lease as it is made, before the pass goes on
/// to other pods: a pass the Lease's renewal cuts short between two pods
/// (or a replica stopped in the middle of one) does not forget it, and the
/// next holder, the node's clock set right since, keeps what the held run
/// made.
#[tokio::test]
async fn a_hold_is_remembered_though_its_pass_is_cut_short() {
    let server = FakeApi::start().await;
    let api = &server.api;
    // w-1: held for its node's clock (the start reported a minute after
    // the API server's time of the write that showed it).
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            1,
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:00:00Z",
        ),
    );
    // Made by w-1's current run, 30 s into it (API clock).
    put_config_map(
        api,
        "prompt-current",
        "c-current",
        &[("w-1", W1)],
        "2026-12-01T10:00:30Z",
    );
    // w-2 and w-3: two restarted workers due after w-1 in the same pass.
    for (name, uid) in [("w-2", W2), ("w-3", OTHER)] {
        api.put_object(
            Kind::Pod,
            worker(
                name,
                uid,
                Some("worker"),
                1,
                "2026-12-01T10:00:00Z",
                "2026-12-01T10:00:01Z",
            ),
        );
    }
    // The restart Lease held by another replica for three more seconds:
    // the three pods are seen before this replica leads, so its first
    // pass has them all due.
    api.put_object(
        Kind::Lease,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "ownerguard-restarts", "namespace": "ownerguard", "uid": "l-r"},
            "spec": {"holderIdentity": "ownerguard-9", "leaseDurationSeconds": 3,
                "renewTime": "2026-12-01T10:00:00.000000Z"}}),
    );
    // Every GET slow (an API server under load): w-2's release takes
    // longer than a renewal period.
    api.update_faults(|f| f.get_delay = Duration::from_millis(400));
    let (metrics, task) = start(&server);
    held_for_its_clock(&metrics).await;
    // The API server refuses the restart Lease from now on: the renewal
    // before the next pod fails and the pass stops there.
    api.update_faults(|f| {
        f.forbidden_paths = vec!["/apis/coordination.k8s.io/v1/namespaces/ownerguard".into()];
    });
    eventually("the Lease lost", || {
        metrics
            .encode()
            .contains("ownerguard_restart_release_leader 0")
    })
    .await;
    task.abort();
    assert!(
        held_of_w1(api).is_some(),
        "the hold was not written before the pass went on"
    );

    // The node's clock set right since, the status written again: a
    // replica that first sees the pod now cannot tell the node was ahead;
    // the Lease tells it.
    api.update_faults(|f| {
        f.forbidden_paths.clear();
        f.get_delay = Duration::ZERO;
    });
    api.put_object(
        Kind::Pod,
        worker(
            "w-1",
            W1,
            Some("worker"),
            1,
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:01:30Z",
        ),
    );
    let (metrics, task) = start(&server);
    eventually("the Lease taken over", || {
        metrics
            .encode()
            .contains("ownerguard_restart_release_leader 1")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deleted = api.calls_matching("DELETE ");
    task.abort();
    assert!(
        exists(api, Kind::ConfigMap, "prompt-current"),
        "the held run's ConfigMap was released: {deleted:?}"
    );
}

/// A node ahead when the newest run started stays seen when another named
/// container changes before the pass: its first start writes the status
/// again, but the newest run is still dated by the write that first
/// showed it.
#[tokio::test]
async fn another_containers_start_does_not_hide_a_node_that_was_ahead() {
    let server = FakeApi::start().await;
    let api = &server.api;
    // `worker` restarted, its start reported a minute after the API
    // server's time of the write that showed it; `helper` not started yet.
    let with_helper = |helper: Value, written: &str| {
        let mut pod = worker(
            "w-1",
            W1,
            Some("worker.helper"),
            1,
            "2026-12-01T10:01:00Z",
            written,
        );
        pod["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "helper", "image": "helper:1"}));
        pod["status"]["containerStatuses"]
            .as_array_mut()
            .unwrap()
            .push(helper);
        pod
    };
    api.put_object(
        Kind::Pod,
        with_helper(
            json!({"name": "helper", "ready": false, "restartCount": 0, "image": "helper:1", "imageID": "",
                "state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}}),
            "2026-12-01T10:00:00Z",
        ),
    );
    put_config_map(
        api,
        "prompt-current",
        "c-current",
        &[("w-1", W1)],
        "2026-12-01T10:00:30Z",
    );
    // The restart Lease held by another replica for three more seconds:
    // the pod is seen, and seen again, before this replica's first pass.
    api.put_object(
        Kind::Lease,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "ownerguard-restarts", "namespace": "ownerguard", "uid": "l-r"},
            "spec": {"holderIdentity": "ownerguard-9", "leaseDurationSeconds": 3,
                "renewTime": "2026-12-01T10:00:00.000000Z"}}),
    );
    let (metrics, task) = start(&server);
    // Watching: the list, and the pod in it, was read.
    eventually("the pods watched", || {
        api.calls_matching("GET /api/v1/pods?")
            .iter()
            .any(|call| call.contains("watch=true"))
    })
    .await;
    // `helper` starts (slow image pull), its status written 90 s later by
    // the API server's clock.
    api.put_object(
        Kind::Pod,
        with_helper(
            json!({"name": "helper", "ready": true, "restartCount": 0, "image": "helper:1", "imageID": "",
                "containerID": "containerd://h0",
                "state": {"running": {"startedAt": "2026-12-01T10:01:29Z"}}, "lastState": {}}),
            "2026-12-01T10:01:30Z",
        ),
    );
    held_for_its_clock(&metrics).await;
    let deleted = api.calls_matching("DELETE ");
    task.abort();
    assert!(
        exists(api, Kind::ConfigMap, "prompt-current"),
        "the current run's ConfigMap was released: {deleted:?}"
    );
}
