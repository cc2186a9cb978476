//! Who an object declares as its owner: the owner labels, the Pod
//! `ownerReferences` a client set itself, and the identity of the pod that
//! sends the request. Pure: no I/O.
//!
//! Every name that comes out of here as a [`Claim`] is a valid pod name:
//! what is looked up cannot carry anything an API path would read.

use crate::admission::{ObjectMeta, OwnerReference, Text};
use crate::decide::denial::{Denial, SameName};
use crate::decide::few::FirstSeen;
use crate::decide::requester::{Delegate, Requester, RequesterCheck};
use crate::decide::subject::{Shown, Subject};
use crate::k8s::names::{is_pod_name, is_uid};

/// The owner-pod label value that means "the pod that sends this request",
/// for a worker whose name cannot be a label value (over 63 characters).
/// It is not a pod name (pod names are lowercase), so it can never be
/// mistaken for one.
pub const REQUESTING_POD: &str = "Self";

/// The user the garbage collector's controller runs as with
/// kube-controller-manager's `--use-service-account-credentials` (kubeadm
/// sets it): its UPDATEs remove the references of deleted and orphaning
/// owners, and unblock references in a foreground deletion.
pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";

/// The controller manager's own user: without
/// `--use-service-account-credentials` (the flag's default) every
/// controller, the collector included, calls the API server as this user
/// (the conventional name of the controller manager's client certificate).
pub const CONTROLLER_MANAGER: &str = crate::admission::SHARED_CONTROLLER_USER;

/// Whether `username` is one the garbage collector can have: its own
/// service account, or the controller manager's user it shares with every
/// controller. Only the shape of an update (it removes or unblocks
/// references, nothing else) tells the collector's apart; any
/// controller's update of that shape is as harmless as the collector's.
pub fn is_garbage_collector(username: &str) -> bool {
    username == GARBAGE_COLLECTOR || username == CONTROLLER_MANAGER
}

/// The owner keys under `--key-prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerLabels {
    /// `--key-prefix`.
    pub prefix: String,
    /// `<prefix>/owner-pod`: the name of the owner pod, or
    /// [`REQUESTING_POD`]. Opts the object in.
    pub pod: String,
    /// `<prefix>/owner-uid`: the uid of that pod.
    pub uid: String,
    /// The annotation `<prefix>/owner-pod-name`: the owner's full name when
    /// the label is [`REQUESTING_POD`]. ownerguard writes it, so that the
    /// object (and what a controller makes from its template) names its
    /// owner whoever sends the next request.
    pub pod_name: String,
}

impl OwnerLabels {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
            pod: format!("{prefix}/owner-pod"),
            uid: format!("{prefix}/owner-uid"),
            pod_name: format!("{prefix}/owner-pod-name"),
        }
    }

    /// Whether `meta` declares anything at all: an owner key, or a
    /// reference that means a pod.
    pub fn declared_in(&self, meta: &ObjectMeta) -> bool {
        label(meta, &self.pod).is_some()
            || label(meta, &self.uid).is_some()
            || annotation(meta, &self.pod_name).is_some()
            || references(meta).iter().any(OwnerReference::means_pod)
    }
}

impl Default for OwnerLabels {
    fn default() -> Self {
        Self::new("ownerguard.io")
    }
}

/// Where an owner was declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The owner label.
    Label,
    /// The Pod `ownerReference` at this index.
    Reference(usize),
}

/// A declared owner: a pod name and the uid it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub name: String,
    pub uid: String,
    pub origin: Origin,
}

/// The owner the labels declare, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelOwner {
    pub claim: Claim,
    /// The label is [`REQUESTING_POD`]: the name lives in the annotation.
    pub by_self: bool,
}

