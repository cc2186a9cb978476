//! `ownerguard doctor` against the loopback API server: a healthy
//! installation (shaped as the chart renders it) passes every check; each
//! single change that breaks one fails the check that names it, and only
//! that one. The probe is driven against a fake that answers the dry-run
//! create as the API server would.

mod apiserver;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver::FakeApi;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use base64::Engine;
use ownerguard::commands::certs::{self, Generated};
use ownerguard::commands::doctor::{
    Check, DoctorOptions, Verdict, check, gather, probe, probe_until,
};
use serde_json::{Value, json};

const NS: &str = "ownerguard";
const HOST: &str = "ownerguard.ownerguard.svc";
const MUTATING: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/ownerguard";
const VALIDATING: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/ownerguard";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/ownerguard/deployments/ownerguard";
const SERVICE: &str = "/api/v1/namespaces/ownerguard/services/ownerguard";
const PDB: &str = "/apis/policy/v1/namespaces/ownerguard/poddisruptionbudgets/ownerguard";
const SECRET: &str = "/api/v1/namespaces/ownerguard/secrets/ownerguard-tls";

/// The matchConditions the chart renders, per role (tests/chart.rs checks
/// this file against a real Helm render).
fn rendered_conditions(role: &str) -> Value {
    let text = include_str!("../src/commands/doctor/match-conditions.json");
    serde_json::from_str::<Value>(text).unwrap()[role].clone()
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn secret(name: &str, serving: &Generated) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}, "type": "kubernetes.io/tls",
           "data": {"tls.crt": b64(&serving.cert_pem), "tls.key": b64(&serving.key_pem), "ca.crt": b64(&serving.ca_pem)}})
}

/// An installation as the chart renders it, object by API path: edit one
/// object, install, and see what doctor says.
struct Setup {
    objects: Vec<(String, Value)>,
}

/// The `helm.sh/chart` label this checkout's chart writes.
fn chart_label() -> String {
    let chart = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/ownerguard/Chart.yaml"),
    )
    .unwrap();
    let version = chart
        .lines()
        .find_map(|l| l.strip_prefix("version:"))
        .unwrap()
        .trim();
    format!("ownerguard-{version}")
}

impl Setup {
    fn healthy() -> Self {
        let serving = certs::generate(&[HOST.into()], &[], 365).unwrap();
        let labels = json!({"app.kubernetes.io/name": "ownerguard", "app.kubernetes.io/instance": "ownerguard"});
        let webhook = |name: &str, path: &str| {
            json!({
                "name": name,
                "clientConfig": {"service": {"name": "ownerguard", "namespace": NS, "path": path, "port": 443},
                                 "caBundle": b64(&serving.ca_pem)},
                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NS]}]},
                "objectSelector": {"matchExpressions": [{"key": "ownerguard.io/owner-pod", "operator": "Exists"}]},
                "failurePolicy": "Fail", "timeoutSeconds": 5,
                "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "matchConditions": rendered_conditions("labelled"),
            })
        };
        let objects = vec![
            (
                MUTATING.to_string(),
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "ownerguard", "labels": {"helm.sh/chart": chart_label()}},
                   "webhooks": [webhook("mutate.ownerguard.io", "/mutate")]}),
            ),
            (
                VALIDATING.to_string(),
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "ownerguard", "labels": {"helm.sh/chart": chart_label()}},
                   "webhooks": [webhook("validate.ownerguard.io", "/validate")]}),
            ),
            (
                DEPLOYMENT.to_string(),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ownerguard", "namespace": NS},
                   "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": {
                                "containers": [{"name": "ownerguard", "image": "ownerguard:0.1.0",
                                    "args": ["serve", "--addr=0.0.0.0:8443", "--metrics-addr=0.0.0.0:9090",
                                             "--tls-cert=/etc/ownerguard/tls/tls.crt", "--tls-key=/etc/ownerguard/tls/tls.key",
                                             "--key-prefix=ownerguard.io", "--lookup-timeout=2s"],
                                    "ports": [{"name": "https", "containerPort": 8443}, {"name": "metrics", "containerPort": 9090}],
                                    "volumeMounts": [{"name": "tls", "mountPath": "/etc/ownerguard/tls", "readOnly": true}]}],
                                "volumes": [{"name": "tls", "secret": {"secretName": "ownerguard-tls"}}]}}},
                   "status": {"replicas": 2, "readyReplicas": 2}}),
            ),
            (
                SERVICE.to_string(),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ownerguard", "namespace": NS},
                   "spec": {"selector": labels, "ports": [
                       {"name": "https", "port": 443, "targetPort": "https"},
                       {"name": "metrics", "port": 9090, "targetPort": "metrics"}]}}),
            ),
            (
                PDB.to_string(),
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "ownerguard", "namespace": NS},
                   "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}}),
            ),
            (SECRET.to_string(), secret("ownerguard-tls", &serving)),
            // The namespaces, for their modes.
            (
                "/api/v1/namespaces".to_string(),
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {},
                   "items": [
                       {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                        "metadata": {"name": "agents", "labels": {"kubernetes.io/metadata.name": "agents"}}},
                       {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                        "metadata": {"name": "agents-new", "labels": {"kubernetes.io/metadata.name": "agents-new", "ownerguard.io/mode": "enforce"}}},
                       {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                        "metadata": {"name": NS, "labels": {"kubernetes.io/metadata.name": NS}}}]}),
            ),
        ];
        Self { objects }
    }

    /// The object at `path`, to change.
    fn at(&mut self, path: &str) -> &mut Value {
        &mut self
            .objects
            .iter_mut()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("no object at {path}"))
            .1
    }

    fn put(&mut self, path: &str, object: Value) {
        self.objects.retain(|(p, _)| p != path);
        self.objects.push((path.to_string(), object));
    }

    fn remove(&mut self, path: &str) {
        self.objects.retain(|(p, _)| p != path);
    }

    fn install(&self, api: &FakeApi) {
        for (path, object) in &self.objects {
            api.put_raw(path, object.clone());
        }
    }
}

