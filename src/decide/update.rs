//! UPDATE: ownership is set at creation (SPEC §3, "UPDATE" and
//! "Orphaning").
//!
//! - The owner labels may not be added or changed. What ownerguard added
//!   and an update merely leaves out (a `kubectl replace` of the original
//!   manifest) is put back by `/mutate` while the owner lives, checked
//!   live; the labels may go once no running owner holds the object.
//! - A Pod reference the old object had stays, whole and non-blocking, as
//!   long as its pod runs; once the pod is gone, has another uid or is
//!   being deleted, it may be removed (the garbage collector orphaning).
//!   The collector's own UPDATEs are never refused nor undone.
//! - A Pod reference the update adds is checked as on CREATE; and a pod
//!   adds one only to an object it owns already: no pod makes itself
//!   co-owner of another worker's object, nor adopts an orphaned one.

use std::collections::HashSet;

use crate::admission::{AdmissionRequest, ObjectMeta, OwnerReference};
use crate::decide::copies;
use crate::decide::denial::Denial;
use crate::decide::patch::MetadataPatch;
use crate::decide::resolve::Claim;
use crate::decide::resolve::{GARBAGE_COLLECTOR, OwnerLabels, label, reference_owners, references};
use crate::decide::resolve::{check_adoption, check_release, check_requester};
use crate::decide::subject::Subject;
use crate::k8s::names::is_pod_name;

use super::{
    Checks, Judge, LookupNeed, Policy, Unblock, WebhookKind, check_reference_count, cluster_scoped,
    first_declared_owner, merge_lookups, namespace_of, object_of, requester_of, templates,
};

use super::ownership::{
    Omitted, OwnerOfRecord, is_collectors_removal, keeps_owner_keys, keeps_pod_uid, label_changes,
    label_owner_name, owner_as_written, owners_of_record, tuple,
};

/// What an UPDATE leaves to the lookups.
#[derive(Debug)]
pub(super) struct Work<'a> {
    /// Pod references the update adds: each must be a running pod.
    claims: Vec<Claim>,
    /// The owner as templates labelled anew declare it: a running pod too.
    template_claims: Vec<Claim>,
    /// Settled already: references unblocked, templates completed.
    patch: MetadataPatch,
    warnings: Vec<String>,
    mutate: bool,
    /// The new object's metadata, for putting back what it left out.
    meta: ObjectMeta<'a>,
    /// The owner the old object's labels name.
    owner: Option<OwnerOfRecord>,
    /// The name the old object's owner label gives, even one no pod can
    /// have: the audit annotation names no other pod.
    label_owner: Option<String>,
    /// Pod references the update removes: allowed once their pod is gone.
    removed: Vec<Removed<'a>>,
    /// The owner label key, when the update removes the owner label.
    label_removed: Option<String>,
    /// The uid label or name annotation the update leaves out while
    /// keeping the owner label.
    omitted: Vec<Omitted>,
    /// What the requester check says of a pod that releases the object,
    /// once a removal stands (its pod gone, the owner not running).
    release: Result<Option<String>, Denial>,
    /// Whether the owner's liveness decides the labels: they are left out
    /// or removed while the owner held its reference.
    owner_judged: bool,
}

#[derive(Debug)]
struct Removed<'a> {
    reference: OwnerReference<'a>,
    /// It is the owner's reference, the owner label stays, and this is
    /// `/mutate`: put it back if the owner runs.
    restorable: bool,
}

