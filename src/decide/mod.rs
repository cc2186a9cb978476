//! The decision, pure: no HTTP, no I/O.
//!
//! A review is decided in two steps around the owner lookup:
//!
//! ```text
//! plan(request)            -> Checks: the lookups to make, the work left, early denials
//!   (look each pod up)     -> Lookup per pod name
//! decide(checks, lookups)  -> Allowed { patch, warnings, owner } or Denial
//! ```
//!
//! Everything that needs no lookup (names, identities, the tuple of every
//! reference, the requester, what an UPDATE changes) is settled by
//! [`plan`], so a malformed request never costs an API call. [`create`]
//! and [`update`] hold the rules of each operation; [`templates`] the
//! templates a controller makes objects from (rule 12).

mod create;
pub mod denial;
pub mod patch;
pub mod requester;
pub mod resolve;
pub mod subject;
mod templates;
mod update;

use std::collections::HashMap;

use crate::admission::{AdmissionRequest, ObjectHead, ObjectMeta, Operation};
use crate::decide::denial::Denial;
use crate::decide::patch::MetadataPatch;
use crate::decide::requester::{Delegate, Requester, RequesterCheck};
use crate::decide::resolve::Claim;
use crate::decide::resolve::RequesterPolicy;
use crate::decide::resolve::{OwnerLabels, label, references};
use crate::decide::subject::{ObjectName, Subject};
use crate::k8s::names::is_namespace;
use crate::owner::{Finished, Lookup, Source};

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
    /// `/validate-all`: the chart's cluster-wide opt-in
    /// (`validation.allPodOwnerReferences`), for the objects that carry no
    /// owner label. It refuses only what the garbage collector cannot
    /// resolve to a live pod (SPEC §3 rule 13): a reference not exactly
    /// `v1`/`Pod` (rules 6, 15), malformed or with a name no pod can have,
    /// to a pod that is missing, has another uid or is being deleted (an
    /// owner on its way out takes the object with it, and the
    /// ephemeral-volume controller skips such pods itself). A finished pod
    /// is an owner here: the collector resolves it, and that controller
    /// makes claims for finished pods too. Never a blocking reference,
    /// never by the requester check
    /// ([`Self::judges_policy`]). A failed lookup is allowed with a
    /// warning, as its webhook's `failurePolicy: Ignore` allows an outage.
    #[serde(rename = "validate-all")]
    ValidateAll,
}

impl WebhookKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
            Self::ValidateAll => "validate-all",
        }
    }

    /// Whether this webhook may patch (the others only allow or deny).
    pub fn mutates(self) -> bool {
        self == Self::Mutate
    }

    /// Whether this webhook judges what only ownerguard's policy asks of
    /// an object, beyond what the collector can resolve: a blocking
    /// reference and the requester check. `/validate-all` leaves the first
    /// to the API server's permission check (`update` on `pods/finalizers`
    /// under `OwnerReferencesPermissionEnforcement`): the ephemeral-volume
    /// and resource-claim controllers write `blockOwnerDeletion: true` and
    /// hold that permission. It leaves the second to RBAC: the objects it
    /// sees never opted in by the owner label, and which pod a client names
    /// as owner of an object it may create is not a claim made to
    /// ownerguard; the collector only needs the reference to resolve.
    pub fn judges_policy(self) -> bool {
        self != Self::ValidateAll
    }
}

/// Default of `--max-pod-references`: real objects carry a handful.
pub const DEFAULT_MAX_POD_REFERENCES: usize = 32;

/// The settings the decision depends on.
#[derive(Debug, Clone)]
pub struct Policy {
    pub labels: OwnerLabels,
    pub requester_check: RequesterCheck,
    /// Service accounts that may declare another pod of their namespace.
    pub delegates: Vec<Delegate>,
    /// Allow, with a warning, when an owner cannot be checked.
    pub fail_open: bool,
    /// Most Pod references one object may carry (and pods one review may
    /// look up, beyond the label's owner): above it, 400 before any lookup.
    pub max_pod_references: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            labels: OwnerLabels::default(),
            requester_check: RequesterCheck::default(),
            delegates: Vec::new(),
            fail_open: false,
            max_pod_references: DEFAULT_MAX_POD_REFERENCES,
        }
    }
}

impl Policy {
    /// The requester check as `webhook` applies it: `/validate-all` does
    /// not ([`WebhookKind::judges_policy`]).
    fn requester_policy(&self, webhook: WebhookKind) -> RequesterPolicy<'_> {
        RequesterPolicy {
            mode: if webhook.judges_policy() {
                self.requester_check
            } else {
                RequesterCheck::Off
            },
            delegates: &self.delegates,
            labels: &self.labels,
        }
    }
}

