//! The `admission.k8s.io` wire format: what the API server sends and what it
//! accepts back.
//!
//! kube-core has admission types, but they do not fit a webhook on the hot
//! path: they decode the whole object into a `DynamicObject` (measured here at
//! 20–26 % of the throughput of decoding the metadata alone), accept only
//! `v1`, and write `patch` as an array of numbers (kube-rs issue #1781) where
//! the API documents base64. These types decode only what the decision reads
//! and write exactly what kube-apiserver checks (see `APISERVER.md`).

mod error;

pub use error::DecodeError;

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::k8s::names::{is_core_v1, reads_as_any};

pub const ADMISSION_V1: &str = "admission.k8s.io/v1";
pub const ADMISSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// The `apiVersion` of a review; the answer is written in the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            Self::V1 => ADMISSION_V1,
            Self::V1beta1 => ADMISSION_V1BETA1,
        }
    }
}

/// An incoming `AdmissionReview`, as far as ownerguard reads it.
#[derive(Debug, Deserialize)]
struct ReviewEnvelope {
    #[serde(rename = "apiVersion", default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    request: Option<AdmissionRequest>,
}

/// A decoded review: its version and its request.
#[derive(Debug)]
pub struct Review {
    pub version: ReviewVersion,
    pub request: AdmissionRequest,
}

impl Review {
    /// Decode an `AdmissionReview` from JSON.
    ///
    /// A review with no `apiVersion` but `kind: AdmissionReview` is taken as
    /// `v1` (hand-written reviews often leave it out); a body that names
    /// neither is not a review.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the body is not JSON, not an `AdmissionReview`
    /// of a known version, or has no `request`.
    pub fn from_json(body: &[u8]) -> Result<Self, DecodeError> {
        // Only the fields the decision reads are decoded; serde_json skips
        // the rest without checking its text, so invalid UTF-8 there is
        // caught here, at the cost of one fast pass over the body.
        let text = std::str::from_utf8(body).map_err(DecodeError::Utf8)?;
        let envelope: ReviewEnvelope = serde_json::from_str(text).map_err(DecodeError::Json)?;
        Self::from_envelope(envelope)
    }

    /// Decode an `AdmissionReview` from an already parsed document (the
    /// `review` command reads YAML too).
    ///
    /// # Errors
    ///
    /// As [`Review::from_json`].
    pub fn from_value(value: serde_json::Value) -> Result<Self, DecodeError> {
        let envelope: ReviewEnvelope = serde_json::from_value(value).map_err(DecodeError::Json)?;
        Self::from_envelope(envelope)
    }

    fn from_envelope(envelope: ReviewEnvelope) -> Result<Self, DecodeError> {
        let version = match (envelope.api_version.as_deref(), envelope.kind.as_deref()) {
            (_, Some(kind)) if kind != "AdmissionReview" => {
                return Err(DecodeError::NotAReview(format!("kind '{kind}'")));
            }
            (Some(ADMISSION_V1), _) => ReviewVersion::V1,
            (Some(ADMISSION_V1BETA1), _) => ReviewVersion::V1beta1,
            (Some(other), _) => {
                return Err(DecodeError::NotAReview(format!("apiVersion '{other}'")));
            }
            (None, Some(_)) => ReviewVersion::V1,
            (None, None) => {
                return Err(DecodeError::NotAReview(
                    "neither apiVersion nor kind".to_string(),
                ));
            }
        };
        let request = envelope.request.ok_or(DecodeError::NoRequest)?;
        Ok(Self { version, request })
    }
}

/// `AdmissionRequest`: the fields the decision reads.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Fresh per call; echoed in the response. Not the object's uid.
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Absent for cluster-scoped objects.
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default, deserialize_with = "null_as_default")]
    pub user_info: UserInfo,
    #[serde(default)]
    pub object: Option<ObjectHead>,
    #[serde(default)]
    pub old_object: Option<ObjectHead>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Default, Serialize, PartialEq, Eq)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize, Default, Serialize, PartialEq, Eq)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

