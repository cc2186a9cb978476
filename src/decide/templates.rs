//! Templates (SPEC §3 rule 12): a Job's, a Deployment's, a CronJob's pod
//! templates, a StatefulSet's claim templates, the claim template of every
//! generic ephemeral volume, a ResourceClaimTemplate's claim metadata. A
//! controller makes objects from them as itself, with no pod identity and
//! only the labels and annotations it copies (the template's, and for some
//! the object's own annotations or a selector's labels); a template that
//! carries the owner label must therefore name the object's owner and
//! carry its uid too, or every object made from it is refused.
//!
//! What each controller copies (read from its code; the oracle's
//! controller simulator, `tests/oracle/controllers.rs`, cites each function):
//!
//! - pods of a Job, ReplicaSet, StatefulSet, DaemonSet: the pod template's
//!   labels and annotations;
//! - a Deployment's ReplicaSet, a StatefulSet's and a DaemonSet's
//!   ControllerRevisions: the pod template's labels and the *workload's*
//!   annotations;
//! - a CronJob's Jobs: the Job template's labels and annotations;
//! - a StatefulSet's claims: the claim template's labels, then the
//!   selector's `matchLabels` over them, and its annotations;
//! - ephemeral and DRA claims: the template's labels and annotations.

use std::collections::{HashMap, HashSet};

use crate::admission::{ObjectHead, PodSpecAt, Template, TemplatePath};
use crate::decide::denial::Denial;
use crate::decide::patch::MetadataPatch;
use crate::decide::resolve::{OwnerLabels, REQUESTING_POD, annotation, label};
use crate::decide::subject::Subject;

use super::WebhookKind;

/// The object's owner, as its templates must declare it.
#[derive(Debug, Clone, Copy)]
pub(super) struct TemplateOwner<'a> {
    pub name: &'a str,
    /// `None`: an object labelled by name only, before ownerguard; a
    /// template the update labels must then give the uid itself.
    pub uid: Option<&'a str>,
}

/// Check that every template carrying the owner label names the object's
/// `owner`, and (on `/mutate`) complete it with the owner's uid label, and
/// with the name annotation where it says `Self`.
///
/// Where a pod template says `Self` while its object (or Job template) is
/// labelled by the name, the object gets the name annotation too: the
/// ReplicaSet or ControllerRevision its controller makes carries the
/// template's labels and the object's annotations, and `Self` made by a
/// controller names its owner only through that annotation.
///
/// On an UPDATE (`old` given), a template whose owner keys are as they were
/// is left alone: a template of an object made before ownerguard lacks the
/// uid label, and patching it would restart a Deployment's pods or be
/// refused outright (a Job's template is immutable). A template that the
/// update labels anew, or whose uid label it leaves out, is completed.
///
/// Returns the uids the templates the update labels anew (owner label,
/// name annotation or uid label added or changed) declare for the owner:
/// what is made from them is checked against that pod, so the update must
/// find it running with that uid, as a CREATE would. A template whose uid
/// label the update merely leaves out is put back without asking: with the
/// owner gone, what is made from it is refused anyway.
///
/// # Errors
///
/// [`Denial::TemplateOwnerMismatch`]: a template that declares another
/// owner, or another uid: what is made from it would belong to another
/// worker, or be refused. [`Denial::TemplateUidUnknown`] (`/mutate`): a
/// template labelled anew without its uid on an object that records none.
pub(super) fn complete(
    head: &ObjectHead,
    old: Option<&ObjectHead>,
    at: &Subject,
    owner: TemplateOwner<'_>,
    labels: &OwnerLabels,
    webhook: WebhookKind,
    patch: &mut MetadataPatch,
) -> Result<Vec<String>, Denial> {
    let mutate = webhook.mutates();
    let old_templates = old.map(ObjectHead::templates).unwrap_or_default();
    let was = OldTemplates::new(&old_templates, labels);
    let mut declared = Vec::new();
    let templates = head.templates();
    check_defaulted_job_labels(&templates, &old_templates, at, owner, labels)?;
    if old.is_none() && head.is_stateful_set() {
        check_claim_template_references(&templates, at, owner)?;
    }
    for template in &templates {
        let Some(value) = template.label(&labels.pod) else {
            continue;
        };
        let same = was.of(template);
        let unchanged = same.is_some_and(|same| same.keys.contains(&owner_keys(template, labels)));
        if unchanged {
            continue;
        }
        check(template, value, at, owner, labels)?;
        let before = same.map(|same| same.first);
        let uid_left_out = before.is_some_and(|before| {
            let (pod, uid, name) = owner_keys(before, labels);
            let (pod_now, uid_now, name_now) = owner_keys(template, labels);
            pod == pod_now && name == name_now && uid.is_some() && uid_now.is_none()
        });
        if !uid_left_out && let Some(uid) = template.label(&labels.uid).or(owner.uid) {
            declared.push(uid.to_string());
        }
        if !mutate {
            continue;
        }
        if value == REQUESTING_POD && template.annotation(&labels.pod_name).is_none() {
            patch.add_template_annotation(template, &labels.pod_name, owner.name);
        }
        if template.label(&labels.uid).is_none() {
            // A uid an update left out is put back as the template had it:
            // that one was judged when it was written, and the object's
            // record may name an earlier pod of the name, which would make
            // the answer refuse its own output.
            let left_out = before
                .filter(|_| uid_left_out)
                .and_then(|before| before.label(&labels.uid));
            let Some(uid) = left_out.or(owner.uid) else {
                return Err(Denial::TemplateUidUnknown {
                    at: at.clone(),
                    owner: owner.name.to_string(),
                    template: template.path.noun(),
                    field: template.path.field(),
                    key: labels.uid.clone(),
                });
            };
            patch.add_template_label(template, &labels.uid, uid);
        }
        if value == REQUESTING_POD {
            name_the_carrier(head, &templates, template.path, owner, labels, patch);
        }
    }
    declared.sort();
    declared.dedup();
    Ok(declared)
}

