//! What an existing object's ownership is worth, by the webhook's own
//! rules: the object is decided as a CREATE would be decided now ([`decide`]),
//! as if its owner pod sent it, against the pods listed, and the answer
//! read back into a [`State`]. One implementation: a rule the webhook
//! learns, the audit knows.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::admission::{AdmissionRequest, EXTRA_POD_NAME, EXTRA_POD_UID};
use crate::decide::{self, Denial, OwnerLabels, Policy, REQUESTING_POD, WebhookKind};
use crate::owner::{Inventory, Lookup, Source};

/// The class of an object, as `audit` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Owned as the webhook would own it now.
    Ok,
    /// Labelled with an owner that is gone (or has another uid) or has
    /// finished, and no reference: the collector will never delete it.
    Leaked,
    /// The owner exists but has finished, and the object references it:
    /// it lives until the pod object is deleted.
    OwnerFinished,
    /// The owner runs, but the object has no reference to it (made before
    /// ownerguard): `--fix` adds it.
    MissingReference,
    /// A Pod reference to an owner that is gone: the collector deletes the
    /// object; nothing to do.
    Dangling,
    /// A labelled object with a blocking Pod reference: `--fix` unblocks it.
    Blocking,
    /// An entry that carries an owner's uid under another kind or name, or
    /// a kind that means a pod but is not `Pod`: the collector cannot
    /// resolve it.
    Contradicting,
    /// Owner labels the webhook would refuse.
    Malformed,
}

impl State {
    pub const ALL: [Self; 8] = [
        Self::Ok,
        Self::Leaked,
        Self::OwnerFinished,
        Self::MissingReference,
        Self::Dangling,
        Self::Blocking,
        Self::Contradicting,
        Self::Malformed,
    ];

    /// The class's name in the table, the JSON and the metric's `state`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Leaked => "leaked",
            Self::OwnerFinished => "owner-finished",
            Self::MissingReference => "missing-reference",
            Self::Dangling => "dangling",
            Self::Blocking => "blocking",
            Self::Contradicting => "contradicting",
            Self::Malformed => "malformed",
        }
    }

    /// Whether it is something to act on (`audit` exits 1).
    pub fn is_finding(self) -> bool {
        !matches!(self, Self::Ok | Self::Dangling)
    }

    /// Whether `--fix` repairs it, with the patch `/mutate` would make.
    pub fn is_fixable(self) -> bool {
        matches!(self, Self::MissingReference | Self::Blocking)
    }
}

/// What is known of one object.
#[derive(Debug, Clone)]
pub struct Finding {
    pub state: State,
    /// The owner the object names: its owner label's pod, else the pod of
    /// its first Pod reference.
    pub owner: String,
    /// Since the object was created.
    pub age: Option<Duration>,
    /// Why, in a sentence: the webhook's own denial where it made one.
    pub detail: String,
    /// The JSON Patch `/mutate` would make (fixable states only).
    pub patch: Option<Value>,
}

/// What `audit` reads of the object's resource.
#[derive(Debug, Clone, Copy)]
pub struct Kind<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub plural: &'a str,
}

