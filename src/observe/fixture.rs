//! The test-case format of `tests/fixtures/<case>/`, shared by the golden
//! tests and `serve --record`, so that a recorded request is a ready test:
//!
//! ```text
//! request.json   the AdmissionReview as sent (managedFields stripped)
//! pods.yaml      the owner pods that exist, as a PodList
//! case.yaml      the webhook and the settings it ran with (optional)
//! response.json  the expected answer, its patch decoded for reading
//! patched.json   what the patch may change, after it: the object's metadata
//!                and its templates' (rule 12; only if patched)
//! ```

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::decide::requester::RequesterCheck;
use crate::decide::resolve::OwnerLabels;
use crate::decide::{Mode, Policy, WebhookKind};
use crate::owner::ObservedPod;

pub const REQUEST: &str = "request.json";
pub const PODS: &str = "pods.yaml";
pub const CASE: &str = "case.yaml";
pub const RESPONSE: &str = "response.json";
pub const PATCHED: &str = "patched.json";

/// `case.yaml`: how the case is run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaseConfig {
    /// What the case pins, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default = "mutate")]
    pub webhook: WebhookKind,
    #[serde(default, skip_serializing_if = "is_default")]
    pub requester_check: RequesterCheck,
    #[serde(default, skip_serializing_if = "is_default")]
    pub fail_open: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// Owner names whose lookup fails (the API down), to replay a 503.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lookup_failures: Vec<String>,
    /// `--delegate`: `NAMESPACE/SERVICEACCOUNT` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegates: Vec<String>,
    /// `--max-pod-references`, when not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pod_references: Option<usize>,
    /// The namespace's mode: the path is `/<webhook>/<mode>` unless
    /// `enforce`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: Mode,
}

