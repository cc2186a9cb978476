//! The decision, pure: no HTTP, no I/O.
//!
//! A review is decided in two steps around the owner lookup:
//!
//! ```text
//! plan(request)          -> Checks: who to look up, the patch, early denials
//!   (lookup each owner)  -> Lookup per owner name
//! decide(checks, lookups) -> Allowed { patch, warnings, owner } or Denial
//! ```
//!
//! Everything that needs no lookup (label syntax, the requester, UPDATE
//! immutability, the patch itself) is settled by [`plan`], so a malformed
//! request never costs an API call.

use std::collections::{BTreeSet, HashMap};

use crate::admission::{AdmissionRequest, ObjectHead, ObjectMeta, Operation};
use crate::error::{Denial, ObjectName};
use crate::owner::resolve::{check_requester, label, label_owner, reference_owners};
use crate::owner::{Claim, Lookup, Origin, OwnerLabels, Requester, RequesterCheck, Source};
use crate::patch::MetadataPatch;

/// Which endpoint is deciding.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum WebhookKind {
    /// `/mutate`: injects the reference.
    Mutate,
    /// `/validate`: the same checks, never a patch; guarantees the final
    /// object, after every mutating webhook ran.
    Validate,
}

impl WebhookKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
        }
    }
}

/// The settings the decision depends on.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub labels: OwnerLabels,
    pub requester_check: RequesterCheck,
    /// Allow, with a warning, when an owner cannot be checked.
    pub fail_open: bool,
}

/// What is left to decide once the owners are looked up.
#[derive(Debug)]
pub struct Checks {
    pub namespace: String,
    pub object: ObjectName,
    /// The owners to look up; the label's owner first.
    pub claims: Vec<Claim>,
    patch: MetadataPatch,
    warnings: Vec<String>,
}

impl Checks {
    fn new(namespace: String, object: ObjectName) -> Self {
        Self {
            namespace,
            object,
            claims: Vec::new(),
            patch: MetadataPatch::default(),
            warnings: Vec::new(),
        }
    }

    /// The requester check on every claim: a denial, or warnings kept.
    fn check_requester(
        &mut self,
        claims: &[Claim],
        requester: Option<&Requester>,
        policy: &Policy,
    ) -> Result<(), Denial> {
        for claim in claims {
            let warning = check_requester(
                claim,
                &self.object,
                &self.namespace,
                &policy.labels,
                requester,
                policy.requester_check,
            )?;
            self.warnings.extend(warning);
        }
        Ok(())
    }
}

/// An allowed request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Allowed {
    /// Empty when nothing changes.
    pub patch: MetadataPatch,
    pub warnings: Vec<String>,
    /// The owner checked, for the audit annotations.
    pub owner: Option<CheckedOwner>,
}

/// The owner a decision checked: `owner` and `owner-source` in the audit
/// annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedOwner {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub source: Source,
}

impl CheckedOwner {
    /// `namespace/name/uid`.
    pub fn annotation(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.name, self.uid)
    }
}

/// How the object is named in messages: by name, or by `generateName`
/// before the API server has generated the name.
pub fn object_name(request: &AdmissionRequest) -> ObjectName {
    let head = request.object.as_ref().or(request.old_object.as_ref());
    let meta = head.map(|h| &h.metadata);
    let kind = Some(request.kind.kind.as_str())
        .filter(|k| !k.is_empty())
        .or_else(|| head.and_then(|h| h.kind.as_deref()))
        .unwrap_or_default()
        .to_string();
    let name = meta
        .and_then(|m| m.name.as_deref())
        .or(request.name.as_deref())
        .filter(|n| !n.is_empty());
    match (name, meta.and_then(|m| m.generate_name.as_deref())) {
        (Some(name), _) => ObjectName {
            kind,
            name: name.to_string(),
            generated: false,
        },
        (None, Some(prefix)) if !prefix.is_empty() => ObjectName {
            kind,
            name: prefix.to_string(),
            generated: true,
        },
        _ => ObjectName {
            kind,
            name: String::new(),
            generated: false,
        },
    }
}

