//! The chart's safety properties.
//!
//! Two layers. The first reads the templates and values as text and always
//! runs: it pins what an edit could silently drop, with no tool needed. The
//! second renders the chart with real Helm (the binary `OWNERGUARD_HELM`
//! names; `.ci/chart-check` builds one from Helm's Go module and sets it)
//! and judges what Helm produces: the objects, the refusals of bad values,
//! and `ownerguard doctor`'s verdict on the rendered installation. Those are
//! `#[ignore]`d, so that `cargo test` needs no network and no Go and says
//! plainly that they did not run; `.ci/chart-check` builds Helm and runs
//! them with `--include-ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use ownerguard::commands::doctor::{
    DoctorOptions, Installation, Verdict, check, serving_certificate_source,
};
use serde_json::{Value, json};

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/ownerguard")
}

fn template(name: &str) -> String {
    std::fs::read_to_string(chart().join("templates").join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn values() -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap()).unwrap()
}

fn schema() -> Value {
    serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
        .unwrap()
}

/// The body of `{{- define "name" -}} … {{- end }}` in a helpers file.
fn helper(file: &str, name: &str) -> String {
    let helpers = template(file);
    let start = helpers
        .find(&format!("define \"{name}\""))
        .unwrap_or_else(|| panic!("no helper {name}"));
    let rest = &helpers[start..];
    rest[..rest[1..].find("{{- define").map_or(rest.len(), |i| i + 1)].to_string()
}

// --- Text level: always runs -------------------------------------------------

#[test]
fn defaults_fail_closed_with_a_short_timeout_and_two_replicas() {
    let values = values();
    assert_eq!(values["webhook"]["failurePolicy"], "Fail");
    assert_eq!(values["webhook"]["timeoutSeconds"], 5);
    assert!(values["replicaCount"].as_u64().unwrap() >= 2);
    assert_eq!(values["server"]["requesterCheck"], "enforce");
    assert_eq!(values["keyPrefix"], "ownerguard.io");
    assert_eq!(values["webhook"]["filterUpdates"], true);
}

#[test]
fn defaults_that_cannot_break_the_cluster() {
    let values = values();
    // No image that does not exist: the repository must be given.
    assert_eq!(values["image"]["repository"], "");
    assert!(
        helper("_helpers.tpl", "ownerguard.image")
            .contains("required \"image.repository is required")
    );
    // A drain takes one pod at a time, whatever the replica count, and a
    // replica that is not ready never blocks it.
    assert_eq!(values["podDisruptionBudget"]["maxUnavailable"], 1);
    assert_eq!(values["podDisruptionBudget"]["minAvailable"], Value::Null);
    assert_eq!(
        values["podDisruptionBudget"]["unhealthyPodEvictionPolicy"],
        "AlwaysAllow"
    );
    // Scheduled before ordinary pods, with the quota that lets a cluster
    // limiting the class (GKE) admit it.
    assert_eq!(values["priorityClassName"], "system-cluster-critical");
    assert_eq!(values["priorityClassQuota"]["enabled"], true);
    // Metrics: every pod of the cluster, nothing outside it; the webhook
    // port's sources are the user's to name (the recipes of
    // docs/security.md).
    assert_eq!(
        values["networkPolicy"]["metricsFrom"],
        json!([{"namespaceSelector": {}}])
    );
    assert_eq!(values["networkPolicy"]["webhookFrom"], json!([]));
    assert_eq!(
        values["networkPolicy"]["cilium"]["webhookFromEntities"],
        json!([])
    );
    // The cluster-wide switch is opt-in, and fails open on its own.
    let all = &values["validation"]["allPodOwnerReferences"];
    assert_eq!(all["enabled"], false);
    assert_eq!(all["failurePolicy"], "Ignore");
    // chart mode never renders blind; the install is checked.
    assert_eq!(
        values["certificates"]["chart"]["allowRenderWithoutCluster"],
        false
    );
    assert_eq!(values["check"]["afterInstall"], true);
    // Derived, not fixed: the grace period and the shutdown timeout.
    assert_eq!(values["terminationGracePeriodSeconds"], Value::Null);
    assert_eq!(values["server"]["shutdownTimeout"], "");
}

#[test]
fn every_webhook_excludes_kube_system_and_the_release_namespace() {
    let selector = helper("_helpers.tpl", "ownerguard.namespaceSelector");
    for expected in [
        "key: kubernetes.io/metadata.name",
        "operator: NotIn",
        "- kube-system",
        "- {{ .root.Release.Namespace }}",
    ] {
        assert!(selector.contains(expected), "{expected} not in {selector}");
    }
    let common = helper("_helpers.tpl", "ownerguard.webhookCommon");
    assert!(
        common.contains("include \"ownerguard.namespaceSelector\""),
        "{common}"
    );
    for file in [
        "webhook-mutating.yaml",
        "webhook-validating.yaml",
        "webhook-cluster-wide.yaml",
    ] {
        let text = template(file);
        let webhooks = text.matches("  - name: ").count();
        let common = text.matches("include \"ownerguard.webhookCommon\"").count();
        assert!(webhooks >= 1);
        assert_eq!(
            webhooks, common,
            "{file}: a webhook without the shared settings (namespaceSelector, failurePolicy...)"
        );
    }
}

#[test]
fn webhook_settings_are_the_safe_ones() {
    let common = helper("_helpers.tpl", "ownerguard.webhookCommon");
    for expected in [
        "admissionReviewVersions: [\"v1\", \"v1beta1\"]",
        "sideEffects: {{ .sideEffects | default \"None\" }}",
        "timeoutSeconds: {{ .root.Values.webhook.timeoutSeconds }}",
        "matchPolicy: Equivalent",
    ] {
        assert!(common.contains(expected), "missing {expected} in {common}");
    }
    let mutating = template("webhook-mutating.yaml");
    assert!(mutating.contains("reinvocationPolicy: IfNeeded"));
    // One webhook per mode, each calling the word's path in that mode.
    assert!(mutating.contains("\"word\" \"mutate\""));
    assert!(!mutating.contains("\"validate\""));
    let validating = template("webhook-validating.yaml");
    assert!(validating.contains("\"word\" \"validate\""));
    assert!(!validating.contains("\"mutate\""));
    for text in [&mutating, &validating] {
        assert!(text.contains("(dict \"root\" $ \"operator\" \"Exists\")"));
        assert!(text.contains("(list \"CREATE\" \"UPDATE\")"));
        assert!(text.contains("include \"ownerguard.matchConditions.labelled\""));
    }
    // Every namespaced resource, main resources only (issue 8).
    let rules = &values()["webhook"]["rules"];
    assert_eq!(
        *rules,
        json!([{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}])
    );
    assert!(helper("_helpers.tpl", "ownerguard.rules").contains("scope: Namespaced"));
}

#[test]
fn the_cluster_wide_switch_has_its_own_policy_and_opt_out() {
    // In a configuration of its own, all of it behind the switch: turning
    // the switch off deletes the object whole (a webhook entry the CA
    // injector co-owns could not be removed by Helm 4's server-side apply).
    assert!(!template("webhook-validating.yaml").contains("allPodOwnerReferences"));
    let cluster_wide = template("webhook-cluster-wide.yaml");
    let switch = cluster_wide.find("{{- if .enabled }}").expect("the switch");
    assert!(
        !cluster_wide[..switch].contains("kind:"),
        "an object outside the switch"
    );
    let guarded = &cluster_wide[switch..];
    for expected in [
        "\"path\" \"/validate-all\"",
        "(list \"CREATE\")",
        "\"operator\" \"DoesNotExist\"",
        "include \"ownerguard.matchConditions.podReferences\"",
        "\"failurePolicy\" .failurePolicy \"optOut\" true",
    ] {
        assert!(guarded.contains(expected), "{expected} not in {guarded}");
    }
    assert!(
        helper("_helpers.tpl", "ownerguard.namespaceSelector").contains(
            "{{ .root.Values.keyPrefix }}/skip-validate-all\n      operator: DoesNotExist"
        )
    );
    assert!(
        !template("webhook-mutating.yaml").contains("allPodOwnerReferences"),
        "the switch must never mutate"
    );
}

#[test]
fn rbac_is_get_list_watch_on_pods_and_the_check_only_creates_configmaps() {
    // What the server may do beyond reading pods comes only with the audit,
    // the reaper or the release of restarted workers (their renders:
    // helm_grants_the_audit_and_the_reaper_only_what_each_needs).
    let role = template("clusterrole.yaml");
    let rules = &role[role.find("rules:").unwrap()..];
    assert!(
        rules.trim().starts_with(
            "rules:\n  - apiGroups: [\"\"]\n    resources: [\"pods\"]\n    verbs: {{ if include \"ownerguard.releases\" . }}[\"get\", \"list\", \"watch\", \"delete\"]{{ else }}[\"get\", \"list\", \"watch\"]{{ end }}"
        ),
        "{rules}"
    );
    let check = template("check-role.yaml");
    let rules = &check[check.find("rules:").unwrap()..];
    assert_eq!(
        rules.trim(),
        "rules:\n  - apiGroups: [\"\"]\n    resources: [\"configmaps\"]\n    verbs: [\"create\"]"
    );
    // No other template grants anything, but the reaper's and the audit's
    // Roles on their Leases.
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let granting = [
            "clusterrole.yaml",
            "check-role.yaml",
            "reaper-role.yaml",
            "restarts-role.yaml",
            "restarts-node-lease-role.yaml",
            "audit-role.yaml",
        ];
        if path.is_file() && !granting.contains(&name.as_str()) {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains("verbs:"), "{name} grants permissions");
        }
    }
    assert!(template("reaper-role.yaml").starts_with("{{- if .Values.reaper.enabled }}"));
    assert!(template("restarts-role.yaml").starts_with("{{- if .Values.restartRelease.enabled }}"));
    assert!(
        template("audit-role.yaml")
            .starts_with("{{- if and .Values.audit.interval .Values.audit.reports }}")
    );
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_grants_the_audit_and_the_reaper_only_what_each_needs() {
    let helm = helm();
    let rules = |extra: &[&str]| {
        let objects = render_with(&helm, extra);
        let role = object(&objects, "ClusterRole", "og-ownerguard");
        let mut rules: Vec<String> = role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}/{}: {}",
                    r["apiGroups"][0].as_str().unwrap(),
                    r["resources"][0].as_str().unwrap(),
                    r["verbs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect();
        rules.sort();
        let lease = objects
            .iter()
            .any(|o| o["kind"] == "Role" && o["metadata"]["name"] == "og-ownerguard-reaper");
        let args: Vec<String> = object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]
            ["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .filter(|a| a.contains("audit") || a.contains("reap") || a.contains("restart"))
            .collect();
        (rules, lease, args)
    };
    assert_eq!(
        rules(&[]),
        (vec!["/pods: get,list,watch".to_string()], false, vec![])
    );
    let (audit, lease, args) = rules(&["--set", "audit.interval=1h"]);
    assert_eq!(
        audit,
        vec![
            "/configmaps: list",
            "/pods: get,list,watch",
            "batch/jobs: list"
        ]
    );
    assert!(!lease);
    assert_eq!(
        args,
        vec![
            "--audit-interval=1h",
            "--audit-resource=pods,configmaps,jobs.batch"
        ]
    );
    // The reports: one writer, the holder of the audit's Lease.
    let objects = render_with(
        &helm,
        &["--set", "audit.interval=1h", "--set", "audit.reports=true"],
    );
    let role = object(&objects, "Role", "og-ownerguard-audit");
    assert_eq!(
        role["rules"][1]["resourceNames"],
        json!(["og-ownerguard-audit"])
    );
    object(&objects, "RoleBinding", "og-ownerguard-audit");
    let args = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"]["containers"]
        [0]["args"];
    assert!(
        args.as_array()
            .unwrap()
            .contains(&json!("--audit-lease=og-ownerguard-audit")),
        "{args}"
    );
    let (reaper, lease, args) = rules(&["--set", "reaper.enabled=true"]);
    assert_eq!(
        reaper,
        vec![
            "/configmaps: list,delete",
            "/pods: get,list,watch,delete",
            "batch/jobs: list,delete"
        ]
    );
    assert!(lease, "the reaper's Lease Role");
    assert_eq!(
        args,
        vec![
            "--reap-finished",
            "--reap-after=5m",
            "--reaper-lease=og-ownerguard-reaper"
        ]
    );
    // The release of restarted workers: the same deletes, a Lease of its own.
    let (restarts, reaper_lease, args) = rules(&["--set", "restartRelease.enabled=true"]);
    assert_eq!(restarts, reaper);
    assert!(!reaper_lease, "the reaper's Lease Role without the reaper");
    assert_eq!(
        args,
        vec![
            "--release-restarted",
            "--restart-clock-margin=2s",
            "--restart-lease=og-ownerguard-restarts"
        ]
    );
    let objects = render_with(&helm, &["--set", "restartRelease.enabled=true"]);
    let role = object(&objects, "Role", "og-ownerguard-restarts");
    assert_eq!(
        role["rules"][1]["resourceNames"],
        json!(["og-ownerguard-restarts"])
    );
    object(&objects, "RoleBinding", "og-ownerguard-restarts");
    // The nodes' Leases, read only, in their namespace only.
    let nodes = object(&objects, "Role", "og-ownerguard-node-leases");
    assert_eq!(nodes["metadata"]["namespace"], "kube-node-lease");
    assert_eq!(
        nodes["rules"],
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}])
    );
    object(&objects, "RoleBinding", "og-ownerguard-node-leases");
}

