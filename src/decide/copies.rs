//! Objects Kubernetes' own components make by copying another object's
//! *own* labels (SPEC §3 rule 16), beside the templates of rule 12.
//!
//! Read in the source of every minor ownerguard supports (1.33 to 1.37,
//! docs/reference/decisions.md lists each with its file):
//!
//! - the endpoints controller gives a Service's Endpoints the Service's
//!   labels, the endpointslice controller its EndpointSlices (all but
//!   three reserved keys), and the endpointslice-mirroring controller
//!   gives a selector-less Service's EndpointSlices the Endpoints' labels
//!   and annotations; each creates them all through the Service's life
//!   (placeholders, a slice per hundred endpoints), as its own service
//!   account or, without per-controller credentials, as the controller
//!   manager's user, never with a pod identity;
//! - the kubelet makes a static pod's mirror pod with the static pod's
//!   labels and annotations and one reference, to its Node, which the
//!   NodeRestriction plugin insists on (a webhook's patch reruns that
//!   plugin).
//!
//! A refusal of any of them repeats for ever: the Service never gets
//! endpoints, the mirror pod never shows. So a copy is never refused:
//! the copy of a Service's labels gets the worker's reference when the
//! garbage collector can resolve it (the Service goes with the worker, its
//! endpoints with it), and is admitted unchanged otherwise; a mirror pod
//! is admitted unchanged. A Service labelled `Self` is refused up front
//! instead (create.rs): its copies could never say which pod `Self` was.

use crate::admission::{AdmissionRequest, ObjectMeta};
use crate::decide::resolve::{CONTROLLER_MANAGER, annotation, references};

/// The service accounts of the controllers that copy a Service's (or its
/// Endpoints') labels onto what they create.
const ENDPOINTS_COPIERS: [&str; 3] = [
    "system:serviceaccount:kube-system:endpoint-controller",
    "system:serviceaccount:kube-system:endpointslice-controller",
    "system:serviceaccount:kube-system:endpointslicemirroring-controller",
];

/// The annotation the kubelet puts on a mirror pod.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What kind of copy a request makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Copy {
    /// Endpoints or an EndpointSlice, with a Service's (or Endpoints')
    /// labels, by its controller: referenced when that resolves.
    Endpoints,
    /// A static pod's mirror pod, by its kubelet: admitted unchanged.
    MirrorPod,
}

/// Whether `request` creates or updates a copy a Kubernetes component
/// makes of another object's own labels, and which.
pub(super) fn copy_of(request: &AdmissionRequest, meta: &ObjectMeta) -> Option<Copy> {
    let user = request.user_info.username.as_str();
    let kind = (request.kind.group.as_str(), request.kind.kind.as_str());
    let refs = references(meta);
    let endpoints = matches!(
        kind,
        ("", "Endpoints") | ("discovery.k8s.io", "EndpointSlice")
    );
    // The controllers write one reference of their own (the Service's or
    // the Endpoints'), never a pod's: a copy that carries anything that
    // means a pod is judged as any object.
    if endpoints
        && (ENDPOINTS_COPIERS.contains(&user) || user == CONTROLLER_MANAGER)
        && !refs.iter().any(|r| r.means_pod())
    {
        return Some(Copy::Endpoints);
    }
    // The kubelet writes exactly one reference, to its Node (and
    // NodeRestriction allows no other).
    if kind == ("", "Pod")
        && user.starts_with("system:node:")
        && annotation(meta, MIRROR_POD_ANNOTATION).is_some()
        && matches!(refs, [node] if node.api_version == "v1" && node.kind == "Node")
    {
        return Some(Copy::MirrorPod);
    }
    None
}

/// Whether `request` is a copying controller's UPDATE of Endpoints or an
/// EndpointSlice that keeps every reference the old object had: the
/// endpoints controller takes over an Endpoints of the Service's name
/// that a worker made (its reference on it), relabelling it with the
/// Service's labels and keeping its references. Judged as a copy: never
/// refused, the references kept as they were.
pub(super) fn keeps_references(
    request: &AdmissionRequest,
    meta: &ObjectMeta,
    old: &ObjectMeta,
) -> bool {
    let user = request.user_info.username.as_str();
    let kind = (request.kind.group.as_str(), request.kind.kind.as_str());
    matches!(
        kind,
        ("", "Endpoints") | ("discovery.k8s.io", "EndpointSlice")
    ) && (ENDPOINTS_COPIERS.contains(&user) || user == CONTROLLER_MANAGER)
        && references(meta) == references(old)
}

/// Whether the object's labels are copied by a controller onto objects
/// that controller creates without a pod identity: a Service's, onto its
/// Endpoints and EndpointSlices. `Self` cannot be resolved on those.
pub(super) fn labels_are_copied(request: &AdmissionRequest) -> bool {
    request.kind.group.is_empty() && request.kind.kind == "Service"
}