/// One pod to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupNeed {
    pub name: String,
    /// The uid the object expects: a cache that agrees may answer.
    pub uid: String,
    /// Whether the answer must come from the API server, never from the
    /// cache alone: it decides to put a reference back, and a stale "alive"
    /// would tie an orphan to an owner that is gone.
    pub fresh: bool,
}

/// What is left to decide once the pods are looked up.
#[derive(Debug)]
pub struct Checks {
    pub at: Subject,
    lookups: Vec<LookupNeed>,
    work: Work,
    /// Which webhook decides: `/validate-all` takes a finished owner as
    /// the collector does.
    webhook: WebhookKind,
}

#[derive(Debug)]
enum Work {
    Create(create::Work),
    /// Boxed: an UPDATE carries the new object's metadata to put back what
    /// it left out.
    Update(Box<update::Work>),
}

impl Checks {
    /// The namespace every lookup is made in.
    pub fn namespace(&self) -> &str {
        &self.at.namespace
    }

    /// The pods to look up, one entry per name.
    pub fn lookups(&self) -> &[LookupNeed] {
        &self.lookups
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
    let planned = match request.operation {
        Operation::Create => create::plan(request, webhook, policy)?,
        Operation::Update => update::plan(request, webhook, policy)?,
        Operation::Delete | Operation::Connect | Operation::Other(_) => None,
    };
    let Some(checks) = planned else {
        return Ok(None);
    };
    // The work of one review is bounded: the label's owner, and at most
    // the allowed number of references (SPEC §3 rule 10).
    if checks.lookups.len() > policy.max_pod_references + 1 {
        return Err(Denial::TooManyReferences {
            owner: checks.lookups[0].name.clone(),
            at: checks.at,
            count: checks.lookups.len(),
            limit: policy.max_pod_references,
        });
    }
    Ok(Some(checks))
}

/// Judge the pods looked up for `checks`.
///
/// `lookups` holds one answer per pod name.
///
/// # Errors
///
/// The [`Denial`] of the first rule the answers break: a declared owner
/// missing, with another uid, being deleted or finished; a running owner's reference
/// or labels removed; an owner that could not be checked (unless
/// `fail_open`).
pub fn decide(
    checks: Checks,
    lookups: &HashMap<String, Lookup>,
    policy: &Policy,
) -> Result<Allowed, Denial> {
    let Checks {
        at, work, webhook, ..
    } = checks;
    let mut judge = Judge {
        at,
        lookups,
        fail_open: policy.fail_open,
        // The collector resolves a reference to a finished pod (its object
        // is there), and the ephemeral-volume controller makes claims for
        // finished pods too (it skips only those being deleted): the
        // cluster-wide webhook, which refuses only what the collector
        // cannot resolve (rule 13), takes it as an owner.
        finished_is_owner: webhook == WebhookKind::ValidateAll,
        warnings: Vec::new(),
        owner: None,
    };
    let patch = match work {
        Work::Create(work) => create::decide(work, &mut judge)?,
        Work::Update(work) => update::decide(*work, &mut judge)?,
    };
    Ok(Allowed {
        patch,
        warnings: judge.warnings.into_iter().map(short_warning).collect(),
        owner: judge.owner,
    })
}

/// What a lookup says of a pod that must be `uid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    /// There, with that uid, not being deleted.
    Live,
    NotFound,
    OtherUid,
    Terminating,
    /// Phase `Succeeded` or `Failed` (SPEC §3 rule 11): no owner, like a
    /// pod being deleted, but its object (and so what it owns) stays.
    Finished(Finished),
    /// The lookup failed: `--fail-open` decides.
    Unknown(&'static str),
}

/// Reads the lookups for one decision, and gathers the warnings and the
/// owner for the audit annotations as it goes.
struct Judge<'a> {
    at: Subject,
    lookups: &'a HashMap<String, Lookup>,
    fail_open: bool,
    /// A finished pod is an owner (`/validate-all` only).
    finished_is_owner: bool,
    warnings: Vec<String>,
    owner: Option<CheckedOwner>,
}

