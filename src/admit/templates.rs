//! Pod templates: a Job's, a Deployment's, a CronJob's. A controller makes
//! pods (or Jobs) from them as itself, with no pod identity and only the
//! labels the template carries; a template that carries the owner label
//! must therefore carry the owner's uid too, or every pod made from it is
//! refused.

use std::collections::BTreeMap;

use crate::admission::{ObjectHead, TemplateMeta};
use crate::error::{Denial, Subject};
use crate::owner::Claim;
use crate::owner::resolve::{OwnerLabels, REQUESTING_POD};
use crate::patch::MetadataPatch;

use super::WebhookKind;

fn get<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map.as_ref()?.get(key).map(String::as_str)
}

/// Check that every template carrying the owner label names the object's
/// `owner`, and (on `/mutate`) complete it with the owner's uid label, and
/// with the name annotation where it says `Self`.
///
/// On an UPDATE (`old` given), a template whose owner keys are as they were
/// is left alone: a template of an object made before ownerguard lacks the
/// uid label, and patching it would restart a Deployment's pods or be
/// refused outright (a Job's template is immutable). A template that the
/// update labels anew, or whose uid label it leaves out, is completed.
///
/// # Errors
///
/// [`Denial::TemplateOwnerMismatch`]: a template that declares another
/// owner, or another uid: its pods would belong to another worker, or be
/// refused.
pub(super) fn complete(
    head: &ObjectHead,
    old: Option<&ObjectHead>,
    at: &Subject,
    owner: &Claim,
    labels: &OwnerLabels,
    webhook: WebhookKind,
    patch: &mut MetadataPatch,
) -> Result<(), Denial> {
    let mutate = webhook.mutates();
    let old_templates = old.map(ObjectHead::templates).unwrap_or_default();
    let owner_keys = |meta: &TemplateMeta| {
        (
            get(&meta.labels, &labels.pod).map(str::to_string),
            get(&meta.labels, &labels.uid).map(str::to_string),
            get(&meta.annotations, &labels.pod_name).map(str::to_string),
        )
    };
    for (path, meta) in head.templates() {
        let Some(value) = get(&meta.labels, &labels.pod) else {
            continue;
        };
        let unchanged = old_templates.iter().any(|(old_path, old_meta)| {
            *old_path == path && owner_keys(old_meta) == owner_keys(&meta)
        });
        if unchanged {
            continue;
        }
        let mismatch = |template_owner: &str, what| Denial::TemplateOwnerMismatch {
            at: at.clone(),
            owner: owner.name.clone(),
            field: path.field(),
            template_owner: template_owner.to_string(),
            what,
        };
        let annotated = get(&meta.annotations, &labels.pod_name);
        match (value == REQUESTING_POD, annotated) {
            (true, Some(name)) if name != owner.name => {
                return Err(mismatch(name, "in its owner-pod-name annotation"));
            }
            (true, Some(_)) => {}
            (true, None) => {
                if mutate {
                    patch.add_template_annotation(path, &meta, &labels.pod_name, &owner.name);
                }
            }
            (false, _) if value != owner.name => {
                return Err(mismatch(value, "in its owner-pod label"));
            }
            (false, Some(name)) => {
                return Err(mismatch(
                    name,
                    "in an owner-pod-name annotation without Self",
                ));
            }
            (false, None) => {}
        }
        match get(&meta.labels, &labels.uid) {
            Some(uid) if uid != owner.uid => {
                return Err(mismatch(&owner.name, "with the uid label of another pod"));
            }
            Some(_) => {}
            None => {
                if mutate {
                    patch.add_template_label(path, &labels.uid, &owner.uid);
                }
            }
        }
    }
    Ok(())
}