fn options() -> DoctorOptions {
    DoctorOptions {
        namespace: NS.into(),
        name: "ownerguard".into(),
        tls_secret: None,
        // Nothing listens there: the handshake fails at once and the
        // Secret is read, as from outside the cluster.
        serving_address: Some("127.0.0.1:1".into()),
        min_certificate_days: 14,
        probe: None,
        probe_only: false,
        output: ownerguard::commands::cli::DoctorOutput::Text,
        target: Default::default(),
    }
}

async fn run(setup: &Setup) -> Vec<Check> {
    let server = FakeApi::start().await;
    setup.install(&server.api);
    let installation = gather(server.client(), &options()).await.unwrap();
    check(
        &installation,
        &options(),
        time::OffsetDateTime::now_utc().unix_timestamp(),
    )
}

fn failed(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .map(ToString::to_string)
        .collect()
}

/// The failures of `setup`: exactly `count`, each starting with one of
/// `subjects` and each containing `says`.
async fn fails(setup: &Setup, count: usize, subjects: &[&str], says: &str) -> Vec<String> {
    let failures = failed(&run(setup).await);
    assert_eq!(failures.len(), count, "{failures:#?}");
    for failure in &failures {
        assert!(
            subjects
                .iter()
                .any(|s| failure.starts_with(&format!("FAIL {s}"))),
            "unexpected failure {failure}, wanted one of {subjects:?}"
        );
        assert!(failure.contains(says), "{failure} does not say {says:?}");
    }
    failures
}

#[tokio::test]
async fn a_healthy_installation_passes_every_check() {
    let checks = run(&Setup::healthy()).await;
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
    // The two configurations, the server, the certificate, no other
    // installation, the namespaces' modes; per webhook its caBundle,
    // Service, path, rules, objectSelector, matchConditions,
    // namespaceSelector, failurePolicy and timeout; replicas and the PDB.
    assert_eq!(checks.len(), 2 + 1 + 1 + 1 + 1 + 2 * 9 + 2, "{checks:#?}");
    let report: Vec<String> = checks.iter().map(ToString::to_string).collect();
    for expected in [
        "ok   caBundle of mutating mutate.ownerguard.io: verifies the serving certificate for ownerguard.ownerguard.svc",
        "ok   service of mutating mutate.ownerguard.io: Service ownerguard/ownerguard port 443 reaches container port 8443 (https), where ownerguard serves HTTPS",
        "ok   path of validating validate.ownerguard.io: calls /validate",
        "ok   rules of mutating mutate.ownerguard.io: CREATE covers every namespaced resource",
        "ok   objectSelector of validating validate.ownerguard.io: ownerguard.io/owner-pod Exists: every labelled object",
        "ok   matchConditions of mutating mutate.ownerguard.io: create-or-ownership-update, as this version's chart writes it",
        "ok   server: container ownerguard runs ownerguard serve: webhook port 8443, metrics port 9090, key prefix ownerguard.io",
        "ok   PodDisruptionBudget: ownerguard (maxUnavailable 1) lets a drain take one of 2 pods at a time",
    ] {
        assert!(
            report.iter().any(|l| l == expected),
            "no `{expected}` in {report:#?}"
        );
    }
    assert!(
        report
            .iter()
            .any(|l| l.starts_with("ok   serving certificate: 36")
                && l.ends_with("in Secret ownerguard/ownerguard-tls (tls.crt)")),
        "{report:#?}"
    );
}

// --- What the API server calls -------------------------------------------

#[tokio::test]
async fn swapped_paths_fail_both_webhooks() {
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]["clientConfig"]["service"]["path"] = json!("/validate");
    setup.at(VALIDATING)["webhooks"][0]["clientConfig"]["service"]["path"] = json!("/mutate");
    let failures = fails(&setup, 2, &["path of"], "must call").await;
    assert!(failures[0].contains("calls /validate, but a mutating webhook must call /mutate: the validation runs before the reference is injected"), "{failures:#?}");
}

#[tokio::test]
async fn a_webhook_pointed_at_the_root_path_fails() {
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]["clientConfig"]["service"]["path"] = json!("/");
    let failures = fails(
        &setup,
        1,
        &["path of mutating"],
        "ownerguard answers 404 there",
    )
    .await;
    assert!(failures[0].contains("calls /,"), "{failures:#?}");
}

#[tokio::test]
async fn a_webhook_pointed_at_the_metrics_port_fails() {
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"][0]["clientConfig"]["service"]["port"] = json!(9090);
    fails(
        &setup,
        1,
        &["service of validating"],
        "the plain-HTTP metrics port",
    )
    .await;
}

#[tokio::test]
async fn a_service_port_targeting_another_port_fails() {
    let mut setup = Setup::healthy();
    setup.at(SERVICE)["spec"]["ports"][0]["targetPort"] = json!(8080);
    fails(
        &setup,
        2,
        &["service of"],
        "ownerguard serves HTTPS on 8443",
    )
    .await;
    // A named target the container does not declare.
    let mut setup = Setup::healthy();
    setup.at(SERVICE)["spec"]["ports"][0]["targetPort"] = json!("webhook");
    fails(&setup, 2, &["service of"], "does not declare").await;
}