/// Classify an object whose metadata is `meta`. `None` when it carries
/// neither an owner label nor a Pod reference: not ownerguard's.
///
/// `pods` holds the pods of its namespace, as listed; `now` is the Unix
/// time of the run.
pub fn classify(
    meta: &ObjectMeta,
    kind: Kind<'_>,
    pods: &Inventory,
    policy: &Policy,
    now: i64,
) -> Option<Finding> {
    let labels = &policy.labels;
    let owner_label = meta.labels.as_ref().and_then(|l| l.get(&labels.pod));
    let references = meta.owner_references.as_deref().unwrap_or_default();
    let pod_reference = references.iter().find(|r| means_pod(&r.kind));
    if owner_label.is_none() && pod_reference.is_none() {
        return None;
    }
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let owner = owner_name(meta, labels)
        .or_else(|| pod_reference.map(|r| r.name.clone()))
        .unwrap_or_default();
    // As if the owner pod itself sent the object now: a name alone gets
    // its uid from the pod that runs under it, as on a real CREATE.
    let requester = pods.get(namespace, &owner).map(|pod| (&owner, &pod.uid));
    let request_text = request_of(meta, kind, requester);
    let request: AdmissionRequest = match crate::admission::json::from_str(&request_text) {
        Ok(request) => request,
        // Written by serde_json from metadata the API server served, so it
        // decodes; were it ever refused, the object is told as a finding,
        // never passed over as one with no owner.
        Err(error) => {
            return Some(Finding {
                state: State::Malformed,
                owner,
                age: age(meta, now),
                detail: format!(
                    "its metadata cannot be judged as the webhook reads a request ({error}): inspect it by hand"
                ),
                patch: None,
            });
        }
    };
    // Who made the object is not the audit's question.
    let policy = Policy {
        requester_check: decide::RequesterCheck::Off,
        fail_open: false,
        ..policy.clone()
    };
    let webhook = if owner_label.is_some() {
        WebhookKind::Mutate
    } else {
        // Only Pod references: judged as the collector resolves them,
        // blocking or not (the cluster-wide webhook's reading).
        WebhookKind::ValidateAll
    };
    let verdict = match decide::plan(&request, webhook, &policy) {
        Ok(None) => return None,
        Ok(Some(checks)) => {
            let lookups: crate::decide::Lookups = checks
                .lookups()
                .iter()
                .map(|need| {
                    let lookup = Lookup {
                        source: Source::Api,
                        outcome: Ok(pods.get(namespace, &need.name).cloned()),
                    };
                    (need.name.clone(), lookup)
                })
                .collect();
            decide::decide(checks, &lookups, &policy)
        }
        Err(denial) => Err(denial),
    };
    // The collector's reading: which exact Pod references resolve to a
    // running pod, which to a finished one. An object lives as long as one
    // of its owners does, whatever its labels say.
    let exact: Vec<_> = references
        .iter()
        .filter(|r| is_exact_pod(&r.api_version, &r.kind) && !r.uid.is_empty())
        .collect();
    let resolves = |r: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
        pods.get(namespace, &r.name)
            .filter(|pod| pod.uid == r.uid && !pod.terminating)
    };
    let running_owner = exact
        .iter()
        .filter(|r| resolves(r).is_some_and(|pod| pod.finished.is_none()))
        .map(|r| r.name.clone())
        .next();
    let finished_owner = exact
        .iter()
        .filter(|r| resolves(r).is_some_and(|pod| pod.finished.is_some()))
        .map(|r| r.name.clone())
        .next();
    let referenced = exact.iter().any(|r| r.name == owner);
    let blocking = references
        .iter()
        .any(|r| means_pod(&r.kind) && r.block_owner_deletion == Some(true));
    let uid_labelled = meta
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(&labels.uid));
    let (state, detail, patch) = match verdict {
        Ok(allowed) if allowed.patch.is_empty() => (State::Ok, String::new(), None),
        Ok(allowed) => {
            let patch = serde_json::from_slice(&allowed.patch.to_json()).ok();
            if webhook == WebhookKind::Mutate && added_reference(patch.as_ref()) {
                if uid_labelled {
                    let detail =
                        format!("owner pod '{owner}' runs, but the object has no reference to it");
                    (State::MissingReference, detail, patch)
                } else {
                    // A name alone proves no ownership: the pod that runs
                    // under it may be a later one (a StatefulSet's pod
                    // recreated). Not fixed: the webhook would refuse the
                    // uid label added on UPDATE, and rightly.
                    let detail = format!(
                        "labelled by name only, no reference: a pod '{owner}' runs, but nothing says it is the one that made this object; if it is, add its reference by hand"
                    );
                    (State::MissingReference, detail, None)
                }
            } else if blocking {
                let detail = format!(
                    "a Pod reference has blockOwnerDeletion: true (owner pod '{owner}' runs)"
                );
                (State::Blocking, detail, patch)
            } else {
                // Only the uid label or an explicit `false` to complete:
                // the reference holds.
                (State::Ok, String::new(), None)
            }
        }
        Err(Denial::SelfWithoutPodIdentity { .. }) if running_owner.is_none() => {
            // `Self` that names no pod: the references alone say who owns it.
            match (&finished_owner, exact.is_empty()) {
                (Some(name), _) => (
                    State::OwnerFinished,
                    format!("labelled Self without a name; its owner pod '{name}' has finished"),
                    None,
                ),
                (None, false) => (
                    State::Dangling,
                    "labelled Self without a name; every Pod reference is to a pod that is gone"
                        .to_string(),
                    None,
                ),
                (None, true) => (
                    State::Leaked,
                    "labelled Self without a name and no reference: nothing will ever delete it"
                        .to_string(),
                    None,
                ),
            }
        }
        Err(denial) => {
            let state = state_of(&denial, referenced || webhook == WebhookKind::ValidateAll);
            match (state, &running_owner, &finished_owner) {
                // Gone by its labels, but another of its owners runs: it
                // dies with that one (never a leak to delete by hand).
                (State::Leaked | State::Dangling | State::OwnerFinished, Some(name), _) => (
                    State::Ok,
                    format!("{denial}; it is collected with its running owner pod '{name}'"),
                    None,
                ),
                (State::Leaked | State::Dangling, None, Some(name)) => (
                    State::OwnerFinished,
                    format!("{denial}; it is kept by its finished owner pod '{name}'"),
                    None,
                ),
                (state, ..) => (state, denial.to_string(), None),
            }
        }
    };
    // Allowed under the cluster-wide reading (a finished pod resolves), but
    // no owner runs: it lives until the finished pod object is deleted.
    let (state, detail) = match (state, &running_owner, &finished_owner) {
        (State::Ok, None, Some(name)) if webhook == WebhookKind::ValidateAll => (
            State::OwnerFinished,
            format!(
                "owner pod '{name}' has finished: what it owns lives until the pod object is deleted"
            ),
        ),
        (state, ..) => (state, detail),
    };
    Some(Finding {
        state,
        owner,
        age: age(meta, now),
        detail,
        patch,
    })
}

