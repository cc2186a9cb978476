//! The chart's safety properties, read from its templates and values, so
//! that an edit cannot silently drop one. (Helm itself lints the chart in
//! `.ci/run`, once per values file of `charts/ownerguard/ci/`.)

use std::path::{Path, PathBuf};

use serde_json::Value;

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

/// The body of `{{- define "name" -}} … {{- end }}` in the helpers.
fn helper(name: &str) -> String {
    let helpers = template("_helpers.tpl");
    let start = helpers
        .find(&format!("define \"{name}\""))
        .unwrap_or_else(|| panic!("no helper {name}"));
    let rest = &helpers[start..];
    rest[..rest.find("{{- define").unwrap_or(rest.len())].to_string()
}

#[test]
fn defaults_fail_closed_with_a_short_timeout_and_two_replicas() {
    let values = values();
    assert_eq!(values["webhook"]["failurePolicy"], "Fail");
    assert_eq!(values["webhook"]["timeoutSeconds"], 5);
    assert!(values["replicaCount"].as_u64().unwrap() >= 2);
    assert!(
        values["podDisruptionBudget"]["minAvailable"]
            .as_u64()
            .unwrap()
            >= 1
    );
    assert_eq!(
        values["validation"]["allPodOwnerReferences"], false,
        "cluster-wide validation is opt-in"
    );
    assert_eq!(values["server"]["requesterCheck"], "enforce");
    assert_eq!(values["keyPrefix"], "ownerguard.io");
}

#[test]
fn every_webhook_excludes_kube_system_and_the_release_namespace() {
    let selector = helper("ownerguard.namespaceSelector");
    assert!(
        selector.contains("key: kubernetes.io/metadata.name"),
        "{selector}"
    );
    assert!(selector.contains("operator: NotIn"), "{selector}");
    assert!(selector.contains("- kube-system"), "{selector}");
    assert!(
        selector.contains("- {{ .Release.Namespace }}"),
        "{selector}"
    );
    let common = helper("ownerguard.webhookCommon");
    assert!(
        common.contains("include \"ownerguard.namespaceSelector\""),
        "{common}"
    );
    for file in ["webhook-mutating.yaml", "webhook-validating.yaml"] {
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
    let common = helper("ownerguard.webhookCommon");
    for expected in [
        "admissionReviewVersions: [\"v1\", \"v1beta1\"]",
        "sideEffects: None",
        "failurePolicy: {{ .Values.webhook.failurePolicy }}",
        "timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}",
        "matchPolicy: Equivalent",
    ] {
        assert!(common.contains(expected), "missing {expected} in {common}");
    }
    let mutating = template("webhook-mutating.yaml");
    assert!(mutating.contains("reinvocationPolicy: IfNeeded"));
    assert!(mutating.contains("\"path\" \"/mutate\""));
    let validating = template("webhook-validating.yaml");
    assert!(validating.contains("\"path\" \"/validate\""));
    for text in [&mutating, &validating] {
        assert!(
            text.contains("key: {{ .Values.keyPrefix }}/owner-pod\n          operator: Exists"),
            "objectSelector on the owner label"
        );
        assert!(text.contains("(list \"CREATE\" \"UPDATE\")"));
    }
    // The rules cover pods, configmaps and jobs.batch by default.
    let rules = &values()["webhook"]["rules"];
    let resources: Vec<&str> = rules
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(resources, ["pods", "configmaps", "jobs"]);
    assert_eq!(rules[1]["apiGroups"][0], "batch");
}

#[test]
fn the_cluster_wide_switch_sends_other_pod_and_configmap_creates_to_validate() {
    let validating = template("webhook-validating.yaml");
    let switch = validating
        .find("{{- if .Values.validation.allPodOwnerReferences }}")
        .expect("the switch");
    let guarded = &validating[switch..];
    assert!(guarded.contains("\"path\" \"/validate\""));
    assert!(guarded.contains("operations: [\"CREATE\"]"));
    assert!(guarded.contains("resources: [\"pods\", \"configmaps\"]"));
    // Labelled objects already go to the first webhook: not twice.
    assert!(guarded.contains("operator: DoesNotExist"));
    assert!(
        !template("webhook-mutating.yaml").contains("allPodOwnerReferences"),
        "the switch must never mutate"
    );
}

#[test]
fn rbac_is_get_list_watch_on_pods_and_nothing_more() {
    let role: Value = serde_saphyr::from_str(
        &template("clusterrole.yaml")
            .replace("{{ include \"ownerguard.fullname\" . }}", "x")
            .replace("{{- include \"ownerguard.labels\" . | nindent 4 }}", ""),
    )
    .unwrap();
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
    );
    // No other template grants anything.
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if path.file_name().unwrap() != "clusterrole.yaml" {
            assert!(
                !text.contains("verbs:"),
                "{} grants permissions",
                path.display()
            );
        }
    }
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
fn the_pod_runs_non_root_read_only_without_capabilities() {
    let deployment = template("deployment.yaml");
    for expected in [
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "drop: [\"ALL\"]",
        "type: RuntimeDefault",
        "path: /healthz",
        "path: /readyz",
        "podAntiAffinity:",
        "priorityClassName: {{ . }}",
    ] {
        assert!(deployment.contains(expected), "deployment lacks {expected}");
    }
    // The certificate is a directory mount: subPath mounts never see a
    // rotated Secret, and the server could not reload it.
    assert!(deployment.contains("mountPath: /etc/ownerguard/tls"));
    assert!(!deployment.contains("subPath:"));
    assert!(template("poddisruptionbudget.yaml").contains("kind: PodDisruptionBudget"));
}

#[test]
fn certificates_come_three_ways() {
    let modes = ["chart", "certManager", "secret"];
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    assert_eq!(
        schema["properties"]["certificates"]["properties"]["mode"]["enum"],
        serde_json::json!(modes)
    );
    assert!(
        template("tls-secret.yaml").starts_with("{{- if eq .Values.certificates.mode \"chart\" }}")
    );
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
    assert!(helper("ownerguard.webhookAnnotations").contains("cert-manager.io/inject-ca-from"));
    // Chart-made certificates are reused at upgrade.
    assert!(helper("ownerguard.generatedCertificates").contains("lookup \"v1\" \"Secret\""));
    assert!(helper("ownerguard.caBundle").contains(".Values.certificates.secret.caBundle"));
}

#[test]
fn one_template_per_object() {
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let kinds = text.lines().filter(|l| l.starts_with("kind: ")).count();
            assert_eq!(kinds, 1, "{} holds {kinds} objects", path.display());
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
