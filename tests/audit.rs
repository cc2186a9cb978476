//! `ownerguard audit` against the loopback API server: every class, by the
//! webhook's own rules; paging; a 403 on one resource; `--fix` with the
//! patch `/mutate` would make, and a conflict; the command's exit codes.

mod apiserver;

use apiserver::{FakeApi, Faults, Kind};
use ownerguard::commands::audit::{AuditOptions, Fixed, Report, State, audit};
use ownerguard::decide::Policy;
use serde_json::{Value, json};

const NS: &str = "agents";
const W1: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000001";
const DONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-0000000000d0";
const GONE: &str = "6f1f3d4e-0c1a-4b7e-9d2a-00000000dead";

fn labels(name: &str, uid: Option<&str>) -> Value {
    match uid {
        Some(uid) => json!({"ownerguard.io/owner-pod": name, "ownerguard.io/owner-uid": uid}),
        None => json!({"ownerguard.io/owner-pod": name}),
    }
}

fn reference(name: &str, uid: &str, block: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": false, "blockOwnerDeletion": block})
}

fn config_map(api: &FakeApi, name: &str, labels: Value, references: Value) {
    api.put_object(
        Kind::ConfigMap,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": name, "namespace": NS, "uid": format!("cm-{name}"),
            "creationTimestamp": "2026-11-29T12:00:00Z",
            "labels": labels, "ownerReferences": references}}),
    );
}

/// One object of every class, and one that is not ownerguard's.
fn every_class(api: &FakeApi) {
    api.put_pod(NS, "w-1", W1);
    api.put_pod_in_phase(NS, "w-done", DONE, "Succeeded");
    config_map(
        api,
        "ok",
        labels("w-1", Some(W1)),
        json!([reference("w-1", W1, false)]),
    );
    config_map(api, "leaked", labels("gone-0", Some(GONE)), json!([]));
    config_map(api, "leaked-by-name", labels("gone-1", None), json!([]));
    config_map(api, "replaced", labels("w-1", Some(GONE)), json!([]));
    config_map(
        api,
        "finished",
        labels("w-done", Some(DONE)),
        json!([reference("w-done", DONE, false)]),
    );
    // No reference: even deleting the finished pod would leave it.
    config_map(
        api,
        "finished-unreferenced",
        labels("w-done", Some(DONE)),
        json!([]),
    );
    config_map(api, "missing", labels("w-1", Some(W1)), json!([]));
    config_map(api, "missing-by-name", labels("w-1", None), json!([]));
    config_map(
        api,
        "dangling",
        json!({}),
        json!([reference("gone-2", GONE, false)]),
    );
    config_map(
        api,
        "dangling-labelled",
        labels("gone-0", Some(GONE)),
        json!([reference("gone-0", GONE, false)]),
    );
    config_map(
        api,
        "blocking",
        labels("w-1", Some(W1)),
        json!([reference("w-1", W1, true)]),
    );
    config_map(
        api,
        "contradicting",
        labels("w-1", Some(W1)),
        json!([reference("w-1", W1, false), {"apiVersion": "v1", "kind": "Pod", "name": "w-2", "uid": W1}]),
    );
    config_map(api, "malformed", labels("W_1", None), json!([]));
    config_map(api, "nobodys", json!({"app": "x"}), json!([]));
}

fn options(resources: &[&str], fix: bool) -> AuditOptions {
    AuditOptions {
        namespaces: Vec::new(),
        resources: resources.iter().map(|r| r.to_string()).collect(),
        fix,
        policy: Policy::default(),
        reports: false,
        events: None,
        unlabelled: None,
    }
}

/// The ConfigMaps of `server` audited (and fixed, with `fix`), pages
/// unwatched.
async fn audit_config_maps(server: &apiserver::Running, fix: bool) -> Report {
    audit(
        server.serve_client(),
        &options(&["configmaps"], fix),
        |_, _| {},
    )
    .await
    .unwrap()
}

fn states(report: &Report) -> Vec<(String, State)> {
    let mut states: Vec<(String, State)> = report
        .lines
        .iter()
        .map(|line| (line.name.clone(), line.finding.state))
        .collect();
    states.sort();
    states
}

