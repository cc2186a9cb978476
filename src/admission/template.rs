//! The templates of an object (SPEC §3 rule 12): where they are, and the
//! metadata a controller copies from each.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::Text;
use super::lenient::{Shaped, first_lenient_entry, lenient, lenient_list, strings};

/// A template of the object: metadata a controller stamps on what it
/// makes from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub path: TemplatePath,
    /// Its own labels and annotations, as written.
    pub meta: TemplateMeta,
    /// Labels the controller sets on what it makes besides the template's
    /// own, over them: a StatefulSet's `spec.selector.matchLabels`, shared
    /// by all its claim templates (a copy each would make the memory of a
    /// review the product of two of its lists' lengths).
    pub added_labels: Arc<BTreeMap<String, String>>,
    /// What names a template of a list, whatever its index: the volume's
    /// name for an ephemeral volume's claim template, the claim template's
    /// own name for a StatefulSet's. An update that inserts a volume in
    /// front shifts the indices, not the templates.
    pub key: Option<String>,
}

impl Template {
    pub(super) fn new(
        path: TemplatePath,
        raw: &RawTemplateMeta,
        added_labels: Arc<BTreeMap<String, String>>,
    ) -> Option<Self> {
        Some(Self {
            path,
            meta: TemplateMeta::from_raw(raw)?,
            added_labels,
            key: None,
        })
    }

    /// This template, named by `key` in its list.
    pub(super) fn keyed(mut self, key: Option<String>) -> Self {
        self.key = key;
        self
    }

    /// Whether `other` (of the old object) is this template: the same
    /// path, or for a template of a list, the same kind of list and the
    /// same key.
    pub fn is(&self, other: &Template) -> bool {
        match (self.path, other.path) {
            (TemplatePath::EphemeralVolume(at, _), TemplatePath::EphemeralVolume(was, _))
                if self.key.is_some() =>
            {
                at == was && self.key == other.key
            }
            (TemplatePath::VolumeClaimTemplate(_), TemplatePath::VolumeClaimTemplate(_))
                if self.key.is_some() =>
            {
                self.key == other.key
            }
            (path, was) => path == was,
        }
    }

    /// Label `key` of what is made from the template.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.added_labels
            .get(key)
            .or_else(|| self.meta.labels.as_ref()?.get(key))
            .map(String::as_str)
    }

    /// Annotation `key` of what is made from the template.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.meta.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

/// Where a template's metadata is in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TemplatePath {
    /// `spec.template`
    PodTemplate,
    /// `spec.jobTemplate`
    JobTemplate,
    /// `spec.jobTemplate.spec.template`
    JobTemplatePodTemplate,
    /// `spec.volumeClaimTemplates[i]`
    VolumeClaimTemplate(usize),
    /// `volumes[i].ephemeral.volumeClaimTemplate` of a pod spec
    EphemeralVolume(PodSpecAt, usize),
    /// A ResourceClaimTemplate's `spec` (its metadata is `spec.metadata`)
    ResourceClaimTemplate,
}

/// Which pod spec of the object holds an ephemeral volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodSpecAt {
    /// `spec` (a Pod)
    Object,
    /// `spec.template.spec`
    PodTemplate,
    /// `spec.jobTemplate.spec.template.spec`
    JobTemplatePodTemplate,
}

impl PodSpecAt {
    pub(super) fn tokens(self) -> &'static [&'static str] {
        match self {
            Self::Object => &["spec"],
            Self::PodTemplate => &["spec", "template", "spec"],
            Self::JobTemplatePodTemplate => &["spec", "jobTemplate", "spec", "template", "spec"],
        }
    }
}

impl TemplatePath {
    /// The JSON pointer tokens of the template itself; its metadata is
    /// under `metadata`.
    pub fn tokens(self) -> Vec<String> {
        let fixed = |tokens: &[&str]| tokens.iter().map(|t| t.to_string()).collect();
        match self {
            Self::PodTemplate => fixed(&["spec", "template"]),
            Self::JobTemplate => fixed(&["spec", "jobTemplate"]),
            Self::JobTemplatePodTemplate => fixed(&["spec", "jobTemplate", "spec", "template"]),
            Self::VolumeClaimTemplate(index) => {
                vec![
                    "spec".into(),
                    "volumeClaimTemplates".into(),
                    index.to_string(),
                ]
            }
            Self::EphemeralVolume(at, index) => {
                let mut tokens: Vec<String> = fixed(at.tokens());
                tokens.extend([
                    "volumes".to_string(),
                    index.to_string(),
                    "ephemeral".into(),
                    "volumeClaimTemplate".into(),
                ]);
                tokens
            }
            Self::ResourceClaimTemplate => fixed(&["spec"]),
        }
    }

    /// The JSON pointer tokens of the template's `metadata`.
    pub fn metadata_tokens(self) -> Vec<String> {
        let mut tokens = self.tokens();
        tokens.push("metadata".into());
        tokens
    }

    /// The field path, for messages: `spec.volumeClaimTemplates[0]`.
    pub fn field(self) -> String {
        let mut field = String::new();
        for token in self.tokens() {
            if token.bytes().all(|b| b.is_ascii_digit()) {
                field.push_str(&format!("[{token}]"));
            } else {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(&token);
            }
        }
        field
    }

    /// What the template makes, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::PodTemplate | Self::JobTemplatePodTemplate => "pod template",
            Self::JobTemplate => "Job template",
            Self::VolumeClaimTemplate(_) | Self::EphemeralVolume(..) => "claim template",
            Self::ResourceClaimTemplate => "ResourceClaim template",
        }
    }
}

