//! CREATE: the owner the labels declare, every Pod reference as a whole
//! tuple, the templates (rule 12); then the patch that completes them
//! (SPEC §3, "CREATE").

use crate::admission::{AdmissionRequest, ObjectMeta};
use crate::decide::copies::{self, Copy};
use crate::decide::denial::Denial;
use crate::decide::patch::MetadataPatch;
use crate::decide::resolve::Claim;
use crate::decide::resolve::check_requester;
use crate::decide::resolve::{
    Origin, annotation, label, label_owner, reference_owners, references,
};
use crate::decide::subject::Subject;

use super::{
    Checks, Judge, LookupNeed, Policy, Unblock, WebhookKind, check_reference_count, cluster_scoped,
    first_declared_owner, merge_lookups, namespace_of, object_of, requester_of, templates,
};

/// What a CREATE leaves to the lookups: every declared owner must be
/// there; the patch is settled already.
#[derive(Debug)]
pub(super) struct Work {
    /// The label's owner first, then the Pod references.
    claims: Vec<Claim>,
    patch: MetadataPatch,
    warnings: Vec<String>,
    /// A controller's copy of a Service's labels: the patch holds when the
    /// owner resolves, and is dropped (never a denial) when it does not.
    copy: bool,
}

pub(super) fn plan<'a>(
    request: &AdmissionRequest<'a>,
    webhook: WebhookKind,
    policy: &Policy,
) -> Result<Option<Checks<'a>>, Denial> {
    let (object, head) = object_of(request, &policy.labels)?;
    let meta = &head.metadata;
    let labels = &policy.labels;
    if !labels.declared_in(meta) {
        return Ok(None);
    }
    // A copy of another object's own labels by a Kubernetes component
    // (rule 16) is never refused: its refusal would repeat for ever.
    let copy = copies::copy_of(request, meta);
    match copy {
        Some(Copy::MirrorPod) => return Ok(None),
        // Only /mutate completes a copy; /validate lets every copy be.
        Some(Copy::Endpoints) if !webhook.mutates() => return Ok(None),
        _ => {}
    }
    let declared = first_declared_owner(meta, labels);
    let Some(namespace) = namespace_of(request, meta, &object, &declared)? else {
        return Err(cluster_scoped(&object, meta, labels, declared));
    };
    let mut at = Subject {
        object,
        namespace,
        owner: Some(declared.clone()).filter(|owner| !owner.is_empty()),
    };
    if copy == Some(Copy::Endpoints) {
        return Ok(copy_plan(meta, at, webhook, policy));
    }
    check_reference_count(meta, &at, policy)?;
    let requester = requester_of(request, &at, &declared)?;
    let requester = requester.as_ref();

    let owner = label_owner(meta, &at, requester, policy.requester_policy(webhook))?;
    if let Some(owner) = owner.as_ref().filter(|o| o.by_self)
        && copies::labels_are_copied(request)
    {
        return Err(Denial::SelfOnCopiedLabels {
            at,
            key: labels.pod.clone(),
            owner: owner.claim.name.clone(),
        });
    }
    if let Some(owner) = &owner {
        // `Self` resolved to the pod's name.
        at.owner = Some(owner.claim.name.clone());
    }
    let mut claims: Vec<Claim> = owner.iter().map(|o| o.claim.clone()).collect();
    claims.extend(reference_owners(
        meta,
        &at,
        owner.as_ref().map(|o| &o.claim),
        &declared,
        |_| false,
    )?);
    let mut warnings = Vec::new();
    for claim in &claims {
        warnings.extend(check_requester(
            &claim.name,
            &at,
            requester,
            policy.requester_policy(webhook),
        )?);
    }

    let mutate = webhook.mutates();
    let mut patch = MetadataPatch::default();
    if let Some(owner) = &owner {
        let (name, uid) = (&owner.claim.name, &owner.claim.uid);
        // Every entry with the owner's uid is the owner's exact reference
        // (reference_owners denied any other): it only needs to exist.
        if !references(meta).iter().any(|r| &r.uid == uid) {
            if !mutate {
                return Err(Denial::ReferenceMissing {
                    at,
                    owner: name.clone(),
                    uid: uid.clone(),
                });
            }
            patch.add_owner_reference(meta, name, uid);
        }
        if mutate && label(meta, &labels.uid).is_none() {
            patch.add_label(meta, &labels.uid, uid);
        }
        if mutate && owner.by_self && annotation(meta, &labels.pod_name).is_none() {
            patch.add_annotation(meta, &labels.pod_name, name);
        }
        let template_owner = templates::TemplateOwner {
            name: &owner.claim.name,
            uid: Some(&owner.claim.uid),
        };
        // The owner is looked up as the object's: what the templates
        // declare is checked against it already.
        templates::complete(head, None, &at, template_owner, labels, webhook, &mut patch)?;
    }

    // Every Pod reference non-blocking: a `true` is set to false with a
    // warning; the owner's own entry gets an explicit `false`.
    let owner_uid = owner.as_ref().map(|o| o.claim.uid.as_str());
    let unblock = Unblock {
        at: &at,
        webhook,
        labelled: owner.is_some(),
        relaxed: policy.relaxed.blocking_reference,
    };
    for claim in &claims {
        let Origin::Reference(index) = claim.origin else {
            continue;
        };
        match references(meta)[index].block_owner_deletion {
            Some(true) => unblock.blocking(index, &claim.name, &mut patch, &mut warnings)?,
            None if mutate && owner_uid == Some(claim.uid.as_str()) => {
                patch.unblock_owner_reference(index);
            }
            _ => {}
        }
    }

    let lookups = merge_lookups(claims.iter().map(|claim| LookupNeed {
        name: claim.name.clone(),
        uid: claim.uid.clone(),
        fresh: false,
    }));
    Ok(Some(Checks {
        at,
        webhook,
        lookups,
        work: super::Work::Create(Work {
            claims,
            patch,
            warnings,
            copy: false,
        }),
    }))
}