/// The owner the labels declare, with its uid resolved; `None` when the
/// object has no owner label.
///
/// The name is the label's value, or, for [`REQUESTING_POD`], the name
/// annotation or else the requesting pod. The uid comes from the uid
/// label, or else from the requester when the requester is the owner pod
/// itself. A requester that declares another pod is told so first (under
/// `enforce`), before anything about the uid.
///
/// # Errors
///
/// The [`Denial`] of the first rule the labels break.
pub fn label_owner(
    meta: &ObjectMeta,
    at: &Subject,
    requester: Option<&Requester>,
    policy: RequesterPolicy<'_>,
) -> Result<Option<LabelOwner>, Denial> {
    let labels = policy.labels;
    let annotated = annotation(meta, &labels.pod_name);
    let Some(value) = label(meta, &labels.pod) else {
        if let Some(key) = [
            label(meta, &labels.uid).map(|_| &labels.uid),
            annotated.map(|_| &labels.pod_name),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(Denial::HalfClaim {
                at: at.clone(),
                key: key.clone(),
                pod_key: labels.pod.clone(),
            });
        }
        return Ok(None);
    };
    let invalid_name = |what, key: &str, value: &str| Denial::InvalidOwnerName {
        at: at.clone(),
        what,
        key: key.to_string(),
        pod_key: labels.pod.clone(),
        value: value.to_string(),
    };
    let by_self = value == REQUESTING_POD;
    let name = match (by_self, annotated, requester) {
        (true, Some(name), _) if is_pod_name(name) => name,
        (true, Some(name), _) => return Err(invalid_name("annotation", &labels.pod_name, name)),
        (true, None, Some(requester)) => requester.name,
        (true, None, None) => {
            return Err(Denial::SelfWithoutPodIdentity {
                at: at.clone(),
                key: labels.pod.clone(),
            });
        }
        (false, _, _) if !is_pod_name(value) => {
            return Err(invalid_name("label", &labels.pod, value));
        }
        // Beside a name, the annotation may restate it (a ReplicaSet takes
        // its Deployment's annotations and its template's labels: `Self`
        // on one and the name on the other are one owner), never name
        // another pod.
        (false, Some(annotated), _) if annotated != value => {
            return Err(Denial::StrayOwnerAnnotation {
                at: at.clone(),
                owner: annotated.to_string(),
                label: value.to_string(),
                key: labels.pod_name.clone(),
                pod_key: labels.pod.clone(),
            });
        }
        (false, _, _) => value,
    };
    let claim = |uid: &str| Claim {
        name: name.to_string(),
        uid: uid.to_string(),
        origin: Origin::Label,
    };
    // The requester check first: a worker that names another pod needs to
    // hear that, not that a uid is missing.
    if policy.mode == RequesterCheck::Enforce {
        check_requester(name, at, requester, policy)?;
    }
    let from_owner = requester.filter(|requester| requester.name == name);
    let uid = match (label(meta, &labels.uid), from_owner) {
        (Some(uid), _) if !is_uid(uid) => {
            return Err(Denial::InvalidOwnerUid {
                at: at.clone(),
                owner: name.to_string(),
                key: labels.uid.clone(),
                value: uid.to_string(),
            });
        }
        (Some(uid), Some(requester)) if uid != requester.uid => {
            return Err(Denial::UidDisagreesWithRequester {
                at: at.clone(),
                owner: name.to_string(),
                key: labels.uid.clone(),
                declared: uid.to_string(),
            });
        }
        (Some(uid), _) => uid,
        (None, Some(requester)) => requester.uid,
        (None, None) => {
            return Err(Denial::MissingOwnerUid {
                at: at.clone(),
                owner: name.to_string(),
                key: labels.uid.clone(),
            });
        }
    };
    Ok(Some(LabelOwner {
        claim: claim(uid),
        by_self,
    }))
}