pub(super) fn plan<'a>(
    request: &AdmissionRequest<'a>,
    webhook: WebhookKind,
    policy: &Policy,
) -> Result<Option<Checks<'a>>, Denial> {
    let labels = &policy.labels;
    // The collector removing references (orphaning, or stripping dangling
    // ones) is recognised before any other check, limits, namespace and
    // identity included (SPEC §3 rule 14): refusing it leaves the owner
    // stuck in Terminating, and an object may hold more references than
    // --max-pod-references (made before install, or before the limit was
    // lowered). It is never denied nor undone, whatever else the object
    // carries.
    if is_collectors_removal(request, labels) {
        return Ok(None);
    }
    if is_stale_write(request) {
        return Ok(None);
    }
    let (object, head) = object_of(request, labels)?;
    let meta = &head.metadata;
    let old = request.old_object.as_ref().map(|o| &o.metadata);
    if !labels.declared_in(meta) && !old.is_some_and(|old| labels.declared_in(old)) {
        return Ok(None);
    }
    let declared = Some(first_declared_owner(meta, labels))
        .filter(|owner| !owner.is_empty())
        .or_else(|| old.map(|old| first_declared_owner(old, labels)))
        .unwrap_or_default();
    let namespace = match namespace_of(request, meta, &object, &declared)? {
        Some(namespace) => namespace,
        None if labels.declared_in(meta) || keeps_pod_uid(old, meta, labels) => {
            return Err(cluster_scoped(&object, meta, labels, declared));
        }
        None => return Ok(None),
    };
    let at = Subject {
        object,
        namespace,
        owner: Some(declared.clone()).filter(|owner| !owner.is_empty()),
    };
    // A controller's copy of a Service's labels, updated as it syncs
    // (labels replaced by the Service's, an object made before the
    // Service reused, a mirrored slice rebuilt): judged as its create is,
    // never refused (rule 16).
    if copies::copy_of(request, meta) == Some(copies::Copy::Endpoints) {
        // A resync that keeps the owner keys and touches no reference
        // ownerguard judges (an address, a finalizer removed, the
        // Service's own reference) copies nothing anew: what the copy's
        // create or relabelling made stands, and a reference the collector
        // removed is not put back. The chart's match conditions do not
        // send it, and the answer must not depend on whether they do.
        if old.is_some_and(|old| resync_of_copy(old, meta, labels)) {
            return Ok(None);
        }
        return Ok(if webhook.mutates() {
            super::create::copy_plan(meta, at, webhook, policy)
        } else {
            None
        });
    }
    if old.is_some_and(|old| copies::keeps_references(request, meta, old)) {
        return Ok(None);
    }
    let Some(old) = old else {
        return Err(Denial::MissingOldObject {
            at,
            owner: declared,
        });
    };
    // The limit bounds the work of what an update changes: one that keeps
    // the references as they were (a metadata edit, the storage version
    // migrator's no-op patch of every object) is judged whatever their
    // number, as the collector's removals are.
    if references(meta) != references(old) {
        check_reference_count(meta, &at, policy)?;
    }
    let requester = requester_of(request, &at, &declared)?;
    let mutate = webhook.mutates();
    // Any other update of the collector's own service account (it makes
    // none) is judged, but what it removes is never put back. The
    // controller manager's shared user is every controller: outside the
    // collector's shape (recognised above) its removals are judged as
    // anyone's, or any controller could swap a running owner's reference.
    let garbage_collector = request.user_info.username == GARBAGE_COLLECTOR;

    let written = owner_as_written(old, labels);
    // Looked up, restored, checked against: only an owner whose name can
    // be a pod's.
    let owner = written.clone().filter(|o| is_pod_name(&o.name));
    // The uid of an owner a pod can be: an empty or invalid owner label
    // names nobody, and a uid label added to it changes it.
    let owner_uid = owner.as_ref().map(|o| o.uid.as_str());
    let (label_removed, omitted) = label_changes(old, meta, &at, labels, owner_uid)?;
    let owner_label_kept = label(meta, &labels.pod).is_some() && label_removed.is_none();

    let mut patch = MetadataPatch::default();
    let unblock = Unblock {
        at: &at,
        webhook,
        labelled: owner_label_kept,
        relaxed: policy.relaxed.blocking_reference,
    };
    let mut warnings = Vec::new();
    let (old_references, new_references) = (references(old), references(meta));
    // The pod the old object's owner label names, by name (`Self`: its
    // name annotation), whether or not a uid is recorded for it.
    let label_owner = label_owner_name(old, labels);
    // The statefulset controller on a claim (its retention references,
    // below), and the claim's name they are read against.
    let retention = requester.is_none() && is_statefulset_controller(request) && is_claim(request);
    let claim_name = meta.name.as_deref().unwrap_or_default();
    let names_the_owner_otherwise = |reference: &OwnerReference| {
        label_owner == Some(reference.name.as_str())
            && written
                .as_ref()
                .is_none_or(|o| o.uid != reference.uid.as_str())
    };
    // Which removed references stay judged (kept while their pod runs):
    // the owner's, when the old object has it; every one otherwise. A Pod
    // reference beside the owner's may go: the object still dies with its
    // owner, and Kubernetes' controllers remove such references of their
    // own (the statefulset controller's claim retention takes its pod's
    // reference back when the pod returns to the set).
    let owner_referenced = label_owner.is_some_and(|name| {
        old_references
            .iter()
            .any(|r| r.is_pod() && r.name == name && !r.uid.is_empty())
    });
    let protected = |reference: &OwnerReference| {
        !owner_referenced || label_owner == Some(reference.name.as_str())
    };
    // A removal that stands at once (not the owner's reference).
    let mut released = false;
    // Indexed by uid: an object may carry thousands of references, and
    // comparing every pair would let one UPDATE hold a core for seconds.
    let mut new_by_uid: super::Map<&str, Vec<usize>> = super::Map::default();
    for (index, reference) in new_references.iter().enumerate() {
        new_by_uid.entry(&reference.uid).or_default().push(index);
    }
    // A Pod reference without uid (from before ownerguard: the API server
    // validates references after admission) identifies nothing to keep.
    let tracked = |r: &&OwnerReference| r.is_pod() && !r.uid.is_empty();
    let old_pod_uids: super::Set<&str> = old_references
        .iter()
        .filter(tracked)
        .map(|r| r.uid.as_str())
        .collect();
    // By tuple: a reference whose controller or blockOwnerDeletion flag
    // changed is the same reference.
    let old_entries: HashSet<(&str, &str, &str, &str)> = old_references.iter().map(tuple).collect();

    // The Pod references the old object had: kept whole and non-blocking,
    // or removed (judged once their pods are looked up).
    let mut removed = Vec::new();
    let mut seen = HashSet::new();
    for before in old_references.iter().filter(tracked) {
        if !seen.insert(before.uid.as_str()) {
            continue;
        }
        let under_uid = new_by_uid
            .get(before.uid.as_str())
            .map_or(&[][..], Vec::as_slice);
        // An entry under this uid that the old object had whole (a
        // contradiction from before ownerguard, kept as it was) is no
        // rewrite of the reference; any other that is not the reference is.
        let is_the_reference = |after: &OwnerReference| after.is_pod() && after.name == before.name;
        if let Some(&index) = under_uid.iter().find(|&&index| {
            let after = &new_references[index];
            let kept_from_before = old_entries.contains(&tuple(after));
            !is_the_reference(after) && !kept_from_before
        }) {
            let after = &new_references[index];
            return Err(reference_changed(at, before, after));
        }
        let kept: Vec<usize> = under_uid
            .iter()
            .copied()
            .filter(|&index| is_the_reference(&new_references[index]))
            .collect();
        // The statefulset controller takes its retention reference back
        // when the pod returns to the set (scaled up again before it was
        // deleted): the pod runs, and refusing would stall the set.
        // Whatever its flags (the controller scrubs every reference to its
        // pod, and versions before 1.32 wrote them without `controller`),
        // never the owner's own reference.
        let retention_taken_back = retention
            && is_taken_back_reference(claim_name, before)
            && label_owner != Some(before.name.as_str());
        if kept.is_empty() {
            if !garbage_collector && !retention_taken_back && protected(before) {
                let owners = owner
                    .as_ref()
                    .is_some_and(|o| o.uid == before.uid && o.name == before.name);
                removed.push(Removed {
                    reference: before.clone(),
                    restorable: mutate && owners && owner_label_kept,
                });
            } else if !garbage_collector {
                released = true;
            }
            continue;
        }
        for index in kept {
            let after = &new_references[index];
            if after.block_owner_deletion == Some(true) {
                unblock.blocking(index, &before.name, &mut patch, &mut warnings)?;
            }
        }
    }

    // A reference that meant a pod but was not exactly v1/Pod (made before
    // ownerguard): kept as it was, or removed; rewritten under its uid it
    // is a change of ownership like any other (403).
    let legacy = old_references
        .iter()
        .filter(|r| r.means_pod() && !r.is_pod() && !r.uid.is_empty())
        .filter(|r| !old_pod_uids.contains(r.uid.as_str()));
    for before in legacy {
        let rewritten = new_by_uid
            .get(before.uid.as_str())
            .into_iter()
            .flatten()
            .map(|&index| &new_references[index])
            .find(|after| {
                (&after.api_version, &after.kind, &after.name)
                    != (&before.api_version, &before.kind, &before.name)
                    && !old_entries.contains(&tuple(after))
            });
        if let Some(after) = rewritten {
            return Err(reference_changed(at, before, after));
        }
    }

    // Pod references the update adds (or rewrites from an entry that was
    // not a Pod reference): checked as on CREATE, against the owner of
    // record too (a reference to it under another uid contradicts it).
    let unchanged = |reference: &OwnerReference| {
        old_pod_uids.contains(reference.uid.as_str()) || old_entries.contains(&tuple(reference))
    };
    // The owner of record as written, even under a name no pod can have:
    // the old labels still say whose uid that is, so an added entry
    // carrying it under another tuple contradicts it (rule 6).
    let record = written.as_ref().map(|o| Claim {
        name: o.name.clone(),
        uid: o.uid.clone(),
        origin: crate::decide::resolve::Origin::Label,
    });
    let mut claims = reference_owners(meta, &at, record.as_ref(), &declared, unchanged)?;
    // A controller's own reference on a claim (the statefulset
    // controller's, to the pod whose claim goes with it) names a pod the
    // controller is condemning, from its informer's cache: being deleted,
    // finished, already gone, or gone and recreated under another uid by
    // the time the update arrives. It is admitted whatever the pod's state,
    // with no lookup: a refusal stalls the set's sync, and the reference
    // can only ask the collector for what the set's retention policy
    // asks: with the worker's reference kept beside it, a dangling one is
    // removed by the collector; with no other reference the claim goes, as
    // the set's policy asks and as it would without ownerguard. Made
    // non-blocking below, as every Pod reference not otherwise handled. A
    // reference naming the claim's own owner under another uid than the
    // one recorded is no retention: it is judged as any added reference.
    if retention {
        claims.retain(|claim| {
            !matches!(claim.origin, crate::decide::resolve::Origin::Reference(index)
                if is_retention_reference(claim_name, &new_references[index])
                    && !names_the_owner_otherwise(&new_references[index]))
        });
    }
    for claim in &claims {
        warnings.extend(check_requester(
            &claim.name,
            &at,
            requester.as_ref(),
            policy.requester_policy(webhook),
        )?);
    }
    // Every reference the update adds names the requester itself by now
    // (or the requester check is off or warns): it must own the object
    // already. So must a pod whose update releases it.
    let owners = owners_of_record(old, labels, written.as_ref());
    warnings.extend(check_adoption(
        &owners,
        &claims,
        &at,
        requester.as_ref(),
        policy.adoption_policy(webhook),
    )?);
    // Whom the release concerns: the owner the labels name, beside whose
    // reference the others may go; every pod referenced when no label
    // names one.
    let labelled_owner = label_owner.is_some() && !owners.is_empty();
    let release_owners = if labelled_owner {
        &owners[..1]
    } else {
        &owners[..]
    };
    let mut release = check_release(
        release_owners,
        &at,
        requester.as_ref(),
        policy.release_policy(webhook),
    );
    // Labels that go with no running owner to ask about (none known, or
    // one that was never referenced) go at once.
    let owner_judged = owner
        .as_ref()
        .is_some_and(|o| !omitted.is_empty() || (label_removed.is_some() && o.referenced));
    if (label_removed.is_some() || !omitted.is_empty()) && !owner_judged {
        released = true;
    }
    if released {
        warnings.extend(std::mem::replace(&mut release, Ok(None))?);
    }
    for claim in &claims {
        let crate::decide::resolve::Origin::Reference(index) = claim.origin else {
            continue;
        };
        if new_references[index].block_owner_deletion == Some(true) {
            unblock.blocking(index, &claim.name, &mut patch, &mut warnings)?;
        }
    }

    // Every other Pod reference the update keeps (one without a uid, or
    // spelt `apps/v1`/`pod`, from before ownerguard) stays non-blocking too: /mutate unblocks it;
    // /validate denies it only when the update made it blocking (one that
    // was blocking already is legacy, and the API server's own validation
    // refuses a reference without a uid after admission anyway).
    let handled: HashSet<usize> = claims
        .iter()
        .filter_map(|claim| match claim.origin {
            crate::decide::resolve::Origin::Reference(index) => Some(index),
            crate::decide::resolve::Origin::Label => None,
        })
        .chain(
            new_references
                .iter()
                .enumerate()
                .filter(|(_, r)| old_pod_uids.contains(r.uid.as_str()))
                .map(|(index, _)| index),
        )
        .collect();
    // By tuple, as a set: a scan of the old references for each new one
    // would be quadratic in an old object's references (uncapped when
    // they are unchanged).
    let old_blocking: HashSet<(&str, &str, &str, &str)> = old_references
        .iter()
        .filter(|before| before.block_owner_deletion == Some(true))
        .map(tuple)
        .collect();
    for (index, reference) in new_references.iter().enumerate() {
        let was_blocking = || old_blocking.contains(&tuple(reference));
        if reference.means_pod()
            && reference.block_owner_deletion == Some(true)
            && !handled.contains(&index)
            && (mutate || !was_blocking())
        {
            unblock.blocking(index, &reference.name, &mut patch, &mut warnings)?;
        }
    }

    // Templates are completed for an owner a pod can be only; for one the
    // object names without a uid (labelled before ownerguard), they are
    // checked, and a template labelled anew must give the uid itself.
    let template_owner = match record.as_ref() {
        Some(owner) => Some(templates::TemplateOwner {
            name: &owner.name,
            uid: Some(&owner.uid),
        }),
        None => label_owner.map(|name| templates::TemplateOwner { name, uid: None }),
    }
    .filter(|owner| is_pod_name(owner.name));
    // What templates labelled anew declare must be a running pod, as on
    // CREATE: else the controller's objects made from them are refused.
    let mut template_claims = Vec::new();
    if owner_label_kept && let Some(owner) = template_owner {
        let declared = templates::complete(
            head,
            request.old_object.as_deref(),
            &at,
            owner,
            labels,
            webhook,
            &mut patch,
        )?;
        template_claims.extend(declared.into_iter().map(|uid| Claim {
            name: owner.name.to_string(),
            uid,
            origin: crate::decide::resolve::Origin::Label,
        }));
    }

    let mut lookups: Vec<LookupNeed> = claims
        .iter()
        .chain(&template_claims)
        .map(|claim| LookupNeed {
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            fresh: false,
        })
        .collect();
    // A pod whose name cannot be a pod name cannot be running: its
    // reference may go without asking.
    lookups.extend(
        removed
            .iter()
            .filter(|r| is_pod_name(&r.reference.name))
            .map(|r| LookupNeed {
                name: r.reference.name.to_string(),
                uid: r.reference.uid.to_string(),
                fresh: r.restorable,
            }),
    );
    if let Some(owner) = owner.as_ref().filter(|_| owner_judged) {
        lookups.push(LookupNeed {
            name: owner.name.clone(),
            uid: owner.uid.clone(),
            fresh: mutate && !omitted.is_empty(),
        });
    }
    if lookups.is_empty() && patch.is_empty() && warnings.is_empty() {
        return Ok(None);
    }
    Ok(Some(Checks {
        at,
        webhook,
        lookups: merge_lookups(lookups),
        work: super::Work::Update(Box::new(Work {
            claims,
            template_claims,
            patch,
            warnings,
            mutate,
            meta: meta.clone(),
            label_owner: written
                .as_ref()
                .map(|o| o.name.clone())
                .or_else(|| label(old, &labels.pod).map(str::to_string)),
            owner,
            removed,
            label_removed,
            omitted,
            release,
            owner_judged,
        })),
    }))
}

