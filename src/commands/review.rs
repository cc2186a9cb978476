//! `ownerguard review`: decide one review offline, as the server would.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::admission::{EXTRA_POD_NAME, EXTRA_POD_UID};
use crate::commands::cli::{ReviewArgs, ReviewOutput};
use crate::observe::Metrics;
use crate::owner::ObservedPod;
use crate::owner::{Inventory, InventoryPod};
use crate::webhook::Webhook;

/// The request uid of a review made from a plain manifest.
pub const MANIFEST_REQUEST_UID: &str = "00000000-0000-0000-0000-000000000000";

/// Exit codes: 0 allowed, 1 denied, 2 bad input.
pub async fn run(args: ReviewArgs) -> ExitCode {
    match review(&args).await {
        Ok((allowed, output)) => {
            if !output.is_empty() {
                println!("{output}");
            }
            ExitCode::from(if allowed { 0 } else { 1 })
        }
        Err(message) => {
            eprintln!("ownerguard review: {message}");
            ExitCode::from(2)
        }
    }
}

async fn review(args: &ReviewArgs) -> Result<(bool, String), String> {
    let input = read_input(args.input.as_deref())?;
    // Every error about the input names where it came from.
    let source = match args.input.as_deref() {
        Some(path) if path != Path::new("-") => path.display().to_string(),
        _ => "standard input".to_string(),
    };
    // A review as the API server wrote it may hold bytes that are not
    // UTF-8 where ownerguard does not read (a RawExtension's): read as
    // text with those replaced, and decided from its own bytes when it is
    // used as it is, as the server would decide it.
    let text = String::from_utf8_lossy(&input);
    let document = parse_document(&text).map_err(|e| format!("{source}: {e}"))?;
    let body = to_review(document.clone(), args).map_err(|e| format!("{source}: {e}"))?;
    let as_given = matches!(text, std::borrow::Cow::Owned(_)) && body == document;

    let mut inventory = match &args.pods {
        // Its errors name the file.
        Some(path) => Inventory::from_file(path).map_err(|e| e.to_string())?,
        None => Inventory::default(),
    };
    if let Some((name, uid)) = &args.as_pod {
        let namespace = body["request"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        if inventory.get(&namespace, name).is_none() {
            let requester = InventoryPod {
                namespace,
                name: name.clone(),
                // It sends the request, so it runs.
                pod: ObservedPod::running(uid.clone()),
            };
            inventory = inventory.with(requester);
        }
    }
    let webhook = Webhook::new(
        args.policy.policy(),
        Arc::new(inventory),
        Arc::new(Metrics::default()),
    );
    let bytes = if as_given {
        input
    } else {
        serde_json::to_vec(&body).map_err(|e| e.to_string())?
    };
    let endpoint = crate::decide::Endpoint::of(args.webhook).in_mode(match args.webhook {
        crate::decide::WebhookKind::ValidateAll => crate::decide::Mode::Enforce,
        _ => args.mode,
    });
    let answer = webhook
        .answer_at(endpoint, &bytes, None)
        .await
        .map_err(|e| format!("{source}: {e}"))?;
    if let Some(status) = &answer.response.status {
        eprintln!("denied ({}): {}", status.code, status.message);
    }
    for warning in &answer.response.warnings {
        eprintln!("warning: {warning}");
    }
    let value: Value = serde_json::from_slice(&answer.body).map_err(|e| e.to_string())?;
    let output = match args.output {
        ReviewOutput::Review => value,
        // Denied: nothing would be stored; the denial is on standard error.
        _ if !answer.response.allowed => return Ok((false, String::new())),
        ReviewOutput::Patch => patch_of(&value)?,
        ReviewOutput::Object => {
            let mut object = body["request"]["object"].clone();
            let patch: json_patch::Patch =
                serde_json::from_value(patch_of(&value)?).map_err(|e| e.to_string())?;
            json_patch::patch(&mut object, &patch)
                .map_err(|e| format!("the answer's patch does not apply: {e}"))?;
            object
        }
    };
    let output = serde_json::to_string_pretty(&output).map_err(|e| e.to_string())?;
    Ok((answer.response.allowed, output))
}

/// The answer's JSON Patch, decoded; an empty one when it has none.
fn patch_of(review: &Value) -> Result<Value, String> {
    use base64::Engine as _;
    let Some(encoded) = review["response"]["patch"].as_str() else {
        return Ok(json!([]));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("the answer's patch is not base64: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("the answer's patch is not JSON: {e}"))
}

fn read_input(path: Option<&Path>) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    match path {
        None => std::io::stdin().read_to_end(&mut bytes).map(drop),
        Some(path) if path == Path::new("-") => std::io::stdin().read_to_end(&mut bytes).map(drop),
        Some(path) => std::fs::read(path).map(|b| bytes = b),
    }
    .map_err(|e| match path {
        Some(path) if path != Path::new("-") => format!("cannot read {}: {e}", path.display()),
        _ => format!("cannot read standard input: {e}"),
    })?;
    Ok(bytes)
}

/// JSON, or else YAML (one document).
pub fn parse_document(text: &str) -> Result<Value, String> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(json_error) => serde_saphyr::from_str::<Value>(text).map_err(|yaml_error| {
            format!("input is neither JSON ({json_error}) nor YAML ({yaml_error})")
        }),
    }
}

