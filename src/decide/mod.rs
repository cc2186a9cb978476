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
//! [`plan`], so a malformed request never costs an API call. `create`
//! and `update` hold the rules of each operation; `templates` the
//! templates a controller makes objects from (rule 12).

mod copies;
mod create;
pub(crate) mod denial;
mod few;
mod judge;
pub(crate) mod mode;
mod ownership;
pub(crate) mod patch;
mod policy;
pub(crate) mod requester;
pub(crate) mod resolve;
pub(crate) mod subject;
mod templates;
mod update;

pub use denial::{Denial, SameName};
use judge::Judge;
pub use mode::{Mode, Relaxed, softenable};
pub use patch::MetadataPatch;
pub use policy::{DEFAULT_MAX_POD_REFERENCES, Endpoint, Policy, WebhookKind};
pub use requester::{Delegate, Requester, RequesterCheck};
pub use resolve::{
    CONTROLLER_MANAGER, GARBAGE_COLLECTOR, OwnerLabels, REQUESTING_POD, is_garbage_collector,
};
pub use subject::{ObjectName, Subject};

use std::collections::{HashMap, HashSet};

/// The hasher of the maps a decision builds, one set of them a review:
/// foldhash, as the owner cache's, several times faster than SipHash on
/// short keys and seeded at random per process (it does not claim
/// SipHash's resistance to chosen collisions; a review's maps hold the
/// few names one object carries, bounded by the review's size).
pub type FastHash = foldhash::fast::RandomState;

/// A map a decision builds ([`FastHash`]).
pub type Map<K, V> = HashMap<K, V, FastHash>;

/// A set a decision builds ([`FastHash`]).
pub type Set<T> = HashSet<T, FastHash>;

/// The owner lookups of a review, by pod name.
pub type Lookups = Map<String, Lookup>;

use crate::admission::{AdmissionRequest, ObjectHead, ObjectMeta, Operation};
use crate::decide::resolve::{label, references};
use crate::k8s::names::is_namespace;
use crate::owner::{Lookup, Source};

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
pub struct Checks<'a> {
    pub at: Subject,
    lookups: Vec<LookupNeed>,
    work: Work<'a>,
    /// Which webhook decides: `/validate-all` takes a finished owner as
    /// the collector does.
    webhook: WebhookKind,
}

#[derive(Debug)]
enum Work<'a> {
    Create(create::Work),
    /// Boxed: an UPDATE carries the new object's metadata to put back what
    /// it left out.
    Update(Box<update::Work<'a>>),
}

impl Checks<'_> {
    /// The namespace every lookup is made in.
    pub fn namespace(&self) -> &str {
        &self.at.namespace
    }

    /// The pods to look up, one entry per name.
    pub fn lookups(&self) -> &[LookupNeed] {
        &self.lookups
    }

    /// The pods to look up, taken out: [`decide`] needs only the answers.
    pub fn take_lookups(&mut self) -> Vec<LookupNeed> {
        std::mem::take(&mut self.lookups)
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
    /// `namespace/name/uid`, written once (the audit annotation's value).
    annotation: String,
    /// Where the name is in it.
    name: std::ops::Range<usize>,
    pub source: Source,
}

impl CheckedOwner {
    pub(crate) fn new(namespace: &str, name: &str, uid: &str, source: Source) -> Self {
        let mut annotation = String::with_capacity(namespace.len() + name.len() + uid.len() + 2);
        annotation.push_str(namespace);
        annotation.push('/');
        let name_at = annotation.len();
        annotation.push_str(name);
        annotation.push('/');
        annotation.push_str(uid);
        Self {
            annotation,
            name: name_at..name_at + name.len(),
            source,
        }
    }

    /// The owner pod's name.
    pub fn name(&self) -> &str {
        &self.annotation[self.name.clone()]
    }

    /// `namespace/name/uid`.
    pub fn annotation(&self) -> &str {
        &self.annotation
    }

    /// [`CheckedOwner::annotation`], taken.
    pub fn into_annotation(self) -> String {
        self.annotation
    }
}

/// How the object is named in messages: by name, or by `generateName`
/// before the API server has generated the name.
pub fn object_name(request: &AdmissionRequest) -> ObjectName {
    let (kind, name, generated) = object_name_parts(request);
    ObjectName {
        kind: kind.to_string(),
        name: name.to_string(),
        generated,
    }
}

/// [`object_name`]'s kind, name (or `generateName` prefix, then `true`),
/// borrowed from the request.
pub fn object_name_parts<'r>(request: &'r AdmissionRequest) -> (&'r str, &'r str, bool) {
    let head = request.object.as_deref().or(request.old_object.as_deref());
    let meta = head.map(|h| &h.metadata);
    let kind = Some(request.kind.kind.as_str())
        .filter(|k| !k.is_empty())
        .or_else(|| head.and_then(|h| h.kind.as_deref()))
        .unwrap_or_default();
    let name = meta
        .and_then(|m| m.name.as_deref())
        .or(request.name.as_deref())
        .filter(|n| !n.is_empty());
    match (name, meta.and_then(|m| m.generate_name.as_deref())) {
        (Some(name), _) => (kind, name, false),
        (None, Some(prefix)) if !prefix.is_empty() => (kind, prefix, true),
        _ => (kind, "", false),
    }
}

/// Settle what needs no lookup. `Ok(None)`: allowed unchanged, nothing to
/// check (no owner declared, or an operation ownerguard does not judge).
///
/// # Errors
///
/// The [`Denial`] of any rule that fails before a lookup.
pub fn plan<'a>(
    request: &AdmissionRequest<'a>,
    webhook: WebhookKind,
    policy: &Policy,
) -> Result<Option<Checks<'a>>, Denial> {
    if matches!(request.operation, Operation::Create | Operation::Update) {
        refuse_overlong_lists(request, &policy.labels)?;
    }
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

