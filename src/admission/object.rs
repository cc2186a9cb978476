//! The object of a review, as far as ownership goes: its metadata, its
//! `ownerReferences`, and where its templates are.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::Text;
#[cfg(doc)]
use super::lenient::MAX_TEMPLATE_VOLUMES;
use super::lenient::{
    MAX_LIST_ENTRIES, MAX_REFERENCES, Shaped, capped_references, lenient, null_as_default, strings,
};
use super::template::{PodSpecAt, SpecHead, Template, TemplateHead, TemplatePath};
use crate::k8s::names::{is_core_v1, readings, reads_as_one_of};

/// The labels a template's objects take from no selector: one empty map
/// shared, so that an object without claim templates allocates none.
fn no_selector() -> Arc<BTreeMap<String, String>> {
    static EMPTY: std::sync::LazyLock<Arc<BTreeMap<String, String>>> =
        std::sync::LazyLock::new(Arc::default);
    EMPTY.clone()
}

/// The head of an object: enough to decide, nothing of its spec.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectHead<'a> {
    #[serde(default, borrow)]
    pub api_version: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub kind: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta<'a>,
    /// Only the templates of the spec (rule 12), when it has any. Boxed:
    /// most of a head's size, moved with it at every level of decoding.
    #[serde(default, borrow, deserialize_with = "lenient")]
    pub spec: Option<Box<SpecHead<'a>>>,
}