#[tokio::test]
async fn a_missing_service_or_one_selecting_other_pods_fails() {
    let mut setup = Setup::healthy();
    setup.remove(SERVICE);
    fails(&setup, 2, &["service of"], "not found: every call fails").await;
    let mut setup = Setup::healthy();
    setup.at(SERVICE)["spec"]["selector"] = json!({"app.kubernetes.io/name": "other"});
    fails(&setup, 2, &["service of"], "no ownerguard endpoint").await;
}

#[tokio::test]
async fn a_server_listening_elsewhere_than_the_service_targets_fails() {
    let mut setup = Setup::healthy();
    // extraArgs appended last: the last --addr wins.
    setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap()
        .push(json!("--addr=0.0.0.0:10443"));
    fails(
        &setup,
        2,
        &["service of"],
        "ownerguard serves HTTPS on 10443",
    )
    .await;
}

/// Found by review: a command line the server refuses is the one failure,
/// not the Service's ports too; the pods' other flags are still judged.
#[tokio::test]
async fn a_command_line_the_server_refuses_fails_the_server_check_alone() {
    let mut setup = Setup::healthy();
    setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap()
        .push(json!("--addr=ownerguard:10443"));
    // The port the pods were meant to serve on: judged against the
    // server's earlier --addr, the Service would fail as well.
    setup.at(SERVICE)["spec"]["ports"][0]["targetPort"] = json!(10443);
    fails(
        &setup,
        1,
        &["server"],
        "--addr 'ownerguard:10443' is not an address such as 0.0.0.0:8443, so the server refuses to start",
    )
    .await;
}

/// Found by review: the kubelet fills `$(VAR)` in from the container's
/// environment before the server reads it.
#[tokio::test]
async fn an_address_the_kubelet_expands_passes() {
    let mut setup = Setup::healthy();
    setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array_mut()
        .unwrap()
        .push(json!("--addr=$(POD_IP):8443"));
    let failures = failed(&run(&setup).await);
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn a_configuration_without_webhooks_fails() {
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"] = json!([]);
    fails(
        &setup,
        1,
        &["ValidatingWebhookConfiguration"],
        "has no webhooks",
    )
    .await;
}

#[tokio::test]
async fn rules_covering_only_delete_fail() {
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]["rules"][0]["operations"] = json!(["DELETE"]);
    fails(&setup, 1, &["rules of mutating"], "no rule covers CREATE").await;
}

#[tokio::test]
async fn rules_without_update_or_for_cluster_scope_only_fail() {
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"][0]["rules"][0]["operations"] = json!(["CREATE"]);
    fails(&setup, 1, &["rules of validating"], "no rule covers UPDATE").await;
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]["rules"][0]["scope"] = json!("Cluster");
    fails(&setup, 1, &["rules of mutating"], "no rule covers CREATE").await;
}

#[tokio::test]
async fn rules_for_some_resources_only_warn() {
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]["rules"][0]["resources"] = json!(["pods", "configmaps"]);
    let checks = run(&setup).await;
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    let warning = checks
        .iter()
        .find(|c| c.verdict == Verdict::Warn)
        .expect("a warning");
    assert_eq!(
        warning.to_string(),
        "warn rules of mutating mutate.ownerguard.io: CREATE covers only pods, configmaps: the pod templates of other labelled kinds (a Deployment, a CronJob) are not completed"
    );
}

#[tokio::test]
async fn a_match_condition_edited_by_hand_fails_and_none_warns() {
    // One more term: UPDATEs of agent ConfigMaps are skipped, and no probe
    // would notice (the probe creates).
    let mut setup = Setup::healthy();
    let expression = setup.at(MUTATING)["webhooks"][0]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .to_string();
    setup.at(MUTATING)["webhooks"][0]["matchConditions"][0]["expression"] = json!(format!(
        "({expression}) && request.resource.resource != 'configmaps'"
    ));
    fails(
        &setup,
        1,
        &["matchConditions of mutating"],
        "the expression of create-or-ownership-update differs from the chart's",
    )
    .await;
    // A second condition that excludes a namespace.
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"][0]["matchConditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "not-agents", "expression": "request.namespace != 'agents'"}));
    fails(
        &setup,
        1,
        &["matchConditions of validating"],
        "conditions [create-or-ownership-update, not-agents], the chart's are [create-or-ownership-update]",
    )
    .await;
    // The same conditions written by another chart version: not this
    // doctor's to judge (a doctor of another version reports no false
    // failure), but said.
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["metadata"]["labels"]["helm.sh/chart"] = json!("ownerguard-9.9.9");
    setup.at(VALIDATING)["webhooks"][0]["matchConditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "not-agents", "expression": "request.namespace != 'agents'"}));
    let checks = run(&setup).await;
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    let warned = checks
        .iter()
        .find(|c| c.subject == "matchConditions of validating validate.ownerguard.io")
        .unwrap();
    assert_eq!(warned.verdict, Verdict::Warn);
    assert!(
        warned.detail.contains("written by chart ownerguard-9.9.9"),
        "{warned:?}"
    );
    // The expression re-indented (another YAML style) is the same.
    let mut setup = Setup::healthy();
    let spaced = expression.replace('\n', "\n      ");
    setup.at(MUTATING)["webhooks"][0]["matchConditions"][0]["expression"] = json!(spaced);
    assert!(failed(&run(&setup).await).is_empty());
    // None at all: every UPDATE is sent, nothing skipped: a warning.
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]
        .as_object_mut()
        .unwrap()
        .remove("matchConditions");
    let checks = run(&setup).await;
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    assert!(checks.iter().any(|c| c.verdict == Verdict::Warn
        && c.subject == "matchConditions of mutating mutate.ownerguard.io"));
}