/// Settle what needs no lookup. `Ok(None)`: allowed unchanged, nothing to
/// check (no owner declared, or an operation ownerguard does not judge).
///
/// # Errors
///
/// The [`Denial`] of any rule that fails before a lookup.
pub fn plan(
    request: &AdmissionRequest,
    webhook: WebhookKind,
    policy: &Policy,
) -> Result<Option<Checks>, Denial> {
    match request.operation {
        Operation::Create => plan_create(request, webhook, policy),
        Operation::Update => plan_update(request, webhook, policy),
        Operation::Delete | Operation::Connect | Operation::Other(_) => Ok(None),
    }
}

fn declares_owner(meta: &ObjectMeta, labels: &OwnerLabels) -> bool {
    label(meta, &labels.pod).is_some()
        || label(meta, &labels.uid).is_some()
        || meta.owner_references.iter().flatten().any(|r| r.is_pod())
}

/// The first owner an object names, for messages where none was resolved.
fn first_declared_owner(meta: &ObjectMeta, labels: &OwnerLabels) -> String {
    label(meta, &labels.pod)
        .map(str::to_string)
        .or_else(|| {
            meta.owner_references
                .iter()
                .flatten()
                .find(|r| r.is_pod())
                .map(|r| r.name.clone())
        })
        .unwrap_or_default()
}

/// The request's namespace, or the object's; `None` for cluster-scoped.
fn namespace_of(request: &AdmissionRequest, meta: &ObjectMeta) -> Option<String> {
    request
        .namespace
        .as_deref()
        .or(meta.namespace.as_deref())
        .filter(|ns| !ns.is_empty())
        .map(str::to_string)
}

fn object_of<'a>(
    request: &'a AdmissionRequest,
    object: &ObjectName,
) -> Result<&'a ObjectHead, Denial> {
    request
        .object
        .as_ref()
        .ok_or_else(|| Denial::MissingObject {
            object: object.clone(),
            namespace: request.namespace.clone().unwrap_or_default(),
            operation: request.operation.as_str().to_string(),
        })
}

fn cluster_scoped(object: &ObjectName, meta: &ObjectMeta, labels: &OwnerLabels) -> Denial {
    let what = if label(meta, &labels.pod).is_some() || label(meta, &labels.uid).is_some() {
        format!("labels {} and {}", labels.pod, labels.uid)
    } else {
        "Pod ownerReference".to_string()
    };
    Denial::ClusterScoped {
        object: object.clone(),
        owner: first_declared_owner(meta, labels),
        what,
    }
}

fn plan_create(
    request: &AdmissionRequest,
    webhook: WebhookKind,
    policy: &Policy,
) -> Result<Option<Checks>, Denial> {
    let object = object_name(request);
    let meta = &object_of(request, &object)?.metadata;
    let labels = &policy.labels;
    if !declares_owner(meta, labels) {
        return Ok(None);
    }
    let namespace =
        namespace_of(request, meta).ok_or_else(|| cluster_scoped(&object, meta, labels))?;
    let requester = Requester::from_user_info(&request.user_info);

    let label_claim = label_owner(meta, &object, &namespace, labels, requester.as_ref())?;
    let mut claims: Vec<Claim> = label_claim.iter().cloned().collect();
    claims.extend(reference_owners(meta, &object, &namespace, |_| false)?);

    let mut checks = Checks::new(namespace, object);
    checks.check_requester(&claims, requester.as_ref(), policy)?;

    let references = meta.owner_references.as_deref().unwrap_or_default();
    let mut unblocked = BTreeSet::new();
    if let Some(owner) = &label_claim {
        match references.iter().position(|r| r.uid == owner.uid) {
            None if webhook == WebhookKind::Validate => {
                return Err(Denial::ReferenceMissing {
                    object: checks.object,
                    namespace: checks.namespace,
                    owner: owner.name.clone(),
                    uid: owner.uid.clone(),
                });
            }
            None => checks
                .patch
                .add_owner_reference(meta, &owner.name, &owner.uid),
            // An existing entry keeps its `controller` and is made
            // explicitly non-blocking.
            Some(index) => match (webhook, references[index].block_owner_deletion) {
                (_, Some(false)) | (WebhookKind::Validate, None) => {}
                (WebhookKind::Validate, Some(true)) => {
                    return Err(blocking(&checks, &owner.name));
                }
                (WebhookKind::Mutate, blocking_flag) => {
                    if blocking_flag == Some(true) {
                        checks.warnings.push(unblock_warning(&owner.name));
                    }
                    checks.patch.unblock_owner_reference(index);
                    unblocked.insert(index);
                }
            },
        }
        if webhook == WebhookKind::Mutate && label(meta, &labels.uid).is_none() {
            checks.patch.add_label(meta, &labels.uid, &owner.uid);
        }
    }
    unblock_references(&mut checks, &claims, meta, webhook, &mut unblocked)?;
    checks.claims = claims;
    Ok(Some(checks))
}

