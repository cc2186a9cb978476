//! The answer, and how it is written in the review's version: base64
//! patch, `response.uid` echoed.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;

use super::{ReviewVersion, write};

/// The answer, before it is written in the review's version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    pub status: Option<Status>,
    /// The JSON Patch document (an array), written base64 on the wire.
    pub patch: Option<Vec<u8>>,
    /// Keys are ownerguard's own (`owner`, `mode`, ...): never allocated;
    /// so are the values that are words of its own (`owner-source`,
    /// `mode`).
    pub audit_annotations: BTreeMap<&'static str, Cow<'static, str>>,
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

impl AdmissionResponse {
    /// The response `AdmissionReview` in `version`, as JSON bytes.
    ///
    /// The patch goes base64 with `patchType: JSONPatch`, as the API
    /// documents and the API server decodes it. Written straight into one
    /// buffer sized for it up front: fixed keys, the uid, the patch encoded
    /// in place (by SIMD where the CPU has it: a patched review's largest
    /// string), the few strings of a status, annotations and warnings.
    pub fn to_review_json(&self, version: ReviewVersion) -> Vec<u8> {
        let base64 = &base64_simd::STANDARD;
        let patch_len = self
            .patch
            .as_ref()
            .map_or(0, |p| base64.encoded_length(p.len()));
        let strings: usize = self.status.as_ref().map_or(0, |s| s.message.len() + 64)
            + self
                .audit_annotations
                .iter()
                .map(|(k, v)| k.len() + v.len() + 8)
                .sum::<usize>()
            + self.warnings.iter().map(|w| w.len() + 4).sum::<usize>();
        let mut out = Vec::with_capacity(160 + self.uid.len() + patch_len + strings);
        out.extend_from_slice(br#"{"apiVersion":""#);
        out.extend_from_slice(version.api_version().as_bytes());
        out.extend_from_slice(br#"","kind":"AdmissionReview","response":{"uid":"#);
        write::string(&mut out, &self.uid);
        out.extend_from_slice(if self.allowed {
            br#","allowed":true"#
        } else {
            br#","allowed":false"#
        });
        if let Some(status) = &self.status {
            out.extend_from_slice(br#","status":{"status":"#);
            write::string(&mut out, status.status);
            out.extend_from_slice(br#","message":"#);
            write::string(&mut out, &status.message);
            out.extend_from_slice(br#","reason":"#);
            write::string(&mut out, status.reason);
            out.extend_from_slice(br#","code":"#);
            out.extend_from_slice(status.code.to_string().as_bytes());
            out.push(b'}');
        }
        if let Some(patch) = &self.patch {
            out.extend_from_slice(br#","patch":""#);
            base64.encode_append(patch, &mut out);
            out.extend_from_slice(br#"","patchType":"JSONPatch""#);
        }
        if !self.audit_annotations.is_empty() {
            out.extend_from_slice(br#","auditAnnotations":{"#);
            for (i, (key, value)) in self.audit_annotations.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write::string(&mut out, key);
                out.push(b':');
                write::string(&mut out, value);
            }
            out.push(b'}');
        }
        if !self.warnings.is_empty() {
            out.extend_from_slice(br#","warnings":["#);
            for (i, warning) in self.warnings.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write::string(&mut out, warning);
            }
            out.push(b']');
        }
        out.extend_from_slice(b"}}");
        out
    }
}