pub(super) fn decide(work: Work<'_>, judge: &mut Judge<'_>) -> Result<MetadataPatch, Denial> {
    judge.require_owners(&work.claims, work.warnings)?;
    judge.require_owners(&work.template_claims, Vec::new())?;
    let mut patch = work.patch;
    // Whether a removal stands (a reference whose pod is gone, labels of an
    // owner that no longer runs): then a pod must own what it releases.
    let mut released = false;
    for removed in &work.removed {
        let reference = &removed.reference;
        if !is_pod_name(&reference.name) || !judge.is_live(&reference.name, &reference.uid)? {
            released = true;
            continue;
        }
        if !removed.restorable {
            return Err(Denial::OwnerReferenceRemoved {
                at: judge.at.clone(),
                owner: reference.name.to_string(),
            });
        }
        patch.restore_owner_reference(&work.meta, reference);
        judge.warnings.push(format!(
            "ownerReference to running owner pod '{}' restored: the update left it out",
            reference.name
        ));
    }
    // The audit annotation names the object's owner, not a pod a reference
    // added by the update names.
    if let Some(name) = &work.label_owner
        && judge.owner.as_ref().is_some_and(|o| o.name() != name)
    {
        judge.owner = None;
    }
    let owner_runs = match &work.owner {
        Some(owner) => work.owner_judged && judge.is_live(&owner.name, &owner.uid)?,
        None => false,
    };
    let labels_go = work.label_removed.is_some() || !work.omitted.is_empty();
    if released || (labels_go && !owner_runs) {
        judge.warnings.extend(work.release?);
    }
    let Some(owner) = work.owner.as_ref().filter(|_| owner_runs) else {
        return Ok(patch);
    };
    if let Some(key) = &work.label_removed {
        return Err(Denial::OwnerLabelRemoved {
            at: judge.at.clone(),
            owner: owner.name.clone(),
            key: key.clone(),
        });
    }
    for omitted in &work.omitted {
        if !work.mutate {
            return Err(Denial::OwnerLabelOmitted {
                at: judge.at.clone(),
                owner: owner.name.clone(),
                key: omitted.key.clone(),
            });
        }
        if omitted.annotation {
            patch.add_annotation(&work.meta, &omitted.key, &omitted.value);
        } else {
            patch.add_label(&work.meta, &omitted.key, &omitted.value);
        }
        judge.warnings.push(format!(
            "{} of running owner pod '{}' restored: the update left it out",
            omitted.key, owner.name
        ));
    }
    Ok(patch)
}