#[tokio::test]
async fn an_object_selector_that_never_matches_fails() {
    let mut setup = Setup::healthy();
    setup.at(MUTATING)["webhooks"][0]["objectSelector"] =
        json!({"matchLabels": {"ownerguard.io/owner-pod": "never"}});
    fails(
        &setup,
        1,
        &["objectSelector of mutating"],
        "must be exactly ownerguard.io/owner-pod Exists",
    )
    .await;
    // A selector on another prefix than the server's --key-prefix.
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"][0]["objectSelector"]["matchExpressions"][0]["key"] =
        json!("example.com/owner-pod");
    fails(
        &setup,
        1,
        &["objectSelector of validating"],
        "the server's --key-prefix",
    )
    .await;
}

// Issue 19: a webhook's role is its configuration and name, never its
// selector.

#[tokio::test]
async fn an_inverted_selector_without_conditions_fails_whichever_webhook() {
    for (path, kind) in [(MUTATING, "mutating"), (VALIDATING, "validating")] {
        let mut setup = Setup::healthy();
        let webhook = &mut setup.at(path)["webhooks"][0];
        webhook["objectSelector"]["matchExpressions"][0]["operator"] = json!("DoesNotExist");
        webhook.as_object_mut().unwrap().remove("matchConditions");
        fails(
            &setup,
            1,
            &[&format!("objectSelector of {kind}")],
            "must be exactly ownerguard.io/owner-pod Exists",
        )
        .await;
    }
}

#[tokio::test]
async fn the_two_configurations_webhooks_swapped_fail() {
    let mut setup = Setup::healthy();
    let mutate = setup.at(MUTATING)["webhooks"][0].clone();
    let validate = setup.at(VALIDATING)["webhooks"][0].clone();
    setup.at(MUTATING)["webhooks"][0] = validate;
    setup.at(VALIDATING)["webhooks"][0] = mutate;
    let failures = fails(
        &setup,
        4,
        &["role of", "webhook mutate.", "webhook validate."],
        "",
    )
    .await;
    for expected in [
        "FAIL role of mutating validate.ownerguard.io: validate.ownerguard.io belongs in the validating configuration",
        "FAIL role of validating mutate.ownerguard.io: mutate.ownerguard.io belongs in the mutating configuration",
        "FAIL webhook mutate.ownerguard.io: not in the mutating configuration: labelled objects are never completed",
        "FAIL webhook validate.ownerguard.io: not in the validating configuration",
    ] {
        assert!(
            failures.iter().any(|f| f.starts_with(expected)),
            "no `{expected}` in {failures:#?}"
        );
    }
}

#[tokio::test]
async fn a_webhook_of_a_name_the_chart_does_not_write_fails() {
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"][0]["name"] = json!("validate-pods.example.com");
    let failures = fails(
        &setup,
        2,
        &["role of validating validate-pods", "webhook validate."],
        "",
    )
    .await;
    assert!(
        failures[0].contains("its role, so what it must call and select, cannot be told"),
        "{failures:#?}"
    );
}

#[tokio::test]
async fn own_namespace_not_excluded_fails() {
    let mut setup = Setup::healthy();
    for path in [MUTATING, VALIDATING] {
        setup.at(path)["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] =
            json!(["kube-system"]);
    }
    fails(
        &setup,
        2,
        &["namespaceSelector of"],
        "does not exclude ownerguard",
    )
    .await;
}

#[tokio::test]
async fn the_cluster_wide_webhook_is_judged_as_such() {
    let mut setup = Setup::healthy();
    let mut all = setup.at(VALIDATING)["webhooks"][0].clone();
    all["name"] = json!("validate-all.ownerguard.io");
    all["objectSelector"]["matchExpressions"][0]["operator"] = json!("DoesNotExist");
    all["rules"][0]["operations"] = json!(["CREATE"]);
    all["failurePolicy"] = json!("Ignore");
    all["clientConfig"]["service"]["path"] = json!("/validate-all");
    all["matchConditions"] = rendered_conditions("podReferences");
    setup.at(VALIDATING)["webhooks"]
        .as_array_mut()
        .unwrap()
        .push(all.clone());
    let checks = run(&setup).await;
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "Ignore, CREATE only and /validate-all are right for it: {checks:#?}"
    );
    assert_eq!(checks.len(), 26 + 9);
    // /validate works there, but fails closed on a lookup: a warning.
    setup.at(VALIDATING)["webhooks"][1]["clientConfig"]["service"]["path"] = json!("/validate");
    let warned: Vec<String> = run(&setup)
        .await
        .iter()
        .filter(|c| c.verdict != Verdict::Ok)
        .map(ToString::to_string)
        .collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    assert!(warned[0].starts_with("warn path of"), "{warned:#?}");
    setup.at(VALIDATING)["webhooks"][1]["clientConfig"]["service"]["path"] = json!("/validate-all");
    // With Fail it warns: an outage then stops pod creation cluster-wide.
    let webhooks = setup.at(VALIDATING)["webhooks"].as_array_mut().unwrap();
    webhooks[1]["failurePolicy"] = json!("Fail");
    let checks = run(&setup).await;
    let warnings: Vec<String> = checks
        .iter()
        .filter(|c| c.verdict != Verdict::Ok)
        .map(ToString::to_string)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].starts_with(
        "warn failurePolicy of validating validate-all.ownerguard.io: Fail: an outage"
    ));
}

#[tokio::test]
async fn failure_policy_and_timeout_must_match_the_server_flags() {
    let mut setup = Setup::healthy();
    for path in [MUTATING, VALIDATING] {
        setup.at(path)["webhooks"][0]["failurePolicy"] = json!("Ignore");
        setup.at(path)["webhooks"][0]["timeoutSeconds"] = json!(2);
    }
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 4, "{failures:#?}");
    assert_eq!(
        failures
            .iter()
            .filter(|f| f.contains("failurePolicy") && f.contains("without --fail-open"))
            .count(),
        2
    );
    assert_eq!(
        failures
            .iter()
            .filter(|f| f.contains("timeoutSeconds"))
            .count(),
        2
    );
    let args = &mut setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["args"];
    args.as_array_mut().unwrap().extend([
        json!("--fail-open"),
        json!("--lookup-timeout"),
        json!("1s"),
    ]);
    assert!(failed(&run(&setup).await).is_empty());
}