/// A StatefulSet's claim templates carry no Pod reference: its controller
/// copies a claim template's metadata whole (`getPersistentVolumeClaims`),
/// `ownerReferences` included, onto every claim, so a reference there
/// would give each claim an owner the requester check never saw (another
/// worker), or one the claims are refused or deleted for (a pod gone, a
/// kind the collector cannot resolve). Whether the template carries the
/// owner label or not: the claims are made either way. The references of
/// the other templates are never copied (pods and Jobs take only their
/// controller's, and the API server allows an ephemeral claim template no
/// metadata but labels and annotations), and what other kinds' claim
/// templates become is up to their own controllers.
///
/// Judged on CREATE only: the API server refuses any change to a
/// StatefulSet's claim templates after it, and the chart's match
/// conditions send an UPDATE only for what a rule refuses on UPDATE.
fn check_claim_template_references(
    templates: &[Template],
    at: &Subject,
    owner: TemplateOwner<'_>,
) -> Result<(), Denial> {
    let copied = templates.iter().find_map(|template| match template.path {
        TemplatePath::VolumeClaimTemplate(_) => {
            Some((template, template.meta.pod_reference.as_ref()?))
        }
        _ => None,
    });
    let Some((template, reference)) = copied else {
        return Ok(());
    };
    Err(Denial::TemplatePodReference {
        at: at.clone(),
        owner: owner.name.to_string(),
        template: template.path.noun(),
        field: template.path.field(),
        index: reference.index,
        api_version: reference.api_version.clone(),
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    })
}

/// A template's owner keys: the owner label, the uid label and the name
/// annotation of what is made from it.
fn owner_keys<'t>(template: &'t Template, labels: &OwnerLabels) -> OwnerKeys<'t> {
    (
        template.label(&labels.pod),
        template.label(&labels.uid),
        template.annotation(&labels.pod_name),
    )
}

/// A template's owner keys: its owner label, uid label and name
/// annotation.
type OwnerKeys<'t> = (Option<&'t str>, Option<&'t str>, Option<&'t str>);

/// The old object's templates, found as [`Template::is`] finds them but
/// by a map instead of a scan: an object may carry thousands of claim
/// templates, under one name or many, and a scan of the old ones for each
/// new one would make a review's time the square of that.
struct OldTemplates<'t> {
    /// Templates by their path.
    by_path: HashMap<TemplatePath, Same<'t>>,
    /// Templates of a list that have a key, by the list's kind (`None`: a
    /// StatefulSet's claim templates; a pod spec's ephemeral volumes) and
    /// the key.
    by_key: HashMap<(Option<PodSpecAt>, &'t str), Same<'t>>,
}

/// The old templates that one new template is: the first of them in
/// document order, and the owner keys any of them had.
struct Same<'t> {
    first: &'t Template,
    keys: HashSet<OwnerKeys<'t>>,
}

