//! Denials, one variant per rule.
//!
//! [`Denial`] is what a user sees after `admission webhook "…" denied the
//! request:`. Each message names the object, the namespace, the owner and
//! the fix, in the tone of the worker library ownerguard grew from; the
//! status code of each is decided in [`Denial::code`], and nowhere else.
//! Internals (API errors, I/O) are logged, never echoed to the user.

use std::fmt;

use super::subject::{ObjectName, OwnedBy, OwnerNote, Shown, Spelled, Subject};

/// A request ownerguard refuses, and why.
///
/// Every message names the object, its namespace, the owner and the fix.
/// None carries what the requester did not name itself: the uid of a pod
/// that was looked up, or an API error (SPEC §3, "Messages").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// The owner label (or the name annotation of `Self`) is empty or not a
    /// pod name.
    #[error(
        "{at}: {what} {key} is '{}', which is not a pod name: set label {pod_key} to the name of the \
         worker pod that owns this object, from the downward API (metadata.name), or to 'Self' when \
         the worker creates the object with its own pod-bound token", Shown(.value)
    )]
    InvalidOwnerName {
        at: Subject,
        what: &'static str,
        key: String,
        pod_key: String,
        value: String,
    },

    /// The uid label is present but empty or malformed.
    #[error(
        "{at}: label {key} of owner pod '{}' is '{}', which is not a uid: pass the uid of the \
         running pod (downward API metadata.uid)", Shown(.owner), Shown(.value)
    )]
    InvalidOwnerUid {
        at: Subject,
        owner: String,
        key: String,
        value: String,
    },

    /// No uid label, and the request does not come from the owner pod.
    #[error(
        "{at}: the uid of owner pod '{owner}' is unknown: set label {key} to the uid of the running \
         pod (downward API metadata.uid), or create the object with the owner pod's own pod-bound \
         service-account token"
    )]
    MissingOwnerUid {
        at: Subject,
        owner: String,
        key: String,
    },

    /// The uid label disagrees with the uid of the requesting owner pod.
    #[error(
        "{at}: label {key} is '{}', but the request comes from owner pod '{owner}' itself, whose uid \
         differs: pass the uid of the running pod (downward API metadata.uid), or leave the label \
         out", Shown(.declared)
    )]
    UidDisagreesWithRequester {
        at: Subject,
        owner: String,
        key: String,
        declared: String,
    },

    /// A pod-bound requester declares another pod as owner.
    #[error(
        "{at}: the request comes from pod '{requester}' but declares pod '{owner}'{note} as owner: a worker \
         may only declare itself, so label the object with {key}: {requester} (its name from the \
         downward API, metadata.name) or {key}: Self; a pod that creates objects for other pods of \
         its namespace needs its service account '{service_account}' on ownerguard's delegate list \
         (--delegate {service_account})", note = OwnerNote(&.at.owner, .owner)
    )]
    RequesterNotOwner {
        at: Subject,
        owner: String,
        requester: String,
        /// `namespace/name` of the requester's service account.
        service_account: String,
        key: String,
    },

    /// An UPDATE from a pod adds or changes a Pod reference on an object
    /// that another pod owns (SPEC §3 UPDATE).
    #[error(
        "{at}: the update from pod '{requester}' adds an ownerReference to pod '{}' on an object \
         owned by pod '{}'{}: ownership is set at creation, so a worker cannot make itself owner of \
         another worker's object, even an orphaned one; create an object of its own instead (a pod \
         that manages objects for other pods of its namespace needs its service account \
         '{service_account}' on ownerguard's delegate list, --delegate {service_account})",
        Shown(.reference), Shown(.owner), .same_name
    )]
    RequesterAdoptsObject {
        at: Subject,
        /// The owner that is not the requester.
        owner: String,
        requester: String,
        /// The pod the first added reference names (the requester's).
        reference: String,
        /// The owner has the requester's name (under another uid, or
        /// none recorded).
        same_name: SameName,
        /// `namespace/name` of the requester's service account.
        service_account: String,
    },

    /// An UPDATE from a pod releases an object that another pod owns: it
    /// removes a Pod reference or an owner label, and the removal stands
    /// (SPEC §3 UPDATE).
    #[error(
        "{at}: the update from pod '{requester}' removes an ownerReference or an owner label of an \
         object owned by pod '{}'{}: ownership is set at creation, so a worker cannot release \
         another worker's object, even an orphaned one; leave its owner labels and references as \
         they are (a pod that manages objects for other pods of its namespace needs its service \
         account '{service_account}' on ownerguard's delegate list, --delegate {service_account})",
        Shown(.owner), .same_name
    )]
    RequesterReleasesObject {
        at: Subject,
        /// The owner that is not the requester.
        owner: String,
        requester: String,
        same_name: SameName,
        /// `namespace/name` of the requester's service account.
        service_account: String,
    },

    /// `Self` declared by a request that carries no pod identity.
    #[error(
        "{at}: label {key} is 'Self', which means the pod that sends the request, but this request \
         carries no pod identity (it is not made with a pod-bound service-account token of namespace \
         '{}'): label the object with the owner pod's name and uid instead", Shown(&.at.namespace)
    )]
    SelfWithoutPodIdentity { at: Subject, key: String },

    /// `Self` on an object whose labels a controller copies onto objects it
    /// creates without a pod identity (a Service's, onto its Endpoints and
    /// EndpointSlices): they could never say which pod `Self` was, and
    /// would be admitted without the worker's reference.
    #[error(
        "{at}: label {key} is 'Self' (owner pod '{}'), but the endpoints and endpointslice \
         controllers copy this object's labels, not its annotations, onto the Endpoints and \
         EndpointSlices they create, which then cannot tell which pod Self was: label the object \
         {key}: {} and the uid label instead (a name over 63 characters cannot be a label value: \
         set the Service's ownerReference to the pod yourself and leave the owner labels off)",
        Shown(.owner), Shown(.owner)
    )]
    SelfOnCopiedLabels {
        at: Subject,
        key: String,
        owner: String,
    },

    /// A CronJob whose Job template has no labels, its pod template
    /// labelled `Self`: the API server gives each Job the pod template's
    /// labels (batch/v1 defaulting), not its annotations, and the cronjob
    /// controller creates it without pod identity, so the Job could never
    /// say which pod `Self` was.
    #[error(
        "{at}: its spec.jobTemplate.spec.template is labelled {key}: Self (owner pod '{}') and \
         spec.jobTemplate.metadata has no labels, so the API server gives each Job the pod \
         template's labels but not its annotations, and the Jobs the CronJob controller creates \
         could not tell which pod Self was: label spec.jobTemplate.metadata with {key}: {} too, \
         or label the pod template with the pod's name",
        Shown(.owner), Shown(.owner)
    )]
    SelfInDefaultedJobLabels {
        at: Subject,
        key: String,
        owner: String,
    },

    /// The name annotation naming another pod than the owner label (the
    /// annotation completes `Self`; beside a name it may only restate it).
    #[error(
        "{at}: annotation {key} names owner pod '{}' but label {pod_key} names pod '{}': the \
         annotation completes {pod_key}: Self and may only restate the owner beside a name, so \
         remove it or make it name the same pod", Shown(.owner), Shown(.label)
    )]
    StrayOwnerAnnotation {
        at: Subject,
        owner: String,
        /// The owner-pod label's value.
        label: String,
        key: String,
        pod_key: String,
    },

    /// A uid label (or name annotation) without the owner-pod label.
    #[error(
        "{at}: {key} is set without label {pod_key}, so it names no owner: add label {pod_key} with \
         the owner pod's name, or remove {key}"
    )]
    HalfClaim {
        at: Subject,
        key: String,
        pod_key: String,
    },

    /// The owner pod is not in the object's namespace.
    #[error(
        "{}: owner pod '{owner}'{note} not found in namespace '{}': an ownerReference only holds in \
         the namespace of its owner, so the worker must run in the namespace of the objects it creates",
        .at.object, .at.namespace, note = OwnerNote(&.at.owner, .owner)
    )]
    OwnerNotFound { at: Subject, owner: String },

    /// The owner pod exists with another uid: a stale uid, or a new pod of
    /// the same name. The real uid is not shown: the worker knows its own.
    #[error(
        "{at}: owner pod '{owner}'{note} does not have uid '{}' (a stale uid, or another pod of the \
         same name): pass the uid of the running pod (downward API metadata.uid)", Shown(.declared),
        note = OwnerNote(&.at.owner, .owner)
    )]
    OwnerUidMismatch {
        at: Subject,
        owner: String,
        declared: String,
    },

    /// The owner pod is being deleted.
    #[error(
        "{at}: owner pod '{owner}'{note} is being deleted, so the garbage collector would delete this \
         object with it: create it from a running worker pod", note = OwnerNote(&.at.owner, .owner)
    )]
    OwnerTerminating { at: Subject, owner: String },

    /// The owner pod has finished (phase `Succeeded` or `Failed`): its
    /// object, and with it what it owns, stays until something deletes it.
    #[error(
        "{at}: owner pod '{owner}'{note} has finished (phase {phase}), so it will not run again, but the \
         garbage collector keeps what it owns until the pod object is deleted: create this object from \
         a running worker pod, and delete finished worker pods (or let their Job's \
         ttlSecondsAfterFinished do it)", note = OwnerNote(&.at.owner, .owner)
    )]
    OwnerFinished {
        at: Subject,
        owner: String,
        phase: crate::owner::Finished,
    },

    /// The owner could not be checked in time; `--fail-open` is off.
    #[error(
        "{at}: owner pod '{owner}'{note} could not be checked ({reason}): retry the request; if this \
         persists, check ownerguard's access to the API server", note = OwnerNote(&.at.owner, .owner)
    )]
    LookupFailed {
        at: Subject,
        owner: String,
        reason: &'static str,
    },

    /// A cluster-scoped object declares a pod owner.
    #[error(
        "{object} has no namespace (it is cluster-scoped) but declares owner pod '{}': a pod can only \
         own objects in its own namespace, so remove the {what}", Shown(.owner)
    )]
    ClusterScoped {
        object: ObjectName,
        owner: String,
        what: String,
    },

    /// The request's namespace cannot be a namespace, or differs from the
    /// object's.
    #[error(
        "{object} declares owner pod '{}' in namespace '{}', which {problem}: send the review as the \
         API server does", Shown(.owner), Shown(.namespace)
    )]
    InvalidNamespace {
        object: ObjectName,
        namespace: String,
        owner: String,
        problem: &'static str,
    },

    /// The pod identity in `userInfo.extra` is malformed.
    #[error(
        "{at}: the requester's pod identity (userInfo.extra {keys}) is malformed ({problem}), so the \
         claim on owner pod '{}' cannot be judged: send the identity as the API server does, one \
         non-empty pod name and uid", Shown(.owner)
    )]
    MalformedIdentity {
        at: Subject,
        owner: String,
        keys: &'static str,
        problem: &'static str,
    },

    /// A Pod ownerReference without name or uid.
    #[error(
        "{at}: ownerReference #{index} (owner pod '{}') has no {field}: give both the name and the \
         uid of the owner pod", Shown(.owner)
    )]
    MalformedReference {
        at: Subject,
        owner: String,
        index: usize,
        field: &'static str,
    },

    /// A Pod ownerReference whose name cannot be a pod name.
    #[error(
        "{at}: ownerReference #{index} names pod '{}'{}, which is not a pod name: give the exact name \
         of the owner pod (downward API metadata.name)", Shown(.reference), OwnedBy(.owner, .reference)
    )]
    InvalidReferenceName {
        at: Subject,
        /// The object's owner: its label's, or else the reference's name.
        owner: String,
        reference: String,
        index: usize,
    },

    /// A reference that means a pod but is not exactly `v1`/`Pod`.
    #[error(
        "{at}: ownerReference #{index} to pod '{}'{} has apiVersion '{}' and kind '{}': the garbage \
         collector resolves an owner by its exact apiVersion and kind, so write apiVersion v1 and kind \
         Pod", Shown(.reference), OwnedBy(.owner, .reference), Spelled(.api_version), Spelled(.kind)
    )]
    InexactPodReference {
        at: Subject,
        /// The object's owner: its label's, or else the reference's name.
        owner: String,
        reference: String,
        index: usize,
        api_version: String,
        kind: String,
    },

    /// An entry that carries a pod's uid under another apiVersion, kind or
    /// name than that pod's reference.
    #[error(
        "{at}: ownerReference #{index} ({}, {}, '{}') carries the uid of the reference to pod \
         '{owner}' but is not that reference: a reference is the whole tuple (apiVersion: v1, kind: \
         Pod, name, uid), so remove or correct entry #{index}",
        Spelled(.api_version), Spelled(.kind), Shown(.name)
    )]
    ContradictingReference {
        at: Subject,
        owner: String,
        index: usize,
        api_version: String,
        kind: String,
        name: String,
    },

    /// A Pod reference naming a pod the object already names, under
    /// another uid.
    #[error(
        "{at}: ownerReference #{index} names pod '{owner}'{note} with another uid than the object \
         gives it elsewhere (its uid label or another reference): a pod has one uid, and a new pod of \
         the same name is another owner, so keep only the reference with the uid of the running pod",
        note = OwnerNote(&.at.owner, .owner)
    )]
    ConflictingUid {
        at: Subject,
        owner: String,
        index: usize,
    },

    /// More Pod references than ownerguard checks in one review.
    #[error(
        "{at}: the object carries {count} Pod ownerReferences (first: pod '{}'), more than the {limit} \
         ownerguard checks per object: an object is owned by one worker, so give it that worker's \
         reference only", Shown(.owner)
    )]
    TooManyReferences {
        at: Subject,
        owner: String,
        count: usize,
        limit: usize,
    },

    /// A list ownerguard reads (references, volumes, claim templates) with
    /// more entries than it keeps of one: what is past the bound would go
    /// unjudged.
    #[error(
        "{at}: its {field} holds more than {limit} entries, more than ownerguard reads of one object \
         (its owner pod: {}): remove the entries it does not need, or split it into several \
         objects", OwnerShown(.owner)
    )]
    TooManyEntries {
        at: Subject,
        /// The owner the object declares, if any.
        owner: Option<String>,
        field: String,
        limit: usize,
    },

    /// A template (pod, Job, claim, ResourceClaim) declares another owner
    /// than its object: what a controller makes from it would belong to
    /// another worker, or be refused.
    #[error(
        "{at}: its {template} {field} declares owner pod '{}' ({what}) but the object declares \
         owner pod '{owner}': label the template with the object's owner (or leave the owner labels \
         out of it), so that what is made from it belongs to the same worker", Shown(.template_owner)
    )]
    TemplateOwnerMismatch {
        at: Subject,
        owner: String,
        /// What the template makes: `pod template`, `claim template`...
        template: &'static str,
        /// Where it is: `spec.volumeClaimTemplates[0]`.
        field: String,
        template_owner: String,
        what: &'static str,
    },

    /// An UPDATE labels a template of an object that records no uid for
    /// its owner (labelled by name before ownerguard), and the template
    /// gives none: what a controller makes from it would be refused for
    /// want of a uid (SPEC §3 rule 12), and ownerguard cannot complete it.
    #[error(
        "{at}: its {template} {field} declares owner pod '{owner}' without label {key}, and the \
         object records no uid for its owner, so what is made from it would be refused: set label \
         {key} on the template to the uid of the running owner pod (downward API metadata.uid)"
    )]
    TemplateUidUnknown {
        at: Subject,
        owner: String,
        /// What the template makes: `pod template`, `claim template`...
        template: &'static str,
        /// Where it is: `spec.template`.
        field: String,
        key: String,
    },

    /// A StatefulSet's claim template carries a Pod reference: the
    /// statefulset controller copies a claim template's metadata whole,
    /// references included, onto every claim it makes, so each claim
    /// would be owned by a pod no check of the requester proved (another
    /// worker's), or be refused or deleted at once (a pod gone, a
    /// reference the collector cannot resolve).
    #[error(
        "{at}: its {template} {field} carries ownerReferences[{index}] naming {} '{}' \
         (apiVersion '{}'), and the statefulset controller copies it onto every claim it makes, \
         whose owner pod is '{owner}': remove ownerReferences from {field}.metadata; each claim \
         gets the reference to its owner pod from its owner label",
        Spelled(.kind), Shown(.name), Spelled(.api_version)
    )]
    TemplatePodReference {
        at: Subject,
        owner: String,
        /// What the template makes: `claim template`.
        template: &'static str,
        /// Where it is: `spec.volumeClaimTemplates[0]`.
        field: String,
        index: usize,
        api_version: String,
        kind: String,
        name: String,
    },

    /// An UPDATE changes an owner label, or its name annotation.
    #[error(
        "{at}: the update changes {key} of owner pod '{}' from {old} to {new}: ownership is set at \
         creation and cannot change, so keep it as it was or create a new object", Shown(.owner)
    )]
    OwnerLabelChanged {
        at: Subject,
        owner: String,
        key: String,
        old: String,
        new: String,
    },

    /// An UPDATE adds the owner label to an object that had none.
    #[error(
        "{at}: the update adds label {key} (owner pod '{}'): ownership is set at creation, so an \
         existing object cannot be adopted; create a new object with the label instead", Shown(.owner)
    )]
    OwnerLabelAdded {
        at: Subject,
        owner: String,
        key: String,
    },

    /// An UPDATE removes the owner labels while the owner still owns the
    /// object.
    #[error(
        "{at}: the update removes {key} while owner pod '{owner}' is running and owns the object: to \
         keep the object after its worker, delete the worker with --cascade=orphan first, then remove \
         the owner labels"
    )]
    OwnerLabelRemoved {
        at: Subject,
        owner: String,
        key: String,
    },

    /// An UPDATE removes the ownerReference to a running pod.
    #[error(
        "{at}: the update removes the ownerReference to pod '{owner}'{note}, which is running: \
         ownership is set at creation, so keep the reference (to keep the object after its worker, \
         delete the worker with --cascade=orphan)", note = OwnerNote(&.at.owner, .owner)
    )]
    OwnerReferenceRemoved { at: Subject, owner: String },

    /// An UPDATE rewrites a Pod reference, keeping its uid.
    #[error(
        "{at}: the update changes the ownerReference to pod '{owner}'{note} to ({}, {}, '{}') with \
         the same uid: a reference is the whole tuple and ownership cannot change, so keep the \
         reference as it was (apiVersion v1, kind Pod, name {owner})", Spelled(.api_version),
        Spelled(.kind), Shown(.name), note = OwnerNote(&.at.owner, .owner)
    )]
    OwnerReferenceChanged {
        at: Subject,
        owner: String,
        api_version: String,
        kind: String,
        name: String,
    },

    /// An UPDATE without the old object: nothing to compare ownership with.
    #[error(
        "{at}: the UPDATE review carries no oldObject, so the ownership of owner pod '{}' cannot be \
         compared: send the old object, as the API server does", Shown(.owner)
    )]
    MissingOldObject { at: Subject, owner: String },

    /// A CREATE or UPDATE review without the object itself.
    #[error(
        "{at}: the {operation} review carries no object, so its owner ({}) cannot be checked: send \
         the object, as the API server does", Shown(.owner)
    )]
    MissingObject {
        at: Subject,
        /// What the old object names as owner, if anything.
        owner: String,
        operation: String,
    },

    /// /validate: an owner label without the matching reference.
    #[error(
        "{at}: labelled with owner pod '{owner}' but has no ownerReference to it: add {{apiVersion: v1, \
         kind: Pod, name: {owner}, uid: {uid}, controller: false, blockOwnerDeletion: false}}, or let \
         ownerguard's mutating webhook add it"
    )]
    ReferenceMissing {
        at: Subject,
        owner: String,
        uid: String,
    },

    /// /validate: a Pod ownerReference with `blockOwnerDeletion: true`.
    #[error(
        "{at}: the ownerReference to pod '{owner}'{note} has blockOwnerDeletion: true, which needs \
         update on pods/finalizers: set blockOwnerDeletion to false{}",
        if *.labelled { ", or let ownerguard's mutating webhook set it" } else { "" },
        note = OwnerNote(&.at.owner, .owner)
    )]
    BlockingReference {
        at: Subject,
        owner: String,
        /// Whether the object carries the owner label, so that the mutating
        /// webhook sees it at all.
        labelled: bool,
    },

    /// /validate: an UPDATE leaves out the uid label (or name annotation)
    /// of a running owner.
    #[error(
        "{at}: the update removes {key} of owner pod '{owner}', which is running: keep it as it was, \
         or let ownerguard's mutating webhook restore it"
    )]
    OwnerLabelOmitted {
        at: Subject,
        owner: String,
        key: String,
    },
}