#[test]
fn fail_open_follows_a_failure_policy_of_ignore() {
    let deployment = template("deployment.yaml");
    let guard = deployment
        .find("{{- if eq .Values.webhook.failurePolicy \"Ignore\" }}")
        .expect("guard");
    let flag = deployment.find("- --fail-open").expect("flag");
    assert!(
        flag > guard && deployment[guard..flag].matches("{{- end }}").count() == 0,
        "--fail-open outside its guard"
    );
    assert!(deployment.contains("--lookup-timeout={{ .Values.server.lookupTimeout }}"));
}

#[test]
fn the_pod_runs_non_root_read_only_without_capabilities_by_default() {
    let values = values();
    assert_eq!(
        values["podSecurityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        values["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true,
               "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let deployment = template("deployment.yaml");
    for expected in [
        "{{- with .Values.podSecurityContext }}",
        "{{- with .Values.securityContext }}",
        "path: /healthz",
        "path: /readyz",
        "whenUnsatisfiable: DoNotSchedule",
        "priorityClassName: {{ . }}",
    ] {
        assert!(deployment.contains(expected), "deployment lacks {expected}");
    }
    // A startup probe on /healthz gated nothing; none is needed.
    assert!(!deployment.contains("startupProbe"));
    // The certificate is a directory mount: subPath mounts never see a
    // rotated Secret, and the server could not reload it.
    assert!(deployment.contains("mountPath: {{ include \"ownerguard.tlsDir\" . }}"));
    assert!(!deployment.contains("subPath:"));
    // The values checks run on every render.
    assert!(deployment.starts_with("{{- include \"ownerguard.validateValues\" . }}"));
}

#[test]
fn certificates_come_three_ways() {
    let modes = ["chart", "certManager", "secret"];
    assert_eq!(
        schema()["properties"]["certificates"]["properties"]["mode"]["enum"],
        json!(modes)
    );
    for file in ["tls-secret.yaml", "ca-secret.yaml"] {
        assert!(
            template(file).starts_with("{{- if eq .Values.certificates.mode \"chart\" }}"),
            "{file}"
        );
    }
    for file in [
        "certificate.yaml",
        "certificate-ca.yaml",
        "issuer-ca.yaml",
        "issuer-selfsigned.yaml",
    ] {
        assert!(
            template(file).starts_with("{{- if eq .Values.certificates.mode \"certManager\" }}"),
            "{file}"
        );
    }
    assert!(
        helper("_helpers.tpl", "ownerguard.webhookAnnotations")
            .contains("cert-manager.io/inject-ca-from")
    );
    let chart_certificates = helper("_helpers.tpl", "ownerguard.chartCertificates")
        + &helper("_helpers.tpl", "ownerguard.chartCertificatesFrom");
    for expected in [
        // Kept at upgrade, CA and serving pair.
        "lookup \"v1\" \"Secret\" .Release.Namespace (include \"ownerguard.caSecretName\" .)",
        "lookup \"v1\" \"Secret\" .Release.Namespace (include \"ownerguard.tlsSecretName\" .)",
        // Renewed under the same CA.
        "buildCustomCert",
        // The decision apart, judged by tests/chart/rotation.
        "include \"ownerguard.chartCertificatesFrom\"",
        // Never blind.
        "lookup \"v1\" \"Namespace\" \"\" \"kube-system\"",
        "allowRenderWithoutCluster",
    ] {
        assert!(
            chart_certificates.contains(expected),
            "{expected} not in the chart certificates"
        );
    }
    assert!(
        helper("_helpers.tpl", "ownerguard.caBundle")
            .contains(".Values.certificates.secret.caBundle")
    );
}

#[test]
fn the_install_check_probes_with_doctor_and_never_counts_as_a_server() {
    let spec = helper("_helpers.tpl", "ownerguard.checkPodSpec");
    for expected in [
        "- doctor",
        "- --probe={{ include \"ownerguard.checkNamespace\" .root }}",
        "- --probe-only",
        "- --wait={{ .wait }}s",
    ] {
        assert!(spec.contains(expected), "{expected} not in {spec}");
    }
    let job = template("check-job.yaml");
    assert!(job.contains("helm.sh/hook: post-install,post-upgrade"));
    assert!(job.contains("helm.sh/hook-output-log-policy: hook-failed"));
    assert!(template("tests/check-pod.yaml").contains("helm.sh/hook: test"));
    let labels = helper("_helpers.tpl", "ownerguard.checkLabels");
    assert!(!labels.contains("ownerguard.selectorLabels"), "{labels}");
    assert!(labels.contains(
        "app.kubernetes.io/name: {{ include \"ownerguard.name\" . | trunc 57 | trimSuffix \"-\" }}-check"
    ));
    for file in [
        "check-job.yaml",
        "check-role.yaml",
        "check-rolebinding.yaml",
        "check-serviceaccount.yaml",
        "tests/check-pod.yaml",
    ] {
        assert!(
            !template(file).contains("\"ownerguard.labels\""),
            "{file} labels a check like a server"
        );
    }
}

/// NOTES.txt cannot be rendered offline (`helm install --dry-run` wants
/// a cluster): its text is read.
#[test]
fn the_notes_warn_of_the_default_namespace_and_recommend_atomic() {
    let notes = template("NOTES.txt");
    let warning = notes
        .find("{{- if eq $ns \"default\" }}")
        .expect("a warning for the default namespace");
    let body = &notes[warning..warning + notes[warning..].find("{{- end }}").unwrap()];
    assert!(
        body.contains("labelled objects created in default are not judged"),
        "{body}"
    );
    // Helm 4 is the primary Helm; Helm 3's name for the flag is --atomic.
    assert!(notes.contains(
        "helm upgrade --install {{ .Release.Name }} <chart> -n {{ $ns }} --reset-then-reuse-values --rollback-on-failure"
    ));
    assert!(notes.contains("Helm 3 names it --atomic"));
}

#[test]
fn one_template_per_object() {
    for dir in ["templates", "templates/tests"] {
        for entry in std::fs::read_dir(chart().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let kinds = text.lines().filter(|l| l.starts_with("kind: ")).count();
                assert_eq!(kinds, 1, "{} holds {kinds} objects", path.display());
            }
        }
    }
}

#[test]
fn every_top_level_value_is_documented() {
    let text = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let top_level_key = !line.starts_with([' ', '#', '-']) && line.contains(':');
        if top_level_key && i > 0 {
            let is_key = |l: &str| !l.starts_with([' ', '#', '-']) && l.contains(':');
            // Keys written one under the other share the comment above them.
            let mut j = i;
            while j > 0 && is_key(lines[j - 1]) {
                j -= 1;
            }
            while j > 0 && lines[j - 1].trim().is_empty() {
                j -= 1;
            }
            let j = j.saturating_sub(1);
            assert!(
                lines[j].starts_with('#'),
                "values.yaml: `{line}` has no comment saying why"
            );
        }
    }
}

/// Every key of values.yaml is in the schema: with additionalProperties
/// false, a key the schema lacks would make Helm refuse the chart's own
/// defaults.
#[test]
fn the_schema_knows_every_value() {
    fn walk(values: &Value, schema: &Value, at: &str) {
        let Value::Object(map) = values else { return };
        for (key, value) in map {
            let node = &schema["properties"][key];
            assert!(
                !node.is_null(),
                "values.yaml {at}.{key} is not in values.schema.json"
            );
            if node["additionalProperties"] == false {
                walk(value, node, &format!("{at}.{key}"));
            }
        }
    }
    let schema = schema();
    assert_eq!(schema["additionalProperties"], false);
    walk(&values(), &schema, "");
}

/// The refused values files and the CEL cases are data for the real-Helm
/// layer and for .ci/chart-cel: their format is checked here.
#[test]
fn the_test_data_is_well_formed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/refused");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.lines()
                    .next()
                    .is_some_and(|l| l.starts_with("# refused: ") && l.len() > 20),
                "{}: first line must be `# refused: <message>`",
                path.display()
            );
            for marker in ["# lint: ", "# without the schema: "] {
                for line in text.lines().filter(|l| l.starts_with(marker)) {
                    assert!(
                        line.len() > marker.len() + 10,
                        "{}: `{marker}<message>` without a message",
                        path.display()
                    );
                }
            }
            let _: Value =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            files += 1;
        }
    }
    assert!(files >= 20, "{files} refused values files");
    let cases: Vec<Value> = serde_saphyr::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/match-conditions.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    for role in ["labelled", "podReferences"] {
        for expect in [true, false] {
            assert!(
                cases
                    .iter()
                    .any(|c| c["webhooks"] == role && c["expect"] == expect),
                "no {role} case expecting {expect}"
            );
        }
    }
}