// --- What the pods run and mount ------------------------------------------

#[tokio::test]
async fn flags_given_in_command_instead_of_args_fail() {
    let mut setup = Setup::healthy();
    let container = &mut setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0];
    container["command"] = container["args"].take();
    // The server check names it; which certificate a server that does not
    // run would serve cannot be told, so neither can the caBundles verify.
    let failures = fails(&setup, 2, &["server", "serving certificate"], "").await;
    assert!(
        failures[0]
            .starts_with("FAIL server: container ownerguard runs `serve --addr=0.0.0.0:8443"),
        "{failures:#?}"
    );
    assert!(failures[0].ends_with("its command replaces the image's entrypoint (the ownerguard binary), so it does not run ownerguard serve; give the flags as args"), "{failures:#?}");
}

#[tokio::test]
async fn flags_in_command_with_the_binary_are_read() {
    let mut setup = Setup::healthy();
    let container = &mut setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"].take();
    let mut command = vec![json!("/usr/local/bin/ownerguard")];
    command.extend(args.as_array().unwrap().iter().cloned());
    command.push(json!("--fail-open"));
    container["command"] = json!(command);
    // It runs, and doctor reads its --fail-open: against failurePolicy Fail.
    fails(&setup, 2, &["failurePolicy of"], "runs with --fail-open").await;
}

#[tokio::test]
async fn the_mounted_secret_is_checked_not_a_stale_one_named_like_the_release() {
    let good = certs::generate(&[HOST.into()], &[], 365).unwrap();
    let mut setup = Setup::healthy();
    let ca = setup.at(MUTATING)["webhooks"][0]["clientConfig"]["caBundle"].clone();
    // The pods mount another Secret under another volume name, signed by
    // another CA than the caBundle; the stale ownerguard-tls still verifies.
    let spec = &mut setup.at(DEPLOYMENT)["spec"]["template"]["spec"];
    spec["volumes"] = json!([{"name": "serving", "secret": {"secretName": "ownerguard-serving"}}]);
    spec["containers"][0]["volumeMounts"][0]["name"] = json!("serving");
    setup.put(
        "/api/v1/namespaces/ownerguard/secrets/ownerguard-serving",
        secret("ownerguard-serving", &good),
    );
    assert_ne!(ca, json!(b64(&good.ca_pem)));
    fails(&setup, 2, &["caBundle of"], "does not verify").await;

    // The same mount with a Secret the caBundle verifies: healthy, and the
    // report names the mounted Secret.
    let mut setup = Setup::healthy();
    let stale = certs::generate(&[HOST.into()], &[], 365).unwrap();
    let serving = setup.at(SECRET).clone();
    setup.put(SECRET, secret("ownerguard-tls", &stale));
    let spec = &mut setup.at(DEPLOYMENT)["spec"]["template"]["spec"];
    spec["volumes"] = json!([{"name": "serving", "secret": {"secretName": "ownerguard-serving",
                               "items": [{"key": "tls.crt", "path": "chain.pem"}, {"key": "tls.key", "path": "tls.key"}]}}]);
    spec["containers"][0]["volumeMounts"][0]["name"] = json!("serving");
    spec["containers"][0]["args"][3] = json!("--tls-cert=/etc/ownerguard/tls/chain.pem");
    let mut mounted = serving;
    mounted["metadata"]["name"] = json!("ownerguard-serving");
    setup.put(
        "/api/v1/namespaces/ownerguard/secrets/ownerguard-serving",
        mounted,
    );
    let checks = run(&setup).await;
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    assert!(checks.iter().any(|c| {
        c.subject == "serving certificate"
            && c.detail
                .ends_with("Secret ownerguard/ownerguard-serving (tls.crt)")
    }));
}

#[tokio::test]
async fn a_certificate_outside_a_secret_or_under_a_sub_path_fails() {
    let mut setup = Setup::healthy();
    setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] =
        json!("/etc/other");
    // The caBundles are not judged without a certificate (warnings).
    fails(&setup, 1, &["serving certificate"], "").await;
    let report = failed(&run(&setup).await);
    assert!(report[0].contains("is on no mounted volume"), "{report:#?}");

    let mut setup = Setup::healthy();
    let mount =
        &mut setup.at(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0];
    mount["mountPath"] = json!("/etc/ownerguard/tls/tls.crt");
    mount["subPath"] = json!("tls.crt");
    let report = failed(&run(&setup).await);
    assert!(
        report
            .iter()
            .any(|f| f.starts_with("FAIL serving certificate") && f.contains("subPath")),
        "{report:#?}"
    );
}

#[tokio::test]
async fn a_wrong_ca_bundle_fails() {
    let mut setup = Setup::healthy();
    let other = certs::generate(&[HOST.into()], &[], 365).unwrap().ca_pem;
    for path in [MUTATING, VALIDATING] {
        setup.at(path)["webhooks"][0]["clientConfig"]["caBundle"] = json!(b64(&other));
    }
    fails(&setup, 2, &["caBundle of"], "does not verify").await;
}

#[tokio::test]
async fn a_certificate_for_another_name_fails() {
    let mut setup = Setup::healthy();
    let serving = certs::generate(&["elsewhere.ownerguard.svc".into()], &[], 365).unwrap();
    setup.put(SECRET, secret("ownerguard-tls", &serving));
    for path in [MUTATING, VALIDATING] {
        setup.at(path)["webhooks"][0]["clientConfig"]["caBundle"] = json!(b64(&serving.ca_pem));
    }
    fails(&setup, 2, &["caBundle of"], "for ownerguard.ownerguard.svc").await;
}