impl ObjectHead<'_> {
    /// `metadata.ownerReferences` and its bound, when the object holds
    /// more references than ownerguard keeps ([`MAX_REFERENCES`]): the
    /// review is refused, since what is past the bound was not kept, so
    /// not judged.
    pub fn overlong_references(&self) -> Option<(&'static str, usize)> {
        let references = self.metadata.owner_references.as_ref().map_or(0, Vec::len);
        (references > MAX_REFERENCES).then_some(("metadata.ownerReferences", MAX_REFERENCES))
    }

    /// The first list of volumes or claim templates that was cut at
    /// [`MAX_LIST_ENTRIES`] (more entries than ownerguard keeps): what is
    /// past the cut would go unjudged.
    pub fn cut_volumes(&self) -> Option<&'static str> {
        let spec = self.spec.as_ref()?;
        let [template, job] = self.template_volume_lists();
        [
            ("spec.volumes", spec.volumes.as_ref().map(Vec::len)),
            (
                "spec.volumeClaimTemplates",
                spec.volume_claim_templates.as_ref().map(Vec::len),
            ),
            ("spec.template.spec.volumes", template),
            ("spec.jobTemplate.spec.template.spec.volumes", job),
        ]
        .into_iter()
        .find(|(_, len)| len.is_some_and(|len| len > MAX_LIST_ENTRIES))
        .map(|(field, _)| field)
    }

    /// How many volumes each pod template gives the pods made from it,
    /// with the field it is read from: `spec.template`'s volumes with a
    /// StatefulSet's claim templates (each becomes a volume of every pod),
    /// and `spec.jobTemplate.spec.template`'s. Bounded by
    /// [`MAX_TEMPLATE_VOLUMES`] where a person writes the template, so that
    /// the pods a controller makes from it, with what admission adds to
    /// them, stay under [`MAX_LIST_ENTRIES`].
    pub fn template_volumes(&self) -> [(&'static str, usize); 2] {
        let [template, job] = self.template_volume_lists();
        let claims = self
            .spec
            .as_ref()
            .and_then(|s| s.volume_claim_templates.as_ref())
            .map_or(0, Vec::len);
        [
            (
                "spec.template.spec.volumes with spec.volumeClaimTemplates",
                template.unwrap_or(0) + claims,
            ),
            (
                "spec.jobTemplate.spec.template.spec.volumes",
                job.unwrap_or(0),
            ),
        ]
    }

    /// The lengths of the volume lists of `spec.template` and of
    /// `spec.jobTemplate.spec.template`.
    fn template_volume_lists(&self) -> [Option<usize>; 2] {
        let Some(spec) = self.spec.as_ref() else {
            return [None, None];
        };
        let volumes_of = |t: Option<&TemplateHead>| {
            t.and_then(|t| t.spec.as_ref())
                .and_then(|s| s.volumes.as_ref())
                .map(Vec::len)
        };
        let pod_of_job = spec
            .job_template
            .as_ref()
            .and_then(|j| j.spec.as_ref())
            .and_then(|s| s.template.as_ref());
        [volumes_of(spec.template.as_ref()), volumes_of(pod_of_job)]
    }

    /// Every template the object carries (SPEC §3 rule 12), with where it
    /// is, in document order:
    ///
    /// - pod templates: `spec.template` (Jobs, Deployments, ReplicaSets,
    ///   StatefulSets, DaemonSets, and any resource of that shape), a
    ///   CronJob's `spec.jobTemplate` (the Jobs it makes) and
    ///   `spec.jobTemplate.spec.template` (their pods);
    /// - claim templates: `spec.volumeClaimTemplates[i]` (a StatefulSet's,
    ///   whose claims also take `spec.selector.matchLabels`), and every
    ///   generic ephemeral volume's `volumes[i].ephemeral.volumeClaimTemplate`
    ///   of the pod spec (`spec`, `spec.template.spec`,
    ///   `spec.jobTemplate.spec.template.spec`);
    /// - a `resource.k8s.io` ResourceClaimTemplate's `spec.metadata`: the
    ///   resource-claim controller stamps it on the ResourceClaim it makes
    ///   for each pod that names the template.
    ///
    /// A template whose labels or annotations are not maps of strings, or
    /// that has no `metadata`, is not one (a custom resource of another
    /// shape): it is left alone, never patched. Indices are those of the
    /// lists as sent, holes (an entry of another shape) included, so that
    /// a patch addresses the right entry.
    pub fn templates(&self) -> Vec<Template> {
        let Some(spec) = &self.spec else {
            return Vec::new();
        };
        let pod = spec.template.as_ref();
        let job = spec.job_template.as_ref();
        let pod_of_job = job
            .and_then(|j| j.spec.as_ref())
            .and_then(|s| s.template.as_ref());
        let mut templates: Vec<Template> = [
            (
                TemplatePath::PodTemplate,
                pod.and_then(|t| t.metadata.as_ref()),
            ),
            (
                TemplatePath::JobTemplate,
                job.and_then(|j| j.metadata.as_ref()),
            ),
            (
                TemplatePath::JobTemplatePodTemplate,
                pod_of_job.and_then(|t| t.metadata.as_ref()),
            ),
        ]
        .into_iter()
        .filter_map(|(path, raw)| Template::new(path, raw?, no_selector()))
        .collect();

        // A StatefulSet's claims take the selector's labels over the
        // template's (statefulset controller, getPersistentVolumeClaims).
        // Built only for an object with claim templates (most have none).
        let claims = spec.volume_claim_templates.as_deref().unwrap_or_default();
        let selector: Arc<BTreeMap<String, String>> = if claims.is_empty() {
            no_selector()
        } else {
            Arc::new(
                spec.selector
                    .as_ref()
                    .and_then(|s| strings(&s.match_labels))
                    .flatten()
                    .unwrap_or_default(),
            )
        };
        let text = |v: &Option<Shaped<String>>| v.as_ref().and_then(Shaped::to_text);
        for (index, claim) in claims.iter().enumerate() {
            let raw = claim.as_ref().and_then(|c| c.metadata.as_ref());
            templates.extend(raw.and_then(|raw| {
                Template::new(
                    TemplatePath::VolumeClaimTemplate(index),
                    raw,
                    selector.clone(),
                )
                .map(|t| t.keyed(text(&raw.name)))
            }));
        }

        let pod_specs = [
            (PodSpecAt::Object, spec.volumes.as_ref()),
            (
                PodSpecAt::PodTemplate,
                pod.and_then(|t| t.spec.as_ref())
                    .and_then(|s| s.volumes.as_ref()),
            ),
            (
                PodSpecAt::JobTemplatePodTemplate,
                pod_of_job
                    .and_then(|t| t.spec.as_ref())
                    .and_then(|s| s.volumes.as_ref()),
            ),
        ];
        for (at, volumes) in pod_specs {
            for (index, volume) in volumes.into_iter().flatten().enumerate() {
                let raw = volume
                    .as_ref()
                    .and_then(|v| v.ephemeral.as_ref())
                    .and_then(|e| e.volume_claim_template.as_ref())
                    .and_then(|t| t.metadata.as_ref());
                templates.extend(raw.and_then(|raw| {
                    let template = Template::new(
                        TemplatePath::EphemeralVolume(at, index),
                        raw,
                        no_selector(),
                    )?;
                    // The volume's name is copied only for a template: most
                    // volumes have none.
                    let name = volume.as_ref().and_then(|v| v.name.as_ref()?.to_text());
                    Some(template.keyed(name))
                }));
            }
        }

        if self.is_resource_claim_template() {
            templates.extend(spec.metadata.as_ref().and_then(|raw| {
                Template::new(TemplatePath::ResourceClaimTemplate, raw, no_selector())
            }));
        }
        templates
    }

    /// An `apps` StatefulSet (any version): the kind whose controller
    /// copies its claim templates' metadata whole onto the claims.
    pub fn is_stateful_set(&self) -> bool {
        self.is_kind_of_group("StatefulSet", "apps")
    }

    /// A DRA ResourceClaimTemplate (`resource.k8s.io`, any version): only
    /// there is `spec.metadata` a template; elsewhere it means anything.
    fn is_resource_claim_template(&self) -> bool {
        self.is_kind_of_group("ResourceClaimTemplate", "resource.k8s.io")
    }

    /// Whether the object is a `kind` of API group `group`, any version.
    fn is_kind_of_group(&self, kind: &str, group: &str) -> bool {
        self.kind.as_deref() == Some(kind)
            && self
                .api_version
                .as_deref()
                .and_then(|v| v.split_once('/'))
                .is_some_and(|(in_group, _)| in_group == group)
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta<'a> {
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
    /// What an UPDATE was written against (see `decide::update`'s stale
    /// writes).
    #[serde(default, borrow)]
    pub resource_version: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub generate_name: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub namespace: Option<Text<'a>>,
    /// `None` and `{}` differ for a patch: the first needs the map created.
    #[serde(default, borrow)]
    pub labels: Option<BTreeMap<Text<'a>, Text<'a>>>,
    #[serde(default, borrow)]
    pub annotations: Option<BTreeMap<Text<'a>, Text<'a>>>,
    /// Kept in order: a patch addresses entries by index. At most one
    /// over [`MAX_REFERENCES`] (then the review is refused).
    #[serde(default, borrow, deserialize_with = "capped_references")]
    pub owner_references: Option<Vec<OwnerReference<'a>>>,
}

/// An `ownerReference` as the client wrote it. Mutating webhooks run before
/// the API server validates the object, so every field may be missing.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference<'a> {
    #[serde(default, borrow)]
    pub api_version: Text<'a>,
    #[serde(default, borrow)]
    pub kind: Text<'a>,
    #[serde(default, borrow)]
    pub name: Text<'a>,
    #[serde(default, borrow)]
    pub uid: Text<'a>,
    #[serde(default)]
    pub controller: Option<bool>,
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

impl OwnerReference<'_> {
    /// Whether this reference is a core/v1 Pod reference as the garbage
    /// collector resolves one: kind exactly `Pod`, apiVersion `v1` (or
    /// `/v1`, which the collector parses as `v1`: [`is_core_v1`]). The
    /// only form it resolves to a pod.
    pub fn is_pod(&self) -> bool {
        is_core_v1(&self.api_version) && self.kind == "Pod"
    }

    /// Whether this reference means a pod: its kind reads as `Pod` or
    /// `Pods` to a person, in any case, with invisible characters or
    /// Unicode confusables ([`crate::k8s::names::reads_as`]: `pod`, `POD`, `Pod\u{200b}`,
    /// Cyrillic `Роd`...), or it is not ASCII at all. Whatever its
    /// apiVersion: those that are not exactly [`Self::is_pod`] are
    /// references the collector cannot resolve, and so never deletes the
    /// object by (SPEC §3 rules 6 and 15). Only the kind is read: any
    /// apiVersion beside a pod-like kind but the collector's `v1` is
    /// already a reference it cannot resolve, so an apiVersion a person
    /// reads as `v1` (`V1`, `v１`) needs no rule of its own.
    ///
    /// Every kind outside ASCII counts that no API can serve: a built-in
    /// kind is ASCII, and the API server takes a CustomResourceDefinition
    /// only when its kind, lowercased by Go's `strings.ToLower`, is a
    /// DNS-1035 label, so such a reference never resolves, whatever a
    /// person reads in it. Go lowercases two letters outside ASCII into it
    /// (the Kelvin sign to `k`, `İ` to `i`), so a custom resource may be a
    /// `WorKer` with a Kelvin sign: that kind is served and is not a pod.
    /// Reading alone is a list in disguise: the skeleton of UTS #39 leaves
    /// small capitals (`ᴘᴏᴅ`), modifier, circled and negative-squared
    /// letters (`ᴾᵒᵈ`, `ⓟⓞⓓ`, `🅟🅞🅓`) as they are. The chart's CEL sends
    /// every kind outside ASCII, a superset.
    pub fn means_pod(&self) -> bool {
        // Read once for every reference of every review: an object may
        // carry thousands of references, each read on several passes.
        static POD: std::sync::LazyLock<Vec<String>> =
            std::sync::LazyLock::new(|| readings(&["pod", "pods"]));
        reads_as_one_of(&self.kind, &POD) || (!self.kind.is_ascii() && !servable_kind(&self.kind))
    }
}