/// Make an `AdmissionReview` of what was given: a review as it is, a bare
/// `AdmissionRequest` (as Kubewarden and Kyverno keep test data) wrapped in
/// a `v1` review, a plain manifest as a CREATE.
///
/// # Errors
///
/// A message when the document is none of these.
pub fn to_review(document: Value, args: &ReviewArgs) -> Result<Value, String> {
    let Some(map) = document.as_object() else {
        return Err("input is not an object".to_string());
    };
    let mut review = if map.contains_key("request")
        || map.get("kind").and_then(Value::as_str) == Some("AdmissionReview")
    {
        document
    } else if map.contains_key("operation") {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": document})
    } else {
        return manifest_review(document, args);
    };
    // --as-pod: the request comes from that pod, whatever the review said.
    if let Some((name, uid)) = &args.as_pod
        && let Some(request) = review.get_mut("request").and_then(Value::as_object_mut)
    {
        let namespace = request
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        request.insert("userInfo".to_string(), pod_user_info(&namespace, name, uid));
    }
    Ok(review)
}

/// The `userInfo` of a request made with a token bound to pod `name` of
/// `uid`, in `namespace`.
fn pod_user_info(namespace: &str, name: &str, uid: &str) -> Value {
    json!({
        "username": format!("system:serviceaccount:{namespace}:default"),
        "extra": {EXTRA_POD_NAME: [name], EXTRA_POD_UID: [uid]},
    })
}

fn manifest_review(mut object: Value, args: &ReviewArgs) -> Result<Value, String> {
    let api_version = object["apiVersion"]
        .as_str()
        .ok_or("manifest has no apiVersion")?
        .to_string();
    let kind = object["kind"]
        .as_str()
        .ok_or("manifest has no kind")?
        .to_string();
    if !object["metadata"].is_object() {
        return Err("manifest has no metadata".to_string());
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let written = object["metadata"]["namespace"].as_str().map(str::to_string);
    // A kind of no namespace is reviewed as the API server sends it: with
    // none, whatever the manifest or --namespace says.
    if CLUSTER_SCOPED.contains(&(group, kind.as_str())) {
        if args.namespace.is_some() {
            return Err(format!(
                "{kind} is cluster-scoped: it has no namespace to give with --namespace"
            ));
        }
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        return Ok(review_of(object, group, version, &kind, None, args));
    }
    // As kubectl: a namespace given twice must be the same.
    if let (Some(flag), Some(written)) = (&args.namespace, &written)
        && flag != written
    {
        return Err(format!(
            "the manifest's namespace '{written}' does not match --namespace '{flag}'"
        ));
    }
    let namespace = args
        .namespace
        .clone()
        .or(written)
        .unwrap_or_else(|| "default".to_string());
    // The API server defaults the object's namespace to the request's.
    object["metadata"]["namespace"] = json!(namespace);
    Ok(review_of(
        object,
        group,
        version,
        &kind,
        Some(&namespace),
        args,
    ))
}

/// The built-in kinds that have no namespace, by API group: a manifest of
/// one is reviewed as the API server sends it (no namespace). A custom
/// resource's scope is its CRD's, which `review` cannot read: give such a
/// cluster-scoped object as an AdmissionReview.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
];

/// The CREATE review of `object`, in `namespace` (none: cluster-scoped).
fn review_of(
    object: Value,
    group: &str,
    version: &str,
    kind: &str,
    namespace: Option<&str>,
    args: &ReviewArgs,
) -> Value {
    let user_info = match (&args.as_pod, namespace) {
        (Some((name, uid)), Some(namespace)) => pod_user_info(namespace, name, uid),
        // A pod's service account lives in a namespace: for a
        // cluster-scoped object, the pod's own (`default` unless known).
        (Some((name, uid)), None) => pod_user_info("default", name, uid),
        (None, _) => json!({"username": "ownerguard-review"}),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": MANIFEST_REQUEST_UID,
            "kind": {"group": group, "version": version, "kind": kind},
            // Lowercase plural, right for pods, configmaps and jobs.
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"].clone(),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": user_info,
            "object": object,
            "oldObject": null,
            "dryRun": false,
        }
    })
}
