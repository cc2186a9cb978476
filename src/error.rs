//! Errors, one variant per failure.
//!
//! [`Denial`] is what a user sees after `admission webhook "…" denied the
//! request:`. Each message names the object, the namespace, the owner and
//! the fix, in the tone of the worker library ownerguard grew from; the
//! status code of each is decided in [`Denial::code`], and nowhere else.
//! Internals (API errors, I/O) are logged, never echoed to the user.

use std::fmt;
use std::time::Duration;

/// Why a body is not a review ownerguard can decide: HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body is not JSON, or its fields have the wrong types.
    #[error("malformed AdmissionReview: {0}")]
    Json(#[source] serde_json::Error),
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

/// Why an owner could not be checked: the API did not answer in time or
/// answered with an error. Never a verdict on the owner itself.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// No answer inside the request's time budget.
    #[error("owner lookup timed out after {}ms", .after.as_millis())]
    TimedOut { after: Duration },
    /// The API server answered with an error, or could not be reached.
    #[error("owner lookup failed: {source}")]
    Api {
        #[source]
        source: kube::Error,
    },
}

/// How an object is named in messages and logs: by name, or by
/// `generateName` on a CREATE that has not been given its name yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    pub kind: String,
    pub name: String,
    pub generated: bool,
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.kind.is_empty() {
            "object"
        } else {
            &self.kind
        };
        if self.generated {
            write!(f, "{kind} '{}*' (generateName)", self.name)
        } else if self.name.is_empty() {
            write!(f, "{kind} (no name)")
        } else {
            write!(f, "{kind} '{}'", self.name)
        }
    }
}