impl Denial {
    /// The HTTP-like status code of the denial: 400 for a malformed owner
    /// declaration or review, 503 when the owner could not be checked, 403
    /// for the policy itself.
    pub fn code(&self) -> u16 {
        match self {
            Self::InvalidOwnerName { .. }
            | Self::InvalidOwnerUid { .. }
            | Self::MissingOwnerUid { .. }
            | Self::SelfWithoutPodIdentity { .. }
            | Self::SelfOnCopiedLabels { .. }
            | Self::SelfInDefaultedJobLabels { .. }
            | Self::StrayOwnerAnnotation { .. }
            | Self::HalfClaim { .. }
            | Self::InvalidNamespace { .. }
            | Self::MalformedIdentity { .. }
            | Self::MalformedReference { .. }
            | Self::InvalidReferenceName { .. }
            | Self::InexactPodReference { .. }
            | Self::ContradictingReference { .. }
            | Self::ConflictingUid { .. }
            | Self::TooManyReferences { .. }
            | Self::TooManyEntries { .. }
            | Self::TemplateOwnerMismatch { .. }
            | Self::TemplateUidUnknown { .. }
            | Self::TemplatePodReference { .. }
            | Self::MissingOldObject { .. }
            | Self::MissingObject { .. } => 400,
            Self::LookupFailed { .. } => 503,
            Self::UidDisagreesWithRequester { .. }
            | Self::RequesterNotOwner { .. }
            | Self::RequesterAdoptsObject { .. }
            | Self::RequesterReleasesObject { .. }
            | Self::OwnerNotFound { .. }
            | Self::OwnerUidMismatch { .. }
            | Self::OwnerTerminating { .. }
            | Self::OwnerFinished { .. }
            | Self::ClusterScoped { .. }
            | Self::OwnerLabelChanged { .. }
            | Self::OwnerLabelAdded { .. }
            | Self::OwnerLabelRemoved { .. }
            | Self::OwnerReferenceRemoved { .. }
            | Self::OwnerReferenceChanged { .. }
            | Self::ReferenceMissing { .. }
            | Self::BlockingReference { .. }
            | Self::OwnerLabelOmitted { .. } => 403,
        }
    }