/// Make every Pod reference among `claims` non-blocking (mutate), or deny
/// a blocking one (validate).
fn unblock_references(
    checks: &mut Checks,
    claims: &[Claim],
    meta: &ObjectMeta,
    webhook: WebhookKind,
    unblocked: &mut BTreeSet<usize>,
) -> Result<(), Denial> {
    let references = meta.owner_references.as_deref().unwrap_or_default();
    for claim in claims {
        let Origin::Reference(index) = claim.origin else {
            continue;
        };
        if references[index].block_owner_deletion != Some(true) || unblocked.contains(&index) {
            continue;
        }
        if webhook == WebhookKind::Validate {
            return Err(blocking(checks, &claim.name));
        }
        checks.warnings.push(unblock_warning(&claim.name));
        checks.patch.unblock_owner_reference(index);
        unblocked.insert(index);
    }
    Ok(())
}

fn blocking(checks: &Checks, owner: &str) -> Denial {
    Denial::BlockingReference {
        object: checks.object.clone(),
        namespace: checks.namespace.clone(),
        owner: owner.to_string(),
    }
}

fn unblock_warning(owner: &str) -> String {
    format!(
        "blockOwnerDeletion set to false on the ownerReference to pod '{owner}': true needs pods/finalizers update"
    )
}

fn plan_update(
    request: &AdmissionRequest,
    webhook: WebhookKind,
    policy: &Policy,
) -> Result<Option<Checks>, Denial> {
    let object = object_name(request);
    let meta = &object_of(request, &object)?.metadata;
    let labels = &policy.labels;
    let old = request.old_object.as_ref().map(|o| &o.metadata);
    if !declares_owner(meta, labels) && !old.is_some_and(|old| declares_owner(old, labels)) {
        return Ok(None);
    }
    let namespace = match namespace_of(request, meta) {
        Some(namespace) => namespace,
        None if declares_owner(meta, labels) => return Err(cluster_scoped(&object, meta, labels)),
        None => return Ok(None),
    };
    let Some(old) = old else {
        return Err(Denial::MissingOldObject {
            object,
            namespace,
            owner: first_declared_owner(meta, labels),
        });
    };

    // Ownership is set at creation: the owner labels may not be added,
    // changed or removed.
    // The owner of record is the old object's.
    let owner = label(old, &labels.pod)
        .or(label(meta, &labels.pod))
        .unwrap_or_default()
        .to_string();
    for key in [&labels.pod, &labels.uid] {
        let (before, after) = (label(old, key), label(meta, key));
        if before != after {
            let shown = |v: Option<&str>| v.map_or("(none)".to_string(), |v| format!("'{v}'"));
            return Err(Denial::OwnerLabelChanged {
                object,
                namespace,
                owner,
                key: key.clone(),
                old: shown(before),
                new: shown(after),
            });
        }
    }

    let mut checks = Checks::new(namespace, object);
    let old_references = old.owner_references.as_deref().unwrap_or_default();
    let references = meta.owner_references.as_deref().unwrap_or_default();
    let mut unblocked = BTreeSet::new();

    // The owner reference the old object had must stay, non-blocking. An
    // object labelled before ownerguard was installed has none: it can
    // still be updated.
    if let Some(owner_name) = label(old, &labels.pod) {
        let owner_uid = label(old, &labels.uid);
        let owner_references = old_references.iter().filter(|r| {
            r.is_pod() && r.name == owner_name && owner_uid.is_none_or(|uid| uid == r.uid)
        });
        for old_reference in owner_references {
            let Some(index) = references.iter().position(|r| r.uid == old_reference.uid) else {
                return Err(Denial::OwnerReferenceRemoved {
                    object: checks.object,
                    namespace: checks.namespace,
                    owner: owner_name.to_string(),
                    uid: old_reference.uid.clone(),
                });
            };
            if references[index].block_owner_deletion == Some(true) && unblocked.insert(index) {
                if webhook == WebhookKind::Validate {
                    return Err(blocking(&checks, owner_name));
                }
                checks.warnings.push(unblock_warning(owner_name));
                checks.patch.unblock_owner_reference(index);
            }
        }
    }

    // Pod references the update adds are checked as on CREATE.
    let known: BTreeSet<&str> = old_references
        .iter()
        .filter(|r| r.is_pod())
        .map(|r| r.uid.as_str())
        .collect();
    let added = reference_owners(meta, &checks.object, &checks.namespace, |uid| {
        known.contains(uid)
    })?;
    let requester = Requester::from_user_info(&request.user_info);
    checks.check_requester(&added, requester.as_ref(), policy)?;
    unblock_references(&mut checks, &added, meta, webhook, &mut unblocked)?;
    checks.claims = added;
    Ok(Some(checks))
}