/// The operation under review. Anything else than the four the API server
/// knows is kept as it came, and allowed unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
    Other(String),
}

impl From<String> for Operation {
    fn from(value: String) -> Self {
        match value.as_str() {
            "CREATE" => Self::Create,
            "UPDATE" => Self::Update,
            "DELETE" => Self::Delete,
            "CONNECT" => Self::Connect,
            _ => Self::Other(value),
        }
    }
}

impl Operation {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
            Self::Other(other) => other,
        }
    }
}

impl Default for Operation {
    fn default() -> Self {
        Self::Other(String::new())
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The key under which a pod-bound service-account token names its pod.
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
/// The key under which a pod-bound service-account token gives its pod's uid.
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// The head of an object: enough to decide, nothing of its spec.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectHead {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    /// Only the templates of the spec (rule 12), when it has any.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<SpecHead>,
}

impl ObjectHead {
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
        .filter_map(|(path, raw)| Template::new(path, raw?, BTreeMap::new()))
        .collect();

        // A StatefulSet's claims take the selector's labels over the
        // template's (statefulset controller, getPersistentVolumeClaims).
        let selector = spec
            .selector
            .as_ref()
            .and_then(|s| strings(&s.match_labels))
            .flatten()
            .unwrap_or_default();
        for (index, claim) in spec.volume_claim_templates.iter().flatten().enumerate() {
            let raw = claim.as_ref().and_then(|c| c.metadata.as_ref());
            templates.extend(raw.and_then(|raw| {
                Template::new(
                    TemplatePath::VolumeClaimTemplate(index),
                    raw,
                    selector.clone(),
                )
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
                    Template::new(
                        TemplatePath::EphemeralVolume(at, index),
                        raw,
                        BTreeMap::new(),
                    )
                }));
            }
        }

        if self.is_resource_claim_template() {
            templates.extend(spec.metadata.as_ref().and_then(|raw| {
                Template::new(TemplatePath::ResourceClaimTemplate, raw, BTreeMap::new())
            }));
        }
        templates
    }

    /// A DRA ResourceClaimTemplate (`resource.k8s.io`, any version): only
    /// there is `spec.metadata` a template; elsewhere it means anything.
    fn is_resource_claim_template(&self) -> bool {
        self.kind.as_deref() == Some("ResourceClaimTemplate")
            && self
                .api_version
                .as_deref()
                .and_then(|v| v.split_once('/'))
                .is_some_and(|(group, _)| group == "resource.k8s.io")
    }
}

/// A template of the object: metadata a controller stamps on what it
/// makes from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub path: TemplatePath,
    /// Its own labels and annotations, as written.
    pub meta: TemplateMeta,
    /// Labels the controller sets on what it makes besides the template's
    /// own, over them: a StatefulSet's `spec.selector.matchLabels`.
    pub added_labels: BTreeMap<String, String>,
}