impl<'t> Same<'t> {
    /// `template` added to the templates of `key`.
    fn add<K: Eq + std::hash::Hash>(
        map: &mut HashMap<K, Self>,
        key: K,
        template: &'t Template,
        labels: &OwnerLabels,
    ) {
        map.entry(key)
            .or_insert_with(|| Same {
                first: template,
                keys: HashSet::new(),
            })
            .keys
            .insert(owner_keys(template, labels));
    }
}

impl<'t> OldTemplates<'t> {
    fn new(templates: &'t [Template], labels: &OwnerLabels) -> Self {
        let mut by_path = HashMap::new();
        let mut by_key = HashMap::new();
        for template in templates {
            Same::add(&mut by_path, template.path, template, labels);
            if let (Some(list), Some(key)) = (list_of(template.path), template.key.as_deref()) {
                Same::add(&mut by_key, (list, key), template, labels);
            }
        }
        Self { by_path, by_key }
    }

    /// The old templates that `template` is ([`Template::is`]). (One
    /// lifetime for both borrows: the map's keys borrow as long as the key
    /// looked up.)
    fn of<'a>(&'a self, template: &'a Template) -> Option<&'a Same<'t>> {
        match (list_of(template.path), template.key.as_deref()) {
            (Some(list), Some(key)) => self.by_key.get(&(list, key)),
            _ => self.by_path.get(&template.path),
        }
    }
}

/// The list a template keyed by name is in: `Some(None)` for a
/// StatefulSet's claim templates, `Some(Some(at))` for the ephemeral
/// volumes of the pod spec at `at`; `None` for a template that is no list
/// entry.
fn list_of(path: TemplatePath) -> Option<Option<PodSpecAt>> {
    match path {
        TemplatePath::VolumeClaimTemplate(_) => Some(None),
        TemplatePath::EphemeralVolume(at, _) => Some(Some(at)),
        _ => None,
    }
}

/// A template that carries the owner label must declare `owner`: by its
/// name, or `Self` whose annotation (if any) names it; with its uid if it
/// gives one.
fn check(
    template: &Template,
    value: &str,
    at: &Subject,
    owner: TemplateOwner<'_>,
    labels: &OwnerLabels,
) -> Result<(), Denial> {
    let mismatch = |template_owner: &str, what| Denial::TemplateOwnerMismatch {
        at: at.clone(),
        owner: owner.name.to_string(),
        template: template.path.noun(),
        field: template.path.field(),
        template_owner: template_owner.to_string(),
        what,
    };
    let annotated = template.annotation(&labels.pod_name);
    match (value == REQUESTING_POD, annotated) {
        (true, Some(name)) if name != owner.name => {
            return Err(mismatch(name, "in its owner-pod-name annotation"));
        }
        (false, _) if value != owner.name => {
            return Err(mismatch(value, "in its owner-pod label"));
        }
        // Beside the name, the annotation may only restate it.
        (false, Some(name)) if name != value => {
            return Err(mismatch(
                name,
                "in an owner-pod-name annotation beside another name",
            ));
        }
        _ => {}
    }
    match (template.label(&labels.uid), owner.uid) {
        (Some(uid), Some(owner_uid)) if uid != owner_uid => {
            Err(mismatch(owner.name, "with the uid label of another pod"))
        }
        _ => Ok(()),
    }
}

/// A CronJob's Job template without labels takes its pod template's
/// labels, and not its annotations, in the API server's batch/v1
/// defaulting of each Job the cronjob controller creates (without pod
/// identity): a pod template labelled `Self` would make Jobs that cannot
/// say which pod `Self` was. Refused up front (rule 12: one owner or a
/// denial up front), unless the templates are as the old object had them.
fn check_defaulted_job_labels(
    templates: &[Template],
    old_templates: &[Template],
    at: &Subject,
    owner: TemplateOwner<'_>,
    labels: &OwnerLabels,
) -> Result<(), Denial> {
    let find =
        |list: &'_ [Template], path| list.iter().find(|t: &&Template| t.path == path).cloned();
    let Some(pod) = find(templates, TemplatePath::JobTemplatePodTemplate) else {
        return Ok(());
    };
    if pod.label(&labels.pod) != Some(REQUESTING_POD) {
        return Ok(());
    }
    // The Job template's labels, none when absent or empty: the API
    // server gives the Jobs the pod template's either way.
    let job_labels = |list: &'_ [Template]| {
        find(list, TemplatePath::JobTemplate)
            .and_then(|job| job.meta.labels)
            .filter(|l| !l.is_empty())
    };
    let job_unlabelled = job_labels(templates).is_none();
    let unchanged = find(old_templates, TemplatePath::JobTemplatePodTemplate)
        .is_some_and(|before| before.label(&labels.pod) == Some(REQUESTING_POD))
        && job_labels(old_templates) == job_labels(templates);
    if job_unlabelled && !unchanged {
        return Err(Denial::SelfInDefaultedJobLabels {
            at: at.clone(),
            key: labels.pod.clone(),
            owner: owner.name.to_string(),
        });
    }
    Ok(())
}