/// A controller's copy of a Service's labels (rule 16): the owner the
/// labels name gets its reference if the collector can resolve it (there
/// with that uid, running, being deleted or finished: the Service goes
/// with it, the copy with them). Labels that name no pod (`Self` without
/// its annotation, no uid label), and a reference already there, leave it
/// unchanged; so does every other question of ownership, which is the
/// Service's, judged when it was made.
pub(super) fn copy_plan<'a>(
    meta: &ObjectMeta<'_>,
    at: Subject,
    webhook: WebhookKind,
    policy: &Policy,
) -> Option<Checks<'a>> {
    let owner = label_owner(meta, &at, None, policy.requester_policy(webhook))
        .ok()
        .flatten()?;
    let (name, uid) = (&owner.claim.name, &owner.claim.uid);
    if references(meta).iter().any(|r| &r.uid == uid) {
        return None;
    }
    let mut patch = MetadataPatch::default();
    patch.add_owner_reference(meta, name, uid);
    Some(Checks {
        at,
        webhook,
        lookups: vec![LookupNeed {
            name: name.clone(),
            uid: uid.clone(),
            fresh: false,
        }],
        work: super::Work::Create(Work {
            claims: vec![owner.claim],
            patch,
            warnings: Vec::new(),
            copy: true,
        }),
    })
}

pub(super) fn decide(work: Work, judge: &mut Judge<'_>) -> Result<MetadataPatch, Denial> {
    if work.copy {
        let resolvable = work
            .claims
            .iter()
            .all(|claim| judge.require_resolvable(claim).is_ok());
        return Ok(if resolvable {
            work.patch
        } else {
            MetadataPatch::default()
        });
    }
    judge.require_owners(&work.claims, work.warnings)?;
    Ok(work.patch)
}