#[tokio::test]
async fn a_certificate_five_days_from_expiry_fails() {
    let mut setup = Setup::healthy();
    let serving = certs::generate(&[HOST.into()], &[], 5).unwrap();
    setup.put(SECRET, secret("ownerguard-tls", &serving));
    for path in [MUTATING, VALIDATING] {
        setup.at(path)["webhooks"][0]["clientConfig"]["caBundle"] = json!(b64(&serving.ca_pem));
    }
    let failures = fails(&setup, 1, &["serving certificate"], "days left").await;
    assert!(
        failures[0].starts_with("FAIL serving certificate: 4 days left")
            || failures[0].starts_with("FAIL serving certificate: 5 days left"),
        "{failures:#?}"
    );
}

// --- Replicas and disruptions ---------------------------------------------

#[tokio::test]
async fn a_disruption_budget_that_lets_a_drain_take_every_pod_fails() {
    let mut setup = Setup::healthy();
    setup.at(PDB)["spec"]["maxUnavailable"] = json!("100%");
    fails(
        &setup,
        1,
        &["PodDisruptionBudget"],
        "evict all 2 pods at once",
    )
    .await;
    setup.at(PDB)["spec"]["maxUnavailable"] = json!(2);
    fails(
        &setup,
        1,
        &["PodDisruptionBudget"],
        "evict all 2 pods at once",
    )
    .await;
}

#[tokio::test]
async fn a_disruption_budget_that_blocks_every_drain_fails() {
    let mut setup = Setup::healthy();
    let spec = &mut setup.at(PDB)["spec"];
    spec.as_object_mut().unwrap().remove("maxUnavailable");
    spec["minAvailable"] = json!(2);
    fails(
        &setup,
        1,
        &["PodDisruptionBudget"],
        "lets no pod of 2 be evicted",
    )
    .await;
    setup.at(PDB)["spec"]["minAvailable"] = json!("100%");
    fails(
        &setup,
        1,
        &["PodDisruptionBudget"],
        "every node drain blocks",
    )
    .await;
    setup.at(PDB)["spec"]["minAvailable"] = json!(1);
    assert!(failed(&run(&setup).await).is_empty());
}

#[tokio::test]
async fn no_or_two_disruption_budgets_fail() {
    let mut setup = Setup::healthy();
    setup.remove(PDB);
    fails(
        &setup,
        1,
        &["PodDisruptionBudget"],
        "none in ownerguard covers",
    )
    .await;
    let mut setup = Setup::healthy();
    let mut second = setup.at(PDB).clone();
    second["metadata"]["name"] = json!("extra");
    second["spec"]["selector"] = json!({"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In", "values": ["ownerguard"]}]});
    setup.put(
        "/apis/policy/v1/namespaces/ownerguard/poddisruptionbudgets/extra",
        second,
    );
    fails(
        &setup,
        1,
        &["PodDisruptionBudget"],
        "refuses to evict a pod under more than one",
    )
    .await;
}

#[tokio::test]
async fn replicas_not_ready_fail_and_a_missing_installation_fails_every_check() {
    let mut setup = Setup::healthy();
    setup.at(DEPLOYMENT)["status"]["readyReplicas"] = json!(0);
    let failures = fails(&setup, 1, &["replicas"], "0 of 2 ready").await;
    assert!(failures[0].starts_with("FAIL replicas: 0 of 2 ready"));

    let server = FakeApi::start().await;
    let installation = gather(server.client(), &options()).await.unwrap();
    let failures = failed(&check(&installation, &options(), 0));
    // Both configurations, the server, the certificate, replicas, the PDB.
    assert_eq!(failures.len(), 6, "{failures:#?}");
}

// --- The probe --------------------------------------------------------------

/// An API server that answers the probe's POSTs from a script (the last
/// answer repeats) and records each request.
#[derive(Clone, Default)]
struct ProbeApi {
    answers: Arc<Mutex<VecDeque<(u16, Value)>>>,
    requests: Arc<Mutex<Vec<(String, String, Value)>>>,
}

fn denial(code: u16, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": if code == 403 { "Forbidden" } else { "" }, "code": code}),
    )
}

const NOT_FOUND: &str = "admission webhook \"mutate.ownerguard.io\" denied the request: owner pod 'ownerguard-doctor-probe-no-such-pod' not found in namespace 'agents'";
const NOT_CALLED: &str = "Internal error occurred: failed calling webhook \"mutate.ownerguard.io\": failed to call webhook: Post \"https://ownerguard.ownerguard.svc:443/mutate?timeout=5s\": no endpoints available for service \"ownerguard\"";

impl ProbeApi {
    async fn start(answers: Vec<(u16, Value)>) -> (Self, String, tokio::task::JoinHandle<()>) {
        let api = Self {
            answers: Arc::new(Mutex::new(answers.into())),
            ..Self::default()
        };
        let app = axum::Router::new()
            .route(
                "/api/v1/namespaces/{namespace}/configmaps",
                axum::routing::post(
                    |State(api): State<ProbeApi>,
                     Path(namespace): Path<String>,
                     RawQuery(query): RawQuery,
                     body: axum::body::Bytes| async move {
                        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
                        api.requests.lock().unwrap().push((
                            namespace,
                            query.unwrap_or_default(),
                            body.clone(),
                        ));
                        let (code, answer) = {
                            let mut answers = api.answers.lock().unwrap();
                            if answers.len() > 1 {
                                answers.pop_front().unwrap()
                            } else {
                                answers.front().cloned().unwrap()
                            }
                        };
                        let answer = if code == 201 { body } else { answer };
                        (
                            StatusCode::from_u16(code).unwrap(),
                            [("content-type", "application/json")],
                            answer.to_string(),
                        )
                            .into_response()
                    },
                ),
            )
            .with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (api, url, task)
    }
}