/// The state a denial puts the object in; `referenced`: it holds a Pod
/// reference to the owner, which the collector follows.
///
/// Every denial is read here, by an exhaustive match: one added to the
/// webhook must be given its class.
fn state_of(denial: &Denial, referenced: bool) -> State {
    let gone = if referenced {
        State::Dangling
    } else {
        State::Leaked
    };
    match denial {
        // The owner is gone, replaced or going: the collector takes what
        // references it; nothing else will ever take the rest.
        Denial::OwnerNotFound { .. }
        | Denial::OwnerUidMismatch { .. }
        | Denial::UidDisagreesWithRequester { .. }
        | Denial::OwnerTerminating { .. }
        // No uid label and no pod of that name to take it from.
        | Denial::MissingOwnerUid { .. } => gone,
        // Finished: what references it lives until the pod object goes
        // (the reaper's work); what does not will outlive even that.
        Denial::OwnerFinished { .. } if referenced => State::OwnerFinished,
        Denial::OwnerFinished { .. } => State::Leaked,
        Denial::InexactPodReference { .. }
        | Denial::ContradictingReference { .. }
        | Denial::ConflictingUid { .. } => State::Contradicting,
        Denial::InvalidOwnerName { .. }
        | Denial::InvalidOwnerUid { .. }
        | Denial::SelfWithoutPodIdentity { .. }
        | Denial::SelfOnCopiedLabels { .. }
        | Denial::SelfInDefaultedJobLabels { .. }
        | Denial::StrayOwnerAnnotation { .. }
        | Denial::HalfClaim { .. }
        | Denial::ClusterScoped { .. }
        | Denial::InvalidNamespace { .. }
        | Denial::MalformedIdentity { .. }
        | Denial::MalformedReference { .. }
        | Denial::InvalidReferenceName { .. }
        | Denial::TooManyReferences { .. }
        | Denial::TooManyEntries { .. }
        | Denial::TemplateOwnerMismatch { .. }
        | Denial::TemplateUidUnknown { .. }
        | Denial::TemplatePodReference { .. } => State::Malformed,
        // Not made for a CREATE decided from the pods listed (the requester
        // check is off, every lookup answered): read as the labels being
        // wrong rather than lose the object.
        Denial::RequesterNotOwner { .. }
        | Denial::RequesterAdoptsObject { .. }
        | Denial::RequesterReleasesObject { .. }
        | Denial::LookupFailed { .. }
        | Denial::OwnerLabelChanged { .. }
        | Denial::OwnerLabelAdded { .. }
        | Denial::OwnerLabelRemoved { .. }
        | Denial::OwnerReferenceRemoved { .. }
        | Denial::OwnerReferenceChanged { .. }
        | Denial::MissingOldObject { .. }
        | Denial::MissingObject { .. }
        | Denial::ReferenceMissing { .. }
        | Denial::BlockingReference { .. }
        | Denial::OwnerLabelOmitted { .. } => State::Malformed,
    }
}