/// Judge the owners looked up for `checks`.
///
/// `lookups` holds one answer per owner name.
///
/// # Errors
///
/// The [`Denial`] of the first owner that is missing, has another uid, is
/// being deleted, or could not be checked (unless `fail_open`).
pub fn decide(
    checks: Checks,
    lookups: &HashMap<String, Lookup>,
    policy: &Policy,
) -> Result<Allowed, Denial> {
    let Checks {
        namespace,
        object,
        claims,
        patch,
        mut warnings,
    } = checks;
    let mut owner = None;
    for claim in &claims {
        let lookup = lookups.get(&claim.name);
        let deny_lookup = |reason: String| Denial::LookupFailed {
            object: object.clone(),
            namespace: namespace.clone(),
            owner: claim.name.clone(),
            reason,
        };
        let source = match lookup {
            None => return Err(deny_lookup("no lookup was made".to_string())),
            Some(Lookup {
                outcome: Err(error),
                ..
            }) if !policy.fail_open => {
                return Err(deny_lookup(error.to_string()));
            }
            Some(Lookup {
                outcome: Err(_),
                source,
            }) => {
                warnings.push(format!(
                    "owner pod '{}' not checked (lookup failed), allowed by --fail-open",
                    claim.name
                ));
                *source
            }
            Some(Lookup {
                outcome: Ok(None), ..
            }) => {
                return Err(Denial::OwnerNotFound {
                    object,
                    namespace,
                    owner: claim.name.clone(),
                });
            }
            Some(Lookup {
                outcome: Ok(Some(pod)),
                ..
            }) if pod.uid != claim.uid => {
                return Err(Denial::OwnerUidMismatch {
                    object,
                    namespace,
                    owner: claim.name.clone(),
                    declared: claim.uid.clone(),
                    actual: pod.uid.clone(),
                });
            }
            Some(Lookup {
                outcome: Ok(Some(pod)),
                ..
            }) if pod.terminating => {
                return Err(Denial::OwnerTerminating {
                    object,
                    namespace,
                    owner: claim.name.clone(),
                });
            }
            Some(Lookup { source, .. }) => *source,
        };
        owner.get_or_insert_with(|| CheckedOwner {
            namespace: namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            source,
        });
    }
    Ok(Allowed {
        patch,
        warnings: warnings.into_iter().map(short_warning).collect(),
        owner,
    })
}

/// The API server turns each warning into a `Warning` header, which
/// clients may cut at 120 characters: keep each under that, whole words
/// where possible.
pub fn short_warning(warning: String) -> String {
    const MAX: usize = 119;
    if warning.len() <= MAX {
        return warning;
    }
    let mut cut = MAX - 3;
    while !warning.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &warning[..cut];
    let head = head
        .rfind(' ')
        .filter(|&space| space > MAX / 2)
        .map_or(head, |space| &head[..space]);
    format!("{head}...")
}

#[cfg(test)]
mod tests;