    /// The rule a denial is of, for metrics and audit annotations: its
    /// variant's name in kebab case (`owner-finished`). Stable: the
    /// dashboard and the alerts select on it.
    pub fn rule(&self) -> &'static str {
        match self {
            Self::InvalidOwnerName { .. } => "invalid-owner-name",
            Self::InvalidOwnerUid { .. } => "invalid-owner-uid",
            Self::MissingOwnerUid { .. } => "missing-owner-uid",
            Self::UidDisagreesWithRequester { .. } => "uid-disagrees-with-requester",
            Self::RequesterNotOwner { .. } => "requester-not-owner",
            Self::RequesterAdoptsObject { .. } => "requester-adopts-object",
            Self::RequesterReleasesObject { .. } => "requester-releases-object",
            Self::SelfWithoutPodIdentity { .. } => "self-without-pod-identity",
            Self::SelfOnCopiedLabels { .. } => "self-on-copied-labels",
            Self::SelfInDefaultedJobLabels { .. } => "self-in-defaulted-job-labels",
            Self::StrayOwnerAnnotation { .. } => "stray-owner-annotation",
            Self::HalfClaim { .. } => "half-claim",
            Self::OwnerNotFound { .. } => "owner-not-found",
            Self::OwnerUidMismatch { .. } => "owner-uid-mismatch",
            Self::OwnerTerminating { .. } => "owner-terminating",
            Self::OwnerFinished { .. } => "owner-finished",
            Self::LookupFailed { .. } => "lookup-failed",
            Self::ClusterScoped { .. } => "cluster-scoped",
            Self::InvalidNamespace { .. } => "invalid-namespace",
            Self::MalformedIdentity { .. } => "malformed-identity",
            Self::MalformedReference { .. } => "malformed-reference",
            Self::InvalidReferenceName { .. } => "invalid-reference-name",
            Self::InexactPodReference { .. } => "inexact-pod-reference",
            Self::ContradictingReference { .. } => "contradicting-reference",
            Self::ConflictingUid { .. } => "conflicting-uid",
            Self::TooManyReferences { .. } => "too-many-references",
            Self::TooManyEntries { .. } => "too-many-entries",
            Self::TemplateOwnerMismatch { .. } => "template-owner-mismatch",
            Self::TemplateUidUnknown { .. } => "template-uid-unknown",
            Self::TemplatePodReference { .. } => "template-pod-reference",
            Self::OwnerLabelChanged { .. } => "owner-label-changed",
            Self::OwnerLabelAdded { .. } => "owner-label-added",
            Self::OwnerLabelRemoved { .. } => "owner-label-removed",
            Self::OwnerReferenceRemoved { .. } => "owner-reference-removed",
            Self::OwnerReferenceChanged { .. } => "owner-reference-changed",
            Self::MissingOldObject { .. } => "missing-old-object",
            Self::MissingObject { .. } => "missing-object",
            Self::ReferenceMissing { .. } => "reference-missing",
            Self::BlockingReference { .. } => "blocking-reference",
            Self::OwnerLabelOmitted { .. } => "owner-label-omitted",
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

/// How an owner that is not the requester relates to it by name, for the
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameName {
    /// Another name: another worker.
    No,
    /// The requester's name under another uid: an earlier pod.
    EarlierPod,
    /// The requester's name with no uid recorded: which pod cannot be told.
    UidUnknown,
}

impl fmt::Display for SameName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::No => "",
            Self::EarlierPod => " (an earlier pod of that name)",
            Self::UidUnknown => {
                " (by name only: the object records no uid for it, so it cannot be told to be this pod)"
            }
        })
    }
}

/// A declared owner in a message, or that none is named.
struct OwnerShown<'a>(&'a Option<String>);

impl std::fmt::Display for OwnerShown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(owner) => write!(f, "'{}'", Shown(owner)),
            None => f.write_str("none named"),
        }
    }
}