impl Judge<'_> {
    fn liveness(&self, name: &str, uid: &str) -> Liveness {
        match self.lookups.get(name).map(|lookup| &lookup.outcome) {
            None => Liveness::Unknown("no lookup was made"),
            Some(Err(error)) => Liveness::Unknown(error.summary()),
            Some(Ok(None)) => Liveness::NotFound,
            Some(Ok(Some(pod))) if pod.uid != uid => Liveness::OtherUid,
            Some(Ok(Some(pod))) if pod.terminating => Liveness::Terminating,
            Some(Ok(Some(_))) if self.finished_is_owner => Liveness::Live,
            Some(Ok(Some(pod))) => pod.finished.map_or(Liveness::Live, Liveness::Finished),
        }
    }

    /// Remember the first owner found alive, for the audit annotations.
    fn checked(&mut self, name: &str, uid: &str) {
        // The annotation names the object's owner, never another pod a
        // reference names (even when the owner itself went unchecked).
        if self.at.owner.as_deref().is_some_and(|owner| owner != name) {
            return;
        }
        let source = self
            .lookups
            .get(name)
            .map_or(Source::Inventory, |l| l.source);
        self.owner.get_or_insert_with(|| CheckedOwner {
            namespace: self.at.namespace.clone(),
            name: name.to_string(),
            uid: uid.to_string(),
            source,
        });
    }

    /// A declared owner must be there, with its uid, not being deleted and
    /// not finished.
    fn require_owner(&mut self, claim: &Claim) -> Result<(), Denial> {
        let owner = claim.name.clone();
        match self.liveness(&claim.name, &claim.uid) {
            Liveness::Live => {
                self.checked(&claim.name, &claim.uid);
                Ok(())
            }
            Liveness::NotFound => Err(Denial::OwnerNotFound {
                at: self.at.clone(),
                owner,
            }),
            Liveness::OtherUid => Err(Denial::OwnerUidMismatch {
                at: self.at.clone(),
                owner,
                declared: claim.uid.clone(),
            }),
            Liveness::Terminating => Err(Denial::OwnerTerminating {
                at: self.at.clone(),
                owner,
            }),
            Liveness::Finished(phase) => Err(Denial::OwnerFinished {
                at: self.at.clone(),
                owner,
                phase,
            }),
            Liveness::Unknown(reason) => self.unchecked(&claim.name, reason),
        }
    }

    /// Whether pod `name` is alive with `uid`, for a decision that keeps a
    /// live owner's ownership: a pod being deleted or finished is not (its
    /// reference may go, is never put back, and its labels may follow). A
    /// failed lookup denies (503), or under `--fail-open` counts as gone,
    /// with a warning.
    fn is_live(&mut self, name: &str, uid: &str) -> Result<bool, Denial> {
        match self.liveness(name, uid) {
            Liveness::Live => {
                self.checked(name, uid);
                Ok(true)
            }
            Liveness::Unknown(reason) => self.unchecked(name, reason).map(|()| false),
            Liveness::NotFound
            | Liveness::OtherUid
            | Liveness::Terminating
            | Liveness::Finished(_) => Ok(false),
        }
    }

    fn unchecked(&mut self, name: &str, reason: &'static str) -> Result<(), Denial> {
        if self.fail_open {
            self.warnings.push(format!(
                "owner pod '{name}' not checked (lookup failed), allowed by --fail-open"
            ));
            Ok(())
        } else {
            Err(Denial::LookupFailed {
                at: self.at.clone(),
                owner: name.to_string(),
                reason,
            })
        }
    }
}

/// Lookups for `needs`, one per name; a name needed fresh anywhere is
/// looked up fresh.
fn merge_lookups(needs: impl IntoIterator<Item = LookupNeed>) -> Vec<LookupNeed> {
    let mut merged: Vec<LookupNeed> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for need in needs {
        match by_name.get(&need.name) {
            Some(&index) => merged[index].fresh |= need.fresh,
            None => {
                by_name.insert(need.name.clone(), merged.len());
                merged.push(need);
            }
        }
    }
    merged
}

/// The request's namespace, checked: a DNS label, and the object's own
/// when it names one. `Ok(None)` for a cluster-scoped object.
fn namespace_of(
    request: &AdmissionRequest,
    meta: &ObjectMeta,
    object: &ObjectName,
    owner: &str,
) -> Result<Option<String>, Denial> {
    let invalid = |namespace: &str, problem| Denial::InvalidNamespace {
        object: object.clone(),
        namespace: namespace.to_string(),
        owner: owner.to_string(),
        problem,
    };
    // A Namespace has no namespace, though the API server fills the
    // request's with the Namespace's own name.
    let namespace_object = (request.kind.group.is_empty() && request.kind.kind == "Namespace")
        || (request.resource.group.is_empty() && request.resource.resource == "namespaces");
    if namespace_object {
        return Ok(None);
    }
    let from_request = request.namespace.as_deref().filter(|ns| !ns.is_empty());
    let from_object = meta.namespace.as_deref().filter(|ns| !ns.is_empty());
    let namespace = match (from_request, from_object) {
        (Some(request), Some(object)) if request != object => {
            return Err(invalid(request, "is not the object's namespace"));
        }
        (Some(namespace), _) | (None, Some(namespace)) => namespace,
        (None, None) => return Ok(None),
    };
    if !is_namespace(namespace) {
        return Err(invalid(namespace, "is not a namespace name"));
    }
    Ok(Some(namespace.to_string()))
}