/// The part of a `spec` that holds templates; every other field is
/// skipped undecoded.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SpecHead<'a> {
    #[serde(default, borrow, deserialize_with = "lenient")]
    pub template: Option<TemplateHead<'a>>,
    #[serde(default, borrow, deserialize_with = "lenient")]
    pub job_template: Option<JobTemplateHead<'a>>,
    #[serde(default, deserialize_with = "lenient_list")]
    pub volume_claim_templates: Option<Vec<Option<MetadataHead>>>,
    /// A pod's own volumes.
    #[serde(default, borrow, deserialize_with = "lenient_list")]
    pub volumes: Option<Vec<Option<VolumeHead<'a>>>>,
    #[serde(default, deserialize_with = "lenient")]
    pub selector: Option<SelectorHead>,
    /// A ResourceClaimTemplate's claim metadata (read for that kind only).
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
}

/// A `PodTemplateSpec`, or anything else called `template`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct TemplateHead<'a> {
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
    #[serde(default, borrow, deserialize_with = "lenient")]
    pub spec: Option<PodSpecHead<'a>>,
}

/// A CronJob's `JobTemplateSpec`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct JobTemplateHead<'a> {
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
    #[serde(default, borrow, deserialize_with = "lenient")]
    pub spec: Option<JobSpecHead<'a>>,
}

/// The spec of a CronJob's Job template: its pod template.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct JobSpecHead<'a> {
    #[serde(default, borrow, deserialize_with = "lenient")]
    pub template: Option<TemplateHead<'a>>,
}

/// A pod spec: its volumes.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct PodSpecHead<'a> {
    #[serde(default, borrow, deserialize_with = "lenient_list")]
    pub volumes: Option<Vec<Option<VolumeHead<'a>>>>,
}

/// A volume: its name (borrowed from the body: every volume of a pod has
/// one, and only a volume with a claim template keeps it) and generic
/// ephemeral source.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct VolumeHead<'a> {
    #[serde(default, borrow)]
    pub name: Option<Shaped<Text<'a>>>,
    #[serde(default, deserialize_with = "lenient")]
    pub ephemeral: Option<EphemeralHead>,
}

/// A generic ephemeral volume: its claim template.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralHead {
    #[serde(default, deserialize_with = "lenient")]
    pub volume_claim_template: Option<MetadataHead>,
}

/// Anything with `metadata`: a claim template.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct MetadataHead {
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
}

/// A label selector: its `matchLabels`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SelectorHead {
    #[serde(default)]
    pub(super) match_labels: Option<Shaped<BTreeMap<String, String>>>,
}

/// A template's labels and annotations as they came, of any shape.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct RawTemplateMeta {
    #[serde(default)]
    pub(super) name: Option<Shaped<String>>,
    #[serde(default)]
    pub(super) labels: Option<Shaped<BTreeMap<String, String>>>,
    #[serde(default)]
    pub(super) annotations: Option<Shaped<BTreeMap<String, String>>>,
    /// The first entry of its `ownerReferences` that means a pod: the
    /// statefulset controller copies a claim template's whole metadata,
    /// references included, onto every claim it makes.
    #[serde(default, rename = "ownerReferences")]
    pub(super) pod_reference: FirstPodReference,
}

/// The labels and annotations of a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateMeta {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    /// The first of its `ownerReferences` that means a pod, if any.
    pub pod_reference: Option<TemplateReference>,
}

impl TemplateMeta {
    /// `None` when the labels or annotations are there but not maps of
    /// strings: then it is not a template.
    pub(super) fn from_raw(raw: &RawTemplateMeta) -> Option<Self> {
        Some(Self {
            labels: strings(&raw.labels)?,
            annotations: strings(&raw.annotations)?,
            pod_reference: raw.pod_reference.0.clone(),
        })
    }
}

/// An entry of a template's `ownerReferences` that means a pod
/// ([`OwnerReference::means_pod`]): where it is and what it says, for the
/// message that refuses it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateReference {
    pub index: usize,
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

/// A template's `ownerReferences`, read only for the first entry that
/// means a pod ([`first_lenient_entry`]: no list of references, however
/// long, is kept).
#[derive(Debug, Clone, Default)]
pub(super) struct FirstPodReference(Option<TemplateReference>);

/// An entry of `ownerReferences`, as lenient as the rest of a template: a
/// field of another shape reads as absent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReferenceEntry {
    #[serde(default)]
    api_version: Option<Shaped<String>>,
    #[serde(default)]
    kind: Option<Shaped<String>>,
    #[serde(default)]
    name: Option<Shaped<String>>,
}

impl<'de> Deserialize<'de> for FirstPodReference {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = |v: Option<Shaped<String>>| v.and_then(|v| v.0).unwrap_or_default();
        first_lenient_entry(deserializer, |index, entry: ReferenceEntry| {
            let reference = TemplateReference {
                index,
                api_version: text(entry.api_version),
                kind: text(entry.kind),
                name: text(entry.name),
            };
            reference.means_pod().then_some(reference)
        })
        .map(FirstPodReference)
    }
}

impl TemplateReference {
    /// Whether it means a pod, read as an object's own reference is.
    pub fn means_pod(&self) -> bool {
        use std::borrow::Cow;
        super::OwnerReference {
            api_version: super::Text(Cow::Borrowed(&self.api_version)),
            kind: super::Text(Cow::Borrowed(&self.kind)),
            ..Default::default()
        }
        .means_pod()
    }
}
