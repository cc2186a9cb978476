//! Why a body is not a review ownerguard can decide.

use super::json;

/// Why a body is not a review ownerguard can decide: HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body is not JSON, or its fields have the wrong types.
    #[error("malformed AdmissionReview: {0}")]
    Json(#[source] json::JsonError),
    /// The body is not UTF-8, so not JSON.
    #[error("malformed AdmissionReview: not UTF-8: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    /// Valid JSON, but not an `admission.k8s.io/v1` or `v1beta1` review.
    #[error("not an admission.k8s.io/v1 or v1beta1 AdmissionReview: {0}")]
    NotAReview(String),
    /// An `AdmissionReview` without a `request` to decide.
    #[error("AdmissionReview has no request")]
    NoRequest,
}