/// A list past its bound (SPEC §3 rule 10), 400 before anything else:
///
/// - `ownerReferences` cut at [`crate::admission::MAX_REFERENCES`], in
///   the object or the old one, whoever asks: the rest cannot be judged,
///   nor can a collector's removal be told from an addition past the cut
///   (no object holds so many at etcd's default request limit);
/// - then, but for the collector's removals (rules 14 and 16) and where
///   templates are judged (the object carries the owner label), a list of
///   volumes or claim templates of the object cut at
///   [`crate::admission::MAX_LIST_ENTRIES`];
/// - and a pod template giving its pods more than
///   [`crate::admission::MAX_TEMPLATE_VOLUMES`], written by a person: on a
///   CREATE, or an UPDATE that adds to them. A Kubernetes controller's
///   requests (kube-system's service accounts, the controller manager) are
///   never refused for it: they copy a template that was judged when it
///   was written, or stored before this bound, and their sync must not
///   stall.
///
/// An old object's volumes are not bounded, so that one stored with more
/// can be shrunk (a template whose old self was not kept is judged as
/// new).
fn refuse_overlong_lists(request: &AdmissionRequest, labels: &OwnerLabels) -> Result<(), Denial> {
    let heads = [request.object.as_deref(), request.old_object.as_deref()];
    let over = heads
        .into_iter()
        .flatten()
        .find_map(ObjectHead::overlong_references)
        .or_else(|| overlong_volumes(request, labels));
    let Some((field, limit)) = over else {
        return Ok(());
    };
    let owner = heads
        .into_iter()
        .flatten()
        .map(|head| first_declared_owner(&head.metadata, labels))
        .find(|owner| !owner.is_empty());
    Err(Denial::TooManyEntries {
        owner,
        at: Subject {
            object: object_name(request),
            namespace: request.namespace.as_deref().unwrap_or_default().to_string(),
            owner: None,
        },
        field: field.to_string(),
        limit,
    })
}

/// The volumes' part of [`refuse_overlong_lists`].
fn overlong_volumes(
    request: &AdmissionRequest,
    labels: &OwnerLabels,
) -> Option<(&'static str, usize)> {
    let new = request.object.as_ref()?;
    if label(&new.metadata, &labels.pod).is_none()
        || ownership::is_collectors_removal(request, labels)
    {
        return None;
    }
    if let Some(field) = new.cut_volumes() {
        return Some((field, crate::admission::MAX_LIST_ENTRIES));
    }
    let user = request.user_info.username.as_str();
    if user.starts_with("system:serviceaccount:kube-system:") || user == CONTROLLER_MANAGER {
        return None;
    }
    let before = request
        .old_object
        .as_deref()
        .map(ObjectHead::template_volumes);
    new.template_volumes()
        .into_iter()
        .enumerate()
        .find(|&(i, (_, count))| {
            count > crate::admission::MAX_TEMPLATE_VOLUMES
                && before.is_none_or(|before| count > before[i].1)
        })
        .map(|(_, (field, _))| (field, crate::admission::MAX_TEMPLATE_VOLUMES))
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
pub fn decide(checks: Checks<'_>, lookups: &Lookups, policy: &Policy) -> Result<Allowed, Denial> {
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
        // A mode that softened rule 11 takes the finished owners it named.
        finished_owners: &policy.relaxed.finished_owners,
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

/// Lookups for `needs`, one per name; a name needed fresh anywhere is
/// looked up fresh.
fn merge_lookups(needs: impl IntoIterator<Item = LookupNeed>) -> Vec<LookupNeed> {
    let needs = needs.into_iter();
    let mut merged: Vec<LookupNeed> = Vec::with_capacity(needs.size_hint().0);
    // By name, once there are more than a few (as `few::FirstSeen`, which
    // cannot serve here: the names it would borrow move into `merged`): a
    // scan finds one of a few without the map's allocation, but a long
    // list would make it quadratic.
    let mut by_name: Option<Map<String, usize>> = None;
    for need in needs {
        let found = match &by_name {
            Some(by_name) => by_name.get(&need.name).copied(),
            None => merged.iter().position(|m| m.name == need.name),
        };
        if let Some(index) = found {
            merged[index].fresh |= need.fresh;
            continue;
        }
        if let Some(by_name) = &mut by_name {
            by_name.insert(need.name.clone(), merged.len());
        }
        merged.push(need);
        if by_name.is_none() && merged.len() > few::IN_PLACE {
            by_name = Some(
                merged
                    .iter()
                    .enumerate()
                    .map(|(index, m)| (m.name.clone(), index))
                    .collect(),
            );
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
                .map(|r| r.name.to_string())
        })
        .unwrap_or_default()
}

/// The object under review and how messages name it.
fn object_of<'r, 'a>(
    request: &'r AdmissionRequest<'a>,
    labels: &OwnerLabels,
) -> Result<(ObjectName, &'r ObjectHead<'a>), Denial> {
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
                    namespace: request
                        .namespace
                        .as_deref()
                        .map(str::to_string)
                        .unwrap_or_default(),
                    owner: None,
                },
                owner,
                operation: request.operation.as_str().to_string(),
            })
        }
    }
}

/// The pod the request comes from, judged for an object at `at`.
fn requester_of<'r>(
    request: &'r AdmissionRequest,
    at: &Subject,
    declared: &str,
) -> Result<Option<Requester<'r>>, Denial> {
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
            owner: pods.map(|r| r.name.to_string()).next().unwrap_or_default(),
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
    /// A mode softened the rule: `/validate` lets the reference be.
    relaxed: bool,
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
            WebhookKind::Validate if self.relaxed => return Ok(()),
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