/// Whether a copying controller's update keeps the owner keys, had no
/// reference meaning a pod, and keeps every entry under the owner's uid.
fn resync_of_copy(old: &ObjectMeta, meta: &ObjectMeta, labels: &OwnerLabels) -> bool {
    let owner_uid = label(old, &labels.uid).filter(|uid| !uid.is_empty());
    let under_owner_uid = |r: &&OwnerReference| owner_uid == Some(r.uid.as_str());
    keeps_owner_keys(old, meta, labels)
        && !references(old).iter().any(OwnerReference::means_pod)
        && references(old)
            .iter()
            .filter(under_owner_uid)
            .eq(references(meta).iter().filter(under_owner_uid))
}

/// The denial of a reference the update renames or re-kinds under its uid.
fn reference_changed(at: Subject, before: &OwnerReference, after: &OwnerReference) -> Denial {
    Denial::OwnerReferenceChanged {
        at,
        owner: before.name.to_string(),
        api_version: after.api_version.to_string(),
        kind: after.kind.to_string(),
        name: after.name.to_string(),
    }
}

/// Whether `reference` is the statefulset controller's retention
/// reference on claim `claim_name`: a controller Pod reference to the pod
/// the claim is named after (the set names a pod's claim
/// `<template>-<pod>`).
fn is_retention_reference(claim_name: &str, reference: &OwnerReference) -> bool {
    reference.controller == Some(true) && is_taken_back_reference(claim_name, reference)
}

