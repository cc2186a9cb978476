//! `ownerguard doctor` against the loopback API server: a healthy
//! installation passes every check; each way of breaking one fails the
//! check that names it.

mod apiserver;

use apiserver::{FakeApi, Running};
use base64::Engine;
use ownerguard::certs::{self, Generated};
use ownerguard::doctor::{Check, DoctorOptions, Verdict, check, gather};
use serde_json::{Value, json};

const NS: &str = "ownerguard";
const HOST: &str = "ownerguard.ownerguard.svc";

struct Setup {
    ca_bundle: String,
    serving: Generated,
    excluded: Vec<&'static str>,
    failure_policy: &'static str,
    timeout_seconds: i32,
    args: Vec<&'static str>,
    ready: i32,
    pdb: bool,
}

impl Setup {
    fn healthy() -> Self {
        let serving = certs::generate(&[HOST.into()], &[], 365).unwrap();
        Self {
            ca_bundle: serving.ca_pem.clone(),
            serving,
            excluded: vec!["kube-system", NS],
            failure_policy: "Fail",
            timeout_seconds: 5,
            args: vec!["serve", "--lookup-timeout=2s"],
            ready: 2,
            pdb: true,
        }
    }

    fn webhook(&self, name: &str, path: &str) -> Value {
        json!({
            "name": name,
            "clientConfig": {"service": {"name": "ownerguard", "namespace": NS, "path": path, "port": 443},
                             "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_bundle)},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": self.excluded}]},
            "objectSelector": {"matchExpressions": [{"key": "ownerguard.io/owner-pod", "operator": "Exists"}]},
            "failurePolicy": self.failure_policy, "timeoutSeconds": self.timeout_seconds,
            "sideEffects": "None", "admissionReviewVersions": ["v1"],
        })
    }

    fn install(&self, api: &FakeApi) {
        let labels = json!({"app.kubernetes.io/name": "ownerguard", "app.kubernetes.io/instance": "ownerguard"});
        api.put_raw(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/ownerguard",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "ownerguard"},
                   "webhooks": [self.webhook("mutate.ownerguard.io", "/mutate")]}),
        );
        api.put_raw(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/ownerguard",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "ownerguard"},
                   "webhooks": [self.webhook("validate.ownerguard.io", "/validate")]}),
        );
        api.put_raw(
            &format!("/apis/apps/v1/namespaces/{NS}/deployments/ownerguard"),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ownerguard", "namespace": NS},
                   "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                            "template": {"metadata": {"labels": labels}, "spec": {
                                "containers": [{"name": "ownerguard", "image": "ownerguard:0.1.0", "args": self.args}],
                                "volumes": [{"name": "tls", "secret": {"secretName": "ownerguard-tls"}}]}}},
                   "status": {"replicas": 2, "readyReplicas": self.ready}}),
        );
        if self.pdb {
            api.put_raw(
                &format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/ownerguard"),
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "ownerguard", "namespace": NS},
                       "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}),
            );
        }
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        api.put_raw(
            &format!("/api/v1/namespaces/{NS}/secrets/ownerguard-tls"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ownerguard-tls", "namespace": NS}, "type": "kubernetes.io/tls",
                   "data": {"tls.crt": b64(&self.serving.cert_pem), "tls.key": b64(&self.serving.key_pem), "ca.crt": b64(&self.serving.ca_pem)}}),
        );
    }
}