#[tokio::test]
async fn every_class_is_found_by_the_webhooks_rules() {
    let server = FakeApi::start().await;
    every_class(&server.api);
    let mut pages = Vec::new();
    let report = audit(
        server.serve_client(),
        &options(&["configmaps"], false),
        |r, n| {
            pages.push((r.to_string(), n));
        },
    )
    .await
    .unwrap();
    assert_eq!(
        states(&report),
        vec![
            ("blocking".into(), State::Blocking),
            ("contradicting".into(), State::Contradicting),
            ("dangling".into(), State::Dangling),
            ("dangling-labelled".into(), State::Dangling),
            ("finished".into(), State::OwnerFinished),
            ("finished-unreferenced".into(), State::Leaked),
            ("leaked".into(), State::Leaked),
            ("leaked-by-name".into(), State::Leaked),
            ("malformed".into(), State::Malformed),
            ("missing".into(), State::MissingReference),
            ("missing-by-name".into(), State::MissingReference),
            ("replaced".into(), State::Leaked),
        ]
    );
    let totals = report.totals();
    assert_eq!(
        totals[&State::Ok],
        1,
        "the sound one, and not the unlabelled one"
    );
    assert!(report.has_findings());
    assert!(report.errors.is_empty());
    assert_eq!(pages, vec![("configmaps".to_string(), 14)]);
    // Owners are listed, never looked up one by one.
    let calls = server.api.calls();
    assert!(
        calls.iter().all(|c| !c.contains("/pods/")),
        "a GET per owner: {calls:#?}"
    );
    // The leaked one says why, as the webhook would.
    let leaked = report.lines.iter().find(|l| l.name == "leaked").unwrap();
    assert!(
        leaked
            .finding
            .detail
            .contains("owner pod 'gone-0' not found"),
        "{leaked:?}"
    );
    assert!(leaked.finding.age.is_some());
}

#[tokio::test]
async fn a_large_resource_is_read_page_by_page() {
    let server = FakeApi::start().await;
    server.api.put_pod(NS, "w-1", W1);
    for i in 0..1_201 {
        config_map(
            &server.api,
            &format!("cm-{i}"),
            labels("w-1", Some(W1)),
            json!([reference("w-1", W1, false)]),
        );
    }
    let mut pages = Vec::new();
    let report = audit(
        server.serve_client(),
        &options(&["configmaps"], false),
        |_, n| pages.push(n),
    )
    .await
    .unwrap();
    assert_eq!(pages, vec![500, 1_000, 1_201]);
    assert_eq!(report.totals()[&State::Ok], 1_201);
    assert!(!report.has_findings());
}

#[tokio::test]
async fn a_403_on_one_resource_is_reported_and_the_rest_audited() {
    let server = FakeApi::start().await;
    every_class(&server.api);
    server.api.update_faults(|f| {
        *f = Faults {
            jobs_forbidden: true,
            ..Faults::default()
        }
    });
    let report = audit(
        server.serve_client(),
        &options(
            &["jobs.batch", "configmaps", "nosuchthings.example.com"],
            false,
        ),
        |_, _| {},
    )
    .await
    .unwrap();
    assert_eq!(report.errors.len(), 2, "{:?}", report.errors);
    assert_eq!(report.errors[0].0, "jobs.batch");
    assert!(
        report.errors[0].1.starts_with("forbidden (403)"),
        "{:?}",
        report.errors
    );
    assert_eq!(report.errors[1].0, "nosuchthings.example.com");
    assert_eq!(report.lines.len(), 12, "configmaps audited all the same");
}