/// The owners the Pod `ownerReferences` declare, in order, each checked as
/// a whole tuple (SPEC §3 rules 6 and 7), skipping the entries `skip`
/// accepts (those an UPDATE already had). `owner` is the label's owner;
/// `declared` what the object names as owner, for messages.
///
/// # Errors
///
/// - [`Denial::InexactPodReference`]: a reference that means a pod but is
///   not exactly `apiVersion: v1`, `kind: Pod`;
/// - [`Denial::MalformedReference`], [`Denial::InvalidReferenceName`]: a
///   Pod reference without name or uid, or whose name is not a pod name;
/// - [`Denial::ConflictingUid`]: a Pod reference naming the label's owner
///   or another reference's pod under another uid;
/// - [`Denial::ContradictingReference`]: an entry with the uid of the
///   label's owner or of a Pod reference, but not that same reference.
pub fn reference_owners(
    meta: &ObjectMeta,
    at: &Subject,
    owner: Option<&Claim>,
    declared: &str,
    skip: impl Fn(&OwnerReference) -> bool,
) -> Result<Vec<Claim>, Denial> {
    let mut claims = Vec::new();
    for (index, reference) in references(meta).iter().enumerate() {
        if skip(reference) || !reference.means_pod() {
            continue;
        }
        // Messages name the object's owner: the label's (as resolved, or
        // as written), else this pod.
        let object_owner = owner
            .map(|o| o.name.as_str())
            .or(Some(declared))
            .filter(|name| !name.is_empty())
            .or(Some(reference.name.as_str()).filter(|name| !name.is_empty()))
            .unwrap_or("(unnamed)")
            .to_string();
        if !reference.is_pod() {
            return Err(Denial::InexactPodReference {
                at: at.clone(),
                owner: object_owner,
                reference: reference.name.to_string(),
                index,
                api_version: reference.api_version.to_string(),
                kind: reference.kind.to_string(),
            });
        }
        let missing = if reference.name.is_empty() {
            Some("name")
        } else if reference.uid.is_empty() {
            Some("uid")
        } else {
            None
        };
        if let Some(field) = missing {
            return Err(Denial::MalformedReference {
                at: at.clone(),
                owner: object_owner,
                index,
                field,
            });
        }
        if !is_pod_name(&reference.name) {
            return Err(Denial::InvalidReferenceName {
                at: at.clone(),
                owner: object_owner,
                reference: reference.name.to_string(),
                index,
            });
        }
        claims.push(Claim {
            name: reference.name.to_string(),
            uid: reference.uid.to_string(),
            origin: Origin::Reference(index),
        });
    }
    // One name, one uid: a Pod reference naming the label's owner, or the
    // pod of another reference, under another uid contradicts it (a pod
    // replaced under the same name is another pod).
    let mut uids_by_name: FirstSeen<&str, &str> = FirstSeen::new();
    if let Some(owner) = owner {
        uids_by_name.first_or_insert(&owner.name, &owner.uid);
    }
    for claim in &claims {
        match uids_by_name.first_or_insert(&claim.name, &claim.uid) {
            Some(uid) if uid != claim.uid => {
                let Origin::Reference(index) = claim.origin else {
                    continue;
                };
                return Err(Denial::ConflictingUid {
                    at: at.clone(),
                    owner: claim.name.clone(),
                    index,
                });
            }
            _ => {}
        }
    }
    // One uid, one pod: every entry carrying the uid of the label's owner
    // or of a Pod reference must be that very reference.
    let mut pods_by_uid: FirstSeen<&str, &str> = FirstSeen::new();
    if let Some(owner) = owner {
        pods_by_uid.first_or_insert(&owner.uid, &owner.name);
    }
    // An entry the update kept (`skip`) is judged only against the Pod
    // references it adds: one added under the uid of a kept entry of
    // another tuple contradicts it as much as on CREATE.
    let mut added_uids: FirstSeen<&str, ()> = FirstSeen::new();
    for claim in &claims {
        pods_by_uid.first_or_insert(&claim.uid, &claim.name);
        added_uids.first_or_insert(&claim.uid, ());
    }
    for (index, reference) in references(meta).iter().enumerate() {
        if skip(reference) && added_uids.get(reference.uid.as_str()).is_none() {
            continue;
        }
        if let Some(name) = pods_by_uid.get(reference.uid.as_str())
            && !(reference.is_pod() && reference.name == name)
        {
            return Err(Denial::ContradictingReference {
                at: at.clone(),
                owner: name.to_string(),
                index,
                api_version: reference.api_version.to_string(),
                kind: reference.kind.to_string(),
                name: reference.name.to_string(),
            });
        }
    }
    Ok(claims)
}

/// The value of label `key`, if set.
pub fn label<'a>(meta: &'a ObjectMeta<'_>, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(Text::as_str)
}

/// The value of annotation `key`, if set.
pub fn annotation<'a>(meta: &'a ObjectMeta<'_>, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(Text::as_str)
}

/// The object's `ownerReferences`, empty when absent.
pub fn references<'r, 'a>(meta: &'r ObjectMeta<'a>) -> &'r [OwnerReference<'a>] {
    meta.owner_references.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests;

/// Who the requester check compares: the settings it needs.
#[derive(Debug, Clone, Copy)]
pub struct RequesterPolicy<'a> {
    pub mode: RequesterCheck,
    pub delegates: &'a [Delegate],
    pub labels: &'a OwnerLabels,
}

/// Compare a pod-bound requester with `owner`, the name of a declared
/// owner.
///
/// Returns the warning to give under `--requester-check warn`.
///
/// # Errors
///
/// [`Denial::RequesterNotOwner`] under `enforce`, unless the requester's
/// service account is a delegate.
pub fn check_requester(
    owner: &str,
    at: &Subject,
    requester: Option<&Requester>,
    policy: RequesterPolicy<'_>,
) -> Result<Option<String>, Denial> {
    let Some(requester) = requester else {
        return Ok(None);
    };
    if policy.mode == RequesterCheck::Off
        || requester.name == owner
        || requester.is_delegate(policy.delegates)
    {
        return Ok(None);
    }
    match policy.mode {
        RequesterCheck::Warn => Ok(Some(format!(
            "request from pod '{}' declares pod '{}' as owner",
            requester.name, owner
        ))),
        _ => Err(Denial::RequesterNotOwner {
            at: at.clone(),
            owner: owner.to_string(),
            requester: requester.name.to_string(),
            service_account: format!("{}/{}", requester.namespace, requester.service_account),
            key: policy.labels.pod.clone(),
        }),
    }
}