impl Template {
    fn new(
        path: TemplatePath,
        raw: &RawTemplateMeta,
        added_labels: BTreeMap<String, String>,
    ) -> Option<Self> {
        Some(Self {
            path,
            meta: TemplateMeta::from_raw(raw)?,
            added_labels,
        })
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodSpecAt {
    /// `spec` (a Pod)
    Object,
    /// `spec.template.spec`
    PodTemplate,
    /// `spec.jobTemplate.spec.template.spec`
    JobTemplatePodTemplate,
}

impl PodSpecAt {
    fn tokens(self) -> &'static [&'static str] {
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
pub struct SpecHead {
    #[serde(default, deserialize_with = "lenient")]
    pub template: Option<TemplateHead>,
    #[serde(default, deserialize_with = "lenient")]
    pub job_template: Option<JobTemplateHead>,
    #[serde(default, deserialize_with = "lenient_list")]
    pub volume_claim_templates: Option<Vec<Option<MetadataHead>>>,
    /// A pod's own volumes.
    #[serde(default, deserialize_with = "lenient_list")]
    pub volumes: Option<Vec<Option<VolumeHead>>>,
    #[serde(default, deserialize_with = "lenient")]
    pub selector: Option<SelectorHead>,
    /// A ResourceClaimTemplate's claim metadata (read for that kind only).
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
}

/// A `PodTemplateSpec`, or anything else called `template`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct TemplateHead {
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<PodSpecHead>,
}

/// A CronJob's `JobTemplateSpec`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct JobTemplateHead {
    #[serde(default, deserialize_with = "lenient")]
    pub metadata: Option<RawTemplateMeta>,
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<JobSpecHead>,
}

/// The spec of a CronJob's Job template: its pod template.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct JobSpecHead {
    #[serde(default, deserialize_with = "lenient")]
    pub template: Option<TemplateHead>,
}

/// A pod spec: its volumes.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct PodSpecHead {
    #[serde(default, deserialize_with = "lenient_list")]
    pub volumes: Option<Vec<Option<VolumeHead>>>,
}

/// A volume: its generic ephemeral source.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct VolumeHead {
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
    match_labels: Option<serde_json::Value>,
}

/// A template's labels and annotations as they came, of any shape.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct RawTemplateMeta {
    #[serde(default)]
    labels: Option<serde_json::Value>,
    #[serde(default)]
    annotations: Option<serde_json::Value>,
}

/// The labels and annotations of a template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateMeta {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
}

impl TemplateMeta {
    /// `None` when the labels or annotations are there but not maps of
    /// strings: then it is not a template.
    fn from_raw(raw: &RawTemplateMeta) -> Option<Self> {
        Some(Self {
            labels: strings(&raw.labels)?,
            annotations: strings(&raw.annotations)?,
        })
    }
}

/// A map of strings: `Some(None)` when absent (or null), `None` when it is
/// there but of another shape.
fn strings(value: &Option<serde_json::Value>) -> Option<Option<BTreeMap<String, String>>> {
    match value {
        None => Some(None),
        Some(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect::<Option<BTreeMap<_, _>>>()
            .map(Some),
        Some(_) => None,
    }
}

/// A field read only when it is a JSON object; anything else (a custom
/// resource may have a `spec.template` of another shape, or a `spec` that
/// is not an object) reads as absent. The value is never buffered: a map is
/// decoded as it streams by, anything else is skipped.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }

        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }

    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}

/// A field read only when it is a JSON list, each entry as [`lenient`]
/// reads it: an entry of another shape is a hole, so that the indices stay
/// those of the list as sent. Anything else reads as absent. Nothing is
/// buffered.
fn lenient_list<'de, D, T>(deserializer: D) -> Result<Option<Vec<Option<T>>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    /// One entry, read by [`lenient`].
    struct Entry<T>(Option<T>);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entry<T> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            lenient(deserializer).map(Entry)
        }
    }

    struct Visitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Option<Vec<Option<T>>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::new();
            while let Some(Entry(entry)) = seq.next_element::<Entry<T>>()? {
                entries.push(entry);
            }
            Ok(Some(entries))
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }

        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }

    deserializer.deserialize_any(Visitor(std::marker::PhantomData))
}

/// `null` read as the type's default: hand-written reviews use it for
/// "absent", and the answer is the same.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub generate_name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    /// `None` and `{}` differ for a patch: the first needs the map created.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Kept in order: a patch addresses entries by index.
    #[serde(default)]
    pub owner_references: Option<Vec<OwnerReference>>,
}

/// An `ownerReference` as the client wrote it. Mutating webhooks run before
/// the API server validates the object, so every field may be missing.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