/// Whether `reference`, removed from claim `claim_name`, is one the
/// statefulset controller takes back: a Pod reference to the pod the claim
/// is named after, whatever its flags.
fn is_taken_back_reference(claim_name: &str, reference: &OwnerReference) -> bool {
    reference.is_pod()
        && claim_name
            .strip_suffix(reference.name.as_str())
            .is_some_and(|rest| rest.len() > 1 && rest.ends_with('-'))
}

/// Whether the request is for a PersistentVolumeClaim (core group).
fn is_claim(request: &AdmissionRequest) -> bool {
    request.kind.group.is_empty() && request.kind.kind == "PersistentVolumeClaim"
}

/// Whether the request comes from the statefulset controller: its own
/// service account, or the controller manager's user that every controller
/// shares without per-controller credentials.
fn is_statefulset_controller(request: &AdmissionRequest) -> bool {
    let user = request.user_info.username.as_str();
    user == "system:serviceaccount:kube-system:statefulset-controller"
        || user == crate::decide::resolve::CONTROLLER_MANAGER
}

/// Groups kube-apiserver serves from its own storage, where an UPDATE
/// written against another resourceVersion than the stored one ends in a
/// conflict (custom resources too, should one be approved into these
/// groups: the same generic store). An aggregated API server may store
/// what it likes: its groups are not here.
const STORED_BY_THE_API_SERVER: &[&str] = &["", "apps", "batch", "discovery.k8s.io", "policy"];