/// The cluster-wide webhook's CEL reads a reference's kind as ownerguard
/// may: every CEL case of a create with ownerReferences that
/// `OwnerReference::means_pod` says is pod-like is sent, and one that is
/// sent though it is not holds a character outside printable ASCII (the
/// CEL's superset: only ownerguard's UTS #39 skeleton can read those), or
/// is one the CEL sends without scanning it: more than 64 references, or
/// a kind longer than 253 characters.
#[test]
fn the_cel_cases_read_pod_like_kinds_as_ownerguard_does() {
    let cases: Vec<Value> = serde_saphyr::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/match-conditions.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for case in cases.iter().filter(|c| c["webhooks"] == "podReferences") {
        let Some(references) = case["object"]["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        let kinds: Vec<&str> = references
            .iter()
            .filter_map(|r| r["kind"].as_str())
            .collect();
        let pod_like = kinds.iter().any(|kind| means_pod(kind));
        let unreadable = kinds
            .iter()
            .any(|kind| kind.chars().any(|c| !(' '..='~').contains(&c)));
        let unscanned = references.len() > 64 || kinds.iter().any(|kind| kind.len() > 253);
        if pod_like || unscanned {
            assert_eq!(case["expect"], true, "{}", case["name"]);
        } else {
            assert_eq!(case["expect"], unreadable, "{}", case["name"]);
        }
        checked += 1;
    }
    assert!(checked >= 30, "{checked}");
}

fn means_pod(kind: &str) -> bool {
    ownerguard::admission::OwnerReference {
        kind: kind.into(),
        ..Default::default()
    }
    .means_pod()
}

/// The chart's regex for a pod-like kind (`ownerguard.cel.podKindRegex`),
/// as the template writes it.
fn pod_kind_regex() -> regex::Regex {
    let template = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("charts/ownerguard/templates/_matchconditions.tpl"),
    )
    .unwrap();
    let start = template
        .find(r#"{{- define "ownerguard.cel.podKindRegex" -}}"#)
        .expect("the template defines ownerguard.cel.podKindRegex");
    let body = &template[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let pattern = body[..body.find("{{- end }}").unwrap()].trim();
    regex::Regex::new(pattern).unwrap()
}

/// The chart's CEL sends every kind ownerguard reads as pod-like (a
/// superset), over every string of up to 4 characters from an alphabet of
/// the letters of pod and pods in both cases, the digits that read as
/// them or not, separators, a Cyrillic o, a zero-width space and a
/// letter of no pod: an UPDATE that adds such a reference must reach
/// ownerguard, or an adoption or a homoglyph passes unseen.
#[test]
fn the_cel_pod_kind_regex_covers_every_kind_ownerguard_reads_as_pod() {
    let regex = pod_kind_regex();
    let alphabet = [
        "p", "P", "o", "O", "0", "d", "D", "s", "S", " ", "-", "1", "x", "\u{43e}", "\u{200b}",
    ];
    let mut kinds = vec![String::new()];
    let mut checked = 0;
    for _ in 0..4 {
        let mut longer = Vec::new();
        for kind in &kinds {
            for letter in alphabet {
                let kind = format!("{kind}{letter}");
                if means_pod(&kind) {
                    assert!(
                        regex.is_match(&kind),
                        "{kind:?} is pod-like but the CEL skips it"
                    );
                    checked += 1;
                }
                longer.push(kind);
            }
        }
        kinds = longer;
    }
    assert!(checked > 100, "{checked}");
    // And on ASCII it is exact: a kind it sends is pod-like.
    for kind in ["Pod", "p-0-d", " PODS ", "P0d"] {
        assert!(regex.is_match(kind) && means_pod(kind), "{kind}");
    }
    for kind in [
        "Podx",
        "Pod1",
        "P00d",
        "v1/Pod",
        "ReplicaSet",
        "Pod Template",
    ] {
        assert!(!regex.is_match(kind) && !means_pod(kind), "{kind}");
    }
}

// --- Real Helm: when OWNERGUARD_HELM names a helm binary -----------------------

/// The helm binary `OWNERGUARD_HELM` names.
fn helm() -> PathBuf {
    let path = PathBuf::from(
        std::env::var_os("OWNERGUARD_HELM")
            .expect("OWNERGUARD_HELM names no helm binary: run bash .ci/chart-check"),
    );
    assert!(
        path.is_file(),
        "OWNERGUARD_HELM={} is not a file",
        path.display()
    );
    path
}

/// The Kubernetes version the chart is rendered for: the newest control
/// plane the end-to-end suite pins, which `.ci/helm.sh` exports (it reads
/// e2e/plane/), so this file names no release of its own.
static KUBE_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    std::env::var("OWNERGUARD_KUBE_VERSION")
        .expect("OWNERGUARD_KUBE_VERSION names no Kubernetes release: run bash .ci/chart-check")
});

/// `helm template` with `args`: Ok(objects) or Err(stderr).
fn render(helm: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    render_as(helm, "og", args)
}

/// `helm template` of release `release` with `args`.
fn render_as(helm: &Path, release: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let output = Command::new(helm)
        .args([
            "template",
            release,
            chart().to_str().unwrap(),
            "--namespace",
            "ownerguard",
            "--kube-version",
            KUBE_VERSION.as_str(),
        ])
        .args(args)
        .output()
        .unwrap();
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).to_string());
    }
    let text = String::from_utf8(output.stdout).unwrap();
    Ok(serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect())
}

/// The usual arguments of an offline render: an image, and chart mode
/// allowed without a cluster.
const OFFLINE: [&str; 4] = [
    "--set",
    "image.repository=registry.example/ownerguard",
    "--set",
    "certificates.chart.allowRenderWithoutCluster=true",
];

fn render_with(helm: &Path, extra: &[&str]) -> Vec<Value> {
    let mut args = OFFLINE.to_vec();
    args.extend_from_slice(extra);
    render(helm, &args).unwrap_or_else(|e| panic!("helm template {extra:?}: {e}"))
}

fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the render"))
}