impl OwnerReference {
    /// Whether this reference is a core/v1 Pod reference as the garbage
    /// collector resolves one: kind exactly `Pod`, apiVersion `v1` (or
    /// `/v1`, which the collector parses as `v1`: [`is_core_v1`]). The
    /// only form it resolves to a pod.
    pub fn is_pod(&self) -> bool {
        is_core_v1(&self.api_version) && self.kind == "Pod"
    }

    /// Whether this reference means a pod: its kind reads as `Pod` or
    /// `Pods` to a person, in any case, with invisible characters or
    /// Unicode confusables ([`reads_as_any`]: `pod`, `POD`, `Pod\u{200b}`,
    /// Cyrillic `Роd`...), or it is not ASCII at all. Whatever its
    /// apiVersion: those that are not exactly [`Self::is_pod`] are
    /// references the collector cannot resolve, and so never deletes the
    /// object by (SPEC §3 rules 6 and 15). Only the kind is read: any
    /// apiVersion beside a pod-like kind but the collector's `v1` is
    /// already a reference it cannot resolve, so an apiVersion a person
    /// reads as `v1` (`V1`, `v１`) needs no rule of its own.
    ///
    /// Every kind outside ASCII counts: no API serves one (a built-in
    /// kind is ASCII, and the API server takes a CustomResourceDefinition
    /// only when its kind, lowercased, is a DNS-1035 label), so such a
    /// reference never resolves, whatever a person reads in it. Reading
    /// alone is a list in disguise: the skeleton of UTS #39 leaves small
    /// capitals (`ᴘᴏᴅ`), modifier, circled and negative-squared letters
    /// (`ᴾᵒᵈ`, `ⓟⓞⓓ`, `🅟🅞🅓`) as they are. The chart's CEL sends every
    /// such kind for the same reason.
    pub fn means_pod(&self) -> bool {
        !self.kind.is_ascii() || reads_as_any(&self.kind, &["pod", "pods"])
    }
}

/// The answer, before it is written in the review's version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    pub status: Option<Status>,
    /// The JSON Patch document (an array), written base64 on the wire.
    pub patch: Option<Vec<u8>>,
    pub audit_annotations: BTreeMap<String, String>,
    pub warnings: Vec<String>,
}

/// `metav1.Status` of a denial (or of an allowed answer worth a message).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    pub status: &'static str,
    pub message: String,
    pub reason: &'static str,
    pub code: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