fn options() -> DoctorOptions {
    DoctorOptions {
        namespace: NS.into(),
        name: "ownerguard".into(),
        tls_secret: None,
        min_certificate_days: 14,
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

#[tokio::test]
async fn a_healthy_installation_passes_every_check() {
    let checks = run(&Setup::healthy()).await;
    assert!(failed(&checks).is_empty(), "{:#?}", failed(&checks));
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
    // Both configurations, each webhook's caBundle, exclusion, policy and
    // timeout, the certificate, replicas and the PDB.
    assert_eq!(checks.len(), 2 + 1 + 2 * 4 + 1 + 1, "{checks:#?}");
    let report: Vec<String> = checks.iter().map(ToString::to_string).collect();
    assert!(report.iter().any(|l| l.starts_with("ok   caBundle of mutating mutate.ownerguard.io: verifies the serving certificate for ownerguard.ownerguard.svc")), "{report:#?}");
    assert!(
        report
            .iter()
            .any(|l| l.starts_with("ok   serving certificate: 36")),
        "{report:#?}"
    );
}

#[tokio::test]
async fn a_wrong_ca_bundle_fails() {
    let mut setup = Setup::healthy();
    setup.ca_bundle = certs::generate(&[HOST.into()], &[], 365).unwrap().ca_pem;
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures
            .iter()
            .all(|f| f.contains("caBundle") && f.contains("does not verify")),
        "{failures:#?}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_fails() {
    let mut setup = Setup::healthy();
    setup.serving = certs::generate(&["elsewhere.ownerguard.svc".into()], &[], 365).unwrap();
    setup.ca_bundle = setup.serving.ca_pem.clone();
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 2, "{failures:#?}");
}

#[tokio::test]
async fn a_certificate_five_days_from_expiry_fails() {
    let mut setup = Setup::healthy();
    setup.serving = certs::generate(&[HOST.into()], &[], 5).unwrap();
    setup.ca_bundle = setup.serving.ca_pem.clone();
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("FAIL serving certificate: 4 days left")
            || failures[0].starts_with("FAIL serving certificate: 5 days left"),
        "{failures:#?}"
    );
}

#[tokio::test]
async fn own_namespace_not_excluded_fails() {
    let mut setup = Setup::healthy();
    setup.excluded = vec!["kube-system"];
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(
        failures
            .iter()
            .all(|f| f.contains("does not exclude ownerguard")),
        "{failures:#?}"
    );
}

#[tokio::test]
async fn no_pod_disruption_budget_fails() {
    let mut setup = Setup::healthy();
    setup.pdb = false;
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("FAIL PodDisruptionBudget"),
        "{failures:#?}"
    );
}

#[tokio::test]
async fn failure_policy_and_timeout_must_match_the_server_flags() {
    let mut setup = Setup::healthy();
    setup.failure_policy = "Ignore";
    setup.timeout_seconds = 2;
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 4, "{failures:#?}");
    assert!(
        failures
            .iter()
            .filter(|f| f.contains("failurePolicy") && f.contains("without --fail-open"))
            .count()
            == 2
    );
    assert!(
        failures
            .iter()
            .filter(|f| f.contains("timeoutSeconds"))
            .count()
            == 2
    );
    let mut setup = Setup::healthy();
    setup.failure_policy = "Ignore";
    setup.args = vec!["serve", "--fail-open", "--lookup-timeout", "1s"];
    setup.timeout_seconds = 2;
    assert!(failed(&run(&setup).await).is_empty());
}

#[tokio::test]
async fn replicas_not_ready_fail_and_a_missing_installation_fails_every_check() {
    let mut setup = Setup::healthy();
    setup.ready = 0;
    let failures = failed(&run(&setup).await);
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(failures[0].starts_with("FAIL replicas: 0 of 2 ready"));

    let server = FakeApi::start().await;
    let installation = gather(server.client(), &options()).await.unwrap();
    let failures = failed(&check(&installation, &options(), 0));
    assert_eq!(failures.len(), 5, "{failures:#?}");
}

fn doctor_command(server: &Running, dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ownerguard"))
        .args(["doctor", "--namespace", NS, "--name", "ownerguard"])
        .env("KUBECONFIG", server.kubeconfig(dir))
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_command_prints_one_line_per_check_and_exits_1_on_a_failure() {
    let server = FakeApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    Setup::healthy().install(&server.api);
    let output = tokio::task::block_in_place(|| doctor_command(&server, dir.path()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.lines().count(), 13, "{stdout}");
    assert!(stdout.lines().all(|l| l.starts_with("ok   ")), "{stdout}");

    let server = FakeApi::start().await;
    Setup {
        pdb: false,
        ..Setup::healthy()
    }
    .install(&server.api);
    let output = tokio::task::block_in_place(|| doctor_command(&server, dir.path()));
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("FAIL PodDisruptionBudget"));
}
