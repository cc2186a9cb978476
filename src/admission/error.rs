//! Why a body is not a review ownerguard can decide.

use super::json;

/// Why a body is not a review ownerguard can decide: HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body is not JSON, its fields have the wrong types, or a string
    /// ownerguard reads is not UTF-8.
    #[error("malformed AdmissionReview: {0}")]
    Json(#[source] json::JsonError),
    /// Valid JSON, but not an `admission.k8s.io/v1` or `v1beta1` review.
    #[error("not an admission.k8s.io/v1 or v1beta1 AdmissionReview: {0}")]
    NotAReview(String),
    /// An `AdmissionReview` without a `request` to decide.
    #[error("AdmissionReview has no request")]
    NoRequest,
}