/// A pod that owns an object, as the object names it: the name, and the
/// uid when the object gives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedOwner {
    pub name: String,
    pub uid: Option<String>,
}

/// Compare a pod-bound requester that adds or changes Pod references
/// (`added`, not empty) with the pods that own the object already
/// (`owners`: its owner label's, as written, and its Pod references'),
/// SPEC §3 UPDATE: no pod makes itself co-owner of another worker's
/// object, nor adopts an orphaned one (an orphan's owner is gone, but the
/// object still names it). The requester is one of the owners only when
/// it has that owner's name and the uid the object gives it ([`owned_by`]).
///
/// Returns the warning to give under `--requester-check warn`.
///
/// # Errors
///
/// [`Denial::RequesterAdoptsObject`] under `enforce`, unless the
/// requester's service account is a delegate.
pub fn check_adoption(
    owners: &[NamedOwner],
    added: &[Claim],
    at: &Subject,
    requester: Option<&Requester>,
    policy: RequesterPolicy<'_>,
) -> Result<Option<String>, Denial> {
    let Some(first) = added.first() else {
        return Ok(None);
    };
    let Some((requester, owner)) = another_owner(owners, requester, policy) else {
        return Ok(None);
    };
    match policy.mode {
        RequesterCheck::Warn => Ok(Some(format!(
            "request from pod '{}' adds an ownerReference to an object owned by pod '{}'",
            requester.name,
            Shown(&owner.name)
        ))),
        _ => Err(Denial::RequesterAdoptsObject {
            at: at.clone(),
            owner: owner.name.clone(),
            requester: requester.name.to_string(),
            reference: first.name.clone(),
            same_name: same_name(owner, requester),
            service_account: format!("{}/{}", requester.namespace, requester.service_account),
        }),
    }
}

/// Compare a pod-bound requester whose update releases the object (removes
/// a Pod reference, or an owner label or the uid label, and the removal
/// stands: its pod is gone, or is not the owner) with the pods that own it
/// (`owners`), SPEC §3 UPDATE: no pod orphans another worker's object, nor
/// strips the owner labels of an orphan so that it can be adopted by name.
/// The same comparison as [`check_adoption`].
///
/// Returns the warning to give under `--requester-check warn`.
///
/// # Errors
///
/// [`Denial::RequesterReleasesObject`] under `enforce`, unless the
/// requester's service account is a delegate.
pub fn check_release(
    owners: &[NamedOwner],
    at: &Subject,
    requester: Option<&Requester>,
    policy: RequesterPolicy<'_>,
) -> Result<Option<String>, Denial> {
    let Some((requester, owner)) = another_owner(owners, requester, policy) else {
        return Ok(None);
    };
    match policy.mode {
        RequesterCheck::Warn => Ok(Some(format!(
            "request from pod '{}' releases an object owned by pod '{}'",
            requester.name,
            Shown(&owner.name)
        ))),
        _ => Err(Denial::RequesterReleasesObject {
            at: at.clone(),
            owner: owner.name.clone(),
            requester: requester.name.to_string(),
            same_name: same_name(owner, requester),
            service_account: format!("{}/{}", requester.namespace, requester.service_account),
        }),
    }
}

/// The requester (pod-bound, compared: the check on, the requester no
/// delegate) and the first of `owners` that is not it.
fn another_owner<'r, 'o>(
    owners: &'o [NamedOwner],
    requester: Option<&'r Requester<'r>>,
    policy: RequesterPolicy<'_>,
) -> Option<(&'r Requester<'r>, &'o NamedOwner)> {
    let requester = requester?;
    if policy.mode == RequesterCheck::Off || requester.is_delegate(policy.delegates) {
        return None;
    }
    let owner = owners.iter().find(|owner| !owned_by(owner, requester))?;
    Some((requester, owner))
}

/// Whether `owner` is `requester`: the same name and the uid the object
/// records for it. A new pod of the same name is another worker, and an
/// object that records no uid for its owner (labelled by name only before
/// ownerguard, or whose uid label was removed) proves no ownership to a
/// pod of that name: the pod that made it may be long gone.
fn owned_by(owner: &NamedOwner, requester: &Requester) -> bool {
    owner.name == requester.name && owner.uid.as_deref() == Some(requester.uid)
}

/// How `owner`, not `requester`, relates to it by name, for the message.
fn same_name(owner: &NamedOwner, requester: &Requester) -> SameName {
    match (&owner.uid, owner.name == requester.name) {
        (_, false) => SameName::No,
        (Some(_), true) => SameName::EarlierPod,
        (None, true) => SameName::UidUnknown,
    }
}