/// A request ownerguard refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The owner label is empty or not a pod name.
    #[error(
        "{object} in namespace '{namespace}': label {key} is '{value}', which is not a pod name: \
         set it to the name of the worker pod that owns this object (a pod's hostname is its name)"
    )]
    InvalidOwnerName {
        object: ObjectName,
        namespace: String,
        key: String,
        value: String,
    },

    /// The uid label is present but empty or malformed.
    #[error(
        "{object} in namespace '{namespace}': label {key} of owner pod '{owner}' is '{value}', which \
         is not a uid: pass the uid of the running pod (downward API metadata.uid)"
    )]
    InvalidOwnerUid {
        object: ObjectName,
        namespace: String,
        owner: String,
        key: String,
        value: String,
    },

    /// No uid label, and the request does not come from the owner pod.
    #[error(
        "{object} in namespace '{namespace}': the uid of owner pod '{owner}' is unknown: set label \
         {key} to the uid of the running pod (downward API metadata.uid), or create the object with \
         the owner pod's own service account token"
    )]
    MissingOwnerUid {
        object: ObjectName,
        namespace: String,
        owner: String,
        key: String,
    },

    /// The uid label disagrees with the uid of the requesting owner pod.
    #[error(
        "{object} in namespace '{namespace}': owner pod '{owner}' has uid '{requester_uid}', not \
         '{declared}': pass the uid of the running pod (downward API metadata.uid)"
    )]
    UidDisagreesWithRequester {
        object: ObjectName,
        namespace: String,
        owner: String,
        declared: String,
        requester_uid: String,
    },

    /// A pod-bound requester declares another pod as owner.
    #[error(
        "{object} in namespace '{namespace}': the request comes from pod '{requester}' but declares \
         pod '{owner}' as owner: a worker may only declare itself, so label the object with {key}: \
         {requester_name} and create it in the worker's namespace '{requester_namespace}'"
    )]
    RequesterNotOwner {
        object: ObjectName,
        namespace: String,
        owner: String,
        /// `namespace/name` of the requesting pod.
        requester: String,
        requester_name: String,
        requester_namespace: String,
        key: String,
    },

    /// The owner pod is not in the object's namespace.
    #[error(
        "{object}: owner pod '{owner}' not found in namespace '{namespace}': an ownerReference only \
         holds in the namespace of its owner, so the worker must run in the namespace of the objects \
         it creates"
    )]
    OwnerNotFound {
        object: ObjectName,
        namespace: String,
        owner: String,
    },

    /// The owner pod exists with another uid: a stale uid, or a new pod of
    /// the same name.
    #[error(
        "{object} in namespace '{namespace}': owner pod '{owner}' has uid '{actual}', not '{declared}': \
         pass the uid of the running pod (downward API metadata.uid)"
    )]
    OwnerUidMismatch {
        object: ObjectName,
        namespace: String,
        owner: String,
        declared: String,
        actual: String,
    },

    /// The owner pod is being deleted.
    #[error(
        "{object} in namespace '{namespace}': owner pod '{owner}' is being deleted, so the garbage \
         collector would delete this object with it: create it from a running worker pod"
    )]
    OwnerTerminating {
        object: ObjectName,
        namespace: String,
        owner: String,
    },

    /// The owner could not be checked in time; `--fail-open` is off.
    #[error(
        "{object} in namespace '{namespace}': owner pod '{owner}' could not be checked ({reason}): \
         retry the request; if this persists, check ownerguard's access to the API server"
    )]
    LookupFailed {
        object: ObjectName,
        namespace: String,
        owner: String,
        reason: String,
    },

    /// A cluster-scoped object declares a pod owner.
    #[error(
        "{object} has no namespace (it is cluster-scoped) but declares owner pod '{owner}': a pod can \
         only own objects in its own namespace, so remove the {what}"
    )]
    ClusterScoped {
        object: ObjectName,
        owner: String,
        what: String,
    },

    /// A Pod ownerReference without name or uid.
    #[error(
        "{object} in namespace '{namespace}': ownerReference #{index} to pod '{owner}' has no {field}: \
         give the name and the uid of the owner pod"
    )]
    MalformedReference {
        object: ObjectName,
        namespace: String,
        owner: String,
        index: usize,
        field: &'static str,
    },

    /// An UPDATE adds, changes or removes an owner label.
    #[error(
        "{object} in namespace '{namespace}': the update changes label {key} of owner pod '{owner}' \
         from {old} to {new}: ownership is set at creation and cannot change, so keep the label as it \
         was or create a new object"
    )]
    OwnerLabelChanged {
        object: ObjectName,
        namespace: String,
        owner: String,
        key: String,
        old: String,
        new: String,
    },

    /// An UPDATE removes the owner's ownerReference.
    #[error(
        "{object} in namespace '{namespace}': the update removes the ownerReference to owner pod \
         '{owner}' (uid '{uid}'): ownership is set at creation and cannot change, so keep the reference"
    )]
    OwnerReferenceRemoved {
        object: ObjectName,
        namespace: String,
        owner: String,
        uid: String,
    },

    /// An UPDATE without the old object: nothing to compare ownership with.
    #[error(
        "{object} in namespace '{namespace}': the UPDATE review carries no oldObject, so the ownership \
         of owner pod '{owner}' cannot be compared: send the old object, as the API server does"
    )]
    MissingOldObject {
        object: ObjectName,
        namespace: String,
        owner: String,
    },

    /// A CREATE or UPDATE review without the object itself.
    #[error(
        "{object} in namespace '{namespace}': the {operation} review carries no object, so its owner \
         cannot be checked: send the object, as the API server does"
    )]
    MissingObject {
        object: ObjectName,
        namespace: String,
        operation: String,
    },

    /// /validate: an owner label without the matching reference.
    #[error(
        "{object} in namespace '{namespace}': labelled with owner pod '{owner}' but has no \
         ownerReference to it: add {{apiVersion: v1, kind: Pod, name: {owner}, uid: {uid}, \
         controller: false, blockOwnerDeletion: false}}, or let ownerguard's mutating webhook add it"
    )]
    ReferenceMissing {
        object: ObjectName,
        namespace: String,
        owner: String,
        uid: String,
    },

    /// /validate: a Pod ownerReference with `blockOwnerDeletion: true`.
    #[error(
        "{object} in namespace '{namespace}': the ownerReference to owner pod '{owner}' has \
         blockOwnerDeletion: true, which needs update on pods/finalizers: set blockOwnerDeletion to false, \
         or let ownerguard's mutating webhook set it"
    )]
    BlockingReference {
        object: ObjectName,
        namespace: String,
        owner: String,
    },
}

impl Denial {
    /// The HTTP-like status code of the denial: 400 for malformed owner
    /// declarations, 503 when the owner could not be checked, 403 for the
    /// policy itself.
    pub fn code(&self) -> u16 {
        match self {
            Self::InvalidOwnerName { .. }
            | Self::InvalidOwnerUid { .. }
            | Self::MissingOwnerUid { .. }
            | Self::MalformedReference { .. }
            | Self::MissingOldObject { .. }
            | Self::MissingObject { .. } => 400,
            Self::LookupFailed { .. } => 503,
            Self::UidDisagreesWithRequester { .. }
            | Self::RequesterNotOwner { .. }
            | Self::OwnerNotFound { .. }
            | Self::OwnerUidMismatch { .. }
            | Self::OwnerTerminating { .. }
            | Self::ClusterScoped { .. }
            | Self::OwnerLabelChanged { .. }
            | Self::OwnerReferenceRemoved { .. }
            | Self::ReferenceMissing { .. }
            | Self::BlockingReference { .. } => 403,
        }
    }

    /// The `metav1.Status` reason that goes with [`Denial::code`].
    pub fn reason(&self) -> &'static str {
        match self.code() {
            400 => "BadRequest",
            503 => "ServiceUnavailable",
            _ => "Forbidden",
        }
    }
}
