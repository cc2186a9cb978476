//! The answer, and how it is written in the review's version: base64
//! patch, `response.uid` echoed.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Serialize;

use super::ReviewVersion;

/// The answer, before it is written in the review's version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    pub status: Option<Status>,
    /// The JSON Patch document (an array), written base64 on the wire.
    pub patch: Option<Vec<u8>>,
    pub audit_annotations: BTreeMap<String, String>,
    pub warnings: Vec<String>,
}

/// `metav1.Status` of a denial (or of an allowed answer worth a message).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    pub status: &'static str,
    pub message: String,
    pub reason: &'static str,
    pub code: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

impl AdmissionResponse {
    /// The response `AdmissionReview` in `version`, as JSON bytes.
    ///
    /// The patch goes base64 with `patchType: JSONPatch`, as the API
    /// documents and the API server decodes it.
    pub fn to_review_json(&self, version: ReviewVersion) -> Vec<u8> {
        let patch = self
            .patch
            .as_ref()
            .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
        let review = WireReview {
            api_version: version.api_version(),
            kind: "AdmissionReview",
            response: WireResponse {
                uid: &self.uid,
                allowed: self.allowed,
                status: self.status.as_ref(),
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
                audit_annotations: &self.audit_annotations,
                warnings: &self.warnings,
            },
        };
        // Serialising plain strings, maps and bools cannot fail.
        serde_json::to_vec(&review).unwrap_or_default()
    }
}