/// Whether the API server would serve a custom resource of `kind`: its Go
/// lowercase (`strings.ToLower`, a simple case mapping) is a DNS-1035
/// label, as `ValidateCustomResourceDefinitionNames` requires.
fn servable_kind(kind: &str) -> bool {
    let lowered: String = kind
        .chars()
        .map(|c| match c {
            // Go's unicode.ToLower maps İ to a plain i (the simple mapping);
            // Rust's full mapping would add a combining dot.
            '\u{130}' => 'i',
            c => {
                let mut lower = c.to_lowercase();
                match (lower.next(), lower.next()) {
                    (Some(l), None) => l,
                    _ => c,
                }
            }
        })
        .collect();
    crate::k8s::names::is_dns1035_label(&lowered)
}

#[cfg(test)]
mod tests {
    use super::OwnerReference;

    fn means_pod(kind: &str) -> bool {
        OwnerReference {
            kind: kind.into(),
            ..OwnerReference::default()
        }
        .means_pod()
    }

    #[test]
    fn a_kind_outside_ascii_means_a_pod_unless_a_custom_resource_can_have_it() {
        for kind in ["Pod", "pods", "Ｐｏｄ", "Роd", "ᴘᴏᴅ", "ⓟⓞⓓ", "Wörker"] {
            assert!(means_pod(kind), "{kind}");
        }
        // Go lowercases the Kelvin sign to k and İ to i: the API server
        // takes these kinds for a CustomResourceDefinition, and serves them.
        for kind in ["Wor\u{212a}er", "\u{130}ngress", "Job", "ReplicaSet"] {
            assert!(!means_pod(kind), "{kind}");
        }
    }
}