/// As `doctor` builds it: no retries inside the client.
fn client(url: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn the_probe_passes_on_mutates_own_denial_after_a_lookup() {
    let (api, url, _task) = ProbeApi::start(vec![denial(403, NOT_FOUND)]).await;
    let check = probe(client(&url), "agents", "ownerguard.io").await;
    assert_eq!(check.verdict, Verdict::Ok, "{check}");
    assert_eq!(check.subject, "probe in agents");
    // A dry run, labelled with an owner pod that does not exist and a uid,
    // so that ownerguard looks it up rather than asking for the uid.
    let requests = api.requests.lock().unwrap();
    let (namespace, query, body) = &requests[0];
    assert_eq!(namespace, "agents");
    assert!(query.contains("dryRun=All"), "{query}");
    assert_eq!(
        body["metadata"]["labels"],
        json!({"ownerguard.io/owner-pod": "ownerguard-doctor-probe-no-such-pod",
               "ownerguard.io/owner-uid": "00000000-0000-0000-0000-000000000000"})
    );
    assert_eq!(body["metadata"]["generateName"], "ownerguard-doctor-probe-");
}

#[tokio::test]
async fn the_probe_fails_on_every_other_answer() {
    for (answer, says) in [
        (denial(500, NOT_CALLED), "could not call the webhook"),
        (
            (201, Value::Null),
            "went through: the API server did not call mutate.ownerguard.io",
        ),
        (
            denial(
                403,
                "configmaps is forbidden: User \"system:serviceaccount:ownerguard:ownerguard-check\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"agents\"",
            ),
            "may not create ConfigMaps in agents",
        ),
        (
            denial(
                503,
                "admission webhook \"mutate.ownerguard.io\" denied the request: owner pod 'x' could not be checked",
            ),
            "answered 503 instead of 403",
        ),
        (
            denial(
                403,
                "admission webhook \"mutate.example.com\" denied the request: owner pod 'x' not found",
            ),
            "refused otherwise than by mutate.ownerguard.io's denial",
        ),
    ] {
        let (_api, url, _task) = ProbeApi::start(vec![answer]).await;
        let check = probe(client(&url), "agents", "ownerguard.io").await;
        assert_eq!(check.verdict, Verdict::Fail, "{check}");
        assert!(check.detail.contains(says), "{check} does not say {says:?}");
    }
}

#[tokio::test]
async fn the_probe_retries_while_the_pods_start() {
    let (api, url, _task) = ProbeApi::start(vec![
        denial(500, NOT_CALLED),
        denial(500, NOT_CALLED),
        denial(403, NOT_FOUND),
    ])
    .await;
    let check = probe_until(
        client(&url),
        "agents",
        "ownerguard.io",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(check.verdict, Verdict::Ok, "{check}");
    assert_eq!(api.requests.lock().unwrap().len(), 3);

    // Within the wait only: then the last failure is the answer.
    let (_api, url, _task) = ProbeApi::start(vec![denial(500, NOT_CALLED)]).await;
    let started = std::time::Instant::now();
    let check = probe_until(
        client(&url),
        "agents",
        "ownerguard.io",
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(check.verdict, Verdict::Fail);
    assert!(started.elapsed() < Duration::from_secs(10));
}

fn doctor_command(kubeconfig: &std::path::Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ownerguard"))
        .args(["doctor", "--namespace", NS, "--name", "ownerguard"])
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_command_prints_one_line_per_check_and_exits_1_on_a_failure() {
    let server = FakeApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    Setup::healthy().install(&server.api);
    let kubeconfig = server.kubeconfig(dir.path());
    let output = tokio::task::block_in_place(|| doctor_command(&kubeconfig, &[]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.lines().count(), 26, "{stdout}");
    assert!(stdout.lines().all(|l| l.starts_with("ok   ")), "{stdout}");

    let server = FakeApi::start().await;
    let mut setup = Setup::healthy();
    setup.remove(PDB);
    setup.install(&server.api);
    let kubeconfig = server.kubeconfig(dir.path());
    let output = tokio::task::block_in_place(|| doctor_command(&kubeconfig, &[]));
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("FAIL PodDisruptionBudget"));
}

/// The chart's install check: `doctor --probe NS --probe-only --wait D`,
/// with no other permission than the dry-run create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_probe_only_is_one_line_and_waits_for_the_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = |url: &str| {
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!("apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: {url}\ncontexts:\n- name: p\n  context:\n    cluster: p\n    user: p\ncurrent-context: p\nusers:\n- name: p\n  user:\n    token: t\n"),
        )
        .unwrap();
        path
    };
    let args = [
        "--probe",
        "agents",
        "--probe-only",
        "--key-prefix",
        "ownerguard.io",
        "--wait",
        "20s",
    ];
    let (api, url, _task) =
        ProbeApi::start(vec![denial(500, NOT_CALLED), denial(403, NOT_FOUND)]).await;
    let config = kubeconfig(&url);
    let output = tokio::task::block_in_place(|| doctor_command(&config, &args));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with("ok   probe in agents: mutate.ownerguard.io answered"),
        "{stdout}"
    );
    assert_eq!(
        api.requests.lock().unwrap().len(),
        2,
        "only the probe was called"
    );

    let (_api, url, _task) = ProbeApi::start(vec![(201, Value::Null)]).await;
    let config = kubeconfig(&url);
    let output = tokio::task::block_in_place(|| doctor_command(&config, &args[..5]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with("FAIL probe in agents: a dry-run create"),
        "{stdout}"
    );
}

/// Found by review: a second release with the same keyPrefix registers
/// webhooks of the same names in another configuration; the API server
/// calls both, and the install check could not tell which one answered.
#[tokio::test]
async fn another_installation_judging_the_same_objects_fails() {
    let mut setup = Setup::healthy();
    let mut other = setup.at(MUTATING).clone();
    other["metadata"]["name"] = json!("zz-ownerguard");
    setup.put(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/zz-ownerguard",
        other.clone(),
    );
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("FAIL other installations: MutatingWebhookConfiguration zz-ownerguard webhook mutate.ownerguard.io (the same name)"),
        "{failures:#?}"
    );
    // Another name, the same owner label: the same clash.
    other["webhooks"][0]["name"] = json!("mutate.other.example.com");
    setup.put(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/zz-ownerguard",
        other,
    );
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(failures[0].contains("(the owner label)"), "{failures:#?}");
}