#[tokio::test]
async fn fix_adds_what_mutate_would_and_never_deletes() {
    let server = FakeApi::start().await;
    every_class(&server.api);
    let report = audit_config_maps(&server, true).await;
    let fixed: Vec<(&str, &Option<Fixed>)> = report
        .lines
        .iter()
        .filter(|l| l.fixed.is_some())
        .map(|l| (l.name.as_str(), &l.fixed))
        .collect();
    // Two: the object labelled by name only is not patched (a name alone
    // proves no ownership, and the webhook refuses a uid label added on
    // UPDATE).
    assert_eq!(fixed.len(), 2, "{fixed:?}");
    assert!(
        fixed.iter().all(|(_, f)| **f == Some(Fixed::Patched)),
        "{fixed:?}"
    );
    // The missing reference added, non-blocking; the blocking one
    // unblocked; nothing deleted, the name-only object left as it was.
    let object = |name: &str| server.api.object(Kind::ConfigMap, NS, name).unwrap();
    assert_eq!(
        object("missing")["metadata"]["ownerReferences"],
        json!([reference("w-1", W1, false)])
    );
    assert!(object("missing-by-name")["metadata"]["labels"]["ownerguard.io/owner-uid"].is_null());
    assert!(
        object("missing-by-name")["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    assert_eq!(
        object("blocking")["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
        false
    );
    assert!(server.api.object(Kind::ConfigMap, NS, "leaked").is_some());
    assert!(server.api.calls().iter().all(|c| !c.starts_with("DELETE")));
    // Audited again: only what no fix can mend is left.
    let again = audit_config_maps(&server, false).await;
    let left: Vec<(String, State)> = states(&again)
        .into_iter()
        .filter(|(_, s)| matches!(s, State::MissingReference | State::Blocking))
        .collect();
    assert_eq!(
        left,
        [("missing-by-name".to_string(), State::MissingReference)]
    );
}

#[tokio::test]
async fn fix_under_a_conflict_reports_it_and_does_not_retry() {
    let server = FakeApi::start().await;
    every_class(&server.api);
    // The object changes between the list and the patch.
    server.api.update_faults(|f| {
        f.replace_after_list = Some((Kind::ConfigMap, NS.into(), "missing".into()));
    });
    let report = audit_config_maps(&server, true).await;
    let missing = report.lines.iter().find(|l| l.name == "missing").unwrap();
    assert_eq!(missing.fixed, Some(Fixed::Conflict));
    assert!(report.has_findings());
    let patches = server
        .api
        .calls_matching("PATCH /api/v1/namespaces/agents/configmaps/missing?");
    assert_eq!(patches.len(), 1, "tried once: {patches:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_exits_0_1_or_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = |server: &apiserver::Running, extra: &[&str]| {
        let kubeconfig = server.kubeconfig(dir.path());
        std::process::Command::new(env!("CARGO_BIN_EXE_ownerguard"))
            .args(["audit", "--resource", "configmaps"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap()
    };
    let server = FakeApi::start().await;
    server.api.put_pod(NS, "w-1", W1);
    config_map(
        &server.api,
        "ok",
        labels("w-1", Some(W1)),
        json!([reference("w-1", W1, false)]),
    );
    let out = tokio::task::block_in_place(|| run(&server, &[]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 ok, 0 leaked"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("audit: configmaps: 1 object(s) scanned")
    );

    config_map(
        &server.api,
        "leaked",
        labels("gone-0", Some(GONE)),
        json!([]),
    );
    let out = tokio::task::block_in_place(|| run(&server, &["--output", "json"]));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let line: Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(line["state"], "leaked");
    assert_eq!(line["name"], "leaked");

    let out =
        tokio::task::block_in_place(|| run(&server, &["--resource", "nosuchthings.example.com"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// What the attack on issue 16's change found misread: the collector's
/// reading (`/v1` is `v1`; an object lives while any owner runs) over the
/// webhook's, blocking only where a reference blocks, a finished owner
/// seen through a reference alone.
#[test]
fn classes_follow_the_collectors_reading() {
    use ownerguard::commands::audit::classify::{Kind as Resource, classify};
    use ownerguard::owner::{Finished, Inventory, InventoryPod, ObservedPod};
    const W2: &str = "6f1f3d4e-0c1a-4b7e-9d2a-000000000002";
    let pod = |name: &str, uid: &str, finished: Option<Finished>| InventoryPod {
        namespace: NS.into(),
        name: name.into(),
        pod: ObservedPod {
            uid: uid.into(),
            terminating: false,
            finished,
        },
    };
    let pods = Inventory::from_pods([
        pod("w-1", W1, None),
        pod("w-2", W2, None),
        pod("w-done", DONE, Some(Finished::Succeeded)),
    ]);
    let config_map = Resource {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
    };
    let state = |labels: Value, references: Value, annotations: Value| {
        let meta = serde_json::from_value(json!({"name": "a", "namespace": NS,
            "labels": labels, "annotations": annotations, "ownerReferences": references}))
        .unwrap();
        let finding = classify(&meta, config_map, &pods, &Policy::default(), 2_000_000_000)
            .expect("ownerguard's");
        (finding.state, finding.patch.is_some())
    };
    let unblocked = |api_version: &str, name: &str, uid: &str| json!({"apiVersion": api_version, "kind": "Pod", "name": name, "uid": uid});
    let none = json!({});
    // No blockOwnerDeletion means false; a missing uid label beside the
    // reference: sound, not "blocking".
    assert_eq!(
        state(
            labels("w-1", Some(W1)),
            json!([unblocked("v1", "w-1", W1)]),
            none.clone()
        ),
        (State::Ok, false)
    );
    assert_eq!(
        state(
            labels("w-1", None),
            json!([reference("w-1", W1, false)]),
            none.clone()
        ),
        (State::Ok, false)
    );
    // `/v1` is the collector's v1: blocking is blocking, gone is dangling.
    let mut slash = reference("w-1", W1, true);
    slash["apiVersion"] = json!("/v1");
    assert_eq!(
        state(labels("w-1", Some(W1)), json!([slash]), none.clone()),
        (State::Blocking, true)
    );
    assert_eq!(
        state(
            labels("gone-0", Some(GONE)),
            json!([unblocked("/v1", "gone-0", GONE)]),
            none.clone()
        )
        .0,
        State::Dangling
    );
    // A blocking reference to a co-owner beside the owner's.
    assert_eq!(
        state(
            labels("w-1", Some(W1)),
            json!([reference("w-1", W1, false), reference("w-2", W2, true)]),
            none.clone()
        ),
        (State::Blocking, true)
    );
    // Labelled for a pod that is gone, but referencing a running one: it
    // dies with that one, no leak to delete by hand.
    assert_eq!(
        state(
            labels("gone-0", Some(GONE)),
            json!([reference("w-2", W2, false)]),
            none.clone()
        )
        .0,
        State::Ok
    );
    // A reference alone to a finished pod: kept until the pod object goes.
    assert_eq!(
        state(
            none.clone(),
            json!([reference("w-done", DONE, true)]),
            none.clone()
        )
        .0,
        State::OwnerFinished
    );
    // `Self` without the name annotation: the references say who owns it.
    assert_eq!(
        state(
            labels("Self", Some(GONE)),
            json!([reference("gone-0", GONE, false)]),
            none.clone()
        )
        .0,
        State::Dangling
    );
    assert_eq!(
        state(labels("Self", Some(GONE)), json!([]), none.clone()).0,
        State::Leaked
    );
    assert_eq!(
        state(
            labels("Self", Some(W1)),
            json!([reference("w-1", W1, false)]),
            json!({"ownerguard.io/owner-pod-name": "w-1"})
        )
        .0,
        State::Ok
    );
    // A name alone proves no ownership: reported, never patched.
    assert_eq!(
        state(labels("w-1", None), json!([]), none.clone()),
        (State::MissingReference, false)
    );
    assert_eq!(
        state(labels("w-1", Some(W1)), json!([]), none),
        (State::MissingReference, true)
    );
}

/// `serve --audit-interval --audit-reports` on two replicas: each audits
/// (for its own metrics), the one holding the Lease writes the reports.
/// The reports' API is looked up by a writer only, so its discovery calls
/// tell who writes.
#[tokio::test]
async fn only_the_holder_of_the_audits_lease_writes_the_reports() {
    use ownerguard::commands::audit::periodically;
    use ownerguard::commands::reaper::LeaseSettings;
    use ownerguard::observe::Metrics;
    use std::sync::Arc;
    use std::time::Duration;

    let server = FakeApi::start().await;
    every_class(&server.api);
    let writer = |identity: &str| LeaseSettings {
        namespace: "ownerguard".into(),
        name: "ownerguard-audit".into(),
        identity: identity.into(),
        duration: Duration::from_secs(60),
    };
    let replica = |identity: &str| {
        let mut options = options(&["configmaps"], false);
        options.reports = true;
        tokio::spawn(periodically(
            server.serve_client(),
            options,
            Duration::from_millis(50),
            Some(writer(identity)),
            Arc::new(Metrics::default()),
        ))
    };
    let discovered = || server.api.calls_matching("/apis/openreports.io").len();
    let audits = || server.api.calls_matching("/api/v1/configmaps").len();
    let a = replica("replica-a");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while discovered() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica-a never wrote"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lease = server
        .api
        .object(Kind::Lease, "ownerguard", "ownerguard-audit")
        .expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a");
    // The holder stops; another replica starts while its Lease is live.
    a.abort();
    let (before, audited) = (discovered(), audits());
    let b = replica("replica-b");
    while audits() < audited + 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica-b never audited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.abort();
    assert_eq!(
        discovered(),
        before,
        "replica-b wrote reports while replica-a's Lease was live"
    );
}
