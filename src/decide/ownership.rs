//! Ownership as the old object of an UPDATE wrote it: its owner of record
//! (the owner label's pod and uid, its Pod references), and what the
//! update changes of the owner keys.

use std::collections::HashSet;

use crate::admission::{AdmissionRequest, ObjectMeta, OwnerReference};
use crate::decide::denial::Denial;
use crate::decide::resolve::NamedOwner;
use crate::decide::resolve::{
    CONTROLLER_MANAGER, OwnerLabels, REQUESTING_POD, annotation, is_garbage_collector, label,
    references,
};
use crate::decide::subject::{Shown, Subject};

/// The owner of the old object, by its labels.
#[derive(Debug, Clone)]
pub(super) struct OwnerOfRecord {
    pub(super) name: String,
    pub(super) uid: String,
    /// The old object had the exact reference to it.
    pub(super) referenced: bool,
}

#[derive(Debug)]
pub(super) struct Omitted {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) annotation: bool,
}

/// The name the owner label of `meta` gives (`Self`: its name annotation).
pub(super) fn label_owner_name<'m>(meta: &'m ObjectMeta, labels: &OwnerLabels) -> Option<&'m str> {
    match label(meta, &labels.pod)? {
        REQUESTING_POD => annotation(meta, &labels.pod_name),
        name => Some(name),
    }
    .filter(|name| !name.is_empty())
}

/// Whether the new object keeps, under any apiVersion, kind or name, the
/// uid of a pod the old object named (by a Pod reference or beside the
/// owner label): the entry still claims that pod.
pub(super) fn keeps_pod_uid(
    old: Option<&ObjectMeta>,
    meta: &ObjectMeta,
    labels: &OwnerLabels,
) -> bool {
    let Some(old) = old else {
        return false;
    };
    let uid_label = label(old, &labels.pod)
        .and(label(old, &labels.uid))
        .filter(|uid| !uid.is_empty());
    let pod_uids: super::Set<&str> = references(old)
        .iter()
        .filter(|r| r.means_pod() && !r.uid.is_empty())
        .map(|r| r.uid.as_str())
        .chain(uid_label)
        .collect();
    references(meta)
        .iter()
        .any(|r| pod_uids.contains(r.uid.as_str()))
}

/// What identifies a reference: apiVersion, kind, name and uid.
pub(super) fn tuple<'r>(reference: &'r OwnerReference<'_>) -> (&'r str, &'r str, &'r str, &'r str) {
    (
        &reference.api_version,
        &reference.kind,
        &reference.name,
        &reference.uid,
    )
}

/// Whether `request` is the garbage collector's own UPDATE that only
/// removes references, or unblocks them (SPEC §3 rules 14 and 16): the
/// collector's orphaning and dangling-reference PATCHes, and the one of a
/// foreground deletion that sets `blockOwnerDeletion: false` on an item's
/// references, under either identity the collector can have.
pub(super) fn is_collectors_removal(request: &AdmissionRequest, labels: &OwnerLabels) -> bool {
    match (&request.object, &request.old_object) {
        (Some(new), Some(old)) => {
            is_garbage_collector(&request.user_info.username)
                && keeps_owner_keys(&old.metadata, &new.metadata, labels)
                // The collector patches `ownerReferences` and nothing else,
                // but another mutating webhook may add to its patch (an
                // annotation stamped on every update): under its own
                // service account that is still its update. Under the
                // controller manager's shared user, every controller's, an
                // update that also changes labels, annotations or a
                // template is another controller's, judged as anyone's.
                && (request.user_info.username != CONTROLLER_MANAGER
                    || match request.only_references_changed {
                        // Read from the whole body where it was decoded.
                        Some(only) => only,
                        None => {
                            old.metadata.labels == new.metadata.labels
                                && old.metadata.annotations == new.metadata.annotations
                                && old.templates() == new.templates()
                        }
                    })
                && {
                    let before: HashSet<&OwnerReference> =
                        references(&old.metadata).iter().collect();
                    references(&new.metadata).iter().all(|kept| {
                        // Unblocked: true (or, for a custom resource's JSON
                        // merge patch, unset) become false.
                        before.contains(kept)
                            || (kept.block_owner_deletion == Some(false)
                                && [Some(true), None].into_iter().any(|was| {
                                    before.contains(&OwnerReference {
                                        block_owner_deletion: was,
                                        ..kept.clone()
                                    })
                                }))
                    })
                }
        }
        _ => false,
    }
}

/// Whether the update keeps the owner labels and the name annotation.
pub(super) fn keeps_owner_keys(old: &ObjectMeta, meta: &ObjectMeta, labels: &OwnerLabels) -> bool {
    label(old, &labels.pod) == label(meta, &labels.pod)
        && label(old, &labels.uid) == label(meta, &labels.uid)
        && annotation(old, &labels.pod_name) == annotation(meta, &labels.pod_name)
}