impl AdmissionResponse {
    /// The response `AdmissionReview` in `version`, as JSON bytes.
    ///
    /// The patch goes base64 with `patchType: JSONPatch`, as the API
    /// documents and the API server decodes it.
    pub fn to_review_json(&self, version: ReviewVersion) -> Vec<u8> {
        let patch = self
            .patch
            .as_ref()
            .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
        let review = WireReview {
            api_version: version.api_version(),
            kind: "AdmissionReview",
            response: WireResponse {
                uid: &self.uid,
                allowed: self.allowed,
                status: self.status.as_ref(),
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
                audit_annotations: &self.audit_annotations,
                warnings: &self.warnings,
            },
        };
        // Serialising plain strings, maps and bools cannot fail.
        serde_json::to_vec(&review).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_without_api_version_but_with_kind_is_v1() {
        let review = Review::from_json(
            br#"{"kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE"}}"#,
        )
        .unwrap();
        assert_eq!(review.version, ReviewVersion::V1);
    }

    #[test]
    fn review_v1beta1_keeps_its_version() {
        let review = Review::from_json(
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE"}}"#,
        )
        .unwrap();
        assert_eq!(review.version, ReviewVersion::V1beta1);
        assert_eq!(review.request.operation, Operation::Delete);
    }

    #[test]
    fn body_of_another_kind_is_not_a_review() {
        let err =
            Review::from_json(br#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#).unwrap_err();
        assert!(matches!(err, DecodeError::NotAReview(_)), "{err:?}");
    }

    #[test]
    fn unknown_admission_version_is_not_a_review() {
        let err = Review::from_json(
            br#"{"apiVersion":"admission.k8s.io/v2","request":{"operation":"CREATE"}}"#,
        )
        .unwrap_err();
        assert!(matches!(err, DecodeError::NotAReview(_)), "{err:?}");
    }

    #[test]
    fn review_without_request_is_refused() {
        let err =
            Review::from_json(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
                .unwrap_err();
        assert!(matches!(err, DecodeError::NoRequest), "{err:?}");
    }

    #[test]
    fn invalid_text_in_fields_not_read_is_still_malformed() {
        let invalid_utf8 = b"{\"kind\":\"AdmissionReview\",\"request\":{\"operation\":\"CREATE\",\"object\":{\"spec\":\"\xff\"}}}";
        assert!(matches!(
            Review::from_json(invalid_utf8),
            Err(DecodeError::Utf8(_))
        ));
        let control = b"{\"kind\":\"AdmissionReview\",\"request\":{\"operation\":\"CREATE\",\"object\":{\"spec\":\"\x01\"}}}";
        assert!(matches!(
            Review::from_json(control),
            Err(DecodeError::Json(_))
        ));
        let lone_surrogate = br#"{"kind":"AdmissionReview","request":{"operation":"CREATE","object":{"data":"\ud800"}}}"#;
        // The one leniency, deliberate: a lone surrogate escape in a field
        // ownerguard does not read is not checked (serde_json skips it
        // undecoded). Checking it means decoding the whole object, the cost
        // this module avoids; the API server's Go encoder never writes one.
        assert!(Review::from_json(lone_surrogate).is_ok());
    }

    #[test]
    fn malformed_json_is_a_json_error() {
        let err = Review::from_json(b"{\"apiVersion\":").unwrap_err();
        assert!(matches!(err, DecodeError::Json(_)), "{err:?}");
    }

    #[test]
    fn null_metadata_user_info_and_extra_read_as_absent() {
        let review = Review::from_json(
            br#"{"kind":"AdmissionReview","request":{"operation":"UPDATE","userInfo":{"extra":null},"object":{"metadata":null},"oldObject":null}}"#,
        )
        .unwrap();
        assert!(review.request.object.unwrap().metadata.labels.is_none());
        assert!(review.request.old_object.is_none());
    }

    #[test]
    fn templates_of_another_shape_are_not_pod_templates() {
        let head = |spec: &str| -> ObjectHead {
            serde_json::from_str(&format!(r#"{{"metadata": {{}}, "spec": {spec}}}"#)).unwrap()
        };
        for spec in [
            r#""a string""#,
            r#"{"template": 3}"#,
            r#"{"template": {"metadata": "x"}}"#,
            r#"{"template": {"metadata": {"labels": {"replicas": 3}}}}"#,
            r#"{"template": {"metadata": {"labels": {"a": "b"}, "annotations": ["x"]}}}"#,
            r#"{"jobTemplate": [1, 2]}"#,
            r#"{"volumeClaimTemplates": {"metadata": {"labels": {"a": "b"}}}}"#,
            r#"{"volumeClaimTemplates": [3, "x", {"metadata": {"labels": [1]}}]}"#,
            r#"{"volumes": [{"ephemeral": "x"}, {"ephemeral": {"volumeClaimTemplate": 3}}]}"#,
            r#"{"template": {"spec": {"volumes": {"ephemeral": {}}}}}"#,
            r#"{"metadata": {"labels": {"a": "b"}}}"#,
        ] {
            assert!(head(spec).templates().is_empty(), "{spec}");
        }
        let templates = head(r#"{"template": {"metadata": {"labels": {"a": "b"}}}}"#).templates();
        assert_eq!(templates.len(), 1);
        assert_eq!(templates[0].path, TemplatePath::PodTemplate);
    }

    #[test]
    fn list_templates_keep_the_indices_of_the_list_as_sent() {
        let head: ObjectHead = serde_json::from_value(serde_json::json!({
            "metadata": {},
            "spec": {
                "selector": {"matchLabels": {"app": "db", "o/p": "w-1"}},
                "volumeClaimTemplates": [
                    null,
                    {"metadata": {"name": "data", "labels": {"app": "x"}}},
                    {"metadata": {"name": "logs"}},
                ],
                "template": {"spec": {"volumes": [
                    {"name": "a", "emptyDir": {}},
                    {"name": "b", "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": {"o/p": "w-1"}}}}},
                ]}},
            },
        }))
        .unwrap();
        let templates = head.templates();
        let paths: Vec<String> = templates.iter().map(|t| t.path.field()).collect();
        assert_eq!(
            paths,
            [
                "spec.volumeClaimTemplates[1]",
                "spec.volumeClaimTemplates[2]",
                "spec.template.spec.volumes[1].ephemeral.volumeClaimTemplate",
            ]
        );
        // A StatefulSet's claims take the selector's labels over the
        // template's own.
        assert_eq!(templates[0].label("app"), Some("db"));
        assert_eq!(templates[1].label("o/p"), Some("w-1"));
        assert_eq!(templates[1].meta.labels, None);
        assert_eq!(
            templates[2].path.metadata_tokens(),
            [
                "spec",
                "template",
                "spec",
                "volumes",
                "1",
                "ephemeral",
                "volumeClaimTemplate",
                "metadata"
            ]
        );
    }

    #[test]
    fn spec_metadata_is_a_template_of_a_resource_claim_template_only() {
        let object = |api_version: &str, kind: &str| -> ObjectHead {
            serde_json::from_value(serde_json::json!({
                "apiVersion": api_version, "kind": kind, "metadata": {},
                "spec": {"metadata": {"labels": {"a": "b"}}, "spec": {"devices": {}}},
            }))
            .unwrap()
        };
        let templates = object("resource.k8s.io/v1", "ResourceClaimTemplate").templates();
        assert_eq!(templates.len(), 1);
        assert_eq!(templates[0].path, TemplatePath::ResourceClaimTemplate);
        assert_eq!(templates[0].path.metadata_tokens(), ["spec", "metadata"]);
        assert!(
            object("example.com/v1", "ResourceClaimTemplate")
                .templates()
                .is_empty()
        );
        assert!(
            object("resource.k8s.io/v1", "ResourceClaim")
                .templates()
                .is_empty()
        );
    }

    #[test]
    fn patch_is_written_base64_with_its_type() {
        let response = AdmissionResponse {
            uid: "abc".into(),
            allowed: true,
            patch: Some(br#"[{"op":"add","path":"/a","value":1}]"#.to_vec()),
            ..Default::default()
        };
        let json: serde_json::Value =
            serde_json::from_slice(&response.to_review_json(ReviewVersion::V1)).unwrap();
        assert_eq!(json["apiVersion"], ADMISSION_V1);
        assert_eq!(json["kind"], "AdmissionReview");
        assert_eq!(json["response"]["uid"], "abc");
        assert_eq!(json["response"]["patchType"], "JSONPatch");
        let patch = json["response"]["patch"]
            .as_str()
            .expect("patch is a string");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        assert_eq!(decoded, br#"[{"op":"add","path":"/a","value":1}]"#);
    }

    #[test]
    fn unpatched_answer_has_no_patch_fields() {
        let response = AdmissionResponse {
            uid: "u".into(),
            allowed: true,
            ..Default::default()
        };
        let json: serde_json::Value =
            serde_json::from_slice(&response.to_review_json(ReviewVersion::V1beta1)).unwrap();
        assert!(json["response"].get("patch").is_none());
        assert!(json["response"].get("patchType").is_none());
        assert_eq!(json["apiVersion"], ADMISSION_V1BETA1);
    }
}