/// An UPDATE written against an older version of the object: its
/// `resourceVersion` is set (not `0`, which asks for an unconditional
/// update) and is not the stored object's. The API server runs the
/// mutating webhooks before it compares them, then answers with a conflict
/// and stores nothing (validating webhooks never see it): a controller
/// writing from a stale cache (the endpointslice controller, while a
/// namespace is torn down, after the collector changed the slice) then
/// retries on the current object. Judging the stale copy could only refuse
/// a write that cannot happen. Compared as the API server does: decimal
/// digits only, as a 64-bit number (`0123` is `123`, not stale).
fn is_stale_write(request: &AdmissionRequest) -> bool {
    fn version(text: Option<&crate::admission::Text>) -> Option<u64> {
        let text = text?.as_str();
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    }
    let (Some(object), Some(old)) = (&request.object, &request.old_object) else {
        return false;
    };
    // The version too: an aggregated API server may be registered for
    // another version of these groups' names (`v2.apps`), and store as it
    // likes; each of them serves `v1` alone.
    if request.operation.as_str() != "UPDATE"
        || !STORED_BY_THE_API_SERVER.contains(&request.resource.group.as_str())
        || request.resource.version.as_str() != "v1"
    {
        return false;
    }
    match (
        version(object.metadata.resource_version.as_ref()),
        version(old.metadata.resource_version.as_ref()),
    ) {
        (Some(new), Some(stored)) => new != 0 && new != stored,
        _ => false,
    }
}