/// The metadata whose annotations a controller copies, beside the labels of
/// the pod template at `path`, onto what it makes: the object's own for
/// `spec.template` (a Deployment's ReplicaSet, a StatefulSet's or
/// DaemonSet's ControllerRevision), the Job template's for
/// `spec.jobTemplate.spec.template` (the Job a CronJob makes, itself an
/// object with that template). When it is labelled by the name, it gets
/// the name annotation, so that `Self` in the template still names the
/// owner on what is made without pod identity.
fn name_the_carrier(
    head: &ObjectHead,
    templates: &[Template],
    path: TemplatePath,
    owner: TemplateOwner<'_>,
    labels: &OwnerLabels,
    patch: &mut MetadataPatch,
) {
    match path {
        TemplatePath::PodTemplate => {
            let meta = &head.metadata;
            let by_name = label(meta, &labels.pod).is_some_and(|v| v != REQUESTING_POD);
            if by_name && annotation(meta, &labels.pod_name).is_none() {
                patch.add_annotation(meta, &labels.pod_name, owner.name);
            }
        }
        TemplatePath::JobTemplatePodTemplate => {
            let job = templates
                .iter()
                .find(|t| t.path == TemplatePath::JobTemplate);
            if let Some(job) = job
                && job.label(&labels.pod).is_some_and(|v| v != REQUESTING_POD)
                && job.annotation(&labels.pod_name).is_none()
            {
                patch.add_template_annotation(job, &labels.pod_name, owner.name);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::admission::TemplateMeta;

    fn template() -> impl Strategy<Value = Template> {
        let at = prop_oneof![
            Just(PodSpecAt::Object),
            Just(PodSpecAt::PodTemplate),
            Just(PodSpecAt::JobTemplatePodTemplate),
        ];
        let path = prop_oneof![
            Just(TemplatePath::PodTemplate),
            Just(TemplatePath::JobTemplate),
            Just(TemplatePath::JobTemplatePodTemplate),
            Just(TemplatePath::ResourceClaimTemplate),
            (0..4usize).prop_map(TemplatePath::VolumeClaimTemplate),
            (at, 0..4usize).prop_map(|(at, i)| TemplatePath::EphemeralVolume(at, i)),
        ];
        let key = proptest::option::of(prop_oneof![Just("a"), Just("b"), Just("c")]);
        // The owner label (a name, `Self` or none) and the uid label.
        let owner = proptest::option::of(prop_oneof![Just("w-1"), Just("w-2"), Just("Self")]);
        let uid = proptest::option::of(prop_oneof![Just("u-1"), Just("u-2")]);
        (path, key, owner, uid).prop_map(|(path, key, owner, uid)| {
            let labels = OwnerLabels::default();
            let mut map = std::collections::BTreeMap::new();
            map.extend(owner.map(|v| (labels.pod.clone(), v.to_string())));
            map.extend(uid.map(|v| (labels.uid.clone(), v.to_string())));
            Template {
                path,
                meta: TemplateMeta {
                    labels: Some(map),
                    annotations: None,
                    pod_reference: None,
                },
                added_labels: Default::default(),
                key: key.map(str::to_string),
            }
        })
    }

    proptest! {
        /// The map finds what `Template::is` finds: the first old template
        /// a new one is, and whether any of them had its owner keys.
        #[test]
        fn old_templates_finds_what_is_finds(
            old in proptest::collection::vec(template(), 0..12),
            new in proptest::collection::vec(template(), 0..12),
        ) {
            let labels = OwnerLabels::default();
            let was = OldTemplates::new(&old, &labels);
            for template in &new {
                let same = was.of(template);
                let first = same.map(|same| same.first as *const Template);
                let scanned = old
                    .iter()
                    .find(|before| template.is(before))
                    .map(|t| t as *const Template);
                prop_assert_eq!(first, scanned, "{:?}", template);
                let unchanged = same
                    .is_some_and(|same| same.keys.contains(&owner_keys(template, &labels)));
                let any = old.iter().any(|before| {
                    template.is(before) && owner_keys(before, &labels) == owner_keys(template, &labels)
                });
                prop_assert_eq!(unchanged, any, "{:?}", template);
            }
        }
    }
}