/// Whether `patch` adds an ownerReference (rather than only unblocking one
/// or completing the uid label).
fn added_reference(patch: Option<&Value>) -> bool {
    patch.and_then(Value::as_array).is_some_and(|ops| {
        ops.iter().any(|op| {
            op["op"] == "add"
                && op["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/metadata/ownerReferences"))
                && (op["value"].is_object() || op["value"].is_array())
        })
    })
}

/// The pod the owner label names (`Self`: its name annotation).
fn owner_name(meta: &ObjectMeta, labels: &OwnerLabels) -> Option<String> {
    let value = meta.labels.as_ref()?.get(&labels.pod)?;
    if value == REQUESTING_POD {
        return meta.annotations.as_ref()?.get(&labels.pod_name).cloned();
    }
    Some(value.clone())
}

/// Whether a reference is exactly the collector's `v1`/`Pod`: the
/// garbage collector parses `/v1` as the core group's `v1` too.
fn is_exact_pod(api_version: &str, kind: &str) -> bool {
    matches!(api_version, "v1" | "/v1") && kind == "Pod"
}

/// Whether a reference's kind means a pod, as the webhook reads it.
fn means_pod(kind: &str) -> bool {
    crate::admission::OwnerReference {
        kind: kind.into(),
        ..Default::default()
    }
    .means_pod()
}

/// The CREATE the webhook would have been sent for this object, from
/// `requester` when its owner pod runs, as the JSON text the decoder reads.
fn request_of(meta: &ObjectMeta, kind: Kind<'_>, requester: Option<(&String, &String)>) -> String {
    let namespace = meta.namespace.clone().unwrap_or_default();
    let api_version = if kind.group.is_empty() {
        kind.version.to_string()
    } else {
        format!("{}/{}", kind.group, kind.version)
    };
    let user_info = match requester {
        Some((name, uid)) => json!({
            "username": format!("system:serviceaccount:{namespace}:ownerguard-audit"),
            "extra": {EXTRA_POD_NAME: [name], EXTRA_POD_UID: [uid]},
        }),
        None => json!({"username": "ownerguard-audit"}),
    };
    let request = json!({
        "uid": "ownerguard-audit",
        "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "resource": {"group": kind.group, "version": kind.version, "resource": kind.plural},
        "namespace": namespace,
        "name": meta.name,
        "operation": "CREATE",
        "userInfo": user_info,
        "object": {"apiVersion": api_version, "kind": kind.kind, "metadata": meta},
    });
    // Built from a valid object's metadata: it decodes (a failure is
    // told as a malformed finding by `classify`).
    request.to_string()
}

/// How long ago the object was created.
fn age(meta: &ObjectMeta, now: i64) -> Option<Duration> {
    let created = meta.creation_timestamp.as_ref()?.0.as_second();
    u64::try_from(now - created).ok().map(Duration::from_secs)
}