/// A TLS server on loopback presenting `cert_pem` (with `key_pem`), as a
/// pod behind the Service would; its address.
async fn serve_certificate(cert_pem: &str, key_pem: &str) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(tcp).await;
            });
        }
    });
    address
}

async fn run_with(
    setup: &Setup,
    options: &DoctorOptions,
    forbidden: &[&str],
) -> (Vec<Check>, Vec<String>) {
    let server = FakeApi::start().await;
    setup.install(&server.api);
    server
        .api
        .update_faults(|f| f.forbidden_paths = forbidden.iter().map(|p| p.to_string()).collect());
    let installation = gather(server.client(), options).await.unwrap();
    let checks = check(
        &installation,
        options,
        time::OffsetDateTime::now_utc().unix_timestamp(),
    );
    (checks, server.api.calls())
}

#[tokio::test]
async fn the_served_certificate_is_judged_without_reading_the_secret() {
    // doctor with no access to Secrets: the certificate the Service
    // serves is read by a handshake and each caBundle judged against it.
    let mut setup = Setup::healthy();
    let data = setup.at(SECRET)["data"].clone();
    let pem = |key: &str| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data[key].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let address = serve_certificate(&pem("tls.crt"), &pem("tls.key")).await;
    let served = DoctorOptions {
        serving_address: Some(address.to_string()),
        ..options()
    };
    let (checks, calls) =
        run_with(&setup, &served, &["/api/v1/namespaces/ownerguard/secrets"]).await;
    assert!(failed(&checks).is_empty(), "{checks:#?}");
    let serving = checks
        .iter()
        .find(|c| c.subject == "serving certificate")
        .unwrap();
    assert_eq!(serving.verdict, Verdict::Ok, "{serving:?}");
    assert!(
        serving.detail.contains(&format!("served at {address}")),
        "{serving:?}"
    );
    assert!(calls.iter().all(|c| !c.contains("/secrets")), "{calls:?}");

    // The Service serves another certificate than the Secret holds (the
    // pods never reloaded it, or another CA signed it): the served one is
    // what the API server sees, and the caBundles do not verify it.
    let stranger = certs::generate(&[HOST.into()], &[], 365).unwrap();
    let address = serve_certificate(&stranger.cert_pem, &stranger.key_pem).await;
    let served = DoctorOptions {
        serving_address: Some(address.to_string()),
        ..options()
    };
    let (checks, _) = run_with(&setup, &served, &[]).await;
    let failures = failed(&checks);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures.iter().all(|f| f.starts_with("FAIL caBundle of")
            && f.contains("does not verify the serving certificate")),
        "{failures:#?}"
    );

    // Neither served here nor readable: not judged, said, no failure.
    let (checks, _) = run_with(
        &setup,
        &options(),
        &["/api/v1/namespaces/ownerguard/secrets"],
    )
    .await;
    let serving = checks
        .iter()
        .find(|c| c.subject == "serving certificate")
        .unwrap();
    assert_eq!(serving.verdict, Verdict::Warn, "{serving:?}");
    assert!(
        serving.detail.contains("may not be read (403)"),
        "{serving:?}"
    );
    assert!(failed(&checks).is_empty(), "{checks:#?}");
}

#[tokio::test]
async fn a_namespace_labelled_for_a_mode_no_webhook_serves_is_named() {
    // An installation of one webhook per configuration (before modes): a
    // namespace labelled warn is still decided in enforce.
    let mut setup = Setup::healthy();
    setup.at("/api/v1/namespaces")["items"][1]["metadata"]["labels"]["ownerguard.io/mode"] =
        json!("warn");
    let checks = run(&setup).await;
    let modes = checks
        .iter()
        .find(|c| c.subject == "namespace modes")
        .unwrap();
    assert_eq!(modes.verdict, Verdict::Warn, "{modes}");
    assert!(
        modes
            .detail
            .contains("agents-new (labelled warn, decided in enforce)"),
        "{modes}"
    );
}

#[tokio::test]
async fn a_validating_webhook_selecting_a_namespace_in_another_mode_fails() {
    // The validating webhook's namespaceSelector edited by hand to skip a
    // namespace the mutating one decides in enforce: nothing guarantees
    // the final object there. Any disagreement of the two is a namespace
    // one webhook refuses in and the other does not.
    let mut setup = Setup::healthy();
    setup.at(VALIDATING)["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"] =
        json!(["kube-system", NS, "agents"]);
    let checks = run(&setup).await;
    let modes = checks
        .iter()
        .find(|c| c.subject == "namespace modes")
        .unwrap();
    assert_eq!(modes.verdict, Verdict::Fail, "{modes}");
    assert!(
        modes
            .detail
            .contains("agents (mutating: enforce; validating: none)"),
        "{modes}"
    );
}