/// Compare the owner keys of the old and new objects.
///
/// Returns the owner label's key when the update removes it, and what the
/// update leaves out while keeping the owner label.
///
/// # Errors
///
/// [`Denial::OwnerLabelAdded`], [`Denial::OwnerLabelChanged`], or
/// [`Denial::HalfClaim`] when the owner label goes and the uid label stays.
pub(super) fn label_changes(
    old: &ObjectMeta,
    meta: &ObjectMeta,
    at: &Subject,
    labels: &OwnerLabels,
    owner_uid: Option<&str>,
) -> Result<(Option<String>, Vec<Omitted>), Denial> {
    let shown = |v: Option<&str>| v.map_or("(none)".to_string(), |v| format!("'{}'", Shown(v)));
    let (pod_before, pod_after) = (label(old, &labels.pod), label(meta, &labels.pod));
    let owner = pod_before.or(pod_after).unwrap_or_default().to_string();
    let label_removed = match (pod_before, pod_after) {
        (None, Some(value)) => {
            return Err(Denial::OwnerLabelAdded {
                at: at.clone(),
                owner: value.to_string(),
                key: labels.pod.clone(),
            });
        }
        (Some(before), Some(after)) if before != after => {
            return Err(Denial::OwnerLabelChanged {
                at: at.clone(),
                owner,
                key: format!("label {}", labels.pod),
                old: shown(pod_before),
                new: shown(pod_after),
            });
        }
        (Some(_), None) => Some(labels.pod.clone()),
        _ => None,
    };
    let mut omitted = Vec::new();
    let keys = [
        (
            &labels.uid,
            label(old, &labels.uid),
            label(meta, &labels.uid),
            false,
        ),
        (
            &labels.pod_name,
            annotation(old, &labels.pod_name),
            annotation(meta, &labels.pod_name),
            true,
        ),
    ];
    for (key, written, after, is_annotation) in keys {
        // An empty value the old object had (from before ownerguard) says
        // nothing: it may go. One the update writes is a value like any
        // other: setting the uid label to '' changes it.
        let before = written.filter(|value| !value.is_empty());
        match (before, after) {
            _ if written == after => {}
            (None, None) => {}
            (Some(value), None) if pod_after.is_some() => omitted.push(Omitted {
                key: key.clone(),
                value: value.to_string(),
                annotation: is_annotation,
            }),
            (Some(_), None) => {}
            // The uid label of an object that had only the owner's
            // reference: it says what the reference said, no change.
            (None, Some(value)) if !is_annotation && owner_uid == Some(value) => {}
            // The name annotation restating the owner label's name (what
            // /mutate adds when a pod template of the object says `Self`):
            // the same owner, no change.
            (None, Some(value))
                if is_annotation
                    && value != REQUESTING_POD
                    && pod_before == pod_after
                    && pod_after == Some(value) => {}
            _ => {
                let what = if is_annotation { "annotation" } else { "label" };
                // The uid the object had is its owner's, which this
                // requester need not know: a message never reveals it
                // (SPEC §3 "Messages"). The name annotation holds a name,
                // which the owner label shows anyway.
                let old = match before {
                    Some(_) if !is_annotation => "its value at creation".to_string(),
                    _ => shown(before),
                };
                return Err(Denial::OwnerLabelChanged {
                    at: at.clone(),
                    owner,
                    key: format!("{what} {key}"),
                    old,
                    new: shown(after),
                });
            }
        }
        // Removing the owner label but keeping the uid label names no
        // owner. (The name annotation left behind is inert: it only
        // completes `Self`.)
        if pod_after.is_none() && !is_annotation && label(meta, key).is_some() {
            return Err(Denial::HalfClaim {
                at: at.clone(),
                key: key.clone(),
                pod_key: labels.pod.clone(),
            });
        }
    }
    Ok((label_removed, omitted))
}

/// The pods that own the old object, as it was written: the one its owner
/// label names (`Self`: its name annotation, or nobody known), with the
/// uid its labels give it, and every pod its Pod references name, with
/// theirs. Whether they live does not matter: an orphan still belongs to
/// the worker it was made for.
pub(super) fn owners_of_record(
    old: &ObjectMeta,
    labels: &OwnerLabels,
    written: Option<&OwnerOfRecord>,
) -> Vec<NamedOwner> {
    let by_label = label(old, &labels.pod)
        .map(|value| match value {
            REQUESTING_POD => annotation(old, &labels.pod_name).unwrap_or(REQUESTING_POD),
            name => name,
        })
        .filter(|name| !name.is_empty())
        .map(|name| NamedOwner {
            name: name.to_string(),
            uid: written.filter(|w| w.name == name).map(|w| w.uid.clone()),
        });
    let by_reference = references(old)
        .iter()
        .filter(|r| r.means_pod() && !r.name.is_empty())
        .map(|r| NamedOwner {
            name: r.name.to_string(),
            uid: Some(r.uid.to_string()).filter(|uid| !uid.is_empty()),
        });
    by_label.into_iter().chain(by_reference).collect()
}

/// The owner the old object's labels name, as written, when they name one
/// with a uid (from the uid label, or else from its one reference to that
/// pod).
pub(super) fn owner_as_written(old: &ObjectMeta, labels: &OwnerLabels) -> Option<OwnerOfRecord> {
    let value = label(old, &labels.pod)?;
    let name = if value == REQUESTING_POD {
        annotation(old, &labels.pod_name)?
    } else {
        value
    };
    let to_owner = || {
        references(old)
            .iter()
            .filter(move |r| r.is_pod() && r.name == name && !r.uid.is_empty())
    };
    // An empty uid label (from before ownerguard) says nothing.
    let uid = match label(old, &labels.uid).filter(|uid| !uid.is_empty()) {
        Some(uid) => uid,
        None => {
            let mut uids = to_owner().map(|r| r.uid.as_str());
            let uid = uids.next()?;
            uids.all(|other| other == uid).then_some(uid)?
        }
    };
    Some(OwnerOfRecord {
        name: name.to_string(),
        uid: uid.to_string(),
        referenced: to_owner().any(|r| r.uid == uid),
    })
}