/// The first owner an object names, for messages where none was resolved.
fn first_declared_owner(meta: &ObjectMeta, labels: &OwnerLabels) -> String {
    label(meta, &labels.pod)
        .map(str::to_string)
        .or_else(|| {
            references(meta)
                .iter()
                .find(|r| r.means_pod())
                .map(|r| r.name.clone())
        })
        .unwrap_or_default()
}

/// The object under review and how messages name it.
fn object_of<'a>(
    request: &'a AdmissionRequest,
    labels: &OwnerLabels,
) -> Result<(ObjectName, &'a ObjectHead), Denial> {
    let object = object_name(request);
    match &request.object {
        Some(head) => Ok((object, head)),
        None => {
            let owner = request
                .old_object
                .as_ref()
                .map(|old| first_declared_owner(&old.metadata, labels))
                .filter(|owner| !owner.is_empty())
                .unwrap_or_else(|| "none named".to_string());
            Err(Denial::MissingObject {
                at: Subject {
                    object,
                    namespace: request.namespace.clone().unwrap_or_default(),
                    owner: None,
                },
                owner,
                operation: request.operation.as_str().to_string(),
            })
        }
    }
}

/// The pod the request comes from, judged for an object at `at`.
fn requester_of(
    request: &AdmissionRequest,
    at: &Subject,
    declared: &str,
) -> Result<Option<Requester>, Denial> {
    Requester::from_user_info(&request.user_info, &at.namespace).map_err(|problem| {
        Denial::MalformedIdentity {
            at: at.clone(),
            owner: declared.to_string(),
            keys: "authentication.kubernetes.io/pod-name and pod-uid",
            problem,
        }
    })
}

/// A cluster-scoped object declaring a pod owner: `owner` is the one it
/// declares (an UPDATE's new object may name it no more than by a uid).
fn cluster_scoped(
    object: &ObjectName,
    meta: &ObjectMeta,
    labels: &OwnerLabels,
    owner: String,
) -> Denial {
    let what = if label(meta, &labels.pod).is_some() || label(meta, &labels.uid).is_some() {
        format!("labels {} and {}", labels.pod, labels.uid)
    } else {
        "Pod ownerReference".to_string()
    };
    Denial::ClusterScoped {
        object: object.clone(),
        owner,
        what,
    }
}

/// More Pod references than the policy allows: 400, before any lookup.
fn check_reference_count(meta: &ObjectMeta, at: &Subject, policy: &Policy) -> Result<(), Denial> {
    let pods = references(meta).iter().filter(|r| r.means_pod());
    let count = pods.clone().count();
    if count > policy.max_pod_references {
        return Err(Denial::TooManyReferences {
            at: at.clone(),
            owner: pods.map(|r| r.name.clone()).next().unwrap_or_default(),
            count,
            limit: policy.max_pod_references,
        });
    }
    Ok(())
}

/// What a Pod reference with `blockOwnerDeletion: true` gets: `/mutate`
/// sets it to false with a warning, `/validate` denies it.
struct Unblock<'a> {
    at: &'a Subject,
    webhook: WebhookKind,
    /// The object carries the owner label, so the mutating webhook sees it
    /// and would have fixed it: the denial says so.
    labelled: bool,
}

impl Unblock<'_> {
    /// The reference at `index`, to pod `owner`, is blocking.
    ///
    /// # Errors
    ///
    /// [`Denial::BlockingReference`] on `/validate`. `/validate-all`
    /// leaves a blocking reference to the API server's permission check
    /// (SPEC §3 rule 13): allowed, unchanged.
    fn blocking(
        &self,
        index: usize,
        owner: &str,
        patch: &mut MetadataPatch,
        warnings: &mut Vec<String>,
    ) -> Result<(), Denial> {
        match self.webhook {
            WebhookKind::Mutate => {}
            WebhookKind::Validate => {
                return Err(Denial::BlockingReference {
                    at: self.at.clone(),
                    owner: owner.to_string(),
                    labelled: self.labelled,
                });
            }
            WebhookKind::ValidateAll => return Ok(()),
        }
        warnings.push(format!(
            "blockOwnerDeletion set to false on the ownerReference to pod '{owner}': true needs pods/finalizers update"
        ));
        patch.unblock_owner_reference(index);
        Ok(())
    }
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