fn mutate() -> WebhookKind {
    WebhookKind::Mutate
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl Default for CaseConfig {
    fn default() -> Self {
        Self {
            description: None,
            webhook: WebhookKind::Mutate,
            requester_check: RequesterCheck::default(),
            fail_open: false,
            key_prefix: None,
            lookup_failures: Vec::new(),
            delegates: Vec::new(),
            max_pod_references: None,
            mode: Mode::Enforce,
        }
    }
}

impl CaseConfig {
    /// The path the case is sent to: `mutate`, `validate/warn`...
    pub fn path(&self) -> String {
        match self.mode {
            Mode::Enforce => self.webhook.as_str().to_string(),
            mode => format!("{}/{}", self.webhook.as_str(), mode.as_str()),
        }
    }

    /// The policy the case runs with. A delegate that does not parse is
    /// left out, and the case then fails on its answer.
    pub fn policy(&self) -> Policy {
        Policy {
            labels: self
                .key_prefix
                .as_deref()
                .map(OwnerLabels::new)
                .unwrap_or_default(),
            requester_check: self.requester_check,
            fail_open: self.fail_open,
            delegates: self
                .delegates
                .iter()
                .filter_map(|d| d.parse().ok())
                .collect(),
            max_pod_references: self
                .max_pod_references
                .unwrap_or(crate::decide::DEFAULT_MAX_POD_REFERENCES),
            relaxed: crate::decide::Relaxed::default(),
        }
    }
}

/// The response review with its base64 patch decoded into the JSON array
/// it carries, for reading and diffing. Left as it is when it does not
/// decode: the golden comparison then fails on it.
pub fn readable_response(mut review: Value) -> Value {
    let decoded = review["response"]["patch"]
        .as_str()
        .and_then(|patch| base64::engine::general_purpose::STANDARD.decode(patch).ok())
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    if let Some(patch) = decoded {
        review["response"]["patch"] = patch;
    }
    review
}

/// The metadata of the request's object after the response's patch, as
/// the API server would apply it. `Ok(None)` when there is no patch.
///
/// # Errors
///
/// A message when the patch does not decode or does not apply: the API
/// server would fail the user's request with a 500.
pub fn patched_metadata(review: &Value, response: &Value) -> Result<Option<Value>, String> {
    Ok(patched_object(review, response)?.map(|object| object["metadata"].clone()))
}

/// The JSON pointers of the parts of an object a patch may change: its
/// metadata, and its templates' metadata (SPEC §3 rule 12: pod templates,
/// claim templates, ephemeral volumes' claim templates, a
/// ResourceClaimTemplate's `spec.metadata`), those the object has, by
/// index in its lists.
pub fn patchable_pointers(object: &Value) -> Vec<String> {
    let mut pointers: Vec<String> = [
        "/metadata",
        "/spec/template/metadata",
        "/spec/jobTemplate/metadata",
        "/spec/jobTemplate/spec/template/metadata",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    let indices = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    for index in 0..indices("/spec/volumeClaimTemplates") {
        pointers.push(format!("/spec/volumeClaimTemplates/{index}/metadata"));
    }
    for spec in [
        "/spec",
        "/spec/template/spec",
        "/spec/jobTemplate/spec/template/spec",
    ] {
        for index in 0..indices(&format!("{spec}/volumes")) {
            pointers.push(format!(
                "{spec}/volumes/{index}/ephemeral/volumeClaimTemplate/metadata"
            ));
        }
    }
    if object["kind"] == "ResourceClaimTemplate" {
        pointers.push("/spec/metadata".to_string());
    }
    pointers.retain(|pointer| object.pointer(pointer).is_some());
    pointers
}

/// What `patched.json` holds: each part of [`patchable_pointers`] the
/// object has, by its pointer.
pub fn patchable_parts(object: &Value) -> Value {
    let parts: serde_json::Map<String, Value> = patchable_pointers(object)
        .into_iter()
        .filter_map(|pointer| {
            let part = object.pointer(&pointer)?.clone();
            Some((pointer, part))
        })
        .collect();
    Value::Object(parts)
}

/// `object` without the parts a patch may change: what must be as sent.
pub fn without_patchable_parts(object: &Value) -> Value {
    let mut stripped = object.clone();
    // No part holds another: each is a `metadata` beside a `spec`.
    for pointer in patchable_pointers(object) {
        let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", &pointer));
        if let Some(Value::Object(map)) = stripped.pointer_mut(parent) {
            map.remove(key);
        }
    }
    stripped
}

/// The request's whole object after the response's patch.
///
/// # Errors
///
/// As [`patched_metadata`].
pub fn patched_object(review: &Value, response: &Value) -> Result<Option<Value>, String> {
    let Some(encoded) = response["response"]["patch"].as_str() else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("patch is not base64: {e}"))?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).map_err(|e| format!("patch is not a JSON Patch: {e}"))?;
    let mut object = request_object(review).clone();
    json_patch::patch(&mut object, &patch).map_err(|e| format!("patch does not apply: {e}"))?;
    Ok(Some(object))
}

/// The `request` of a review, or the document itself for a bare request.
pub fn request_object(review: &Value) -> &Value {
    let request = review.get("request").unwrap_or(review);
    &request["object"]
}

/// Remove `metadata.managedFields` from the object and the old object:
/// noise in a test case, and the longest part of most requests.
pub fn strip_managed_fields(review: &mut Value) {
    // `get_mut`, not indexing: `IndexMut` would insert the missing keys.
    for key in ["object", "oldObject"] {
        let metadata = review
            .get_mut("request")
            .and_then(|r| r.get_mut(key))
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut);
        if let Some(metadata) = metadata {
            metadata.remove("managedFields");
        }
    }
}

/// `pods.yaml` for the pods a decision looked up.
pub fn pods_yaml(pods: &[(String, String, ObservedPod)]) -> String {
    let items: Vec<Value> = pods
        .iter()
        .map(|(namespace, name, pod)| {
            let mut metadata = json!({"name": name, "namespace": namespace, "uid": pod.uid});
            if pod.terminating {
                metadata["deletionTimestamp"] = json!("1970-01-01T00:00:00Z");
            }
            let mut pod_yaml = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata});
            // Only a finished phase is known (the watch of every pod
            // carries none): a pod that may run is written without status.
            if let Some(phase) = pod.finished {
                pod_yaml["status"] = json!({"phase": phase.as_str()});
            }
            pod_yaml
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "PodList", "items": items});
    serde_saphyr::to_string(&list).unwrap_or_default()
}