fn container(objects: &[Value]) -> &Value {
    &object(objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// What `doctor` would say of the rendered installation once its pods are
/// ready: the objects as the API server would hold them.
fn doctor_on(objects: &[Value]) -> Vec<ownerguard::commands::doctor::Check> {
    let get = |kind: &str| objects.iter().find(|o| o["kind"] == kind).cloned();
    let rendered = get("Deployment").unwrap();
    let replicas = rendered["spec"]["replicas"].as_i64().unwrap();
    let mut deployment: Deployment = serde_json::from_value(rendered).unwrap();
    deployment.status = Some(
        serde_json::from_value(json!({"replicas": replicas, "readyReplicas": replicas})).unwrap(),
    );
    let mut serving = serving_certificate_source(&deployment);
    serving.pem = objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == serving.secret.as_str())
        .and_then(|s| s["data"][&serving.key].as_str())
        .map(|b64| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap()
        });
    // The switch's configuration is `<name>-cluster-wide` and the observe
    // webhook's `<name>-observe`, beside the validating configuration of
    // the labelled objects (`<name>`: suffix "").
    let validating = |suffix: &str| {
        objects
            .iter()
            .find(|o| {
                o["kind"] == "ValidatingWebhookConfiguration"
                    && o["metadata"]["name"].as_str().is_some_and(|n| {
                        let other = n.ends_with("-cluster-wide") || n.ends_with("-observe");
                        if suffix.is_empty() {
                            !other
                        } else {
                            n.ends_with(suffix)
                        }
                    })
            })
            .map(|v| serde_json::from_value::<ValidatingWebhookConfiguration>(v.clone()).unwrap())
    };
    let installation = Installation {
        mutating: get("MutatingWebhookConfiguration")
            .map(|v| serde_json::from_value::<MutatingWebhookConfiguration>(v).unwrap()),
        validating: validating(""),
        cluster_wide: validating("-cluster-wide"),
        observe: validating("-observe"),
        deployment: Some(deployment),
        services: objects
            .iter()
            .filter(|o| o["kind"] == "Service")
            .map(|v| serde_json::from_value::<Service>(v.clone()).unwrap())
            .collect(),
        disruption_budgets: objects
            .iter()
            .filter(|o| o["kind"] == "PodDisruptionBudget")
            .map(|v| serde_json::from_value::<PodDisruptionBudget>(v.clone()).unwrap())
            .collect(),
        serving_certificate: serving,
        // A rendered chart holds no other installation's configurations.
        others: Ok(Vec::new()),
        // A namespace in each mode, and one whose label is no mode.
        namespaces: Ok([
            ("default", None),
            ("team-warn", Some("warn")),
            ("team-audit", Some("audit")),
            ("team-enforce", Some("enforce")),
        ]
        .into_iter()
        .map(|(name, mode)| ownerguard::commands::doctor::NamespaceView {
            name: name.to_string(),
            labels: std::iter::once(("kubernetes.io/metadata.name".to_string(), name.to_string()))
                .chain(mode.map(|m| ("ownerguard.io/mode".to_string(), m.to_string())))
                .collect(),
        })
        .collect()),
    };
    let options = DoctorOptions {
        namespace: "ownerguard".into(),
        name: "og-ownerguard".into(),
        tls_secret: None,
        serving_address: None,
        min_certificate_days: 14,
        probe: None,
        probe_only: false,
        output: ownerguard::commands::cli::DoctorOutput::Text,
        target: Default::default(),
    };
    check(
        &installation,
        &options,
        time::OffsetDateTime::now_utc().unix_timestamp(),
    )
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_the_default_installation_as_designed() {
    let helm = helm();
    let objects = render_with(&helm, &[]);

    for (kind, word) in [
        ("MutatingWebhookConfiguration", "mutate"),
        ("ValidatingWebhookConfiguration", "validate"),
    ] {
        let webhooks = object(&objects, kind, "og-ownerguard")["webhooks"]
            .as_array()
            .unwrap();
        // One webhook per mode (SPEC §3 rule 17), the namespaces split
        // between them by their mode label: enforce, the default, takes
        // every namespace not labelled warn or audit.
        assert_eq!(webhooks.len(), 3, "{kind}");
        for (webhook, name, path, mode) in [
            (
                &webhooks[1],
                format!("{word}-warn.ownerguard.io"),
                format!("/{word}/warn"),
                json!({"key": "ownerguard.io/mode", "operator": "In", "values": ["warn"]}),
            ),
            (
                &webhooks[2],
                format!("{word}-audit.ownerguard.io"),
                format!("/{word}/audit"),
                json!({"key": "ownerguard.io/mode", "operator": "In", "values": ["audit"]}),
            ),
        ] {
            assert_eq!(webhook["name"], name.as_str());
            assert_eq!(webhook["clientConfig"]["service"]["path"], path.as_str());
            assert_eq!(webhook["namespaceSelector"]["matchExpressions"][1], mode);
            assert_eq!(
                webhook["namespaceSelector"]["matchExpressions"][2],
                json!({"key": "ownerguard.io/ignore", "operator": "DoesNotExist"}),
                "{name}: a namespace labelled ignore goes to no webhook"
            );
            assert_eq!(webhook["objectSelector"], webhooks[0]["objectSelector"]);
            assert_eq!(webhook["matchConditions"], webhooks[0]["matchConditions"]);
            // Warn and audit never refuse, ownerguard down included.
            let expected = if path.ends_with("/warn") || path.ends_with("/audit") {
                json!("Ignore")
            } else {
                webhooks[0]["failurePolicy"].clone()
            };
            assert_eq!(webhook["failurePolicy"], expected, "{name}");
        }
        let path = format!("/{word}");
        let webhook = &webhooks[0];
        assert_eq!(webhook["name"], format!("{word}.ownerguard.io").as_str());
        assert_eq!(
            webhook["clientConfig"]["service"],
            json!({"name": "og-ownerguard", "namespace": "ownerguard", "path": path, "port": 443})
        );
        assert_eq!(
            webhook["rules"],
            json!([{"operations": ["CREATE", "UPDATE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Namespaced"}])
        );
        assert_eq!(
            webhook["objectSelector"],
            json!({"matchExpressions": [{"key": "ownerguard.io/owner-pod", "operator": "Exists"}]})
        );
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["timeoutSeconds"], 5);
        assert_eq!(
            webhook["matchConditions"][0]["name"],
            "create-or-ownership-update"
        );
        assert_eq!(
            webhook["namespaceSelector"]["matchExpressions"],
            json!([
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "ownerguard"]},
                {"key": "ownerguard.io/mode", "operator": "NotIn", "values": ["warn", "audit"]},
                {"key": "ownerguard.io/ignore", "operator": "DoesNotExist"}
            ])
        );
    }

    let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
    // shutdownDelay 5 s + shutdownTimeout (timeoutSeconds + 1 = 6 s) + 5 s.
    assert_eq!(pod["terminationGracePeriodSeconds"], 16);
    assert!(args(&objects).contains(&"--shutdown-timeout=6s".to_string()));
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        pod["topologySpreadConstraints"][0]["whenUnsatisfiable"],
        "DoNotSchedule"
    );
    assert!(pod["affinity"].is_null());
    assert!(container(&objects)["startupProbe"].is_null());
    assert_eq!(
        container(&objects)["readinessProbe"]["httpGet"]["path"],
        "/readyz"
    );
    // The tag defaults to the chart's appVersion.
    assert_eq!(
        container(&objects)["image"],
        format!("registry.example/ownerguard:{}", app_version())
    );
    let deployment = object(&objects, "Deployment", "og-ownerguard");
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 3);
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 1, "maxUnavailable": 0})
    );
    assert_eq!(
        object(&objects, "PodDisruptionBudget", "og-ownerguard")["spec"]["maxUnavailable"],
        1
    );

    // The install check: a hook Job running doctor's probe, whose pods no
    // Service, PDB or spread constraint counts as a server.
    let job = object(&objects, "Job", "og-ownerguard-check");
    let probe = &job["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        *probe,
        json!([
            "doctor",
            "--probe=default",
            "--probe-only",
            "--key-prefix=ownerguard.io",
            "--wait=180s"
        ])
    );
    let selector = &object(&objects, "Service", "og-ownerguard")["spec"]["selector"];
    for labels in [
        &job["spec"]["template"]["metadata"]["labels"],
        &object(&objects, "Pod", "og-ownerguard-check-test")["metadata"]["labels"],
    ] {
        let served = selector
            .as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| labels[k] == *v);
        assert!(
            !served,
            "the Service would send webhook calls to a check pod: {labels}"
        );
    }
    assert_eq!(
        object(&objects, "Role", "og-ownerguard-check")["metadata"]["namespace"],
        "default"
    );

    // And doctor finds nothing wrong with it.
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_a_ca_bundle_and_secrets_that_agree() {
    let helm = helm();
    let objects = render_with(&helm, &[]);
    let tls = object(&objects, "Secret", "og-ownerguard-tls");
    let ca = object(&objects, "Secret", "og-ownerguard-ca");
    assert_eq!(tls["data"]["ca.crt"], ca["data"]["tls.crt"]);
    assert!(
        ca["data"]["tls.key"]
            .as_str()
            .is_some_and(|k| !k.is_empty())
    );
    let bundle = &object(&objects, "MutatingWebhookConfiguration", "og-ownerguard")["webhooks"][0]
        ["clientConfig"]["caBundle"];
    assert_eq!(
        *bundle, tls["data"]["ca.crt"],
        "a fresh install carries only its own CA"
    );
    // Kept by an uninstall or a failed install: pods keep their
    // certificate, a reinstall adopts it.
    for secret in [tls, ca] {
        assert_eq!(
            secret["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
    }
    // The expiry annotations that drive renewal at upgrade.
    for secret in [tls, ca] {
        let not_after: i64 = secret["metadata"]["annotations"]["ownerguard.io/not-after"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let days = (not_after - time::OffsetDateTime::now_utc().unix_timestamp()) / 86_400;
        assert!((3649..=3650).contains(&days), "{days}");
    }
    // The CA key is never mounted.
    let volumes =
        &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"]["volumes"];
    assert_eq!(
        *volumes,
        json!([{"name": "tls", "secret": {"secretName": "og-ownerguard-tls"}}])
    );
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_refuses_every_bad_values_file_with_its_message() {
    let helm = helm();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/refused");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let want = text
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("# refused: ");
        let mut args = vec!["-f", path.to_str().unwrap()];
        if !text.contains("allowRenderWithoutCluster") {
            args.extend(["--set", "certificates.chart.allowRenderWithoutCluster=true"]);
        }
        match render(&helm, &args) {
            Ok(_) => panic!(
                "{}: rendered, but must be refused with {want:?}",
                path.display()
            ),
            Err(stderr) => assert!(
                stderr.contains(want),
                "{}: refused, but not with {want:?}:\n{stderr}",
                path.display()
            ),
        }
        checked += 1;
    }
    assert!(checked >= 20);
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_every_ci_values_file_and_doctor_passes_it() {
    let helm = helm();
    let mut rendered = 0;
    for entry in std::fs::read_dir(chart().join("ci")).unwrap() {
        let path = entry.unwrap().path();
        let objects = render(
            &helm,
            &[
                "-f",
                path.to_str().unwrap(),
                "--set",
                "certificates.chart.allowRenderWithoutCluster=true",
            ],
        )
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // cert-manager's issuer and injector fill the Secret and the
        // caBundle, or the user's own Secret exists, only in a cluster.
        let secret_elsewhere = !objects.iter().any(|o| o["kind"] == "Secret");
        for check in doctor_on(&objects) {
            let only_in_a_cluster = secret_elsewhere
                && (check.subject.starts_with("caBundle of")
                    || check.subject == "serving certificate");
            if !only_in_a_cluster {
                assert_ne!(check.verdict, Verdict::Fail, "{}: {check}", path.display());
            }
        }
        rendered += 1;
    }
    assert!(rendered >= 6);
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_the_shapes_managed_clusters_need() {
    let helm = helm();
    let objects = render_with(
        &helm,
        &[
            "--set",
            "hostNetwork=true",
            "--set",
            "ports.webhook=10443",
            "--set",
            "ports.metrics=10090",
            "--set",
            "podSecurityContext.runAsUser=null",
            "--set",
            "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "--set",
            "commonLabels.team=platform",
            "--set",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
            "--set",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
            "--set",
            "revisionHistoryLimit=1",
        ],
    );
    let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert!(
        pod["securityContext"]["runAsUser"].is_null(),
        "OpenShift picks the uid"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    // affinity given: the spread stays.
    assert!(!pod["affinity"]["nodeAffinity"].is_null());
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    let args = args(&objects);
    assert!(
        args.contains(&"--addr=0.0.0.0:10443".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--metrics-addr=0.0.0.0:10090".to_string()),
        "{args:?}"
    );
    assert_eq!(
        container(&objects)["image"],
        format!(
            "registry.example/ownerguard:{}@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            app_version()
        )
    );
    let deployment = object(&objects, "Deployment", "og-ownerguard");
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 1);
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
    let network = object(&objects, "NetworkPolicy", "og-ownerguard");
    assert_eq!(network["spec"]["ingress"][0]["ports"][0]["port"], 10443);
    // commonLabels on every object, never in a selector.
    for o in &objects {
        assert_eq!(
            o["metadata"]["labels"]["team"], "platform",
            "{} {}",
            o["kind"], o["metadata"]["name"]
        );
    }
    assert!(deployment["spec"]["selector"]["matchLabels"]["team"].is_null());
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["labels"]["team"],
        "platform"
    );
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_client_certificates_delegates_and_the_webhook_source() {
    let helm = helm();
    let objects = render_with(
        &helm,
        &[
            "--set",
            "server.clientCA.configMapName=apiserver-client-ca",
            "--set",
            "server.clientCA.names={kube-apiserver,apiserver.example}",
            "--set",
            "server.delegates={workflows/engine,ci/submitter}",
            "--set",
            "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
            "--set",
            "server.lookupRate=50",
        ],
    );
    let args = args(&objects);
    for expected in [
        "--client-ca=/etc/ownerguard/client-ca/ca.crt",
        "--client-name=kube-apiserver",
        "--client-name=apiserver.example",
        "--delegate=workflows/engine,ci/submitter",
        "--lookup-rate=50",
    ] {
        assert!(
            args.contains(&expected.to_string()),
            "{expected} not in {args:?}"
        );
    }
    // Flags not set are not passed: the server's defaults apply.
    assert!(!args.iter().any(|a| a.starts_with("--lookup-concurrency") || a.starts_with("--max-pod-references")));
    let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][1],
        json!({"name": "client-ca", "configMap": {"name": "apiserver-client-ca"}})
    );
    let network = object(&objects, "NetworkPolicy", "og-ownerguard");
    assert_eq!(
        network["spec"]["ingress"][0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}])
    );
    let checks = doctor_on(&objects);
    assert!(
        checks
            .iter()
            .any(|c| c.subject == "client certificates" && c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
    // Without a source, the webhook port is open to all (the NOTES say so).
    let open = render_with(&helm, &[]);
    assert!(
        object(&open, "NetworkPolicy", "og-ownerguard")["spec"]["ingress"][0]["from"].is_null()
    );
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_the_cluster_wide_switch_failing_open_with_an_opt_out() {
    let helm = helm();
    let objects = render_with(
        &helm,
        &["--set", "validation.allPodOwnerReferences.enabled=true"],
    );
    let webhooks = object(&objects, "ValidatingWebhookConfiguration", "og-ownerguard")["webhooks"]
        .as_array()
        .unwrap();
    // In a configuration of its own, which the switch deletes whole: the
    // labelled configuration keeps its webhook per mode.
    assert_eq!(webhooks.len(), 3);
    let all = &object(
        &objects,
        "ValidatingWebhookConfiguration",
        "og-ownerguard-cluster-wide",
    )["webhooks"][0];
    assert_eq!(all["name"], "validate-all.ownerguard.io");
    assert_eq!(all["failurePolicy"], "Ignore");
    assert_eq!(all["clientConfig"]["service"]["path"], "/validate-all");
    assert_eq!(all["rules"][0]["operations"], json!(["CREATE"]));
    assert_eq!(
        all["objectSelector"]["matchExpressions"][0]["operator"],
        "DoesNotExist"
    );
    assert_eq!(all["matchConditions"][0]["name"], "has-pod-owner-reference");
    assert_eq!(
        all["namespaceSelector"]["matchExpressions"][1],
        json!({"key": "ownerguard.io/skip-validate-all", "operator": "DoesNotExist"})
    );
    // The labelled webhooks keep Fail.
    assert_eq!(webhooks[0]["failurePolicy"], "Fail");
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_derives_the_grace_period_from_the_drain() {
    let helm = helm();
    let objects = render_with(
        &helm,
        &[
            "--set",
            "server.shutdownDelay=20s",
            "--set",
            "webhook.timeoutSeconds=10",
        ],
    );
    let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 36);
    assert!(args(&objects).contains(&"--shutdown-timeout=11s".to_string()));
    let objects = render_with(
        &helm,
        &[
            "--set",
            "server.shutdownTimeout=30s",
            "--set",
            "terminationGracePeriodSeconds=60",
        ],
    );
    let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_updates_filtered_or_not_on_request() {
    let helm = helm();
    let objects = render_with(&helm, &["--set", "webhook.filterUpdates=false"]);
    let webhook = &object(&objects, "MutatingWebhookConfiguration", "og-ownerguard")["webhooks"][0];
    assert!(webhook["matchConditions"].is_null());
    // keyPrefix reaches the CEL, the selectors and the flag alike.
    let objects = render_with(&helm, &["--set", "keyPrefix=agents.example.com"]);
    let webhook = &object(&objects, "MutatingWebhookConfiguration", "og-ownerguard")["webhooks"][0];
    assert_eq!(webhook["name"], "mutate.agents.example.com");
    let expression = webhook["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        expression.contains("labels[?'agents.example.com/owner-pod']"),
        "{expression}"
    );
    assert!(!expression.contains("ownerguard.io"), "{expression}");
    assert!(args(&objects).contains(&"--key-prefix=agents.example.com".to_string()));
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

/// Every label value anywhere in `value` (`labels`, `matchLabels`,
/// `selector` of a Service), with where it is.
fn label_values(value: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let here = format!("{at}.{key}");
                if (matches!(key.as_str(), "labels" | "matchLabels")
                    || (key == "selector"
                        && at.ends_with("spec")
                        && child.get("matchLabels").is_none()))
                    && let Value::Object(labels) = child
                {
                    for (k, v) in labels {
                        if let Some(v) = v.as_str() {
                            out.push((format!("{here}.{k}"), v.to_string()));
                        }
                    }
                    continue;
                }
                label_values(child, &here, out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                label_values(item, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A DNS-1035 label: lowercase alphanumerics and `-`, starting with a
/// letter, ending alphanumeric, at most 63 characters (Service names).
fn is_dns1035_label(name: &str) -> bool {
    ownerguard::k8s::names::is_namespace(name) && name.starts_with(|c: char| c.is_ascii_lowercase())
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_valid_and_distinct_names_for_the_longest_names() {
    use std::collections::HashSet;
    let helm = helm();
    // Helm takes release names of up to 53 characters: with -ownerguard
    // the full name is cut at 63, where <fullname>-check used to be cut back
    // to <fullname> itself (the check's ServiceAccount was the server's).
    let longest_release = "r".repeat(53);
    let long_full = format!("fullnameoverride-{}", "f".repeat(43));
    let long_name = format!("nameoverride-{}", "n".repeat(47));
    assert_eq!(long_full.len(), 60);
    assert_eq!(long_name.len(), 60);
    let full = format!("fullnameOverride={long_full}");
    let name = format!("nameOverride={long_name}");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (&longest_release, vec![]),
        (
            &longest_release,
            vec!["--set", "certificates.mode=certManager"],
        ),
        ("og", vec!["--set", &full]),
        ("og", vec!["--set", &name]),
        (
            "og",
            vec!["--set", &name, "--set", "certificates.mode=certManager"],
        ),
    ];
    for (release, extra) in cases {
        let mut args = OFFLINE.to_vec();
        args.extend_from_slice(&extra);
        let objects =
            render_as(&helm, release, &args).unwrap_or_else(|e| panic!("{release} {extra:?}: {e}"));
        let mut seen = HashSet::new();
        for o in &objects {
            let kind = o["kind"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or("");
            assert!(
                seen.insert((kind, namespace, name)),
                "{release} {extra:?}: two {kind} named {name}"
            );
            let valid = match kind {
                "Service" => is_dns1035_label(name),
                // The Job controller labels its pods with the Job's name.
                "Job" => ownerguard::k8s::names::is_namespace(name),
                // Every other name is a DNS-1123 subdomain.
                _ => ownerguard::k8s::names::is_pod_name(name),
            };
            assert!(
                valid,
                "{release} {extra:?}: {kind} name {name:?} is invalid"
            );
            let mut labels = Vec::new();
            label_values(o, "", &mut labels);
            for (at, value) in labels {
                assert!(
                    ownerguard::k8s::names::is_label_value(&value),
                    "{release} {extra:?}: {kind} {name}: label {at} = {value:?} is invalid"
                );
            }
            // The CA's common name: at most 64 characters (X.509).
            if let Some(cn) = o["spec"]["commonName"].as_str() {
                assert!(cn.len() <= 64, "{kind} {name}: commonName {cn:?}");
            }
        }
        // The server's and the check's never share a name.
        assert_eq!(
            seen.iter()
                .filter(|(k, _, _)| *k == "ServiceAccount")
                .count(),
            2,
            "{release} {extra:?}"
        );
    }
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_refuses_a_release_name_that_cannot_name_the_service() {
    let helm = helm();
    // Helm takes both (its release names may start with a digit and hold
    // dots); the Service named <release>-ownerguard may do neither.
    for release in ["1og", "a.b"] {
        let stderr = render_as(&helm, release, &OFFLINE)
            .map(|_| ())
            .expect_err(release);
        assert!(
            stderr.contains(&format!(
                "release name '{release}' makes the Service name '{release}-ownerguard', which is not a DNS-1035 label"
            )),
            "{release}: {stderr}"
        );
    }
    // With a fullnameOverride the release name names no Service.
    let mut args = OFFLINE.to_vec();
    args.extend(["--set", "fullnameOverride=ownerguard"]);
    let objects = render_as(&helm, "1og", &args).unwrap();
    object(&objects, "Service", "ownerguard");
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_keeps_the_previous_ca_in_the_bundle_until_the_next_ca_renewal() {
    use base64::Engine;
    // tests/chart/rotation runs the chart-mode decision on made-up Secrets
    // as the cluster would hold them (helm template cannot mock lookup).
    let output = Command::new(helm())
        .args(["template", "og"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/rotation"))
        .args([
            "--namespace",
            "ownerguard",
            "--kube-version",
            KUBE_VERSION.as_str(),
        ])
        .args(["--show-only", "templates/cases.yaml"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let config: Value = serde_saphyr::from_str(&String::from_utf8(output.stdout).unwrap()).unwrap();
    let all: Value = serde_json::from_str(config["data"]["cases"].as_str().unwrap()).unwrap();
    let (a, b) = (all["a"].as_str().unwrap(), all["b"].as_str().unwrap());
    let pem = |b64: &str| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    };
    // The certificates of a bundle, in order.
    let bundle = |case: &Value| -> Vec<String> {
        pem(case["bundle"].as_str().unwrap())
            .split_inclusive("-----END CERTIFICATE-----")
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect()
    };
    let cases = &all["cases"];
    let trimmed = |b64: &str| pem(b64).trim().to_string();

    // The CA is due: a new CA, the old one kept as the previous, both trusted.
    let due = &cases["due"];
    assert_ne!(due["ca"], a);
    assert_eq!(due["previousCa"], a);
    assert_eq!(
        bundle(due),
        [trimmed(due["ca"].as_str().unwrap()), trimmed(a)]
    );
    // The next upgrade, the serving Secret already on the new CA: the
    // previous CA is still trusted (pods may not have reloaded yet).
    let kept = &cases["kept"];
    assert_eq!(kept["ca"], b);
    assert_eq!(kept["previousCa"], a);
    assert_eq!(bundle(kept), [trimmed(b), trimmed(a)]);
    // Once the previous CA has expired, it goes.
    let expired = &cases["expired"];
    assert_eq!(expired["ca"], b);
    assert_eq!(expired["previousCa"], "");
    assert_eq!(bundle(expired), [trimmed(b)]);
    // The CA Secret lost: the CA the pods serve under stays trusted.
    let lost = &cases["lost"];
    assert_eq!(lost["previousCa"], a);
    assert_eq!(
        bundle(lost),
        [trimmed(lost["ca"].as_str().unwrap()), trimmed(a)]
    );
    // A fresh install trusts its own CA only.
    let fresh = &cases["fresh"];
    assert_eq!(fresh["previousCa"], "");
    assert_eq!(bundle(fresh), [trimmed(fresh["ca"].as_str().unwrap())]);
}

/// doctor compares the webhooks' matchConditions with
/// src/commands/doctor/match-conditions.json (and tests/doctor.rs installs them): it
/// must be what the chart renders (`UPDATE_GOLDEN=1` rewrites it).
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn the_match_conditions_doctor_expects_are_the_rendered_ones() {
    let helm = helm();
    let objects = render_with(
        &helm,
        &["--set", "validation.allPodOwnerReferences.enabled=true"],
    );
    let mut rendered = serde_json::Map::new();
    for configuration in objects.iter().filter(|o| {
        o["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("WebhookConfiguration"))
    }) {
        for webhook in configuration["webhooks"].as_array().unwrap() {
            let role =
                if webhook["objectSelector"]["matchExpressions"][0]["operator"] == "DoesNotExist" {
                    "podReferences"
                } else {
                    "labelled"
                };
            let previous = rendered.insert(role.to_string(), webhook["matchConditions"].clone());
            assert!(
                previous.is_none_or(|p| p == webhook["matchConditions"]),
                "two {role} webhooks with different matchConditions"
            );
        }
    }
    let rendered = Value::Object(rendered);
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands/doctor/match-conditions.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(
            &path,
            format!("{}\n", serde_json::to_string_pretty(&rendered).unwrap()),
        )
        .unwrap();
    }
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        rendered,
        fixture,
        "{} is not what the chart renders: run `UPDATE_GOLDEN=1 bash .ci/chart-check` and review",
        path.display()
    );
}

/// A refused values file's markers: `# lint: <text>` when `helm lint
/// --strict` refuses it too (with that text), `# without the schema:
/// <text>` when, schema validation skipped, the templates still refuse it.
fn marker<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(marker))
        .map(str::trim)
}

/// The refused values files: (path, text).
fn refused_files() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/refused");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    files.sort();
    files
}

/// `helm lint` turns a template's `fail` into a log line and passes, so a
/// value refused only by a template lints clean; values.schema.json is
/// what lint judges. Each refused file says whether lint refuses it
/// (`# lint:`), and both ways are checked, so that the list of what lint
/// cannot see stays exact: every value the schema can judge alone (a
/// `keyPrefix` without a dot, a disruption budget that blocks every drain
/// or lets one take every replica, `replicaCount: 1` with a
/// `minAvailable`) is refused by lint too.
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_lint_refuses_exactly_the_files_marked_so() {
    let helm = helm();
    let mut refused_by_lint = 0;
    for (path, text) in refused_files() {
        let mut command = Command::new(&helm);
        command
            .args(["lint", "--strict"])
            .arg(chart())
            .args(["--kube-version", KUBE_VERSION.as_str(), "-f"])
            .arg(&path);
        if !text.contains("allowRenderWithoutCluster") {
            command.args(["--set", "certificates.chart.allowRenderWithoutCluster=true"]);
        }
        let output = command.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        match marker(&text, "# lint: ") {
            Some(want) => {
                assert!(
                    !output.status.success(),
                    "{}: helm lint passes it, though marked `# lint:`:\n{said}",
                    path.display()
                );
                assert!(
                    said.contains(want),
                    "{}: helm lint refuses it, but not with {want:?}:\n{said}",
                    path.display()
                );
                refused_by_lint += 1;
            }
            None => assert!(
                output.status.success(),
                "{}: helm lint refuses it: mark it `# lint: <message>`:\n{said}",
                path.display()
            ),
        }
    }
    assert!(refused_by_lint >= 20, "{refused_by_lint}");
}

/// The schema refuses first; the templates' own checks, with the longer
/// message, stay behind it for `--skip-schema-validation` (Helm 3.16+)
/// and for what the schema cannot relate (min-available-all-replicas).
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_templates_refuse_what_the_schema_refuses_when_it_is_skipped() {
    let helm = helm();
    let mut checked = 0;
    for (path, text) in refused_files() {
        let Some(want) = marker(&text, "# without the schema: ") else {
            continue;
        };
        let path_arg = path.to_str().unwrap();
        let stderr = render(
            &helm,
            &[
                "-f",
                path_arg,
                "--skip-schema-validation",
                "--set",
                "certificates.chart.allowRenderWithoutCluster=true",
            ],
        )
        .map(|_| ())
        .expect_err(path_arg);
        assert!(
            stderr.contains(want),
            "{}: without the schema, not refused with {want:?}:\n{stderr}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 6, "{checked}");
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_a_budget_no_broken_replica_blocks_and_a_critical_priority() {
    let helm = helm();
    for replicas in [2_u64, 3] {
        let objects = render_with(&helm, &["--set", &format!("replicaCount={replicas}")]);
        let budget = &object(&objects, "PodDisruptionBudget", "og-ownerguard")["spec"];
        assert_eq!(budget["unhealthyPodEvictionPolicy"], "AlwaysAllow");
        assert_eq!(budget["maxUnavailable"], 1);
        let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
        assert_eq!(pod["priorityClassName"], "system-cluster-critical");
        // The quota a cluster that limits the class (GKE) wants in the
        // namespace: scoped to the class, room for every server pod of a
        // rollout (the replicas, the surge pod, as many terminating).
        let quota = &object(&objects, "ResourceQuota", "og-ownerguard-priority-class")["spec"];
        assert_eq!(
            quota["scopeSelector"],
            json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["system-cluster-critical"]}]})
        );
        let pods: u64 = quota["hard"]["pods"].as_str().unwrap().parse().unwrap();
        assert!(pods > 2 * replicas, "{pods} pods for {replicas} replicas");
        assert_eq!(quota["hard"].as_object().unwrap().len(), 1, "{quota}");
        // The install check takes no critical priority (nor the quota).
        let check = &object(&objects, "Job", "og-ownerguard-check")["spec"]["template"]["spec"];
        assert!(check["priorityClassName"].is_null());
        let checks = doctor_on(&objects);
        assert!(
            checks.iter().all(|c| c.verdict == Verdict::Ok),
            "{checks:#?}"
        );
    }
    // Without a class, or with the platform's own quota, no quota.
    for extra in [
        ["--set", "priorityClassName="],
        ["--set", "priorityClassQuota.enabled=false"],
    ] {
        let objects = render_with(&helm, &extra);
        assert!(
            !objects.iter().any(|o| o["kind"] == "ResourceQuota"),
            "{extra:?}"
        );
    }
    let objects = render_with(&helm, &["--set", "priorityClassName="]);
    let pod = &object(&objects, "Deployment", "og-ownerguard")["spec"]["template"]["spec"];
    assert!(pod["priorityClassName"].is_null());
    // The policy can be set back to Kubernetes' default.
    let objects = render_with(
        &helm,
        &[
            "--set",
            "podDisruptionBudget.unhealthyPodEvictionPolicy=IfHealthyBudget",
        ],
    );
    assert_eq!(
        object(&objects, "PodDisruptionBudget", "og-ownerguard")["spec"]["unhealthyPodEvictionPolicy"],
        "IfHealthyBudget"
    );
}

/// The install check's Role and RoleBinding go where `check.namespace`
/// says (a namespace a GitOps project may deploy to), never to the
/// release namespace, which the webhooks do not see; with `afterInstall`
/// off only `helm test` creates them.
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_puts_the_install_checks_rbac_in_the_check_namespace() {
    let helm = helm();
    let objects = render_with(&helm, &["--set", "check.namespace=team-a"]);
    for kind in ["Role", "RoleBinding"] {
        assert_eq!(
            object(&objects, kind, "og-ownerguard-check")["metadata"]["namespace"],
            "team-a",
            "{kind}"
        );
    }
    let binding = object(&objects, "RoleBinding", "og-ownerguard-check");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "og-ownerguard-check", "namespace": "ownerguard"}])
    );
    for (kind, name) in [
        ("ServiceAccount", "og-ownerguard-check"),
        ("Job", "og-ownerguard-check"),
        ("Pod", "og-ownerguard-check-test"),
    ] {
        assert_eq!(
            object(&objects, kind, name)["metadata"]["namespace"],
            "ownerguard"
        );
    }
    let probe = &object(&objects, "Job", "og-ownerguard-check")["spec"]["template"]["spec"]["containers"]
        [0]["args"];
    assert!(probe.as_array().unwrap().contains(&json!("--probe=team-a")));
    // Nothing else of the release leaves its namespace.
    for o in &objects {
        let namespace = o["metadata"]["namespace"].as_str();
        let kind = o["kind"].as_str().unwrap();
        assert!(
            namespace.is_none_or(|n| n == "ownerguard" || matches!(kind, "Role" | "RoleBinding")),
            "{kind} {} in {namespace:?}",
            o["metadata"]["name"]
        );
    }
    // The release namespace: the webhooks never see it, the probe could
    // never reach ownerguard there.
    let stderr = render(
        &helm,
        &[
            "--set",
            "image.repository=registry.example/ownerguard",
            "--set",
            "certificates.chart.allowRenderWithoutCluster=true",
            "--set",
            "check.namespace=ownerguard",
        ],
    )
    .map(|_| ())
    .unwrap_err();
    assert!(
        stderr.contains("check.namespace 'ownerguard' is excluded from the webhooks"),
        "{stderr}"
    );
    // afterInstall off: no hook Job; the RBAC is helm test's alone.
    let objects = render_with(&helm, &["--set", "check.afterInstall=false"]);
    assert!(!objects.iter().any(|o| o["kind"] == "Job"));
    for kind in ["Role", "RoleBinding", "ServiceAccount"] {
        assert_eq!(
            object(&objects, kind, "og-ownerguard-check")["metadata"]["annotations"]["helm.sh/hook"],
            "test",
            "{kind}"
        );
    }
}

// --- Who may reach the pods: the policies judged as a network plugin would ---
//
// Written from the NetworkPolicy API (kubernetes.io, "Network Policies")
// and Cilium's policy language (docs.cilium.io, "Layer 3 examples"), not
// from the templates: a pod selected by no policy accepts everything; one
// selected by some accepts what any of their rules admits (a union); a
// rule admits a connection whose port it lists (or it lists none) from a
// peer it lists (or it lists none); traffic from the pod's own node is
// always admitted (the kubelet's probes). Where the plugins differ: an
// ipBlock matches a source's address under Kubernetes' definition (Calico,
// the VPC CNI's agent), but under Cilium only a source outside the
// cluster: nodes, and the API server on them, carry identities of their
// own (remote-node, kube-apiserver), which only a CiliumNetworkPolicy's
// fromEntities selects.

type Labels = std::collections::BTreeMap<String, String>;

/// What opens a connection to an ownerguard pod.
struct Peer {
    name: &'static str,
    ip: std::net::Ipv4Addr,
    /// A pod: (its namespace's labels, its labels). None: a node, the
    /// control plane, the internet.
    pod: Option<(Labels, Labels)>,
    /// Cilium's reserved identities of a source that is not a pod: host
    /// (the pod's own node), remote-node, kube-apiserver, world.
    entities: &'static [&'static str],
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pod_peer(name: &'static str, namespace: &str, pod: &[(&str, &str)], ip: &str) -> Peer {
    Peer {
        name,
        ip: ip.parse().unwrap(),
        pod: Some((
            labels(&[("kubernetes.io/metadata.name", namespace)]),
            labels(pod),
        )),
        entities: &[],
    }
}

fn other_peer(name: &'static str, ip: &str, entities: &'static [&'static str]) -> Peer {
    Peer {
        name,
        ip: ip.parse().unwrap(),
        pod: None,
        entities,
    }
}

#[derive(Clone, Copy, Debug)]
enum Plugin {
    /// NetworkPolicy as Kubernetes defines it; CiliumNetworkPolicy unknown.
    Kubernetes,
    /// Cilium: both kinds; an ipBlock selects only the world.
    Cilium,
}

/// A LabelSelector (matchLabels, matchExpressions) against labels; an
/// empty selector selects everything.
fn selects(selector: &Value, labels: &Labels) -> bool {
    let label_matches = selector["matchLabels"].as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
    });
    let expressions_match = selector["matchExpressions"].as_array().is_none_or(|all| {
        all.iter().all(|e| {
            let value = labels.get(e["key"].as_str().unwrap());
            let listed = || {
                e["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| Some(v.as_str().unwrap()) == value.map(String::as_str))
            };
            match e["operator"].as_str().unwrap() {
                "In" => listed(),
                "NotIn" => !listed(),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => panic!("operator {other}"),
            }
        })
    });
    label_matches && expressions_match
}

fn in_cidr(ip: std::net::Ipv4Addr, cidr: &str) -> bool {
    let (base, bits) = cidr.split_once('/').unwrap();
    let base: std::net::Ipv4Addr = base.parse().unwrap();
    let bits: u32 = bits.parse().unwrap();
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(base) & mask
}

/// A NetworkPolicyPeer of a policy in `namespace` against `peer`.
fn peer_matches(plugin: Plugin, entry: &Value, namespace: &str, peer: &Peer) -> bool {
    if let Some(block) = entry.get("ipBlock") {
        let addressable = match plugin {
            Plugin::Kubernetes => true,
            Plugin::Cilium => peer.pod.is_none() && peer.entities.contains(&"world"),
        };
        let except = block["except"]
            .as_array()
            .is_some_and(|e| e.iter().any(|c| in_cidr(peer.ip, c.as_str().unwrap())));
        return addressable && in_cidr(peer.ip, block["cidr"].as_str().unwrap()) && !except;
    }
    let Some((namespace_labels, pod_labels)) = &peer.pod else {
        return false;
    };
    let namespace_ok = match entry.get("namespaceSelector") {
        Some(selector) => selects(selector, namespace_labels),
        None => namespace_labels["kubernetes.io/metadata.name"] == namespace,
    };
    let pod_ok = entry
        .get("podSelector")
        .is_none_or(|selector| selects(selector, pod_labels));
    namespace_ok && pod_ok
}

/// A Cilium entity against `peer` (a pod has none of the node ones).
fn entity_matches(entity: &str, peer: &Peer) -> bool {
    let world = peer.pod.is_none() && peer.entities.contains(&"world");
    match entity {
        "all" => true,
        "world" => world,
        "cluster" => !world,
        other => peer.entities.contains(&other),
    }
}

/// Whether `plugin` lets `peer` open a connection to port `port` of the
/// ownerguard pods as rendered in `objects`: admitted when no policy
/// selects the pods, else when a rule of one of them admits it.
fn admits(plugin: Plugin, objects: &[Value], peer: &Peer, port: u16) -> bool {
    if peer.entities.contains(&"host") {
        return true;
    }
    let deployment = object(objects, "Deployment", "og-ownerguard");
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
    let pod_labels: Labels =
        serde_json::from_value(deployment["spec"]["template"]["metadata"]["labels"].clone())
            .unwrap();
    let mut selected = false;
    let mut admitted = false;
    for policy in objects
        .iter()
        .filter(|o| o["metadata"]["namespace"] == namespace)
    {
        let spec = &policy["spec"];
        let kind = policy["kind"].as_str().unwrap_or("");
        let selects_the_pods = match (kind, plugin) {
            ("NetworkPolicy", _) => {
                spec["policyTypes"]
                    .as_array()
                    .is_none_or(|t| t.contains(&json!("Ingress")))
                    && selects(&spec["podSelector"], &pod_labels)
            }
            ("CiliumNetworkPolicy", Plugin::Cilium) => {
                selects(&spec["endpointSelector"], &pod_labels)
            }
            _ => false,
        };
        if !selects_the_pods {
            continue;
        }
        selected = true;
        admitted |= spec["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| {
                if kind == "NetworkPolicy" {
                    rule_admits(plugin, objects, rule, namespace, peer, port)
                } else {
                    cilium_rule_admits(objects, rule, peer, port)
                }
            });
    }
    !selected || admitted
}

/// A NetworkPolicy ingress rule: a port it lists (or none listed) from a
/// peer it lists (or none listed).
fn rule_admits(
    plugin: Plugin,
    objects: &[Value],
    rule: &Value,
    namespace: &str,
    peer: &Peer,
    port: u16,
) -> bool {
    let port_ok = rule["ports"].as_array().is_none_or(|ports| {
        ports.is_empty()
            || ports
                .iter()
                .any(|p| port_number(objects, &p["port"]) == port)
    });
    let from_ok = rule["from"].as_array().is_none_or(|from| {
        from.is_empty()
            || from
                .iter()
                .any(|e| peer_matches(plugin, e, namespace, peer))
    });
    port_ok && from_ok
}

/// A CiliumNetworkPolicy ingress rule of the chart's shape: fromEntities
/// on toPorts.
fn cilium_rule_admits(objects: &[Value], rule: &Value, peer: &Peer, port: u16) -> bool {
    let port_ok = rule["toPorts"].as_array().is_none_or(|to| {
        to.iter().any(|t| {
            t["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| port_number(objects, &p["port"]) == port)
        })
    });
    let entities = rule["fromEntities"].as_array().expect("fromEntities only");
    port_ok
        && entities
            .iter()
            .any(|e| entity_matches(e.as_str().unwrap(), peer))
}

/// A policy's port: a number (or one written as a string), or the name of
/// a container port.
fn port_number(objects: &[Value], port: &Value) -> u16 {
    match port {
        Value::Number(n) => n.as_u64().unwrap() as u16,
        Value::String(s) => s.parse().unwrap_or_else(|_| container_port(objects, s)),
        other => panic!("port {other}"),
    }
}

/// The server container's port of that name.
fn container_port(objects: &[Value], name: &str) -> u16 {
    container(objects)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port {name}"))["containerPort"]
        .as_u64()
        .unwrap() as u16
}

/// The pod port a call to the Service's `service_port_name` port reaches
/// (after the Service's translation): what a NetworkPolicy sees.
fn pod_port_behind(objects: &[Value], service_port_name: &str) -> u16 {
    let service = object(objects, "Service", "og-ownerguard");
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == service_port_name)
        .unwrap();
    match &port["targetPort"] {
        Value::String(name) => container_port(objects, name),
        Value::Number(n) => n.as_u64().unwrap() as u16,
        other => panic!("targetPort {other}"),
    }
}

/// The webhook's pod port: where the API server's call to the Service the
/// webhook configurations name arrives.
fn webhook_pod_port(objects: &[Value]) -> u16 {
    let service_port = &object(objects, "MutatingWebhookConfiguration", "og-ownerguard")["webhooks"]
        [0]["clientConfig"]["service"]["port"];
    let service = object(objects, "Service", "og-ownerguard");
    let name = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == *service_port)
        .expect("the webhook's Service port")["name"]
        .as_str()
        .unwrap();
    pod_port_behind(objects, name)
}

/// Asserts `plugin`'s answer for each peer on `port`.
fn expect_reach(
    plugin: Plugin,
    objects: &[Value],
    port: u16,
    cases: &[(&Peer, bool)],
    recipe: &str,
) {
    for (peer, want) in cases {
        assert_eq!(
            admits(plugin, objects, peer, port),
            *want,
            "{recipe}, {plugin:?}: {} on port {port} should be {}",
            peer.name,
            if *want { "admitted" } else { "refused" }
        );
    }
}

fn render_ci(helm: &Path, file: &str) -> Vec<Value> {
    let path = chart().join("ci").join(file);
    render(
        helm,
        &[
            "-f",
            path.to_str().unwrap(),
            "--set",
            "certificates.chart.allowRenderWithoutCluster=true",
        ],
    )
    .unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Peers of a pod network 10.8.0.0/14 and nodes in 10.0.0.0/16.
struct Cluster {
    konnectivity: Peer,
    kube_dns: Peer,
    web: Peer,
    prometheus: Peer,
    kubelet: Peer,
    worker_node: Peer,
    internet: Peer,
}

fn cluster() -> Cluster {
    Cluster {
        konnectivity: pod_peer(
            "a konnectivity agent",
            "kube-system",
            &[("k8s-app", "konnectivity-agent")],
            "10.8.0.5",
        ),
        kube_dns: pod_peer(
            "another kube-system pod",
            "kube-system",
            &[("k8s-app", "kube-dns")],
            "10.8.0.6",
        ),
        web: pod_peer("a workload's pod", "shop", &[("app", "web")], "10.8.1.9"),
        prometheus: pod_peer(
            "Prometheus in namespace observability",
            "observability",
            &[("app.kubernetes.io/name", "prometheus")],
            "10.8.2.3",
        ),
        kubelet: other_peer("the pod's own node (kubelet probes)", "10.0.1.5", &["host"]),
        worker_node: other_peer(
            "another node (host-network pods)",
            "10.0.1.7",
            &["remote-node"],
        ),
        internet: other_peer("an address outside the cluster", "203.0.113.7", &["world"]),
    }
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_default_policy_opens_the_webhook_and_the_metrics_to_the_clusters_pods() {
    let helm = helm();
    let objects = render_with(&helm, &[]);
    let c = cluster();
    let webhook = webhook_pod_port(&objects);
    let metrics = pod_port_behind(&objects, "metrics");
    assert_eq!((webhook, metrics), (8443, 9090));
    for plugin in [Plugin::Kubernetes, Plugin::Cilium] {
        // No source named: the webhook port is open (the NOTES say so).
        expect_reach(
            plugin,
            &objects,
            webhook,
            &[(&c.web, true), (&c.internet, true), (&c.worker_node, true)],
            "default",
        );
        // Metrics: any pod, whatever its namespace's name; nothing else.
        expect_reach(
            plugin,
            &objects,
            metrics,
            &[
                (&c.prometheus, true),
                (&c.web, true),
                (&c.kubelet, true),
                (&c.internet, false),
                (&c.worker_node, false),
            ],
            "default",
        );
        // No other port.
        expect_reach(plugin, &objects, 22, &[(&c.web, false)], "default");
    }
}

/// GKE private cluster: the API server may dial the pods on 443 and 10250
/// only, and its calls come through the konnectivity agents or from the
/// control plane's range.
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_gke_recipe_listens_where_the_control_plane_may_dial_and_admits_only_it() {
    let helm = helm();
    let objects = render_ci(&helm, "gke-private-values.yaml");
    let c = cluster();
    let control_plane = other_peer("GKE's control plane", "172.16.0.2", &["world"]);
    let webhook = webhook_pod_port(&objects);
    assert!(
        [443, 10250].contains(&webhook),
        "the API server's call arrives on pod port {webhook}, which GKE's firewall drops"
    );
    assert!(args(&objects).contains(&format!("--addr=0.0.0.0:{webhook}")));
    expect_reach(
        Plugin::Kubernetes,
        &objects,
        webhook,
        &[
            (&c.konnectivity, true),
            (&control_plane, true),
            (&c.kube_dns, false),
            (&c.web, false),
            (&c.prometheus, false),
            (&c.worker_node, false),
            (&c.internet, false),
        ],
        "GKE",
    );
    expect_reach(
        Plugin::Kubernetes,
        &objects,
        pod_port_behind(&objects, "metrics"),
        &[
            (&c.prometheus, true),
            (&c.internet, false),
            (&control_plane, false),
        ],
        "GKE",
    );
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

/// EKS with the VPC CNI: the API server calls from its network interfaces
/// in the cluster's subnets; pods and nodes live in other subnets.
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_eks_recipe_admits_the_control_planes_interfaces_only() {
    let helm = helm();
    let objects = render_ci(&helm, "eks-values.yaml");
    let c = cluster();
    let interfaces = [
        other_peer(
            "EKS's interface in the first subnet",
            "10.0.0.5",
            &["world"],
        ),
        other_peer(
            "EKS's interface in the second subnet",
            "10.0.0.20",
            &["world"],
        ),
    ];
    let vpc_pod = pod_peer(
        "a pod with a VPC address",
        "shop",
        &[("app", "web")],
        "10.0.70.9",
    );
    let node = other_peer("a node of the VPC", "10.0.64.10", &["remote-node"]);
    let beyond = other_peer("the address after the subnets", "10.0.0.32", &["world"]);
    let webhook = webhook_pod_port(&objects);
    expect_reach(
        Plugin::Kubernetes,
        &objects,
        webhook,
        &[
            (&interfaces[0], true),
            (&interfaces[1], true),
            (&vpc_pod, false),
            (&node, false),
            (&beyond, false),
            (&c.konnectivity, false),
            (&c.internet, false),
        ],
        "EKS",
    );
    expect_reach(
        Plugin::Kubernetes,
        &objects,
        pod_port_behind(&objects, "metrics"),
        &[(&vpc_pod, true), (&interfaces[0], false)],
        "EKS",
    );
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

/// Cilium: the API server's calls carry a node identity. The ipBlock
/// advice refuses them (and under Fail every labelled create); the
/// recipe's entities admit them, and no pod.
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_cilium_recipe_admits_the_api_servers_identity_where_an_ip_block_cannot() {
    let helm = helm();
    let c = cluster();
    let api_server = other_peer(
        "the API server on a control-plane node",
        "10.0.0.10",
        &["kube-apiserver", "remote-node"],
    );
    // What the advice before this recipe said: the control-plane nodes'
    // ipBlock. Admitted where an ipBlock matches nodes, refused by Cilium.
    let advice = render_with(
        &helm,
        &[
            "--set",
            "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
        ],
    );
    let webhook = webhook_pod_port(&advice);
    expect_reach(
        Plugin::Kubernetes,
        &advice,
        webhook,
        &[(&api_server, true)],
        "ipBlock advice",
    );
    expect_reach(
        Plugin::Cilium,
        &advice,
        webhook,
        &[(&api_server, false)],
        "ipBlock advice",
    );

    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chart/cilium-values.yaml");
    let lint = Command::new(&helm)
        .args(["lint", "--strict"])
        .arg(chart())
        .args(["--kube-version", KUBE_VERSION.as_str(), "-f"])
        .arg(&recipe)
        .args(["--set", "certificates.chart.allowRenderWithoutCluster=true"])
        .output()
        .unwrap();
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );
    let recipe = recipe.to_str().unwrap();
    let objects = render_with(&helm, &["-f", recipe]);
    assert!(objects.iter().any(|o| o["kind"] == "CiliumNetworkPolicy"));
    let webhook = webhook_pod_port(&objects);
    expect_reach(
        Plugin::Cilium,
        &objects,
        webhook,
        &[
            (&api_server, true),
            (&c.kubelet, true),
            (&c.konnectivity, false),
            (&c.web, false),
            (&c.prometheus, false),
            (&c.internet, false),
            // The price of remote-node (docs/security.md): a process on
            // any node's network may call too.
            (&c.worker_node, true),
        ],
        "Cilium",
    );
    expect_reach(
        Plugin::Cilium,
        &objects,
        pod_port_behind(&objects, "metrics"),
        &[
            (&c.prometheus, true),
            (&api_server, false),
            (&c.internet, false),
            (&c.worker_node, false),
        ],
        "Cilium",
    );
    // Without Cilium nothing opens the webhook port (and the install fails
    // first: no CiliumNetworkPolicy kind).
    expect_reach(
        Plugin::Kubernetes,
        &objects,
        webhook,
        &[(&api_server, false), (&c.web, false)],
        "Cilium recipe without Cilium",
    );
    // With webhookFrom's peers too, Cilium admits both.
    let both = render_with(
        &helm,
        &[
            "-f",
            recipe,
            "--set",
            "networkPolicy.webhookFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
            "--set",
            "networkPolicy.webhookFrom[0].podSelector.matchLabels.k8s-app=konnectivity-agent",
        ],
    );
    expect_reach(
        Plugin::Cilium,
        &both,
        webhook,
        &[
            (&api_server, true),
            (&c.konnectivity, true),
            (&c.web, false),
        ],
        "Cilium with konnectivity",
    );
    let checks = doctor_on(&objects);
    assert!(
        checks.iter().all(|c| c.verdict == Verdict::Ok),
        "{checks:#?}"
    );
}

/// The chart's `appVersion`, which the app's version is too.
fn app_version() -> String {
    let chart = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/ownerguard/Chart.yaml"),
    )
    .unwrap();
    let version = chart
        .lines()
        .find_map(|line| line.strip_prefix("appVersion:"))
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_string();
    // One version for the chart and the app.
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    version
}

/// Every `helm install` and `helm upgrade` command of a shell block in the
/// user docs, continuation lines joined: (file, command).
fn documented_helm_commands() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![
        root.join("README.md"),
        root.join("charts/ownerguard/README.md"),
    ];
    for dir in ["docs", "docs/reference"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut commands = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut in_shell = false;
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("```") {
                in_shell = !in_shell && matches!(trimmed, "```sh" | "```bash" | "```shell");
                continue;
            }
            if !in_shell {
                continue;
            }
            let line = trimmed.split(" #").next().unwrap_or_default();
            match line.strip_suffix('\\') {
                Some(part) => current.push_str(part),
                None => {
                    current.push_str(line);
                    let command = std::mem::take(&mut current);
                    if command.starts_with("helm upgrade") || command.starts_with("helm install") {
                        commands.push((page.display().to_string(), command));
                    }
                }
            }
        }
    }
    commands
}

#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn every_helm_command_the_docs_give_renders_and_names_flags_helm_has() {
    let helm = helm();
    let commands = documented_helm_commands();
    assert!(commands.len() >= 8, "{commands:#?}");
    let help = |verb: &str| {
        let output = Command::new(&helm).args([verb, "--help"]).output().unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    let (install_help, upgrade_help) = (help("install"), help("upgrade"));
    for (page, command) in commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        let flags_help = if words[1] == "install" {
            &install_help
        } else {
            &upgrade_help
        };
        let mut sets = Vec::new();
        let mut i = 2;
        while i < words.len() {
            let word = words[i];
            if let Some(flag) = word.strip_prefix("--") {
                let name = flag.split('=').next().unwrap();
                assert!(
                    flags_help.contains(&format!("--{name}")),
                    "{page}: `{command}`: helm {} has no --{name}",
                    words[1]
                );
                if matches!(name, "set" | "set-string") && !flag.contains('=') {
                    sets.push((name.to_string(), words[i + 1].to_string()));
                    i += 1;
                } else if matches!(name, "namespace" | "timeout" | "values" | "version")
                    && !flag.contains('=')
                {
                    i += 1;
                }
            } else if matches!(word, "-n" | "-f") {
                i += 1;
            }
            i += 1;
        }
        // Rendered offline as the command installs it: its own values, a
        // placeholder for what the reader fills in.
        let mut args: Vec<String> = vec![
            "--set".into(),
            "certificates.chart.allowRenderWithoutCluster=true".into(),
        ];
        if !sets.iter().any(|(_, v)| v.starts_with("image.repository=")) {
            args.extend(["--set".into(), "image.repository=registry.example/o".into()]);
        }
        for (flag, value) in sets {
            let value = value
                .replace('…', "registry.example/o")
                .replace("\"$(", "")
                .trim_matches('\'')
                .to_string();
            args.push(format!("--{flag}"));
            args.push(value);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Err(error) = render(&helm, &args) {
            panic!("{page}: `{command}` does not render: {error}");
        }
    }
}

/// Traces: off, no flag and no OpenTelemetry variable; on, `--tracing` and
/// the standard variables from the values, the CA mounted where its
/// variable says, the headers from the Secret's key.
#[test]
#[ignore = "renders with real Helm: bash .ci/chart-check builds it and runs these"]
fn helm_renders_tracing_as_the_sdk_reads_it() {
    let helm = helm();
    let off = render_with(&helm, &[]);
    let env = |objects: &[Value]| -> Vec<(String, Value)> {
        container(objects)["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
            .collect()
    };
    assert!(!args(&off).iter().any(|a| a.starts_with("--tracing")));
    assert!(!env(&off).iter().any(|(name, _)| name.starts_with("OTEL_")));
    let on = render_with(
        &helm,
        &[
            "--set",
            "tracing.enabled=true",
            "--set",
            "tracing.endpoint=https://otel-collector.observability:4318",
            "--set",
            "tracing.sampler=parentbased_traceidratio",
            "--set-string",
            "tracing.samplerArg=0.01",
            "--set",
            "tracing.serviceName=ownerguard-prod",
            "--set",
            "tracing.caConfigMap.name=otlp-ca",
            "--set",
            "tracing.headersSecret.name=otlp-headers",
            "--set",
            "tracing.headersSecret.key=headers",
            "--set",
            "tracing.ignoreParent=true",
            "--set",
            "tracing.maxPerSecond=20",
        ],
    );
    for flag in [
        "--tracing",
        "--tracing-ignore-parent",
        "--tracing-max-per-second=20",
    ] {
        assert!(
            args(&on).iter().any(|a| a == flag),
            "{flag}: {:?}",
            args(&on)
        );
    }
    let env = env(&on);
    let value = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name} in {env:?}"))
            .1
            .clone()
    };
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT")["value"],
        "https://otel-collector.observability:4318"
    );
    assert_eq!(
        value("OTEL_TRACES_SAMPLER")["value"],
        "parentbased_traceidratio"
    );
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG")["value"], "0.01");
    assert_eq!(value("OTEL_SERVICE_NAME")["value"], "ownerguard-prod");
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_HEADERS")["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "otlp-headers", "key": "headers"})
    );
    let ca = value("OTEL_EXPORTER_OTLP_CERTIFICATE")["value"]
        .as_str()
        .unwrap()
        .to_string();
    let mounts = container(&on)["volumeMounts"].as_array().unwrap().clone();
    let mount = mounts
        .iter()
        .find(|m| m["name"] == "otlp-ca")
        .expect("the CA's volume mounted");
    assert_eq!(
        ca,
        format!("{}/ca.crt", mount["mountPath"].as_str().unwrap())
    );
    let volumes =
        &object(&on, "Deployment", "og-ownerguard")["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "otlp-ca" && v["configMap"]["name"] == "otlp-ca"),
        "{volumes}"
    );
}
